// The live side of a run for the commands (docs/observability.md): a live monitor per run
// (observe/live_metrics.hpp), served over HTTP (`/metrics` in Prometheus text, `/status` as
// JSON) and written to the run directory (`metrics.jsonl`, one file per system, and
// `summary.json` at the end) for `diloco report`.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hosts/simulation.hpp"
#include "net/http_server.hpp"
#include "observe/live_metrics.hpp"

namespace diloco {

struct monitor_options {
  std::string run_dir;  // "": no files
  std::string host = "127.0.0.1";
  int port = -1;        // -1: no HTTP server; 0: any free port
  double linger_s = 0;  // keep serving this long after the run
};

class run_monitor {
 public:
  // Creates the run directory and starts the server; the error names the flag.
  static result<std::unique_ptr<run_monitor>> start(const monitor_options& options);
  ~run_monitor();

  // The monitor of one system's run (`name`: "decoupled", or a baseline); the server shows it
  // from now on.
  std::shared_ptr<live_metrics> begin(const std::string& name, const run_config& config);
  // Its run ended (r: its result, or nullptr when it failed); `stopped_by` names the signal
  // that stopped it early ("": none), kept in summary.json.
  void end(const std::string& name, const sim_result* r, const std::string& stopped_by = "");
  // What /readyz answers: 200 while the node runs its part of the run, 503 before and after.
  // /healthz answers 200 while the process serves at all.
  void set_ready(bool ready) { ready_.store(ready); }
  // A deployed run's node: its name and whether it leads (hosts the metrics actor). Only the
  // leader's /metrics has the run's metrics; every node's has the process's (process_*), the
  // build (diloco_build_info) and the node (diloco_node_info with the run's identity, which
  // the alerting rules copy onto every alert; diloco_leader).
  void set_node(const std::string& name, bool leader);
  // Writes summary.json (every system that ended) into the run directory.
  status write_summary() const;
  std::string url() const;  // "" without a server
  // Keeps serving for linger_s (the run is over: a scraper still sees its last values).
  void linger() const;
  const std::string& run_dir() const { return options_.run_dir; }

 private:
  explicit run_monitor(monitor_options o) : options_(std::move(o)) {}
  monitor_options options_;
  std::unique_ptr<http_server> server_;
  mutable std::mutex mu_;
  std::shared_ptr<live_metrics> current_;
  std::vector<std::string> summaries_;  // one JSON object per system
  std::atomic<bool> ready_{false};
  std::string node_;    // guarded by mu_ (set_node)
  std::string run_id_;  // guarded by mu_: the run begun last (begin)
  bool leader_ = true;
};

}  // namespace diloco
