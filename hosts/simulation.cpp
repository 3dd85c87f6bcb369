#include "hosts/simulation.hpp"
#include "hosts/harness.hpp"

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/test_actor_clock.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduler/test_coordinator.hpp>
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
#include "actors/metrics.hpp"
#include "actors/scheduler.hpp"
#include "actors/state_io.hpp"
#include "actors/syncer.hpp"
#include "protocol/digest.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/wire.hpp"
#include "tensor/codec.hpp"

namespace diloco {

uint64_t sim_result::tokens() const {
  return run.tokens;
}

double sim_result::goodput() const {
  const double total =
      static_cast<double>(config.chips_per_learner) * config.learners * supervisor.observed_s;
  return total > 0 ? supervisor.computing_chip_s / total : 0.0;
}

double sim_result::uptime() const {
  return supervisor.observed_s > 0 ? supervisor.uptime_s / supervisor.observed_s : 0.0;
}

uint64_t sim_result::learner_bytes() const {
  // Through the progress reports, so the bytes of learners that died count too, plus what the
  // live learners moved after their last report (the final flush).
  uint64_t b = run.learner_bytes;
  for (const auto& l : learners) b += l.bytes_sent + l.bytes_received - l.reported_bytes;
  return b;
}

int64_t sim_result::idle_ns() const {
  int64_t t = 0;
  for (const auto& l : learners) t += l.idle_ns;
  return t;
}

std::vector<std::string> check_invariants(const sim_result& r) {
  std::vector<std::string> bad;
  const run_config& c = r.config;
  for (const auto& s : r.shards) {
    const std::string who = "shard " + std::to_string(s.shard);
    if (s.double_merges > 0)
      bad.push_back(who + ": " + std::to_string(s.double_merges) + " sends merged twice");
    const uint64_t accounted = s.sends_merged + s.deltas_dropped_stale + s.deltas_invalid +
                               s.pending_at_end + s.deltas_lost_in_crash;
    if (c.mode != run_mode::data_parallel && s.deltas_received != accounted) {
      bad.push_back(who + ": " + std::to_string(s.deltas_received) + " deltas arrived but " +
                    std::to_string(accounted) + " are merged, dropped or pending");
    }
  }
  for (const auto& l : r.learners) {
    if (l.version_regressions > 0) {
      bad.push_back("learner " + std::to_string(l.learner) + ": saw a version go back " +
                    std::to_string(l.version_regressions) + " times");
    }
  }
  // Version accounting across a shard's restart: fragment p lives on shard p mod shards, at
  // position p / shards there. A recovered fragment starts from at least the newest version any
  // learner had seen when the shard went away; otherwise merged updates were lost.
  const auto S = static_cast<size_t>(c.shards);
  for (const auto& s : r.shards) {
    for (size_t slot = 0; slot < s.recovered_versions.size(); ++slot) {
      const size_t p = s.shard + slot * S;
      for (const auto& l : r.learners) {
        if (p < l.versions_at_shard_loss.size() &&
            l.versions_at_shard_loss[p] > s.recovered_versions[slot]) {
          bad.push_back("shard " + std::to_string(s.shard) + " recovered fragment " +
                        std::to_string(p) + " at version " +
                        std::to_string(s.recovered_versions[slot]) + " but learner " +
                        std::to_string(l.learner) + " had seen version " +
                        std::to_string(l.versions_at_shard_loss[p]) + ": merged updates lost");
        }
      }
    }
  }
  // Convergence: fragment p lives on shard p mod shards, at position p / shards there.
  const bool converges = r.run.stopped && c.mode != run_mode::data_parallel &&
                         r.shards.size() == static_cast<size_t>(c.shards);
  for (const auto& l : r.learners) {
    if (!converges) break;
    for (size_t p = 0; p < l.versions.size(); ++p) {
      const auto& s = r.shards[p % static_cast<size_t>(c.shards)];
      const size_t slot = p / static_cast<size_t>(c.shards);
      if (slot >= s.versions.size()) continue;
      if (l.versions[p] != s.versions[slot] || l.global_hashes[p] != s.global_hashes[slot]) {
        bad.push_back("learner " + std::to_string(l.learner) + " ended with fragment " +
                      std::to_string(p) + " at version " + std::to_string(l.versions[p]) +
                      ", the shard at " + std::to_string(s.versions[slot]) +
                      (l.versions[p] == s.versions[slot] ? " (values differ)" : ""));
      }
    }
  }
  return bad;
}

namespace harness {

caf::actor spawn_actor(caf::actor_system& sys, const std::shared_ptr<const actor_env>& env,
                       const directory_ptr& dir, uint32_t index,
                       std::shared_ptr<const snapshot_context> ctx) {
  const run_config& c = env->config;
  const auto& ids = env->ids;
  const bool dp = c.mode == run_mode::data_parallel;
  auto untyped = [](const auto& h) { return caf::actor_cast<caf::actor>(h); };
  if (index < ids.learners) {
    if (c.compute == compute_mode::cost) return untyped(sys.spawn(cost_learner, env, index, dir));
    if (!env->virtual_time) {
      // In real time a learner computes without pause: its own thread keeps it on one core
      // with a warm cache, instead of being moved between the scheduler's workers.
      return dp ? untyped(sys.spawn<caf::detached>(dp_learner, env, index, dir))
                : untyped(sys.spawn<caf::detached>(learner, env, index, dir));
    }
    return dp ? untyped(sys.spawn(dp_learner, env, index, dir))
              : untyped(sys.spawn(learner, env, index, dir));
  }
  if (index < ids.scheduler()) return untyped(sys.spawn(syncer, env, index - ids.learners, dir));
  if (index == ids.scheduler()) return untyped(sys.spawn(fragment_scheduler, env, dir));
  if (index == ids.metrics()) return untyped(sys.spawn(metrics, env, dir));
  if (index == ids.chaos()) return untyped(sys.spawn(chaos, env, dir));
  return untyped(sys.spawn(snapshot_coordinator, env, dir, std::move(ctx)));
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
  for (uint32_t i : order) place(*dir, ids, i, spawn_actor(sys, env, dir, i, ctx));
  return dir;
}

// Every actor begins, once all of them are wired: fresh, or from its part of a snapshot.
void start_cluster(const actor_env& env, const cluster_directory& dir, const loaded_snapshot* from,
                   int64_t now_tick) {
  for (uint32_t i = 0; i < dir.learners.size() + dir.shards.size() + 4; ++i) {
    start_msg start;
    if (from != nullptr) start.restore = tensor_blob(from->parts[i]);
    if (env.tape != nullptr) {
      env.tape->input(i, tape_kind::start, now_tick, wire_tag_of<start_msg>(),
                      caf::make_message(start), message_digest(start), nullptr);
    }
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
}

int64_t clock_ticks_now(caf::actor_system& sys) {
  return sys.clock().now().time_since_epoch() / std::chrono::nanoseconds(1);
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
  std::sort(res.learners.begin(), res.learners.end(),
            [](const learner_report& a, const learner_report& b) { return a.learner < b.learner; });
  std::sort(res.shards.begin(), res.shards.end(),
            [](const shard_report& a, const shard_report& b) { return a.shard < b.shard; });

  res.trace_hash = mix(res.run.trace, res.supervisor.trace);
  for (const auto& s : res.shards) res.trace_hash = mix(res.trace_hash, s.trace);
  for (const auto& l : res.learners) res.trace_hash = mix(res.trace_hash, l.trace);
  res.entropy_rate = env.data->entropy_rate_nats();
  if (config.compute == compute_mode::cost) {
    res.eval_loss = NAN;  // no model was trained
    return res;
  }
  // The final model: every fragment's global value, laid back into the parameter layout.
  res.params = float_buffer(env.model.layout().buffer_floats());
  env.model.init(res.params, config.seed);
  std::vector<float> local;
  for (const auto& g : col.globals) {
    for (size_t i = 0; i < g.fragments.size(); ++i) {
      const fragment& f = env.plan.fragments.at(g.fragments[i]);
      local.resize(f.size);
      if (auto s = decode(g.values[i].view(), fspan(local.data(), f.size)); !s.ok()) {
        return s.with_context("final value of fragment " + std::to_string(f.id));
      }
      f.scatter(local.data(), res.params.data());
    }
  }
  auto ws = env.model.make_workspace(256);
  res.eval_loss = evaluate(env.model, res.params, *env.data, ws);
  return res;
}

// Runs ready actors in a seeded order and advances virtual time, until nothing is left.
class driver {
 public:
  driver(caf::scheduler::test_coordinator& sched, int64_t scale, uint64_t seed,
         const sim_options& options)
      : sched_(sched),
        scale_(scale),
        order_(derive_seed(seed, "sim.interleave", 0)),
        options_(options) {}

  // Until nothing is left to do, or until `halt` is set (checked between events).
  void run_until_quiet(const bool* halt = nullptr) {
    for (;;) {
      while (sched_.has_job()) {
        if (halt != nullptr && *halt) return;
        if (options_.snapshot_now != nullptr && options_.snapshot_now->exchange(false) && on_demand)
          on_demand();
        const size_t n = sched_.jobs.size();
        if (n > 1) std::swap(sched_.jobs[0], sched_.jobs[order_.below(n)]);
        sched_.run_once();
        if (++events_ % options_.progress_every_events == 0 && options_.on_progress) {
          options_.on_progress(virtual_s(), events_);
        }
      }
      if (!sched_.has_pending_timeout() || (halt != nullptr && *halt)) return;
      sched_.trigger_timeout();
    }
  }

  // Simulated time: the clock counts ticks (runtime/transport.hpp), env.tick_scale per nanosecond.
  double virtual_s() const {
    return to_s((sched_.clock().now() - start_) / std::chrono::nanoseconds(1) / scale_);
  }
  int64_t start_ns() const {
    return start_.time_since_epoch() / std::chrono::nanoseconds(1) / scale_;
  }
  uint64_t events() const { return events_; }
  std::function<void()> on_demand;  // a snapshot was asked for (sim_options::snapshot_now)
  // A resumed run: the clock continues from `tick` (the run itself started at start_).
  void resume_at(int64_t tick) {
    auto& clock = dynamic_cast<caf::detail::test_actor_clock&>(sched_.clock());
    clock.current_time = caf::actor_clock::time_point{std::chrono::nanoseconds(tick)};
  }

 private:
  caf::scheduler::test_coordinator& sched_;
  int64_t scale_;
  rng order_;
  const sim_options& options_;
  uint64_t events_ = 0;
  caf::actor_clock::time_point start_ = sched_.clock().now();
};

// Virtual time: never reached while any actor can still answer (caf::duration has no hours).
constexpr auto probe_timeout = std::chrono::seconds(365 * 24 * 3600);

}  // namespace harness

using namespace harness;

result<sim_result> run_simulation(const run_config& config, const sim_options& options) {
  auto env_r = actor_env::make(config, true, {options.tape, nullptr, options.observer});
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  const auto wall_start = std::chrono::steady_clock::now();

  caf::actor_system_config cfg;
  make_quiet(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  driver drive(sched, env->tick_scale,
               config.interleave_seed != 0 ? config.interleave_seed : config.seed, options);

  const loaded_snapshot* from = options.resume.get();
  if (from != nullptr) {
    const auto& m = from->manifest;
    if (from->parts.size() != env->ids.count() || m.tick_scale != env->tick_scale) {
      return status(errc::corrupt_data,
                    from->path + ": a snapshot of " + std::to_string(from->parts.size()) +
                        " actors at tick scale " + std::to_string(m.tick_scale) +
                        ", this run has " + std::to_string(env->ids.count()) + " at " +
                        std::to_string(env->tick_scale));
    }
    if (options.run_id != 0 && m.run_id != options.run_id) {
      return status(errc::invalid_argument,
                    from->path + "/MANIFEST: belongs to another run (its configuration differs)");
    }
    for (uint32_t i = 0; i < from->parts.size(); ++i) {
      const std::string what = from->path + "/" + m.actors[i].file;
      if (auto s =
              check_part(env, i, byte_view(from->parts[i].data(), from->parts[i].size()), what);
          !s.ok())
        return s;
    }
    drive.resume_at(m.resume_tick);
  }
  bool halt = false;
  auto ctx = std::make_shared<snapshot_context>();
  ctx->run_id = options.run_id;
  ctx->config_text = options.config_text;
  ctx->on_commit = [&options, &halt](uint64_t n, const std::string& path) {
    if (options.on_snapshot) options.on_snapshot(n, path);
    if (options.stop_after_snapshot != 0 && n >= options.stop_after_snapshot) halt = true;
  };
  const auto dir = spawn_cluster(sys, env, ctx);
  const cluster_directory& h = *dir;
  drive.on_demand = [&h, env] {
    snapshot_request ask;
    ask.st.sender = env->ids.coordinator();
    caf::anon_send(h.coordinator, ask);
  };
  start_cluster(*env, h, from, clock_ticks_now(sys));
  const auto run_start = std::chrono::steady_clock::now();
  drive.run_until_quiet(&halt);
  if (halt) {
    stop_cluster(h);
    drive.run_until_quiet();
    sim_result cut;
    cut.config = config;
    cut.interrupted = true;
    cut.events = drive.events();
    cut.virtual_s = drive.virtual_s();
    cut.resumed_from = from != nullptr ? from->manifest.snapshot : 0;
    return cut;
  }
  const double run_wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();

  // The run is over when nothing is left to do; now ask every actor what happened.
  collected col;
  const bool dp = config.mode == run_mode::data_parallel;
  sys.spawn([&col, &h, dp](caf::event_based_actor* probe) {
    probe->request(h.metrics, probe_timeout, report_request{}).then([&col](run_report r) {
      col.run = r;
    });
    probe->request(h.coordinator, probe_timeout, report_request{})
        .then([&col](coordinator_report r) { col.snapshots = r; });
    // The supervisor knows the current learners and shards (both may have been restarted).
    probe->request(h.chaos, probe_timeout, report_request{})
        .then([&col, probe, dp](supervisor_report r) {
          col.supervisor = r;
          for (const auto& s : r.shards) {
            probe->request(s, probe_timeout, report_request{}).then([&col](shard_report sr) {
              col.shards.push_back(sr);
            });
            if (!dp) {
              probe->request(s, probe_timeout, global_request{}).then([&col](global_snapshot g) {
                col.globals.push_back(std::move(g));
              });
            }
          }
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
  stop_cluster(h);
  drive.run_until_quiet();

  auto res = assemble(config, *env, std::move(col));
  if (!res) return res;
  res->events = drive.events();
  res->run_wall_s = run_wall_s;
  res->resumed_from = from != nullptr ? from->manifest.snapshot : 0;
  // The run's length: until the last shard flushed (or the stop, for data parallel), not until
  // the last timer that fired afterwards.
  const int64_t end_ns = dp ? res->run.stop_time_ns : res->run.end_time_ns;
  res->virtual_s = end_ns > 0 ? to_s(end_ns - drive.start_ns()) : drive.virtual_s();
  res->wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

result<sim_result> run_realtime(const run_config& config, const realtime_options& options) {
  auto env_r = actor_env::make(config, false, {options.tape, nullptr, options.observer});
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
  start_cluster(*env, h, nullptr, clock_ticks_now(sys));
  const bool dp = config.mode == run_mode::data_parallel;
  const auto ask = std::chrono::seconds(60);
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };

  // Done when the budget is spent and every shard had its final merge (data parallel has no
  // final merge: done when stopped).
  collected col;
  for (;;) {
    status failure;
    self->request(h.metrics, ask, report_request{})
        .receive([&](run_report r) { col.run = r; },
                 [&](caf::error& e) {
                   failure = status(errc::io_error, "metrics did not answer: " + sys.render(e));
                 });
    if (!failure.ok()) return failure;
    if (options.on_progress) options.on_progress(col.run.tokens);
    if (col.run.stopped && (dp || col.run.shards_flushed == env->ids.shards)) break;
    if (options.timeout_s > 0 && elapsed() > options.timeout_s) {
      stop_cluster(h);
      return status(errc::io_error,
                    "run did not finish within " + std::to_string(options.timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(options.progress_interval_s));
  }
  // The run's length as the metrics actor saw it (on the shared clock, runtime/transport.hpp),
  // not as this loop's polling noticed it.
  const int64_t end_ns = dp ? col.run.stop_time_ns : col.run.end_time_ns;
  const double run_wall_s = end_ns > start_ns ? to_s(end_ns - start_ns) : elapsed();
  if (dp) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // in-flight steps finish

  auto on_error = [&](caf::error& e) {
    spdlog::warn("collecting the run's reports: {}", sys.render(e));
  };
  for (const auto& s : h.shards) {
    self->request(s, ask, report_request{})
        .receive([&](shard_report r) { col.shards.push_back(r); }, on_error);
    if (!dp) {
      self->request(s, ask, global_request{})
          .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
    }
  }
  self->request(h.chaos, ask, report_request{})
      .receive([&](supervisor_report r) { col.supervisor = std::move(r); }, on_error);
  for (const auto& l : col.supervisor.learners) {
    self->request(l, ask, report_request{})
        .receive([&](learner_report r) { col.learners.push_back(r); }, on_error);
  }
  if (dp && !col.supervisor.learners.empty()) {
    self->request(col.supervisor.learners[0], ask, global_request{})
        .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
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

namespace diloco {

namespace {

// Compares what replayed actors send with the tape (runtime/tape.hpp).
class replay_checker final : public tape_hook {
 public:
  replay_checker(const tape& t, const std::vector<bool>& selected) : selected_(selected) {
    expected_.resize(t.header.roles.size());
    cursor_.assign(t.header.roles.size(), 0);
    input_.assign(t.header.roles.size(), 0);
    input_seq_.assign(t.header.roles.size(), 0);
    for (const auto& e : t.events) {
      if (e.kind == tape_kind::sent) expected_[e.actor].push_back(&e);
    }
  }
  bool replaying() const override { return true; }
  void input(uint32_t, tape_kind, int64_t, int, const caf::message&, uint64_t,
             const stamp*) override {}

  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override {
    if (actor >= selected_.size() || !selected_[actor] || divergence) return;
    const uint64_t k = cursor_[actor]++;
    const auto& exp = expected_[actor];
    const std::string got = describe(type, dest, digest);
    if (k >= exp.size()) {
      diverge(actor, k, tick, "sent " + got + ", the recording has no send " + std::to_string(k),
              {}, st.clock.ticks());
      return;
    }
    const tape_event& e = *exp[k];
    if (e.type != type || e.peer != dest || e.digest != digest) {
      diverge(actor, k, tick,
              "sent " + got + ", the recording has " + describe(e.type, e.peer, e.digest), e.clock,
              st.clock.ticks());
      return;
    }
    if (e.clock != st.clock.ticks()) {
      diverge(actor, k, tick, "sent " + got + " as recorded but with another vector clock", e.clock,
              st.clock.ticks());
      return;
    }
    ++checked;
  }

  void timer_mismatch(uint32_t actor, int64_t due, int64_t now) override {
    if (actor >= selected_.size() || !selected_[actor] || divergence) return;
    diverge(actor, cursor_[actor], now,
            "a timer fired at tick " + std::to_string(now) +
                " but the actor's next timer is due at " + std::to_string(due),
            {}, {});
  }

  void state(uint32_t, std::vector<uint8_t> bytes, std::string summary) override {
    if (!want_state) return;  // a snapshot the replayed coordinator started, not ours
    state_bytes = std::move(bytes);
    state_summary = std::move(summary);
  }

  // The actor's input `index` (tape position `seq`) is being handled.
  void at_input(uint32_t actor, uint64_t index, uint64_t seq) {
    input_[actor] = index;
    input_seq_[actor] = seq;
  }
  // After the last input: a selected actor that sent less than the recording diverged too.
  void finish() {
    for (uint32_t a = 0; a < selected_.size() && !divergence; ++a) {
      if (!selected_[a] || cursor_[a] >= expected_[a].size()) continue;
      const tape_event& e = *expected_[a][cursor_[a]];
      diverge(a, cursor_[a], e.tick,
              "sent nothing more; the recording has " + describe(e.type, e.peer, e.digest) +
                  " and " + std::to_string(expected_[a].size() - cursor_[a] - 1) + " more",
              e.clock, {});
    }
  }

  std::optional<replay_divergence> divergence;
  uint64_t checked = 0;
  bool want_state = false;
  std::vector<uint8_t> state_bytes;
  std::string state_summary;

 private:
  static std::string describe(int type, uint32_t dest, uint64_t digest) {
    char d[24];
    std::snprintf(d, sizeof d, "%016llx", static_cast<unsigned long long>(digest));
    return wire_tag_name(type) + " to actor " + std::to_string(dest) + " (digest " + d + ")";
  }
  void diverge(uint32_t actor, uint64_t sent_index, int64_t tick, std::string what,
               std::vector<uint64_t> recorded, std::vector<uint64_t> replayed) {
    replay_divergence d;
    d.actor = actor;
    d.input_index = input_[actor];
    d.input_seq = input_seq_[actor];
    d.tick = tick;
    d.sent_index = sent_index;
    d.what = std::move(what);
    d.recorded_clock = std::move(recorded);
    d.replayed_clock = std::move(replayed);
    divergence = std::move(d);
  }

  std::vector<bool> selected_;
  std::vector<std::vector<const tape_event*>> expected_;
  std::vector<uint64_t> cursor_, input_, input_seq_;
};

void enqueue(const caf::actor& dest, caf::message msg) {
  auto ptr = caf::actor_cast<caf::strong_actor_ptr>(dest);
  ptr->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::move(msg)),
               nullptr);
}

}  // namespace

result<replay_result> replay_tape(const run_config& config, const tape& t,
                                  const replay_options& options) {
  const size_t actors = t.header.roles.size();
  if (options.actor >= static_cast<int64_t>(actors)) {
    return status(errc::invalid_argument, "--actor " + std::to_string(options.actor) +
                                              ": the tape has actors 0.." +
                                              std::to_string(actors - 1));
  }
  if (options.until >= 0 && options.actor < 0)
    return status(errc::invalid_argument, "--until needs --actor: whose input number it is");
  std::vector<bool> selected(actors, options.actor < 0);
  if (options.actor >= 0) selected[static_cast<size_t>(options.actor)] = true;
  auto checker = std::make_shared<replay_checker>(t, selected);
  auto env_r = actor_env::make(config, t.header.virtual_time, {checker, nullptr, nullptr});
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  if (env->ids.count() != actors ||
      (t.header.virtual_time && env->tick_scale != t.header.tick_scale)) {
    return status(errc::invalid_argument, t.path + ": a tape of " + std::to_string(actors) +
                                              " actors, the configuration has " +
                                              std::to_string(env->ids.count()));
  }

  caf::actor_system_config cfg;
  make_quiet(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto& clock = dynamic_cast<caf::detail::test_actor_clock&>(sched.clock());
  const auto dir = spawn_cluster(sys, env, std::make_shared<snapshot_context>());
  // Whatever happens, the actors end before the system does (its destructor waits for them).
  struct stopper {
    const cluster_directory& dir;
    caf::scheduler::test_coordinator& sched;
    ~stopper() {
      stop_cluster(dir);
      while (sched.has_job()) sched.run_once();
    }
  } stop_at_exit{*dir, sched};

  replay_result out;
  for (uint32_t a = 0; a < actors; ++a) {
    if (selected[a]) out.actors.push_back(a);
  }
  std::vector<uint64_t> inputs(actors, 0);
  uint64_t total = 0;
  for (const auto& e : t.events) total += e.kind != tape_kind::sent && selected[e.actor] ? 1 : 0;
  for (const auto& e : t.events) {
    if (e.kind == tape_kind::sent || !selected[e.actor]) continue;
    const uint64_t index = inputs[e.actor]++;
    if (options.until >= 0 && e.actor == static_cast<uint32_t>(options.actor) &&
        index == static_cast<uint64_t>(options.until)) {
      if (options.at_until) options.at_until(e);
      // A marker asks the actor for its state (runtime/snapshot.hpp, replaying).
      checker->want_state = true;
      enqueue(dir->at(e.actor), caf::make_message(marker_msg{env->ids.coordinator(), UINT64_MAX}));
      while (sched.has_job()) sched.run_once();
      out.stopped_at_until = true;
      break;
    }
    auto msg = tape_message(t, e);
    if (!msg) return msg.error();
    if (caf::actor_clock::time_point{std::chrono::nanoseconds(e.tick)} > clock.current_time)
      clock.current_time = caf::actor_clock::time_point{std::chrono::nanoseconds(e.tick)};
    checker->at_input(e.actor, index, e.seq);
    enqueue(dir->at(e.actor), std::move(*msg));
    while (sched.has_job()) sched.run_once();
    ++out.inputs;
    if (options.on_progress && out.inputs % 4096 == 0) options.on_progress(out.inputs, total);
    if (checker->divergence) break;
  }
  if (!out.stopped_at_until && !checker->divergence && t.complete) checker->finish();
  if (options.until >= 0 && !out.stopped_at_until && !checker->divergence) {
    return status(errc::invalid_argument,
                  "--until " + std::to_string(options.until) + ": actor " +
                      std::to_string(options.actor) + " has only " +
                      std::to_string(inputs[static_cast<size_t>(options.actor)]) +
                      " inputs on the tape");
  }
  out.divergence = checker->divergence;
  out.sends_checked = checker->checked;
  out.state = std::move(checker->state_bytes);
  out.summary = std::move(checker->state_summary);
  return out;
}

}  // namespace diloco
