// The one check of a snapshot that inspect and resume share (hosts/resume_check.hpp).
#include "tests/catch.hpp"

#include "checkpoint/file_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "config/identity.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/resume_check.hpp"
#include "hosts/simulation.hpp"
#include "tests/config/recorded_run.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

TEST_CASE(
    "snapshots: inspect and resume share one check; a sealed but inconsistent one is skipped") {
  testing::temp_dir dir;
  const std::string root = dir.path().string() + "/snaps";
  auto [c, o] = testing::snapshotting_run(root);
  c.snapshot.keep = 100;
  REQUIRE(run_simulation(c, o).ok());
  auto newest = choose_snapshot(root, std::nullopt, check_snapshot_loads);
  REQUIRE(newest.ok());
  CHECK(newest->skipped.empty());
  const loaded_snapshot& good = newest->snapshot;
  CHECK(check_snapshot_loads(good).ok());

  // A forged snapshot: every file sealed with consistent checksums, but learner 0's part is
  // the scheduler's state, and another part is cut in half. Files alone pass; the contents
  // do not load.
  const uint32_t learners = static_cast<uint32_t>(c.learners),
                 shards = static_cast<uint32_t>(c.shards);
  for (const int forgery : {0, 1}) {
    std::vector<actor_file_header> headers;
    for (const auto& e : good.manifest.actors) {
      auto bytes = read_file(good.path + "/" + e.file);
      REQUIRE(bytes.ok());
      auto f = decode_actor_file(byte_view(bytes->data(), bytes->size()), e.file);
      REQUIRE(f.ok());
      headers.push_back(f->header);
    }
    snapshot_manifest m = good.manifest;
    m.snapshot += 1 + static_cast<uint64_t>(forgery);
    for (auto& h : headers) h.snapshot = m.snapshot;
    std::vector<std::vector<byte_view>> parts;
    for (const auto& p : good.parts) parts.push_back({p.view()});
    if (forgery == 0) {
      parts[0] = parts[learners + shards];  // the scheduler's part as learner 0's
    } else {
      const byte_view cut = parts[learners][0];
      parts[learners] = {cut.subspan(0, cut.size() / 2)};  // shard 0's, cut
    }
    auto written = write_snapshot(root, m, headers, parts);
    REQUIRE(written.ok());
    auto loaded = load_snapshot(*written);
    REQUIRE(loaded.ok());  // the files check out
    const status st = check_snapshot_loads(*loaded);
    INFO(st.message());
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(
        st.message(),
        Catch::Contains(forgery == 0 ? "actor-00000" : "actor-0000" + std::to_string(learners)));
    // Resume falls back past it to the newest good one, and says why.
    auto choice = choose_snapshot(root, std::nullopt, check_snapshot_loads);
    REQUIRE(choice.ok());
    CHECK(choice->snapshot.manifest.snapshot == good.manifest.snapshot);
    CHECK(choice->skipped.size() == static_cast<size_t>(forgery + 1));
  }
}
