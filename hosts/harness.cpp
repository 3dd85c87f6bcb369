#include "hosts/harness.hpp"
#include "base/check.hpp"
#include "runtime/tape.hpp"

#include <spdlog/spdlog.h>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "actors/chaos.hpp"
#include "actors/coordinator.hpp"
#include "actors/cost_learner.hpp"
#include "actors/dp_learner.hpp"
#include "actors/learner.hpp"
#include "actors/metrics.hpp"
#include "actors/reducer.hpp"
#include "actors/scheduler.hpp"
#include "actors/syncer.hpp"
#include "protocol/digest.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/wire.hpp"
#include "tensor/codec.hpp"

namespace diloco::harness {

caf::actor spawn_actor(caf::actor_system& sys, const std::shared_ptr<const actor_env>& env,
                       const directory_ptr& dir, uint32_t index,
                       std::shared_ptr<const snapshot_context> ctx) {
  const run_config& c = env->config;
  const auto& ids = env->ids;
  const bool dp = c.mode == run_mode::data_parallel;
  DILOCO_CHECK(index < ids.count(), "spawn_actor: an actor index in range");
  auto untyped = [](const auto& h) { return caf::actor_cast<caf::actor>(h); };
  if (index < ids.learners) {
    if (c.compute == compute_mode::cost) return untyped(sys.spawn(cost_learner, env, index, dir));
    const bool replaying = env->tape != nullptr && env->tape->replaying();
    if (!env->virtual_time && !replaying) {
      // In real time a learner computes without pause: its own thread keeps it on one core
      // with a warm cache, instead of being moved between the scheduler's workers. (A replay
      // runs every actor on the driver's deterministic scheduler.)
      return dp ? untyped(sys.spawn<caf::detached>(dp_learner, env, index, dir))
                : untyped(sys.spawn<caf::detached>(learner, env, index, dir));
    }
    return dp ? untyped(sys.spawn(dp_learner, env, index, dir))
              : untyped(sys.spawn(learner, env, index, dir));
  }
  if (index < ids.scheduler()) {
    return dp ? untyped(sys.spawn(reducer, env, index - ids.learners, dir))
              : untyped(sys.spawn(syncer, env, index - ids.learners, dir));
  }
  if (index == ids.scheduler()) return untyped(sys.spawn(fragment_scheduler, env, dir));
  if (index == ids.metrics()) return untyped(sys.spawn(metrics, env, dir));
  if (index == ids.chaos()) return untyped(sys.spawn(chaos, env, dir));
  if (index == ids.coordinator())
    return untyped(sys.spawn(snapshot_coordinator, env, dir, std::move(ctx)));
  // A regional syncer: the syncer role on shard slot shards + r.
  return untyped(sys.spawn(syncer, env, ids.shards + (index - ids.regional(0)), dir));
}

void place(cluster_directory& dir, const actor_indices& ids, uint32_t index, const caf::actor& a) {
  dir.place(index, a, ids.learners, ids.shards);
}

// Every actor slot of the cluster, spawned and wired (runtime/directory.hpp), not yet started.
std::shared_ptr<cluster_directory> spawn_cluster(caf::actor_system& sys,
                                                 const std::shared_ptr<const actor_env>& env,
                                                 std::shared_ptr<const snapshot_context> ctx) {
  auto dir = std::make_shared<cluster_directory>();
  const auto& ids = env->ids;
  // The order of the spawns is part of a simulated run (it is the order of the first jobs).
  std::vector<uint32_t> order = {ids.metrics(), ids.scheduler()};
  for (uint32_t s = 0; s < ids.shards; ++s) order.push_back(ids.learners + s);
  for (uint32_t l = 0; l < ids.learners; ++l) order.push_back(l);
  order.push_back(ids.chaos());
  order.push_back(ids.coordinator());
  for (uint32_t r = 0; r < ids.regionals; ++r) order.push_back(ids.regional(r));
  for (uint32_t i : order) place(*dir, ids, i, spawn_actor(sys, env, dir, i, ctx));
  DILOCO_CHECK(order.size() == ids.count(), "spawn_cluster: every slot spawned once");
  return dir;
}

// Every actor begins, once all of them are wired: fresh, or from its part of a snapshot.
void start_cluster(const cluster_directory& dir, const loaded_snapshot* from) {
  // and the four services, and the regional syncers
  const size_t actors = dir.learners.size() + dir.shards.size() + 4 + dir.regionals.size();
  DILOCO_CHECK(from == nullptr || from->parts.size() == actors,
               "start_cluster: a snapshot checked to have a part per actor");
  for (uint32_t i = 0; i < actors; ++i) {
    DILOCO_CHECK(dir.at(i), "start_cluster: a slot without its actor");
    start_msg start;
    if (from != nullptr) start.restore = from->parts[i];  // shared, not copied
    caf::anon_send(dir.at(i), std::move(start));
  }
}

// Actors live until told otherwise; the system's destructor waits for all of them.
void stop_cluster(const cluster_directory& dir) {
  for (const auto& s : dir.shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  for (const auto& l : dir.learners) caf::anon_send_exit(l, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(dir.metrics, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(dir.scheduler, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(dir.chaos, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(dir.coordinator, caf::exit_reason::user_shutdown);
  for (const auto& r : dir.regionals) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

int64_t clock_ticks_now(caf::actor_system& sys) {
  return sys.clock().now().time_since_epoch() / std::chrono::nanoseconds(1);
}

result<std::shared_ptr<const actor_env>> local_run_env(const run_config& config, bool virtual_time,
                                                       actor_env::hooks with) {
  auto env = actor_env::make(config, virtual_time, std::move(with));
  if (!env) return env.error();
  if (config.compute != compute_mode::cost) {
    if (auto s = (*env)->model->runnable(); !s.ok()) return s;
  }
  return env;
}

void make_quiet(caf::actor_system_config& cfg) {
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  register_protocol(cfg);
}

// The report of a finished run: every actor's counters and the final model, evaluated.
result<sim_result> assemble(const run_config& config, const actor_env& env, collected col) {
  sim_result res;
  res.config = config;
  res.run = col.run;
  res.snapshots = col.snapshots;
  res.supervisor = col.supervisor;
  // Actor handles must not outlive their actor system (its destructor waits for every actor
  // that is still referenced): the result keeps the counts only.
  res.supervisor.learners.clear();
  res.supervisor.shards.clear();
  res.learners = std::move(col.learners);
  res.shards = std::move(col.shards);
  res.regionals = std::move(col.regionals);
  std::sort(res.learners.begin(), res.learners.end(),
            [](const learner_report& a, const learner_report& b) { return a.learner < b.learner; });
  auto by_slot = [](const shard_report& a, const shard_report& b) { return a.shard < b.shard; };
  std::sort(res.shards.begin(), res.shards.end(), by_slot);
  std::sort(res.regionals.begin(), res.regionals.end(), by_slot);

  res.trace_hash = mix(res.run.trace, res.supervisor.trace);
  for (const auto& s : res.shards) res.trace_hash = mix(res.trace_hash, s.trace);
  for (const auto& l : res.learners) res.trace_hash = mix(res.trace_hash, l.trace);
  for (const auto& r : res.regionals) res.trace_hash = mix(res.trace_hash, r.trace);
  // The data's entropy rate is the loss's floor only for learners that train on that data.
  res.entropy_rate = env.model->trains_on_run_data() ? env.data->entropy_rate_nats() : -1.0;
  res.eval_floor = env.model->trains_on_run_data() ? env.data->eval_floor_nats() : -1.0;
  res.model = env.model;
  if (config.compute == compute_mode::cost) {
    res.eval_loss = NAN;  // no model was trained
    return res;
  }
  // The final model: every fragment's global value, laid back into the parameter layout.
  res.params = env.fragments_base();
  std::vector<float> local;
  for (const auto& g : col.globals) {
    // A deployed run's globals come from other nodes: checked as any message from a peer.
    if (g.values.size() != g.fragments.size())
      return status(errc::corrupt_data,
                    "a shard's final values: " + std::to_string(g.fragments.size()) +
                        " fragments, " + std::to_string(g.values.size()) + " values");
    for (size_t i = 0; i < g.fragments.size(); ++i) {
      if (g.fragments[i] >= env.plan.fragments.size())
        return status(errc::corrupt_data, "a shard's final values: fragment " +
                                              std::to_string(g.fragments[i]) + " of " +
                                              std::to_string(env.plan.fragments.size()));
      const fragment& f = env.plan.fragments[g.fragments[i]];
      local.resize(f.size);
      if (auto s = decode(g.values[i].view(), fspan(local.data(), f.size)); !s.ok()) {
        return s.with_context("final value of fragment " + std::to_string(f.id));
      }
      f.scatter(local.data(), res.params.data());
    }
  }
  // A user's model may fail to evaluate: the run's results stand, without an evaluation.
  if (col.learner_eval && std::isfinite(col.learner_eval->eval_loss)) {
    res.eval_loss = col.learner_eval->eval_loss;
    spdlog::info("the final model evaluated by learner {} (its copy of the global model)",
                 col.evaluated_by);
  } else if (col.learner_eval) {
    res.eval_loss = NAN;
    res.eval_error =
        "learner " + std::to_string(col.evaluated_by) + ": " + col.learner_eval->eval_error;
    spdlog::error("evaluating the final model: {}", res.eval_error);
  } else if (auto eval = env.model->evaluate(res.params); eval) {
    res.eval_loss = *eval;
  } else {
    res.eval_loss = NAN;
    res.eval_error = eval.error().message();
    spdlog::error("evaluating the final model: {}", res.eval_error);
  }
  // A PyTorch learner with data of its own and no evaluate= offers none, in these words
  // (python/diloco/_learner.py): the trained model is the run's result, without a loss.
  res.evaluation_offered = res.eval_error.find("no evaluation:") == std::string::npos;
  // The model the run started from, on the same set: what a diverged run ends above. Only
  // needed when the final model evaluated, and only where the runtime evaluates (not through a
  // learner's own copy).
  if (std::isfinite(res.eval_loss) && !col.learner_eval) {
    float_buffer initial(env.model->layout().buffer_floats());
    env.model->init(initial, config.seed);
    if (auto eval = env.model->evaluate(initial); eval) res.initial_loss = *eval;
  }
  return res;
}

bool run_done(const run_report& r, const run_config& config, const actor_indices& ids) {
  return r.stopped && (config.mode == run_mode::data_parallel || r.shards_flushed == ids.shards);
}

status poll_until_done(caf::scoped_actor& self, caf::actor_system& sys,
                       const metrics_actor& metrics, const run_config& config,
                       const actor_indices& ids, double interval_s, run_report& last,
                       const std::function<status(const run_report&)>& each) {
  for (;;) {
    status failure;
    self->request(metrics, std::chrono::seconds(60), report_request{})
        .receive([&](run_report r) { last = r; },
                 [&](caf::error& e) {
                   failure = status(errc::io_error, "metrics did not answer: " + sys.render(e));
                 });
    if (!failure.ok()) return failure;
    if (auto s = each(last); !s.ok()) return s;
    if (run_done(last, config, ids)) return ok_status();
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

status collect_reports(caf::scoped_actor& self, caf::actor_system& sys,
                       const cluster_directory& now, const actor_env& env,
                       const std::vector<bool>* down, collected& col) {
  const run_config& config = env.config;
  const bool dp = config.mode == run_mode::data_parallel;
  const auto ask = std::chrono::seconds(60);
  status failure;
  auto on_error = [&](caf::error& e) {
    if (failure.ok())
      failure = status(errc::io_error, "collecting the run's reports: " + sys.render(e));
  };
  self->request(now.chaos, ask, report_request{})
      .receive([&](supervisor_report r) { col.supervisor = std::move(r); },
               [&](caf::error& e) { spdlog::warn("chaos report: {}", sys.render(e)); });
  for (const auto& s : now.shards) {
    self->request(s, ask, report_request{})
        .receive([&](shard_report r) { col.shards.push_back(r); }, on_error);
    if (!dp) {
      self->request(s, ask, global_request{})
          .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
    }
  }
  for (const auto& r : now.regionals) {
    self->request(r, ask, report_request{})
        .receive([&](shard_report rep) { col.regionals.push_back(rep); }, on_error);
  }
  const auto& kept = col.supervisor.learners;
  for (uint32_t l = 0; l < now.learners.size(); ++l) {
    learner_report slot_only;
    slot_only.learner = l;
    if (down == nullptr) {
      // One process: the learners the supervisor keeps up report, no other slot does.
      if (std::find(kept.begin(), kept.end(), now.learners[l]) == kept.end()) continue;
    } else if (l < down->size() && (*down)[l]) {
      col.learners.push_back(slot_only);
      continue;
    }
    bool reported = false;
    self->request(now.learners[l], ask, report_request{})
        .receive(
            [&](learner_report r) {
              col.learners.push_back(r);
              reported = r.steps > 0;
            },
            [&](caf::error& e) {
              spdlog::warn("learner {} did not report: {}", l, sys.render(e));
              col.learners.push_back(slot_only);
            });
    if (reported && !col.learner_eval && config.compute != compute_mode::cost &&
        !env.model->runnable().ok()) {
      self->request(now.learners[l], ask, global_request{true})
          .receive(
              [&](global_snapshot g) {
                col.learner_eval = std::move(g);
                col.evaluated_by = l;
              },
              [&](caf::error& e) {
                spdlog::warn("learner {} did not evaluate: {}", l, sys.render(e));
              });
    }
  }
  if (dp && !now.learners.empty()) {
    self->request(now.learners[0], ask, global_request{})
        .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
  }
  return failure;
}

}  // namespace diloco::harness
