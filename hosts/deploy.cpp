#include "hosts/deploy.hpp"

#include <spdlog/spdlog.h>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "hosts/harness.hpp"
#include "actors/state_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "net/bulk_channel.hpp"
#include "net/frame_tunnel.hpp"
#include "net/handshake.hpp"
#include "net/openssl_setup.hpp"
#include "protocol/type_ids.hpp"

namespace diloco {

namespace {

using namespace std::chrono_literals;

std::string human_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Asks the registry of a restarted node's peers to take its new actors (see run_node).
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;

// What a node knows of another node of the cluster.
struct peer_info {
  caf::actor registry;
  std::vector<caf::actor> actors;  // by ascending index
  uint32_t incarnation = 0;        // of the node's process this node knows last
  bool up = false;                 // its actors run and are wired here
  bool lost = false;               // its process went away and has not come back yet
  std::chrono::steady_clock::time_point lost_at;
};

// What the registry actor and the node's main thread share.
struct node_state {
  std::mutex mu;
  std::condition_variable changed;
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
};

// Who runs where: what the registry needs to wire a restarted node's actors.
struct placement_view {
  actor_indices ids;
  std::vector<std::string> node_of;  // by actor index
  std::string self;                  // this node
  std::string leader;
  std::vector<uint32_t> on(const std::string& node) const {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < node_of.size(); ++i) {
      if (node_of[i] == node) out.push_back(i);
    }
    return out;
  }
};

struct registry_state {
  std::shared_ptr<node_state> shared;
  // A node's process went away (up false) or rejoined (up true, its process number).
  std::function<void(const std::string&, bool, uint32_t)> on_node;
  std::vector<caf::actor> local;  // this node's actors, by ascending index
  placement_view where;
  uint64_t identity = 0;
  std::map<caf::actor_addr, std::string> watched;
};

// A node's process ended (its connection closed, or it stopped answering): on its behalf, every
// actor of this node that had a link to one of its actors sees that link close (closed_msg, as
// the simulation's failure detection gives it). Shards drop its learners from their live sets
// and quorums; learners stop waiting for its shards.
void close_links_of(const placement_view& where, const std::vector<caf::actor>& local,
                    const std::string& node, uint32_t incarnation) {
  const auto mine = where.on(where.self);
  const auto gone = where.on(node);
  const actor_indices& ids = where.ids;
  for (size_t k = 0; k < mine.size(); ++k) {
    for (uint32_t g : gone) {
      if ((ids.is_learner(mine[k]) && ids.is_shard(g)) ||
          (ids.is_shard(mine[k]) && ids.is_learner(g)))
        caf::anon_send(local[k], closed_msg{stamp{g, vector_clock{}, 0}, incarnation});
    }
  }
}

std::string instance_tag(uint64_t instance) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "# deployment instance %016llx",
                static_cast<unsigned long long>(instance));
  return buf;
}

// The newest snapshot under `root` that this execution of the run wrote (see
// node_state::instance), or an error saying why there is none.
result<loaded_snapshot> newest_snapshot_of(const std::string& root, uint64_t run_id,
                                           uint64_t instance) {
  auto listing = list_snapshots(root);
  if (!listing) return listing.error();
  const std::string tag = instance_tag(instance);
  std::string skipped;
  for (auto it = listing->rbegin(); it != listing->rend(); ++it) {
    if (!it->has_manifest) continue;
    auto s = load_snapshot(it->path);
    if (!s) {
      skipped += "; " + s.error().message();
      continue;
    }
    if (s->manifest.run_id == run_id && s->manifest.config_text.find(tag) != std::string::npos)
      return s;
  }
  return status(errc::not_found,
                "no snapshot of this execution of the run under " + root +
                    (skipped.empty() ? "" : " (unusable: " + skipped.substr(2) + ")"));
}

// The most recently written snapshot of run `run_id` under `root`, from a deployed (real-time)
// run, any execution, and why each newer one was skipped; or an error saying why there is none.
struct resume_pick {
  loaded_snapshot snapshot;
  std::vector<std::string> skipped;
};
result<resume_pick> latest_snapshot_of_run(const std::string& root, uint64_t run_id) {
  auto listing = list_snapshots(root);
  if (!listing) return listing.error();
  std::vector<std::pair<std::filesystem::file_time_type, std::string>> by_time;
  for (const auto& l : *listing) {
    std::error_code ec;
    if (!l.has_manifest) continue;
    const auto t = std::filesystem::last_write_time(l.path + "/MANIFEST", ec);
    if (!ec) by_time.emplace_back(t, l.path);
  }
  std::sort(by_time.rbegin(), by_time.rend());
  std::vector<std::string> skipped;
  for (const auto& [t, path] : by_time) {
    auto s = load_snapshot(path);
    if (!s) {
      skipped.push_back(s.error().message());
    } else if (s->manifest.run_id != run_id) {
      skipped.push_back(path + ": another run");
    } else if (s->manifest.tick_scale != 1) {
      skipped.push_back(path + ": a simulation's (resume it with diloco simulate --resume)");
    } else {
      return resume_pick{std::move(*s), std::move(skipped)};
    }
  }
  std::string why;
  for (const auto& w : skipped) why += (why.empty() ? "" : "; ") + w;
  return status(errc::not_found, "--resume: no snapshot of this run's deployment under " + root +
                                     (why.empty() ? "" : " (" + why + ")"));
}

// The node's published actor: hands out this node's actors to nodes with the same
// configuration, carries the start barrier and the shutdown, notices nodes going away, and
// rewires this node's actors when a node's process comes back.
caf::behavior registry(caf::stateful_actor<registry_state>* self,
                       std::shared_ptr<node_state> shared, std::vector<caf::actor> local,
                       placement_view where, uint64_t identity,
                       std::function<void(const std::string&, bool, uint32_t)> on_node) {
  self->state.shared = std::move(shared);
  self->state.on_node = std::move(on_node);
  self->state.local = std::move(local);
  self->state.where = std::move(where);
  self->state.identity = identity;
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto& s = *st.shared;
    auto it = st.watched.find(dm.source);
    if (it == st.watched.end()) return;
    const std::string who = it->second;
    st.watched.erase(it);
    std::lock_guard<std::mutex> g(s.mu);
    if (s.shutdown) return;
    const std::string why = to_string(dm.reason);
    if (who == st.where.leader) {
      if (s.leader_lost.empty()) s.leader_lost = "node " + who + " went away (" + why + ")";
    } else {
      auto& p = s.peers[who];
      if (p.registry.address() != dm.source) return;  // an older process of that node
      if (st.on_node) st.on_node(who, false, p.incarnation);
      if (p.up && s.running) close_links_of(st.where, st.local, who, p.incarnation);
      const bool was_up = p.up;
      p.up = false;
      p.lost = true;
      p.lost_at = std::chrono::steady_clock::now();
      s.events.push_back("node " + who + " went away (" + why + ")" +
                         (was_up ? "; its actors are down here until its process restarts (" +
                                       std::string("diloco node --name ") + who + ")"
                                 : ""));
    }
    s.changed.notify_all();
  });
  auto watch = [self](const caf::actor& peer, const std::string& name) {
    self->state.watched[peer.address()] = name;
    self->monitor(peer);
  };
  return {
      // A node asks for our actors, giving its run identity; we answer with ours and them.
      // Both sides say whether their run is going on, which process of theirs this is and
      // which of the other they knew last: a restarted node learns so that it is one.
      [self, watch](caf::put_atom, uint64_t theirs, const std::string& node,
                    caf::actor peer_registry, std::vector<caf::actor> actors, bool their_running,
                    uint32_t their_incarnation, uint32_t mine_known, uint64_t instance) {
        auto& st = self->state;
        auto& s = *st.shared;
        std::lock_guard<std::mutex> g(s.mu);
        uint32_t known_of_them = 0;
        if (theirs != st.identity) {
          s.refused = "node " + node + " runs another cluster file (it was refused)";
        } else {
          auto& p = s.peers[node];
          known_of_them = p.incarnation;
          p.registry = peer_registry;
          p.actors = std::move(actors);
          p.incarnation = their_incarnation;
          if (s.running) {
            // A restarted node: its actors get wired here when it says rejoin.
            p.lost = false;
            watch(peer_registry, node);
            s.events.push_back("node " + node + " is back; waiting for it to rejoin");
          }
          if (their_running) {
            s.peers_running = true;
            s.known_incarnation = std::max(s.known_incarnation, mine_known);
          }
          if (s.instance == 0) s.instance = instance;
        }
        s.changed.notify_all();
        return caf::make_message(st.identity, st.local, s.running, s.incarnation, known_of_them,
                                 s.instance);
      },
      // A restarted node's process joins the running run: its actors replace the dead ones in
      // every directory of this node (by message: each actor swaps in its own copy).
      [self, watch](rejoin_atom, const std::string& node, uint32_t incarnation,
                    caf::actor peer_registry, std::vector<caf::actor> actors) -> caf::result<bool> {
        auto& st = self->state;
        const auto slots = st.where.on(node);
        if (slots.size() != actors.size() || node == st.where.self) return false;
        for (size_t k = 0; k < slots.size(); ++k) {
          for (const auto& a : st.local) caf::anon_send(a, rewire_msg{slots[k], actors[k]});
        }
        auto& s = *st.shared;
        std::lock_guard<std::mutex> g(s.mu);
        auto& p = s.peers[node];
        if (p.registry != peer_registry) watch(peer_registry, node);
        p.registry = std::move(peer_registry);
        p.actors = std::move(actors);
        p.incarnation = incarnation;
        p.up = true;
        p.lost = false;
        if (st.on_node) st.on_node(node, true, incarnation);
        s.events.push_back("node " + node + " rejoined with process " +
                           std::to_string(incarnation) + ": its " + std::to_string(slots.size()) +
                           " actors are wired here");
        s.changed.notify_all();
        return true;
      },
      // Leader: a node has wired its directory.
      [self](caf::join_atom, const std::string& node) {
        auto& s = *self->state.shared;
        std::lock_guard<std::mutex> g(s.mu);
        s.wired.insert(node);
        s.changed.notify_all();
      },
      // A heartbeat from a node that checks this one is alive.
      [](caf::tick_atom) { return caf::make_message(caf::ok_atom_v); },
      // Watch a node: when its connection is lost (heartbeats missing for the peer timeout, or
      // closed), the leader's loss ends the run, another node's is waited out.
      [watch](caf::monitor_atom, caf::actor peer, const std::string& name) { watch(peer, name); },
      // The leader says the run is over (and waits for the answer, so that its own shutdown
      // cannot close the connection before this arrived).
      [self](caf::close_atom) {
        auto& s = *self->state.shared;
        {
          std::lock_guard<std::mutex> g(s.mu);
          s.shutdown = true;
          s.changed.notify_all();
        }
        self->quit();
        return caf::make_message(caf::ok_atom_v);
      },
  };
}

// Asks a node's registry for a heartbeat answer within `timeout_s`; the error when none came.
status ping(caf::scoped_actor& self, caf::actor_system& sys, const caf::actor& registry,
            const std::string& name, double timeout_s) {
  status st;
  self->request(registry,
                std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(timeout_s)),
                caf::tick_atom_v)
      .receive([](caf::ok_atom) {},
               [&](caf::error& e) {
                 st = status(errc::io_error,
                             "node " + name + " did not answer a heartbeat within " +
                                 human_seconds(timeout_s) + " s (" + sys.render(e) + ")");
               });
  return st;
}

// The largest tensor payload one message of this run can carry between nodes: a shard's
// snapshot part on resume (every fragment's global value, outer momentum, downlink residual
// and recovery copy, staleness_max encoded updates, and the unanswered deltas of every
// learner slot), each at most the model in fp32 plus its codec header, with 1 MiB for the
// rest. A bulk frame claiming more is refused before anything is read.
uint64_t largest_payload_bytes(const run_config& c) {
  const uint64_t model_bytes = mlp_lm(c.model).layout().buffer_floats() * sizeof(float) + 4096;
  // No limit on unanswered deltas (0): those older than staleness_max versions are dropped.
  const uint64_t unanswered = static_cast<uint64_t>(
      c.max_unanswered_deltas > 0 ? c.max_unanswered_deltas : c.staleness_max);
  const uint64_t copies = 4 + static_cast<uint64_t>(c.staleness_max) +
                          static_cast<uint64_t>(c.learner_capacity()) * (unanswered + 1);
  return model_bytes * copies + (uint64_t{1} << 20);
}

// The node's bulk channel, for tensor_blob's resolver (one node per process).
std::atomic<bulk_channel*> the_channel{nullptr};

tensor_blob::bytes_ptr resolve_on_channel(uint64_t id, uint64_t size) {
  bulk_channel* ch = the_channel.load();
  return ch != nullptr ? ch->take(id, size) : nullptr;
}

// Clears the resolver when the node is done (declared after the channel, so before it goes).
struct resolver_guard {
  explicit resolver_guard(bulk_channel* ch) {
    the_channel.store(ch);
    tensor_blob::set_resolver(ch != nullptr ? &resolve_on_channel : nullptr);
  }
  ~resolver_guard() {
    tensor_blob::set_resolver(nullptr);
    the_channel.store(nullptr);
  }
  resolver_guard(const resolver_guard&) = delete;
  resolver_guard& operator=(const resolver_guard&) = delete;
};

// Payloads of at least `min_bytes` for actors on other nodes go on the bulk channel.
class node_offload : public blob_offload {
 public:
  node_offload(bulk_channel& ch, std::vector<uint32_t> node_of, uint32_t self, uint64_t min_bytes)
      : ch_(ch), node_of_(std::move(node_of)), self_(self), min_bytes_(min_bytes) {}
  tensor_blob to(uint32_t dest_index, const tensor_blob& blob) override {
    const uint32_t node = node_of_.at(dest_index);
    if (node == self_ || blob.empty() || blob.size() < min_bytes_ || blob.is_reference())
      return blob;
    const uint64_t id = ch_.push(node, blob.shared_bytes());
    // 0: no room on the way to that node within the wait timeout; the payload is dropped
    // (counted) and the receiver rejects the empty blob like any malformed one.
    return id != 0 ? tensor_blob::reference(id, blob.size()) : tensor_blob();
  }

 private:
  bulk_channel& ch_;
  std::vector<uint32_t> node_of_;
  uint32_t self_;
  uint64_t min_bytes_;
};

std::string bulk_summary(const bulk_stats& b) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "bulk channel: sent %llu payloads (%.1f MB), received %llu (%.1f MB); refused "
      "connections: %llu bad hello, %llu bad frame, %llu oversized, %llu truncated, "
      "%llu silent, %llu over capacity; %llu unresolved, %llu dropped for lack of room",
      static_cast<unsigned long long>(b.frames_sent), b.bytes_sent / 1e6,
      static_cast<unsigned long long>(b.frames_received), b.bytes_received / 1e6,
      static_cast<unsigned long long>(b.bad_hello), static_cast<unsigned long long>(b.bad_frame),
      static_cast<unsigned long long>(b.oversized), static_cast<unsigned long long>(b.truncated),
      static_cast<unsigned long long>(b.hello_timeout),
      static_cast<unsigned long long>(b.over_capacity),
      static_cast<unsigned long long>(b.unresolved),
      static_cast<unsigned long long>(b.send_dropped));
  return buf;
}

// CAF 0.17.6 sometimes never finishes an actor system's shutdown (about one node exit in 30
// waits forever for a detached learner's thread). The run is over by then and its outcome
// reported (node_options::on_done), so a watchdog ends the process with that outcome's exit
// code if the shutdown has not finished within `grace`.
void shut_down(std::unique_ptr<caf::actor_system> sys, int exit_code,
               std::chrono::seconds grace = std::chrono::seconds(3)) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, grace, [&] { return done; })) return;
    std::fprintf(stderr,
                 "the actor system did not shut down within %lld s (a CAF 0.17 shutdown race); "
                 "exiting with the run's outcome (%d)\n",
                 static_cast<long long>(grace.count()), exit_code);
    std::fflush(nullptr);
    std::_Exit(exit_code);
  });
  sys.reset();
  {
    std::lock_guard<std::mutex> g(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

}  // namespace

result<node_result> run_node(const run_config& config, const node_options& o) {
  const auto& d = config.deploy;
  if (!d.enabled()) return status(errc::invalid_argument, "nodes: the cluster file names no nodes");
  const node_config* me = nullptr;
  uint32_t my_index = 0;
  std::string names;
  for (size_t i = 0; i < d.nodes.size(); ++i) {
    if (d.nodes[i].name == o.name) {
      me = &d.nodes[i];
      my_index = static_cast<uint32_t>(i);
    }
    names += (names.empty() ? "" : ", ") + d.nodes[i].name;
  }
  if (me == nullptr) {
    return status(
        errc::invalid_argument,
        "--name: no node '" + o.name + "' in the cluster file (its nodes are " + names + ")");
  }
  const bool tls = d.tls.enabled();
  // Tensor payloads between nodes: on the bulk channel at port + 1 (with mutual TLS when the
  // cluster file names certificates, like CAF's connections).
  std::unique_ptr<bulk_channel> channel;
  std::shared_ptr<node_offload> offload;
  auto for_node = [&](std::string path) {
    for (size_t at; (at = path.find("{node}")) != std::string::npos;) path.replace(at, 6, o.name);
    return path;
  };
  if (tls) {
    // CAF's TLS sessions and OpenSSL 3 (net/openssl_setup.hpp).
    if (!tls_error_queue_guard_active()) {
      spdlog::warn(
          "node {}: OpenSSL's error queue is not cleared before CAF's TLS calls: a "
          "killed node may cut its peers' other TLS links",
          o.name);
    }
    // Mutual TLS: this node's certificate and key, and the CA every peer's must be signed by.
    for (const auto& [key, path] : {std::make_pair("tls.ca", d.tls.ca),
                                    std::make_pair("tls.certificate", for_node(d.tls.certificate)),
                                    std::make_pair("tls.key", for_node(d.tls.key))}) {
      if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
        std::fclose(f);
      } else {
        return status(errc::not_found, std::string(key) + ": " + path + ": cannot be read");
      }
    }
  }
  // The run's shared secret: hellos on both ports are tagged with it (net/handshake.hpp).
  std::string secret;
  if (!d.secret_file.empty()) {
    auto s = read_secret_file(d.secret_file);
    if (!s) return s.error();
    secret = std::move(*s);
  } else if (!tls) {
    spdlog::warn(
        "node {}: plain TCP without secret_file: anyone who can read the cluster file can "
        "connect to this node (docs/deploy.md, \"What plain TCP protects\")",
        o.name);
  }
  if (o.bulk) {
    bulk_options bo;
    bo.secret = secret;
    bo.max_frame_bytes = largest_payload_bytes(config);
    bo.self = my_index;
    for (const auto& n : d.nodes) bo.peers.push_back({n.host, static_cast<uint16_t>(n.port + 1)});
    bo.listen_port = static_cast<uint16_t>(me->port + 1);
    bo.identity = o.identity;
    bo.wait_timeout_s = o.peer_timeout_s;
    bo.inbox_limit_bytes = o.bulk_limit_bytes;
    bo.send_limit_bytes = o.bulk_limit_bytes;
    if (tls) {
      bo.tls_ca = d.tls.ca;
      bo.tls_certificate = for_node(d.tls.certificate);
      bo.tls_key = for_node(d.tls.key);
    }
    auto ch = bulk_channel::open(bo);
    if (!ch) return status(errc::io_error, "node " + o.name + ": " + ch.error().message());
    channel = std::move(*ch);
  }
  resolver_guard resolving(channel.get());
  if (channel) {
    actor_indices place_ids;
    place_ids.learners = static_cast<uint32_t>(config.learner_capacity());
    place_ids.shards = static_cast<uint32_t>(config.shards);
    std::vector<uint32_t> node_of;
    for (uint32_t i = 0; i < place_ids.count(); ++i) {
      const std::string n = d.node_of(place_ids, i);
      for (uint32_t k = 0; k < d.nodes.size(); ++k) {
        if (d.nodes[k].name == n) node_of.push_back(k);
      }
    }
    offload =
        std::make_shared<node_offload>(*channel, std::move(node_of), my_index, o.bulk_min_bytes);
  }
  auto env_r = actor_env::make(config, false, {nullptr, offload, o.observer});
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  const auto& ids = env->ids;
  const std::string leader = d.node_of(ids, ids.metrics());
  // Resuming (leader): the snapshot's shard and metrics parts, checked before anything starts.
  std::optional<loaded_snapshot> resume;
  if (!o.resume_dir.empty()) {
    if (leader != o.name) {
      return status(errc::invalid_argument,
                    "--resume: only the leader (node " + leader +
                        ") resumes a run; start the other nodes without it");
    }
    auto pick = latest_snapshot_of_run(o.resume_dir, o.run_id);
    if (!pick) return pick.error();
    for (const auto& why : pick->skipped) spdlog::warn("--resume: skipping {}", why);
    const loaded_snapshot& s = pick->snapshot;
    for (uint32_t i = ids.shard(0); i <= ids.metrics(); ++i) {
      if (i == ids.scheduler()) continue;
      const auto& part = s.parts.at(i);
      if (auto st = check_part(env, i, byte_view(part.data(), part.size()), s.path); !st.ok())
        return st;
    }
    resume = std::move(pick->snapshot);
  }
  auto say = [&](const std::string& what) {
    if (o.on_event) o.on_event(what);
  };

  // On the heap, and given up on if it does not shut down in time (see lenient_delete).
  auto cfg_owner = std::make_unique<caf::actor_system_config>();
  caf::actor_system_config& cfg = *cfg_owner;
  harness::make_quiet(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-throughput", static_cast<size_t>(1));
  // A node that stops answering is dropped after `peer_timeout_s` without heartbeats.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::duration_cast<caf::timespan>(
                                              std::chrono::duration<double>(o.heartbeat_s))});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::duration_cast<caf::timespan>(
                                              std::chrono::duration<double>(o.peer_timeout_s))});
  if (tls) {
    cfg.load<caf::openssl::manager>();
    cfg.set("openssl.certificate", for_node(d.tls.certificate));
    cfg.set("openssl.key", for_node(d.tls.key));
    cfg.set("openssl.cafile", d.tls.ca);
  }
  std::unique_ptr<frame_tunnel> tunnel;  // outlives the actor system: CAF's links run through it
  auto node_index = [&](const std::string& name) {
    uint32_t k = 0;
    while (k < d.nodes.size() && d.nodes[k].name != name) ++k;
    return k;
  };
  auto sys_owner = std::make_unique<caf::actor_system>(cfg);
  caf::actor_system& sys = *sys_owner;
  // The node's work; its handles are gone when it returns, before the system shuts down.
  auto body = [&]() -> result<node_result> {
    caf::scoped_actor self{sys};
    auto shared = std::make_shared<node_state>();
    placement_view where;
    where.ids = ids;
    where.self = o.name;
    where.leader = leader;
    for (uint32_t i = 0; i < ids.count(); ++i) where.node_of.push_back(d.node_of(ids, i));

    if (leader == o.name) {
      std::random_device rd;
      shared->instance = (uint64_t{rd()} << 32 | rd()) | 1;  // never 0
    }
    // This node's actors. The snapshot coordinator (on the leader) writes the manifests, with
    // this execution's instance as a comment after the configuration.
    auto snap_ctx = std::make_shared<snapshot_context>();
    snap_ctx->run_id = o.run_id;
    snap_ctx->config_text = o.config_text + instance_tag(shared->instance) + "\n";
    snap_ctx->on_commit = [&say](uint64_t n, const std::string& path) {
      say("snapshot " + std::to_string(n) + " committed: " + path);
    };
    auto dir = std::make_shared<cluster_directory>();
    std::vector<caf::actor> local;
    for (uint32_t i : where.on(o.name)) {
      auto a = harness::spawn_actor(sys, env, dir, i, snap_ctx);
      harness::place(*dir, ids, i, a);
      local.push_back(a);
    }
    const uint64_t identity = o.identity;
    auto reg = sys.spawn(registry, shared, local, where, identity,
                         [&](const std::string& node, bool up, uint32_t process) {
                           if (!up && channel) channel->reset(node_index(node));
                           if (o.on_node) o.on_node(node, up, process);
                         });
    auto stop_all = [&] {
      for (const auto& a : local) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
    };
    // SO_REUSEADDR: a node restarted after a crash gets its port back at once.
    // With the front (net/frame_tunnel.hpp) the middleman listens on loopback only, on any
    // free port, and the node's port belongs to the front, which lets framed input of this
    // run through and nothing else.
    const uint16_t caf_port = o.front ? 0 : static_cast<uint16_t>(me->port);
    const char* caf_host = o.front ? "127.0.0.1" : nullptr;
    auto published = tls ? caf::openssl::publish(reg, caf_port, caf_host, true)
                         : sys.middleman().publish(reg, caf_port, caf_host, true);
    if (!published) {
      stop_all();
      return status(errc::io_error, "node " + o.name + ": cannot listen on port " +
                                        std::to_string(caf_port) + ": " +
                                        sys.render(published.error()));
    }
    if (o.front) {
      tunnel_options to;
      to.self = my_index;
      for (const auto& n : d.nodes) to.peers.push_back({n.host, static_cast<uint16_t>(n.port)});
      to.front_port = static_cast<uint16_t>(me->port);
      to.caf_port = *published;
      to.identity = o.identity;
      to.secret = secret;
      auto t = frame_tunnel::open(to);
      if (!t) {
        stop_all();
        return status(errc::io_error, "node " + o.name + ": " + t.error().message());
      }
      tunnel = std::move(*t);
    }
    say("listening on port " + std::to_string(me->port) + (tls ? " (mutual TLS)" : " (plain TCP)") +
        " with " + std::to_string(local.size()) + " actors" +
        (channel ? "; tensor payloads on the bulk channel at port " + std::to_string(me->port + 1) +
                       (tls ? " (mutual TLS)" : "")
                 : ""));
    auto bulk_report = [&] {
      if (channel) say(bulk_summary(channel->stats()));
      if (tunnel) {
        const auto t = tunnel->stats();
        say("front: " + std::to_string(t.tunnels) + " of " + std::to_string(t.accepted) +
            " connections let through; refused: " + std::to_string(t.bad_hello) + " bad hello, " +
            std::to_string(t.bad_frame) + " bad frame, " + std::to_string(t.oversized) +
            " oversized, " + std::to_string(t.truncated) + " truncated, " +
            std::to_string(t.hello_timeout) + " silent, " + std::to_string(t.over_capacity) +
            " over capacity");
      }
    };

    // One connection per pair of nodes: a node connects to every node listed after it, sends
    // its registry and actors with its run identity, and gets the other's actors back; it
    // waits for the nodes listed before it to connect to it. Then every remote actor is a proxy
    // in the directory. A node whose process went away mid-run is connected to again the same
    // way (the nodes listed before it dial it until it is back, see tend_peers).
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(o.connect_timeout_s);
    auto dial = [&](const node_config& n) -> caf::expected<caf::actor> {
      // Through the front: to this node's local end of the tunnel to n.
      const std::string host = tunnel ? "127.0.0.1" : n.host;
      const auto port =
          static_cast<uint16_t>(tunnel ? tunnel->outbound_port(node_index(n.name)) : n.port);
      return tls ? caf::openssl::remote_actor(sys, host, port)
                 : sys.middleman().remote_actor(host, port);
    };
    // The registry handshake with node `name` (reached at `remote`): both learn the other's
    // actors, whether its run is going on, and which processes they are.
    auto exchange = [&](caf::scoped_actor& asker, const std::string& name,
                        const caf::actor& remote) -> status {
      bool running = false;
      uint32_t mine = 0, known = 0;
      uint64_t instance = 0;
      {
        std::lock_guard<std::mutex> g(shared->mu);
        running = shared->running;
        instance = shared->instance;
        mine = shared->incarnation;
        if (auto it = shared->peers.find(name); it != shared->peers.end())
          known = it->second.incarnation;
      }
      status failure;
      asker
          ->request(remote, 30s, caf::put_atom_v, identity, o.name,
                    caf::actor_cast<caf::actor>(reg), local, running, mine, known, instance)
          .receive(
              [&](uint64_t their_identity, std::vector<caf::actor> actors, bool their_running,
                  uint32_t their_incarnation, uint32_t mine_known, uint64_t their_instance) {
                const auto expected = where.on(name);
                if (their_identity != identity) {
                  failure = status(
                      errc::invalid_argument,
                      "node " + name +
                          " runs another cluster file (its nodes, placement or settings differ)");
                } else if (actors.size() != expected.size()) {
                  failure = status(errc::invalid_argument,
                                   "node " + name + " runs " + std::to_string(actors.size()) +
                                       " actors, the cluster file places " +
                                       std::to_string(expected.size()) + " there");
                } else {
                  std::lock_guard<std::mutex> g(shared->mu);
                  auto& p = shared->peers[name];
                  p.registry = remote;
                  p.actors = std::move(actors);
                  p.incarnation = their_incarnation;
                  if (their_running) {
                    shared->peers_running = true;
                    shared->known_incarnation = std::max(shared->known_incarnation, mine_known);
                  }
                  if (shared->instance == 0) shared->instance = their_instance;
                }
              },
              [&](caf::error& e) {
                failure = status(errc::io_error, "node " + name + ": " + sys.render(e));
              });
      return failure;
    };
    bool after_me = false;
    for (const auto& n : d.nodes) {
      if (n.name == o.name) {
        after_me = true;
        continue;
      }
      if (!after_me) continue;  // that node connects to us
      caf::expected<caf::actor> remote = caf::sec::none;
      for (int attempt = 0;; ++attempt) {
        remote = dial(n);
        if (remote) break;
        if (tunnel) {
          if (const std::string why = tunnel->refusal(node_index(n.name)); !why.empty()) {
            stop_all();
            return status(errc::invalid_argument,
                          "node " + n.name + " refused this node's connection: " + why);
          }
        }
        if (std::chrono::steady_clock::now() > deadline) {
          stop_all();
          return status(errc::io_error, "node " + n.name + " at " + n.host + ":" +
                                            std::to_string(n.port) + " did not come up within " +
                                            human_seconds(o.connect_timeout_s) +
                                            " s (last error: " + sys.render(remote.error()) + ")" +
                                            (tls ? "; with mutual TLS a refused certificate looks "
                                                   "the same: both nodes' certificates must be "
                                                   "signed by tls.ca"
                                                 : ""));
        }
        if (attempt == 0)
          say("waiting for node " + n.name + " at " + n.host + ":" + std::to_string(n.port));
        std::this_thread::sleep_for(200ms);
      }
      if (auto st = exchange(self, n.name, *remote); !st.ok()) {
        stop_all();
        return st;
      }
    }
    // The nodes listed before this one connect to it. Then every node's actors go into the
    // directory (before any local actor starts, so nothing reads it meanwhile).
    bool rejoining = false;
    uint32_t incarnation = 0;
    {
      std::vector<std::string> before;
      for (const auto& n : d.nodes) {
        if (n.name == o.name) break;
        before.push_back(n.name);
      }
      std::unique_lock<std::mutex> lock(shared->mu);
      auto connected = [&] {
        size_t k = 0;
        for (const auto& b : before) k += shared->peers.count(b);
        return k;
      };
      const bool all = shared->changed.wait_until(
          lock, deadline, [&] { return connected() == before.size() || !shared->refused.empty(); });
      if (!shared->refused.empty() || !all) {
        const std::string why =
            !shared->refused.empty()
                ? shared->refused
                : "only " + std::to_string(connected()) + " of the " +
                      std::to_string(before.size()) +
                      " nodes listed before this one connected within the "
                      "connect timeout" +
                      (shared->peers_running ? " (a restarted node waits for the nodes listed "
                                               "before it to notice and dial it again)"
                                             : "");
        lock.unlock();
        // Our answer to the refused node (with our identity) is on its way out: let it go.
        if (!shared->refused.empty()) std::this_thread::sleep_for(500ms);
        stop_all();
        return status(errc::io_error, "node " + o.name + ": " + why);
      }
      for (const auto& [node, peer] : shared->peers) {
        const auto slots = where.on(node);
        for (size_t k = 0; k < slots.size(); ++k)
          harness::place(*dir, ids, slots[k], peer.actors[k]);
        say("connected to node " + node + " (" + std::to_string(slots.size()) + " actors)");
      }
      // Another node's run is going on: this is a restarted process of this node.
      rejoining = shared->peers_running;
      incarnation = rejoining ? shared->known_incarnation + 1 : 0;
    }
    if (rejoining && leader == o.name) {
      stop_all();
      return status(errc::invalid_argument,
                    "node " + o.name +
                        " leads the run (it hosts the metrics actor) and cannot rejoin it: the "
                        "run's accounting died with its process; stop the other nodes and start "
                        "the run again (from a snapshot, when snapshot.dir is set)");
    }
    if (rejoining) {
      // Every other node takes this process's actors into its directories (the answer comes
      // after the rewiring messages are queued at its actors, so ours cannot overtake them).
      std::vector<std::pair<std::string, caf::actor>> regs;
      {
        std::lock_guard<std::mutex> g(shared->mu);
        for (const auto& [node, peer] : shared->peers) regs.emplace_back(node, peer.registry);
      }
      for (const auto& [node, r] : regs) {
        status failure;
        self->request(r, 30s, rejoin_atom::value, o.name, incarnation,
                      caf::actor_cast<caf::actor>(reg), local)
            .receive(
                [&](bool ok) {
                  if (!ok)
                    failure = status(errc::invalid_argument,
                                     "node " + node + " refused this node's actors");
                },
                [&](caf::error& e) {
                  failure = status(errc::io_error, "node " + node + ": " + sys.render(e));
                });
        if (!failure.ok()) {
          stop_all();
          return failure;
        }
      }
    }
    {
      std::lock_guard<std::mutex> g(shared->mu);
      shared->running = true;
      shared->incarnation = incarnation;
      for (auto& [node, peer] : shared->peers) {
        peer.up = true;
        caf::anon_send(reg, caf::monitor_atom_v, peer.registry, node);
      }
    }

    // Nodes that went away: report it, and dial again the ones this node dials (listed after
    // it) until their restarted process answers; that process then rejoins (see above).
    // The dialing runs on a thread per gone node, beside the node's main loop: a dial to a host
    // that does not answer takes seconds (net/frame_tunnel.cpp gives up after 3 s).
    struct redialers {
      std::atomic<bool> ending{false};
      std::mutex mu;
      std::set<std::string> active;
      std::vector<std::thread> threads;
      ~redialers() {
        ending = true;
        for (auto& t : threads) t.join();
      }
    } redial;
    auto redial_until_back = [&](const std::string& name) {
      caf::scoped_actor dialer{sys};
      while (!redial.ending) {
        {
          std::lock_guard<std::mutex> g(shared->mu);
          if (shared->shutdown || !shared->peers[name].lost) break;
        }
        if (auto remote = dial(d.nodes[node_index(name)])) {
          if (auto st = exchange(dialer, name, *remote); st.ok()) {
            {
              std::lock_guard<std::mutex> g(shared->mu);
              shared->peers[name].lost = false;
            }
            caf::anon_send(reg, caf::monitor_atom_v, *remote, name);
            say("node " + name + " is back; waiting for it to rejoin");
            break;
          } else {
            say("node " + name + " answered but the handshake failed: " + st.message());
          }
        }
        for (int k = 0; k < 3 && !redial.ending; ++k) std::this_thread::sleep_for(100ms);
      }
      std::lock_guard<std::mutex> g(redial.mu);
      redial.active.erase(name);
    };
    auto tend_peers = [&] {
      std::vector<std::string> events, lost;
      {
        std::lock_guard<std::mutex> g(shared->mu);
        events.swap(shared->events);
        for (const auto& [node, peer] : shared->peers) {
          if (peer.lost && node_index(node) > my_index) lost.push_back(node);
        }
      }
      for (const auto& e : events) say(e);
      std::lock_guard<std::mutex> g(redial.mu);
      for (const auto& name : lost) {
        if (!redial.active.insert(name).second) continue;  // being dialed
        redial.threads.emplace_back(redial_until_back, name);
      }
    };
    auto registry_of = [&](const std::string& name) {
      std::lock_guard<std::mutex> g(shared->mu);
      return shared->peers[name].registry;
    };

    node_result out;
    out.leader = leader == o.name;
    if (!out.leader) {
      if (rejoining) {
        say("rejoined the running run as process " + std::to_string(incarnation) +
            " of this node: learners pull the global model, shards recover from the learners' "
            "copies");
        // Shards start from their part of the newest snapshot of this execution, if there is
        // one on this host (snapshot.dir on shared storage, or the leader's host).
        std::vector<tensor_blob> parts(local.size());
        const auto mine = where.on(o.name);
        const bool has_shard =
            std::any_of(mine.begin(), mine.end(), [&](uint32_t i) { return ids.is_shard(i); });
        if (has_shard && config.snapshot.enabled()) {
          uint64_t instance = 0;
          {
            std::lock_guard<std::mutex> g(shared->mu);
            instance = shared->instance;
          }
          auto snap = newest_snapshot_of(config.snapshot.dir, o.run_id, instance);
          if (!snap) {
            say(snap.error().message() + ": shards recover from the learners' copies only");
          } else {
            say("shards start from " + snap->path + ", then take newer learners' copies");
            for (size_t k = 0; k < mine.size(); ++k) {
              if (!ids.is_shard(mine[k])) continue;
              auto& bytes = snap->parts.at(mine[k]);
              if (auto st =
                      check_part(env, mine[k], byte_view(bytes.data(), bytes.size()), snap->path);
                  !st.ok()) {
                say(st.message() + ": that shard recovers from the learners' copies only");
                continue;
              }
              parts[k] = tensor_blob(bytes);
            }
          }
        }
        for (size_t k = 0; k < local.size(); ++k)
          caf::anon_send(local[k], start_msg{parts[k], incarnation});
      } else {
        caf::anon_send(registry_of(leader), caf::join_atom_v, o.name);
      }
      // Wait for the end, checking the leader is alive every heartbeat.
      std::string lost;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(shared->mu);
          shared->changed.wait_for(lock, std::chrono::duration<double>(o.heartbeat_s), [&] {
            return shared->shutdown || !shared->leader_lost.empty();
          });
          if (shared->shutdown) break;
          if (!shared->leader_lost.empty()) {
            lost = shared->leader_lost;
            break;
          }
        }
        tend_peers();
        if (auto st = ping(self, sys, registry_of(leader), leader, o.peer_timeout_s); !st.ok()) {
          std::lock_guard<std::mutex> g(shared->mu);
          if (shared->shutdown) break;  // the leader ended the run and went away meanwhile
          lost = st.message();
          break;
        }
      }
      stop_all();
      bulk_report();
      if (!lost.empty()) return status(errc::io_error, "node " + o.name + ": " + lost);
      say("the leader ended the run");
      return out;
    }

    // Leader: every node wired -> start; then watch the run.
    {
      std::unique_lock<std::mutex> lock(shared->mu);
      const auto wired_by =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(o.connect_timeout_s);
      if (!shared->changed.wait_until(lock, wired_by,
                                      [&] {
                                        return shared->wired.size() + 1 == d.nodes.size() ||
                                               !shared->events.empty();
                                      }) ||
          shared->wired.size() + 1 != d.nodes.size()) {
        // A node went away while wiring (an event says which), or never said it was wired.
        std::string missing;
        for (const auto& n : d.nodes) {
          if (n.name != o.name && shared->wired.count(n.name) == 0)
            missing += (missing.empty() ? "" : ", ") + n.name;
        }
        const std::string why =
            !shared->events.empty() ? shared->events.front() : "no word from node(s) " + missing;
        lock.unlock();
        stop_all();  // the other nodes see the leader go away and stop with an error too
        return status(errc::io_error, "node " + o.name + ": the run did not start: " + why);
      }
    }
    say("all " + std::to_string(d.nodes.size()) + " nodes wired: starting");
    // Resuming: the shards restart from their parts (and recover, as a restarted shard does:
    // the newest of the part and the learners' copies), the learners start as restarted
    // processes that pull the global model, the metrics actor continues its counts (tokens
    // towards the budget); the scheduler, the supervisor and the coordinator start afresh.
    auto start_of = [&](uint32_t i) {
      if (!resume) return start_msg{};
      if (ids.is_learner(i)) return start_msg{tensor_blob(), 1};
      if (ids.is_shard(i)) return start_msg{tensor_blob(resume->parts[i]), 1};
      if (i == ids.metrics()) return start_msg{tensor_blob(resume->parts[i]), 0};
      return start_msg{};
    };
    if (resume) {
      say("resuming from " + resume->path + " (snapshot " +
          std::to_string(resume->manifest.snapshot) +
          "): shards start from their parts, learners pull the global model, the count goes on "
          "from " +
          (ids.metrics() < resume->manifest.actors.size()
               ? resume->manifest.actors[ids.metrics()].summary
               : std::string("the snapshot's")));
    }
    const auto run_start = std::chrono::steady_clock::now();
    const int64_t start_ns = shared_clock_ns();
    if (o.on_node) {
      for (const auto& n : d.nodes) o.on_node(n.name, true, 0);
    }
    // The other nodes' actors first: what this node's actors send them then travels behind
    // their start on the same connection. Between two other nodes, a message that arrives
    // before its receiver's start waits for it (runtime/transport.hpp, started_now).
    for (uint32_t i = 0; i < ids.count(); ++i) {
      if (d.node_of(ids, i) != o.name) caf::anon_send(dir->at(i), start_of(i));
    }
    const auto mine = where.on(o.name);
    for (size_t k = 0; k < local.size(); ++k) caf::anon_send(local[k], start_of(mine[k]));
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    };
    auto finish = [&](status st) -> result<node_result> {
      std::vector<std::pair<std::string, caf::actor>> open;
      {
        std::lock_guard<std::mutex> g(shared->mu);
        for (const auto& [name, peer] : shared->peers) {
          if (!peer.lost) open.emplace_back(name, peer.registry);
        }
      }
      for (const auto& [name, r] : open) {
        self->request(r,
                      std::chrono::duration_cast<caf::timespan>(
                          std::chrono::duration<double>(o.peer_timeout_s)),
                      caf::close_atom_v)
            .receive([](caf::ok_atom) {},
                     [&, name = name](caf::error& e) {
                       spdlog::warn("node {} did not confirm the end of the run: {}", name,
                                    sys.render(e));
                     });
      }
      stop_all();
      bulk_report();
      if (!st.ok()) return st;
      return out;
    };
    // A gone node the run cannot finish without (a shard, or a service actor) that is not back
    // within the restart wait ends the run.
    auto overdue = [&]() -> status {
      std::lock_guard<std::mutex> g(shared->mu);
      for (const auto& [name, peer] : shared->peers) {
        if (peer.up) continue;
        const auto slots = where.on(name);
        const bool needed =
            std::any_of(slots.begin(), slots.end(), [&](uint32_t i) { return !ids.is_learner(i); });
        const double gone =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - peer.lost_at).count();
        if (!needed || !peer.lost || gone <= o.restart_wait_s) continue;
        return status(errc::io_error,
                      "node " + name + " went away " + human_seconds(elapsed() - gone) +
                          " s into the run and was not restarted within " +
                          human_seconds(o.restart_wait_s) +
                          " s (--restart-wait); it hosts actors the run cannot finish without "
                          "(a shard or a service)");
      }
      return ok_status();
    };
    harness::collected col;
    const bool dp = config.mode == run_mode::data_parallel;
    double next_beat = o.heartbeat_s;
    for (;;) {
      status failure;
      self->request(dir->metrics, 60s, report_request{})
          .receive([&](run_report r) { col.run = r; },
                   [&](caf::error& e) {
                     failure = status(errc::io_error, "metrics did not answer: " + sys.render(e));
                   });
      if (!failure.ok()) return finish(failure);
      tend_peers();
      if (auto st = overdue(); !st.ok()) return finish(st);
      if (elapsed() >= next_beat) {
        // A node that does not answer is only reported here: its connection's timeout ends it
        // (then its actors are taken for down until its process restarts).
        next_beat = elapsed() + o.heartbeat_s;
        std::vector<std::pair<std::string, caf::actor>> up;
        {
          std::lock_guard<std::mutex> g(shared->mu);
          for (const auto& [name, peer] : shared->peers) {
            if (peer.up) up.emplace_back(name, peer.registry);
          }
        }
        for (const auto& [name, r] : up) {
          if (auto st = ping(self, sys, r, name, o.peer_timeout_s); !st.ok())
            spdlog::warn("{} after {} s of the run", st.message(), human_seconds(elapsed()));
        }
      }
      if (o.on_progress) o.on_progress(col.run.tokens);
      if (col.run.stopped && (dp || col.run.shards_flushed == ids.shards)) break;
      if (o.run_timeout_s > 0 && elapsed() > o.run_timeout_s) {
        return finish(status(
            errc::io_error,
            "the run did not finish within " + human_seconds(o.run_timeout_s) + " s (" +
                std::to_string(col.run.tokens) + " tokens, " +
                (col.run.stopped ? "stopped, " + std::to_string(col.run.shards_flushed) + " of " +
                                       std::to_string(ids.shards) + " shards flushed"
                                 : "not stopped") +
                ")"));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(o.progress_interval_s));
    }
    // The run's length as the metrics actor measured it (on the shared clock; it runs here).
    const int64_t end_ns = dp ? col.run.stop_time_ns : col.run.end_time_ns;
    const double run_s = end_ns > start_ns ? to_s(end_ns - start_ns) : elapsed();
    // Every actor as it runs now (nodes restarted meanwhile run new ones); a learner whose
    // node is down at the end reports nothing but its slot.
    cluster_directory now = *dir;
    std::set<uint32_t> down;
    {
      std::lock_guard<std::mutex> g(shared->mu);
      for (const auto& [node, peer] : shared->peers) {
        const auto slots = where.on(node);
        for (size_t k = 0; k < slots.size(); ++k) {
          now.place(slots[k], peer.actors[k], ids.learners, ids.shards);
          if (!peer.up) down.insert(slots[k]);
        }
      }
    }
    status failure;
    auto on_error = [&](caf::error& e) {
      failure = status(errc::io_error, "collecting the run's reports: " + sys.render(e));
    };
    for (const auto& s : now.shards) {
      self->request(s, 60s, report_request{})
          .receive([&](shard_report r) { col.shards.push_back(r); }, on_error);
      if (!dp) {
        self->request(s, 60s, global_request{})
            .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
      }
    }
    for (uint32_t l = 0; l < now.learners.size(); ++l) {
      learner_report absent;
      absent.learner = l;
      if (down.count(ids.learner(l)) != 0) {
        col.learners.push_back(absent);
        continue;
      }
      self->request(now.learners[l], 60s, report_request{})
          .receive([&](learner_report r) { col.learners.push_back(r); },
                   [&](caf::error& e) {
                     spdlog::warn("learner {} did not report: {}", l, sys.render(e));
                     col.learners.push_back(absent);
                   });
    }
    // The supervisor's counters (its handle lists are only for one process).
    self->request(now.chaos, 60s, report_request{})
        .receive([&](supervisor_report r) { col.supervisor = std::move(r); },
                 [&](caf::error& e) { spdlog::warn("chaos report: {}", sys.render(e)); });
    if (dp && !now.learners.empty()) {
      self->request(now.learners[0], 60s, global_request{})
          .receive([&](global_snapshot g) { col.globals.push_back(std::move(g)); }, on_error);
    }
    if (!failure.ok()) return finish(failure);
    auto res = harness::assemble(config, *env, std::move(col));
    if (!res) return finish(res.error());
    res->run_wall_s = run_s;
    res->virtual_s = run_s;
    res->wall_s = run_s;
    out.result = std::move(*res);
    return finish(status());
  };
  result<node_result> r = body();
  const int code = o.on_done ? o.on_done(r) : (r.ok() ? 0 : 1);
  shut_down(std::move(sys_owner), code);
  return r;
}

}  // namespace diloco
