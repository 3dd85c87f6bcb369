// Chandy-Lamport snapshots of whole simulated clusters: they never change the run, a run
// restored from any of them continues bit for bit as the run that was never stopped, and bad
// snapshot directories are named, skipped, and never used.
#include <cstring>
#include <filesystem>
#include <fstream>
#include "tests/catch.hpp"

#include "checkpoint/file_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "hosts/simulation.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;
using diloco::testing::chaos_config;
using diloco::testing::fast_config;

namespace {

bool same_bits(const float_buffer& a, const float_buffer& b) {
  // memcmp takes no null pointer, even for 0 bytes (a cost-model run has no parameters)
  return a.size() == b.size() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Two results of the same run: every observable the same, bit for bit.
void require_same_run(const sim_result& a, const sim_result& b) {
  CHECK(a.trace_hash == b.trace_hash);
  CHECK(std::memcmp(&a.eval_loss, &b.eval_loss, sizeof(double)) == 0);
  CHECK(same_bits(a.params, b.params));
  CHECK(a.virtual_s == b.virtual_s);
  CHECK(a.run.tokens == b.run.tokens);
  CHECK(a.run.end_time_ns == b.run.end_time_ns);
  CHECK(a.supervisor.kills == b.supervisor.kills);
  CHECK(a.supervisor.interruptions == b.supervisor.interruptions);
  CHECK(a.supervisor.computing_chip_s == b.supervisor.computing_chip_s);
  REQUIRE(a.learners.size() == b.learners.size());
  for (size_t i = 0; i < a.learners.size(); ++i) {
    INFO("learner " << a.learners[i].learner);
    CHECK(a.learners[i].trace == b.learners[i].trace);
    CHECK(a.learners[i].steps == b.learners[i].steps);
    CHECK(a.learners[i].bytes_sent == b.learners[i].bytes_sent);
    CHECK(a.learners[i].global_hashes == b.learners[i].global_hashes);
  }
  REQUIRE(a.shards.size() == b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    INFO("shard " << i);
    CHECK(a.shards[i].trace == b.shards[i].trace);
    CHECK(a.shards[i].merges == b.shards[i].merges);
    CHECK(a.shards[i].global_hashes == b.shards[i].global_hashes);
  }
  REQUIRE(a.regionals.size() == b.regionals.size());
  for (size_t i = 0; i < a.regionals.size(); ++i) {
    INFO("regional syncer " << i);
    CHECK(a.regionals[i].trace == b.regionals[i].trace);
    CHECK(a.regionals[i].merges == b.regionals[i].merges);
  }
}

struct snapshot_run {
  sim_result result;
  std::vector<std::string> paths;  // by snapshot number - 1
};

snapshot_run run_with_snapshots(run_config c, const std::string& dir, double every_s,
                                int threads = 1) {
  c.snapshot.dir = dir;
  c.snapshot.every_s = every_s;
  c.snapshot.keep = 100;
  snapshot_run out;
  sim_options o;
  o.run_id = 42;
  o.threads = threads;
  o.on_snapshot = [&out](uint64_t n, const std::string& path, uint64_t, double) {
    CHECK(n == out.paths.size() + 1);
    out.paths.push_back(path);
  };
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  out.result = std::move(*r);
  return out;
}

result<sim_result> resume(const run_config& c, const std::string& path, int threads = 1) {
  auto snap = load_snapshot(path);
  if (!snap) return snap.error();
  sim_options o;
  o.run_id = 42;
  o.threads = threads;
  o.resume = std::make_shared<loaded_snapshot>(std::move(*snap));
  return run_simulation(c, o);
}

// Every snapshot of `original` resumes to the same run, bit for bit.
void require_each_resumes(const run_config& c, const snapshot_run& original) {
  for (size_t n = 1; n <= original.paths.size(); ++n) {
    INFO("restored from snapshot " << n << " at " << original.paths[n - 1]);
    auto restored = resume(c, original.paths[n - 1]);
    INFO((restored.ok() ? std::string() : restored.error().message()));
    REQUIRE(restored.ok());
    require_same_run(original.result, *restored);
  }
}

}  // namespace

TEST_CASE("snapshot: taking snapshots never changes the run") {
  testing::temp_dir dir;
  const run_config c = chaos_config();
  auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  auto with = run_with_snapshots(c, dir.file("snaps"), 60.0);
  CHECK(with.paths.size() >= 5);
  CHECK(with.result.snapshots.snapshots == with.paths.size());
  require_same_run(*plain, with.result);
}

TEST_CASE("snapshot: a run stopped after a snapshot and resumed, evaluated along the way") {
  // Periodic evaluations read the shards between events: never after the run stopped (its
  // actors are gone), and from the resume time on in the resumed run.
  testing::temp_dir dir;
  run_config c = chaos_config();
  c.snapshot.dir = dir.file("snaps");
  c.snapshot.every_s = 60.0;
  auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  std::vector<double> times;
  sim_options o;
  o.run_id = 42;
  o.eval_every_s = 25;
  o.on_eval = [&times](double t, double) { times.push_back(t); };
  o.stop_after_snapshot = 2;
  auto stopped = run_simulation(c, o);
  REQUIRE(stopped.ok());
  CHECK(stopped->interrupted);
  REQUIRE(!times.empty());
  CHECK(times.back() <= stopped->virtual_s);
  const size_t before = times.size();
  auto snap = load_snapshot(c.snapshot.dir + "/snapshot-000002");
  REQUIRE(snap.ok());
  sim_options r;
  r.run_id = 42;
  r.eval_every_s = 25;
  r.on_eval = o.on_eval;
  r.resume = std::make_shared<loaded_snapshot>(std::move(*snap));
  auto resumed = run_simulation(c, r);
  REQUIRE(resumed.ok());
  CHECK(resumed->trace_hash == plain->trace_hash);
  REQUIRE(times.size() > before);
  CHECK(times[before] > times[before - 1]);  // from the resume on, not again from 25 s
}

TEST_CASE("snapshot: a run restored from snapshot n continues bit-identically, for several n") {
  testing::temp_dir dir;
  const run_config c = chaos_config();
  auto original = run_with_snapshots(c, dir.file("snaps"), 70.0);
  REQUIRE(original.paths.size() >= 5);
  CHECK(original.result.supervisor.kills >= 2);
  for (size_t n : {size_t{1}, original.paths.size() / 2, original.paths.size()}) {
    INFO("restored from snapshot " << n << " at " << original.paths[n - 1]);
    auto restored = resume(c, original.paths[n - 1]);
    REQUIRE(restored.ok());
    CHECK(restored->resumed_from == n);
    CHECK(restored->events < original.result.events);  // it did not start over
    require_same_run(original.result, *restored);
  }
}

TEST_CASE("snapshot: the data-parallel baseline and the cost model restore bit-identically too") {
  testing::temp_dir dir;
  SECTION("data parallel") {
    run_config c = as_data_parallel(fast_config());
    c.token_budget = 4 * 16 * 200;
    c.inner.total_steps = c.steps_per_learner();
    auto original = run_with_snapshots(c, dir.file("dp"), 40.0);
    REQUIRE(original.paths.size() >= 2);
    auto restored = resume(c, original.paths[1]);
    REQUIRE(restored.ok());
    require_same_run(original.result, *restored);
  }
  SECTION("cost model with elastic failures") {
    run_config c = builtin_run_config();
    c.compute = compute_mode::cost;
    c.learners = 8;
    c.chips_per_learner = 4096;
    c.duration_s = 20000;
    c.interruptions.mtbi_hours = 8760;
    c.interruptions.elastic = true;
    auto original = run_with_snapshots(c, dir.file("cost"), 3000.0);
    REQUIRE(original.paths.size() >= 5);
    CHECK(original.result.supervisor.interruptions > 0);
    auto restored = resume(c, original.paths[3]);
    REQUIRE(restored.ok());
    require_same_run(original.result, *restored);
    CHECK(restored->goodput() == original.result.goodput());
  }
}

TEST_CASE("snapshot: a snapshot is refused by a run with another configuration") {
  testing::temp_dir dir;
  run_config c = fast_config(4 * 16 * 100);
  auto original = run_with_snapshots(c, dir.file("snaps"), 20.0);
  REQUIRE(!original.paths.empty());
  auto snap = load_snapshot(original.paths[0]);
  REQUIRE(snap.ok());
  sim_options o;
  o.run_id = 43;  // another run's identity
  o.resume = std::make_shared<loaded_snapshot>(std::move(*snap));
  auto r = run_simulation(c, o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("belongs to another run"));
  run_config more = c;
  more.learners = 5;  // other actors: the parts do not fit
  o.run_id = 0;
  auto r2 = run_simulation(more, o);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.error().message(), Catch::Contains("a snapshot of"));
}

TEST_CASE("snapshot: bad snapshots are named, skipped, and the newest good one is used") {
  testing::temp_dir dir;
  run_config c = fast_config(4 * 16 * 200);
  const std::string root = dir.file("snaps");
  auto original = run_with_snapshots(c, root, 20.0);
  REQUIRE(original.paths.size() >= 7);
  const auto& p = original.paths;
  namespace fs = std::filesystem;
  auto flip = [](const std::string& file, size_t at) {
    auto bytes = read_file(file);
    REQUIRE(bytes.ok());
    (*bytes)[at % bytes->size()] ^= 0x20;
    REQUIRE(write_file_atomic(file, byte_view(bytes->data(), bytes->size())).ok());
  };
  // Newest first, each broken another way; every one must be detected.
  const size_t k = p.size();
  fs::remove(p[k - 1] + "/MANIFEST");  // died while writing it
  {
    auto bytes = read_file(p[k - 2] + "/actor-00003.dlsa");
    REQUIRE(bytes.ok());
    bytes->resize(bytes->size() / 2);  // truncated
    REQUIRE(
        write_file_atomic(p[k - 2] + "/actor-00003.dlsa", byte_view(bytes->data(), bytes->size()))
            .ok());
  }
  flip(p[k - 3] + "/actor-00001.dlsa", 5000);  // a flipped bit
  fs::remove(p[k - 4] + "/actor-00005.dlsa");  // a missing actor file
  fs::copy_file(p[0] + "/actor-00002.dlsa", p[k - 5] + "/actor-00002.dlsa",
                fs::copy_options::overwrite_existing);  // another snapshot's file
  flip(p[k - 6] + "/MANIFEST", 40);                     // a corrupted manifest

  auto choice = choose_snapshot(root);
  REQUIRE(choice.ok());
  CHECK(choice->snapshot.manifest.snapshot == k - 6);  // the newest intact one
  REQUIRE(choice->skipped.size() == 6);
  const auto& why = choice->skipped;
  CHECK_THAT(why[0], Catch::Contains("MANIFEST: missing"));
  CHECK_THAT(why[1], Catch::Contains("actor-00003.dlsa") && Catch::Contains("truncated"));
  CHECK_THAT(why[2], Catch::Contains("actor-00001.dlsa") && Catch::Contains("checksum"));
  CHECK_THAT(why[3], Catch::Contains("actor-00005.dlsa: missing"));
  CHECK_THAT(why[4], Catch::Contains("actor-00002.dlsa"));
  CHECK_THAT(why[5], Catch::Contains("MANIFEST") && Catch::Contains("checksum mismatch"));
  // Inspection checks every file and blames only the damaged ones.
  for (size_t i = 0; i < 6; ++i) {
    const auto in = inspect_snapshot(p[k - 1 - i]);
    INFO("inspecting " << p[k - 1 - i]);
    CHECK_FALSE(in.ok());
    size_t bad = 0;
    for (const auto& a : in.actors) bad += a.problem.empty() ? 0 : 1;
    if (i == 0 || i == 5) {
      CHECK_FALSE(in.manifest.has_value());
      CHECK_FALSE(in.manifest_problem.empty());
    } else {
      REQUIRE(in.manifest.has_value());
      CHECK(in.actors.size() == in.manifest->actors.size());
      CHECK(bad == 1);
    }
  }
  CHECK(inspect_snapshot(p[k - 7]).ok());
  // And the fallback resumes correctly.
  auto restored = resume(c, choice->snapshot.path);
  REQUIRE(restored.ok());
  require_same_run(original.result, *restored);

  // Asking for a broken one by number is an error that says why.
  auto only = choose_snapshot(root, k - 1);  // p[k - 2], the truncated one
  REQUIRE_FALSE(only.ok());
  CHECK_THAT(only.error().message(), Catch::Contains("truncated"));
  // A directory with no snapshots.
  fs::create_directories(dir.file("empty"));
  auto none = choose_snapshot(dir.file("empty"));
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message(), Catch::Contains("holds no snapshot directories"));
}

TEST_CASE("snapshot: a manifest of another format version is refused by name") {
  testing::temp_dir dir;
  run_config c = fast_config(4 * 16 * 100);
  auto original = run_with_snapshots(c, dir.file("snaps"), 20.0);
  REQUIRE(!original.paths.empty());
  const std::string manifest = original.paths[0] + "/MANIFEST";
  auto bytes = read_file(manifest);
  REQUIRE(bytes.ok());
  (*bytes)[4] = 99;  // the frame's version field
  REQUIRE(write_file_atomic(manifest, byte_view(bytes->data(), bytes->size())).ok());
  auto snap = load_snapshot(original.paths[0]);
  REQUIRE_FALSE(snap.ok());
  CHECK_THAT(snap.error().message(),
             Catch::Contains("MANIFEST") && Catch::Contains("format version 99"));
}

TEST_CASE("snapshot: keeps the newest complete snapshots and never writes over one") {
  testing::temp_dir dir;
  run_config c = fast_config(4 * 16 * 200);
  c.snapshot.dir = dir.file("snaps");
  c.snapshot.every_s = 20.0;
  c.snapshot.keep = 2;
  sim_options o;
  std::vector<std::string> written;
  o.on_snapshot = [&](uint64_t, const std::string& path, uint64_t, double) {
    written.push_back(path);
  };
  REQUIRE(run_simulation(c, o).ok());
  REQUIRE(written.size() >= 4);
  auto listed = list_snapshots(c.snapshot.dir);
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);
  CHECK(listed->back().path == written.back());
  // Runs into the same directory write beside each other's snapshots, never over them.
  c.snapshot.dir = dir.file("shared");
  c.snapshot.keep = 100;
  std::vector<std::string> first;
  written.clear();
  REQUIRE(run_simulation(c, o).ok());
  first.swap(written);
  REQUIRE(run_simulation(c, o).ok());
  REQUIRE(written.size() == first.size());
  for (size_t i = 0; i < written.size(); ++i) CHECK(written[i] == first[i] + ".1");
  auto both = list_snapshots(c.snapshot.dir);
  REQUIRE(both.ok());
  CHECK(both->size() == 2 * first.size());
}

TEST_CASE("snapshot: on demand (the flag a signal handler sets) without changing the run") {
  testing::temp_dir dir;
  run_config c = fast_config();
  auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  c.snapshot.dir = dir.file("snaps");  // no period, no times: only on demand
  std::atomic<bool> now{true};
  sim_options o;
  std::vector<std::string> written;
  o.on_snapshot = [&](uint64_t, const std::string& path, uint64_t, double) {
    written.push_back(path);
  };
  o.snapshot_now = &now;
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  CHECK_FALSE(now.load());
  REQUIRE(written.size() == 1);
  CHECK(r->trace_hash == plain->trace_hash);
  CHECK(inspect_snapshot(written[0]).ok());
}

TEST_CASE("parallel simulation: any number of threads gives the same run, bit for bit") {
  // Failures (scripted and random), lossy links, a partition, a shard restart, a joining
  // learner: every kind of event that changes a learner's state between its steps.
  const run_config c = chaos_config();
  sim_options one;
  auto a = run_simulation(c, one);
  REQUIRE(a.ok());
  CHECK(a->supervisor.kills > 0);
  for (int threads : {2, 3}) {
    INFO(threads << " threads");
    sim_options o;
    o.threads = threads;
    auto b = run_simulation(c, o);
    REQUIRE(b.ok());
    require_same_run(*a, *b);
  }
}

TEST_CASE("parallel simulation: a snapshot taken with 2 threads resumes with 1, bit for bit") {
  testing::temp_dir dir;
  run_config c = chaos_config();
  const auto with_two = run_with_snapshots(c, dir.path().string(), 100.0, 2);
  REQUIRE(with_two.paths.size() >= 2);
  auto resumed = resume(c, with_two.paths[1], 1);
  REQUIRE(resumed.ok());
  require_same_run(with_two.result, *resumed);
  auto resumed_three = resume(c, with_two.paths[0], 3);
  REQUIRE(resumed_three.ok());
  require_same_run(with_two.result, *resumed_three);
}

TEST_CASE("snapshot: adaptive inner steps resume bit-identically across a change of H") {
  testing::temp_dir dir;
  const run_config c = testing::adaptive_config();
  auto original = run_with_snapshots(c, dir.file("snaps"), 50.0);
  // Due every 50 s; a snapshot's markers wait behind the payloads on the slow links, so some
  // are skipped: those taken span the run, before, while and after H is up.
  REQUIRE(original.paths.size() >= 5);
  require_each_resumes(c, original);
}

TEST_CASE("snapshot: regional syncers, one restarted mid-run, resume bit-identically") {
  testing::temp_dir dir;
  run_config c = testing::regional_config();
  c.regional_restarts = {regional_restart_event{"eu", 150.0, 60.0}};
  auto original = run_with_snapshots(c, dir.file("snaps"), 60.0);
  // Before, during and after the regional syncer's outage.
  REQUIRE(original.paths.size() >= 5);
  require_each_resumes(c, original);
}

TEST_CASE("snapshot: regional syncers with adaptive inner steps resume bit-identically") {
  testing::temp_dir dir;
  const run_config c = testing::regional_adaptive_config();
  auto original = run_with_snapshots(c, dir.file("snaps"), 60.0);
  // Before, while and after eu's wide-area link is slow (H up, then down).
  REQUIRE(original.paths.size() >= 4);
  require_each_resumes(c, original);
}
