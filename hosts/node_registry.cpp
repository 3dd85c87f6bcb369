#include "hosts/node_registry.hpp"
#include "base/check.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>

#include "protocol/messages.hpp"
#include "runtime/shared_clock.hpp"

namespace diloco {

std::vector<uint32_t> placement_view::on(const std::string& node) const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < node_of.size(); ++i) {
    if (node_of[i] == node) out.push_back(i);
  }
  return out;
}

namespace {

// A node's process ended (its connection closed, or it stopped answering): on its behalf, every
// actor of this node that had a link to one of its actors sees that link close (closed_msg, as
// the simulation's failure detection gives it). Shards drop its learners from their live sets
// and quorums; learners stop waiting for its shards; a regional syncer's learners sync with the
// shards meanwhile.
void close_links_of(const placement_view& where, const std::vector<caf::actor>& local,
                    const std::string& node, uint32_t incarnation) {
  const auto mine = where.on(where.self);
  const auto gone = where.on(node);
  const actor_indices& ids = where.ids;
  DILOCO_CHECK(mine.size() == local.size(), "registry: one local actor per slot");
  for (size_t k = 0; k < mine.size(); ++k) {
    for (uint32_t g : gone) {
      // The pairs with links: learner-shard, learner-regional syncer, shard-regional syncer.
      const bool a_learner = ids.is_learner(mine[k]), b_learner = ids.is_learner(g);
      const bool a_shard = ids.is_shard(mine[k]), b_shard = ids.is_shard(g);
      const bool a_regional = ids.is_regional(mine[k]), b_regional = ids.is_regional(g);
      if ((a_learner && (b_shard || b_regional)) || (a_shard && (b_learner || b_regional)) ||
          (a_regional && (b_learner || b_shard)))
        caf::anon_send(local[k], closed_msg{stamp{g, vector_clock{}, 0}, incarnation});
    }
  }
}

using registry_actor = caf::stateful_actor<registry_state>;

void watch(registry_actor* self, const caf::actor& peer, const std::string& name) {
  self->state.watched[peer.address()] = name;
  self->monitor(peer);
}

// A watched registry went down: the leader's loss ends the run, another node's is waited out.
void on_down(registry_actor* self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto& v = st.view;
  auto it = st.watched.find(dm.source);
  if (it == st.watched.end()) return;
  const std::string who = it->second;
  st.watched.erase(it);
  if (v.shutdown) return;
  const std::string why = to_string(dm.reason);
  if (who == st.where.leader) {
    if (v.leader_lost.empty()) v.leader_lost = "node " + who + " went away (" + why + ")";
    return;
  }
  auto& p = v.peers[who];
  if (p.registry.address() != dm.source) return;  // an older process of that node
  if (st.on_node) st.on_node(who, false, p.incarnation);
  if (p.up && v.running) close_links_of(st.where, st.local, who, p.incarnation);
  const bool was_up = p.up;
  p.up = false;
  p.lost = true;
  p.lost_at = std::chrono::steady_clock::now();
  v.events.push_back("node " + who + " went away (" + why + ")" +
                     (was_up ? "; its actors are down here until its process restarts (" +
                                   std::string("diloco node --name ") + who + ")"
                             : ""));
}

// What a handshake taught either side about node `node` (put_atom here, learned_atom when this
// node asked).
void learn(node_view& v, const std::string& node, caf::actor peer_registry,
           std::vector<caf::actor> actors, uint32_t their_incarnation, bool their_running,
           uint32_t mine_known, uint64_t instance) {
  auto& p = v.peers[node];
  p.registry = std::move(peer_registry);
  p.actors = std::move(actors);
  p.incarnation = their_incarnation;
  p.running = their_running;
  if (their_running) {
    v.peers_running = true;
    v.known_incarnation = std::max(v.known_incarnation, mine_known);
  }
  if (v.instance == 0) v.instance = instance;
}

// A node offers its actors, giving its run identity: accepted if it runs this cluster file and
// offers as many actors as the file places there. The answer is ours, whatever happened.
caf::message on_offer(registry_actor* self, uint64_t theirs, const std::string& node,
                      caf::actor peer_registry, std::vector<caf::actor> actors, bool their_running,
                      uint32_t their_incarnation, uint32_t mine_known, uint64_t instance) {
  auto& st = self->state;
  auto& v = st.view;
  uint32_t known_of_them = 0;
  const size_t placed = st.where.on(node).size();
  if (theirs != st.identity) {
    v.refused = "node " + node + " runs another cluster file (it was refused)";
  } else if (actors.size() != placed || node == st.where.self) {
    v.refused = "node " + node + " offered " + std::to_string(actors.size()) +
                " actors; the cluster file places " + std::to_string(placed) +
                " there (it was refused)";
  } else {
    known_of_them = v.peers[node].incarnation;
    if (v.running && node == st.where.leader && !their_running) {
      // The leader's node offers while its run goes on here, and is wiring: a new process of
      // it (the old one died before this node saw it go). The run died with the old one: this
      // node ends too, and its next process joins the new run (the leader waits for it).
      if (v.leader_lost.empty())
        v.leader_lost = "node " + node +
                        " (the leader) started a new process: the run it led ended with its old "
                        "one; start this node again to join the new run";
    } else if (v.running) {
      // A restarted node: its actors get wired here when it says rejoin.
      v.peers[node].lost = false;
      watch(self, peer_registry, node);
      v.events.push_back("node " + node + " is back; waiting for it to rejoin");
    }
    learn(v, node, std::move(peer_registry), std::move(actors), their_incarnation, their_running,
          mine_known, instance);
  }
  return caf::make_message(st.identity, st.local, v.running, v.incarnation, known_of_them,
                           v.instance);
}

// A restarted node's process joins the running run: its actors replace the dead ones in every
// directory of this node (by message: each actor swaps in its own copy). False if the node
// offers a different number of actors than the file places there.
bool on_rejoin(registry_actor* self, const std::string& node, uint32_t incarnation,
               caf::actor peer_registry, std::vector<caf::actor> actors) {
  auto& st = self->state;
  const auto slots = st.where.on(node);
  if (slots.size() != actors.size() || node == st.where.self) return false;
  for (size_t k = 0; k < slots.size(); ++k) {
    for (const auto& a : st.local) caf::anon_send(a, rewire_msg{slots[k], actors[k]});
  }
  auto& p = st.view.peers[node];
  if (p.registry != peer_registry) watch(self, peer_registry, node);
  p.registry = std::move(peer_registry);
  p.actors = std::move(actors);
  p.incarnation = incarnation;
  p.up = true;
  p.lost = false;
  if (st.on_node) st.on_node(node, true, incarnation);
  st.view.events.push_back("node " + node + " rejoined with process " +
                           std::to_string(incarnation) + ": its " + std::to_string(slots.size()) +
                           " actors are wired here");
  return true;
}

}  // namespace

caf::behavior registry(registry_actor* self, std::vector<caf::actor> local, placement_view where,
                       uint64_t identity, uint64_t first_instance,
                       std::function<void(const std::string&, bool, uint32_t)> on_node) {
  self->state.on_node = std::move(on_node);
  self->state.local = std::move(local);
  self->state.where = std::move(where);
  self->state.identity = identity;
  self->state.view.instance = first_instance;
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
      // A node asks for our actors, giving its run identity; we answer with ours and them.
      // Both sides say whether their run is going on, which process of theirs this is and
      // which of the other they knew last: a restarted node learns so that it is one.
      [self](caf::put_atom, uint64_t theirs, const std::string& node, caf::actor peer_registry,
             std::vector<caf::actor> actors, bool their_running, uint32_t their_incarnation,
             uint32_t mine_known, uint64_t instance) {
        return on_offer(self, theirs, node, std::move(peer_registry), std::move(actors),
                        their_running, their_incarnation, mine_known, instance);
      },
      // The main thread's side of a handshake it made with node `node`.
      [self](learned_atom, const std::string& node, caf::actor peer_registry,
             std::vector<caf::actor> actors, uint32_t their_incarnation, bool their_running,
             uint32_t mine_known, uint64_t instance) {
        learn(self->state.view, node, std::move(peer_registry), std::move(actors),
              their_incarnation, their_running, mine_known, instance);
      },
      // This node's actors run: every peer known now is up, and watched.
      [self](running_atom, uint32_t incarnation) {
        auto& v = self->state.view;
        v.running = true;
        v.incarnation = incarnation;
        for (auto& [node, peer] : v.peers) {
          peer.up = true;
          watch(self, peer.registry, node);
        }
      },
      // Leader: forget the nodes met so far (they ran an earlier process's run).
      [self](forget_atom) {
        auto& v = self->state.view;
        DILOCO_CHECK(!v.running, "registry: nodes are forgotten only before this node runs");
        v.peers.clear();
        v.peers_running = false;
        v.known_incarnation = 0;
      },
      // A gone node answered a redial with its new process's registry.
      [self](back_atom, const std::string& node, caf::actor peer_registry) {
        self->state.view.peers[node].lost = false;
        watch(self, peer_registry, node);
      },
      // A copy of the view; `drain` hands over the events to report (and forgets them).
      [self](caf::get_atom, bool drain) {
        auto& v = self->state.view;
        node_view copy = v;
        if (drain) v.events.clear();
        return copy;
      },
      // A restarted node's process joins the running run (on_rejoin).
      // Held until this node's directory is whole: a rewire copies it, and a copy taken before
      // the main thread placed the peers' actors would send to nobody for good (two nodes
      // restarted together each rejoin the other while still wiring).
      [self](rejoin_atom, const std::string& node, uint32_t incarnation, caf::actor peer_registry,
             std::vector<caf::actor> actors) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.wired) {
          st.held.push_back(registry_state::held_rejoin{node, incarnation, std::move(peer_registry),
                                                        std::move(actors),
                                                        self->make_response_promise()});
          return st.held.back().answer;
        }
        return on_rejoin(self, node, incarnation, std::move(peer_registry), std::move(actors));
      },
      // The main thread placed every peer's actors: the rejoins held meanwhile are wired now.
      [self](wired_atom) {
        auto& st = self->state;
        st.wired = true;
        auto held = std::move(st.held);
        st.held.clear();
        for (auto& h : held) {
          h.answer.deliver(
              on_rejoin(self, h.node, h.incarnation, std::move(h.registry), std::move(h.actors)));
        }
      },
      // Leader: a node has wired its directory.
      [self](caf::join_atom, const std::string& node) { self->state.view.wired.insert(node); },
      // A heartbeat from a node that checks this one is alive.
      [](caf::tick_atom) { return caf::make_message(caf::ok_atom_v); },
      // The main thread's heartbeat `seq` to the leader's registry, answered within
      // `timeout_s` or failed: the view says which (an older one's late answer is dropped).
      [self](beat_atom, uint64_t seq, const caf::actor& leader, double timeout_s) {
        auto& b = self->state.view.beat;
        b = beat_reading{};
        b.seq = seq;
        b.sent = shared_clock_ns();
        self->request(
                leader,
                std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(timeout_s)),
                clock_atom::value)
            .then(
                [self, seq](int64_t theirs) {
                  auto& r = self->state.view.beat;
                  if (r.seq != seq) return;
                  r.theirs = theirs;
                  r.back = shared_clock_ns();
                  r.done = true;
                },
                [self, seq](caf::error& e) {
                  auto& r = self->state.view.beat;
                  if (r.seq != seq) return;
                  r.failed = self->system().render(e);
                  r.done = true;
                });
      },
      // The run's time here, for a node measuring its clock against this one's.
      [](clock_atom) { return caf::make_message(shared_clock_ns()); },
      // Watch a node: when its connection is lost (heartbeats missing for the peer timeout, or
      // closed), the leader's loss ends the run, another node's is waited out.
      [self](caf::monitor_atom, caf::actor peer, const std::string& name) {
        watch(self, peer, name);
      },
      // The leader says the run is over (and waits for the answer, so that its own shutdown
      // cannot close the connection before this arrived). The registry stays to answer the
      // main thread, which stops it.
      [self](caf::close_atom) {
        self->state.view.shutdown = true;
        return caf::make_message(caf::ok_atom_v);
      },
  };
}

}  // namespace diloco
