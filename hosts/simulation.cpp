#include "hosts/simulation.hpp"

#include "base/job_pool.hpp"
#include "hosts/harness.hpp"

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/test_actor_clock.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/logger.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <optional>
#include <thread>

#include "actors/chaos.hpp"
#include "actors/coordinator.hpp"
#include "actors/cost_learner.hpp"
#include "actors/dp_learner.hpp"
#include "actors/metrics.hpp"
#include "actors/scheduler.hpp"
#include "actors/state_io.hpp"
#include "actors/syncer.hpp"
#include "base/check.hpp"
#include "protocol/digest.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/wire.hpp"
#include "runtime/timeline.hpp"
#include "tensor/codec.hpp"

namespace diloco {

uint64_t sim_result::tokens() const {
  return run.tokens;
}

// Goodput (docs/observability.md): chip-time spent computing inner steps over the chip-time
// of every member learner, up or down. Learners that train report their completed steps'
// chip-time; cost-model learners compute whenever they are up and not paused, which the chaos
// actor integrates exactly.
double sim_result::goodput() const {
  const double working =
      config.compute == compute_mode::cost ? supervisor.computing_chip_s : run.chip_s;
  return supervisor.provisioned_chip_s > 0 ? working / supervisor.provisioned_chip_s : 0.0;
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

uint64_t sim_result::wide_area_bytes() const {
  uint64_t b = 0;
  for (const auto& s : shards) b += s.bytes_sent + s.bytes_received;
  return b;
}

int64_t sim_result::idle_ns() const {
  int64_t t = 0;
  for (const auto& l : learners) t += l.idle_ns;
  return t;
}

std::string missing_result(const sim_result& r) {
  if (r.config.compute != compute_mode::real || !r.evaluation_offered) return "";
  char text[256];
  if (!std::isfinite(r.eval_loss)) {
    std::snprintf(text, sizeof text, "the final model does not evaluate to a finite loss (%s)",
                  r.eval_error.empty() ? (std::isnan(r.eval_loss) ? "NaN" : "infinite")
                                       : r.eval_error.c_str());
    return text;
  }
  if (std::isfinite(r.initial_loss) && r.eval_loss > r.initial_loss) {
    std::snprintf(text, sizeof text,
                  "the final model's loss %.4g is above the initial model's %.4f: the run "
                  "diverged",
                  r.eval_loss, r.initial_loss);
    return text;
  }
  return "";
}

std::vector<std::string> check_invariants(const sim_result& r) {
  std::vector<std::string> bad;
  const run_config& c = r.config;
  std::vector<const shard_report*> slots;  // the shards, then the regional syncers
  for (const auto& s : r.shards) slots.push_back(&s);
  for (const auto& s : r.regionals) slots.push_back(&s);
  for (const shard_report* sp : slots) {
    const shard_report& s = *sp;
    const std::string who =
        s.shard < static_cast<uint32_t>(c.shards)
            ? "shard " + std::to_string(s.shard)
            : "regional syncer " + std::to_string(s.shard - static_cast<uint32_t>(c.shards));
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
  // Liveness: a real-compute run ends when its budget is spent; one that went quiet before
  // (nothing left in flight) stalled, whatever its counters say.
  if (c.compute == compute_mode::real && !r.interrupted && !r.run.stopped) {
    bad.push_back("the run went quiet after " + std::to_string(r.run.tokens) + " of " +
                  std::to_string(c.token_budget) + " tokens, before its budget was spent");
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

namespace {

// Runs ready actors in a seeded order and advances virtual time, until nothing is left.
class driver {
 public:
  driver(caf::scheduler::test_coordinator& sched, sim_timeline& timeline, int64_t scale,
         uint64_t seed, const sim_options& options)
      : sched_(sched),
        clock_(dynamic_cast<caf::detail::test_actor_clock&>(sched.clock())),
        timeline_(timeline),
        scale_(scale),
        slot_ns_(ns_per_slot(scale)),
        order_(derive_seed(seed, "sim.interleave", 0)),
        options_(options) {
    timeline_.clock_now = &clock_.current_time;
  }
  // What is still in flight holds its receivers: it goes before the actor system.
  ~driver() {
    timeline_.clock_now = nullptr;
    timeline_.clear();
  }
  driver(const driver&) = delete;
  driver& operator=(const driver&) = delete;

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
        counted();
      }
      if (!pending() || (halt != nullptr && *halt)) return;
      // Time moves only here: the model as it stands before the clock passes a due evaluation.
      if (on_time && next_time_s_ > 0) {
        const double next_event_s = to_s((next_due() - start_tick()) / scale_ * slot_ns_);
        while (next_time_s_ <= next_event_s) {
          on_time(next_time_s_);
          next_time_s_ += every_s_;
        }
      }
      deliver_next();
    }
  }
  // Calls on_time(t) for t = every, 2 every, ... as the clock passes them (0: never).
  // A resumed run starts from the first multiple after its resume time.
  void call_every(double every_s, std::function<void(double)> f) {
    every_s_ = every_s;
    next_time_s_ = every_s > 0 ? (std::floor(virtual_s() / every_s) + 1) * every_s : 0;
    on_time = std::move(f);
  }

  // Simulated time: the clock counts ticks (runtime/transport.hpp), env.tick_scale per slot of
  // ns_per_slot nanoseconds.
  double virtual_s() const {
    return to_s((sched_.clock().now() - start_) / std::chrono::nanoseconds(1) / scale_ * slot_ns_);
  }
  int64_t start_ns() const { return start_tick() / scale_ * slot_ns_; }
  uint64_t events() const { return events_; }
  std::function<void()> on_demand;  // a snapshot was asked for (sim_options::snapshot_now)
  // A resumed run: the clock continues from `tick` (the run itself started at start_).
  void resume_at(int64_t tick) {
    clock_.current_time = caf::actor_clock::time_point{std::chrono::nanoseconds(tick)};
  }

 private:
  static int64_t ticks_of(caf::actor_clock::time_point t) {
    return t.time_since_epoch() / std::chrono::nanoseconds(1);
  }
  int64_t start_tick() const { return ticks_of(start_); }
  // Deliveries in flight: the run's own (the timeline) and CAF's (a request's timeout).
  bool pending() const { return !timeline_.empty() || sched_.has_pending_timeout(); }
  bool caf_first() const {
    return sched_.has_pending_timeout() &&
           (timeline_.empty() ||
            ticks_of(clock_.schedule().begin()->first) < timeline_.next_tick());
  }
  int64_t next_due() const {
    return caf_first() ? ticks_of(clock_.schedule().begin()->first) : timeline_.next_tick();
  }
  // The earliest delivery, as CAF's test clock would make it: the clock moves to its tick
  // (never back: a restored channel's message may be due before the resumed clock).
  void deliver_next() {
    if (caf_first()) {
      sched_.trigger_timeout();
      return;
    }
    sim_timeline::entry e = timeline_.take_next();
    const caf::actor_clock::time_point at{std::chrono::nanoseconds(e.tick)};
    if (at > clock_.current_time) clock_.current_time = at;
    // No actor is ready (the loop delivers only then), so every mailbox is empty: enqueued,
    // the message would make its receiver the only job, and the next run_once would hand it
    // to the receiver's behavior. The receiver takes it here at once instead, without the
    // mailbox and the scheduler in between: the same event (counted as one), in the same
    // order. Not when a snapshot was just asked for: the loop takes that request first.
    const bool snapshot_asked = options_.snapshot_now != nullptr && options_.snapshot_now->load();
    caf::scheduled_actor* receiver =
        sched_.has_job() || snapshot_asked ? nullptr : scheduled(*e.dest);
    if (receiver == nullptr) {
      e.dest->enqueue(std::move(e.msg), nullptr);
      return;
    }
    const auto taken = receiver->activate(sched_.system().dummy_execution_unit(), *e.msg);
    // A skipped message would be lost here; no role sets a behavior that skips one.
    DILOCO_CHECK(taken != caf::scheduled_actor::activation_result::skipped,
                 "simulation: a role skipped a message delivered straight to its behavior");
    counted();
  }
  // The actor as a scheduled actor (nullptr if it is not one), found once per actor: a
  // dynamic_cast per event would cost more than the round trip it saves.
  caf::scheduled_actor* scheduled(caf::actor_control_block& who) {
    const auto id = static_cast<size_t>(who.id());
    if (id >= scheduled_.size()) scheduled_.resize(id + 1, {false, nullptr});
    auto& [known, actor] = scheduled_[id];
    if (!known) {
      actor = dynamic_cast<caf::scheduled_actor*>(caf::actor_cast<caf::abstract_actor*>(&who));
      known = true;
    }
    return actor;
  }
  // One event done: counted, and the progress callback every progress_every_events events.
  void counted() {
    ++events_;
    if (--until_progress_ == 0) {  // without a division per event
      until_progress_ = std::max<uint64_t>(1, options_.progress_every_events);
      if (options_.on_progress) options_.on_progress(virtual_s(), events_);
    }
  }

  caf::scheduler::test_coordinator& sched_;
  caf::detail::test_actor_clock& clock_;
  sim_timeline& timeline_;
  int64_t scale_;
  int64_t slot_ns_;
  rng order_;
  const sim_options& options_;
  uint64_t events_ = 0;
  uint64_t until_progress_ = std::max<uint64_t>(1, options_.progress_every_events);
  std::vector<std::pair<bool, caf::scheduled_actor*>> scheduled_;  // by actor id (scheduled())
  caf::actor_clock::time_point start_ = sched_.clock().now();
  std::function<void(double)> on_time;
  double every_s_ = 0, next_time_s_ = 0;
};

// The global model as the shards hold it now, read between two events of the simulation (no
// message, no change to any actor); nullopt while a shard is restarting.
std::optional<float_buffer> global_model_now(const cluster_directory& h, const actor_env& env) {
  float_buffer params = env.fragments_base();
  for (const auto& handle : h.shards) {
    auto* a = caf::actor_cast<caf::abstract_actor*>(handle);
    auto* shard = dynamic_cast<caf::stateful_actor<shard_state, shard_actor::base>*>(a);
    DILOCO_CHECK(shard != nullptr, "global_model_now: a shard slot without a shard actor");
    if (!shard->state.alive()) return std::nullopt;
    for (const auto& f : shard->state.owned) {
      const fragment& frag = env.plan.fragments.at(f.id);
      if (f.global.size() != frag.size) return std::nullopt;
      frag.scatter(f.global.data(), params.data());
    }
  }
  return params;
}

// Whether the run is over: the budget spent and every shard's final merge done, so that the
// global model can no longer change (read from the metrics actor between two events).
bool run_over(const cluster_directory& h) {
  auto* a = caf::actor_cast<caf::abstract_actor*>(h.metrics);
  auto* m = dynamic_cast<caf::stateful_actor<metrics_state, metrics_actor::base>*>(a);
  DILOCO_CHECK(m != nullptr, "run_over: the metrics slot without a metrics actor");
  return m->state.report.stopped && m->state.report.shards_flushed >= h.shards.size();
}

// Virtual time: never reached while any actor can still answer (caf::duration has no hours).
constexpr auto probe_timeout = std::chrono::seconds(365 * 24 * 3600);

// A snapshot to resume from fits this run: the same actors and tick scale, the same run, and
// every actor's part loads into a fresh state of its role.
status check_resume(const loaded_snapshot& from, const std::shared_ptr<const actor_env>& env,
                    uint64_t run_id, bool parts_checked) {
  const auto& m = from.manifest;
  if (from.parts.size() != env->ids.count() || m.tick_scale != env->tick_scale) {
    return status(errc::corrupt_data,
                  from.path + ": a snapshot of " + std::to_string(from.parts.size()) +
                      " actors at tick scale " + std::to_string(m.tick_scale) + ", this run has " +
                      std::to_string(env->ids.count()) + " at " + std::to_string(env->tick_scale));
  }
  if (run_id != 0 && m.run_id != run_id) {
    return status(errc::invalid_argument,
                  from.path + "/MANIFEST: belongs to another run (its configuration differs)");
  }
  for (uint32_t i = 0; i < from.parts.size() && !parts_checked; ++i) {
    const std::string what = from.path + "/" + m.actors[i].file;
    if (auto st = check_role(*env, i, m.actors[i].role, what); !st.ok()) return st;
    if (auto st = check_part(env, i, from.parts[i].view(), what); !st.ok()) return st;
  }
  return ok_status();
}

// Virtual time cannot block: a probe actor asks every actor for its report, and the answers
// land in `col` as the driver runs. The supervisor knows the current learners and shards
// (both may have been restarted).
void ask_for_reports(caf::actor_system& sys, const cluster_directory& h, bool dp,
                     harness::collected& col) {
  sys.spawn([&col, &h, dp](caf::event_based_actor* probe) {
    probe->request(h.metrics, probe_timeout, report_request{}).then([&col](run_report r) {
      col.run = r;
    });
    probe->request(h.coordinator, probe_timeout, report_request{})
        .then([&col](coordinator_report r) { col.snapshots = r; });
    probe->request(h.chaos, probe_timeout, report_request{})
        .then([&col, &h, probe, dp](supervisor_report r) {
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
          for (const auto& g : h.regionals) {
            probe->request(g, probe_timeout, report_request{}).then([&col](shard_report gr) {
              col.regionals.push_back(gr);
            });
          }
          if (dp && !r.learners.empty()) {
            probe->request(r.learners[0], probe_timeout, global_request{})
                .then([&col](global_snapshot g) { col.globals.push_back(std::move(g)); });
          }
        });
  });
}

// The evaluations of the global model every eval_every_s simulated seconds. At most one is in
// flight (the model family's workspace is one), reported when the next is due or the run ends:
// the same point of the run whether it ran on the pool or here.
class periodic_eval {
 public:
  explicit periodic_eval(const sim_options& options) : options_(options) {}
  periodic_eval(const periodic_eval&) = delete;
  periodic_eval& operator=(const periodic_eval&) = delete;

  void arm(driver& drive, const cluster_directory& h, std::shared_ptr<const actor_env> env) {
    drive.call_every(options_.eval_every_s,
                     [this, &h, env = std::move(env)](double t) { take(h, env, t); });
  }
  void report() {
    if (!evaluating_) return;
    const auto loss = evaluating_->second.get();
    if (loss) options_.on_eval(evaluating_->first, *loss);
    evaluating_.reset();
  }

 private:
  void take(const cluster_directory& h, const std::shared_ptr<const actor_env>& env, double t) {
    report();
    // Nothing left to evaluate, however long the clock still runs (a restart due long after
    // the run's end keeps it going).
    if (run_over(h)) return;
    auto params = global_model_now(h, *env);
    if (!params) return;  // a shard is restarting: no global model to read
    if (options_.on_eval_taken) options_.on_eval_taken(t);
    auto job = [env, params = std::move(*params)] { return env->model->evaluate(params); };
    if (env->ahead) {
      evaluating_.emplace(t, env->ahead->submit(std::move(job)));
    } else {
      std::promise<result<double>> now;
      now.set_value(job());
      evaluating_.emplace(t, now.get_future());
    }
  }

  const sim_options& options_;
  std::optional<std::pair<double, std::future<result<double>>>> evaluating_;
};

}  // namespace

using namespace harness;

namespace {

// Bytes of memory the kernel says are available now (MemAvailable), or 0 when unknown.
uint64_t memory_available() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

std::string gigabytes(uint64_t bytes) {
  char buf[32];
  if (bytes < uint64_t{1000000000}) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  }
  return buf;
}

}  // namespace

// A run that would not fit in the memory available is refused before it starts: it would
// grow until the kernel killed it, with no word. The estimate is what simulations here
// measured: about 8 model sizes and 2 MiB per learner slot (its 6 model-sized buffers,
// docs/architecture.md "Memory per role", the step computed ahead, batches, its actor), the
// shards 4 per model byte, 64 MiB for the process (the default model: 8.6 MB per learner
// against 8.8 measured at 256 learners; 100M parameters: 8 model sizes per learner against
// 9.9 with the shard's share). A PyTorch learner's module holds more beside.
status check_memory(const run_config& config, uint64_t model_floats, uint64_t available) {
  if (config.compute == compute_mode::cost || available == 0) return ok_status();
  const uint64_t model_bytes = model_floats * sizeof(float);
  const auto learners = static_cast<uint64_t>(config.learner_capacity());
  const uint64_t per_learner = 8 * model_bytes + (uint64_t{2} << 20);
  const uint64_t needed = learners * per_learner + 4 * model_bytes + (uint64_t{64} << 20);
  if (needed <= available) return ok_status();
  return status(errc::invalid_argument,
                std::to_string(learners) + " learners of a model of " + gigabytes(model_bytes) +
                    " need about " + gigabytes(needed) + " of memory (about " +
                    gigabytes(per_learner) + " per learner: 8 model sizes and its batches), and " +
                    gigabytes(available) +
                    " are available now: use fewer learners, a smaller model, or the cost model "
                    "(--set compute=cost --set duration_s=...) for failure studies at this scale");
}

result<sim_result> run_simulation(const run_config& config, const sim_options& options) {
  DILOCO_CHECK(options.threads >= 1, "simulation: at least one thread");
  DILOCO_CHECK(options.trace || !options.tape, "simulation: a taped run is traced");
  // Cost-model learners compute nothing: no threads for them. Nor for a run of one learner
  // slot: its steps ahead would have no other learner's to run beside, only hand its work
  // between threads (a PyTorch learner ran at 0.8x of its bare loop with them, 1.0x without).
  auto ahead =
      options.threads > 1 && config.compute != compute_mode::cost && config.learner_capacity() > 1
          ? std::make_shared<job_pool>(options.threads)
          : nullptr;
  auto timeline = std::make_shared<sim_timeline>();
  auto env_r = local_run_env(config, true,
                             {options.tape, nullptr, options.observer, options.model, ahead,
                              timeline, options.trace, ahead});
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  if (env->model) {
    if (auto st = check_memory(config, env->model->layout().buffer_floats(), memory_available());
        !st.ok())
      return st;
  }
  const auto wall_start = std::chrono::steady_clock::now();

  caf::actor_system_config cfg;
  make_quiet(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  driver drive(sched, *timeline, env->tick_scale,
               config.interleave_seed != 0 ? config.interleave_seed : config.seed, options);

  const loaded_snapshot* from = options.resume.get();
  if (from != nullptr) {
    if (auto st = check_resume(*from, env, options.run_id, options.resume_checked); !st.ok())
      return st;
    drive.resume_at(from->manifest.resume_tick);
  }
  bool halt = false;
  auto ctx = std::make_shared<snapshot_context>();
  ctx->run_id = options.run_id;
  ctx->config_text = options.config_text;
  ctx->on_commit = [&options, &halt](uint64_t n, const std::string& path, uint64_t bytes,
                                     double write_s) {
    if (options.on_snapshot) options.on_snapshot(n, path, bytes, write_s);
    if (options.stop_after_snapshot != 0 && n >= options.stop_after_snapshot) halt = true;
  };
  const auto dir = spawn_cluster(sys, env, ctx);
  const cluster_directory& h = *dir;
  drive.on_demand = [&h, env] {
    snapshot_request ask;
    ask.st.sender = env->ids.coordinator();
    caf::anon_send(h.coordinator, ask);
  };
  periodic_eval evals(options);
  if (options.eval_every_s > 0 && options.on_eval && config.mode != run_mode::data_parallel &&
      config.compute == compute_mode::real) {
    evals.arm(drive, h, env);
  }
  // CAF tells its logger which actor runs at every turn (a lock and a hash per event) even
  // with logging off. Every turn of this system runs on this thread, and CAF logs nothing
  // here (make_quiet): this thread gets no logger (a spawn sets it again, so after the last).
  caf::logger::set_current_actor_system(nullptr);
  start_cluster(h, from);
  if (options.resume) options.resume->parts.clear();  // the actors' start messages hold them
  const auto run_start = std::chrono::steady_clock::now();
  drive.run_until_quiet(&halt);
  // The run proper is over: no evaluation reads the shards while they stop or report.
  drive.call_every(0, nullptr);
  evals.report();
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
  ask_for_reports(sys, h, dp, col);
  drive.run_until_quiet();
  stop_cluster(h);
  drive.run_until_quiet();

  auto res = assemble(config, *env, std::move(col));
  if (!res) return res;
  if (!options.trace) res->trace_hash = 0;  // the actors' traces are all 0: nothing to combine
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

}  // namespace diloco
