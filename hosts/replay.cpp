#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <algorithm>

#include "hosts/harness.hpp"
#include "hosts/simulation.hpp"
#include "protocol/digest.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/wire.hpp"

namespace diloco {

using namespace harness;

namespace {

// Compares what replayed actors send with the tape (runtime/tape.hpp).
class replay_checker final : public tape_hook {
 public:
  replay_checker(const tape& t, const std::vector<bool>& selected) : selected_(selected) {
    expected_.resize(t.header.roles.size());
    cursor_.assign(t.header.roles.size(), 0);
    input_.assign(t.header.roles.size(), 0);
    input_seq_.assign(t.header.roles.size(), 0);
    for (const auto& e : t.events) {
      if (e.kind == tape_kind::sent) expected_[e.actor].push_back(&e);
    }
  }
  bool replaying() const override { return true; }
  void input(uint32_t, tape_kind, int64_t, int, const caf::message&, uint64_t,
             const stamp*) override {}

  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override {
    if (actor >= selected_.size() || !selected_[actor] || divergence) return;
    const uint64_t k = cursor_[actor]++;
    const auto& exp = expected_[actor];
    const std::string got = describe(type, dest, digest);
    if (k >= exp.size()) {
      diverge(actor, k, tick, "sent " + got + ", the recording has no send " + std::to_string(k),
              {}, st.clock.ticks());
      return;
    }
    const tape_event& e = *exp[k];
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

  void timer_mismatch(uint32_t actor, int64_t due, int64_t now) override {
    if (actor >= selected_.size() || !selected_[actor] || divergence) return;
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

  // The actor's input `index` (tape position `seq`) is being handled.
  void at_input(uint32_t actor, uint64_t index, uint64_t seq) {
    input_[actor] = index;
    input_seq_[actor] = seq;
  }
  // After the last input: a selected actor that sent less than the recording diverged too.
  void finish() {
    for (uint32_t a = 0; a < selected_.size() && !divergence; ++a) {
      if (!selected_[a] || cursor_[a] >= expected_[a].size()) continue;
      const tape_event& e = *expected_[a][cursor_[a]];
      diverge(a, cursor_[a], e.tick,
              "sent nothing more; the recording has " + describe(e.type, e.peer, e.digest) +
                  " and " + std::to_string(expected_[a].size() - cursor_[a] - 1) + " more",
              e.clock, {});
    }
  }

  std::optional<replay_divergence> divergence;
  uint64_t checked = 0;
  bool want_state = false;
  std::vector<uint8_t> state_bytes;
  std::string state_summary;

 private:
  static std::string describe(int type, uint32_t dest, uint64_t digest) {
    char d[24];
    std::snprintf(d, sizeof d, "%016llx", static_cast<unsigned long long>(digest));
    return wire_tag_name(type) + " to actor " + std::to_string(dest) + " (digest " + d + ")";
  }
  void diverge(uint32_t actor, uint64_t sent_index, int64_t tick, std::string what,
               std::vector<uint64_t> recorded, std::vector<uint64_t> replayed) {
    replay_divergence d;
    d.actor = actor;
    d.input_index = input_[actor];
    d.input_seq = input_seq_[actor];
    d.tick = tick;
    d.sent_index = sent_index;
    d.what = std::move(what);
    d.recorded_clock = std::move(recorded);
    d.replayed_clock = std::move(replayed);
    divergence = std::move(d);
  }

  std::vector<bool> selected_;
  std::vector<std::vector<const tape_event*>> expected_;
  std::vector<uint64_t> cursor_, input_, input_seq_;
};

void enqueue(const caf::actor& dest, caf::message msg) {
  auto ptr = caf::actor_cast<caf::strong_actor_ptr>(dest);
  ptr->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::move(msg)),
               nullptr);
}

}  // namespace

result<replay_result> replay_tape(const run_config& config, const tape& t,
                                  const replay_options& options) {
  const size_t actors = t.header.roles.size();
  if (options.actor >= static_cast<int64_t>(actors)) {
    return status(errc::invalid_argument, "--actor " + std::to_string(options.actor) +
                                              ": the tape has actors 0.." +
                                              std::to_string(actors - 1));
  }
  if (options.until >= 0 && options.actor < 0)
    return status(errc::invalid_argument, "--until needs --actor: whose input number it is");
  std::vector<bool> selected(actors, options.actor < 0);
  if (options.actor >= 0) selected[static_cast<size_t>(options.actor)] = true;
  auto checker = std::make_shared<replay_checker>(t, selected);
  auto env_r =
      actor_env::make(config, t.header.virtual_time, {checker, nullptr, nullptr, options.model});
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
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto& clock = dynamic_cast<caf::detail::test_actor_clock&>(sched.clock());
  const auto dir = spawn_cluster(sys, env, std::make_shared<snapshot_context>());
  // Whatever happens, the actors end before the system does (its destructor waits for them).
  struct stopper {
    const cluster_directory& dir;
    caf::scheduler::test_coordinator& sched;
    ~stopper() {
      stop_cluster(dir);
      while (sched.has_job()) sched.run_once();
    }
  } stop_at_exit{*dir, sched};

  replay_result out;
  for (uint32_t a = 0; a < actors; ++a) {
    if (selected[a]) out.actors.push_back(a);
  }
  std::vector<uint64_t> inputs(actors, 0);
  uint64_t total = 0;
  for (const auto& e : t.events) total += e.kind != tape_kind::sent && selected[e.actor] ? 1 : 0;
  for (const auto& e : t.events) {
    if (e.kind == tape_kind::sent || !selected[e.actor]) continue;
    const uint64_t index = inputs[e.actor]++;
    if (options.until >= 0 && e.actor == static_cast<uint32_t>(options.actor) &&
        index == static_cast<uint64_t>(options.until)) {
      if (options.at_until) options.at_until(e);
      // A marker asks the actor for its state (runtime/snapshot.hpp, replaying).
      checker->want_state = true;
      enqueue(dir->at(e.actor), caf::make_message(marker_msg{env->ids.coordinator(), UINT64_MAX}));
      while (sched.has_job()) sched.run_once();
      out.stopped_at_until = true;
      break;
    }
    auto msg = tape_message(t, e);
    if (!msg) return msg.error();
    if (caf::actor_clock::time_point{std::chrono::nanoseconds(e.tick)} > clock.current_time)
      clock.current_time = caf::actor_clock::time_point{std::chrono::nanoseconds(e.tick)};
    checker->at_input(e.actor, index, e.seq);
    enqueue(dir->at(e.actor), std::move(*msg));
    while (sched.has_job()) sched.run_once();
    ++out.inputs;
    if (options.on_progress && out.inputs % 4096 == 0) options.on_progress(out.inputs, total);
    if (checker->divergence) break;
  }
  if (!out.stopped_at_until && !checker->divergence && t.complete) checker->finish();
  if (options.until >= 0 && !out.stopped_at_until && !checker->divergence) {
    return status(errc::invalid_argument,
                  "--until " + std::to_string(options.until) + ": actor " +
                      std::to_string(options.actor) + " has only " +
                      std::to_string(inputs[static_cast<size_t>(options.actor)]) +
                      " inputs on the tape");
  }
  out.divergence = checker->divergence;
  out.sends_checked = checker->checked;
  out.state = std::move(checker->state_bytes);
  out.summary = std::move(checker->state_summary);
  return out;
}

}  // namespace diloco
