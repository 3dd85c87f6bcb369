// The run's identity: from the configuration's values, pinned, blind to what does not change
// the run, and the recorded files of the format before it refused by their version.
#include "tests/catch.hpp"

#include <cstring>
#include <functional>

#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "checkpoint/tape_file.hpp"
#include "config/identity.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"
#include "runtime/tape.hpp"
#include "tests/config/recorded_run.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

namespace {

run_config with_lists() {
  run_config c = builtin_run_config();
  c.speeds = {testing::timing(1.0, 0.0), testing::timing(1.18, 0.1), testing::timing(1.0, 0.0),
              testing::timing(1.3, 0.0)};
  c.failures = {{1, 20.0, 5.0}};
  c.partitions = {{{2, 3}, 30.0, 10.0}};
  c.shard_restarts = {{0, 40.0, 5.0}};
  derive_dependent(c);
  return c;
}

// The four bytes of a frame's version (docs/formats.md, "File frame") set to `version`.
void set_frame_version(std::vector<uint8_t>& bytes, size_t at, uint32_t version) {
  REQUIRE(bytes.size() >= at + frame_header_bytes);
  std::memcpy(bytes.data() + at + 4, &version, 4);
}

}  // namespace

TEST_CASE("run identity: pinned values of the built-in cluster and of one with lists") {
  // A changed value here means every recorded snapshot and tape stops resuming: only with a
  // bump of both format versions (docs/formats.md).
  // The built-in cluster as it was when the values were pinned (weight decay 0.1, 16,384
  // evaluation tokens); its defaults have moved since, the identity of a run has not.
  const auto as_pinned = [](run_config c) {
    c.inner.weight_decay = 0.1;
    c.data.eval_tokens = 16384;
    return c;
  };
  run_config c = as_pinned(builtin_run_config());
  derive_dependent(c);
  CHECK(run_identity(c) == 0x83a2898cdbff1412ull);
  CHECK(run_identity(as_pinned(with_lists())) == 0x72ce2d66e15e7b8cull);
}

TEST_CASE("run identity: every value of the run counts; snapshots, placement and alerts do not") {
  const run_config base = with_lists();
  const uint64_t id = run_identity(base);
  const std::vector<std::pair<const char*, std::function<void(run_config&)>>> changes = {
      {"seed", [](run_config& c) { c.seed += 1; }},
      {"inner.lr", [](run_config& c) { c.inner.lr = std::nextafter(c.inner.lr, 1.0f); }},
      {"outer.momentum", [](run_config& c) { c.outer.momentum *= 0.5; }},
      {"speeds jitter", [](run_config& c) { c.speeds[0].jitter = 0.01; }},
      {"speeds ranks", [](run_config& c) { c.speeds[2].ranks = 2; }},
      {"failure time", [](run_config& c) { c.failures[0].at_s += 1; }},
      {"partition learners",
       [](run_config& c) {
         c.partitions[0].learners = {1, 3};
       }},
      {"shard restart", [](run_config& c) { c.shard_restarts[0].down_s = 6; }},
      {"membership",
       [](run_config& c) {
         c.membership = {{2, 50.0, false}};
       }},
  };
  for (const auto& [what, change] : changes) {
    run_config c = base;
    change(c);
    INFO(what);
    CHECK(run_identity(c) != id);
    CHECK_FALSE(run_differences(c, base).empty());
  }
  run_config elsewhere = base;
  elsewhere.snapshot.dir = "/elsewhere";
  elsewhere.snapshot.every_s = 17;
  elsewhere.deploy.nodes = {{"a", "10.0.0.1", 4400}};
  elsewhere.alerts = alert_config{};
  elsewhere.alerts.loss_rise = 3.0;
  CHECK(run_identity(elsewhere) == id);
  CHECK(run_differences(elsewhere, base).empty());
  // The cluster's identity sees the placement: every node must run the same file.
  CHECK(cluster_identity(elsewhere) != cluster_identity(base));
}

TEST_CASE("run identity: a recorded configuration reopens to the same run, or is refused") {
  const run_config c = with_lists();
  const uint64_t id = run_identity(c);
  auto back = reopen_recorded(config_as_yaml(c), "x/MANIFEST", id);
  REQUIRE(back.ok());
  CHECK(run_identity(*back) == id);
  CHECK(config_as_yaml(*back) == config_as_yaml(c));
  auto other = reopen_recorded(config_as_yaml(c), "x/MANIFEST", id ^ 1);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message(),
             Catch::Contains("x/MANIFEST: its configuration does not match its run identity"));
  auto broken = reopen_recorded("learners: [\n", "x/MANIFEST", id);
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.error().message(), Catch::Contains("x/MANIFEST (its configuration)"));
}

TEST_CASE("run identity: snapshots and tapes of the format before it are refused by version") {
  testing::temp_dir dir;
  const std::string root = dir.path().string() + "/snaps";
  auto [c, o] = testing::snapshotting_run(root);
  const std::string tape_path = dir.file("run.tape");
  auto rec = tape_recorder::create(tape_path, make_tape_header(c, o.run_id, o.config_text, true));
  REQUIRE(rec.ok());
  o.tape = *rec;
  REQUIRE(run_simulation(c, o).ok());
  REQUIRE((*rec)->close().ok());

  auto listed = list_snapshots(root);
  REQUIRE(listed.ok());
  REQUIRE_FALSE(listed->empty());
  const std::string snap = listed->back().path;
  REQUIRE(load_snapshot(snap).ok());
  auto manifest = read_file(snap + "/MANIFEST");
  REQUIRE(manifest.ok());
  set_frame_version(*manifest, 0, snapshot_format_version - 1);
  REQUIRE(
      write_file_atomic(snap + "/MANIFEST", byte_view(manifest->data(), manifest->size())).ok());
  auto old_snapshot = load_snapshot(snap);
  REQUIRE_FALSE(old_snapshot.ok());
  CHECK_THAT(
      old_snapshot.error().message(),
      Catch::Contains("format version " + std::to_string(snapshot_format_version - 1) +
                      ", this build reads version " + std::to_string(snapshot_format_version)));

  REQUIRE(read_tape(tape_path).ok());
  auto tape_bytes = read_file(tape_path);
  REQUIRE(tape_bytes.ok());
  set_frame_version(*tape_bytes, 0, tape_format_version - 1);
  REQUIRE(write_file_atomic(tape_path, byte_view(tape_bytes->data(), tape_bytes->size())).ok());
  auto old_tape = read_tape(tape_path);
  REQUIRE_FALSE(old_tape.ok());
  CHECK_THAT(old_tape.error().message(),
             Catch::Contains("format version " + std::to_string(tape_format_version - 1) +
                             ", this build reads version " + std::to_string(tape_format_version)));
}
