// A deployed run (docs/deploy.md): one process per node of the cluster file, each running the
// actors the placement puts there, wired to the others' through CAF's middleman.
//
// Every node publishes a registry actor on its port. A node spawns its actors, publishes, then
// connects to every other node's registry (retrying until it is up or the connect timeout
// passes), checks that the other node runs the same configuration (run identity), and fills
// its directory with the other node's actors as remote proxies. When every node is wired, the
// node of the metrics actor (the leader) tells all of them to start their actors. The leader
// watches the run, collects every actor's report when it is done, and tells the others to
// shut down.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "hosts/simulation.hpp"

namespace diloco {

struct node_result {
  bool leader = false;               // this node hosted the metrics actor
  std::optional<sim_result> result;  // the leader's report of the whole run
  int stopped_by = 0;                // the signal that stopped this node (or the leader's run)
  uint64_t final_snapshot = 0;       // leader: the snapshot taken when it was stopped (0: none)
};

struct node_options {
  std::string name;       // this node, as named in the cluster file
  uint64_t identity = 0;  // of the whole cluster file: nodes refuse a different one
  // For snapshot manifests (leader): the run's identity and configuration as text.
  uint64_t run_id = 0;
  std::string config_text;
  // Leader: continue the run from the most recently written snapshot of it under this
  // directory (a deployed run's; see docs/deploy.md, "Resuming a deployed run").
  std::string resume_dir;
  double connect_timeout_s = 60;     // give up on a node that is not up by then
  double progress_interval_s = 0.2;  // leader: how often to poll the metrics actor
  double run_timeout_s = 0;          // leader: give up after this long (0: never)
  double heartbeat_s = 1;            // heartbeats between connected nodes
  double peer_timeout_s = 5;         // a node silent this long is gone
  // Leader: a gone node that hosts a shard or a service actor must be back this soon, or the
  // run stops with an error naming it. A gone node with only learners is waited for without
  // limit: the others go on, and it rejoins when restarted.
  double restart_wait_s = 60;
  // Tensor payloads of at least bulk_min_bytes to other nodes travel on the bulk channel
  // (net/bulk_channel.hpp, plain TCP runs only); each node holds at most bulk_limit_bytes of
  // them unclaimed, and queues at most as many per destination.
  bool bulk = true;
  // The framing front on the node's port (net/frame_tunnel.hpp); off: CAF's middleman listens
  // on the port itself (and crashes on garbage, docs/deploy.md).
  bool front = true;
  uint64_t bulk_min_bytes = 64 << 10;
  uint64_t bulk_limit_bytes = uint64_t{512} << 20;
  // Record this node's actors on a tape in this directory (docs/replay.md): NODE.PROCESS.tape,
  // one per process of the node; empty: no tape. tape_max_bytes > 0: the tape rotates and
  // keeps the newest tape_max_bytes of history (runtime/tape.hpp, tape_volumes_kept).
  std::string tape_dir;
  uint64_t tape_max_bytes = 0;
  // The operator asked this node to stop (SIGTERM, SIGINT): the signal's number, 0 while none;
  // polled from the node's thread. The leader takes a final snapshot where snapshots are on
  // (waiting at most half of stop_timeout_s for it to commit), then stops the run as its
  // deadline (duration_s) would: the learners send their last work, the shards flush, and the
  // run's result is reported as usual. Another node goes on until the leader ends the run (a
  // whole job stopped at once: its actors take part in the final snapshot), or leaves after
  // stop_timeout_s as a failed node does, closing its connections first (learners only: the
  // run goes on; a shard: the leader waits restart_wait_s for it). Before the run starts, a
  // signal ends the wait for the other nodes with an error that names it.
  std::function<int()> stop_signal;
  double stop_timeout_s = 60;
  // The node is running its part of the run (true once its actors are started, false once
  // they stop): what /readyz answers.
  std::function<void(bool)> on_running;
  std::function<void(uint64_t tokens)> on_progress;  // leader
  std::function<void(const std::string&)> on_event;  // connections, start, stop
  // Leader: a node's process is up (its number, 0 the first) or went away. From any thread.
  std::function<void(const std::string& node, bool up, uint32_t process)> on_node;
  // The learners' model on this node (tensor/compute.hpp); empty: the built-in MLP.
  model_maker model;
  std::shared_ptr<run_observer> observer;  // leader: live monitor (observe/live_metrics.hpp)
  // The node's part is over (the leader's with the run's report, or an error): report it.
  // Called before the actor system shuts down. CAF 0.17.6 sometimes never finishes an actor
  // system's shutdown (about one node exit in 30 waits forever for a detached learner's
  // thread); the command decides what to do then (diloco node ends the process with the
  // outcome's exit code after a grace period).
  std::function<void(const result<node_result>&)> on_done;
};

result<node_result> run_node(const run_config& config, const node_options& options);

// "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"; "signal N" for another.
std::string signal_name(int signal);

}  // namespace diloco
