// What the metrics actor tells a run's live monitor (observe/live_metrics.hpp). The monitor is
// not part of any actor's state and sends nothing back: a run is the same with or without it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/messages.hpp"

namespace diloco {

class run_observer {
 public:
  virtual ~run_observer() = default;
  // now_ns: the metrics actor's clock (simulated in simulation; in real time a steady clock
  // with any origin: the monitor counts from on_start).
  virtual void on_start(int64_t now_ns) = 0;
  // The names of the model's tensors, by layout index (merge_msg::tensors), before on_start.
  virtual void on_layout(const std::vector<std::string>& tensor_names) { (void)tensor_names; }
  virtual void on_progress(int64_t now_ns, const progress_msg& m) = 0;
  virtual void on_merge(int64_t now_ns, const merge_msg& m) = 0;
  // A learner's numerics went non-finite; it stopped contributing.
  virtual void on_diverged(int64_t now_ns, const diverged_msg& m) = 0;
  virtual void on_stop(int64_t now_ns) = 0;
};

}  // namespace diloco
