// A run's live monitor (docs/observability.md): what the metrics actor hears, aggregated into
// counters, gauges and histograms, rendered as Prometheus text (`/metrics`) and JSON
// (`/status`), written as JSON lines to the run directory, and checked against alert
// thresholds (config `alerts`). Thread-safe: the metrics actor feeds it, an HTTP server reads.
// No CAF here beyond the message structs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/config.hpp"
#include "runtime/observer.hpp"

namespace diloco {

struct live_options {
  std::string jsonl_path;     // every event and sample as a JSON line ("": none)
  double sample_every_s = 0;  // clock seconds between samples (0: about 400 over the run)
  // For `diloco_run_info` and the start record: the run's identity (hex), the program's
  // version and the system's name ("decoupled", "dp", "diloco").
  std::string run_id, version, system = "decoupled";
  // Every setting of the run as (name, value), for the start record (a report compares runs
  // by them); empty: none recorded.
  std::vector<std::pair<std::string, std::string>> settings;
};

// A Prometheus-style histogram with fixed upper bounds.
struct histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bound, not cumulative; one more for +Inf
  double sum = 0;
  uint64_t count = 0;
  explicit histogram(std::vector<double> b = {})
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void add(double v);
};

class live_metrics : public run_observer {
 public:
  live_metrics(const run_config& config, live_options options);
  ~live_metrics() override;

  void on_start(int64_t now_ns) override;
  void on_layout(const std::vector<std::string>& tensor_names) override;
  void on_progress(int64_t now_ns, const progress_msg& m) override;
  // An evaluation of the global model at simulated time t_s (hosts/simulation.hpp eval_every_s):
  // eval_taken when the model is read, on_eval with its loss when it is known (later); the
  // record carries the tokens trained at t_s.
  void eval_taken(double t_s);
  void on_eval(double t_s, double loss);
  void on_merge(int64_t now_ns, const merge_msg& m) override;
  void on_diverged(int64_t now_ns, const diverged_msg& m) override;
  void on_stop(int64_t now_ns) override;

  // A deployed run: node `name` is up (running process `process`, 0 the first) or went away.
  // Shown in /status and /metrics, and written as a JSON line.
  void on_node(int64_t clock_ns, const std::string& name, bool up, uint32_t process);

  std::string prometheus() const;
  std::string status_json() const;
  std::map<std::string, uint64_t> alert_counts() const;
  // Merges that reached the quorum, and how many of them lacked one or more of the M learners
  // (a regional syncer standing for its region's learners that are up).
  struct merge_counts {
    uint64_t quorum = 0, partial = 0;
  };
  merge_counts quorum_merge_counts() const;
  // The run is over: a last sample and an `end` line with the fields of `extra` (a JSON object,
  // e.g. {"eval_loss": 1.6}) added; closes the file.
  void finish(const nlohmann::ordered_json& extra);

  // Names of the alert kinds (the label values of diloco_alerts_total).
  static const std::vector<std::string>& alert_kinds();
  // "critical" for the kinds that mean the run cannot merge as configured (a partition, a
  // diverged learner), "warning" for the rest.
  static const char* severity(const std::string& kind);

 private:
  // The sections of prometheus(), under mu_.
  void write_run_metrics(std::ostream& o) const;
  void write_learner_metrics(std::ostream& o) const;
  void write_merge_metrics(std::ostream& o) const;
  void write_node_metrics(std::ostream& o) const;
  merge_counts merge_counts_locked() const;  // quorum_merge_counts() under mu_
  struct learner_stats {
    uint64_t tokens = 0, steps = 0, bytes_sent = 0, bytes_received = 0;
    double busy_s = 0, idle_s = 0, chip_s = 0, train_loss = 0, step_time_s = 0;
    uint64_t merged_tokens = 0;  // weight in merges so far
    uint64_t merges = 0;         // merges it was in
    double loss_gap = 0;         // recent relative loss change at merges (moving average)
    uint64_t gaps = 0;
    double start_loss = 0;        // its first reported train loss
    bool loss_high = false;       // above alerts.loss_rise x start_loss at the last report
    int64_t last_report_ns = -1;  // when its latest progress report arrived
    double report_every_ns = 0;   // mean time between its reports (moving average)
    bool diverged = false;
    uint32_t period_steps = 0;   // adaptive inner steps: the H it follows (0: fixed H)
    uint32_t overlap_steps = 0;  // and its tau
  };
  // Up at `at_ns`: it reported within four of its usual intervals before (always, before its
  // second report), and its numerics have not gone non-finite.
  bool learner_up(const learner_stats& l, int64_t at_ns) const;
  int missing_allowed() const;  // missing learners a quorum merge may lack (M - K by default)
  void alert(int64_t now_ns, const std::string& kind, const std::string& what);
  // An alert condition with hysteresis: true (raise it now) once it has held at `hold_raise`
  // checks in a row; then not again until it has cleared at `hold_clear` checks in a row (its
  // value back under the clear level), when a `resolved` record is written. `subject` tells
  // apart the conditions of one kind (a learner).
  bool latch(int64_t now_ns, const std::string& kind, const std::string& subject, bool above,
             bool cleared, int hold_raise, int hold_clear);
  struct latch_state {
    int above = 0, cleared = 0;
    bool firing = false;
  };
  std::map<std::pair<std::string, std::string>, latch_state> latches_;
  void sample(int64_t now_ns);
  void write_line(const std::string& line);
  double seconds(int64_t ns) const { return static_cast<double>(ns) * 1e-9; }

  const run_config config_;
  const live_options options_;
  mutable std::mutex mu_;
  std::FILE* jsonl_ = nullptr;
  int64_t sample_every_ns_ = 0;
  int64_t next_sample_ns_ = 0;
  int64_t last_sample_ns_ = 0;
  int64_t now_ns_ = 0;
  int64_t origin_ns_ = 0;  // the clock at the run's start
  bool started_ = false;
  int64_t since_start(int64_t clock_ns);
  bool stopped_ = false;
  std::map<uint32_t, learner_stats> learners_;
  std::vector<std::string> tensor_names_;     // by layout index
  std::map<uint32_t, double> tensor_cosine_;  // by layout index: the latest merge's
  uint64_t tokens_ = 0, steps_ = 0;
  double chip_s_ = 0;
  double goodput_at(int64_t now_ns) const;
  double final_goodput_ = -1;               // the run's, once finish() has it
  double eval_loss_ = NAN;                  // the latest evaluation of the global model
  std::map<double, uint64_t> eval_tokens_;  // tokens at each evaluation taken, until reported
  void samples_before(int64_t now_ns);      // the samples due before now, from the counts so far
  // Uptime: the union of every learner's computing intervals (each progress report covers
  // the busy time before it), as disjoint [start, end) in ns, and its total length.
  std::map<int64_t, int64_t> up_;
  int64_t up_ns_ = 0;
  void cover(int64_t start, int64_t end);
  std::map<uint32_t, uint64_t> merges_, quorum_merges_, partial_merges_, versions_;
  uint64_t deltas_merged_ = 0;
  std::map<uint32_t, std::vector<uint64_t>> shard_drops_;  // per shard: stale, duplicate, rejected
  histogram version_gap_;
  std::map<uint32_t, histogram> arrival_delay_s_;  // by learner
  int last_missing_ = 0;                           // learners missing from the latest quorum merge
  uint64_t delta_bytes_ = 0, fp32_bytes_ = 0;
  uint64_t regional_merged_tokens_ = 0;
  std::vector<std::vector<uint32_t>>
      regional_learners_;  // by regional syncer: its learners  // merged through regional syncers
                           // (not per learner)
  double expected_ratio_ = 0;
  struct node_stats {
    bool up = false;
    uint32_t process = 0;
    uint64_t losses = 0;
  };
  std::map<std::string, node_stats> nodes_;  // deployed runs only
  std::map<std::string, uint64_t> alerts_;
  std::vector<std::string> recent_alerts_;
};

}  // namespace diloco
