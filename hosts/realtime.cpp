#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "hosts/harness.hpp"
#include "hosts/simulation.hpp"
#include "runtime/shared_clock.hpp"

namespace diloco {

using namespace harness;

result<sim_result> run_realtime(const run_config& config, const realtime_options& options) {
  env_hooks hooks;
  hooks.tape = options.tape;
  hooks.observer = options.observer;
  hooks.model = options.model;
  auto env_r = local_run_env(config, false, hooks);
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  const auto wall_start = std::chrono::steady_clock::now();

  caf::actor_system_config cfg;
  make_quiet(cfg);
  if (options.threads > 0) cfg.set("scheduler.max-threads", static_cast<size_t>(options.threads));
  // A learner feeds itself a message per step; without a bound it would keep its worker
  // forever and starve the actors that share it (the metrics actor, a shard).
  cfg.set("scheduler.max-throughput", static_cast<size_t>(1));
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t start_ns = shared_clock_ns();
  if (config.snapshot.enabled()) {
    return status(
        errc::invalid_argument,
        "snapshot.dir: snapshots are taken in simulation (diloco simulate); real-time and "
        "deployed runs do not take them yet");
  }
  const auto dir = spawn_cluster(sys, env, nullptr);
  const cluster_directory& h = *dir;
  start_cluster(h, nullptr);
  const bool dp = config.mode == run_mode::data_parallel;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };

  collected col;
  const status watched = poll_until_done(
      self, sys, h.metrics, config, env->ids, options.progress_interval_s, col.run,
      [&](const run_report& r) -> status {
        if (options.on_progress) options.on_progress(r.tokens);
        if (options.timeout_s > 0 && elapsed() > options.timeout_s) {
          return status(errc::io_error,
                        "run did not finish within " + std::to_string(options.timeout_s) + " s");
        }
        return ok_status();
      });
  if (!watched.ok()) {
    stop_cluster(h);
    return watched;
  }
  // The run's length as the metrics actor saw it (on the shared clock, runtime/transport.hpp),
  // not as this loop's polling noticed it.
  const int64_t end_ns = dp ? col.run.stop_time_ns : col.run.end_time_ns;
  const double run_wall_s = end_ns > start_ns ? to_s(end_ns - start_ns) : elapsed();
  if (dp) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // in-flight steps finish

  if (auto s = collect_reports(self, sys, h, *env, nullptr, col); !s.ok()) {
    stop_cluster(h);
    return s;
  }
  stop_cluster(h);

  auto res = assemble(config, *env, std::move(col));
  if (!res) return res;
  res->run_wall_s = run_wall_s;
  res->virtual_s = run_wall_s;
  res->wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

}  // namespace diloco
