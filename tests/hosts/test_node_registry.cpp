// The registry a deployed node publishes: what a handshake may teach it. A peer of the same
// cluster file is learned with its actors; one whose actors do not match the slots the
// cluster file places on it is refused and named, and never learned (its actors would be
// wired into this node's directories by slot). A restarted node's rejoin is wired into this
// node's actors only once this node's own directory is whole.
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include "tests/catch.hpp"

#include <string>
#include <thread>
#include <vector>

#include "hosts/harness.hpp"
#include "hosts/node_registry.hpp"
#include "protocol/messages.hpp"

using namespace diloco;

namespace {

constexpr uint64_t identity = 42;

// Two learner slots and one shard: node "a" hosts learner 0, node "b" everything else (6).
placement_view placement() {
  placement_view where;
  where.ids.learners = 2;
  where.ids.shards = 1;
  where.self = "a";
  where.leader = "a";
  for (uint32_t i = 0; i < where.ids.count(); ++i) where.node_of.push_back(i == 0 ? "a" : "b");
  return where;
}

struct registry_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor reg;
  std::vector<caf::actor> stand_ins;
  caf::actor peer_registry;  // the registry of the node offering (it lives as long as the test)

  registry_fixture() {
    harness::make_quiet(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    for (int i = 0; i < 7; ++i)
      stand_ins.push_back(sys->spawn([] { return caf::behavior{[](int) {}}; }));
    peer_registry = sys->spawn([] { return caf::behavior{[](int) {}}; });
    reg = sys->spawn(registry, std::vector<caf::actor>{stand_ins[0]}, placement(), identity,
                     uint64_t{7}, nullptr);
  }
  ~registry_fixture() {
    for (auto& a : stand_ins) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(peer_registry, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
  }

  // Node "b" asks for this node's actors, offering `actors` under `their_identity`; true when
  // an answer came.
  bool handshake(uint64_t their_identity, std::vector<caf::actor> actors) {
    return offer(reg, "b", their_identity, std::move(actors), false).answered;
  }

  struct answer {
    bool answered = false;
    bool running = false;  // the registry's run goes on
  };
  // Node `node` offers `actors` to registry `to`, saying whether its own run goes on.
  answer offer(const caf::actor& to, const std::string& node, uint64_t their_identity,
               std::vector<caf::actor> actors, bool their_running) {
    caf::scoped_actor self{*sys};
    answer out;
    self->request(to, std::chrono::seconds(60), caf::put_atom_v, their_identity, node,
                  peer_registry, std::move(actors), their_running, uint32_t{0}, uint32_t{0},
                  uint64_t{0})
        .receive(
            [&](uint64_t, std::vector<caf::actor>, bool running, uint32_t, uint32_t, uint64_t) {
              out.answered = true;
              out.running = running;
            },
            [&](caf::error&) {});
    return out;
  }

  node_view view(const caf::actor& of) {
    caf::scoped_actor self{*sys};
    node_view v;
    self->request(of, std::chrono::seconds(60), caf::get_atom_v, false)
        .receive([&](node_view& got) { v = std::move(got); }, [&](caf::error&) {});
    return v;
  }
  node_view view() { return view(reg); }

  // The registry of node "b" (not the leader), its run going on.
  caf::actor running_registry_of_b() {
    placement_view where = placement();
    where.self = "b";
    const std::vector<caf::actor> mine(stand_ins.begin() + 1, stand_ins.end());
    auto r = sys->spawn(registry, mine, where, identity, uint64_t{0}, nullptr);
    caf::anon_send(r, running_atom::value, uint32_t{0});
    return r;
  }
};

}  // namespace

TEST_CASE("node registry: a peer with an actor for each of its slots is learned") {
  registry_fixture fx;
  const std::vector<caf::actor> theirs(fx.stand_ins.begin() + 1, fx.stand_ins.end());
  REQUIRE(fx.handshake(identity, theirs));
  const node_view v = fx.view();
  CHECK(v.refused.empty());
  REQUIRE(v.peers.count("b") == 1);
  CHECK(v.peers.at("b").actors == theirs);
}

TEST_CASE("node registry: a peer offering another count of actors than its slots is refused") {
  registry_fixture fx;
  const std::vector<caf::actor> too_few(fx.stand_ins.begin() + 1, fx.stand_ins.begin() + 3);
  REQUIRE(fx.handshake(identity, too_few));
  const node_view v = fx.view();
  CHECK(v.refused == "node b offered 2 actors; the cluster file places 6 there (it was refused)");
  CHECK(v.peers.count("b") == 0);
}

TEST_CASE("node registry: a peer of another cluster file is refused") {
  registry_fixture fx;
  REQUIRE(fx.handshake(identity + 1,
                       std::vector<caf::actor>(fx.stand_ins.begin() + 1, fx.stand_ins.end())));
  const node_view v = fx.view();
  CHECK(v.refused == "node b runs another cluster file (it was refused)");
  CHECK(v.peers.count("b") == 0);
}

// Node "b" restarted while this node (restarted too) was still wiring: its rejoin must not reach
// this node's actors before the main thread has placed every peer in the directory (each actor
// takes a copy of it at a rewire; an earlier copy would lack the peers placed after it, and its
// messages to them would go nowhere for good). The answer comes with the rewiring.
TEST_CASE("node registry: a rejoin before this node is wired waits for the wiring") {
  registry_fixture fx;
  // This node's one actor records the slots it is rewired with.
  auto recorder = fx.sys->spawn([] {
    auto rewired = std::make_shared<std::vector<uint32_t>>();
    return caf::behavior{[rewired](rewire_msg& m) { rewired->push_back(m.index); },
                         [rewired](caf::get_atom) { return *rewired; }};
  });
  auto reg = fx.sys->spawn(registry, std::vector<caf::actor>{recorder}, placement(), identity,
                           uint64_t{7}, nullptr);
  const std::vector<caf::actor> theirs(fx.stand_ins.begin() + 1, fx.stand_ins.end());
  caf::scoped_actor self{*fx.sys};
  // The slots the recorder was rewired with (asked after the registry sent them: the
  // recorder's mailbox holds them before the question).
  auto rewires_so_far = [&] {
    std::vector<uint32_t> slots{99};
    self->request(recorder, std::chrono::seconds(60), caf::get_atom_v)
        .receive([&](std::vector<uint32_t>& got) { slots = std::move(got); }, [&](caf::error&) {});
    return slots;
  };
  self->send(reg, rejoin_atom::value, std::string("b"), uint32_t{1},
             caf::actor_cast<caf::actor>(self), theirs);
  // The registry has taken the rejoin (its mailbox is in order per sender) ...
  node_view v;
  self->request(reg, std::chrono::seconds(60), caf::get_atom_v, false)
      .receive([&](node_view& got) { v = std::move(got); }, [&](caf::error&) {});
  // ... and neither rewired nor answered it: the answer is the first thing the next receive
  // takes, and a rewire would have reached the recorder before the view came back.
  CHECK(rewires_so_far().empty());
  const bool b_up = v.peers.count("b") == 1 && v.peers.at("b").up;
  CHECK_FALSE(b_up);
  self->send(reg, wired_atom::value);
  bool answered = false, accepted = false;
  self->receive([&](bool ok) { answered = true, accepted = ok; },
                caf::after(std::chrono::seconds(60)) >> [] {});
  REQUIRE(answered);
  CHECK(accepted);
  CHECK(rewires_so_far() == std::vector<uint32_t>{1, 2, 3, 4, 5, 6});
  // Once wired, a rejoin is wired and answered at once.
  self->send(reg, rejoin_atom::value, std::string("b"), uint32_t{2},
             caf::actor_cast<caf::actor>(self), theirs);
  answered = false;
  self->receive([&](bool ok) { answered = ok; }, caf::after(std::chrono::seconds(60)) >> [] {});
  CHECK(answered);
  CHECK(rewires_so_far().size() == 12);
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
}

// The leader's process died, and a new one of it dials this node before this node saw the old
// one go (a host that vanished without closing its connections, or a node slow to stop): the
// run it led cannot go on, and this node ends it (its next process joins the new run). The
// leader's running process dialing again (after it lost this node for a while) ends nothing.
TEST_CASE("node registry: a new process of the leader ends the run it led on a running node") {
  registry_fixture fx;
  auto reg = fx.running_registry_of_b();
  const std::vector<caf::actor> leaders{fx.stand_ins[0]};

  auto redial = fx.offer(reg, "a", identity, leaders, true);
  REQUIRE(redial.answered);
  CHECK(redial.running);
  CHECK(fx.view(reg).leader_lost.empty());

  auto fresh = fx.offer(reg, "a", identity, leaders, false);
  REQUIRE(fresh.answered);
  CHECK(fresh.running);  // the leader learns that a run was going on here
  CHECK(fx.view(reg).leader_lost ==
        "node a (the leader) started a new process: the run it led ended with its old one; "
        "start this node again to join the new run");
  caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
}

// The leader's new process met nodes still running its old run: it forgets them, to meet their
// next processes, which start a run anew.
TEST_CASE("node registry: the leader forgets the nodes of an earlier run") {
  registry_fixture fx;
  const std::vector<caf::actor> theirs(fx.stand_ins.begin() + 1, fx.stand_ins.end());
  REQUIRE(fx.offer(fx.reg, "b", identity, theirs, true).answered);
  node_view v = fx.view();
  CHECK(v.peers_running);
  REQUIRE(v.peers.count("b") == 1);
  CHECK(v.peers.at("b").running);

  caf::anon_send(fx.reg, forget_atom::value);
  v = fx.view();
  CHECK_FALSE(v.peers_running);
  CHECK(v.peers.empty());
  CHECK(v.instance == 7);  // this execution's, as drawn

  REQUIRE(fx.offer(fx.reg, "b", identity, theirs, false).answered);
  v = fx.view();
  CHECK_FALSE(v.peers_running);
  REQUIRE(v.peers.count("b") == 1);
  CHECK_FALSE(v.peers.at("b").running);
}

// A heartbeat to the leader is asked by the registry while the node's main thread watches the
// view: an answer is taken with when it left and came back; a leader that does not answer
// (its host cut off) fails the heartbeat after its timeout, and meanwhile a new process of the
// leader is seen in the view at once; an older heartbeat's late answer changes nothing.
TEST_CASE("node registry: heartbeats to the leader, answered, unanswered and overtaken") {
  registry_fixture fx;
  auto reg = fx.running_registry_of_b();
  // A leader that tells its time, and one that answers only when told to (ok_atom: it answers
  // every question held so far with 777, and then says how many it answered).
  auto answering =
      fx.sys->spawn([] { return caf::behavior{[](clock_atom) { return int64_t{12345}; }}; });
  auto held = fx.sys->spawn([](caf::event_based_actor* self) {
    auto waiting = std::make_shared<std::vector<caf::response_promise>>();
    return caf::behavior{
        [self, waiting](clock_atom) { waiting->push_back(self->make_response_promise()); },
        [waiting](caf::ok_atom) {
          for (auto& p : *waiting) p.deliver(int64_t{777});
          const auto n = static_cast<int>(waiting->size());
          waiting->clear();
          return n;
        }};
  });
  caf::scoped_actor self{*fx.sys};
  // Answers what `held` holds; returns how many (its answers are in their receivers' mailboxes
  // before this returns).
  auto release = [&] {
    int n = -1;
    self->request(held, std::chrono::seconds(60), caf::ok_atom_v)
        .receive([&](int got) { n = got; }, [&](caf::error&) {});
    return n;
  };
  // The view once `done` holds (asked again until then, within a generous bound).
  auto view_when = [&](auto done) {
    node_view v;
    for (int k = 0; k < 6000; ++k) {
      v = fx.view(reg);
      if (done(v)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return v;
  };
  auto done = [](uint64_t seq) {
    return [seq](const node_view& w) { return w.beat.seq == seq && w.beat.done; };
  };

  caf::anon_send(reg, beat_atom::value, uint64_t{1}, answering, 60.0);
  node_view v = view_when(done(1));
  REQUIRE(v.beat.done);
  CHECK(v.beat.failed.empty());
  CHECK(v.beat.theirs == 12345);
  CHECK(v.beat.back >= v.beat.sent);

  // Unanswered: a new process of the leader offers meanwhile and is in the view at once, the
  // heartbeat still out; then it fails, with CAF's reason.
  caf::anon_send(reg, beat_atom::value, uint64_t{2}, held, 0.5);
  REQUIRE(fx.offer(reg, "a", identity, {fx.stand_ins[0]}, false).answered);
  v = fx.view(reg);
  CHECK_FALSE(v.leader_lost.empty());
  v = view_when(done(2));
  REQUIRE(v.beat.done);
  INFO(v.beat.failed);
  CHECK(v.beat.failed.find("request_timeout") != std::string::npos);
  CHECK(release() == 1);  // 2's answer, after its timeout: dropped

  // 3 waits on the held leader; 4 overtakes it and is answered; 3's late answer (in the
  // registry's mailbox before the view is asked for) leaves 4's reading as it was.
  caf::anon_send(reg, beat_atom::value, uint64_t{3}, held, 60.0);
  caf::anon_send(reg, beat_atom::value, uint64_t{4}, answering, 60.0);
  v = view_when(done(4));
  REQUIRE(v.beat.done);
  CHECK(release() == 1);
  v = fx.view(reg);
  CHECK(v.beat.seq == 4);
  CHECK(v.beat.theirs == 12345);
  CHECK(v.beat.failed.empty());
  for (auto& a : {answering, held, reg}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}
