// The snapshot coordinator on its own, every other slot a stand-in that answers a marker with
// its part: scripted snapshots are taken at their times and written with one file per actor,
// older ones pruned; a snapshot still being collected makes the next one due be skipped; a
// part without its actor's state, or out of place, is refused without losing what was
// committed.
#include <string>
#include "tests/catch.hpp"

#include "actors/coordinator.hpp"
#include "actors/state_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "runtime/channels.hpp"
#include "runtime/snapshot.hpp"
#include "tests/actors/sim_fixture.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

namespace {

run_config snapshot_config_for(const std::string& dir, std::vector<double> at_s) {
  run_config c = testing::tiny_config(2, 1, 1);
  c.snapshot.dir = dir;
  c.snapshot.at_s = std::move(at_s);
  c.snapshot.keep = 2;
  return c;
}

// How a stand-in answers the marker of snapshot n.
enum class answer { part, silent, unsaved, twice };

struct coordinator_run {
  coordinator_report report;
  std::vector<uint64_t> committed;  // on_commit, in order
};

// The coordinator of `c` with stand-ins on every other slot; actor `odd` answers as `how`
// for the snapshots in `odd_for` and with a plain part otherwise.
coordinator_run run_coordinator(const run_config& c, uint32_t odd, answer how,
                                std::vector<uint64_t> odd_for) {
  testing::sim_fixture fx;
  auto env = actor_env::make(c, true);
  REQUIRE(env.ok());
  auto dir = fx.sink_directory(**env);
  coordinator_run r;
  auto ctx = std::make_shared<snapshot_context>();
  ctx->run_id = 77;
  ctx->on_commit = [&r](uint64_t n, const std::string&, uint64_t, double) {
    r.committed.push_back(n);
  };
  auto coord = fx.own(fx.sys().spawn(snapshot_coordinator, *env, directory_ptr(dir),
                                     std::shared_ptr<const snapshot_context>(ctx)));
  dir->coordinator = coord;
  const actor_indices ids = (*env)->ids;
  auto stand_in = [&](uint32_t index) {
    return fx.own(fx.sys().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      testing::ignore_unhandled(self);
      return {[=](marker_msg& m) {
        const bool special =
            index == odd && std::find(odd_for.begin(), odd_for.end(), m.snapshot) != odd_for.end();
        snapshot_part p{m.snapshot,
                        index,
                        0,
                        "stand-in " + std::to_string(index),
                        {tensor_blob(std::vector<uint8_t>(16, static_cast<uint8_t>(index)))}};
        if (special && how == answer::silent) return;
        // As an actor would: a marker on its channel to the coordinator, then its part.
        if (channel_exists(ids, index, ids.coordinator()))
          self->send(coord, marker_msg{index, m.snapshot});
        if (special && how == answer::unsaved) p.summary = unsaved_state_summary;
        self->send(coord, p);
        if (special && how == answer::twice) self->send(coord, p);
      }};
    }));
  };
  for (uint32_t i = 0; i < ids.learners; ++i)
    dir->learners[i] = caf::actor_cast<learner_actor>(stand_in(ids.learner(i)));
  for (uint32_t i = 0; i < ids.shards; ++i)
    dir->shards[i] = caf::actor_cast<shard_actor>(stand_in(ids.shard(i)));
  dir->scheduler = caf::actor_cast<scheduler_actor>(stand_in(ids.scheduler()));
  dir->metrics = caf::actor_cast<metrics_actor>(stand_in(ids.metrics()));
  dir->chaos = caf::actor_cast<supervisor_actor>(stand_in(ids.chaos()));
  caf::anon_send(coord, start_msg{});
  fx.drain();
  fx.own(fx.sys().spawn([coord, &r](caf::event_based_actor* self) {
    self->request(coord, std::chrono::seconds(10), report_request{})
        .then([&r](coordinator_report rep) { r.report = rep; });
  }));
  fx.drain();
  return r;
}

std::vector<uint64_t> on_disk(const std::string& root) {
  auto list = list_snapshots(root);
  REQUIRE(list.ok());
  std::vector<uint64_t> n;
  for (const auto& s : *list) {
    if (s.has_manifest) n.push_back(s.snapshot);
  }
  return n;
}

}  // namespace

TEST_CASE("coordinator: scripted snapshots are written whole, the oldest pruned") {
  testing::temp_dir tmp;
  const auto c = snapshot_config_for(tmp.path().string(), {2.5, 0.5, 1.5});
  const auto r = run_coordinator(c, 0, answer::part, {});
  CHECK(r.committed == std::vector<uint64_t>{1, 2, 3});
  CHECK(r.report.snapshots == 3);
  CHECK(r.report.skipped == 0);
  CHECK(r.report.failed == 0);
  CHECK(on_disk(tmp.path().string()) == std::vector<uint64_t>{2, 3});  // keep: 2
  auto list = list_snapshots(tmp.path().string());
  REQUIRE(list.ok());
  auto loaded = load_snapshot(list->back().path);
  REQUIRE(loaded.ok());
  CHECK(loaded->manifest.run_id == 77);
  CHECK(loaded->manifest.snapshot == 3);
  const auto env = actor_env::make(c, true);
  REQUIRE(env.ok());
  const actor_indices& ids = (*env)->ids;
  REQUIRE(loaded->parts.size() == ids.count());
  // The manifest gives each actor its role in this run; another role is refused by name
  // (issue 50: a part with its role byte changed and its checksums recomputed loaded).
  for (uint32_t i = 0; i < ids.count(); ++i) {
    CHECK(check_role(**env, i, loaded->manifest.actors[i].role, "m").ok());
    const uint8_t other = static_cast<uint8_t>((loaded->manifest.actors[i].role + 1) % 7);
    const status wrong = check_role(**env, i, other, "m");
    REQUIRE_FALSE(wrong.ok());
    CHECK_THAT(wrong.message(), Catch::Contains("actor " + std::to_string(i) + " has role"));
  }
  // Each stand-in's part is its 16 bytes; the coordinator's own is its saved state.
  for (uint32_t i = 0; i < ids.count(); ++i) {
    if (i == ids.coordinator()) {
      CHECK(!loaded->parts[i].empty());
    } else {
      CHECK(loaded->parts[i].copy() == std::vector<uint8_t>(16, static_cast<uint8_t>(i)));
    }
  }
}

TEST_CASE("coordinator: while a snapshot is incomplete the next ones due are skipped") {
  testing::temp_dir tmp;
  const auto c = snapshot_config_for(tmp.path().string(), {0.5, 1.5, 2.5});
  // Learner 1's slot never answers snapshot 1: in simulation nothing is lost, so it waits.
  const auto r = run_coordinator(c, 1, answer::silent, {1});
  CHECK(r.committed.empty());
  CHECK(r.report.snapshots == 0);
  CHECK(r.report.skipped == 2);
  CHECK(on_disk(tmp.path().string()).empty());
}

TEST_CASE("coordinator: a part without its actor's state is not written; the next snapshot is") {
  testing::temp_dir tmp;
  const auto c = snapshot_config_for(tmp.path().string(), {0.5, 1.5});
  const auto r = run_coordinator(c, 0, answer::unsaved, {2});
  CHECK(r.committed == std::vector<uint64_t>{1});
  CHECK(r.report.failed == 1);
  CHECK(on_disk(tmp.path().string()) == std::vector<uint64_t>{1});
  // The parts written before the bad one came went with it: no directory is left behind.
  auto list = list_snapshots(tmp.path().string());
  REQUIRE(list.ok());
  CHECK(list->size() == 1);
}

TEST_CASE("coordinator: a part sent twice is refused and the snapshot still commits") {
  testing::temp_dir tmp;
  const auto c = snapshot_config_for(tmp.path().string(), {0.5});
  const auto r = run_coordinator(c, 0, answer::twice, {1});
  CHECK(r.committed == std::vector<uint64_t>{1});
  CHECK(r.report.failed == 0);
  CHECK(on_disk(tmp.path().string()) == std::vector<uint64_t>{1});
}
