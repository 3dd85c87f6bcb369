// The registry actor a deployed node publishes on its port (hosts/deploy.hpp): it hands this
// node's actors to nodes of the same run, carries the start barrier and the shutdown, notices
// nodes going away, and rewires this node's actors when a node's process comes back.
//
// It alone owns what the node knows of the others (node_view). The node's main thread shares
// no memory with it: it sends what it learned (learned_atom, running_atom, back_atom) and asks
// for a copy of the view (get_atom) when it needs one.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/config.hpp"
#include "runtime/directory.hpp"

namespace diloco {

// A restarted node's process joins the running run: its peers take its new actors.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
// The main thread learned a node's actors in a handshake it made (see registry's put_atom).
using learned_atom = caf::atom_constant<caf::atom("learned")>;
// This node's actors run now (after wiring): watch every peer.
using running_atom = caf::atom_constant<caf::atom("running")>;
// The main thread put every peer's actors into this node's directory: a restarted node's actors
// can be wired into it now (a rewire copies the directory; a copy taken earlier would miss the
// peers placed after it).
using wired_atom = caf::atom_constant<caf::atom("wired")>;
// A gone node answered a redial: it is back (and will rejoin).
using back_atom = caf::atom_constant<caf::atom("back")>;
// Leader: the nodes met while wiring still ran the run an earlier process of this node led;
// forget them, to meet their next processes.
using forget_atom = caf::atom_constant<caf::atom("forget")>;
// What time it is here (runtime/shared_clock.hpp): a joining node measures its clock against
// the leader's with it.
using clock_atom = caf::atom_constant<caf::atom("clock")>;
// A heartbeat to the leader, made by the registry for the main thread, which waits on the view
// for its answer meanwhile: a new process of the leader met during the wait ends the run at
// once instead of after the peer timeout.
using beat_atom = caf::atom_constant<caf::atom("beat")>;

// What a node knows of another node of the cluster.
struct peer_info {
  caf::actor registry;
  std::vector<caf::actor> actors;  // by ascending index
  uint32_t incarnation = 0;        // of the node's process this node knows last
  bool up = false;                 // its actors run and are wired here
  bool lost = false;               // its process went away and has not come back yet
  bool running = false;            // said in the handshake: its actors run (a run goes on)
  std::chrono::steady_clock::time_point lost_at;
};

// The newest heartbeat to the leader (beat_atom), stamped by shared_clock_ns.
struct beat_reading {
  uint64_t seq = 0;    // the main thread's number for it
  bool done = false;   // answered, or failed
  int64_t sent = 0;    // when the question left
  int64_t theirs = 0;  // the leader's time in its answer
  int64_t back = 0;    // when the answer came
  std::string failed;  // why there was no answer (rendered CAF error); empty if answered
};

// What the registry knows of the run; the main thread gets copies.
struct node_view {
  std::set<std::string> wired;             // leader: the nodes that have their directory filled
  bool shutdown = false;                   // the leader said the run is over
  std::string leader_lost;                 // the leader's node went away: why
  std::map<std::string, peer_info> peers;  // every node that connected either way
  std::string refused;                     // a node with another cluster file tried to connect
  bool running = false;                    // this node's actors run (it finished wiring)
  uint32_t incarnation = 0;                // of this node's process (> 0: restarted mid-run)
  // What peers said while this node was wiring: a run is going on, and the newest process of
  // this node they know.
  bool peers_running = false;
  uint32_t known_incarnation = 0;
  // This execution of the run: drawn by the leader, learned from it in the handshakes. Its
  // snapshots carry it, so a restarted shard takes a snapshot of this execution and not one an
  // earlier execution of the same cluster file left in snapshot.dir.
  uint64_t instance = 0;
  std::vector<std::string> events;  // for the main thread to report, in order
  beat_reading beat;
};

// Who runs where: what the registry needs to wire a restarted node's actors.
struct placement_view {
  actor_indices ids;
  std::vector<std::string> node_of;  // by actor index
  std::string self;                  // this node
  std::string leader;
  std::vector<uint32_t> on(const std::string& node) const;
};

struct registry_state {
  node_view view;
  // A node's process went away (up false) or rejoined (up true, its process number).
  std::function<void(const std::string&, bool, uint32_t)> on_node;
  std::vector<caf::actor> local;  // this node's actors, by ascending index
  placement_view where;
  uint64_t identity = 0;
  std::map<caf::actor_addr, std::string> watched;
  // Rejoins that came before this node's directory was whole (two nodes restarted together):
  // wired and answered when it is.
  struct held_rejoin {
    std::string node;
    uint32_t incarnation = 0;
    caf::actor registry;
    std::vector<caf::actor> actors;
    caf::response_promise answer;
  };
  bool wired = false;
  std::vector<held_rejoin> held;
};

// `first_instance`: this execution's (the leader draws it; 0 on the others until a handshake).
caf::behavior registry(caf::stateful_actor<registry_state>* self, std::vector<caf::actor> local,
                       placement_view where, uint64_t identity, uint64_t first_instance,
                       std::function<void(const std::string&, bool, uint32_t)> on_node);

}  // namespace diloco

// Local only: the view never leaves the node's process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(diloco::node_view)
