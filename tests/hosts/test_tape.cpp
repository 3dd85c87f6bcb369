// Replay tapes: recording never changes the run; replaying every actor from the tape matches
// every send; a deliberate nondeterminism is pinpointed; --until dumps the same state every
// time; malformed and truncated tapes are errors with their position.
#include <cstring>
#include <filesystem>
#include <random>
#include <tuple>
#include "tests/catch.hpp"

#include "base/checksum.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "hosts/simulation.hpp"
#include "protocol/wire.hpp"
#include "runtime/env.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;
using diloco::testing::chaos_config;
using diloco::testing::fast_config;

namespace {

// Runs `c` recording to `path`; returns the run.
sim_result record(const run_config& c, const std::string& path, sim_options o = {}) {
  auto rec = tape_recorder::create(path, make_tape_header(c, 7, "", true));
  REQUIRE(rec.ok());
  o.tape = *rec;
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  REQUIRE((*rec)->close().ok());
  return std::move(*r);
}

// Runs `c` in real time (two threads) recording to `path`.
void record_realtime(const run_config& c, const std::string& path) {
  auto rec = tape_recorder::create(path, make_tape_header(c, 9, "", false));
  REQUIRE(rec.ok());
  realtime_options o;
  o.tape = *rec;
  o.threads = 2;
  REQUIRE(run_realtime(c, o).ok());
  REQUIRE((*rec)->close().ok());
}

tape load(const std::string& path) {
  auto t = read_tape(path);
  REQUIRE(t.ok());
  return std::move(*t);
}

uint64_t count(const tape& t, tape_kind k) {
  uint64_t n = 0;
  for (const auto& e : t.events) n += e.kind == k ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("tape: recording never changes the run, and every actor replays to the same sends") {
  testing::temp_dir dir;
  const run_config c = chaos_config();
  auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  const auto r = record(c, dir.file("run.tape"));
  CHECK(r.trace_hash == plain->trace_hash);
  CHECK(r.eval_loss == plain->eval_loss);

  const tape t = load(dir.file("run.tape"));
  CHECK(t.complete);
  CHECK(t.header.roles.size() == 5 + 2 + 4);
  CHECK(count(t, tape_kind::start) == t.header.roles.size());
  CHECK(count(t, tape_kind::timer) > 100);
  CHECK(count(t, tape_kind::dropped) > 0);  // the killed learner's slot dropped messages
  const uint64_t sends = count(t, tape_kind::sent);
  CHECK(sends > 100);
  // Every payload stored once: fewer payloads than inputs, blobs fewer than payloads.
  CHECK(t.payloads.size() < t.events.size() - sends);
  CHECK(!t.blobs.empty());

  auto all = replay_tape(c, t);
  REQUIRE(all.ok());
  INFO((all->divergence ? all->divergence->what : "no divergence"));
  CHECK_FALSE(all->divergence.has_value());
  CHECK(all->inputs == t.events.size() - sends);
  CHECK(all->sends_checked == sends);
  CHECK(all->actors.size() == t.header.roles.size());
  // One actor alone, from its own inputs.
  replay_options one;
  one.actor = 4;  // shard 0
  auto shard = replay_tape(c, t, one);
  REQUIRE(shard.ok());
  CHECK_FALSE(shard->divergence.has_value());
  uint64_t shard_sends = 0;
  for (const auto& e : t.events) shard_sends += e.kind == tape_kind::sent && e.actor == 4;
  CHECK(shard->sends_checked == shard_sends);
}

TEST_CASE("tape: replay pinpoints a deliberate nondeterminism") {
  testing::temp_dir dir;
  const run_config c = fast_config();
  record(c, dir.file("run.tape"));
  const tape t = load(dir.file("run.tape"));

  // Learner 1 perturbs a weight from std::random_device after its step 100: not a function of
  // (config, seed). Replay must find it in learner 1, at its first send that depends on it.
  run_config faulty = c;
  faulty.debug.nondeterministic_learner = 1;
  faulty.debug.nondeterministic_step = 100;
  auto r = replay_tape(faulty, t);
  REQUIRE(r.ok());
  REQUIRE(r->divergence.has_value());
  const auto& d = *r->divergence;
  CHECK(d.actor == 1);
  CHECK_THAT(d.what, Catch::Contains("outer_gradient_msg") || Catch::Contains("progress_msg"));
  // The input being handled is a step at or after step 100 of that learner.
  REQUIRE(d.input_seq < t.events.size());
  const tape_event& in = t.events[d.input_seq];
  CHECK(in.actor == 1);
  CHECK(in.tick / t.header.tick_scale >= to_ns(100 * c.speed.step_time_s));
  // Every other actor, replayed alone, still matches: the fault is in learner 1 only.
  for (int64_t a : {0, 2, 4}) {
    replay_options o;
    o.actor = a;
    auto other = replay_tape(faulty, t, o);
    REQUIRE(other.ok());
    CHECK_FALSE(other->divergence.has_value());
  }
  // And the recorded configuration replays clean.
  auto clean = replay_tape(c, t);
  REQUIRE(clean.ok());
  CHECK_FALSE(clean->divergence.has_value());
}

TEST_CASE("tape: replay catches an input altered on the tape, its digest recomputed or not") {
  testing::temp_dir dir;
  const run_config c = fast_config();
  record(c, dir.file("run.tape"));
  const tape clean = load(dir.file("run.tape"));
  auto all = replay_tape(c, clean);
  REQUIRE(all.ok());
  CHECK_FALSE(all->divergence.has_value());
  // Without faults every send arrives once: each input from an actor is matched to its send.
  CHECK(all->inputs_matched == count(clean, tape_kind::sent));

  // Two outer gradients shard 0 (actor 4) received, from learners 0 and 1.
  size_t from0 = SIZE_MAX, from1 = SIZE_MAX;
  for (size_t i = 0; i < clean.events.size(); ++i) {
    const tape_event& e = clean.events[i];
    if (e.actor != 4 || e.kind != tape_kind::message ||
        wire_tag_name(e.type) != "outer_gradient_msg")
      continue;
    if (e.peer == 0 && from0 == SIZE_MAX) from0 = i;
    if (e.peer == 1 && from1 == SIZE_MAX && from0 != SIZE_MAX) from1 = i;
  }
  REQUIRE(from1 != SIZE_MAX);
  REQUIRE(clean.events[from0].payload != clean.events[from1].payload);
  for (const bool rekeyed : {false, true}) {
    CAPTURE(rekeyed);
    // Learner 1's delta replaced by learner 0's, with (or without) the digest recomputed to
    // match the new payload.
    tape forged = clean;
    tape_event& e = forged.events[from1];
    e.payload = clean.events[from0].payload;
    if (rekeyed) e.digest = clean.events[from0].digest;
    auto r = replay_tape(c, forged);
    REQUIRE(r.ok());
    REQUIRE(r->divergence.has_value());
    CHECK(r->divergence->actor == 4);
    CHECK(r->divergence->input_event == from1);
    CHECK_THAT(r->divergence->what, Catch::Contains(rekeyed ? "is not what that actor sent"
                                                            : "does not match the digest"));
  }
}

TEST_CASE("tape: --until stops before an actor's input and dumps the same state every time") {
  testing::temp_dir dir;
  const run_config c = fast_config();
  record(c, dir.file("run.tape"));
  const tape t = load(dir.file("run.tape"));
  replay_options o;
  o.actor = 2;
  o.until = 50;
  int64_t seen = -1;
  o.at_until = [&](const tape_event& e) { seen = static_cast<int64_t>(e.seq); };
  auto a = replay_tape(c, t, o);
  auto b = replay_tape(c, t, o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->stopped_at_until);
  CHECK(a->inputs == 50);
  CHECK_FALSE(a->divergence.has_value());
  CHECK(seen >= 0);
  CHECK(!a->state.empty());
  CHECK(a->state == b->state);
  CHECK_THAT(a->summary, Catch::Contains("step"));
  o.until = 51;
  auto later = replay_tape(c, t, o);
  REQUIRE(later.ok());
  CHECK(later->state != a->state);
  // Past the end, or without an actor, is refused.
  o.until = 1'000'000;
  CHECK_FALSE(replay_tape(c, t, o).ok());
  replay_options no_actor;
  no_actor.until = 3;
  CHECK_FALSE(replay_tape(c, t, no_actor).ok());
}

TEST_CASE("tape: a run resumed from a snapshot records a tape that replays") {
  testing::temp_dir dir;
  run_config c = fast_config();
  c.snapshot.dir = dir.file("snaps");
  c.snapshot.at_s = {150.0};
  REQUIRE(run_simulation(c).ok());
  auto snap = choose_snapshot(c.snapshot.dir);
  REQUIRE(snap.ok());
  sim_options o;
  o.resume = std::make_shared<loaded_snapshot>(std::move(snap->snapshot));
  c.snapshot = snapshot_config{};
  record(c, dir.file("resumed.tape"), o);
  const tape t = load(dir.file("resumed.tape"));
  CHECK(t.events.front().tick > 0);  // it starts at the cut
  auto r = replay_tape(c, t);
  REQUIRE(r.ok());
  CHECK_FALSE(r->divergence.has_value());
  CHECK(r->sends_checked == count(t, tape_kind::sent));
}

TEST_CASE("tape: malformed and truncated tapes are errors with their position, never crashes") {
  testing::temp_dir dir;
  run_config c = fast_config(4 * 16 * 100);
  const std::string path = dir.file("run.tape");
  record(c, path);
  auto bytes = read_file(path);
  REQUIRE(bytes.ok());
  const std::vector<uint8_t> good = *bytes;
  auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
    const std::string p = dir.file(name);
    REQUIRE(write_file_atomic(p, byte_view(b.data(), b.size())).ok());
    return p;
  };

  // Cut anywhere: an error naming the chunk and byte; with allow_truncated, the prefix.
  std::mt19937_64 pick(5);
  for (int i = 0; i < 40; ++i) {
    const size_t cut = i == 0 ? 10 : pick() % good.size();
    const auto p = write("cut.tape", std::vector<uint8_t>(good.begin(), good.begin() + cut));
    auto t = read_tape(p);
    INFO("cut at " << cut);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message(), Catch::Contains("byte"));
    auto partial = read_tape(p, true);
    if (partial.ok()) {
      CHECK_FALSE(partial->complete);
      CHECK_FALSE(partial->truncation.empty());
      // What is there replays as far as it goes.
      auto r = replay_tape(c, *partial);
      REQUIRE(r.ok());
      CHECK_FALSE(r->divergence.has_value());
    }
  }
  // A flipped bit anywhere after the first chunk's header: the chunk's checksum or frame.
  for (int i = 0; i < 40; ++i) {
    auto bad = good;
    const size_t at = 24 + pick() % (good.size() - 24);
    bad[at] ^= 0x10;
    auto t = read_tape(write("flip.tape", bad), true);
    INFO("flipped byte " << at);
    if (t.ok()) {
      // Only a length field flip can make a prefix look truncated: then it says so.
      CHECK_FALSE(t->truncation.empty());
    } else {
      CHECK_THAT(t.error().message(), Catch::Contains("chunk"));
    }
  }
  // Not a tape at all, or empty.
  CHECK_FALSE(read_tape(write("empty.tape", {})).ok());
  std::vector<uint8_t> garbage(4096);
  for (auto& g : garbage) g = static_cast<uint8_t>(pick());
  auto g = read_tape(write("garbage.tape", garbage));
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error().message(), Catch::Contains("chunk 0 at byte 0"));
  // Bytes after the end chunk: damage, not a cut, also when a cut would be accepted.
  auto appended = good;
  appended.insert(appended.end(), {'D', 'L', 'T', 'P', 1, 0, 0, 0, 9, 9});
  for (const bool partial : {false, true}) {
    auto t = read_tape(write("appended.tape", appended), partial);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message(), Catch::Contains("bytes after the end chunk"));
  }
  // The header chunk's length field damaged to run past the end while chunks follow: damage.
  auto long_header = good;
  long_header[8 + 3] ^= 0x40;
  for (const bool partial : {false, true}) {
    auto t = read_tape(write("length.tape", long_header), partial);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message(), Catch::Contains("the tape is damaged, not cut"));
  }
  // A payload or blob stored under a key that is not its checksum (tampered, then resealed):
  // refused by name, never replayed as recorded.
  for (const bool blob : {false, true}) {
    const std::string forged = dir.file(blob ? "forged-blob.tape" : "forged-payload.tape");
    auto w = tape_writer::create(forged, make_tape_header(c, 1, "", true));
    REQUIRE(w.ok());
    if (blob) {
      (*w)->add_blob(42, {1, 2, 3});
    } else {
      (*w)->add_payload(42, {1, 2, 3});
    }
    REQUIRE((*w)->close().ok());
    auto t = read_tape(forged);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message(), Catch::Contains(blob ? "a blob does not match its key 42"
                                                         : "a payload does not match its key 42"));
  }
  // A tape is never written over.
  CHECK_FALSE(tape_recorder::create(path, make_tape_header(c, 1, "", true)).ok());
}

TEST_CASE("tape: packed events round-trip exactly, and damaged ones resealed are refused") {
  testing::temp_dir dir;
  const run_config c = fast_config(4 * 16 * 100);
  const tape_header header = make_tape_header(c, 1, "", false);
  const uint64_t key = checksum64(nullptr, 0);  // the one payload: empty
  std::mt19937_64 pick(11);
  std::vector<tape_event> events;
  uint64_t seq = 1000;
  for (int i = 0; i < 3000; ++i) {
    tape_event e;
    e.seq = seq += 1 + pick() % 3;
    e.actor = static_cast<uint32_t>(pick() % header.roles.size());
    e.kind = static_cast<tape_kind>(pick() % 7);
    // Extremes and ordinary values: every field must come back as it was.
    const int64_t extremes[] = {INT64_MIN, INT64_MAX, -1, 0, 1};
    e.tick = i % 50 == 0 ? extremes[pick() % 5] : static_cast<int64_t>(pick() >> 4);
    if (e.kind == tape_kind::read) {
      e.type = static_cast<int32_t>(pick() % 2);
    } else {
      e.type = static_cast<int32_t>(pick() % 60);
      e.peer = static_cast<uint32_t>(pick() % header.roles.size());
      e.sent_ns = i % 70 == 0 ? INT64_MIN : static_cast<int64_t>(pick() >> 3);
      e.digest = pick();
      if (e.kind != tape_kind::sent) e.payload = key;
      e.clock.resize(pick() % header.roles.size());
      for (auto& x : e.clock) x = i % 90 == 0 ? UINT64_MAX : pick() % 100000;
    }
    events.push_back(e);
  }
  const std::string path = dir.file("packed.tape");
  {
    auto w = tape_writer::create(path, header);
    REQUIRE(w.ok());
    (*w)->add_payload(key, {});
    for (const auto& e : events) (*w)->add_event(e);
    REQUIRE((*w)->close().ok());
  }
  auto t = read_tape(path);
  REQUIRE(t.ok());
  REQUIRE(t->events.size() == events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const tape_event &a = events[i], &b = t->events[i];
    INFO("event " << i);
    CHECK(std::tie(a.seq, a.actor, a.kind, a.type, a.tick, a.peer, a.sent_ns, a.digest, a.payload,
                   a.clock) == std::tie(b.seq, b.actor, b.kind, b.type, b.tick, b.peer, b.sent_ns,
                                        b.digest, b.payload, b.clock));
  }

  // The events chunk damaged and resealed with a good checksum: refused with its position (or,
  // where the damage happens to make other valid events, read), never a crash or a huge
  // allocation.
  auto bytes = read_file(path);
  REQUIRE(bytes.ok());
  const std::vector<uint8_t>& good = *bytes;
  // Chunks: header, payloads, events, end.
  std::vector<std::pair<size_t, size_t>> chunks;  // offset, size
  for (size_t at = 0; at < good.size();) {
    uint64_t length = 0;
    std::memcpy(&length, good.data() + at + 8, 8);
    chunks.emplace_back(at, static_cast<size_t>(24 + length));
    at += static_cast<size_t>(24 + length);
  }
  REQUIRE(chunks.size() == 4);
  const auto [ev_at, ev_size] = chunks[2];
  REQUIRE(good[ev_at + 24] == 3);  // the events chunk's kind
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> body(good.begin() + static_cast<std::ptrdiff_t>(ev_at + 24),
                              good.begin() + static_cast<std::ptrdiff_t>(ev_at + ev_size));
    const int flips = 1 + static_cast<int>(pick() % 4);
    for (int f = 0; f < flips; ++f)
      body[1 + pick() % (body.size() - 1)] ^= uint8_t(1 + pick() % 255);
    if (i % 10 == 0) body.resize(1 + pick() % (body.size() - 1));  // cut inside
    const auto frame = make_frame({'D', 'L', 'T', 'P'}, tape_format_version, body);
    std::vector<uint8_t> forged(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(ev_at));
    forged.insert(forged.end(), frame.begin(), frame.end());
    forged.insert(forged.end(), good.begin() + static_cast<std::ptrdiff_t>(chunks[3].first),
                  good.end());
    const std::string p = dir.file("resealed.tape");
    REQUIRE(write_file_atomic(p, byte_view(forged.data(), forged.size())).ok());
    auto r = read_tape(p);
    INFO("case " << i);
    if (!r.ok()) {
      ++refused;
      CHECK_THAT(r.error().message(), Catch::Contains("chunk 2 at byte"));
    }
  }
  CHECK(refused > 200);
}

TEST_CASE("tape: a real-time run replays exactly, its clock reads given back from the tape") {
  testing::temp_dir dir;
  const run_config c = fast_config();
  const std::string path = dir.file("rt.tape");
  record_realtime(c, path);
  const tape t = load(path);
  CHECK_FALSE(t.header.virtual_time);
  CHECK(count(t, tape_kind::read) > 0);
  CHECK(count(t, tape_kind::start) == t.header.roles.size());
  auto replayed = replay_tape(c, t);
  REQUIRE(replayed.ok());
  INFO((replayed->divergence ? replayed->divergence->what : std::string()));
  CHECK_FALSE(replayed->divergence);
  CHECK(replayed->sends_checked == count(t, tape_kind::sent));
  CHECK(replayed->reads_given == count(t, tape_kind::read));

  // Given another clock, a learner computes another schedule: a read is what replay checks.
  tape shifted = t;
  for (auto& e : shifted.events) {
    if (e.kind == tape_kind::read && e.actor == 0) e.tick += 1'000'000'000;
  }
  auto off = replay_tape(c, shifted);
  REQUIRE(off.ok());
  REQUIRE(off->divergence);
  CHECK(off->divergence->actor == 0);
}

TEST_CASE("tape: a deployed run's tapes merge into one run, or are refused by name") {
  // Four "nodes" recorded as one run would be: each tape keeps only its actors' events.
  const run_config c = fast_config();
  testing::temp_dir dir;
  const std::string path = dir.file("whole.tape");
  record_realtime(c, path);
  const tape whole = load(path);
  auto part = [&](const std::string& node, uint32_t incarnation, std::vector<uint32_t> actors) {
    tape t = whole;
    t.path = node + "." + std::to_string(incarnation) + ".tape";
    t.header.node = node;
    t.header.incarnation = incarnation;
    t.header.recorded = actors;
    t.events.clear();
    for (const auto& e : whole.events) {
      if (t.header.records(e.actor)) t.events.push_back(e);
    }
    return t;
  };
  const auto& ids_of = whole.header.roles;
  std::vector<uint32_t> service;
  for (uint32_t a = 4; a < ids_of.size(); ++a) service.push_back(a);
  auto nodes = [&] {
    return std::vector<tape>{part("a", 0, service), part("b", 0, {0, 1}), part("c", 0, {2, 3})};
  };

  SECTION("every node's tape: one run that replays as the whole tape does") {
    auto merged = merge_tapes(nodes());
    REQUIRE(merged.ok());
    CHECK(merged->segments.size() == 3);
    CHECK(merged->events.size() == whole.events.size());
    CHECK(merged->header.recorded.empty());  // every actor
    auto r = replay_tape(c, *merged);
    REQUIRE(r.ok());
    CHECK_FALSE(r->divergence);
    CHECK(r->sends_checked == count(whole, tape_kind::sent));
  }
  SECTION("some nodes' tapes: only their actors") {
    auto merged = merge_tapes({part("b", 0, {0, 1}), part("c", 0, {2, 3})});
    REQUIRE(merged.ok());
    CHECK(merged->header.recorded == std::vector<uint32_t>{0, 1, 2, 3});
    replay_options ro;
    ro.actor = 5;
    auto r = replay_tape(c, *merged, ro);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("no tape given records it"));
  }
  SECTION("the same process twice") {
    auto v = nodes();
    v.push_back(part("c", 0, {2, 3}));
    auto merged = merge_tapes(std::move(v));
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(merged.error().message(), Catch::Contains("record the same process"));
  }
  SECTION("a process of a node missing between two others") {
    auto v = nodes();
    v.push_back(part("c", 2, {2, 3}));
    auto merged = merge_tapes(std::move(v));
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(merged.error().message(),
               Catch::Contains("node c: the tape of process 1 is missing"));
  }
  SECTION("another run's tape") {
    auto v = nodes();
    v[1].header.run_id += 1;
    auto merged = merge_tapes(std::move(v));
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(merged.error().message(), Catch::Contains("is of another run"));
  }
  SECTION("an actor recorded on two nodes") {
    auto v = nodes();
    v.push_back(part("d", 0, {3}));
    auto merged = merge_tapes(std::move(v));
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(merged.error().message(), Catch::Contains("actor 3 is recorded on two nodes"));
  }
  SECTION("a cut tape: taken when its node's next process follows, or with --partial") {
    auto v = nodes();
    v[2].complete = false;
    v[2].truncation = "c.0.tape: cut";
    auto refused = merge_tapes(v);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message(), Catch::Contains("--partial"));
    CHECK(merge_tapes(v, true).ok());
    v.push_back(part("c", 1, {2, 3}));
    v.back().events.clear();
    auto merged = merge_tapes(v);
    REQUIRE(merged.ok());
    CHECK(merged->segments.size() == 4);
    CHECK(merged->segments[2].cut);
    CHECK(merged->complete);
  }
}

namespace {

// Records `c` on a rotating tape at `path` (volumes of `volume_bytes`, the newest `keep` kept);
// returns the run and the number of the last volume.
std::pair<sim_result, uint32_t> record_rotating(const run_config& c, const std::string& path,
                                                uint64_t volume_bytes, uint32_t keep) {
  auto rec = tape_recorder::create(path, make_tape_header(c, 7, "", true));
  REQUIRE(rec.ok());
  (*rec)->rotate(volume_bytes, keep);
  sim_options o;
  o.tape = *rec;
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  REQUIRE((*rec)->close().ok());
  CHECK((*rec)->checkpoints_missed() == 0);
  return {std::move(*r), (*rec)->volume()};
}

std::vector<tape> load_volumes(const std::string& path, uint32_t from, uint32_t to) {
  std::vector<tape> v;
  for (uint32_t k = from; k <= to; ++k) {
    const std::string p =
        k == 0 ? path : path.substr(0, path.size() - 5) + ".v" + std::to_string(k) + ".tape";
    v.push_back(load(p));
  }
  return v;
}

}  // namespace

TEST_CASE("tape: a rotating tape keeps its newest volumes, and replay begins at any of them") {
  testing::temp_dir dir;
  const run_config c = fast_config(4 * 16 * 1800);  // long enough for several volumes
  const auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  // Volumes this small rotate at twice their checkpoints' size (a volume holds at least as
  // much history as checkpoints).
  constexpr uint64_t volume = 16 << 10;
  const std::string all = dir.file("all.tape");
  const auto [run, last] = record_rotating(c, all, volume, 0);
  // Recording with checkpoints changes nothing in the run.
  CHECK(run.trace_hash == plain->trace_hash);
  REQUIRE(last >= 3);

  SECTION("every volume: one history, each checkpoint's state checked against the replay") {
    auto merged = merge_tapes(load_volumes(all, 0, last));
    REQUIRE(merged.ok());
    CHECK(merged->volumes == last + 1);
    auto r = replay_tape(c, *merged);
    REQUIRE(r.ok());
    CHECK_FALSE(r->divergence);
    CHECK(r->sends_checked == count(*merged, tape_kind::sent));
    // Every actor that had an input after a volume began was checkpointed there.
    CHECK(r->checkpoints_checked == count(*merged, tape_kind::checkpoint));
    CHECK(r->checkpoints_checked >= last * 3);
  }
  SECTION("the newest volumes alone replay, each actor from its checkpoint") {
    auto window = merge_tapes(load_volumes(all, last - 1, last));
    REQUIRE(window.ok());
    CHECK(window->first_volume == last - 1);
    REQUIRE_FALSE(window->events.empty());
    for (uint32_t a = 0; a < window->header.roles.size(); ++a) {
      const auto first = std::find_if(window->events.begin(), window->events.end(),
                                      [a](const tape_event& e) { return e.actor == a; });
      if (first != window->events.end()) CHECK(first->kind == tape_kind::checkpoint);
    }
    auto r = replay_tape(c, *window);
    REQUIRE(r.ok());
    CHECK_FALSE(r->divergence);
    CHECK(r->sends_checked == count(*window, tape_kind::sent));
    // A nondeterminism inside the window is found in the learner that has it.
    run_config faulty = c;
    faulty.debug.nondeterministic_learner = 1;
    // A step inside the window: near the end of learner 1's run.
    faulty.debug.nondeterministic_step = static_cast<int64_t>(run.learners.at(1).steps) - 20;
    auto f = replay_tape(faulty, *window);
    REQUIRE(f.ok());
    REQUIRE(f->divergence);
    CHECK(f->divergence->actor == 1);
  }
  SECTION("a missing or repeated volume is refused by name") {
    auto gap = load_volumes(all, 0, 2);
    gap.erase(gap.begin() + 1);
    auto refused = merge_tapes(std::move(gap));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message(), Catch::Contains("volume 1 is missing"));
    auto twice = load_volumes(all, 1, 2);
    twice.push_back(twice.front());
    refused = merge_tapes(std::move(twice));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message(), Catch::Contains("record the same process (volume 1)"));
  }
  SECTION("a recording that keeps two volumes leaves two, the same as the unbounded one's") {
    const std::string kept = dir.file("kept.tape");
    const auto [again, newest] = record_rotating(c, kept, volume, 2);
    CHECK(newest == last);
    CHECK(again.trace_hash == plain->trace_hash);
    size_t files = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path()))
      files += f.path().filename().string().rfind("kept", 0) == 0 ? 1 : 0;
    CHECK(files == 2);
    auto window = merge_tapes(load_volumes(kept, newest - 1, newest));
    REQUIRE(window.ok());
    auto reference = merge_tapes(load_volumes(all, last - 1, last));
    REQUIRE(reference.ok());
    CHECK(window->events.size() == reference->events.size());
    auto r = replay_tape(c, *window);
    REQUIRE(r.ok());
    CHECK_FALSE(r->divergence);
  }
}

namespace {

// Records `c` to `path`, replays every actor from the tape (no divergence, every send checked)
// and returns the tape.
tape record_and_replay(const run_config& c, const std::string& path) {
  record(c, path);
  tape t = load(path);
  CHECK(t.complete);
  auto all = replay_tape(c, t);
  REQUIRE(all.ok());
  INFO((all->divergence ? all->divergence->what : "no divergence"));
  CHECK_FALSE(all->divergence.has_value());
  CHECK(all->sends_checked == count(t, tape_kind::sent));
  return t;
}

// Replays `actor` alone from its inputs on `t`: no divergence, each of its sends on the tape
// checked. How many there are.
uint64_t replay_alone(const run_config& c, const tape& t, int64_t actor) {
  replay_options one;
  one.actor = actor;
  auto r = replay_tape(c, t, one);
  REQUIRE(r.ok());
  CHECK_FALSE(r->divergence.has_value());
  uint64_t sends = 0;
  for (const auto& e : t.events)
    sends += e.kind == tape_kind::sent && static_cast<int64_t>(e.actor) == actor;
  CHECK(r->sends_checked == sends);
  return sends;
}

}  // namespace

TEST_CASE(
    "tape: a run with adaptive inner steps replays, its schedule changes and pace reports too") {
  testing::temp_dir dir;
  const run_config c = testing::adaptive_config();
  const tape t = record_and_replay(c, dir.file("adaptive.tape"));
  // The scheduler alone, from its inputs (joins and pace reports): its changes of H are sends,
  // one schedule per join and one per learner slot at each change (the test's run changes H).
  const uint64_t sends = replay_alone(c, t, actor_ids_of(c).scheduler());
  CHECK(sends > static_cast<uint64_t>(c.learners));
}

TEST_CASE(
    "tape: regional syncers under adaptive inner steps replay, their pace reports and schedules "
    "too") {
  testing::temp_dir dir;
  const run_config c = testing::regional_adaptive_config();
  const tape t = record_and_replay(c, dir.file("regional.tape"));
  // eu's regional syncer alone, from its inputs (its learners' deltas, the shards' answers, the
  // scheduler's schedules): its merged sends and pace reports are the same.
  CHECK(replay_alone(c, t, actor_ids_of(c).regional(0)) > 0);
}
