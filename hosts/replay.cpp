#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "base/check.hpp"
#include "hosts/harness.hpp"
#include "hosts/simulation.hpp"
#include "protocol/digest.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/wire.hpp"
#include "runtime/shared_clock.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

using namespace harness;

namespace {

// Compares what replayed actors send with the tape (runtime/tape.hpp), and gives real-time
// actors the values they read when the tape was recorded.
class replay_checker final : public tape_hook {
 public:
  replay_checker(const tape& t, const std::vector<bool>& selected) : t_(t), selected_(selected) {
    const size_t n = t.header.roles.size();
    expected_.resize(n);
    cut_short_.assign(n, false);
    cursor_.assign(n, 0);
    input_.assign(n, 0);
    input_event_.assign(n, npos);
    read_cursor_.assign(n, 0);
    segment_.assign(n, 0);
    std::vector<size_t> last_input(n, npos);
    std::map<std::string, std::set<uint32_t>> node_actors;  // the actors each node's tapes show
    for (size_t i = 0; i < t.events.size(); ++i) {
      const tape_event& e = t.events[i];
      DILOCO_CHECK(e.actor < n, "replay: read_tape checked every event's actor");
      if (t.segments.empty()) {
        if (!t.complete) cut_short_[e.actor] = true;
      } else {
        node_actors[t.segments[t.segment(i)].node].insert(e.actor);
      }
      if (e.kind == tape_kind::sent) {
        expected_[e.actor].push_back(i);
        sends_by_stamp_.emplace(stamp_key(e.actor, e.peer, e.type, e.clock), e.digest);
      } else if (e.kind == tape_kind::read) {
        // Read while handling the actor's latest input (or, after it, in a handler the tape
        // does not replay: such reads are left over, never given to another input).
        if (last_input[e.actor] != npos) reads_[last_input[e.actor]].push_back(&e);
      } else {
        last_input[e.actor] = i;
      }
    }
    // A node whose recording was cut (a process that died, maybe before it wrote any event):
    // its actors' sends are not all on the tapes.
    for (const auto& seg : t.segments) {
      if (!seg.cut) continue;
      for (uint32_t a : node_actors[seg.node]) cut_short_[a] = true;
    }
  }
  bool replaying() const override { return true; }
  void input(uint32_t, tape_kind, int64_t, int, const caf::message&, uint64_t, const stamp*,
             const checkpoint_source&) override {}

  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override {
    if (!watching(actor)) return;
    const uint64_t k = cursor_[actor];
    const auto& exp = expected_[actor];
    const std::string got = describe(type, dest, digest);
    if (k >= exp.size() || t_.segment(exp[k]) != segment_[actor]) {
      // A process killed while recording lost the end of its tape: what its last input sent
      // beyond it cannot be checked.
      if (past_the_cut(actor)) {
        ++unchecked;
        return;
      }
      diverge(actor, k, tick, "sent " + got + ", the recording has no send " + std::to_string(k),
              {}, st.clock.ticks());
      return;
    }
    ++cursor_[actor];
    const tape_event& e = t_.events[exp[k]];
    if (e.type != type || e.peer != dest || e.digest != digest) {
      diverge(actor, k, tick,
              "sent " + got + ", the recording has " + describe(e.type, e.peer, e.digest), e.clock,
              st.clock.ticks());
      return;
    }
    if (e.clock != st.clock.ticks()) {
      diverge(actor, k, tick, "sent " + got + " as recorded but with another vector clock", e.clock,
              st.clock.ticks());
      return;
    }
    ++checked;
  }

  int64_t replay_read(uint32_t actor, tape_read what) override {
    if (!watching(actor) || input_event_[actor] == npos) return shared_clock_ns();
    const auto it = reads_.find(input_event_[actor]);
    const size_t k = read_cursor_[actor]++;
    if (it != reads_.end() && k < it->second.size()) {
      const tape_event& e = *it->second[k];
      if (e.type != static_cast<int32_t>(what)) {
        diverge(actor, cursor_[actor], 0,
                std::string("read the ") + to_string(what) + " where the recording read the " +
                    to_string(static_cast<tape_read>(e.type)),
                {}, {});
      }
      ++reads_given;
      return e.tick;
    }
    if (!past_the_cut(actor)) {
      const size_t recorded = it == reads_.end() ? 0 : it->second.size();
      diverge(actor, cursor_[actor], 0,
              std::string("read the ") + to_string(what) + " " + std::to_string(k + 1) +
                  " times while handling this input; the recording read " +
                  std::to_string(recorded) + " values",
              {}, {});
    }
    return shared_clock_ns();
  }

  void timer_mismatch(uint32_t actor, int64_t due, int64_t now) override {
    if (!watching(actor)) return;
    diverge(actor, cursor_[actor], now,
            "a timer fired at tick " + std::to_string(now) +
                " but the actor's next timer is due at " + std::to_string(due),
            {}, {});
  }

  void state(uint32_t, std::vector<uint8_t> bytes, std::string summary) override {
    if (!want_state) return;  // a snapshot the replayed coordinator started, not ours
    state_bytes = std::move(bytes);
    state_summary = std::move(summary);
  }

  // The payload of input `event` as stored on the tape, before it is delivered: its digest must
  // be the recorded one, and, when its sender is recorded too, the digest of what the sender
  // sent (which replaying the sender checks in turn). A payload altered on the tape, with its
  // digest recomputed or not, is caught here (digests cover blobs by their checksums, which
  // decoding checks against the values).
  void check_input(size_t event, const caf::message& msg) {
    const tape_event& e = t_.events[event];
    // A checkpoint's state is checked against the replayed actor's (check_state), or starts it.
    if (!watching(e.actor) || !wire_known(msg) || e.kind == tape_kind::checkpoint) return;
    const uint64_t got = wire_digest(msg);
    if (got != e.digest) {
      diverge(e.actor, cursor_[e.actor], e.tick,
              "its input " + describe(e.type, e.actor, got) +
                  " does not match the digest recorded with it (the tape was altered)",
              {}, {});
      return;
    }
    // The sender's sends are all on the tapes only if it is recorded and no recording of it
    // was cut short (a process that died lost its last sends, and its restarted process's
    // clock starts again, so a stamp may then name another send).
    if ((e.kind != tape_kind::message && e.kind != tape_kind::dropped) || e.clock.empty() ||
        e.peer >= t_.header.roles.size() || !t_.header.records(e.peer) || cut_short_[e.peer])
      return;
    // A restarted process's clock starts again: its sends may share a stamp with its earlier
    // process's. The input must be one of them.
    const auto [first, last] =
        sends_by_stamp_.equal_range(stamp_key(e.peer, e.actor, e.type, e.clock));
    if (first == last) return;  // not on the tapes (e.g. sent before a resumed run's start)
    if (std::none_of(first, last, [got](const auto& kv) { return kv.second == got; })) {
      diverge(e.actor, cursor_[e.actor], e.tick,
              "its input " + describe(e.type, e.actor, got) + " from actor " +
                  std::to_string(e.peer) + " is not what that actor sent (digest " +
                  hex(first->second) + "): the tape was altered",
              {}, {});
      return;
    }
    ++inputs_matched;
  }

  // The actor's input `index` (tape.events[event]) is being handled.
  void at_input(uint32_t actor, uint64_t index, size_t event) {
    DILOCO_CHECK(
        actor < input_.size() && event < t_.events.size() && t_.events[event].actor == actor,
        "replay: an input of another actor, or past the tape");
    input_[actor] = index;
    input_event_[actor] = event;
    read_cursor_[actor] = 0;
    segment_[actor] = t_.segment(event);
  }
  // The actor's process (segment) ended, or the tape did: a selected actor that sent less than
  // the recording diverged too, unless its recording was cut there.
  void end_of(uint32_t actor) {
    if (!watching(actor) || cursor_[actor] >= expected_[actor].size()) return;
    const size_t at = expected_[actor][cursor_[actor]];
    const uint32_t seg = t_.segment(at);
    if (seg != segment_[actor]) return;
    const tape_event& e = t_.events[at];
    size_t more = 0;
    for (size_t k = cursor_[actor]; k < expected_[actor].size(); ++k)
      more += t_.segment(expected_[actor][k]) == seg ? 1 : 0;
    DILOCO_CHECK(more >= 1, "replay: the send left to make is counted among those left");
    diverge(actor, cursor_[actor], e.tick,
            "sent nothing more; the recording has " + describe(e.type, e.peer, e.digest) + " and " +
                std::to_string(more - 1) + " more",
            e.clock, {});
  }
  // The actor's state at a checkpoint (tape event `event`) is not the recorded one.
  void state_differs(uint32_t actor, size_t event, size_t at, size_t replayed, size_t recorded) {
    if (!watching(actor)) return;
    input_event_[actor] = event;
    diverge(actor, cursor_[actor], t_.events[event].tick,
            "its state at the checkpoint differs from the recorded one (" +
                std::to_string(replayed) + " bytes against " + std::to_string(recorded) +
                ", first difference at byte " + std::to_string(at) + ")",
            {}, {});
  }
  void finish() {
    for (uint32_t a = 0; a < selected_.size() && !divergence; ++a) end_of(a);
  }

  std::optional<replay_divergence> divergence;
  uint64_t checked = 0;
  uint64_t unchecked = 0;       // sends past the end of a cut recording
  uint64_t reads_given = 0;     // recorded values read in place of the clock
  uint64_t inputs_matched = 0;  // inputs that are what their recorded sender sent
  bool want_state = false;
  std::vector<uint8_t> state_bytes;
  std::string state_summary;

 private:
  static constexpr size_t npos = SIZE_MAX;
  bool watching(uint32_t actor) const {
    return actor < selected_.size() && selected_[actor] && !divergence;
  }
  // The actor handles the last input its cut recording holds: past it the tape knows nothing.
  bool past_the_cut(uint32_t actor) const {
    const size_t ev = input_event_[actor];
    if (ev == npos) return false;
    const uint32_t seg = t_.segment(ev);
    const bool cut = t_.segments.empty() ? !t_.complete : t_.segments[seg].cut;
    if (!cut) return false;
    for (size_t i = ev + 1; i < t_.events.size() && t_.segment(i) == seg; ++i) {
      const tape_event& e = t_.events[i];
      if (e.actor == actor && e.kind != tape_kind::sent && e.kind != tape_kind::read) return false;
    }
    return true;
  }
  // A send by its stamp: sender, destination, type and vector clock (a sender's clock ticks
  // with every send, so no two sends share one).
  static uint64_t stamp_key(uint32_t from, uint32_t to, int32_t type,
                            const std::vector<uint64_t>& clock) {
    uint64_t h = digest(from, to, static_cast<uint32_t>(type), clock.size());
    for (uint64_t c : clock) h = mix(h, c);
    return h;
  }
  static std::string hex(uint64_t v) {
    char d[24];
    std::snprintf(d, sizeof d, "%016llx", static_cast<unsigned long long>(v));
    return d;
  }
  static std::string describe(int type, uint32_t dest, uint64_t digest) {
    return wire_tag_name(type) + " to actor " + std::to_string(dest) + " (digest " + hex(digest) +
           ")";
  }
  void diverge(uint32_t actor, uint64_t sent_index, int64_t tick, std::string what,
               std::vector<uint64_t> recorded, std::vector<uint64_t> replayed) {
    if (divergence) return;
    replay_divergence d;
    d.actor = actor;
    d.input_index = input_[actor];
    d.input_event = input_event_[actor] == npos ? 0 : input_event_[actor];
    d.input_seq = input_event_[actor] == npos ? 0 : t_.events[input_event_[actor]].seq;
    d.tick = tick;
    d.sent_index = sent_index;
    d.what = std::move(what);
    d.recorded_clock = std::move(recorded);
    d.replayed_clock = std::move(replayed);
    divergence = std::move(d);
  }

  const tape& t_;
  std::vector<bool> selected_;
  std::vector<std::vector<size_t>> expected_;  // by actor: its sends (event positions)
  std::unordered_map<size_t, std::vector<const tape_event*>> reads_;  // by input position
  std::unordered_multimap<uint64_t, uint64_t> sends_by_stamp_;        // stamp_key -> digest
  std::vector<bool> cut_short_;  // by actor: a recording of it ends before its process did
  std::vector<uint64_t> cursor_, input_;
  std::vector<size_t> input_event_, read_cursor_;
  std::vector<uint32_t> segment_;  // by actor: the segment of the input it handles
};

void enqueue(const caf::actor& dest, caf::message msg) {
  auto ptr = caf::actor_cast<caf::strong_actor_ptr>(dest);
  ptr->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::move(msg)),
               nullptr);
}

// The actors a replay re-executes: every one the tapes record, or the one asked for.
result<std::vector<bool>> select_actors(const tape& t, const replay_options& options) {
  const size_t actors = t.header.roles.size();
  if (options.actor >= static_cast<int64_t>(actors)) {
    return status(errc::invalid_argument, "--actor " + std::to_string(options.actor) +
                                              ": the tape has actors 0.." +
                                              std::to_string(actors - 1));
  }
  if (options.until >= 0 && options.actor < 0)
    return status(errc::invalid_argument, "--until needs --actor: whose input number it is");
  if (options.actor >= 0 && !t.header.records(static_cast<uint32_t>(options.actor))) {
    return status(errc::invalid_argument,
                  "--actor " + std::to_string(options.actor) +
                      ": no tape given records it (its node's tape is missing)");
  }
  std::vector<bool> selected(actors, false);
  for (uint32_t a = 0; a < actors; ++a)
    selected[a] = options.actor < 0 ? t.header.records(a) : a == options.actor;
  return selected;
}

bool is_input(const tape_event& e) {
  return e.kind != tape_kind::sent && e.kind != tape_kind::read;
}

// One replay: the tape's inputs of the selected actors, fed one at a time to actors spawned
// on the deterministic scheduler, each run to quiescence before the next.
class replay_run {
 public:
  replay_run(const tape& t, const replay_options& options, std::shared_ptr<const actor_env> env,
             replay_checker& checker, const std::vector<bool>& selected, caf::actor_system& sys)
      : t_(t),
        options_(options),
        env_(std::move(env)),
        checker_(checker),
        selected_(selected),
        sys_(sys),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
        clock_(dynamic_cast<caf::detail::test_actor_clock&>(sched_.clock())),
        dir_(spawn_cluster(sys, env_, ctx_)),
        inputs_(selected.size(), 0),
        segment_(selected.size(), UINT32_MAX),
        running_(selected.size(), false) {
    for (uint32_t a = 0; a < selected.size(); ++a) {
      if (selected[a]) out_.actors.push_back(a);
    }
  }
  // Whatever happens, the actors end before the system does (its destructor waits for them).
  ~replay_run() {
    stop_cluster(*dir_);
    settle();
  }
  replay_run(const replay_run&) = delete;
  replay_run& operator=(const replay_run&) = delete;

  result<replay_result> run() {
    uint64_t total = 0;
    for (const auto& e : t_.events) total += is_input(e) && selected_[e.actor] ? 1 : 0;
    for (size_t i = 0; i < t_.events.size() && !checker_.divergence; ++i) {
      const tape_event& e = t_.events[i];
      if (!is_input(e) || !selected_[e.actor]) continue;
      if (segment_[e.actor] != t_.segment(i)) {
        if (segment_[e.actor] != UINT32_MAX && !node_restarted(e.actor)) break;
        segment_[e.actor] = t_.segment(i);
      }
      // A checkpoint begins an actor whose earlier history is gone (its start restores the
      // state), and checks one that runs.
      if (e.kind == tape_kind::checkpoint && running_[e.actor]) {
        if (auto s = check_state(i); !s.ok()) return s;
        continue;
      }
      running_[e.actor] = true;
      const uint64_t index = inputs_[e.actor]++;
      if (options_.until >= 0 && e.actor == static_cast<uint32_t>(options_.actor) &&
          index == static_cast<uint64_t>(options_.until)) {
        stop_at_until(e);
        break;
      }
      if (auto s = deliver(i, index); !s.ok()) return s;
      if (options_.on_progress && out_.inputs % 4096 == 0) options_.on_progress(out_.inputs, total);
    }
    return finish();
  }

 private:
  void settle() {
    while (sched_.has_job()) sched_.run_once();
  }

  // The actor's node was restarted: the next process's actor begins afresh. False when the
  // earlier process's sends diverged.
  bool node_restarted(uint32_t a) {
    checker_.end_of(a);
    if (checker_.divergence) return false;
    caf::anon_send_exit(dir_->at(a), caf::exit_reason::user_shutdown);
    place(*dir_, env_->ids, a, spawn_actor(sys_, env_, dir_, a, ctx_));
    settle();
    running_[a] = false;
    return true;
  }

  // The actor's state as replayed, into the checker's state_bytes and state_summary: a marker
  // asks for it (runtime/snapshot.hpp, replaying).
  void ask_state(uint32_t a) {
    checker_.want_state = true;
    enqueue(dir_->at(a), caf::make_message(marker_msg{env_->ids.coordinator(), UINT64_MAX}));
    settle();
    checker_.want_state = false;
  }

  // A checkpoint of an actor that is running: its replayed state must be the recorded one.
  status check_state(size_t i) {
    const tape_event& e = t_.events[i];
    auto msg = tape_message(t_, e);
    if (!msg) return msg.error();
    const auto& restore = msg->get_as<start_msg>(0).restore;
    auto part =
        decode_part(restore.view(), t_.path + ": checkpoint of event " + std::to_string(e.seq));
    if (!part) return part.error();
    ask_state(e.actor);
    const std::vector<uint8_t>& now = checker_.state_bytes;
    const byte_view then = part->state;
    if (now.size() != then.size() || !std::equal(now.begin(), now.end(), then.begin())) {
      const auto diff = std::mismatch(now.begin(), now.end(), then.begin(), then.end());
      checker_.state_differs(e.actor, i, static_cast<size_t>(diff.first - now.begin()), now.size(),
                             then.size());
    }
    ++out_.checkpoints_checked;
    return ok_status();
  }

  // --until: the state of the actor just before that input.
  void stop_at_until(const tape_event& e) {
    if (options_.at_until) options_.at_until(e);
    ask_state(e.actor);
    out_.state = std::move(checker_.state_bytes);
    out_.summary = std::move(checker_.state_summary);
    out_.stopped_at_until = true;
  }

  // Input `index` of its actor, at the tick it had when recorded.
  status deliver(size_t i, uint64_t index) {
    const tape_event& e = t_.events[i];
    auto msg = tape_message(t_, e);
    if (!msg) return msg.error();
    const caf::actor_clock::time_point at{std::chrono::nanoseconds(e.tick)};
    if (at > clock_.current_time) clock_.current_time = at;
    checker_.at_input(e.actor, index, i);
    checker_.check_input(i, *msg);
    if (checker_.divergence) return ok_status();
    enqueue(dir_->at(e.actor), std::move(*msg));
    settle();
    ++out_.inputs;
    return ok_status();
  }

  result<replay_result> finish() {
    if (!out_.stopped_at_until && !checker_.divergence) checker_.finish();
    if (options_.until >= 0 && !out_.stopped_at_until && !checker_.divergence) {
      return status(errc::invalid_argument,
                    "--until " + std::to_string(options_.until) + ": actor " +
                        std::to_string(options_.actor) + " has only " +
                        std::to_string(inputs_[static_cast<size_t>(options_.actor)]) +
                        " inputs on the tape");
    }
    out_.divergence = checker_.divergence;
    out_.sends_checked = checker_.checked;
    out_.sends_past_cut = checker_.unchecked;
    out_.reads_given = checker_.reads_given;
    out_.inputs_matched = checker_.inputs_matched;
    return std::move(out_);
  }

  const tape& t_;
  const replay_options& options_;
  const std::shared_ptr<const actor_env> env_;
  replay_checker& checker_;
  const std::vector<bool>& selected_;
  caf::actor_system& sys_;
  caf::scheduler::test_coordinator& sched_;
  caf::detail::test_actor_clock& clock_;
  const std::shared_ptr<const snapshot_context> ctx_ = std::make_shared<const snapshot_context>();
  const std::shared_ptr<cluster_directory> dir_;
  replay_result out_;
  std::vector<uint64_t> inputs_;
  std::vector<uint32_t> segment_;
  std::vector<bool> running_;
};

}  // namespace

result<replay_result> replay_tape(const run_config& config, const tape& t,
                                  const replay_options& options) {
  auto selected = select_actors(t, options);
  if (!selected) return selected.error();
  const size_t actors = t.header.roles.size();
  auto checker = std::make_shared<replay_checker>(t, *selected);
  env_hooks hooks;
  hooks.tape = checker;  // every actor's reads and sends are checked against the tape
  hooks.model = options.model;
  auto env_r = actor_env::make(config, t.header.virtual_time, hooks);
  if (!env_r) return env_r.error();
  const std::shared_ptr<const actor_env> env = *env_r;
  if (env->ids.count() != actors ||
      (t.header.virtual_time && env->tick_scale != t.header.tick_scale)) {
    return status(errc::invalid_argument, t.path + ": a tape of " + std::to_string(actors) +
                                              " actors, the configuration has " +
                                              std::to_string(env->ids.count()));
  }
  caf::actor_system_config cfg;
  make_quiet(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  replay_run run(t, options, env, *checker, *selected, sys);
  return run.run();
}

}  // namespace diloco
