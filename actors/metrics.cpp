#include "actors/metrics.hpp"

#include <spdlog/spdlog.h>

#include <set>

#include "actors/state_io.hpp"
#include "base/check.hpp"
#include "runtime/observer.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

namespace {

using self_ptr = metrics_actor::stateful_pointer<metrics_state>;

// A learner's message that says it comes from the learner that sent it.
bool from_learner(const actor_env& env, uint32_t learner, const stamp& st) {
  return learner < env.ids.learners && st.sender == env.ids.learner(learner);
}

void send_stop(self_ptr self, const learner_actor& to, uint32_t learner) {
  auto& st = self->state;
  post(self, direct(st.env->ids.learner(learner), to), stop_msg{st.out.make_stamp(now_ns(self))});
}

void stop_run(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(!st.report.stopped, "metrics: the run stopped twice");
  st.report.stopped = true;
  st.report.stop_time_ns = now_ns(self);
  if (st.env->observer) st.env->observer->on_stop(observed_now_ns(self));
  spdlog::debug("metrics: token budget spent ({} tokens), stopping", st.report.tokens);
  for (const auto& [id, handle] : st.learners) send_stop(self, handle, id);
  post(self, direct(st.env->ids.chaos(), st.dir->chaos), stop_msg{st.out.make_stamp(now_ns(self))});
  post_control(self, st.out, st.env->ids.coordinator(), st.dir->coordinator,
               stop_msg{stamp{st.out.self_index, st.out.clock, now_ns(self)}});
}

// A learner's progress: counts, a snapshot when the steps cross a multiple of its period, and
// the stop once the token budget is spent.
void on_progress(self_ptr self, progress_msg& msg) {
  auto& st = self->state;
  if (st.env->observer) st.env->observer->on_progress(observed_now_ns(self), msg);
  st.report.tokens += msg.tokens;
  const uint64_t every =
      st.env->config.snapshot.enabled() ? st.env->config.snapshot.every_steps : 0;
  if (every > 0 && !st.report.stopped &&
      (st.report.steps + msg.steps) / every > st.report.steps / every) {
    post_control(self, st.out, st.env->ids.coordinator(), st.dir->coordinator,
                 snapshot_request{stamp{st.out.self_index, st.out.clock, now_ns(self)},
                                  st.report.steps + msg.steps});
  }
  st.report.steps += msg.steps;
  if (from_learner(*st.env, msg.learner, msg.st)) {
    auto& r = st.report;
    if (msg.learner >= r.learner_tokens.size()) {
      r.learner_tokens.resize(msg.learner + 1, 0);
      r.learner_steps.resize(msg.learner + 1, 0);
    }
    DILOCO_CHECK(r.learner_steps.size() == r.learner_tokens.size(),
                 "metrics: per-learner counts of different lengths");
    r.learner_tokens[msg.learner] += msg.tokens;
    r.learner_steps[msg.learner] += msg.steps;
  }
  st.report.chip_s += msg.chip_s;
  st.report.learner_bytes += msg.bytes_sent + msg.bytes_received;
  // A cost-model run processes no tokens: only its duration ends it.
  const bool budget_counts = st.env->config.compute == compute_mode::real;
  if (!st.report.stopped && budget_counts && st.report.tokens >= st.env->config.token_budget)
    stop_run(self);
}

// A learner joined: it is told to stop at once if the run already has.
void on_join(self_ptr self, join_msg& msg) {
  auto& st = self->state;
  if (!from_learner(*st.env, msg.learner, msg.st)) return;
  DILOCO_CHECK(msg.learner < st.dir->learners.size(), "metrics: a slot for every learner id");
  const learner_actor& handle = st.dir->learners[msg.learner];
  st.learners[msg.learner] = handle;
  if (st.report.stopped) send_stop(self, handle, msg.learner);  // joined too late
}

// A learner's numerics went non-finite: the run stops once nobody is left to spend the budget.
void on_diverged(self_ptr self, diverged_msg& msg) {
  auto& st = self->state;
  if (!from_learner(*st.env, msg.learner, msg.st)) return;
  if (st.env->observer) st.env->observer->on_diverged(observed_now_ns(self), msg);
  st.report.diverged.push_back(msg);
  // Every learner that joined has diverged: nobody is left to spend the budget.
  std::set<uint32_t> out;
  for (const auto& d : st.report.diverged) out.insert(d.learner);
  // The baselines (all learners in lock-step) cannot go on without one.
  const bool elastic = st.env->config.mode == run_mode::decoupled;
  if (!st.report.stopped && (!elastic || out.size() >= st.learners.size())) stop_run(self);
}

}  // namespace

metrics_actor::behavior_type metrics(metrics_actor::stateful_pointer<metrics_state> self,
                                     std::shared_ptr<const actor_env> env, directory_ptr dir) {
  self->state.env = env;
  self->state.dir = std::move(dir);
  self->state.out.init(*env, env->ids.metrics());
  return {
      // The messages of every step and round first: CAF tries the handlers in order.
      received(self, [=](progress_msg& msg) { on_progress(self, msg); }),
      received(self,
               [=](merge_msg& msg) {
                 if (const auto& obs = self->state.env->observer)
                   obs->on_merge(observed_now_ns(self), msg);
               }),
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (start_or_restore(self, msg)) return;
        if (const auto& obs = self->state.env->observer) {
          std::vector<std::string> names;
          for (const auto& t : self->state.env->model->layout().tensors()) names.push_back(t.name);
          obs->on_layout(names);
          obs->on_start(observed_now_ns(self));
        }
        const auto& c = self->state.env->config;
        if (c.duration_s > 0)
          set_timer(self, self->state.out, to_ns(c.duration_s), deadline_tick{});
      },
      [=](marker_msg& m) { on_marker(self, m); },
      received(self, [=](join_msg& msg) { on_join(self, msg); }),
      received(self,
               [=](flushed_msg&) {
                 auto& st = self->state;
                 st.report.shards_flushed += 1;
                 st.report.end_time_ns = now_ns(self);
               }),
      received(self, [=](diverged_msg& msg) { on_diverged(self, msg); }),
      [=](deadline_tick tick) {
        timer_fired(self, tick);
        if (!self->state.report.stopped) stop_run(self);
      },
      [=](report_request) {
        run_report r = self->state.report;
        r.trace = self->state.out.trace;
        return r;
      },
  };
}

}  // namespace diloco
