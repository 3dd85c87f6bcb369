// `diloco node`: one process of a deployed run (hosts/deploy.hpp, docs/deploy.md).
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "apps/run_options.hpp"
#include "base/checksum.hpp"
#include "checkpoint/model_file.hpp"
#include "config/identity.hpp"
#include "config/printing.hpp"
#include "hosts/deploy.hpp"
#include "observe/log_format.hpp"
#include "observe/monitor.hpp"
#include "runtime/shared_clock.hpp"

namespace diloco {

namespace {

// CAF 0.17.6 sometimes never finishes an actor system's shutdown (about one node exit in 30
// waits forever for a detached learner's thread). The run is over by then and its outcome
// reported, so this ends the process with that outcome's exit code if the shutdown has not
// finished within the grace period.
class shutdown_watchdog {
 public:
  void arm(int exit_code, std::chrono::seconds grace = std::chrono::seconds(3)) {
    thread_ = std::thread([this, exit_code, grace] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, grace, [this] { return done_; })) return;
      std::fprintf(stderr,
                   "the actor system did not shut down within %lld s (a CAF 0.17 shutdown race); "
                   "exiting with the run's outcome (%d)\n",
                   static_cast<long long>(grace.count()), exit_code);
      std::fflush(nullptr);
      std::_Exit(exit_code);
    });
  }
  void disarm() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  ~shutdown_watchdog() { disarm(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// SIGTERM and SIGINT ask the node to stop (hosts/deploy.hpp, node_options::stop_signal); a
// second one ends the process at once, as the signal's default would. The handlers are the
// node's only while it runs: the previous ones (the Python interpreter's, say) come back after.
std::atomic<int> stop_signal_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler stores into it");

extern "C" void on_stop_signal(int signal) {
  if (stop_signal_received.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

class stop_signals {
 public:
  stop_signals() {
    stop_signal_received.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 2; ++i) sigaction(signals_[i], &sa, &previous_[i]);
  }
  ~stop_signals() {
    for (size_t i = 0; i < 2; ++i) sigaction(signals_[i], &previous_[i], nullptr);
  }
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

 private:
  const int signals_[2] = {SIGTERM, SIGINT};
  struct sigaction previous_[2]{};
};

// The flags of diloco node beyond the run options.
struct node_flags {
  std::string name;
  double connect_timeout_s = 60, run_timeout_s = 0;
  double heartbeat_s = 1, peer_timeout_s = 5;
  std::string resume_dir;
  double restart_wait_s = 60;
  double stop_timeout_s = 60;
  std::string bulk = "on", front = "on";
  double bulk_min_kib = 64, bulk_limit_mib = 512;
  std::string tape_dir;
  double tape_max_bytes = 0;
  std::string save_model_path;
  monitor_options monitor;
};

void bind_node_flags(cli::arg_parser& p, run_options& o, node_flags& f) {
  bind_run_options(p, o);
  p.option("name", &f.name, "this node's name in the cluster file");
  p.seconds("connect-timeout", &f.connect_timeout_s, "seconds to wait for the other nodes");
  p.seconds("run-timeout", &f.run_timeout_s, "leader: give up after this many seconds (0: never)");
  p.seconds("heartbeat", &f.heartbeat_s, "seconds between heartbeats to the other nodes");
  p.seconds("peer-timeout", &f.peer_timeout_s,
            "a node silent for this many seconds (or whose connection closed) is gone: its "
            "actors are taken for down until its process is started again");
  p.option("resume", &f.resume_dir,
           "leader: continue the run from the most recently written snapshot of it under DIR "
           "(a deployed run's; the other nodes start as usual)");
  p.seconds("restart-wait", &f.restart_wait_s,
            "leader: seconds to wait for a gone node hosting a shard or service actor to be "
            "restarted before the run stops with an error (nodes with only learners: the run "
            "goes on without them)");
  p.seconds("stop-timeout", &f.stop_timeout_s,
            "seconds a node takes to stop on SIGTERM or SIGINT: the leader waits up to half of "
            "it for a final snapshot (snapshots on), then stops the run and reports it; another "
            "node leaves after it unless the leader ends the run first. Exit code: 128 + the "
            "signal's number (0 for a node whose run the leader ended meanwhile)");
  p.option("front", &f.front,
           "on|off: the framing front owns the node's port and lets only framed input of this "
           "run through to CAF (off: CAF listens there itself and crashes on garbage)");
  p.option("bulk", &f.bulk,
           "on|off: tensor payloads to other nodes on the bulk channel at port + 1 (plain TCP "
           "runs; off: inside CAF's connections)");
  p.option("bulk-min-kib", &f.bulk_min_kib, "payloads smaller than this stay in the message");
  p.option("bulk-limit-mib", &f.bulk_limit_mib,
           "payload bytes a node holds unclaimed from one node at most (at least the run's "
           "largest message)");
  p.option("tape", &f.tape_dir,
           "record this node's actors for diloco replay to DIR/NODE.PROCESS.tape (one tape per "
           "process of the node; collect every node's tapes to replay the run)");
  p.option("tape-max-bytes", &f.tape_max_bytes, tape_max_bytes_help);
  p.option("save-model", &f.save_model_path,
           "leader: write the final global model to this file at the end of the run "
           "(safetensors with the model's tensor names, or DLMD for the built-in MLP)");
  bind_monitor_options(p, f.monitor);
}

// The node's options from its flags and configuration, or what is wrong with them.
result<node_options> node_options_of(const node_flags& f, const run_options& o,
                                     const run_config& config) {
  if (!config.deploy.tls.enabled() && config.deploy.secret_file.empty()) {
    return status(errc::invalid_argument,
                  o.cluster_file +
                      ": secret_file: missing: a plain-TCP run needs a shared secret, or anyone "
                      "who can read the cluster file can connect to its nodes and crash them "
                      "(write one with `openssl rand -hex 32 > secret`, copy it to every host and "
                      "set secret_file: secret), or mutual TLS (tls.ca, tls.certificate, "
                      "tls.key); docs/deploy.md");
  }
  if (!(f.heartbeat_s > 0) || !(f.peer_timeout_s > f.heartbeat_s))
    return status(errc::invalid_argument, "--peer-timeout: must be more than --heartbeat (> 0)");
  if (f.front != "on" && f.front != "off")
    return status(errc::invalid_argument, "--front: '" + f.front + "': expected on or off");
  if (f.bulk != "on" && f.bulk != "off")
    return status(errc::invalid_argument, "--bulk: '" + f.bulk + "': expected on or off");
  if (!(f.bulk_min_kib >= 0) || !(f.bulk_limit_mib >= 1))
    return status(errc::invalid_argument, "--bulk-min-kib must be >= 0 and --bulk-limit-mib >= 1");
  if (auto s = check_tape_max_bytes(f.tape_max_bytes, f.tape_dir); !s.ok()) return s;
  if (!(f.restart_wait_s >= 0))
    return status(errc::invalid_argument, "--restart-wait: must be >= 0 seconds");
  for (size_t i = 0; i < config.speeds.size(); ++i) {
    if (config.speeds[i].ranks > 1)
      return status(errc::invalid_argument,
                    o.cluster_file + ": learners[" + std::to_string(i) +
                        "].ranks: an island's size is for a simulation; a deployed learner is "
                        "an island of as many ranks as torchrun starts for it (docs/python.md)");
  }
  node_options no;
  no.name = f.name;
  // Every node must run the same file: its whole text, placement included, is the identity.
  no.identity = cluster_identity(config);
  no.run_id = run_identity(config);
  set_log_run(no.run_id);
  no.resume_dir = f.resume_dir;
  no.config_text = config_as_yaml(config);
  no.connect_timeout_s = f.connect_timeout_s;
  no.run_timeout_s = f.run_timeout_s;
  no.front = f.front == "on";
  no.bulk = f.bulk == "on";
  no.bulk_min_bytes = static_cast<uint64_t>(f.bulk_min_kib * 1024);
  no.bulk_limit_bytes = static_cast<uint64_t>(f.bulk_limit_mib * 1024 * 1024);
  no.heartbeat_s = f.heartbeat_s;
  no.peer_timeout_s = f.peer_timeout_s;
  no.restart_wait_s = f.restart_wait_s;
  no.stop_timeout_s = f.stop_timeout_s;
  no.tape_dir = f.tape_dir;
  no.tape_max_bytes = static_cast<uint64_t>(f.tape_max_bytes);
  return no;
}

// Reports the node's outcome (the leader: the whole run's) and returns the exit code.
int report_node_result(const result<node_result>& r, const std::string& name, const run_config& cfg,
                       run_monitor& mon, progress_line& progress,
                       const std::string& save_model_path) {
  const std::string stopped_by = r && r->stopped_by != 0 ? signal_name(r->stopped_by) : "";
  if (r && r->leader && r->result) {
    mon.end(to_string(cfg.mode), &*r->result, stopped_by);
    if (auto st = mon.write_summary(); !st.ok()) report_error("diloco node " + name, st);
  }
  if (!r) {
    const int code = report_error("diloco node " + name, r.error());
    const int signal = stop_signal_received.load();
    return signal != 0 ? 128 + signal : code;
  }
  // Stopped by a signal: 128 + its number, as a shell reports a process the signal ended.
  const int stopped_code = r->stopped_by != 0 ? 128 + r->stopped_by : 0;
  if (!r->leader) {
    if (r->stopped_by != 0)
      std::printf("node %s: stopped by %s (the run goes on without it)\n", name.c_str(),
                  stopped_by.c_str());
    else
      std::printf("node %s: done (the leader reports the run)\n", name.c_str());
    std::fflush(stdout);
    return stopped_code;
  }
  const sim_result& res = *r->result;
  progress.finish(static_cast<double>(res.tokens()));
  const auto violations = check_invariants(res);
  char floor[64] = "";
  if (res.entropy_rate > 0)
    std::snprintf(floor, sizeof floor, " (entropy rate %.4f)", res.entropy_rate);
  std::printf("eval loss %.4f%s, %s tokens in %.1f s, %" PRIu64
              " bytes between learners and shards\n",
              res.eval_loss, floor, human_count(static_cast<double>(res.tokens())).c_str(),
              res.run_wall_s, res.learner_bytes());
  // Processes restarted mid-run, and where they picked up.
  auto list = [](const std::vector<uint64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return "[" + s + "]";
  };
  for (const auto& l : res.learners) {
    if (l.incarnation == 0) continue;
    std::printf("learner %u: process %u (restarted), %s tokens, %" PRIu64
                " steps, ended at versions %s\n",
                l.learner, l.incarnation, human_count(static_cast<double>(l.tokens)).c_str(),
                l.steps, list(l.versions).c_str());
  }
  for (const auto& s : res.shards) {
    if (s.incarnation == 0) continue;
    const std::string from =
        s.snapshot != 0 ? "snapshot " + std::to_string(s.snapshot) + " and the learners' copies"
                        : "the learners' copies";
    std::printf(
        "shard %u: process %u (restarted), recovered at versions %s from %s, then "
        "%" PRIu64 " merges to versions %s (%" PRIu64 " sends dropped as repeats)\n",
        s.shard, s.incarnation, list(s.recovered_versions).c_str(), from.c_str(), s.merges,
        list(s.versions).c_str(), s.deltas_dropped_duplicate);
  }
  for (const auto& g : res.regionals) {
    std::printf("regional syncer %u: process %u, %" PRIu64 " merges of %" PRIu64
                " learner deltas, %" PRIu64 " bytes in and out\n",
                g.shard - static_cast<uint32_t>(cfg.shards), g.incarnation, g.merges,
                g.deltas_merged, g.bytes_sent + g.bytes_received);
  }
  if (r->stopped_by != 0) {
    std::printf("stopped by %s before the budget was spent%s\n", stopped_by.c_str(),
                r->final_snapshot != 0 ? (", final snapshot " + std::to_string(r->final_snapshot) +
                                          " (continue with --resume " + cfg.snapshot.dir + ")")
                                             .c_str()
                                       : "");
  }
  std::printf("invariants %s\n", violations.empty() ? "held" : "VIOLATED");
  for (const auto& v : violations) std::printf("  violation: %s\n", v.c_str());
  if (!save_model_path.empty()) {
    if (!res.model)
      return report_error("diloco node " + name,
                          status(errc::invalid_argument, "--save-model: the run kept no model"));
    auto format = save_run_model(save_model_path, cfg.model, *res.model, res.params);
    if (!format) return report_error("diloco node " + name, format.error());
    std::printf("final model saved to %s (%s)\n", save_model_path.c_str(), format->c_str());
  }
  std::fflush(stdout);
  if (!violations.empty()) return 1;
  // A run stopped early (a signal) may have no result yet; one that ran its course must.
  if (const std::string why = missing_result(res); !why.empty() && stopped_code == 0) {
    report_error("diloco node " + name,
                 status(errc::non_finite, why + " (a run without a result: exit 3)"));
    return 3;
  }
  return stopped_code;
}

}  // namespace

int run_node_command(int argc, const char* const* argv) {
  run_options o;
  node_flags f;
  cli::arg_parser p("diloco node",
                    "Runs one node of a deployed cluster: the actors the cluster file's\n"
                    "placement puts on node NAME. Start one per node, in any order; they\n"
                    "connect to each other (retrying until all are up), the node of the\n"
                    "metrics actor starts the run when every node is wired, prints the\n"
                    "result at the end, and tells the others to exit.");
  bind_node_flags(p, o, f);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco node", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;
  if (o.cluster_file.empty())
    return report_error("diloco node", status(errc::invalid_argument, "--cluster: required"));
  if (f.name.empty())
    return report_error("diloco node", status(errc::invalid_argument, "--name: required"));
  auto config = resolve_run_options(o);
  if (!config) return report_error("diloco node", config.error());
  if (o.print_config) {
    std::fputs(config_as_yaml(*config).c_str(), stdout);
    return 0;
  }
  auto options = node_options_of(f, o, *config);
  if (!options) return report_error("diloco node", options.error());
  node_options& no = *options;
  const std::string& name = f.name;
  const monitor_options& mon_opts = f.monitor;
  set_log_node(name);
  no.on_event = [&name](const std::string& what) {
    if (current_log_format() == log_format::json) {
      log_line("info", what);  // the node is a field of its own
    } else {
      log_line("info", "node " + name + ": " + what);
    }
  };
  std::printf("diloco node %s: seed %" PRIu64 "\n%s\n", name.c_str(), config->seed,
              describe_run(*config).c_str());
  std::fflush(stdout);
  progress_line progress("node " + name, static_cast<double>(config->token_budget), "tokens");
  no.on_progress = [&progress](uint64_t tokens) { progress.update(static_cast<double>(tokens)); };
  auto monitor = run_monitor::start(mon_opts);
  if (!monitor) return report_error("diloco node", monitor.error());
  run_monitor& mon = **monitor;
  // The metrics actor (on the leader) feeds it; on the other nodes it stays empty.
  auto live = mon.begin(to_string(config->mode), *config);
  no.observer = live;
  no.on_running = [&mon](bool running) { mon.set_ready(running); };
  {
    const actor_indices ids = actor_ids_of(*config);
    mon.set_node(name, config->deploy.node_of(ids, ids.metrics()) == name);
  }
  // A rank of an island under torchrun keeps the signals' default: torchrun ends the other
  // ranks of a failed island with SIGTERM and starts it again, and expects them gone at once.
  std::optional<stop_signals> signals;
  if (std::getenv("TORCHELASTIC_RESTART_COUNT") == nullptr) {
    signals.emplace();
    no.stop_signal = [] { return stop_signal_received.load(); };
  }
  no.on_node = [live](const std::string& node, bool up, uint32_t process) {
    if (live) live->on_node(shared_clock_ns(), node, up, process);
  };
  if (!mon.url().empty())
    std::fprintf(stderr, "node %s: metrics at %s\n", name.c_str(), mon.url().c_str());
  auto report = [&](const result<node_result>& r) {
    return report_node_result(r, name, *config, mon, progress, f.save_model_path);
  };

  // The outcome is reported before the node's actor system shuts down (on_done); failures
  // before the system exists come back without it.
  int code = 0;
  bool reported = false;
  shutdown_watchdog watchdog;
  no.on_done = [&](const result<node_result>& r) {
    reported = true;
    code = report(r);
    node_reported(code);
    watchdog.arm(code);
  };
  auto r = run_node(*config, no);
  watchdog.disarm();
  return reported ? code : report(r);
}

}  // namespace diloco
