#include "actors/simulation.hpp"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <chrono>

#include "actors/chaos.hpp"
#include "actors/metrics.hpp"
#include "actors/scheduler.hpp"
#include "actors/syncer.hpp"
#include "protocol/type_ids.hpp"
#include "tensor/codec.hpp"

namespace diloco {

uint64_t sim_result::tokens() const {
  return run.tokens;
}

uint64_t sim_result::learner_bytes() const {
  uint64_t b = 0;
  for (const auto& l : learners) b += l.bytes_sent + l.bytes_received;
  return b;
}

int64_t sim_result::idle_ns() const {
  int64_t t = 0;
  for (const auto& l : learners) t += l.idle_ns;
  return t;
}

namespace {

struct collected {
  run_report run;
  supervisor_report supervisor;
  std::vector<learner_report> learners;
  std::vector<shard_report> shards;
  std::vector<global_snapshot> globals;
};

// Runs ready actors in a seeded order and advances virtual time, until nothing is left.
class driver {
 public:
  driver(caf::scheduler::test_coordinator& sched, uint64_t seed, const sim_options& options)
      : sched_(sched), order_(derive_seed(seed, "sim.interleave", 0)), options_(options) {}

  void run_until_quiet() {
    for (;;) {
      while (sched_.has_job()) {
        const size_t n = sched_.jobs.size();
        if (n > 1) std::swap(sched_.jobs[0], sched_.jobs[order_.below(n)]);
        sched_.run_once();
        if (++events_ % options_.progress_every_events == 0 && options_.on_progress) {
          options_.on_progress(virtual_s(), events_);
        }
      }
      if (!sched_.has_pending_timeout()) return;
      sched_.trigger_timeout();
    }
  }

  double virtual_s() const {
    return std::chrono::duration<double>(sched_.clock().now() - start_).count();
  }
  uint64_t events() const { return events_; }

 private:
  caf::scheduler::test_coordinator& sched_;
  rng order_;
  const sim_options& options_;
  uint64_t events_ = 0;
  caf::actor_clock::time_point start_ = sched_.clock().now();
};

// Virtual time: never reached while any actor can still answer (caf::duration has no hours).
constexpr auto probe_timeout = std::chrono::seconds(365 * 24 * 3600);

}  // namespace

result<sim_result> run_simulation(const run_config& config, const sim_options& options) {
  auto env_r = actor_env::make(config, true);
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  const auto wall_start = std::chrono::steady_clock::now();

  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  register_protocol(cfg);
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  driver drive(sched, config.seed, options);

  auto metrics_h = sys.spawn(metrics, env);
  auto scheduler_h = sys.spawn(fragment_scheduler, env);
  std::vector<shard_actor> shards;
  for (uint32_t s = 0; s < env->ids.shards; ++s)
    shards.push_back(sys.spawn(syncer, env, s, metrics_h));
  auto supervisor_h = sys.spawn(chaos, env, learner_peers{scheduler_h, shards, metrics_h});
  drive.run_until_quiet();

  // The run is over when nothing is left to do; now ask every actor what happened.
  collected col;
  const bool dp = config.mode == run_mode::data_parallel;
  sys.spawn([&col, metrics_h, shards, supervisor_h, dp](caf::event_based_actor* probe) {
    probe->request(metrics_h, probe_timeout, report_request{}).then([&col](run_report r) {
      col.run = r;
    });
    for (const auto& s : shards) {
      probe->request(s, probe_timeout, report_request{}).then([&col](shard_report r) {
        col.shards.push_back(r);
      });
      if (!dp) {
        probe->request(s, probe_timeout, global_request{}).then([&col](global_snapshot g) {
          col.globals.push_back(std::move(g));
        });
      }
    }
    probe->request(supervisor_h, probe_timeout, report_request{})
        .then([&col, probe, dp](supervisor_report r) {
          col.supervisor = r;
          for (const auto& l : r.learners) {
            probe->request(l, probe_timeout, report_request{}).then([&col](learner_report lr) {
              col.learners.push_back(lr);
            });
          }
          if (dp && !r.learners.empty()) {
            probe->request(r.learners[0], probe_timeout, global_request{})
                .then([&col](global_snapshot g) { col.globals.push_back(std::move(g)); });
          }
        });
  });
  drive.run_until_quiet();

  // Actors live until told otherwise; the system's destructor waits for all of them.
  for (const auto& l : col.supervisor.learners)
    caf::anon_send_exit(l, caf::exit_reason::user_shutdown);
  for (const auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(metrics_h, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(scheduler_h, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(supervisor_h, caf::exit_reason::user_shutdown);
  drive.run_until_quiet();

  sim_result res;
  res.config = config;
  res.run = col.run;
  res.supervisor = col.supervisor;
  res.learners = std::move(col.learners);
  res.shards = std::move(col.shards);
  std::sort(res.learners.begin(), res.learners.end(),
            [](const learner_report& a, const learner_report& b) { return a.learner < b.learner; });
  std::sort(res.shards.begin(), res.shards.end(),
            [](const shard_report& a, const shard_report& b) { return a.shard < b.shard; });
  res.events = drive.events();
  res.virtual_s = col.run.end_time_ns > 0 ? drive.virtual_s() : drive.virtual_s();

  // The final model: every fragment's global value, laid back into the parameter layout.
  res.params = float_buffer(env->model.layout().buffer_floats());
  env->model.init(res.params, config.seed);
  std::vector<float> local;
  for (const auto& g : col.globals) {
    for (size_t i = 0; i < g.fragments.size(); ++i) {
      const fragment& f = env->plan.fragments.at(g.fragments[i]);
      local.resize(f.size);
      if (auto s = decode(g.values[i].view(), fspan(local.data(), f.size)); !s.ok()) {
        return s.with_context("final value of fragment " + std::to_string(f.id));
      }
      f.scatter(local.data(), res.params.data());
    }
  }
  auto ws = env->model.make_workspace(256);
  res.eval_loss = evaluate(env->model, res.params, *env->data, ws);
  res.entropy_rate = env->data->entropy_rate_nats();
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

}  // namespace diloco
