// `diloco simulate`: a whole cluster in one process on virtual time, deterministic in
// (config, seed). Optionally the baselines on the same model, data and token budget.
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <variant>

#include "apps/commands.hpp"
#include "apps/parallel.hpp"
#include "apps/progress.hpp"
#include "apps/run_options.hpp"
#include "base/check.hpp"
#include "checkpoint/model_file.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "config/cluster_file.hpp"
#include "config/identity.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/resume_check.hpp"
#include "hosts/simulation.hpp"
#include "observe/log_format.hpp"
#include "observe/monitor.hpp"
#include "runtime/env.hpp"

namespace diloco {

namespace {

// SIGUSR1: a snapshot now (the run sees the flag between two events).
std::atomic<bool> snapshot_asked{false};
extern "C" void on_sigusr1(int) {
  snapshot_asked.store(true);
}

struct system_row {
  std::string name;
  sim_result r;
};

void print_row(const system_row& row) {
  const sim_result& r = row.r;
  const double tokens = static_cast<double>(r.tokens());
  uint64_t merges = 0, dropped = 0, late = 0, rejected = 0;
  for (const auto& s : r.shards) {
    merges += s.merges;
    dropped += s.deltas_dropped_stale;
    late += s.deltas_late;
    rejected += s.rejected_messages;
  }
  double busy = 0, idle = 0;
  for (const auto& l : r.learners) {
    busy += to_s(l.busy_ns);
    idle += to_s(l.idle_ns);
  }
  // Above the loss floor of the evaluation set (the true model's loss on it), in percent of
  // it; n/a where it is unknown (text).
  char above[32] = "n/a";
  if (r.eval_floor > 0 && std::isfinite(r.eval_loss)) {
    std::snprintf(above, sizeof above, "%.2f%%",
                  100.0 * (r.eval_loss - r.eval_floor) / r.eval_floor);
  }
  std::printf("%-10s %9.4f %11s %10s %12.1f %8llu %7llu %7llu %9.1f%% %8.1f\n", row.name.c_str(),
              r.eval_loss, above, human_count(tokens).c_str(),
              static_cast<double>(r.learner_bytes()) / tokens,
              static_cast<unsigned long long>(merges), static_cast<unsigned long long>(late),
              static_cast<unsigned long long>(dropped + rejected),
              busy + idle > 0 ? 100.0 * idle / (busy + idle) : 0.0, r.virtual_s);
}

void print_learners(const sim_result& r) {
  std::printf(
      "  learner  tokens    steps  sent      received  idle s   late  restarts  last loss\n");
  // Tokens and steps as each slot reported them over all its incarnations: the figures of
  // metrics.jsonl, summing to the run's tokens.
  const auto reported = [](const std::vector<uint64_t>& v, size_t slot) {
    return slot < v.size() ? v[slot] : 0;
  };
  size_t slots = r.run.learner_tokens.size();
  for (const auto& l : r.learners) slots = std::max<size_t>(slots, l.learner + 1);
  for (size_t slot = 0; slot < slots; ++slot) {
    const auto tokens = human_count(static_cast<double>(reported(r.run.learner_tokens, slot)));
    const auto steps = static_cast<unsigned long long>(reported(r.run.learner_steps, slot));
    const auto l = std::find_if(r.learners.begin(), r.learners.end(),
                                [slot](const auto& x) { return x.learner == slot; });
    if (l != r.learners.end()) {
      std::printf("  %7zu  %-8s  %-6llu %-9s %-9s %7.1f %6llu %9u  %.4f\n", slot, tokens.c_str(),
                  steps, human_count(static_cast<double>(l->bytes_sent)).c_str(),
                  human_count(static_cast<double>(l->bytes_received)).c_str(), to_s(l->idle_ns),
                  static_cast<unsigned long long>(l->late_updates), l->incarnation, l->last_loss);
    } else if (reported(r.run.learner_tokens, slot) > 0) {
      // Trained, but no process at the end (killed and not restarted, or left): its process's
      // own counters ended with it.
      std::printf("  %7zu  %-8s  %-6llu %-9s %-9s %7s %6s %9s  %s\n", slot, tokens.c_str(), steps,
                  "-", "-", "-", "-", "-", "no process at the end");
    }
  }
}

// The snapshot to continue from, and the run's configuration: the one in its manifest. A
// configuration given on the command line must be the same run (snapshot settings aside).
struct resume_plan {
  loaded_snapshot snapshot;
  run_config config;
};

result<resume_plan> resume_from(const std::string& dir, uint64_t only, const run_options& o) {
  auto choice = choose_snapshot(dir, only != 0 ? std::optional<uint64_t>(only) : std::nullopt,
                                check_snapshot_loads);
  if (!choice) return choice.error();
  for (const auto& why : choice->skipped) {
    std::fprintf(stderr, "diloco simulate: skipping %s\n", why.c_str());
  }
  if (!choice->skipped.empty()) {
    std::fprintf(stderr, "diloco simulate: falling back to %s\n", choice->snapshot.path.c_str());
  }
  resume_plan plan;
  plan.snapshot = std::move(choice->snapshot);
  const auto& m = plan.snapshot.manifest;
  const std::string where = plan.snapshot.path + "/MANIFEST";
  auto reopened = reopen_recorded(m.config_text, where, m.run_id);
  if (!reopened) return reopened.error();
  plan.config = *reopened;
  if (!o.cluster_file.empty() || !o.sets.empty()) {
    auto given = resolve_run_options(o, &plan.config);
    if (!given) return given.error();
    if (run_identity(*given) != m.run_id) {
      std::string diff;
      for (const auto& d : run_differences(*given, plan.config)) diff += "\n  " + d;
      return status(errc::invalid_argument,
                    where +
                        ": belongs to another run: the configuration given differs from the "
                        "snapshot's (leave it out to use the snapshot's; see it with --resume " +
                        dir + " --print-config); given vs the snapshot's:" + diff);
    }
    plan.config = *given;  // the same run; snapshot settings may differ
  }
  // New snapshots go where the user points: the directory resumed from, unless a flag or the
  // file names another. Never the directory recorded in the manifest: that may be the
  // original a user copied from, and pruning would delete its snapshots.
  bool dir_given = false;
  for (const auto& [key, value] : o.sets) dir_given = dir_given || key == "snapshot.dir";
  if (!o.cluster_file.empty() && plan.config.snapshot.dir != reopened->snapshot.dir)
    dir_given = true;
  if (!dir_given && plan.config.snapshot.enabled()) plan.config.snapshot.dir = dir;
  if (auto st = plan.config.validate(); !st.ok()) return st.with_context(where);
  return plan;
}

// The flags of diloco simulate beyond the run options.
struct simulate_flags {
  std::string save_model_path;
  bool realtime = false;
  std::string tape_path;
  double tape_max_bytes = 0;
  std::string resume_dir;
  uint64_t resume_snapshot = 0;
  uint64_t stop_after = 0;
  bool tolerate_divergence = false;
  double eval_every_s = -1;  // < 0: about ten evaluations over the run
  int threads = machine_threads();
  std::string system;  // --system: a baseline as the main run ("": the cluster's mode)
  monitor_options monitor;
};

void bind_simulate_flags(cli::arg_parser& parser, run_options& o, simulate_flags& f) {
  bind_run_options(parser, o);
  parser.option(
      "compare", &o.compare,
      "also run these baselines (comma separated): dp (data parallel), diloco (synchronous "
      "DiLoCo with this run's settings), vanilla (DiLoCo as published)");
  parser.option(
      "system",
      [&f](const std::string& v) {
        if (v != "dp" && v != "diloco" && v != "vanilla")
          return status(errc::invalid_argument,
                        "unknown system '" + v + "' (expected dp, diloco or vanilla)");
        f.system = v;
        return status{};
      },
      "NAME", "",
      "run this baseline of the cluster instead of its own mode, as --compare builds it: dp, "
      "diloco or vanilla (tuning each system on its own settings)");
  parser.option(
      "eval-every",
      [&f](const std::string& v) {
        auto x = text::parse_seconds(v);
        if (!x) return x.error();
        if (!(*x >= 0 && *x <= time_max_s))
          return status(errc::invalid_argument, "must be in [0, 1e9] simulated seconds");
        f.eval_every_s = *x;
        return status{};
      },
      "S", "",
      "evaluate the global model every S simulated seconds, logged and in metrics.jsonl "
      "(default: ten times over the run; 0: only at the end; not for data parallel)");
  parser.option("save-model", &f.save_model_path, "write the final global model to this file");
  parser.option(
      "threads",
      [&f](const std::string& v) {
        auto x = text::parse_uint(v);
        if (!x) return x.error();
        if (*x < 1 || *x > 1024) return status(errc::invalid_argument, "must be in [1, 1024]");
        f.threads = static_cast<int>(*x);
        return status{};
      },
      "N", std::to_string(machine_threads()),
      "threads for the learners' computation (each computes its next step ahead); the run is "
      "the same for any number, its trace hash included");
  auto alias = [&parser, &o](const std::string& flag, const std::string& key,
                             const std::string& metavar, const std::string& help) {
    parser.option(
        flag,
        [&o, key](const std::string& v) {
          o.sets.emplace_back(key, v);
          return status();
        },
        metavar, "", help + " (key " + key + ")");
  };
  alias("snapshot-dir", "snapshot.dir", "DIR", "write Chandy-Lamport snapshots under DIR");
  alias("snapshot-every", "snapshot.every_s", "S", "a snapshot every S simulated seconds");
  alias("snapshot-every-steps", "snapshot.every_steps", "N",
        "a snapshot every N inner steps of the cluster");
  alias("snapshot-at", "snapshot.at_s", "LIST", "snapshots at these simulated times, e.g. 100,250");
  parser.flag("realtime", &f.realtime,
              "run on CAF's threaded scheduler in real time (not deterministic): the placement "
              "of a deployment in one process");
  parser.option("tape", &f.tape_path,
                "record the run to this replay tape (diloco replay; never written over)");
  parser.option("tape-max-bytes", &f.tape_max_bytes, tape_max_bytes_help);
  parser.option(
      "resume", &f.resume_dir,
      "continue the run from the newest usable snapshot under DIR (its configuration comes "
      "from the snapshot; flags may only repeat it or change snapshot settings)");
  parser.option("resume-snapshot", &f.resume_snapshot,
                "with --resume: this snapshot number, not the newest");
  parser.option("stop-after-snapshot", &f.stop_after,
                "stop the run once snapshot N is written, as if the process died there");
  parser.flag("tolerate-divergence", &f.tolerate_divergence,
              "exit 0 even if a learner's numerics went non-finite (it is still reported; "
              "without this flag such a run exits with 3)");
  bind_monitor_options(parser, f.monitor);
}

// What one system of the comparison needs beyond its configuration.
struct system_run {
  const simulate_flags& flags;
  run_monitor& mon;
  std::shared_ptr<tape_recorder> recorder;  // main run only
  std::shared_ptr<loaded_snapshot> resume;  // main run only
  bool main_run = false;
};

// Runs one system with its progress line; the result, or the exit code to end with now.
std::variant<sim_result, int> run_system(const std::string& name, const run_config& cfg,
                                         system_run& s, std::shared_ptr<live_metrics>& main_live) {
  const bool realtime = s.flags.realtime;
  // The progress estimate: the slowest learner's nominal pace over its share of the budget.
  const double expect_s =
      static_cast<double>(cfg.steps_per_learner()) * cfg.speed.step_time_s * cfg.speed.slowdown;
  // Real time counts tokens (its clock is the wall clock); simulation counts simulated seconds.
  const double total = realtime ? static_cast<double>(cfg.token_budget) : expect_s;
  progress_line progress((realtime ? "realtime " : "simulate ") + name, total,
                         realtime ? "tokens" : "sim-s");
  sim_options opts;
  opts.on_progress = [&](double virtual_s, uint64_t) {
    progress.update(std::min(virtual_s, expect_s));
  };
  if (s.main_run && cfg.snapshot.enabled()) {
    opts.run_id = run_identity(cfg);
    opts.config_text = config_as_yaml(cfg);
    opts.on_snapshot = [&progress](uint64_t n, const std::string& path, uint64_t bytes,
                                   double write_s) {
      progress.note("snapshot " + std::to_string(n) + " written: " + path + " (" +
                    snapshot_rate(bytes, write_s) + ")");
    };
    opts.stop_after_snapshot = s.flags.stop_after;
    opts.snapshot_now = &snapshot_asked;
    std::signal(SIGUSR1, on_sigusr1);
    progress.note("snapshots on demand: kill -USR1 " + std::to_string(::getpid()));
  }
  if (s.main_run) opts.tape = s.recorder;
  opts.threads = s.flags.threads;
  opts.observer = s.mon.begin(name, cfg);
  s.mon.set_ready(true);
  if (s.main_run) main_live = std::static_pointer_cast<live_metrics>(opts.observer);
  if (!realtime) {
    // Evaluations of the global model along the run, in simulated time (about ten by default).
    opts.eval_every_s = s.flags.eval_every_s < 0 ? expect_s / 10 : s.flags.eval_every_s;
    auto live = std::static_pointer_cast<live_metrics>(opts.observer);
    opts.on_eval_taken = [live](double t) {
      if (live) live->eval_taken(t);
    };
    opts.on_eval = [&progress, live, name](double t, double loss) {
      char line[160];
      std::snprintf(line, sizeof line, "%s eval at %.0f sim-s: loss %.4f", name.c_str(), t, loss);
      progress.note(line);
      if (live) live->on_eval(t, loss);
    };
  }
  if (s.main_run && s.resume) {
    opts.resume = s.resume;
    opts.resume_checked = true;  // resume_from chose it with check_snapshot_loads
    opts.run_id = run_identity(cfg);
    const double at_s = to_s(s.resume->manifest.resume_tick / s.resume->manifest.tick_scale);
    std::printf("resuming from %s (snapshot %llu, simulated time %.1f s)\n", s.resume->path.c_str(),
                static_cast<unsigned long long>(s.resume->manifest.snapshot), at_s);
    std::fflush(stdout);
    progress.begin_at(at_s);
  }
  result<sim_result> r = status(errc::invalid_argument, "");
  if (realtime) {
    realtime_options ro;
    ro.tape = opts.tape;
    ro.observer = opts.observer;
    ro.on_progress = [&](uint64_t tokens) {
      progress.update(std::min(total, static_cast<double>(tokens)));
    };
    r = run_realtime(cfg, ro);
  } else {
    r = run_simulation(cfg, opts);
  }
  if (s.main_run && s.recorder) {
    // The tape ends with the run, finished or not (a failed run's tape is the one to replay).
    if (auto st = s.recorder->close(); !st.ok()) return report_error("diloco simulate", st);
    progress.note("tape written: " + s.flags.tape_path + " (" +
                  std::to_string(s.recorder->events()) + " events, " +
                  human_count(static_cast<double>(s.recorder->bytes_written())) + "B" +
                  (s.recorder->volume() > 0
                       ? ", newest volume " + s.recorder->volume_path(s.recorder->volume())
                       : std::string()) +
                  ")");
  }
  s.mon.set_ready(false);
  s.mon.end(name, r ? &*r : nullptr);
  if (!r) return report_error("diloco simulate", r.error());
  if (r->interrupted) {
    progress.finish(std::min(r->virtual_s, expect_s),
                    "stopped after snapshot " + std::to_string(s.flags.stop_after));
    std::printf("stopped after snapshot %llu as asked; continue with --resume %s\n",
                static_cast<unsigned long long>(s.flags.stop_after), cfg.snapshot.dir.c_str());
    return 0;
  }
  char detail[128];
  std::snprintf(detail, sizeof detail, "eval loss %.4f, %llu events, trace %016llx", r->eval_loss,
                static_cast<unsigned long long>(r->events),
                static_cast<unsigned long long>(r->trace_hash));
  progress.finish(realtime ? static_cast<double>(r->tokens()) : std::min(r->virtual_s, expect_s),
                  detail);
  return std::move(r).value();
}

// The comparison table, the invariants, the chaos figures and the main run's learners.
void print_results(const std::vector<system_row>& rows) {
  std::printf("\n%-10s %9s %11s %10s %12s %8s %7s %7s %10s %8s\n", "system", "eval", "vs floor",
              "tokens", "bytes/token", "merges", "late", "dropped", "idle", "sim s");
  for (const auto& row : rows) print_row(row);
  if (rows[0].r.entropy_rate > 0 && rows[0].r.config.compute == compute_mode::real) {
    std::printf(
        "entropy rate of the data: %.4f nats/token; the true model's loss on the evaluation set "
        "(the floor 'vs floor' is above): %.4f\n",
        rows[0].r.entropy_rate, rows[0].r.eval_floor);
  }
  for (const auto& row : rows) {
    const auto violations = check_invariants(row.r);
    uint64_t lost_network = 0, lost_partition = 0, duplicates = 0, stale = 0;
    for (const auto& l : row.r.learners) {
      lost_network += l.lost_deltas_network;
      lost_partition += l.lost_deltas_partition;
    }
    for (const auto& s : row.r.shards) {
      duplicates += s.deltas_dropped_duplicate;
      stale += s.deltas_dropped_stale;
    }
    std::printf(
        "%s: invariants %s; deltas dropped: %llu stale, %llu duplicate, %llu lost on links, %llu "
        "in partitions\n",
        row.name.c_str(), violations.empty() ? "held" : "VIOLATED",
        static_cast<unsigned long long>(stale), static_cast<unsigned long long>(duplicates),
        static_cast<unsigned long long>(lost_network),
        static_cast<unsigned long long>(lost_partition));
    for (const auto& v : violations) std::printf("  violation: %s\n", v.c_str());
  }
  // Goodput for every system (docs/observability.md: chip-time of completed inner steps over
  // provisioned chip-time); the failures behind it when there were any.
  for (const auto& row : rows) {
    const auto& sup = row.r.supervisor;
    std::printf("%s: goodput %.2f%%, uptime %.2f%%", row.name.c_str(), 100.0 * row.r.goodput(),
                100.0 * row.r.uptime());
    if (sup.interruptions + sup.kills > 0) {
      std::printf(", %llu interruptions, %u kill%s, %u restarts, %llu rescales",
                  static_cast<unsigned long long>(sup.interruptions), sup.kills,
                  sup.kills == 1 ? "" : "s", sup.restarts,
                  static_cast<unsigned long long>(sup.rescales));
    }
    std::printf("\n");
  }
  // With regions: what crossed the wide-area links (every byte a shard slot sent or received;
  // a regional syncer's learners reach it over their region's own network).
  if (!rows[0].r.config.regions.empty()) {
    for (const auto& row : rows) {
      std::printf("%s: wide-area %.1f bytes/token", row.name.c_str(),
                  static_cast<double>(row.r.wide_area_bytes()) /
                      std::max(1.0, static_cast<double>(row.r.tokens())));
      if (!row.r.regionals.empty()) {
        uint64_t merges = 0, deltas = 0, local = 0;
        for (const auto& g : row.r.regionals) {
          merges += g.merges;
          deltas += g.deltas_merged;
          local += g.bytes_sent + g.bytes_received;
        }
        std::printf(
            " (%zu regional syncers: %llu merges of %llu learner deltas, %.1f bytes/token "
            "in and out of them)",
            row.r.regionals.size(), static_cast<unsigned long long>(merges),
            static_cast<unsigned long long>(deltas),
            static_cast<double>(local) / std::max(1.0, static_cast<double>(row.r.tokens())));
      }
      std::printf("\n");
    }
  }
  std::printf("\n%s learners:\n", rows[0].name.c_str());
  print_learners(rows[0].r);
}

// What Decoupled DiLoCo is for: how many merges went ahead without every learner.
void print_partial_merges(const std::string& name, const run_config& c, const live_metrics& live) {
  if (c.mode != run_mode::decoupled) return;  // the baselines merge every live learner
  const auto n = live.quorum_merge_counts();
  std::printf(
      "%s: %llu of %llu merges (%.1f%%) went ahead without all %u learners\n", name.c_str(),
      static_cast<unsigned long long>(n.partial), static_cast<unsigned long long>(n.quorum),
      n.quorum > 0 ? 100.0 * static_cast<double>(n.partial) / static_cast<double>(n.quorum) : 0.0,
      c.learners);
}

void print_alerts(const live_metrics& live) {
  std::string text;
  uint64_t total = 0;
  for (const auto& [kind, n] : live.alert_counts()) {
    text += (text.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
    total += n;
  }
  std::printf("alerts: %s%s\n", text.c_str(), total > 0 ? " (see the log above)" : "");
}

// 1 if an invariant broke, 3 if a system has no result (its final model does not evaluate,
// or evaluates worse than its initial model) or a learner diverged (unless tolerated), else 0.
int exit_code_of(const std::vector<system_row>& rows, bool tolerate_divergence) {
  for (const auto& row : rows) {
    if (!check_invariants(row.r).empty()) return 1;
  }
  std::string missing;
  for (const auto& row : rows) {
    if (const std::string why = missing_result(row.r); !why.empty())
      missing += row.name + ": " + why + " (a run without a result: exit 3)\n";
  }
  if (!missing.empty()) {
    missing.pop_back();
    report_error("diloco simulate", status(errc::non_finite, missing));
    return 3;
  }
  size_t diverged = 0;
  for (const auto& row : rows) {
    for (const auto& d : row.r.run.diverged) {
      std::printf("%s: learner %u diverged at step %llu: %s\n", row.name.c_str(), d.learner,
                  static_cast<unsigned long long>(d.step), d.what.c_str());
      ++diverged;
    }
  }
  if (diverged > 0 && !tolerate_divergence) {
    std::fprintf(stderr,
                 "diloco simulate: %zu learner(s) stopped (non-finite numerics, or their step "
                 "failed; see above): exit 3 (--tolerate-divergence to accept)\n",
                 diverged);
    return 3;
  }
  return 0;
}

}  // namespace

namespace {

// --tape: the recorder the run writes its inputs to.
status open_tape(const simulate_flags& f, const run_config& config, system_run& sr) {
  if (f.tape_path.empty()) return ok_status();
  auto rec = tape_recorder::create(
      f.tape_path,
      make_tape_header(config, run_identity(config), config_as_yaml(config), !f.realtime));
  if (!rec) return rec.error();
  if (f.realtime) (*rec)->flush_every(tape_flush_s);
  (*rec)->bound(static_cast<uint64_t>(f.tape_max_bytes));
  sr.recorder = *rec;
  return ok_status();
}

// A baseline as --compare and --system build it from the cluster's configuration.
run_config baseline_of(const std::string& name, const run_config& base) {
  if (name == "dp") return as_data_parallel(base);
  if (name == "diloco") return as_sync_diloco(base);
  DILOCO_CHECK(name == "vanilla", "a baseline named dp, diloco or vanilla");
  return as_vanilla_diloco(base);
}

// The main run (the cluster's own mode, or --system's baseline), then each --compare
// baseline, every one checked before any runs.
result<std::vector<std::pair<std::string, run_config>>> systems_to_run(
    const run_config& config, const std::string& system, const std::vector<std::string>& compare,
    bool resuming) {
  if (resuming && !compare.empty())
    return status(errc::invalid_argument, "--resume continues one run; it takes no --compare");
  if (resuming && !system.empty())
    return status(errc::invalid_argument,
                  "--resume continues one run as it was; it takes no --system");
  std::vector<std::pair<std::string, run_config>> systems = {{to_string(config.mode), config}};
  if (!system.empty()) systems[0] = {system, baseline_of(system, config)};
  for (const auto& name : compare) {
    // Baselines take no snapshots (they would mix into the main run's directory).
    run_config base = config;
    base.snapshot = snapshot_config{};
    run_config b = baseline_of(name, base);
    if (name == "dp" && (!b.failures.empty() || b.interruptions.enabled())) {
      // Data parallel has no elasticity: its replicas hold the only copy of the model, and
      // one lost replica stops it. Beside a run with failures it is the failure-free reference.
      b.failures.clear();
      b.interruptions = decltype(b.interruptions){};
      std::printf(
          "--compare dp: data parallel has no elasticity (its replicas hold the only copy of "
          "the model): it runs without the failures, as the failure-free reference\n");
    }
    systems.emplace_back(name, std::move(b));
  }
  // A system the configuration cannot run is refused now, not after the main run.
  for (size_t i = 0; i < systems.size(); ++i) {
    if (i == 0 && system.empty()) continue;  // the cluster's own run was checked when loaded
    if (auto st = systems[i].second.validate(); !st.ok()) {
      const std::string flag = i == 0 ? "--system " : "--compare ";
      return status(st.code(), flag + systems[i].first + ": " + st.message());
    }
  }
  return systems;
}

}  // namespace

int run_simulate(int argc, const char* const* argv) {
  return run_simulate(argc, argv, simulate_take());
}

int run_simulate(int argc, const char* const* argv, const simulate_take& take) {
  run_options o;
  simulate_flags f;
  cli::arg_parser parser(
      "diloco simulate",
      "Runs a Decoupled DiLoCo cluster in one process on virtual time: learners,\n"
      "syncer shards, the fragment scheduler and the metrics actor as CAF actors on a\n"
      "seeded deterministic scheduler. The same config and seed give the same run.\n"
      "With --compare, also runs the baselines on the same model, data and budget.");
  bind_simulate_flags(parser, o, f);
  if (auto st = parser.parse(argc, argv); !st.ok()) {
    // The configuration's own mistakes in the same pass as the flags'.
    // The parser's last line points at --help; it stays last.
    std::string all = st.message();
    if (f.resume_dir.empty()) {
      if (auto config = resolve_run_options(o); !config) {
        const size_t last = all.rfind('\n');
        all = all.substr(0, last) + "\n" + config.error().message() + all.substr(last);
      }
    }
    return report_error("diloco simulate", status(st.code(), all));
  }
  if (parser.help_requested()) {
    std::fputs(parser.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;
  std::shared_ptr<loaded_snapshot> resume;
  result<run_config> config = run_config{};
  if (!f.resume_dir.empty()) {
    auto chosen = resume_from(f.resume_dir, f.resume_snapshot, o);
    if (!chosen) return report_error("diloco simulate", chosen.error());
    resume = std::make_shared<loaded_snapshot>(std::move(chosen->snapshot));
    config = std::move(chosen->config);
  } else {
    config = resolve_run_options(o);
  }
  if (!config) return report_error("diloco simulate", config.error());
  set_log_run(run_identity(*config));  // in each JSON log line
  if (o.print_config) {
    std::fputs(config_as_yaml(*config).c_str(), stdout);
    return 0;
  }
  auto compare = parse_compare_list(o.compare);
  if (!compare) return report_error("diloco simulate", compare.error());
  auto monitor = run_monitor::start(f.monitor);
  if (!monitor) return report_error("diloco simulate", monitor.error());
  run_monitor& mon = **monitor;
  system_run sr{f, mon, nullptr, resume, true};
  if (auto st = check_tape_max_bytes(f.tape_max_bytes, f.tape_path); !st.ok())
    return report_error("diloco simulate", st);
  auto systems = systems_to_run(*config, f.system, *compare, resume != nullptr);
  if (!systems) return report_error("diloco simulate", systems.error());
  // The tape records the main run as it runs (--system's baseline, if one).
  if (auto st = open_tape(f, (*systems)[0].second, sr); !st.ok())
    return report_error("diloco simulate", st);
  std::printf("diloco simulate: seed %llu, %d thread%s\n",
              static_cast<unsigned long long>(config->seed), f.threads, f.threads == 1 ? "" : "s");
  std::printf("%s\n", describe_run((*systems)[0].second).c_str());
  if (config->deploy.enabled()) {
    std::printf(
        "deployment: %zu nodes in the cluster file; this run is one process (diloco node "
        "runs one node)\n",
        config->deploy.nodes.size());
  }
  if (!mon.url().empty()) std::printf("metrics: %s (and /status)\n", mon.url().c_str());
  std::fflush(stdout);

  std::vector<system_row> rows;
  std::shared_ptr<live_metrics> main_live;
  for (auto& [name, cfg] : *systems) {
    sr.main_run = rows.empty();
    auto r = run_system(name, cfg, sr, main_live);
    if (auto* code = std::get_if<int>(&r)) return *code;
    rows.push_back({name, std::move(std::get<sim_result>(r))});
  }
  print_results(rows);
  if (!mon.run_dir().empty()) {
    if (auto st = mon.write_summary(); !st.ok()) return report_error("diloco simulate", st);
    std::printf("run directory: %s (diloco report %s)\n", mon.run_dir().c_str(),
                mon.run_dir().c_str());
  }
  if (main_live) {
    print_partial_merges(rows[0].name, rows[0].r.config, *main_live);
    print_alerts(*main_live);
  }
  mon.linger();
  if (!f.save_model_path.empty()) {
    const sim_result& main = rows[0].r;
    if (!main.model)
      return report_error("diloco simulate",
                          status(errc::invalid_argument, "--save-model: the run kept no model"));
    auto format = save_run_model(f.save_model_path, main.config.model, *main.model, main.params);
    if (!format) return report_error("diloco simulate", format.error());
    std::printf("final model saved to %s (%s)\n", f.save_model_path.c_str(), format->c_str());
  }
  std::fflush(stdout);
  if (take) {
    for (const auto& row : rows) take(row.name, row.r);
  }
  return exit_code_of(rows, f.tolerate_divergence);
}

}  // namespace diloco
