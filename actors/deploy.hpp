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

#include "actors/simulation.hpp"

namespace diloco {

struct node_options {
  std::string name;                  // this node, as named in the cluster file
  uint64_t identity = 0;             // of the whole cluster file: nodes refuse a different one
  double connect_timeout_s = 60;     // give up on a node that is not up by then
  double progress_interval_s = 0.2;  // leader: how often to poll the metrics actor
  double run_timeout_s = 0;          // leader: give up after this long (0: never)
  double heartbeat_s = 1;            // heartbeats between connected nodes
  double peer_timeout_s = 5;         // a node silent this long is gone
  std::function<void(uint64_t tokens)> on_progress;  // leader
  std::function<void(const std::string&)> on_event;  // connections, start, stop
};

struct node_result {
  bool leader = false;               // this node hosted the metrics actor
  std::optional<sim_result> result;  // the leader's report of the whole run
};

result<node_result> run_node(const run_config& config, const node_options& options);

}  // namespace diloco
