#include "hosts/deploy.hpp"
#include "base/check.hpp"

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
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "actors/state_io.hpp"
#include "base/job_pool.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "hosts/harness.hpp"
#include "hosts/node_registry.hpp"
#include "net/bulk_channel.hpp"
#include "net/frame_tunnel.hpp"
#include "net/handshake.hpp"
#include "net/openssl_setup.hpp"
#include "protocol/type_ids.hpp"
#include "runtime/shared_clock.hpp"
#include "runtime/tape.hpp"

namespace diloco {

namespace {

std::string human_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string instance_tag(uint64_t instance) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "# deployment instance %016llx",
                static_cast<unsigned long long>(instance));
  return buf;
}

// The newest snapshot under `root` that this execution of the run wrote (see
// node_view::instance), or an error saying why there is none.
result<loaded_snapshot> newest_snapshot_of(const std::string& root, uint64_t run_id,
                                           uint64_t instance, const part_filter& wanted) {
  auto listing = list_snapshots(root);
  if (!listing) return listing.error();
  const std::string tag = instance_tag(instance);
  std::string skipped;
  for (auto it = listing->rbegin(); it != listing->rend(); ++it) {
    if (!it->has_manifest) continue;
    auto s = load_snapshot(it->path, wanted);
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
result<resume_pick> latest_snapshot_of_run(const std::string& root, uint64_t run_id,
                                           const part_filter& wanted) {
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
    auto s = load_snapshot(path, wanted);
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
// rest. A bulk frame claiming more is refused before anything is read. `model_floats`: the
// run's model's (the MLP's, or a PyTorch learner's layout), not the MLP keys'.
uint64_t largest_payload_bytes(const run_config& c, uint64_t model_floats) {
  const uint64_t model_bytes = model_floats * sizeof(float) + 4096;
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

// Payloads of at least `min_bytes` for actors on other nodes go on the bulk channel; the
// message naming them goes once they are there (acknowledged), in its place on its link: each
// link (sender, receiver) keeps the messages that wait, in the order they were sent. Made
// before the actors' environment, the channel attached once it is open (its largest frame
// comes from the environment's model); nothing is sent before.
class node_offload : public blob_offload {
 public:
  node_offload(std::vector<uint32_t> node_of, uint32_t self, uint64_t min_bytes,
               uint32_t coordinator)
      : node_of_(std::move(node_of)),
        self_(self),
        min_bytes_(min_bytes),
        coordinator_(coordinator) {}
  void attach(bulk_channel* ch) {
    std::lock_guard<std::mutex> g(mu_);
    ch_ = ch;
  }
  // The node is done: messages still waiting are not sent (their actors are gone).
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [key, line] : links_) {
      for (auto& m : line) m->send = nullptr;
    }
    links_.clear();
    ch_ = nullptr;
  }

  bool defer(uint32_t from, uint32_t to, const std::vector<tensor_blob*>& blobs,
             std::function<void()> send) override {
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t key = (uint64_t{from} << 32) | to;
    auto line = links_.find(key);
    const bool behind = line != links_.end() && !line->second.empty();
    const uint32_t node = node_of_.at(to);
    std::vector<tensor_blob*> apart;
    if (node != self_) {
      for (tensor_blob* b : blobs) {
        if (!b->empty() && b->size() >= min_bytes_ && !b->is_reference()) apart.push_back(b);
      }
    }
    if (!behind && apart.empty()) return false;
    DILOCO_CHECK(ch_ != nullptr || apart.empty(),
                 "node: a payload offloaded before the bulk channel is open");
    auto m = std::make_shared<waiting>();
    m->send = std::move(send);
    m->outstanding = apart.size();
    links_[key].push_back(m);
    // Snapshot parts go on their own lane: gigabytes of them do not hold the payloads.
    const auto lane =
        to == coordinator_ ? bulk_channel::lane::background : bulk_channel::lane::payload;
    for (tensor_blob* b : apart) {
      const uint64_t size = b->size();
      const uint64_t id = ch_->push(
          node, b->shared_bytes(),
          [this, key, m, b](bool arrived) {
            std::lock_guard<std::mutex> g2(mu_);
            // Not delivered: the receiver gets an empty blob, which it rejects and counts.
            if (!arrived) *b = tensor_blob();
            m->outstanding -= 1;
            flush(key);
          },
          lane);
      *b = tensor_blob::reference(id, size);
    }
    flush(key);
    return true;
  }

 private:
  struct waiting {
    std::function<void()> send;  // empty once the node is done
    size_t outstanding = 0;      // payloads not yet acknowledged or dropped
  };
  // Sends the link's messages whose payloads are all settled, from its oldest. Under mu_.
  void flush(uint64_t key) {
    auto line = links_.find(key);
    if (line == links_.end()) return;
    auto& q = line->second;
    while (!q.empty() && q.front()->outstanding == 0) {
      if (q.front()->send) q.front()->send();
      q.pop_front();
    }
    if (q.empty()) links_.erase(line);
  }

  std::mutex mu_;
  bulk_channel* ch_ = nullptr;
  std::vector<uint32_t> node_of_;
  uint32_t self_;
  uint64_t min_bytes_;
  uint32_t coordinator_;
  std::unordered_map<uint64_t, std::deque<std::shared_ptr<waiting>>> links_;
};

std::string bulk_summary(const bulk_stats& b) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "bulk channel: sent %llu payloads (%.1f MB), received %llu (%.1f MB); refused "
      "connections: %llu bad hello, %llu bad frame, %llu oversized, %llu truncated, "
      "%llu silent, %llu over capacity; %llu unresolved, %llu dropped (no progress within "
      "the peer timeout)",
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

// The node's tape (node_options::tape_dir): the actors' hook from their spawn on, its file
// opened once the node knows which of its node's processes it is (the tape's name and header
// say so). Nothing is recorded before: an actor records from its start, which comes later.
class node_tape final : public tape_hook {
 public:
  bool replaying() const override { return false; }
  void input(uint32_t actor, tape_kind kind, int64_t tick, int type, const caf::message& content,
             uint64_t digest, const stamp* st, const checkpoint_source& checkpoint) override {
    if (auto* r = rec_.load()) r->input(actor, kind, tick, type, content, digest, st, checkpoint);
  }
  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override {
    if (auto* r = rec_.load()) r->sent(actor, dest, tick, type, digest, st);
  }
  void read(uint32_t actor, tape_read what, int64_t value) override {
    if (auto* r = rec_.load()) r->read(actor, what, value);
  }
  void open(std::shared_ptr<tape_recorder> r) {
    held_ = std::move(r);
    rec_.store(held_.get());
  }
  // The end of the tape; what the actors record after it is dropped.
  status close() {
    if (rec_.exchange(nullptr) == nullptr) return ok_status();
    return held_->close();
  }
  const tape_recorder* recorder() const { return held_.get(); }

 private:
  std::shared_ptr<tape_recorder> held_;  // kept to the end: an actor may still be in a call
  std::atomic<tape_recorder*> rec_{nullptr};
};

// What a rotating tape kept, for the line that says the tape is written.
std::string rotation_note(const tape_recorder& rec) {
  const uint32_t last = rec.volume();
  if (last == 0) return "";
  std::string note = "; volumes " + std::to_string(rec.oldest_kept()) + " to " +
                     std::to_string(last) + " kept, " + std::to_string(rec.checkpoints()) +
                     " checkpoints";
  if (rec.checkpoints_missed() > 0)
    note += ", " + std::to_string(rec.checkpoints_missed()) + " states that could not be saved";
  return note;
}

// One node of a deployed run, step by step (see run_node below for the order).
class deployed_node {
 public:
  deployed_node(const run_config& config, const node_options& o)
      : config_(config), o_(o), d_(config.deploy) {}

  // Everything before the actor system: the node's entry, its files, the bulk channel, the
  // actors' environment and (leader) the snapshot to resume from.
  status prepare() {
    if (auto s = find_self(); !s.ok()) return s;
    if (auto s = check_tls_files(); !s.ok()) return s;
    if (auto s = read_secret(); !s.ok()) return s;
    if (o_.bulk) make_offload();
    if (!o_.tape_dir.empty()) tape_ = std::make_shared<node_tape>();
    env_hooks hooks;
    hooks.tape = tape_;
    hooks.offload = offload_;
    hooks.observer = o_.observer;
    hooks.model = o_.model;
    hooks.merge_pool = merge_pool();
    auto env = actor_env::make(config_, false, hooks);
    if (!env) return env.error();
    env_ = *env;
    if (auto s = open_bulk_channel(); !s.ok()) return s;
    leader_ = d_.node_of(env_->ids, env_->ids.metrics());
    for (uint32_t l = 0; l < env_->ids.learners; ++l) {
      if (d_.node_of(env_->ids, env_->ids.learner(l)) != o_.name) continue;
      if (auto s = env_->model->runnable(); !s.ok())
        return s.with_context("node " + o_.name + " hosts learner " + std::to_string(l));
      break;
    }
    return pick_resume();
  }

  // The node's part of the run, with its actor system up; every handle it made is gone when
  // it returns (the system can shut down then).
  result<node_result> take_part(caf::actor_system& sys) {
    sys_ = &sys;
    self_.emplace(sys);
    result<node_result> r = wire_and_run();
    if (tape_ && tape_->recorder() != nullptr) {
      const tape_recorder& rec = *tape_->recorder();
      if (auto s = tape_->close(); !s.ok()) {
        spdlog::error("node {}: the tape: {}", o_.name, s.to_string());
      } else {
        say("tape written: " + rec.volume_path(rec.volume()) + " (" + std::to_string(rec.events()) +
            " events, " + std::to_string(rec.bytes_written()) + " bytes" + rotation_note(rec) +
            ")");
      }
    }
    redial_.stop();
    if (offload_) offload_->clear();
    local_.clear();
    reg_ = caf::actor();
    dir_.reset();
    self_.reset();
    return r;
  }

  // CAF's configuration for this node: the middleman, heartbeats, TLS.
  void configure(caf::actor_system_config& cfg) const {
    harness::make_quiet(cfg);
    cfg.load<caf::io::middleman>();
    cfg.set("scheduler.max-throughput", static_cast<size_t>(1));
    // CAF's workers poll for work before they sleep: by default about 25 ms of polling after
    // each message, every 50 us. A node's messages are network-paced (a merge per fragment
    // sync, heartbeats), and on a learner's host that polling takes CPU from the learner's
    // own steps (an island's ranks lost about 20% to it on 2 cores): short polling, then
    // sleep.
    cfg.set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(10));
    cfg.set("work-stealing.moderate-poll-attempts", static_cast<size_t>(20));
    cfg.set("work-stealing.moderate-sleep-duration", caf::timespan(std::chrono::microseconds(200)));
    // A node that stops answering is dropped after `peer_timeout_s` without heartbeats.
    cfg.set("middleman.heartbeat-interval", seconds_span(o_.heartbeat_s));
    cfg.set("middleman.connection-timeout", seconds_span(o_.peer_timeout_s));
    if (tls()) {
      cfg.load<caf::openssl::manager>();
      cfg.set("openssl.certificate", for_node(d_.tls.certificate));
      cfg.set("openssl.key", for_node(d_.tls.key));
      cfg.set("openssl.cafile", d_.tls.ca);
    }
  }

 private:
  // Redialing a gone node runs on a thread per node, beside the main loop: a dial to a host
  // that does not answer takes seconds (net/frame_tunnel.cpp gives up after 3 s).
  struct redialers {
    std::atomic<bool> ending{false};
    std::mutex mu;
    std::set<std::string> active;
    std::vector<std::thread> threads;
    // Ends the dialing and waits for every thread (they lock `mu` on their way out).
    void stop() {
      ending = true;
      for (auto& t : threads) t.join();
      threads.clear();
    }
    ~redialers() { stop(); }
  };

  static std::chrono::steady_clock::time_point after(double s) {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(s));
  }
  static caf::timespan seconds_span(double s) {
    return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
  }
  bool tls() const { return d_.tls.enabled(); }
  bool leads() const { return leader_ == o_.name; }
  const actor_indices& ids() const { return env_->ids; }
  void say(const std::string& what) const {
    if (o_.on_event) o_.on_event(what);
  }
  // Before the run starts, a stop signal ends the wait for the other nodes.
  status signalled() const {
    const int signal = o_.stop_signal ? o_.stop_signal() : 0;
    if (signal == 0) return ok_status();
    return status(errc::io_error, "node " + o_.name + ": stopped by " + signal_name(signal) +
                                      " before the run started");
  }
  std::string for_node(std::string path) const {
    for (size_t at; (at = path.find("{node}")) != std::string::npos;) path.replace(at, 6, o_.name);
    return path;
  }
  uint32_t node_index(const std::string& name) const {
    uint32_t k = 0;
    while (k < d_.nodes.size() && d_.nodes[k].name != name) ++k;
    return k;
  }

  // --- before the actor system ---------------------------------------------------------------

  status find_self() {
    if (!d_.enabled())
      return status(errc::invalid_argument, "nodes: the cluster file names no nodes");
    std::string names;
    for (size_t i = 0; i < d_.nodes.size(); ++i) {
      if (d_.nodes[i].name == o_.name) {
        me_ = &d_.nodes[i];
        my_index_ = static_cast<uint32_t>(i);
      }
      names += (names.empty() ? "" : ", ") + d_.nodes[i].name;
    }
    if (me_ == nullptr) {
      return status(
          errc::invalid_argument,
          "--name: no node '" + o_.name + "' in the cluster file (its nodes are " + names + ")");
    }
    return ok_status();
  }

  // Mutual TLS: this node's certificate and key, and the CA every peer's must be signed by.
  status check_tls_files() const {
    if (!tls()) return ok_status();
    // CAF's TLS sessions and OpenSSL 3 (net/openssl_setup.hpp).
    if (!tls_error_queue_guard_active()) {
      spdlog::warn(
          "node {}: OpenSSL's error queue is not cleared before CAF's TLS calls: a "
          "killed node may cut its peers' other TLS links",
          o_.name);
    }
    const std::pair<const char*, std::string> files[] = {
        {"tls.ca", d_.tls.ca},
        {"tls.certificate", for_node(d_.tls.certificate)},
        {"tls.key", for_node(d_.tls.key)}};
    for (const auto& [key, path] : files) {
      if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
        std::fclose(f);
      } else {
        return status(errc::not_found, std::string(key) + ": " + path + ": cannot be read");
      }
    }
    return ok_status();
  }

  // The run's shared secret: hellos on both ports are tagged with it (net/handshake.hpp).
  status read_secret() {
    if (!d_.secret_file.empty()) {
      auto s = read_secret_file(d_.secret_file);
      if (!s) return s.error();
      secret_ = std::move(*s);
    } else if (!tls()) {
      spdlog::warn(
          "node {}: plain TCP without secret_file: anyone who can read the cluster file can "
          "connect to this node (docs/deploy.md, \"What plain TCP protects\")",
          o_.name);
    }
    return ok_status();
  }

  // The run's model's floats (the MLP's, or a PyTorch learner's layout), not the MLP keys'.
  uint64_t model_floats() const {
    return env_->model ? env_->model->layout().buffer_floats()
                       : mlp_lm(config_.model).layout().buffer_floats();
  }

  // Tensor payloads between nodes: on the bulk channel at port + 1 (with mutual TLS when the
  // cluster file names certificates, like CAF's connections).
  status open_bulk_channel() {
    if (!o_.bulk) return ok_status();
    bulk_options bo;
    bo.secret = secret_;
    bo.max_frame_bytes = largest_payload_bytes(config_, model_floats());
    bo.self = my_index_;
    for (const auto& n : d_.nodes) bo.peers.push_back({n.host, static_cast<uint16_t>(n.port + 1)});
    bo.listen_port = static_cast<uint16_t>(me_->port + 1);
    bo.identity = o_.identity;
    bo.wait_timeout_s = o_.peer_timeout_s;
    bo.inbox_limit_bytes = o_.bulk_limit_bytes;
    if (tls()) {
      bo.tls_ca = d_.tls.ca;
      bo.tls_certificate = for_node(d_.tls.certificate);
      bo.tls_key = for_node(d_.tls.key);
    }
    auto ch = bulk_channel::open(bo);
    if (!ch) return status(errc::io_error, "node " + o_.name + ": " + ch.error().message());
    channel_ = std::move(*ch);
    resolving_.emplace(channel_.get());
    offload_->attach(channel_.get());
    return ok_status();
  }
  // A node with a syncer shard shares each large merge with one more thread when the machine
  // has a core to spare (memory-bound, the merge goes about 1.5x faster on two); the merge is
  // the same to the bit.
  std::shared_ptr<job_pool> merge_pool() const {
    if (config_.compute == compute_mode::cost || std::thread::hardware_concurrency() < 2)
      return nullptr;
    const actor_indices place_ids = actor_ids_of(config_);
    for (uint32_t k = 0; k < place_ids.shards; ++k) {
      if (d_.node_of(place_ids, place_ids.shard(k)) == o_.name)
        return std::make_shared<job_pool>(1);
    }
    return nullptr;
  }

  void make_offload() {
    const actor_indices place_ids = actor_ids_of(config_);
    std::vector<uint32_t> node_of;
    for (uint32_t i = 0; i < place_ids.count(); ++i)
      node_of.push_back(node_index(d_.node_of(place_ids, i)));
    offload_ = std::make_shared<node_offload>(std::move(node_of), my_index_, o_.bulk_min_bytes,
                                              place_ids.coordinator());
  }

  // Resuming (leader): the snapshot's shard and metrics parts, checked before anything starts.
  status pick_resume() {
    if (o_.resume_dir.empty()) return ok_status();
    if (!leads()) {
      return status(errc::invalid_argument,
                    "--resume: only the leader (node " + leader_ +
                        ") resumes a run; start the other nodes without it");
    }
    // Only the shards' and the metrics actor's parts are sent (start_of): the learners' (model
    // sized, several of them) and the others' are not read.
    auto pick = latest_snapshot_of_run(o_.resume_dir, o_.run_id, [this](uint32_t i) {
      return ids().is_shard(i) || i == ids().metrics();
    });
    if (!pick) return pick.error();
    for (const auto& why : pick->skipped) spdlog::warn("--resume: skipping {}", why);
    const loaded_snapshot& s = pick->snapshot;
    if (s.parts.size() != ids().count()) {
      return status(errc::corrupt_data, "--resume: " + s.path + " holds " +
                                            std::to_string(s.parts.size()) +
                                            " actors' parts; this cluster has " +
                                            std::to_string(ids().count()) + " actors");
    }
    for (uint32_t i = ids().shard(0); i <= ids().metrics(); ++i) {
      if (i == ids().scheduler()) continue;
      const auto& part = s.parts.at(i);
      if (auto st = check_role(*env_, i, s.manifest.actors.at(i).role, s.path); !st.ok()) return st;
      if (auto st = check_part(env_, i, part.view(), s.path); !st.ok()) return st;
    }
    resume_ = std::move(pick->snapshot);
    return ok_status();
  }

  // The first snapshot number of a run resumed from `from`: above it, and above every snapshot
  // already in the directory this run writes to (no number is used twice there).
  uint64_t first_snapshot_after(const loaded_snapshot& from) const {
    uint64_t next = from.manifest.snapshot + 1;
    const auto& dir = env_->config.snapshot.dir;
    if (dir.empty()) return next;
    if (auto listed = list_snapshots(dir); listed.ok()) {
      for (const auto& s : *listed) next = std::max(next, s.snapshot + 1);
    }
    return next;
  }

  // --- with the actor system -----------------------------------------------------------------

  result<node_result> wire_and_run() {
    spawn_local();
    if (auto s = listen(); !s.ok()) return stopped(s);
    deadline_ = after(o_.connect_timeout_s);
    for (;;) {
      if (auto s = connect_later_nodes(); !s.ok()) return stopped(s);
      if (auto s = await_earlier_nodes(); !s.ok()) return stopped(s);
      if (old_run_.empty()) break;
      if (auto s = outwait_old_run(); !s.ok()) return stopped(s);
    }
    if (auto s = open_tape(); !s.ok()) return stopped(s);
    if (rejoining_) {
      if (auto s = hand_over_to_peers(); !s.ok()) return stopped(s);
    }
    caf::anon_send(reg_, running_atom::value, incarnation_);
    return leads() ? lead() : follow();
  }

  // The tape of this process of the node, before any of its actors starts.
  status open_tape() {
    if (!tape_) return ok_status();
    std::error_code ec;
    std::filesystem::create_directories(o_.tape_dir, ec);
    if (ec) return status(errc::io_error, o_.tape_dir + ": cannot create it: " + ec.message());
    tape_path_ = (std::filesystem::path(o_.tape_dir) /
                  (o_.name + "." + std::to_string(incarnation_) + ".tape"))
                     .string();
    tape_header h = make_tape_header(config_, o_.run_id, o_.config_text, false);
    h.node = o_.name;
    h.incarnation = incarnation_;
    h.recorded = where_.on(o_.name);
    auto rec = tape_recorder::create(tape_path_, h);
    if (!rec) return rec.error().with_context("node " + o_.name + ": --tape");
    (*rec)->flush_every(tape_flush_s);
    (*rec)->bound(o_.tape_max_bytes);
    tape_->open(*rec);
    say("recording this node's actors to " + tape_path_);
    return ok_status();
  }

  // This node's actors, and its registry. The snapshot coordinator (on the leader) writes the
  // manifests, with this execution's instance as a comment after the configuration.
  void spawn_local() {
    uint64_t instance = 0;
    if (leads()) {
      std::random_device rd;
      instance = (uint64_t{rd()} << 32 | rd()) | 1;  // never 0
    }
    where_.ids = ids();
    where_.self = o_.name;
    where_.leader = leader_;
    for (uint32_t i = 0; i < ids().count(); ++i) where_.node_of.push_back(d_.node_of(ids(), i));
    auto snap_ctx = std::make_shared<snapshot_context>();
    snap_ctx->run_id = o_.run_id;
    snap_ctx->config_text = o_.config_text + instance_tag(instance) + "\n";
    snap_ctx->on_commit = [this](uint64_t n, const std::string& path, uint64_t bytes,
                                 double write_s) {
      last_commit_.store(n);
      say("snapshot " + std::to_string(n) + " committed: " + path + " (" +
          snapshot_rate(bytes, write_s) + ")");
    };
    if (resume_) snap_ctx->first_snapshot = first_snapshot_after(*resume_);
    dir_ = std::make_shared<cluster_directory>();
    for (uint32_t i : where_.on(o_.name)) {
      auto a = harness::spawn_actor(*sys_, env_, dir_, i, snap_ctx);
      harness::place(*dir_, ids(), i, a);
      local_.push_back(a);
    }
    reg_ = sys_->spawn(registry, local_, where_, o_.identity, instance,
                       [this](const std::string& node, bool up, uint32_t process) {
                         if (!up && channel_) channel_->reset(node_index(node));
                         if (o_.on_node) o_.on_node(node, up, process);
                       });
  }

  // Listens on the node's port. SO_REUSEADDR: a node restarted after a crash gets its port
  // back at once. With the front (net/frame_tunnel.hpp) the middleman listens on loopback
  // only, on any free port, and the node's port belongs to the front, which lets framed input
  // of this run through and nothing else.
  status listen() {
    const uint16_t caf_port = o_.front ? 0 : static_cast<uint16_t>(me_->port);
    const char* caf_host = o_.front ? "127.0.0.1" : nullptr;
    auto published = tls() ? caf::openssl::publish(reg_, caf_port, caf_host, true)
                           : sys_->middleman().publish(reg_, caf_port, caf_host, true);
    if (!published) {
      return status(errc::io_error, "node " + o_.name + ": cannot listen on port " +
                                        std::to_string(caf_port) + ": " +
                                        sys_->render(published.error()));
    }
    if (o_.front) {
      tunnel_options to;
      to.self = my_index_;
      for (const auto& n : d_.nodes) to.peers.push_back({n.host, static_cast<uint16_t>(n.port)});
      to.front_port = static_cast<uint16_t>(me_->port);
      to.caf_port = *published;
      to.identity = o_.identity;
      to.secret = secret_;
      // A peer (secret holder or not) may not make the middleman allocate more than the run's
      // largest message: its tensors (largest_payload_bytes, when the bulk channel is off) and
      // 1 MiB for the rest. Over mutual TLS the middleman's stream is not readable here.
      if (!tls())
        to.max_message_bytes = largest_payload_bytes(config_, model_floats()) + (uint64_t{1} << 20);
      auto t = frame_tunnel::open(to);
      if (!t) return status(errc::io_error, "node " + o_.name + ": " + t.error().message());
      tunnel_ = std::move(*t);
    }
    say("listening on port " + std::to_string(me_->port) +
        (tls() ? " (mutual TLS)" : " (plain TCP)") + " with " + std::to_string(local_.size()) +
        " actors" +
        (channel_ ? "; tensor payloads on the bulk channel at port " +
                        std::to_string(me_->port + 1) + (tls() ? " (mutual TLS)" : "")
                  : ""));
    return ok_status();
  }

  // Reaches node n's registry (through the front: this node's local end of the tunnel to n).
  caf::expected<caf::actor> dial(const node_config& n) {
    const std::string host = tunnel_ ? "127.0.0.1" : n.host;
    const auto port =
        static_cast<uint16_t>(tunnel_ ? tunnel_->outbound_port(node_index(n.name)) : n.port);
    return tls() ? caf::openssl::remote_actor(*sys_, host, port)
                 : sys_->middleman().remote_actor(host, port);
  }

  // A copy of what the registry knows (`drain`: and take the events to report).
  node_view view(caf::scoped_actor& asker, bool drain = false) {
    node_view v;
    asker->request(reg_, std::chrono::seconds(30), caf::get_atom_v, drain)
        .receive([&](node_view& got) { v = std::move(got); },
                 [&](caf::error&) {
                   // The registry is local: it is gone only when the node is ending.
                   v.shutdown = true;
                 });
    return v;
  }
  node_view view(bool drain = false) { return view(*self_, drain); }

  // Asks the registry until `done(view)` holds or `until` passes; the last view.
  template <class Done>
  node_view wait_for(Done done, std::chrono::steady_clock::time_point until) {
    for (;;) {
      node_view v = view();
      if (done(v) || std::chrono::steady_clock::now() >= until) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The registry handshake with node `name` (reached at `remote`): both learn the other's
  // actors, whether its run is going on, and which processes they are.
  status exchange(caf::scoped_actor& asker, const std::string& name, const caf::actor& remote) {
    const node_view v = view(asker);
    uint32_t known = 0;
    if (auto it = v.peers.find(name); it != v.peers.end()) known = it->second.incarnation;
    status failure;
    asker
        ->request(remote, std::chrono::seconds(30), caf::put_atom_v, o_.identity, o_.name, reg_,
                  local_, v.running, v.incarnation, known, v.instance)
        .receive(
            [&](uint64_t their_identity, std::vector<caf::actor> actors, bool their_running,
                uint32_t their_incarnation, uint32_t mine_known, uint64_t their_instance) {
              const auto expected = where_.on(name);
              if (their_identity != o_.identity) {
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
                caf::anon_send(reg_, learned_atom::value, name, remote, std::move(actors),
                               their_incarnation, their_running, mine_known, their_instance);
              }
            },
            [&](caf::error& e) {
              failure = status(errc::io_error, "node " + name + ": " + sys_->render(e));
            });
    if (failure.ok()) {
      // The registry has taken what was learned before the next question reaches it.
      view(asker);
    }
    return failure;
  }

  // One connection per pair of nodes: a node connects to every node listed after it, sends
  // its registry and actors with its run identity, and gets the other's actors back; it waits
  // for the nodes listed before it to connect to it (await_earlier_nodes). A node whose process
  // went away mid-run is connected to again the same way (tend_peers).
  status connect_later_nodes() {
    bool after_me = false;
    for (const auto& n : d_.nodes) {
      if (n.name == o_.name) {
        after_me = true;
        continue;
      }
      if (!after_me) continue;  // that node connects to us
      for (;;) {
        auto remote = dial_until_up(n);
        if (!remote) return remote.error();
        status st = exchange(*self_, n.name, *remote);
        if (st.ok()) break;
        // A process ending as the handshake reached it (one of a run that is over, whose next
        // process comes): dialed again until the connect timeout. Another cluster file, or
        // other actors, is an answer.
        if (st.code() != errc::io_error || std::chrono::steady_clock::now() >= deadline_) return st;
        say("node " + n.name + " answered but the handshake failed (" + st.message() +
            "); dialing it again");
        if (auto sig = signalled(); !sig.ok()) return sig;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    return ok_status();
  }

  result<caf::actor> dial_until_up(const node_config& n) {
    for (int attempt = 0;; ++attempt) {
      caf::expected<caf::actor> remote = dial(n);
      if (remote) return *remote;
      if (tunnel_) {
        if (const std::string why = tunnel_->refusal(node_index(n.name)); !why.empty()) {
          return status(errc::invalid_argument,
                        "node " + n.name + " refused this node's connection: " + why);
        }
      }
      if (std::chrono::steady_clock::now() > deadline_) {
        return status(errc::io_error, "node " + n.name + " at " + n.host + ":" +
                                          std::to_string(n.port) + " did not come up within " +
                                          human_seconds(o_.connect_timeout_s) +
                                          " s (last error: " + sys_->render(remote.error()) + ")" +
                                          (tls() ? "; with mutual TLS a refused certificate "
                                                   "looks the same: both nodes' certificates "
                                                   "must be signed by tls.ca"
                                                 : ""));
      }
      if (auto st = signalled(); !st.ok()) return st;
      if (attempt == 0)
        say("waiting for node " + n.name + " at " + n.host + ":" + std::to_string(n.port));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The nodes listed before this one connect to it. Then every node's actors go into the
  // directory (before any local actor starts, so nothing reads it meanwhile).
  status await_earlier_nodes() {
    std::vector<std::string> before;
    for (const auto& n : d_.nodes) {
      if (n.name == o_.name) break;
      before.push_back(n.name);
    }
    auto connected = [&](const node_view& v) {
      size_t k = 0;
      for (const auto& b : before) k += v.peers.count(b);
      return k;
    };
    const node_view v = wait_for(
        [&](const node_view& w) {
          return connected(w) == before.size() || !w.refused.empty() || !signalled().ok();
        },
        deadline_);
    if (auto st = signalled(); !st.ok()) return st;
    if (!v.refused.empty() || connected(v) != before.size()) {
      if (!v.refused.empty()) {
        // Our answer to the refused node (with our identity) is on its way out: let it go.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return status(errc::io_error, "node " + o_.name + ": " + v.refused);
      }
      return status(errc::io_error,
                    "node " + o_.name + ": only " + std::to_string(connected(v)) + " of the " +
                        std::to_string(before.size()) +
                        " nodes listed before this one connected within the connect timeout" +
                        (v.peers_running ? " (a restarted node waits for the nodes listed "
                                           "before it to notice and dial it again)"
                                         : ""));
    }
    old_run_.clear();
    if (leads() && v.peers_running) {
      // A new process of the leader met nodes still running the run its old process led.
      for (const auto& [name, peer] : v.peers)
        if (peer.running) old_run_.push_back(name);
      return ok_status();
    }
    for (const auto& [name, peer] : v.peers) {
      const auto slots = where_.on(name);
      DILOCO_CHECK(slots.size() == peer.actors.size(),
                   "deploy: actor counts are checked in the handshake");
      for (size_t k = 0; k < slots.size(); ++k)
        harness::place(*dir_, ids(), slots[k], peer.actors[k]);
      say("connected to node " + name + " (" + std::to_string(slots.size()) + " actors)");
    }
    // From now on a restarted node's actors can be wired into copies of the directory.
    caf::anon_send(reg_, wired_atom::value);
    // Another node's run is going on: this is a restarted process of this node.
    rejoining_ = v.peers_running;
    incarnation_ = rejoining_ ? v.known_incarnation + 1 : 0;
    instance_ = v.instance;
    return ok_status();
  }

  // The leader's new process met nodes still running the run its old process led (they had
  // not yet seen it go): that run cannot go on, its accounting died with the old process. The
  // handshake told them so, and they end it. Resuming (--resume), this process forgets them
  // and meets their next processes (started by their supervisor: systemd, Slurm, a pod's loop,
  // or by hand) within the connect timeout; without --resume it refuses, as it would start the
  // run again from its first step.
  status outwait_old_run() {
    std::string names;
    for (const auto& n : old_run_) names += (names.empty() ? "" : ", ") + n;
    if (!resume_) {
      // Without --resume this process would start the run again from its first step.
      return status(
          errc::invalid_argument,
          "node " + o_.name +
              " leads the run (it hosts the metrics actor) and cannot rejoin it: node(s) " + names +
              " still ran the run an earlier process of it led, whose accounting died "
              "with that process (they end it now). Start this node with --resume DIR "
              "to continue from the run's newest snapshot (it waits for the other "
              "nodes' next processes), or without it once they stopped, for a new run");
    }
    if (std::chrono::steady_clock::now() >= deadline_) {
      return status(errc::io_error,
                    "node " + o_.name + " leads the run, and node(s) " + names +
                        " still ran the run an earlier process of it led, within the connect "
                        "timeout (" +
                        human_seconds(o_.connect_timeout_s) +
                        " s): start them again (they end that run when they see this node's "
                        "new process)");
    }
    if (!old_run_said_) {
      say("node(s) " + names +
          " still run the run an earlier process of this node led; they end it now (its "
          "accounting died with that process), and this node waits for their next processes "
          "(connect timeout " +
          human_seconds(o_.connect_timeout_s) + " s)");
      old_run_said_ = true;
    }
    caf::anon_send(reg_, forget_atom::value);
    view();  // the registry has forgotten them before the next handshake
    for (int k = 0; k < 5; ++k) {
      if (auto st = signalled(); !st.ok()) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return ok_status();
  }

  // A restarted process: every other node takes its actors into its directories (the answer
  // comes after the rewiring messages are queued at its actors, so ours cannot overtake them).
  status hand_over_to_peers() {
    for (const auto& [name, peer] : view().peers) {
      status failure;
      (*self_)
          ->request(peer.registry, std::chrono::seconds(30), rejoin_atom::value, o_.name,
                    incarnation_, reg_, local_)
          .receive(
              [&, name = name](bool ok) {
                if (!ok)
                  failure = status(errc::invalid_argument,
                                   "node " + name + " refused this node's actors");
              },
              [&, name = name](caf::error& e) {
                failure = status(errc::io_error, "node " + name + ": " + sys_->render(e));
              });
      if (!failure.ok()) return failure;
    }
    return ok_status();
  }

  // Nodes that went away: report it, and dial again the ones this node dials (listed after
  // it) until their restarted process answers; that process then rejoins.
  void tend_peers() {
    const node_view v = view(true);
    for (const auto& e : v.events) say(e);
    std::lock_guard<std::mutex> g(redial_.mu);
    for (const auto& [name, peer] : v.peers) {
      if (!peer.lost || node_index(name) <= my_index_) continue;
      if (!redial_.active.insert(name).second) continue;  // being dialed
      redial_.threads.emplace_back([this, name = name] { redial_until_back(name); });
    }
  }

  void redial_until_back(const std::string& name) {
    caf::scoped_actor dialer{*sys_};
    while (!redial_.ending) {
      {
        const node_view v = view(dialer);
        auto it = v.peers.find(name);
        if (v.shutdown || it == v.peers.end() || !it->second.lost) break;
      }
      if (auto remote = dial(d_.nodes[node_index(name)])) {
        if (auto st = exchange(dialer, name, *remote); st.ok()) {
          caf::anon_send(reg_, back_atom::value, name, *remote);
          say("node " + name + " is back; waiting for it to rejoin");
          break;
        } else {
          say("node " + name + " answered but the handshake failed: " + st.message());
        }
      }
      for (int k = 0; k < 3 && !redial_.ending; ++k)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::lock_guard<std::mutex> g(redial_.mu);
    redial_.active.erase(name);
  }

  caf::actor registry_of(const std::string& name) { return view().peers[name].registry; }

  void stop_local() {
    if (o_.on_running) o_.on_running(false);
    for (const auto& a : local_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(reg_, caf::exit_reason::user_shutdown);
  }

  // The run cannot go on: this node's actors stop (the other nodes see it go away).
  status stopped(status why) {
    stop_local();
    return why;
  }

  void report_ports() const {
    if (channel_) say(bulk_summary(channel_->stats()));
    if (tunnel_) {
      const auto t = tunnel_->stats();
      say("front: " + std::to_string(t.tunnels) + " of " + std::to_string(t.accepted) +
          " connections let through; refused: " + std::to_string(t.bad_hello) + " bad hello, " +
          std::to_string(t.bad_frame) + " bad frame, " + std::to_string(t.oversized) +
          " oversized, " + std::to_string(t.oversized_message) + " oversized message, " +
          std::to_string(t.truncated) + " truncated, " + std::to_string(t.hello_timeout) +
          " silent, " + std::to_string(t.over_capacity) + " over capacity");
    }
  }

  // --- a node that does not lead -------------------------------------------------------------

  // One reading of the leader's time against `now` (this host's clock, or the run's): the
  // leader's answer, the middle of the request's round trip by `now`, and the round trip. The
  // error says the leader `failed` ("did not answer ...").
  struct time_reading {
    int64_t theirs = 0, mid = 0, rtt = 0;
  };
  result<time_reading> read_leader_time(int64_t (*now)(), const std::string& failed) {
    time_reading r;
    const int64_t t0 = now();
    status st;
    (*self_)
        ->request(registry_of(leader_),
                  std::chrono::duration_cast<caf::timespan>(
                      std::chrono::duration<double>(o_.peer_timeout_s)),
                  clock_atom::value)
        .receive([&](int64_t t) { r.theirs = t; },
                 [&](caf::error& e) {
                   st = status(errc::io_error,
                               "node " + leader_ + " " + failed + " (" + sys_->render(e) + ")");
                 });
    if (!st.ok()) return st;
    const int64_t t2 = now();
    r.rtt = t2 - t0;
    r.mid = t0 + r.rtt / 2;
    return r;
  }

  // This node's wall clock against the leader's, from round trips to its registry (the one with
  // the shortest round trip bounds the error by half of it): from now on this node's time is
  // the leader's, so a host whose clock is off, by seconds or minutes, does not skew the
  // schedule, the deadlines or the stamps. Says how far off it was.
  status align_clock() {
    int64_t best_rtt = std::numeric_limits<int64_t>::max(), offset = 0;
    for (int k = 0; k < 8; ++k) {
      auto r = read_leader_time(host_clock_ns, "did not tell its time within the peer timeout");
      if (!r) return r.error();
      if (r->rtt < best_rtt) best_rtt = r->rtt, offset = r->theirs - r->mid;
    }
    set_shared_clock_offset(offset);
    char line[200];
    std::snprintf(line, sizeof line,
                  "clock: %.3f s %s the leader's (+- %.1f ms); this node keeps the leader's time",
                  std::fabs(static_cast<double>(offset)) / 1e9, offset > 0 ? "behind" : "ahead of",
                  static_cast<double>(best_rtt) / 2e6);
    if (std::llabs(offset) > int64_t{1000000000}) {
      spdlog::warn("node {}: {} (check the host's time service)", o_.name, line);
    } else {
      say(line);
    }
    return ok_status();
  }

  // A heartbeat to the leader that also reads its time: the leader's time minus this node's
  // run time (what the correction at the join no longer covers) within half the round trip,
  // kept for /metrics; a node drifting more than a second from the leader says so, once per
  // excursion. The error when the leader did not answer within the peer timeout. The registry
  // asks and this thread waits on the view, so that a new process of the leader (met while the
  // old one, cut off, leaves the question unanswered), the run's end or a stop signal is seen
  // at once: each is left to the caller's next look.
  status check_clock() {
    const uint64_t seq = ++beats_;
    caf::anon_send(reg_, beat_atom::value, seq, registry_of(leader_), o_.peer_timeout_s);
    // A signal that came before keeps the heartbeats going while the node waits to leave.
    const bool signalled_before = stop_asked();
    auto new_signal = [&] { return !signalled_before && stop_asked(); };
    const node_view v = wait_for(
        [&](const node_view& w) {
          return w.shutdown || !w.leader_lost.empty() || (w.beat.seq == seq && w.beat.done) ||
                 new_signal();
        },
        after(o_.peer_timeout_s + 5));
    if (v.shutdown || !v.leader_lost.empty() || new_signal()) return ok_status();
    if (v.beat.seq != seq || !v.beat.done || !v.beat.failed.empty()) {
      return status(
          errc::io_error,
          "node " + leader_ + " did not answer a heartbeat within " +
              human_seconds(o_.peer_timeout_s) + " s (" +
              (v.beat.seq == seq && !v.beat.failed.empty() ? v.beat.failed : "no answer") + ")");
    }
    const int64_t rtt = v.beat.back - v.beat.sent;
    const int64_t residual = v.beat.theirs - (v.beat.sent + rtt / 2);
    record_clock_check(residual, rtt / 2);
    const bool far = std::llabs(residual) > int64_t{1000000000};
    if (far && !clock_far_) {
      spdlog::warn(
          "node {}: clock: {:.3f} s {} the leader's since it joined (+- {:.1f} ms): "
          "the host's time service moved it (diloco_clock_residual_seconds)",
          o_.name, std::fabs(static_cast<double>(residual)) / 1e9,
          residual > 0 ? "behind" : "ahead of", static_cast<double>(rtt) / 2e6);
    }
    clock_far_ = far;
    return ok_status();
  }
  uint64_t beats_ = 0;
  bool stop_asked() const { return o_.stop_signal && o_.stop_signal() != 0; }
  bool clock_far_ = false;

  result<node_result> follow() {
    if (auto st = align_clock(); !st.ok()) return stopped(st);
    if (rejoining_) {
      say("rejoined the running run as process " + std::to_string(incarnation_) +
          " of this node: learners pull the global model, shards recover from the learners' "
          "copies");
      const auto parts = snapshot_parts_for_rejoin();
      for (size_t k = 0; k < local_.size(); ++k)
        caf::anon_send(local_[k], start_msg{parts[k], incarnation_});
    } else {
      caf::anon_send(registry_of(leader_), caf::join_atom_v, o_.name);
    }
    if (o_.on_running) o_.on_running(true);
    // Wait for the end, checking the leader is alive every heartbeat.
    std::string lost;
    // A stop signal: the leader, stopped too (a whole job stopped at once), takes its final
    // snapshot with this node's actors and ends the run; alone, this node leaves after
    // stop_timeout_s.
    int signal = 0;
    bool left = false;
    std::chrono::steady_clock::time_point leave_at{};
    for (;;) {
      if (signal == 0 && o_.stop_signal && (signal = o_.stop_signal()) != 0) {
        say(signal_name(signal) + ": leaving the run when the leader ends it, or in " +
            human_seconds(o_.stop_timeout_s) + " s");
        leave_at = after(o_.stop_timeout_s);
      }
      if (signal != 0 && std::chrono::steady_clock::now() >= leave_at) {
        left = true;
        break;
      }
      const node_view v =
          wait_for([](const node_view& w) { return w.shutdown || !w.leader_lost.empty(); },
                   after(o_.heartbeat_s));
      if (v.shutdown) break;
      if (!v.leader_lost.empty()) {
        lost = v.leader_lost;
        break;
      }
      tend_peers();
      if (auto st = check_clock(); !st.ok()) {
        if (view().shutdown) break;  // the leader ended the run and went away meanwhile
        lost = st.message();
        break;
      }
    }
    stop_local();
    report_ports();
    if (left) {
      say("left the run on " + signal_name(signal) +
          " (the leader takes this node's actors for "
          "down until it is started again)");
      node_result out;
      out.stopped_by = signal;
      return out;
    }
    if (!lost.empty()) return status(errc::io_error, "node " + o_.name + ": " + lost);
    say("the leader ended the run");
    return node_result{};
  }

  // Shards of a restarted process start from their part of the newest snapshot of this
  // execution, if there is one on this host (snapshot.dir on shared storage, or the leader's
  // host); empty parts otherwise.
  std::vector<tensor_blob> snapshot_parts_for_rejoin() {
    std::vector<tensor_blob> parts(local_.size());
    const auto mine = where_.on(o_.name);
    const bool has_shard =
        std::any_of(mine.begin(), mine.end(), [&](uint32_t i) { return ids().is_shard(i); });
    if (!has_shard || !config_.snapshot.enabled()) return parts;
    // This node's shards' parts only: not the learners' or other nodes' shards'.
    auto snap = newest_snapshot_of(config_.snapshot.dir, o_.run_id, instance_, [&](uint32_t i) {
      return ids().is_shard(i) && std::find(mine.begin(), mine.end(), i) != mine.end();
    });
    if (!snap) {
      say(snap.error().message() + ": shards recover from the learners' copies only");
      return parts;
    }
    say("shards start from " + snap->path + ", then take newer learners' copies");
    for (size_t k = 0; k < mine.size(); ++k) {
      if (!ids().is_shard(mine[k])) continue;
      auto& bytes = snap->parts.at(mine[k]);
      if (auto st = check_part(env_, mine[k], bytes.view(), snap->path); !st.ok()) {
        say(st.message() + ": that shard recovers from the learners' copies only");
        continue;
      }
      parts[k] = bytes;
    }
    return parts;
  }

  // --- the leader ----------------------------------------------------------------------------

  result<node_result> lead() {
    if (auto s = await_wired(); !s.ok()) return stopped(s);
    say("all " + std::to_string(d_.nodes.size()) + " nodes wired: starting");
    start_everyone();
    if (o_.on_running) o_.on_running(true);
    harness::collected col;
    if (auto s = watch_run(col); !s.ok()) return finish(s);
    // The run's length as the metrics actor measured it (on the shared clock; it runs here).
    const bool dp = config_.mode == run_mode::data_parallel;
    const int64_t end_ns = dp ? col.run.stop_time_ns : col.run.end_time_ns;
    const double run_s = end_ns > start_ns_ ? to_s(end_ns - start_ns_) : elapsed();
    if (auto s = collect_reports(col); !s.ok()) return finish(s);
    auto res = harness::assemble(config_, *env_, std::move(col));
    if (!res) return finish(res.error());
    res->run_wall_s = run_s;
    res->virtual_s = run_s;
    res->wall_s = run_s;
    node_result out;
    out.leader = true;
    out.result = std::move(*res);
    if (stop_sent_) {  // (a run that reached its end meanwhile ended as usual)
      out.stopped_by = stopping_;
      out.final_snapshot = stop_snapshot_;
    }
    if (auto s = finish(ok_status()); !s.ok()) return s;
    return out;
  }

  // Every node wired, or the error that says which did not.
  status await_wired() {
    const size_t others = d_.nodes.size() - 1;
    const node_view v = wait_for(
        [&](const node_view& w) {
          return w.wired.size() == others || !w.events.empty() || !signalled().ok();
        },
        after(o_.connect_timeout_s));
    if (v.wired.size() == others) return ok_status();
    if (auto st = signalled(); !st.ok()) return st;
    // A node went away while wiring (an event says which), or never said it was wired; the
    // other nodes see the leader go away and stop with an error too.
    std::string missing;
    for (const auto& n : d_.nodes) {
      if (n.name != o_.name && v.wired.count(n.name) == 0)
        missing += (missing.empty() ? "" : ", ") + n.name;
    }
    const std::string why =
        !v.events.empty() ? v.events.front() : "no word from node(s) " + missing;
    return status(errc::io_error, "node " + o_.name + ": the run did not start: " + why);
  }

  // Resuming: the shards restart from their parts (and recover, as a restarted shard does:
  // the newest of the part and the learners' copies), the learners start as restarted
  // processes that pull the global model, the metrics actor continues its counts (tokens
  // towards the budget); the scheduler, the supervisor and the coordinator start afresh.
  start_msg start_of(uint32_t i) const {
    if (!resume_) return start_msg{};
    if (ids().is_learner(i)) return start_msg{tensor_blob(), 1};
    // A regional syncer starts as a restarted one: it recovers every fragment from the shards.
    if (ids().is_regional(i)) return start_msg{tensor_blob(), 1};
    DILOCO_CHECK(resume_->parts.size() == ids().count(), "node: a resume part per actor");
    if (ids().is_shard(i)) return start_msg{resume_->parts[i], 1};
    if (i == ids().metrics()) return start_msg{resume_->parts[i], 0};
    return start_msg{};
  }

  void start_everyone() {
    if (resume_) {
      say("resuming from " + resume_->path + " (snapshot " +
          std::to_string(resume_->manifest.snapshot) +
          "): shards start from their parts, learners pull the global model, the count goes on "
          "from " +
          (ids().metrics() < resume_->manifest.actors.size()
               ? resume_->manifest.actors[ids().metrics()].summary
               : std::string("the snapshot's")));
    }
    run_start_ = std::chrono::steady_clock::now();
    start_ns_ = shared_clock_ns();
    if (o_.on_node) {
      for (const auto& n : d_.nodes) o_.on_node(n.name, true, 0);
    }
    // The other nodes' actors first: what this node's actors send them then travels behind
    // their start on the same connection. Between two other nodes, a message that arrives
    // before its receiver's start waits for it (runtime/transport.hpp, started_now).
    for (uint32_t i = 0; i < ids().count(); ++i) {
      if (d_.node_of(ids(), i) != o_.name) caf::anon_send(dir_->at(i), start_of(i));
    }
    const auto mine = where_.on(o_.name);
    DILOCO_CHECK(mine.size() == local_.size(), "node: one local actor per slot placed here");
    for (size_t k = 0; k < local_.size(); ++k) caf::anon_send(local_[k], start_of(mine[k]));
    // The start messages hold the parts they carry: the snapshot keeps its manifest only, so
    // that the shards' parts are not held for the whole run once the shards have loaded them.
    if (resume_) resume_->parts.clear();
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  }

  // A gone node the run cannot finish without (a shard, or a service actor) that is not back
  // within the restart wait ends the run.
  status overdue(const node_view& v) const {
    for (const auto& [name, peer] : v.peers) {
      if (peer.up) continue;
      const auto slots = where_.on(name);
      // A regional syncer's learners sync with the shards while it is gone.
      const bool needed = std::any_of(slots.begin(), slots.end(), [&](uint32_t i) {
        return !ids().is_learner(i) && !ids().is_regional(i);
      });
      const double gone =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - peer.lost_at).count();
      if (!needed || !peer.lost || gone <= o_.restart_wait_s) continue;
      return status(errc::io_error,
                    "node " + name + " went away " + human_seconds(elapsed() - gone) +
                        " s into the run and was not restarted within " +
                        human_seconds(o_.restart_wait_s) +
                        " s (--restart-wait); it hosts actors the run cannot finish without "
                        "(a shard or a service)");
    }
    return ok_status();
  }

  // A node that does not answer a heartbeat is only reported here: its connection's timeout
  // ends it (then its actors are taken for down until its process restarts).
  void beat(const node_view& v) {
    if (elapsed() < next_beat_) return;
    next_beat_ = elapsed() + o_.heartbeat_s;
    for (const auto& [name, peer] : v.peers) {
      if (!peer.up) continue;
      if (auto st = ping(*self_, *sys_, peer.registry, name, o_.peer_timeout_s); !st.ok())
        spdlog::warn("{} after {} s of the run", st.message(), human_seconds(elapsed()));
    }
  }

  // Polls the metrics actor until the run is done, tending the peers meanwhile.
  status watch_run(harness::collected& col) {
    next_beat_ = o_.heartbeat_s;
    return harness::poll_until_done(
        *self_, *sys_, dir_->metrics, config_, ids(), o_.progress_interval_s, col.run,
        [&](const run_report& r) -> status {
          tend_peers();
          tend_stop();
          const node_view v = view();
          if (auto st = overdue(v); !st.ok()) return st;
          beat(v);
          if (o_.on_progress) o_.on_progress(r.tokens);
          if (o_.run_timeout_s > 0 && elapsed() > o_.run_timeout_s &&
              !harness::run_done(r, config_, ids())) {
            return status(errc::io_error,
                          "the run did not finish within " + human_seconds(o_.run_timeout_s) +
                              " s (" + std::to_string(r.tokens) + " tokens, " +
                              (r.stopped ? "stopped, " + std::to_string(r.shards_flushed) + " of " +
                                               std::to_string(ids().shards) + " shards flushed"
                                         : "not stopped") +
                              ")");
          }
          return ok_status();
        });
  }

  // A stop asked by a signal: a final snapshot first where snapshots are on, then the run's
  // deadline, sent to the metrics actor as its own timer would (it stops the run once).
  void tend_stop() {
    if (!o_.stop_signal || stop_sent_) return;
    if (stopping_ == 0) {
      stopping_ = o_.stop_signal();
      if (stopping_ == 0) return;
      stop_at_ = elapsed();
      if (config_.snapshot.enabled()) {
        commit_before_stop_ = last_commit_.load();
        say(signal_name(stopping_) + ": taking a final snapshot, then stopping the run");
        snapshot_request ask;
        ask.st.sender = ids().coordinator();
        caf::anon_send(dir_->coordinator, ask);
      } else {
        say(signal_name(stopping_) + ": stopping the run (no snapshots are configured)");
      }
    }
    if (config_.snapshot.enabled()) {
      const uint64_t committed = last_commit_.load();
      if (committed != commit_before_stop_) {
        stop_snapshot_ = committed;
      } else if (elapsed() - stop_at_ < o_.stop_timeout_s / 2) {
        return;  // still waiting for it
      } else {
        say("no snapshot committed within " + human_seconds(o_.stop_timeout_s / 2) +
            " s of the signal: stopping without one");
      }
    }
    caf::anon_send(dir_->metrics, deadline_tick{});
    stop_sent_ = true;
  }

  // Every actor as it runs now (nodes restarted meanwhile run new ones), asked for its report;
  // a learner whose node is down at the end reports nothing but its slot.
  status collect_reports(harness::collected& col) {
    cluster_directory now = *dir_;
    std::vector<bool> down(ids().learners, false);
    for (const auto& [name, peer] : view().peers) {
      const auto slots = where_.on(name);
      DILOCO_CHECK(peer.actors.size() == slots.size(),
                   "node: a peer learned with another count of actors than its slots");
      for (size_t k = 0; k < slots.size(); ++k) {
        now.place(slots[k], peer.actors[k], ids().learners, ids().shards);
        if (!peer.up && ids().is_learner(slots[k])) down[slots[k]] = true;
      }
    }
    return harness::collect_reports(*self_, *sys_, now, *env_, &down, col);
  }

  // Tells every node the run is over, waits for each to confirm, stops this node's actors.
  status finish(status st) {
    for (const auto& [name, peer] : view().peers) {
      if (peer.lost) continue;
      (*self_)
          ->request(peer.registry, seconds_span(o_.peer_timeout_s), caf::close_atom_v)
          .receive([](caf::ok_atom) {},
                   [&, name = name](caf::error& e) {
                     spdlog::warn("node {} did not confirm the end of the run: {}", name,
                                  sys_->render(e));
                   });
    }
    stop_local();
    report_ports();
    return st;
  }

  const run_config& config_;
  const node_options& o_;
  const deployment_config& d_;
  const node_config* me_ = nullptr;
  uint32_t my_index_ = 0;
  std::string secret_;
  std::unique_ptr<bulk_channel> channel_;
  std::optional<resolver_guard> resolving_;  // after the channel: cleared before it goes
  std::shared_ptr<node_offload> offload_;
  std::shared_ptr<node_tape> tape_;  // with --tape
  std::string tape_path_;
  std::shared_ptr<const actor_env> env_;
  std::string leader_;
  std::optional<loaded_snapshot> resume_;
  std::unique_ptr<frame_tunnel> tunnel_;  // outlives the actor system: CAF's links run through it

  caf::actor_system* sys_ = nullptr;
  std::optional<caf::scoped_actor> self_;
  redialers redial_;
  placement_view where_;
  std::shared_ptr<cluster_directory> dir_;
  std::vector<caf::actor> local_;
  caf::actor reg_;
  std::chrono::steady_clock::time_point deadline_;
  // A stop asked by a signal (the leader): the signal, when, the newest snapshot committed then
  // and the one committed after it (0: none), and whether the run's deadline went out.
  int stopping_ = 0;
  double stop_at_ = 0;
  std::atomic<uint64_t> last_commit_{0};
  uint64_t commit_before_stop_ = 0, stop_snapshot_ = 0;
  bool stop_sent_ = false;
  bool rejoining_ = false;
  // Leader: nodes met while wiring that still ran an earlier process's run (outwait_old_run).
  std::vector<std::string> old_run_;
  bool old_run_said_ = false;
  uint32_t incarnation_ = 0;
  uint64_t instance_ = 0;
  std::chrono::steady_clock::time_point run_start_;
  int64_t start_ns_ = 0;
  double next_beat_ = 0;
};

}  // namespace

result<node_result> run_node(const run_config& config, const node_options& o) {
  deployed_node n(config, o);
  if (auto s = n.prepare(); !s.ok()) return s;
  caf::actor_system_config cfg;
  n.configure(cfg);
  result<node_result> r = status(errc::io_error, "not run");
  {
    caf::actor_system sys{cfg};
    r = n.take_part(sys);
    // Reported before the system shuts down: CAF 0.17.6 sometimes never finishes a shutdown
    // (about one node exit in 30 waits forever for a detached learner's thread), and the
    // command may then end the process with this outcome (node_options::on_done).
    if (o.on_done) o.on_done(r);
  }
  return r;
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return "signal " + std::to_string(signal);
  }
}

}  // namespace diloco
