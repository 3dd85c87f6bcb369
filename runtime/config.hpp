// The tunables of a run: one struct with its defaults, validated in one place.
//
// `diloco simulate` fills it from a YAML cluster file (config/cluster_file.cpp) and flags; tests
// fill it directly. Every actor receives it read-only (shared, immutable) at spawn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "tensor/codec.hpp"
#include "tensor/data.hpp"
#include "tensor/fragment.hpp"
#include "tensor/merge.hpp"
#include "tensor/model.hpp"
#include "tensor/optim.hpp"

namespace diloco {

// Which algorithm the learners and shards run.
enum class run_mode : uint8_t {
  decoupled,      // Decoupled DiLoCo: quorum K, grace window, fragments, never waits
  sync_diloco,    // synchronous DiLoCo: K = M, no grace, one fragment, learners wait
  data_parallel,  // all-reduce of gradients every step, lock-step
};
const char* to_string(run_mode m);
result<run_mode> parse_run_mode(const std::string& text);

// When fragment p is due: strided spreads the offsets evenly over H (streaming, at most
// ceil(P/H) in flight per step); sequential syncs fragment p at offset p, back to back.
enum class schedule_pattern : uint8_t { strided, sequential };

// What "step" means in the schedule. global: the shared clock, step = time / nominal step
// time, so every learner syncs fragment p in the same rounds whatever its speed (a fast
// learner brings more work to a round, a slow one less; token weights tell them apart).
// local: each learner's own inner steps (synchronous DiLoCo, where learners wait anyway).
enum class schedule_clock : uint8_t { global, local };
const char* to_string(schedule_pattern p);
result<schedule_pattern> parse_schedule_pattern(const std::string& text);
const char* to_string(schedule_clock c);
result<schedule_clock> parse_schedule_clock(const std::string& text);

// What a fragment's final merge (the run's end: every live learner's last delta) does to the
// global. average: the deltas merged by the merge rule are applied whole, so the global becomes
// the learners' last models merged; outer: one more outer step, as every merge before it, whose
// Nesterov look-ahead nothing after it corrects (docs/architecture.md, "The final merge").
enum class final_merge_rule : uint8_t { average, outer };
const char* to_string(final_merge_rule r);
result<final_merge_rule> parse_final_merge_rule(const std::string& text);

// A learner's hardware in simulated time: each inner step takes
// step_time_s * slowdown * exp(jitter * z - jitter^2 / 2), z ~ N(0, 1) (mean-one lognormal).
struct speed_config {
  double step_time_s = 1.0;
  double slowdown = 1.0;         // 1.18 = 18% slower
  double jitter = 0.0;           // 0.1 = 10% step-to-step variation
  double link_latency_s = -1.0;  // this learner's links to the shards (< 0: its region's)
  // The rest apply to a learner of the `speeds` (or `learners`) list only:
  std::string region;  // names an entry of `regions`: its links to the shards ("": link)
  uint64_t chips = 0;  // its chips: failure rate and goodput (0: chips_per_learner)
  int batch = 0;       // its tokens per inner step per rank (0: batch)
  // An island: the learner is this many data-parallel ranks, each with the learner's chips and
  // batch; a step trains ranks x batch tokens in the time of one rank's step.
  int ranks = 1;
};

// A region's network to the syncer shards: every learner placed there has links with this
// one-way latency and bandwidth, in both directions.
struct region_config {
  std::string name;
  double latency_s = 0.05;
  double bandwidth_gbps = 10.0;
  // A regional syncer (docs/architecture.md, "Regional syncers"): the region's learners sync
  // with it over the region's own network (local_*), and it alone crosses the wide-area link
  // above (latency_s, bandwidth_gbps) to the syncer shards, once per fragment round.
  bool syncer = false;
  double local_latency_s = 0.0005;
  double local_bandwidth_gbps = 100.0;
};

// A simulated link between a learner and a shard: one FIFO pipe each way.
struct link_config {
  double latency_s = 0.05;
  double bandwidth_gbps = 10.0;
  // Data-plane faults (outer gradients, updates, gradients), each message independently:
  double drop_rate = 0.0;  // lost on the wire
  double dup_rate = 0.0;   // delivered twice
  // Payloads (outer gradients, updates, gradients) take the wire time of a model of this many
  // parameters, so a small model's run shows a large one's network (0: the model's own).
  double model_params = 0.0;
};

// A scripted change of the network: from `at_s` for `for_s` seconds, the links of every
// learner in `region` (every learner when empty) have their bandwidth multiplied by
// `bandwidth_factor` and their latency by `latency_factor`. Overlapping changes multiply.
struct link_change {
  std::string region;
  double at_s = 0.0;
  double for_s = 0.0;
  double bandwidth_factor = 1.0;
  double latency_factor = 1.0;
};

// Adaptive inner steps (`period_steps: auto`): the fragment scheduler chooses H from what the
// learners measure (their step time, their links' bandwidth and latency): the smallest H at
// which the busiest link of any learner is busy at most `target_load` of a period, within
// [min_steps, max_steps]. The run starts at period_steps, which is also the smallest H unless
// min_steps says otherwise (an H tuned for quality is not given up while the network keeps up).
struct adaptive_period {
  bool enabled = false;
  int min_steps = 0;  // 0: period_steps
  int max_steps = 4096;
  double target_load = 0.8;
};

// Membership over time: learner `learner` joins (spare capacity becomes available) or leaves
// (the capacity is taken back: it sends its outstanding work and exits) at `at_s`.
struct membership_event {
  uint32_t learner = 0;
  double at_s = 0.0;
  bool join = true;
};

// A syncer shard process dies at `at_s` and comes back `down_s` later, with its fragments
// recovered from the learners' copies (the newest version any live learner holds).
struct shard_restart_event {
  uint32_t shard = 0;
  double at_s = 0.0;
  double down_s = 0.0;
};

// A region's regional syncer dies at `at_s` and comes back `down_s` later; meanwhile its
// learners sync with the syncer shards directly.
struct regional_restart_event {
  std::string region;
  double at_s = 0.0;
  double down_s = 0.0;
};

// A partition cuts the links between some learners and every shard for a while.
struct partition_event {
  std::vector<uint32_t> learners;
  double at_s = 0.0;
  double heal_s = 0.0;  // how long it lasts
};

// A scripted failure: learner `learner` dies at `at_s` and restarts after `down_s`.
struct failure_event {
  uint32_t learner = 0;
  double at_s = 0.0;
  double down_s = 0.0;
};

// Random interruptions (docs/architecture.md, "Goodput"): each chip fails as a Poisson process with
// mean time between interruptions `mtbi_hours`, so a learner of c chips fails at rate c / MTBI. A
// non-elastic learner is then down for `recovery_s` (restart, reload, lost progress: the whole cost
// of a failure) and rejoins from the global model. An elastic learner pauses for `rescale_s`,
// continues without the failed unit of `unit_chips` chips, and takes the unit back (without a
// pause of its own) when it is repaired `recovery_s` later.
struct failure_model {
  double mtbi_hours = 0.0;  // per chip; 0: no random failures
  // Both fitted to the published data-parallel goodput rows (docs/benchmarks.md) by `diloco chaos
  // --calibrate` (seed 1, 30 days): docs/benchmarks.md, "Goodput at scale".
  double recovery_s = 78.6;
  bool elastic = false;
  double rescale_s = 21.2;
  uint32_t unit_chips = 64;

  bool enabled() const { return mtbi_hours > 0.0; }
};

// What a learner's step is: real training of the model, or a duration from its speed model
// with no math at all (cost), for studies at a scale no machine could train.
enum class compute_mode : uint8_t { real, cost };
const char* to_string(compute_mode m);
result<compute_mode> parse_compute_mode(const std::string& text);

// Chandy-Lamport snapshots of a simulated run (actors/coordinator.hpp). They never change the
// run: its results and trace are the same with or without them.
struct snapshot_config {
  std::string dir;           // where snapshot directories go; empty: no snapshots
  double every_s = 0.0;      // one every this much simulated time (0: none)
  uint64_t every_steps = 0;  // one every this many inner steps of the whole cluster (0: none)
  std::vector<double> at_s;  // and at these simulated times
  uint32_t keep = 3;         // complete snapshots kept (older ones are deleted)

  bool enabled() const { return !dir.empty(); }
};

// Where the actors run when deployed (docs/deploy.md): the nodes, which node hosts which
// actor, and the TLS material nodes authenticate each other with. A one-process run ignores
// the placement; it is not part of the run's identity (the same run in any placement).
struct actor_indices;
struct node_config {
  std::string name;
  std::string host;
  uint32_t port = 0;
};
struct placement_config {
  std::vector<std::string> learners;   // node of each learner slot (empty: the first node)
  std::vector<std::string> shards;     // node of each syncer shard (empty: the first node)
  std::vector<std::string> regionals;  // node of each regional syncer (empty: the first node)
  std::string scheduler, metrics, chaos, coordinator;  // "" : the first node
};
struct tls_config {
  std::string ca;           // CA certificate (PEM) every node's certificate is signed by
  std::string certificate;  // this node's certificate; "{node}" is replaced by its name
  std::string key;          // its private key; "{node}" likewise
  bool enabled() const { return !ca.empty() || !certificate.empty() || !key.empty(); }
};
struct deployment_config {
  std::vector<node_config> nodes;
  placement_config placement;
  tls_config tls;
  // A file with the run's shared secret (at least 16 bytes): hellos on both ports of every
  // node are tagged with it (net/handshake.hpp), so only its holders reach a node's actors.
  // `diloco node` requires it for plain TCP; with mutual TLS it is optional.
  std::string secret_file;
  bool enabled() const { return !nodes.empty(); }
  // The node of actor `index` (actor_indices numbering), after defaults.
  std::string node_of(const actor_indices& ids, uint32_t index) const;
};

// Alert thresholds of the live monitor (docs/observability.md). Alerts are logged and counted;
// they never change the run, so they are not part of its identity.
struct alert_config {
  int dropped_learners = -1;           // learners missing from a merge above this (-1: M - K)
  double token_share = 0.6;            // one learner's share of the merged tokens above this
  double staleness_versions = 0;       // mean version gap of a merge above this (0: half of
                                       // staleness_max)
  double compression_tolerance = 0.5;  // |achieved / expected compression - 1| above this
  double loss_gap = 0.1;               // a learner's loss rises by more than this share at merges
  double loss_rise = 1.5;              // a learner's loss above this x its first reported loss
};

// Faults for testing the tools, never for training: a deliberate nondeterminism (replay must
// find it, docs/replay.md).
struct debug_config {
  int64_t nondeterministic_learner = -1;  // this learner perturbs a weight from std::random_device
  int64_t nondeterministic_step = 0;      // after this many of its steps
  // A slow syncer: every shard spends this much longer on each delta (real time: it sleeps;
  // simulated: deltas queue and are served one at a time).
  double slow_shard_s = 0;
  // Fault injection for the numerics' tests: this learner's weights get a NaN after this many
  // of its steps (-1: none), as after an overflow.
  int64_t nonfinite_learner = -1;
  int64_t nonfinite_step = 0;
};

// Every configured time (seconds) is at most this (about 31.7 years): in nanoseconds it and
// sums of a few of it stay far inside int64 (runtime/env.hpp, to_ns).
constexpr double time_max_s = 1e9;
// The largest model a run may have (parameters): each learner, shard and codec holds several
// fp32 copies of it in one process.
constexpr uint64_t model_params_max = uint64_t{1} << 28;

struct run_config {
  run_mode mode = run_mode::decoupled;
  uint64_t seed = 1;
  uint64_t interleave_seed = 0;  // which ready actor runs next in simulation (0: from seed)

  model_config model;
  data_config data;
  adamw_config inner;
  nesterov_config outer;

  int learners = 4;                 // M: learners at the start
  int max_learners = 0;             // learner ids available to joins (0: just `learners`)
  int shards = 2;                   // syncer shards; fragment p lives on shard p mod shards
  int batch = 64;                   // tokens per inner step per learner
  uint64_t token_budget = 1280000;  // total over all learners

  int fragments = 4;  // P
  fragment_pattern packing = fragment_pattern::balanced;
  int period_steps = 64;  // H (with period_auto: the first H)
  adaptive_period period_auto;
  int overlap_steps = 4;  // tau
  schedule_pattern schedule = schedule_pattern::strided;
  schedule_clock clock = schedule_clock::global;
  double alpha = 0.0;  // learner mix on receipt: alpha*local + (1-alpha)*global

  int quorum = 1;  // K
  bool grace = true;
  double grace_gamma = 0.8;
  double grace_cap_s = 8.0;
  merge_rule merge = merge_rule::rda;
  int staleness_max = 16;  // versions; older deltas are dropped and counted
  // A delta based on a version the global has moved r rounds past carries (1 + r)^-p of its
  // token weight in its merge's share (docs/architecture.md, "Partial merges"); 0: whole.
  double staleness_decay = 1.0;
  final_merge_rule final_merge = final_merge_rule::average;
  codec_config uplink;  // outer gradients (error feedback per the codec's default)
  codec_kind downlink = codec_kind::fp32;  // outer updates sent back

  speed_config speed;                     // every learner's default
  std::vector<speed_config> speeds;       // per learner overrides (empty, or one per learner)
  link_config link;                       // every learner's links (faults apply to all)
  std::vector<region_config> regions;     // named networks learners may be placed in
  std::vector<link_change> link_changes;  // scripted bandwidth and latency changes
  std::vector<failure_event> failures;    // scripted, on top of the random ones
  std::vector<partition_event> partitions;
  std::vector<membership_event> membership;
  std::vector<shard_restart_event> shard_restarts;
  std::vector<regional_restart_event> regional_restarts;
  failure_model interruptions;
  compute_mode compute = compute_mode::real;
  uint64_t chips_per_learner = 1;  // for the failure rate and goodput accounting
  double duration_s = 0.0;         // stop after this much time (0: only the token budget)

  int progress_every_steps = 8;  // learner -> metrics reports
  // Backpressure: a learner keeps at most this many deltas of one fragment unanswered; a
  // fragment due beyond that keeps accumulating its work for a later send (0: no limit). So a
  // slow syncer holds at most learners x fragments x this many deltas.
  int max_unanswered_deltas = 2;
  // A user's (PyTorch) learner step that has not returned after this long ends the process
  // with exit 3, naming the learner (0: never): a hung step would otherwise stall a
  // simulation, or a deployed learner's node, without a word.
  double step_timeout_s = 600;
  snapshot_config snapshot;  // not part of the run's identity (see run_identity)
  debug_config debug;
  deployment_config deploy;  // not part of the run's identity either
  alert_config alerts;       // nor this

  status validate() const;
  // Every problem validate() would report, one per part of the config (the first of each).
  std::vector<status> problems() const;
  const speed_config& speed_of(uint32_t learner) const;
  uint64_t chips_of(uint32_t learner) const;
  // The chips of the learners present at the start (goodput's provisioned chips per second).
  double starting_chips() const;
  // A learner's tokens per inner step: its batch times its ranks (an island's, all ranks').
  int batch_of(uint32_t learner) const;
  // A learner's links to the shards: its region's network, or `link`; its own latency wins.
  link_config link_of(uint32_t learner) const;
  // The same at time t_ns, with the scripted link changes applied to `base` (link_of).
  link_config link_at(uint32_t learner, const link_config& base, int64_t t_ns) const;
  // `base` with the scripted changes for a link of `region` that hold at t_ns (they multiply).
  link_config link_in_region_at(const link_config& base, const std::string& region,
                                int64_t t_ns) const;
  // The regions with a regional syncer, in the order of `regions` (regional syncer r is
  // regions[regional_regions()[r]]).
  std::vector<uint32_t> regional_regions() const;
  // The regional syncer learner `learner` syncs through (index into regional_regions()), or -1.
  int regional_of(uint32_t learner) const;
  // A region's wide-area link (its regional syncer to the shards) and its local network (its
  // learners to its regional syncer) at time t_ns, with the scripted link changes applied to
  // the wide-area one.
  link_config regional_wan_at(uint32_t regional, int64_t t_ns) const;
  link_config regional_local(uint32_t regional) const;
  // The smallest H adaptive inner steps may choose.
  int period_min() const;
  // Inner steps each learner would do if all shared the budget equally (the lr schedule's length).
  int64_t steps_per_learner() const;
  // K as applied: the quorum never exceeds M (sync DiLoCo and DP use all learners).
  int effective_quorum() const;
  // The learner id space: joins may use ids from `learners` up to this.
  int learner_capacity() const { return max_learners > learners ? max_learners : learners; }
};

// The configuration a run without any file or flag uses (the built-in cluster): the struct
// defaults (the published algorithm defaults, docs/config.md) with the values tuned for the
// built-in model.
run_config builtin_run_config();

// The baselines (docs/architecture.md), derived from a Decoupled config: same model, data,
// token budget, learners and speeds. as_sync_diloco: synchronous DiLoCo with this run's
// settings (one fragment, every learner in every merge, no overlap; its alpha, merge rule and
// codecs kept). as_vanilla_diloco: DiLoCo as published (that, with the replicas overwritten
// by the global model, a plain average, full precision both ways).
run_config as_sync_diloco(const run_config& c);
run_config as_vanilla_diloco(const run_config& c);
run_config as_data_parallel(const run_config& c);

// Actor indices (vector-clock entries): learners, shards, then the service actors.
struct actor_indices {
  uint32_t learners = 0;
  uint32_t shards = 0;
  uint32_t learner(uint32_t i) const { return i; }
  uint32_t shard(uint32_t s) const { return learners + s; }
  uint32_t scheduler() const { return learners + shards; }
  uint32_t metrics() const { return learners + shards + 1; }
  uint32_t chaos() const { return learners + shards + 2; }
  uint32_t coordinator() const { return learners + shards + 3; }  // snapshots
  uint32_t regionals = 0;  // regional syncers, after the services
  uint32_t regional(uint32_t r) const { return learners + shards + 4 + r; }
  // Adaptive inner steps with regional syncers: they report their wide-area links to the
  // fragment scheduler, which tells them the schedule (channels that exist only then).
  bool paced_regionals = false;
  uint32_t count() const { return learners + shards + 4 + regionals; }
  bool is_regional(uint32_t i) const { return i >= learners + shards + 4 && i < count(); }
  // The shards' peers are learner slots and regional syncers: member m < learners is learner m,
  // member learners + r is regional syncer r.
  uint32_t members() const { return learners + regionals; }
  uint32_t member(uint32_t m) const { return m < learners ? m : regional(m - learners); }
  // Shard slot s: a shard, or past them regional syncer s - shards (which runs the syncer role).
  uint32_t shard_slot(uint32_t s) const { return s < shards ? shard(s) : regional(s - shards); }
  bool is_learner(uint32_t i) const { return i < learners; }
  bool is_shard(uint32_t i) const { return i >= learners && i < learners + shards; }
};

// The actors of a run: a slot for every learner it may ever have (learner_capacity), its
// shards, the service actors.
actor_indices actor_ids_of(const run_config& config);

}  // namespace diloco
