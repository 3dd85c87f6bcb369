// What every actor of a run shares, read-only: the config and everything derived from it
// deterministically (model layout, fragment plan, which shard owns which fragment, the data
// source). Each process of a deployment builds the same env from the same config, so sharing
// it inside a process is only an optimization, never a channel between actors.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "runtime/config.hpp"
#include "tensor/compute.hpp"
#include "tensor/data.hpp"
#include "tensor/fragment.hpp"

namespace diloco {

class tape_hook;
class tensor_blob;
class run_observer;
class sim_timeline;

// Deployed runs: what carries a tensor payload to an actor on another node (hosts/deploy.cpp
// with net/bulk_channel.hpp). Shared, not part of any actor's state.
class blob_offload {
 public:
  virtual ~blob_offload() = default;
  // A message from actor `from` to actor `to`, whose tensor payloads `blobs` points at (inside
  // the message, which `send` sends). False: it may go at once, as it is (no payload leaves
  // this node and nothing sent before on the link still waits). True: the offload took it:
  // each large payload for another node goes ahead on the bulk channel and is replaced by a
  // reference (by an empty blob when it could not be delivered, which the receiver rejects),
  // and `send` runs once they are all at the destination node, after what the same link sent
  // before. On any thread; `send` may run on another.
  virtual bool defer(uint32_t from, uint32_t to, const std::vector<tensor_blob*>& blobs,
                     std::function<void()> send) = 0;
};

// The model a run's learners train, made from the config and the run's data source (the
// built-in MLP by default; a user's PyTorch module from the Python package).
using model_maker = std::function<result<std::shared_ptr<const model_family>>(
    const run_config&, std::shared_ptr<const data_source>)>;

// The shared helpers a run may plug in (none by default).
struct env_hooks {
  std::shared_ptr<tape_hook> tape;
  std::shared_ptr<blob_offload> offload;
  std::shared_ptr<run_observer> observer;
  model_maker model;  // empty: the process's learner model (below)
  std::shared_ptr<job_pool> ahead;
  std::shared_ptr<sim_timeline> timeline;
  bool traced = true;
  std::shared_ptr<job_pool> merge_pool;
};

// Simulated nanoseconds per time slot of a clock with `tick_scale` ticks per slot: 1 while the
// scale is at most 1,024 (a run of up to 1,024 actors resolves single nanoseconds), then
// tick_scale / 1,024, which keeps 2^10 ticks per nanosecond and so the same span of time.
inline int64_t ns_per_slot(int64_t tick_scale) {
  return tick_scale > 1024 ? tick_scale / 1024 : 1;
}

struct actor_env {
  run_config config;
  std::shared_ptr<const model_family> model;
  // `diloco inspect` without the run's PyTorch learner: a learner's state written by a PyTorch
  // learner (python/) is taken as it is, unchecked, instead of failing to load.
  bool skip_pytorch_learners = false;
  mutable int pytorch_learners_skipped = 0;  // how many were (a check runs on one thread)
  fragment_plan plan;
  std::shared_ptr<const data_source> data;
  actor_indices ids;
  std::vector<uint32_t> shard_of;                   // fragment -> shard
  std::vector<std::vector<uint32_t>> fragments_of;  // shard slot -> fragments (ascending)
  std::vector<link_config> learner_links;           // learner -> its links (config.link_of)
  // Regional syncer r's wide-area link to the shards, and its region's network to its learners.
  std::vector<link_config> regional_wan, regional_local;
  std::vector<std::string> regional_names;  // regional syncer r's region
  std::vector<int> regional_of;  // learner -> the regional syncer it syncs through, or -1
  std::vector<uint32_t> regional_learners;  // regional syncer -> how many learner slots it serves
  // Simulated wire bytes per payload byte (link.model_params over the model's parameters).
  double payload_scale = 1.0;
  // Simulated time: links delay messages and steps take their modelled duration. Off for
  // real-time runs (threads, several processes), where only the hardware sets the pace.
  bool virtual_time = true;
  // Clock ticks per time slot: the smallest power of two with a tag for every actor
  // (runtime/transport.hpp); 1 in real time. A slot is one simulated nanosecond up to 1,024
  // actors and ns_per_slot(tick_scale) beyond, so that int64 ticks still cover 52 days
  // (max_virtual_ns).
  int64_t tick_scale = 1;
  int64_t max_virtual_ns = INT64_MAX;

  // The run's tape recorder or replay checker (runtime/tape.hpp); none by default. Shared and
  // not part of any actor's state.
  std::shared_ptr<tape_hook> tape;
  // Deployed runs: payloads to other nodes travel on the bulk channel; none by default.
  std::shared_ptr<blob_offload> offload;
  // The run's live monitor (observe/live_metrics.hpp), fed by the metrics actor; none by
  // default. Observing never changes the run.
  std::shared_ptr<run_observer> observer;
  // Threads on which learners compute their next inner step ahead (simulation with
  // sim_options::threads > 1; docs/architecture.md "Parallel simulation"); none by default.
  // They change when the work is done, never its result.
  std::shared_ptr<job_pool> ahead;
  // Threads a syncer shard shares a large merge with (tensor/merge.hpp, merge_fragment): the
  // simulation's `ahead` threads, a deployed shard's node's spare core; none by default. The
  // merge is the same to the bit with or without them.
  std::shared_ptr<job_pool> merge_pool;
  // A simulated run's deliveries in flight (runtime/timeline.hpp), which its driver delivers in
  // tick order; none by default, and then they go to CAF's clock (a run driven by hand).
  std::shared_ptr<sim_timeline> timeline;
  // Whether every actor folds what it receives into its trace (outbox::trace). A run whose
  // trace hash nobody reads (a `diloco chaos` cell) may leave it out: the digests of each
  // message and of its sender's vector clock are a tenth of a cost-model run's work. The run
  // is otherwise the same; its traces stay 0.
  bool traced = true;

  using hooks = env_hooks;

  // A parameter buffer for the fragments' values to be laid into (fragment::scatter): zeroed
  // when the plan's fragments cover every parameter (they do unless it leaves a tensor out),
  // so that nothing is drawn only to be overwritten; otherwise the model's initial values,
  // which a parameter outside every fragment keeps.
  float_buffer fragments_base() const;

  static result<std::shared_ptr<const actor_env>> make(const run_config& config, bool virtual_time,
                                                       hooks with = {});
};

// The learner model of every run in this process that is not given one: the built-in MLP of
// config.model until a host sets another (the Python package sets the user's PyTorch learner
// before it runs a `diloco` command). Set it before any run starts; an empty maker restores the
// built-in MLP. `name` says which model it is ("mymodel:make_learner"); replay tapes record it.
void set_process_model(model_maker maker, std::string name = "");
// The name given with the process's learner model ("": the built-in MLP).
const std::string& process_model_name();

using nanos = std::chrono::nanoseconds;

// Seconds to integer nanoseconds. Configured times are validated to at most time_max_s
// (runtime/config.hpp), so times derived from them stay far inside int64; beyond +-2^62 ns
// (146 years) a time saturates rather than wrap. NaN is a programmer error.
inline int64_t to_ns(double seconds) {
  DILOCO_CHECK(!std::isnan(seconds), "to_ns: NaN seconds");
  constexpr double ns_max = 4611686018427387904.0;  // 2^62
  const double ns = seconds * 1e9;
  if (ns >= ns_max) return static_cast<int64_t>(ns_max);
  if (ns <= -ns_max) return -static_cast<int64_t>(ns_max);
  return static_cast<int64_t>(ns);
}
inline double to_s(int64_t ns) {
  return static_cast<double>(ns) * 1e-9;
}

// --- the runtime's timing constants, each with its unit -------------------------------------

// Moving averages (a learner's step time, a shard's delta latency): the new sample's weight.
constexpr double ema_keep = 0.9;  // weight of the average so far (dimensionless)
constexpr double ema_new = 0.1;   // weight of the new sample (dimensionless)
inline double ema(double average, double sample) {
  return average == 0.0 ? sample : ema_keep * average + ema_new * sample;
}

// How long an answer over the data plane may take before it is taken as lost: a restarting
// learner asks again for its fragments, a recovering shard stops waiting for the learners'
// copies. At least answer_wait_min_s, or answer_wait_latencies one-way link latencies.
constexpr double answer_wait_min_s = 1.0;      // seconds
constexpr int64_t answer_wait_latencies = 20;  // one-way link latencies
inline int64_t answer_wait_ns(const run_config& config) {
  return std::max<int64_t>(to_ns(answer_wait_min_s),
                           answer_wait_latencies * to_ns(config.link.latency_s));
}

// A learner that misses the shard's reply to a delta for resync_after_periods periods of the
// fragment (H inner steps each) fetches the whole fragment, once; on lossy links it asks again
// every repull_after_periods periods.
constexpr int resync_after_periods = 2;  // periods of H inner steps
constexpr int repull_after_periods = 8;  // periods of H inner steps

// A deployed run's snapshot still incomplete this long after it began is given up: at least
// snapshot_give_up_min_s, or snapshot_give_up_periods snapshot periods.
constexpr double snapshot_give_up_min_s = 5.0;  // seconds
constexpr int snapshot_give_up_periods = 2;     // snapshot periods (snapshot.every_s)

}  // namespace diloco
