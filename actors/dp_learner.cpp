#include "actors/dp_learner.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <limits>

#include <cmath>
#include <tuple>

#include "actors/learner_common.hpp"
#include "actors/metrics.hpp"
#include "actors/state_io.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"

namespace diloco {

global_snapshot snapshot_params(const actor_env& env, const float_buffer& params) {
  global_snapshot snap;
  std::vector<float> local;
  std::vector<uint8_t> bytes;
  DILOCO_CHECK(params.size() == env.model->layout().buffer_floats(),
               "snapshot: parameters as many as the model's layout");
  for (const auto& f : env.plan.fragments) {
    local.resize(f.size);
    f.gather(params.data(), local.data());
    // A learner whose weights went non-finite reports an empty value (which fails decoding).
    if (!encode(codec_config::make(codec_kind::fp32), cfspan(local.data(), f.size), fspan(), bytes)
             .ok())
      bytes.clear();
    snap.fragments.push_back(static_cast<uint32_t>(f.id));
    snap.versions.push_back(0);
    snap.values.emplace_back(bytes);
  }
  return snap;
}

namespace {

using self_ptr = learner_actor::stateful_pointer<dp_learner_state>;

const run_config& cfg(self_ptr self) {
  return self->state.env->config;
}

int64_t draw_step_ns(self_ptr self) {
  const speed_config& sp = cfg(self).speed_of(self->state.id);
  return to_ns(sp.step_time_s * draw_speed_factor(sp, self->state.speed_rng));
}

void report_progress(self_ptr self) {
  if (self->state.meter.steps == 0) return;
  send_progress(self);
}

// The data-parallel baseline cannot go on without a replica: the metrics actor is told, and
// stops the run.
void fail(self_ptr self, const std::string& what) {
  auto& st = self->state;
  spdlog::error("learner {}: {} at step {}", st.id, what, st.step);
  diverged_msg d{st.out.make_stamp(now_ns(self)), st.id, st.step, what};
  post(self, direct(st.env->ids.metrics(), st.dir->metrics), std::move(d));
  st.stopped = true;
}

// Computes the next step's gradient now; its sending happens when the step's time is over.
void compute(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(!st.waiting && !st.stopped, "dp learner: a step began before the last one ended");
  const int64_t t0 = now_ns(self);
  auto loss = st.trainer->compute_gradients();
  if (!loss) {
    fail(self, "the training step failed: " + loss.error().message());
    return;
  }
  st.step_loss = *loss;
  if (const auto& dbg = cfg(self).debug; dbg.nonfinite_learner == static_cast<int64_t>(st.id) &&
                                         static_cast<int64_t>(st.step) == dbg.nonfinite_step) {
    // Fault injection (debug.nonfinite_learner): a gradient entry becomes NaN.
    st.trainer->grads()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  st.step_ns = st.env->virtual_time ? draw_step_ns(self) : std::max<int64_t>(1, now_ns(self) - t0);
  DILOCO_CHECK(st.step_ns > 0, "dp learner: a step that takes no time");
  st.busy_ns += st.step_ns;
  st.meter.step_started(st.step_ns, static_cast<double>(cfg(self).chips_of(st.id)));
  ++st.tick_seq;
  set_timer(self, st.out, st.env->virtual_time ? st.step_ns : 0, step_tick{st.tick_seq});
}

void send_gradients(self_ptr self) {
  auto& st = self->state;
  const auto fp32 = codec_config::make(codec_kind::fp32);
  DILOCO_CHECK(!st.waiting, "dp learner: gradients sent twice for one step");
  DILOCO_CHECK(st.local.size() >= st.env->plan.largest(), "dp learner: gather buffer too small");
  for (const auto& f : st.env->plan.fragments) {
    f.gather(st.trainer->grads().data(), st.local.data());
    if (auto s = encode(fp32, cfspan(st.local.data(), f.size), fspan(), st.blob); !s.ok()) {
      fail(self,
           "gradient of fragment " + std::to_string(f.id) + " is not finite (" + s.message() + ")");
      return;
    }
    const uint32_t shard = st.env->shard_of[static_cast<size_t>(f.id)];
    DILOCO_CHECK(shard < st.dir->shards.size(), "dp learner: a fragment's shard out of range");
    gradient_msg msg{st.out.make_stamp(now_ns(self)), static_cast<uint32_t>(f.id), st.id, st.step,
                     tensor_blob(st.blob)};
    const uint64_t bytes = st.blob.size() + message_overhead_bytes;
    post(self, over_link(st.env->ids.shard(shard), st.dir->shards[shard], bytes), std::move(msg));
  }
  st.waiting = true;
  st.reduced = 0;
  st.wait_since_ns = now_ns(self);
}

void on_reduced(self_ptr self, reduced_gradient_msg& msg) {
  auto& st = self->state;
  if (st.stopped) return;
  if (!st.waiting || msg.step != st.step || msg.fragment >= st.env->plan.fragments.size()) {
    ++st.rejected;
    spdlog::warn(
        "dp learner {}: rejected reduced gradient (fragment {}, step {}, expected step {})", st.id,
        msg.fragment, msg.step, st.step);
    return;
  }
  const fragment& f = st.env->plan.fragments[msg.fragment];
  DILOCO_CHECK(st.decoded.size() >= f.size, "dp learner: decode buffer too small");
  fspan out(st.decoded.data(), f.size);
  if (auto s = decode(msg.grad.view(), out);
      !s.ok() || !std::isfinite(sum_squares(cfspan(out.data(), f.size)))) {
    ++st.rejected;
    spdlog::warn("dp learner {}: rejected reduced gradient of fragment {}", st.id, msg.fragment);
    return;
  }
  f.scatter(st.decoded.data(), st.trainer->grads().data());
  if (++st.reduced < st.env->plan.fragments.size()) return;
  DILOCO_CHECK(st.reduced == st.env->plan.fragments.size(), "dp learner: a step reduced twice");

  st.waiting = false;
  const int64_t idle = now_ns(self) - st.wait_since_ns;
  DILOCO_CHECK(idle >= 0, "dp learner: it waited forward in time");
  st.idle_ns += idle;
  st.meter.idle_ns += idle;
  if (auto applied = st.trainer->apply_gradients(cfg(self).inner, st.trainer->steps_done());
      !applied) {
    fail(self, "the optimizer step failed: " + applied.error().message());
    return;
  }
  st.last_loss = st.step_loss;
  st.meter.add_step(static_cast<uint64_t>(cfg(self).batch), st.step_loss);
  st.step += 1;
  if (st.step % static_cast<uint64_t>(cfg(self).progress_every_steps) == 0) report_progress(self);
  if (!st.stopped) compute(self);
}

// A fresh process: the initial model, and the first step's gradient.
void begin_process(self_ptr self, uint32_t incarnation) {
  auto& st = self->state;
  reset_process(st, incarnation);
  const run_config& c = cfg(self);
  auto made = st.env->model->make(learner_spec{static_cast<int>(st.id), c.learner_capacity(),
                                               c.seed, incarnation, c.batch_of(st.id), nullptr});
  if (!made) {
    fail(self, "its model could not be made: " + made.error().message());
    return;
  }
  st.trainer = std::move(made).value();
  DILOCO_CHECK(st.env->plan.total() <= st.trainer->params().size(),
               "dp learner: the fragment plan covers more than the model's parameters");
  // Reduced fragments are scattered into the gradients with the parameters' offsets.
  DILOCO_CHECK(st.trainer->grads().size() == st.trainer->params().size(),
               "dp learner: a gradient for every parameter");
  st.alive = true;
  st.speed_rng.reseed(derive_seed(c.seed, "learner.speed", (uint64_t{st.id} << 32) | incarnation));
  st.local = float_buffer(st.env->plan.largest());
  st.decoded = float_buffer(st.env->plan.largest());
  announce_join(self, *st.env, st.out, *st.dir, st.id, false, false);
  compute(self);
}

}  // namespace

learner_actor::behavior_type dp_learner(learner_actor::stateful_pointer<dp_learner_state> self,
                                        std::shared_ptr<const actor_env> env, uint32_t id,
                                        directory_ptr dir) {
  init_learner_slot(self->state, env, id, std::move(dir));
  auto dead = [self] { return !self->state.alive; };
  return learner_slot_behavior(
      self, [self](uint32_t inc) { begin_process(self, inc); },
      when_live(self, dead,
                [=](schedule_msg&) {
                  ++self->state.rejected;  // data parallel has no fragment schedule
                }),
      when_live(self, dead, [=](fragment_update_msg&) { ++self->state.rejected; }),
      when_live(self, dead, [=](reduced_gradient_msg& msg) { on_reduced(self, msg); }),
      [=](step_tick tick) {
        timer_fired(self, tick);
        auto& st = self->state;
        if (tick.seq != st.tick_seq || dead() || st.stopped || st.waiting) return;
        st.meter.step_done();
        send_gradients(self);
      },
      when_live(self, dead,
                [=](stop_msg&) {
                  auto& st = self->state;
                  if (st.waiting) st.idle_ns += now_ns(self) - st.wait_since_ns;
                  st.stopped = true;
                  report_progress(self);
                }),
      when_live(self, dead,
                [=](capacity_msg&) {
                  ++self->state.rejected;  // the data-parallel baseline is not elastic
                }),
      when_live(self, dead,
                [=](leave_msg&) {
                  ++self->state.rejected;  // the data-parallel baseline needs every learner
                }),
      when_live(self, dead, [=](peer_msg&) { ++self->state.rejected; }),
      when_live(self, dead, [=](copy_request&) { ++self->state.rejected; }),
      when_live(self, dead,
                [=](kill_msg&) {
                  auto& st = self->state;
                  close_learner_links(self, *st.env, st.out, *st.dir, st.incarnation);
                  reset_process(st, st.incarnation);
                }),
      when_dormant(self, dead, [=](restart_msg& msg) { begin_process(self, msg.incarnation); }),
      when_live(self, dead, [=](closed_msg&) {}),
      [=](report_request) {
        auto& st = self->state;
        if (dead()) return absent_report(st.id);
        learner_report r = slot_report(st);
        r.tokens = st.trainer->tokens_done();
        r.steps = st.step;
        r.idle_ns = st.idle_ns;
        r.last_loss = st.last_loss;
        return r;
      },
      [=](global_request) {
        if (dead()) return global_snapshot{};
        return snapshot_params(*self->state.env, self->state.trainer->params_to_read());
      });
}

}  // namespace diloco
