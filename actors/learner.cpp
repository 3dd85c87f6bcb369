#include "actors/learner.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "actors/dp_learner.hpp"
#include "actors/learner_common.hpp"
#include "actors/metrics.hpp"
#include "actors/state_io.hpp"
#include "base/checksum.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"

namespace diloco {

namespace {

using self_ptr = learner_actor::stateful_pointer<learner_state>;

const run_config& cfg(self_ptr self) {
  return self->state.env->config;
}
const fragment& frag_of(self_ptr self, uint32_t p) {
  DILOCO_CHECK(p < self->state.env->plan.fragments.size(), "learner: a fragment index in range");
  return self->state.env->plan.fragments[p];
}

bool adaptive(self_ptr self) {
  return self->state.env->config.period_auto.enabled;
}

uint64_t completed_steps(self_ptr self) {
  return static_cast<uint64_t>(self->state.trainer->steps_done());
}

// The schedule step now: the shared clock's (time since the epoch over the nominal step), or
// this learner's own completed steps.
uint64_t schedule_step(self_ptr self) {
  const auto& st = self->state;
  if (!st.global_clock) return completed_steps(self);
  DILOCO_CHECK(st.step_ns > 0, "learner: a shared clock without a step length");
  const int64_t t = now_ns(self) - st.epoch_ns;
  return t <= 0 ? 0 : static_cast<uint64_t>(t / st.step_ns);
}

// The step's duration in simulated time: nominal x slowdown x mean-one lognormal jitter.
int64_t draw_step_ns(self_ptr self) {
  const speed_config& sp = cfg(self).speed_of(self->state.id);
  return to_ns(sp.step_time_s * draw_speed_factor(sp, self->state.speed_rng));
}

// Decodes `blob` into st.decoded (the fragment's size); decode checks shape, checksum and
// finiteness.
status decode_checked(learner_state& st, const tensor_blob& blob, size_t size) {
  return decode(blob.view(), fspan(st.decoded.data(), size));
}

void send_pull(self_ptr self, uint32_t p) {
  auto& st = self->state;
  pull_msg msg{st.out.make_stamp(now_ns(self)), st.id, p};
  post_to(self, route_of(st, p), std::move(msg));
}

void end_process(self_ptr self, learner_state::phase why);

// The name of the tensor that holds parameter `offset` (floats into the buffer), and the
// element within it.
std::string tensor_at(const param_layout& layout, size_t offset) {
  for (const auto& t : layout.tensors()) {
    if (offset >= t.offset && offset < t.offset + t.size())
      return t.name + "[" + std::to_string(offset - t.offset) + "]";
  }
  return "padding at " + std::to_string(offset);
}

// The metrics actor hears of a learner that stops contributing: it alerts, and the run's exit
// code says so.
void report_failure(self_ptr self, const std::string& what) {
  auto& st = self->state;
  const uint64_t step = st.trainer ? completed_steps(self) : 0;
  spdlog::error("learner {}: {} at step {}; it stops contributing", st.id, what, step);
  diverged_msg msg{st.out.make_stamp(now_ns(self)), st.id, step, what};
  post(self, direct(st.env->ids.metrics(), st.dir->metrics), std::move(msg));
}

// The learner's numerics broke (NaN or Inf) or its computation failed: whatever it would send
// now poisons the merge. It stops contributing: its process ends as after a failure (the
// shards count it out), and the metrics actor is told.
void diverge(self_ptr self, const std::string& what) {
  report_failure(self, what);
  end_process(self, learner_state::phase::down);
}

// Where the first non-finite value of fragment p's parameters is ("" when all are finite).
std::string first_non_finite_tensor(self_ptr self, uint32_t p) {
  auto& st = self->state;
  std::string where;
  const fragment& f = frag_of(self, p);
  const float* params = st.trainer->spans_to_read(f.spans).data();
  f.for_each_span(
      [&](float* theta, size_t, size_t count) {
        if (!where.empty()) return;
        const size_t bad = first_non_finite(cfspan(theta, count));
        if (bad != count) {
          const auto offset = static_cast<size_t>(theta - params) + bad;
          where = tensor_at(st.env->model->layout(), offset);
        }
      },
      const_cast<float*>(params));  // only read
  return where;
}

// Sends fragment p's outer gradient; false if it is not finite (the learner has diverged).
bool send_delta(self_ptr self, uint32_t p, bool final, uint64_t step) {
  auto& st = self->state;
  auto& fs = st.frags[p];
  const fragment& f = frag_of(self, p);
  // delta = reference - theta, and the reference moves to theta, in one pass: the next delta
  // measures the work from here, so a reply that comes late never makes work count twice.
  // With error feedback the delta goes straight into the residual (p = d + e); without, into
  // the scratch that decodes replies (free between them).
  const codec_config& uplink = cfg(self).uplink;
  float* ref = fs.reference.data();
  float* acc = uplink.error_feedback ? fs.residual.data() : st.decoded.data();
  const bool add = uplink.error_feedback;
  DILOCO_CHECK(
      fs.reference.size() >= f.size && (add ? fs.residual.size() : st.decoded.size()) >= f.size,
      "learner: a delta's buffers are smaller than its fragment");
  f.for_each_span(
      [&](float* theta, size_t at, size_t count) {
        for (size_t i = 0; i < count; ++i) {
          const float d = ref[at + i] - theta[i];
          acc[at + i] = add ? acc[at + i] + d : d;
          ref[at + i] = theta[i];
        }
      },
      const_cast<float*>(st.trainer->spans_to_read(f.spans).data()));  // theta is only read
  const status encoded = add ? encode_accumulated(uplink, fspan(acc, f.size), st.blob)
                             : encode(uplink, cfspan(acc, f.size), fspan(), st.blob);
  if (!encoded.ok()) {
    const std::string where = first_non_finite_tensor(self, p);
    diverge(self, "outer gradient of fragment " + std::to_string(p) + " is not finite (" +
                      encoded.message() + ")" +
                      (where.empty() ? "" : "; first non-finite parameter: " + where));
    return false;
  }

  outer_gradient_msg msg;
  msg.st = st.out.make_stamp(now_ns(self));
  msg.fragment = p;
  msg.learner = st.id;
  msg.base_version = fs.version;
  msg.tokens = fs.tokens;
  msg.steps = fs.steps;
  msg.send_step = step;
  msg.step_time_ns = static_cast<int64_t>(st.step_time_ns_ema);
  msg.deadline_ns =
      st.global_clock
          ? st.epoch_ns + static_cast<int64_t>(step + st.schedule.overlap_steps) * st.step_ns
          : now_ns(self) + static_cast<int64_t>(st.schedule.overlap_steps * st.step_time_ns_ema);
  msg.final = final;
  msg.delta = tensor_blob(st.blob);
  if (adaptive(self)) msg.overlap_steps = st.schedule.overlap_steps;
  const uint64_t bytes = msg.delta.size() + message_overhead_bytes;
  if (adaptive(self)) {
    fs.sends.push_back(sent_record{step, msg.st.sent_at_ns, bytes});
    while (fs.sends.size() > 8) fs.sends.pop_front();
  }
  post_to(self, route_of(st, p), std::move(msg), bytes);

  fs.tokens = 0;
  fs.steps = 0;
  // on_update drops answered sends with upper_bound: the list must stay in order.
  DILOCO_CHECK(fs.unanswered.empty() || fs.unanswered.back() <= step,
               "learner: a fragment's sends go at non-decreasing schedule steps");
  if (!fs.awaiting) fs.awaiting_since = step;
  fs.awaiting = true;
  fs.sent_step = step;
  fs.unanswered.push_back(step);
  return true;
}

// theta_p = alpha * theta_p + (1 - alpha) * Theta_p over fragment f of `params`, with the
// global fragment `g`; the reference, if any, becomes Theta_p. At alpha 0 (the default, and a
// rejoin's adoption) theta_p becomes Theta_p as it is: the local values are not read, so a
// learner whose parameters live on a device need not copy them to the host first
// (spans_to_overwrite).
void blend_global(const fragment& f, float alpha, const float* g, float* params, float* ref) {
  f.for_each_span(
      [&](float* theta, size_t at, size_t count) {
        if (alpha == 0.0f) {
          std::memcpy(theta, g + at, count * sizeof(float));
        } else {
          for (size_t i = 0; i < count; ++i)
            theta[i] = alpha * theta[i] + (1.0f - alpha) * g[at + i];
        }
        if (ref != nullptr) std::memcpy(ref + at, g + at, count * sizeof(float));
      },
      params);
}

// Whether the boundary at schedule step `done` merges fragment p's reply (resume()).
bool merges_at(const fragment_sync& fs, uint64_t done) {
  return fs.reply_ready && done >= fs.merge_at_step;
}

void merge_global(self_ptr self, uint32_t p, bool adopt) {
  auto& st = self->state;
  auto& fs = st.frags[p];
  DILOCO_CHECK(adopt || fs.reply_ready, "learner: a merge mixes a reply that has come");
  const auto alpha = static_cast<float>(adopt ? 0.0 : cfg(self).alpha);
  DILOCO_CHECK(alpha >= 0.0f && alpha <= 1.0f, "learner: alpha was validated in [0, 1]");
  const fragment& f = frag_of(self, p);
  float_buffer& params =
      alpha == 0.0f ? st.trainer->spans_to_overwrite(f.spans) : st.trainer->spans_to_write(f.spans);
  blend_global(f, alpha, fs.global.data(), params.data(), fs.reference.data());
  // The counters say how much work the next delta carries. It is measured from the global
  // value mixed in, so of the steps taken since the send (all the counters hold: the send reset
  // them) it carries the share alpha of the local model kept: all of them at alpha 1, none at
  // alpha 0 or when the global model is adopted outright.
  fs.tokens = static_cast<uint64_t>(
      std::llround(static_cast<double>(alpha) * static_cast<double>(fs.tokens)));
  fs.steps = static_cast<uint64_t>(
      std::llround(static_cast<double>(alpha) * static_cast<double>(fs.steps)));
  fs.reply_ready = false;
}

void report_progress(self_ptr self) {
  const auto& meter = self->state.meter;
  if (meter.steps == 0 && meter.idle_ns == 0) return;
  const auto& sched = self->state.schedule;
  if (adaptive(self)) {
    send_progress(self, 0, sched.period_steps, sched.overlap_steps);
  } else {
    send_progress(self);
  }
}

// Adaptive inner steps: a reply to the newest send of fragment p is one measured round of its
// links (the shard said how long the send took to reach it); every P rounds the scheduler
// hears what they show.
void measure_round(self_ptr self, const fragment_update_msg& msg, int64_t previous_ns,
                   uint64_t version_before) {
  auto& st = self->state;
  const uint32_t p = msg.fragment;
  auto& sends = st.frags[p].sends;
  if (msg.full || msg.uplink_ns <= 0) return;
  // The send the reply answers (the shard answers a learner's sends in order).
  while (!sends.empty() && sends.front().step < msg.reply_to_step) sends.pop_front();
  if (sends.empty() || sends.front().step != msg.reply_to_step) return;
  const uint64_t sent_bytes = sends.front().bytes;
  sends.pop_front();
  const double scale = st.env->payload_scale;
  const link_sample s = round_sample(
      msg, st.env->shard_of[p], now_ns(self), previous_ns,
      static_cast<uint64_t>(static_cast<double>(sent_bytes) * scale),
      static_cast<uint64_t>(static_cast<double>(wire_bytes(msg)) * scale), version_before);
  const link_estimate e = keep_round(st.pace_samples, s, st.env->shard_of, st.dir->shards.size());
  if (!e.ok) return;
  pace_msg m;
  m.st = st.out.make_stamp(now_ns(self));
  m.learner = st.id;
  m.change = st.schedule.change;
  m.step_ns = st.global_clock ? st.step_ns : static_cast<int64_t>(st.step_time_ns_ema);
  fill_pace(m, e);
  if (m.step_ns <= 0) return;
  post(self, direct(st.env->ids.scheduler(), st.dir->scheduler), std::move(m));
}

// How long a restarting learner waits for its fragments before asking again.
int64_t pull_retry_ns(self_ptr self) {
  return answer_wait_ns(cfg(self));
}

void schedule_tick(self_ptr self, int64_t delay_ns);

void schedule_tick(self_ptr self, int64_t delay_ns) {
  DILOCO_CHECK(delay_ns >= 0, "learner: a step timer is not set in the past");
  auto& st = self->state;
  ++st.tick_seq;
  set_timer(self, st.out, delay_ns, step_tick{st.tick_seq});
}

// Asks the computation to start the step the next boundary will start (at schedule step
// `next`) from the parameters as that boundary's merges will leave them: those of the replies
// in so far (resume()). A hint: the step is the same bits whether the guess holds or not.
void step_ahead(self_ptr self, int64_t next) {
  auto& st = self->state;
  DILOCO_CHECK(next >= 0 && st.env->virtual_time, "learner: a step ahead is a simulated step");
  st.ahead_step = next;
  const auto done = static_cast<uint64_t>(next);
  const bool merging = std::any_of(st.frags.begin(), st.frags.end(),
                                   [done](const auto& fs) { return merges_at(fs, done); });
  if (!merging) {
    st.trainer->compute_ahead(cfg(self).inner, next);
    return;
  }
  const auto alpha = static_cast<float>(cfg(self).alpha);
  st.trainer->compute_ahead_after(cfg(self).inner, next, [self, done, alpha](float_buffer& params) {
    const auto& frags = self->state.frags;
    for (uint32_t p = 0; p < frags.size(); ++p) {
      if (!merges_at(frags[p], done)) continue;
      blend_global(frag_of(self, p), alpha, frags[p].global.data(), params.data(), nullptr);
    }
  });
}

// One inner step, then the timer for the boundary at its end.
void run_step(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.now == learner_state::phase::running, "learner: a step only while running");
  st.ahead_step = -1;
  const int64_t t0 = now_ns(self);
  const auto lr_step =
      static_cast<int64_t>(st.global_clock ? schedule_step(self) : completed_steps(self));
  auto stepped = st.trainer->step(cfg(self).inner, lr_step);
  if (!stepped) {
    diverge(self, "the training step failed: " + stepped.error().message());
    return;
  }
  const step_stats s = *stepped;
  if (const auto& dbg = cfg(self).debug;
      dbg.nondeterministic_learner == static_cast<int64_t>(st.id) &&
      static_cast<int64_t>(completed_steps(self)) == dbg.nondeterministic_step) {
    // Deliberately not a function of (config, seed): what `diloco replay` must catch.
    std::random_device entropy;
    // Large enough to survive the uplink's quantization (its error feedback would carry a tiny
    // one, but a short run may end first).
    st.trainer->params()[0] += 0.5f + 1e-3f * static_cast<float>(entropy() % 1000);
  }
  if (const auto& dbg = cfg(self).debug;
      dbg.nonfinite_learner == static_cast<int64_t>(st.id) &&
      static_cast<int64_t>(completed_steps(self)) == dbg.nonfinite_step) {
    // Fault injection: a weight of the second layer becomes NaN, as after an overflow.
    const auto& t = st.env->model->layout().at(1);
    st.trainer->params()[t.offset + t.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  }
  if (!std::isfinite(s.loss)) {
    diverge(self, std::string("the training loss is ") + (std::isnan(s.loss) ? "NaN" : "Inf"));
    return;
  }
  for (auto& fs : st.frags) {
    fs.tokens += s.tokens;
    fs.steps += s.steps;
  }
  st.last_loss = s.loss;
  if (st.measure_merge) {
    st.measure_merge = false;
    st.meter.add_gap((s.loss - st.loss_before_merge) / st.loss_before_merge);
  }
  int64_t duration = 0;
  int64_t extra = 0;
  if (st.env->virtual_time) {
    // Fewer working chips (elastic, after a failure) take longer for the same batch.
    duration =
        static_cast<int64_t>(static_cast<double>(draw_step_ns(self)) / std::max(st.capacity, 1e-3));
  } else {
    // Real time: the step took what it took; a configured slowdown is emulated by waiting.
    duration = std::max<int64_t>(1, now_ns(self) - t0);
    const double factor =
        static_cast<double>(draw_step_ns(self)) / to_ns(cfg(self).speed_of(st.id).step_time_s);
    extra = static_cast<int64_t>(static_cast<double>(duration) * std::max(0.0, factor - 1.0));
  }
  DILOCO_CHECK(duration >= 0 && extra >= 0, "learner: a step takes no negative time");
  st.busy_ns += duration + extra;
  st.meter.step_started(duration + extra,
                        static_cast<double>(cfg(self).chips_of(st.id)) * st.capacity);
  st.meter.add_step(s.tokens, s.loss);
  const double d = static_cast<double>(duration + extra);
  st.step_time_ns_ema = ema(st.step_time_ns_ema, d);
  if (completed_steps(self) % static_cast<uint64_t>(cfg(self).progress_every_steps) == 0) {
    report_progress(self);
  }
  schedule_tick(self, st.env->virtual_time ? duration : extra);
  // The next step will likely start when this one ends, with the state it leaves and the
  // merges of the replies already in that are due then (unless anything else changes it
  // first): a computation with threads starts it now.
  if (st.env->virtual_time) {
    const auto next_lr_step =
        st.global_clock
            ? static_cast<int64_t>(std::max<int64_t>(0, now_ns(self) + duration - st.epoch_ns) /
                                   st.step_ns)
            : static_cast<int64_t>(completed_steps(self));
    step_ahead(self, next_lr_step);
  }
}

// After a boundary's sends, or when a waited-for reply arrives: merge replies whose time has
// come, then either wait (synchronous DiLoCo only) or start the next step.
void resume(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.now == learner_state::phase::running, "learner: only a running process resumes");
  const uint64_t done = schedule_step(self);
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    auto& fs = st.frags[p];
    if (merges_at(fs, done)) {
      merge_global(self, p, false);
      if (st.last_loss > 0 && !st.measure_merge) {
        st.measure_merge = true;
        st.loss_before_merge = st.last_loss;
      }
    }
  }
  if (cfg(self).mode == run_mode::sync_diloco) {
    for (const auto& fs : st.frags) {
      if (fs.awaiting && done >= fs.sent_step + st.schedule.overlap_steps) {
        st.now = learner_state::phase::waiting;
        st.wait_since_ns = now_ns(self);
        return;
      }
    }
  }
  // An elastic rescale pauses computing; the boundary's sends are done, the step waits.
  if (const int64_t now = now_ns(self); now < st.paused_until_ns) {
    schedule_tick(self, st.paused_until_ns - now);
    return;
  }
  run_step(self);
}

// The boundary at the end of a step: send every fragment that is due, then go on.
void boundary(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.now == learner_state::phase::running, "learner: a boundary while not running");
  const uint64_t now = schedule_step(self);
  DILOCO_CHECK(now >= st.last_step, "learner: the schedule step went backwards");
  // A change of H staged: the old schedule's sends up to its step (or up to now, if it came
  // after it), the new one's from there.
  fragment_schedule before;
  uint64_t switched_at = st.last_step;
  const bool switching = st.schedule.has_next && now >= st.schedule.next_from;
  if (switching) {
    before = st.schedule;
    switched_at = std::max(st.schedule.next_from, st.last_step);
    st.schedule.switch_at(switched_at);
    spdlog::debug("learner {}: H {} from step {} (change {})", st.id, st.schedule.period_steps,
                  switched_at, st.schedule.change);
  }
  auto due = [&](uint32_t p) -> uint64_t {
    if (switching) {
      if (const uint64_t k = before.due_step(p, st.last_step, switched_at); k > 0) return k;
    }
    return st.schedule.due_step(p, switched_at, now);
  };
  // Backpressure: at most this many unanswered deltas per fragment (0: no limit).
  const auto cap = static_cast<size_t>(cfg(self).max_unanswered_deltas);
  // Only simulated links that lose messages may lose a pull's answer.
  const bool lossy =
      st.env->virtual_time && (cfg(self).link.drop_rate > 0 || !cfg(self).partitions.empty());
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    // While its shard is down the fragment's work accumulates; it goes with the next send.
    if (st.shard_down[route_of(st, p)]) continue;
    auto& fs = st.frags[p];
    const bool full = cap > 0 && fs.unanswered.size() >= cap;
    if (const uint64_t k = due(p); k > 0) {
      // The shard's duplicate filter drops a send at a step it has seen from this learner.
      DILOCO_CHECK(k > fs.sent_step, "learner: a fragment's regular sends go at rising steps");
      if (full) {
        ++st.deltas_held;  // its work goes with the next send there is room for
      } else if (!send_delta(self, p, false, k)) {
        return;  // diverged: the process has ended
      }
    }
    // Two periods without the reply: it (or the delta) was lost, or the shard is slow. Fetch
    // the whole fragment, once: a slow shard is not flooded with pulls. On lossy links another
    // pull goes after eight periods.
    if ((fs.awaiting || full) &&
        now > fs.awaiting_since + resync_after_periods * st.schedule.period_steps &&
        (fs.pull_since == 0 ||
         (lossy && now + 1 > fs.pull_since + repull_after_periods * st.schedule.period_steps))) {
      fs.awaiting = false;
      fs.awaiting_since = now;
      fs.pull_since = now + 1;
      ++st.resyncs;
      send_pull(self, p);
    }
  }
  st.last_step = now;
  resume(self);
}

void start_running(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.now == learner_state::phase::joining || st.now == learner_state::phase::pulling,
               "learner: only a joining or pulling process starts running");
  st.now = learner_state::phase::running;
  st.last_step = schedule_step(self);  // nothing falls due for the time before we ran
  spdlog::debug("learner {} (incarnation {}) running from step {}", st.id, st.incarnation,
                completed_steps(self));
  schedule_tick(self, 0);
}

// Every fragment of a rejoining process has arrived whole: train from the global model.
void finish_pull(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.now == learner_state::phase::pulling && st.pulls_outstanding == 0,
               "learner: a pull finished with fragments still on the way");
  const uint64_t resume = st.global_clock ? schedule_step(self) : st.resume_step;
  if (auto s = st.trainer->restart(
          static_cast<int64_t>(resume),
          derive_seed(cfg(self).seed, "learner.restart", (uint64_t{st.id} << 32) | st.incarnation));
      !s.ok()) {
    diverge(self, "its restart failed: " + s.message());
    return;
  }
  for (uint32_t q = 0; q < st.frags.size(); ++q) {
    DILOCO_CHECK(st.frags[q].pulled, "learner: a rejoin adopts only fragments that were pulled");
    merge_global(self, q, true);
  }
  std::string versions;
  for (const auto& f : st.frags)
    versions += (versions.empty() ? "" : ", ") + std::to_string(f.version);
  // A deployed restart is rare and worth a line; simulated ones are many.
  spdlog::log(st.env->virtual_time ? spdlog::level::debug : spdlog::level::info,
              "learner {}: process {} rejoined from the global model at versions [{}]", st.id,
              st.incarnation, versions);
  start_running(self);
}

// A fragment update's values into the learner's copy of the global fragment. False when they
// are not taken: a malformed, older, repeated or undecodable update (counted), or one with
// versions missing in between (the whole fragment is asked for instead).
bool take_update(self_ptr self, const fragment_update_msg& msg) {
  auto& st = self->state;
  const uint32_t p = msg.fragment;
  if (p >= st.frags.size() || msg.to_version < msg.from_version ||
      (msg.full ? msg.blobs.size() != 1 : msg.blobs.size() != msg.to_version - msg.from_version)) {
    ++st.rejected;
    spdlog::warn(
        "learner {}: rejected malformed fragment update (fragment {}, versions {}..{}, {} blobs)",
        st.id, p, msg.from_version, msg.to_version, msg.blobs.size());
    return false;
  }
  auto& fs = st.frags[p];
  const size_t n = frag_of(self, p).size;
  DILOCO_CHECK(fs.global.size() == n, "learner: a global copy of another size than its fragment");
  const bool pulling = st.now == learner_state::phase::pulling;
  // A shard's versions only grow and its link keeps order: an older one means it went back.
  if (msg.to_version < fs.version && !pulling) {
    ++st.version_regressions;
    spdlog::error("learner {}: fragment {} went back from version {} to {}", st.id, p, fs.version,
                  msg.to_version);
    return false;
  }
  if (!msg.full && msg.reply_to_step > 0 && msg.reply_to_step <= fs.last_reply_step &&
      msg.to_version <= fs.version) {
    ++st.duplicate_updates;  // the same reply twice (a lossy link repeated it)
    return false;
  }
  if (msg.full) {
    if (auto s = decode_checked(st, msg.blobs[0], n); !s.ok()) {
      ++st.rejected;
      spdlog::warn("learner {}: rejected full fragment {}: {}", st.id, p, s.to_string());
      return false;
    }
    std::memcpy(fs.global.data(), st.decoded.data(), n * sizeof(float));
    fs.version = msg.to_version;
  } else {
    if (msg.from_version > fs.version) {
      send_pull(self, p);  // versions are missing in between: ask for the whole fragment
      return false;
    }
    for (uint64_t v = fs.version; v < msg.to_version; ++v) {
      // decode_add validates everything before it adds: a bad blob leaves the copy intact.
      if (auto s = decode_add(msg.blobs[v - msg.from_version].view(), fspan(fs.global.data(), n));
          !s.ok()) {
        ++st.rejected;
        spdlog::warn("learner {}: rejected update of fragment {} version {}: {}", st.id, p, v,
                     s.to_string());
        send_pull(self, p);
        return false;
      }
      fs.version = v + 1;
    }
  }
  DILOCO_CHECK(fs.version >= msg.to_version,
               "learner: an update taken leaves the copy at its version");
  fs.last_reply_step = std::max(fs.last_reply_step, msg.reply_to_step);
  return true;
}

// Where an update taken goes: a pulling process (or a restarted one that has not had its
// schedule yet) counts its full fragment as pulled; a running one merges it at the boundary its
// reply is for, and every send it answers is done.
void place_update(self_ptr self, const fragment_update_msg& msg) {
  auto& st = self->state;
  const uint32_t p = msg.fragment;
  auto& fs = st.frags[p];
  const bool pulling = st.now == learner_state::phase::pulling;
  // A restarted process's full fragments can overtake the schedule (they come from other
  // actors): they count as pulled already.
  const bool early = st.now == learner_state::phase::joining && st.pulls_global;
  if (pulling || early) {
    if (!msg.full || fs.pulled) return;
    fs.pulled = true;
    st.resume_step = std::max(st.resume_step, msg.reply_to_step);
    if (pulling && --st.pulls_outstanding == 0) finish_pull(self);
    return;
  }
  // A reply to our send is merged at the boundary `overlap` steps after that send; a pull
  // (reply_to_step 0) at the next boundary.
  const uint64_t done = schedule_step(self);
  const uint64_t merge_at =
      msg.reply_to_step > 0 ? msg.reply_to_step + st.schedule.overlap_steps : done;
  if (done > merge_at) ++st.late_updates;
  fs.reply_ready = true;
  fs.merge_at_step = merge_at;
  // A step computed ahead that this merge will precede starts again from the merged model.
  if (st.ahead_step >= 0 && merges_at(fs, static_cast<uint64_t>(st.ahead_step)))
    step_ahead(self, st.ahead_step);
  if (msg.reply_to_step >= fs.sent_step) fs.awaiting = false;
  // The shard answers in order: every send up to the one answered is done. A pull's full
  // reply (reply_to_step 0) makes every earlier send moot.
  auto& un = fs.unanswered;
  DILOCO_CHECK(std::is_sorted(un.begin(), un.end()), "learner: unanswered sends out of order");
  if (msg.reply_to_step == 0) {  // the answer to a pull
    fs.pull_since = 0;
    un.clear();
  } else {
    un.erase(un.begin(), std::upper_bound(un.begin(), un.end(), msg.reply_to_step));
  }
  if (st.now == learner_state::phase::waiting) {
    DILOCO_CHECK(now_ns(self) >= st.wait_since_ns, "learner: it waited backwards in time");
    st.idle_ns += now_ns(self) - st.wait_since_ns;
    st.meter.idle_ns += now_ns(self) - st.wait_since_ns;
    st.now = learner_state::phase::running;
    resume(self);
  }
}

void on_update(self_ptr self, fragment_update_msg& msg) {
  auto& st = self->state;
  // Adaptive inner steps: when the reply before this one on its link arrived.
  int64_t previous_ns = INT64_MIN / 2;
  if (adaptive(self) && msg.fragment < st.frags.size()) {
    const uint32_t shard = st.env->shard_of[msg.fragment];
    if (st.last_reply_ns.size() < st.dir->shards.size())
      st.last_reply_ns.resize(st.dir->shards.size(), INT64_MIN / 2);
    previous_ns = st.last_reply_ns[shard];
    st.last_reply_ns[shard] = now_ns(self);
  }
  const uint64_t version_before =
      msg.fragment < st.frags.size() ? st.frags[msg.fragment].version : 0;
  if (!take_update(self, msg)) return;
  if (st.now == learner_state::phase::stopped) return;  // the copy converges; no mix
  if (adaptive(self) && st.now == learner_state::phase::running)
    measure_round(self, msg, previous_ns, version_before);
  place_update(self, msg);
}

// A shard's process ended: what it had not answered may be lost (counted); until a successor
// is announced, the fragments it owns keep their work.
// The fragments that synced with view slot s lose what s had not answered (counted); `routes`
// says where each fragment synced.
void lose_unanswered(learner_state& st, const std::vector<uint32_t>& routes, uint32_t s) {
  DILOCO_CHECK(routes.size() == st.frags.size(), "learner: a route per fragment");
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    if (routes[p] != s) continue;
    auto& fs = st.frags[p];
    if (fs.awaiting) {
      fs.awaiting = false;
      ++st.lost_shard_down;
    }
    fs.unanswered.clear();
    fs.pull_since = 0;
  }
}

std::vector<uint32_t> routes_now(const learner_state& st) {
  std::vector<uint32_t> routes(st.frags.size());
  for (uint32_t p = 0; p < st.frags.size(); ++p) routes[p] = route_of(st, p);
  return routes;
}

// A restarted process that has not had every fragment yet: a join asks for them whole.
bool needs_fragments(const learner_state& st) {
  return st.now == learner_state::phase::pulling ||
         (st.now == learner_state::phase::joining && st.pulls_global);
}

// A final delta for every fragment (of shard `*only`, if given), each at its own schedule step
// after every earlier send (the shards' duplicate filter and merge log key on it). Stops at a
// divergence (the process has ended).
void send_finals(self_ptr self, const uint32_t* only) {
  auto& st = self->state;
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    if (only != nullptr && route_of(st, p) != *only) continue;
    if (!send_delta(self, p, true, std::max(schedule_step(self), st.frags[p].sent_step + 1)))
      return;
  }
}

void on_closed(self_ptr self, closed_msg& msg) {
  auto& st = self->state;
  const int64_t slot = view_slot(st, msg.st.sender);
  if (slot < 0) return;
  const auto s = static_cast<uint32_t>(slot);
  const auto before = routes_now(st);
  if (!shard_closed(st.shard_down, st.shard_incarnation, s, msg.incarnation)) return;
  DILOCO_CHECK(st.env->shard_of.size() == st.frags.size(), "learner: one shard per fragment");
  lose_unanswered(st, before, s);
  // A shard's process ended: the versions its fragments had here (however the learner synced
  // them), which its successor must recover at least (the invariant).
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    if (st.env->shard_of[p] == s) st.frags[p].version_at_loss = st.frags[p].version;
  }
  // Its regional syncer is down: the learner syncs with the shards directly meanwhile.
  if (s == st.dir->shards.size()) {
    spdlog::info("learner {}: its regional syncer is down; syncing with the shards", st.id);
    for (uint32_t k = 0; k < st.dir->shards.size(); ++k) {
      if (st.shard_down[k]) continue;
      post_to(self, k, join_msg{st.out.make_stamp(now_ns(self)), st.id, needs_fragments(st)});
    }
  }
}

void on_peer(self_ptr self, peer_msg& msg) {
  auto& st = self->state;
  const uint32_t shards = static_cast<uint32_t>(st.dir->shards.size());
  const int64_t slot = peer_slot(st, msg);
  if (slot < 0) {
    ++st.rejected;
    return;
  }
  const auto s = static_cast<uint32_t>(slot);
  const bool own_regional = s == shards;
  const auto before = routes_now(st);
  if (!shard_started(st.shard_down, st.shard_incarnation, s, msg.incarnation)) return;
  if (!own_regional) {
    // A shard's new process: joined when the learner syncs with it (not through its regional
    // syncer).
    if (via_regional(st)) return;
    post_to(self, s, join_msg{st.out.make_stamp(now_ns(self)), st.id, false});
    // A learner that stopped sent its final deltas to the old process, or to none while the
    // shard was down: lost (counted when the old process closed). The new one flushes only
    // once every learner it knows has sent a final, so each of its fragments gets one again,
    // with the work since that send (none).
    if (st.now == learner_state::phase::stopped) send_finals(self, &s);
    return;
  }
  // Its regional syncer is back: the learner leaves the shards and syncs with it again; what
  // the shards have not answered yet is lost to it (they still merge it).
  // A learner that stopped has sent its last deltas where they went: it stays there.
  if (st.now == learner_state::phase::stopped) return;
  spdlog::info("learner {}: its regional syncer is back", st.id);
  for (uint32_t k = 0; k < shards; ++k) {
    if (st.shard_down[k]) continue;
    post_to(self, k, closed_msg{st.out.make_stamp(now_ns(self)), st.incarnation});
  }
  for (uint32_t k = 0; k < shards; ++k) lose_unanswered(st, before, k);
  post_to(self, shards, join_msg{st.out.make_stamp(now_ns(self)), st.id, needs_fragments(st)});
}

// A restarted shard rebuilds its fragments from the learners' copies.
void on_copy_request(self_ptr self, copy_request& msg) {
  auto& st = self->state;
  std::vector<uint8_t> bytes;
  for (uint32_t p : msg.fragments) {
    if (p >= st.frags.size()) {
      ++st.rejected;
      continue;
    }
    const auto& fs = st.frags[p];
    DILOCO_CHECK(fs.global.size() == frag_of(self, p).size,
                 "learner: a global copy of another size than its fragment");
    // The global copy only changes by decoded (finite) updates.
    const status encoded = encode(codec_config::make(codec_kind::fp32),
                                  cfspan(fs.global.data(), fs.global.size()), fspan(), bytes);
    DILOCO_CHECK(encoded.ok(), "learner: its global copy holds a non-finite value");
    copy_msg reply{st.out.make_stamp(now_ns(self)), p, st.id, fs.version, tensor_blob(bytes)};
    const uint32_t s = st.env->shard_of[p];
    post(self,
         over_link(st.env->ids.shard(s), st.dir->shards[s], bytes.size() + message_overhead_bytes),
         std::move(reply));
  }
}

// The process ends: the shards see the connection close, the slot waits for a restart.
void end_process(self_ptr self, learner_state::phase why) {
  auto& st = self->state;
  DILOCO_CHECK(why == learner_state::phase::down || why == learner_state::phase::absent,
               "learner: a process ends down or absent");
  close_learner_links(self, *st.env, st.out, *st.dir, st.incarnation, regional_of(st));
  reset_process(st, st.incarnation);
  st.now = why;
}

// The capacity is taken back: send the outstanding work of every fragment, then exit.
void on_leave(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.shard_down.size() >= st.dir->shards.size(), "learner: a view per shard");
  if (st.now == learner_state::phase::running || st.now == learner_state::phase::waiting) {
    for (uint32_t p = 0; p < st.frags.size(); ++p) {
      if (st.shard_down[route_of(st, p)]) continue;
      // A step after every earlier send, so the shard does not take it for a repeat.
      if (!send_delta(self, p, false, std::max(schedule_step(self), st.frags[p].sent_step + 1)))
        return;  // diverged: the process has ended
    }
  }
  st.now = learner_state::phase::stopped;
  report_progress(self);
  end_process(self, learner_state::phase::absent);
}

void on_stop(self_ptr self) {
  auto& st = self->state;
  if (st.now == learner_state::phase::stopped) return;
  if (st.now == learner_state::phase::waiting) st.idle_ns += now_ns(self) - st.wait_since_ns;
  st.now = learner_state::phase::stopped;
  st.out.faults_off = true;
  DILOCO_CHECK(st.trainer && st.frags.size() == st.env->plan.fragments.size(),
               "learner: a live process stops with its trainer and every fragment");
  report_progress(self);
  // Every learner the shards know sends a final delta per fragment, so they can flush. One that
  // never started has done no work: its delta is zero with zero weight.
  // Each send of a fragment has its own schedule step (the shards' duplicate filter and merge
  // log key on it): in real time the stop can come within the step of the last regular send.
  send_finals(self, nullptr);
}

// A fresh process on the slot: the initial model, fresh optimizer and data order (from its
// incarnation), and a join. A process after the first, or a first one that joins the run under
// way (`mid_run`), pulls the global model and trains from it.
void begin_process(self_ptr self, uint32_t incarnation, bool mid_run) {
  auto& st = self->state;
  reset_process(st, incarnation);
  st.pulls_global = incarnation > 0 || mid_run;
  const actor_env& env = *st.env;
  const run_config& c = env.config;
  DILOCO_CHECK(st.frags.empty() && !st.trainer, "learner: a fresh process starts from nothing");
  st.now = learner_state::phase::joining;
  auto made = env.model->make(learner_spec{static_cast<int>(st.id), c.learner_capacity(), c.seed,
                                           incarnation, c.batch_of(st.id), env.ahead});
  if (!made) {
    // The user's code could not build the model: the slot has no process, as after a crash.
    report_failure(self, "its model could not be made: " + made.error().message());
    st.now = learner_state::phase::down;
    return;
  }
  st.trainer = std::move(made).value();
  DILOCO_CHECK(st.trainer->params().size() == env.model->layout().buffer_floats(),
               "learner: a trainer's parameters are as many as the model's layout");
  st.speed_rng.reseed(derive_seed(c.seed, "learner.speed", (uint64_t{st.id} << 32) | incarnation));
  size_t largest = 0;
  for (const auto& f : env.plan.fragments) {
    fragment_sync fs;
    fs.global = float_buffer(f.size);
    f.gather(st.trainer->params().data(), fs.global.data());
    fs.reference = fs.global;
    // Error feedback only: a model-sized buffer a learner without it does not hold.
    fs.residual = float_buffer(c.uplink.error_feedback ? f.size : 0);
    st.frags.push_back(std::move(fs));
    largest = std::max(largest, f.size);
  }
  // Every per-fragment loop indexes shard_of with the fragment.
  DILOCO_CHECK(env.shard_of.size() == st.frags.size(), "learner: every fragment has a shard");
  st.decoded = float_buffer(largest);
  reset_views(st);
  announce_join(self, env, st.out, *st.dir, st.id, st.pulls_global, true);
}

// The fragment schedule: a joining learner starts running, or (restarted) waits for the full
// fragments the shards send in answer to its join.
void on_schedule(self_ptr self, const schedule_msg& msg) {
  auto& st = self->state;
  // The schedule is checked against the fragments a live process holds: all of them.
  DILOCO_CHECK(st.frags.size() == st.env->plan.fragments.size(),
               "learner: a schedule reaches a process with every fragment");
  // A process that follows a schedule already takes a new one as a change of H, from its step.
  if (st.now != learner_state::phase::joining && st.schedule.period_steps > 0) {
    if (const auto why = st.schedule.stage(msg, st.frags.size()); !why.empty()) {
      ++st.rejected;
      spdlog::error("learner {}: rejected schedule change: {}", st.id, why);
    }
    return;
  }
  if (const auto why = st.schedule.adopt(msg, st.frags.size()); !why.empty()) {
    ++st.rejected;
    spdlog::error("learner {}: rejected schedule: {}", st.id, why);
    return;
  }
  st.global_clock = msg.global_clock;
  st.epoch_ns = msg.epoch_ns;
  st.step_ns = std::max<int64_t>(1, msg.step_ns);
  if (st.now != learner_state::phase::joining) return;
  if (!st.pulls_global) {
    start_running(self);
  } else {
    st.now = learner_state::phase::pulling;  // the shards answered our join with
                                             // full fragments
    st.pulls_outstanding = 0;
    for (const auto& fs : st.frags) st.pulls_outstanding += fs.pulled ? 0 : 1;
    if (st.pulls_outstanding == 0) {
      finish_pull(self);
    } else {
      // A full fragment lost on a lossy link would leave the process waiting
      // for good: ask again for what is missing if it has not come by then.
      schedule_tick(self, pull_retry_ns(self));
    }
  }
}

// What a running process reports at the end of the run.
learner_report report_of(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.trainer != nullptr, "learner: a live process reports with a trainer");
  learner_report r = slot_report(st);
  r.tokens = st.trainer->tokens_done();
  r.steps = completed_steps(self);
  r.idle_ns = st.idle_ns;
  r.late_updates = st.late_updates;
  r.last_loss = st.last_loss;
  for (const auto& fs : st.frags) {
    r.versions.push_back(fs.version);
    r.global_hashes.push_back(checksum64(fs.global.data(), fs.global.size() * sizeof(float)));
    r.versions_at_shard_loss.push_back(fs.version_at_loss);
  }
  r.lost_deltas_network = st.out.lost_deltas[static_cast<int>(loss_reason::network)];
  r.lost_deltas_partition = st.out.lost_deltas[static_cast<int>(loss_reason::partition)];
  r.lost_deltas_shard_down = st.lost_shard_down;
  r.version_regressions = st.version_regressions;
  r.duplicate_updates = st.duplicate_updates;
  r.resyncs = st.resyncs;
  r.deltas_held = st.deltas_held;
  return r;
}

// This process's parameters; asked to evaluate, also the loss of its copy of the global model.
global_snapshot global_copy(self_ptr self, const global_request& req) {
  auto& st = self->state;
  DILOCO_CHECK(st.trainer != nullptr, "learner: a live process has a trainer");
  // Only read: a computation whose parameters live on a device copies them to the host once
  // and has nothing to take back.
  const float_buffer& params = st.trainer->params_to_read();
  global_snapshot g = snapshot_params(*st.env, params);
  if (req.evaluate) {
    // This learner's copy of the global model: its parameters with every fragment's
    // global value laid in.
    float_buffer model = params;
    for (uint32_t p = 0; p < st.frags.size(); ++p)
      frag_of(self, p).scatter(st.frags[p].global.data(), model.data());
    auto loss = st.env->model->evaluate(model);
    g.eval_loss = loss ? *loss : NAN;
    if (!loss) g.eval_error = loss.error().message();
  }
  return g;
}

}  // namespace

learner_actor::behavior_type learner(learner_actor::stateful_pointer<learner_state> self,
                                     std::shared_ptr<const actor_env> env, uint32_t id,
                                     directory_ptr dir) {
  auto dead = open_learner_slot(self, env, id, std::move(dir));
  return learner_slot_behavior(
      self, [self](uint32_t inc) { begin_process(self, inc, false); },
      when_live(self, dead, [=](schedule_msg& msg) { on_schedule(self, msg); }),
      when_live(self, dead, [=](fragment_update_msg& msg) { on_update(self, msg); }),
      when_live(self, dead,
                [=](reduced_gradient_msg&) {
                  ++self->state.rejected;  // not part of DiLoCo's protocol
                }),
      [=](step_tick tick) {
        timer_fired(self, tick);
        auto& st = self->state;
        if (tick.seq != st.tick_seq || dead()) return;
        if (st.now == learner_state::phase::pulling) {
          // A full fragment was lost on the way: ask again for the missing ones.
          DILOCO_CHECK(st.pulls_outstanding > 0, "learner: a pulling process waits for a fragment");
          for (uint32_t p = 0; p < st.frags.size(); ++p) {
            if (!st.frags[p].pulled) send_pull(self, p);
          }
          schedule_tick(self, pull_retry_ns(self));
          return;
        }
        if (st.now != learner_state::phase::running) return;
        st.meter.step_done();
        boundary(self);
      },
      when_live(self, dead, [=](stop_msg&) { on_stop(self); }),
      when_live(self, dead,
                [=](capacity_msg& msg) {
                  if (capacity_valid(self->state, msg))
                    take_capacity(self->state, msg, now_ns(self));
                }),
      when_live(self, dead, [=](leave_msg&) { on_leave(self); }),
      when_live(self, dead, [=](peer_msg& msg) { on_peer(self, msg); }),
      when_live(self, dead, [=](copy_request& msg) { on_copy_request(self, msg); }),
      when_live(self, dead,
                [=](kill_msg&) {
                  auto& st = self->state;
                  spdlog::debug("learner {}: process {} killed", st.id, st.incarnation);
                  end_process(self, learner_state::phase::down);
                }),
      when_dormant(self, dead,
                   [=](restart_msg& msg) { begin_process(self, msg.incarnation, true); }),
      when_live(self, dead, [=](closed_msg& msg) { on_closed(self, msg); }),
      [=](report_request) { return dead() ? absent_report(self->state.id) : report_of(self); },
      [=](global_request req) { return dead() ? global_snapshot{} : global_copy(self, req); });
}

}  // namespace diloco
