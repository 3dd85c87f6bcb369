#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include "tests/catch.hpp"

#include "base/checksum.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "checkpoint/model_file.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "protocol/persist.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

namespace {
std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
}  // namespace

TEST_CASE("checkpoint: atomic writes replace the whole file and leave no temporary behind") {
  testing::temp_dir dir;
  const auto path = dir.file("f.bin");
  auto a = bytes_of("first version");
  REQUIRE(write_file_atomic(path, byte_view(a.data(), a.size())).ok());
  auto b = bytes_of("second, longer version of the file");
  REQUIRE(write_file_atomic(path, byte_view(b.data(), b.size())).ok());
  auto back = read_file(path);
  REQUIRE(back.ok());
  CHECK(*back == b);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  CHECK(read_file(dir.file("missing")).error().code() == errc::not_found);
  // The same bytes mapped, and read where mapping is off; the same errors.
  for (bool mapped : {true, false}) {
    set_file_mapping(mapped);
    auto whole = map_whole_file(path);
    auto none = map_whole_file(dir.file("missing"));
    auto not_regular = map_whole_file(dir.path().string());
    set_file_mapping(true);
    REQUIRE(whole.ok());
    CHECK(std::vector<uint8_t>(whole->view().begin(), whole->view().end()) == b);
    REQUIRE_FALSE(none.ok());
    CHECK(none.error().code() == errc::not_found);
    CHECK_THAT(none.error().message(), Catch::Contains("missing: cannot open"));
    REQUIRE_FALSE(not_regular.ok());
    CHECK_THAT(not_regular.error().message(), Catch::Contains("not a regular file"));
  }
  CHECK_FALSE(write_file_atomic(dir.file("no/such/dir/f"), byte_view(a.data(), a.size())).ok());
}

TEST_CASE("checkpoint: frames detect truncation, corruption, foreign files and versions") {
  const auto payload = bytes_of("the payload of a frame");
  const auto frame = make_frame({'T', 'E', 'S', 'T'}, 3, byte_view(payload.data(), payload.size()));
  auto ok = open_frame(byte_view(frame.data(), frame.size()), {'T', 'E', 'S', 'T'}, 3, "f");
  REQUIRE(ok.ok());
  CHECK(std::memcmp(ok->data(), payload.data(), payload.size()) == 0);
  for (size_t cut = 0; cut < frame.size(); ++cut) {
    auto r = open_frame(byte_view(frame.data(), cut), {'T', 'E', 'S', 'T'}, 3, "f");
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.error().code() == errc::corrupt_data);
  }
  for (size_t at = 0; at < frame.size(); ++at) {
    auto bad = frame;
    bad[at] ^= 0x40;
    REQUIRE_FALSE(open_frame(byte_view(bad.data(), bad.size()), {'T', 'E', 'S', 'T'}, 3, "f").ok());
  }
  CHECK(open_frame(byte_view(frame.data(), frame.size()), {'O', 'T', 'H', 'R'}, 3, "f")
            .error()
            .message()
            .find("magic") != std::string::npos);
  CHECK(open_frame(byte_view(frame.data(), frame.size()), {'T', 'E', 'S', 'T'}, 4, "f")
            .error()
            .message()
            .find("version 3") != std::string::npos);
}

TEST_CASE("checkpoint: a model file round-trips exactly and bad ones are named") {
  testing::temp_dir dir;
  model_config c;
  c.hidden = 24;
  c.embed_dim = 6;
  mlp_lm m(c);
  float_buffer p(m.layout().buffer_floats());
  m.init(p, 5);
  const auto path = dir.file("model.dlmd");
  REQUIRE(save_model(path, c, p).ok());
  auto back = load_model(path);
  REQUIRE(back.ok());
  CHECK(back->config.hidden == 24);
  CHECK(back->config.embed_dim == 6);
  REQUIRE(back->params.size() == p.size());
  CHECK(std::memcmp(back->params.data(), p.data(), p.size() * 4) == 0);

  auto raw = read_file(path);
  REQUIRE(raw.ok());
  std::vector<uint8_t> cut(raw->begin(), raw->begin() + static_cast<long>(raw->size() / 2));
  REQUIRE(write_file_atomic(dir.file("cut.dlmd"), byte_view(cut.data(), cut.size())).ok());
  auto r = load_model(dir.file("cut.dlmd"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("cut.dlmd") != std::string::npos);
  CHECK(r.error().message().find("truncated") != std::string::npos);
}

TEST_CASE("checkpoint: a safetensors model round-trips with its names and shapes") {
  testing::temp_dir dir;
  param_layout layout;
  layout.add("embed.weight", 5, 3, tensor_role::embedding, 0);
  layout.add("out.bias", 1, 4, tensor_role::bias, 1);
  layout.add("conv.weight", 2, 12, tensor_role::weight, 1);
  float_buffer params(layout.buffer_floats());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {4}, {2, 3, 2, 2}};
  const auto path = dir.file("m.safetensors");
  REQUIRE(is_safetensors_path(path));
  CHECK_FALSE(is_safetensors_path(dir.file("m.dlmd")));
  REQUIRE(save_safetensors(path, layout_tensors(layout, params, shapes), {{"producer", "diloco"}})
              .ok());
  auto back = load_safetensors(path);
  REQUIRE(back.ok());
  REQUIRE(back->tensors.size() == 3);
  CHECK(back->metadata.at("producer") == "diloco");
  for (size_t i = 0; i < 3; ++i) {
    const auto& e = back->tensors[i];
    const tensor_info& t = layout.at(i);
    CHECK(e.name == t.name);
    CHECK(e.shape == shapes[i]);
    REQUIRE(e.floats == t.size());
    CHECK(std::memcmp(back->data.data() + e.offset, params.data() + t.offset,
                      t.size() * sizeof(float)) == 0);
  }
  // The file itself: an 8-byte length, then JSON, the data 8-byte aligned.
  auto raw = read_file(path);
  REQUIRE(raw.ok());
  uint64_t n = 0;
  std::memcpy(&n, raw->data(), 8);
  CHECK((8 + n) % 8 == 0);
  CHECK(raw->size() == 8 + n + layout.param_count() * sizeof(float));

  // Shapes that do not hold the data, and damaged files, are named.
  auto wrong = layout_tensors(layout, params, {{5, 3}, {5}, {2, 3, 2, 2}});
  auto refused = save_safetensors(dir.file("w.safetensors"), wrong, {});
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("out.bias"));
  auto cut = *raw;
  cut.resize(cut.size() - 4);
  REQUIRE(write_file_atomic(dir.file("cut.safetensors"), byte_view(cut.data(), cut.size())).ok());
  auto truncated = load_safetensors(dir.file("cut.safetensors"));
  REQUIRE_FALSE(truncated.ok());
  CHECK_THAT(truncated.error().message(), Catch::Contains("cut.safetensors"));
  auto huge = *raw;
  huge[7] = 0x7f;  // a header length beyond the file
  REQUIRE(
      write_file_atomic(dir.file("huge.safetensors"), byte_view(huge.data(), huge.size())).ok());
  CHECK_THAT(load_safetensors(dir.file("huge.safetensors")).error().message(),
             Catch::Contains("header length"));
  auto nan = *raw;
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 8 + n, &bad, sizeof bad);
  REQUIRE(write_file_atomic(dir.file("nan.safetensors"), byte_view(nan.data(), nan.size())).ok());
  CHECK_THAT(load_safetensors(dir.file("nan.safetensors")).error().message(),
             Catch::Contains("NaN"));
}

TEST_CASE("checkpoint: a run's model is saved as DLMD for the built-in MLP, else safetensors") {
  testing::temp_dir dir;
  const model_config mc;  // the built-in MLP's defaults
  REQUIRE(mc.validate().ok());
  const mlp_lm mlp(mc);
  struct family final : model_family {
    param_layout l;
    const param_layout& layout() const override { return l; }
    std::string describe() const override { return "test family"; }
    void init(float_buffer&, uint64_t) const override {}
    result<std::unique_ptr<learner_compute>> make(const learner_spec&) const override {
      return status(errc::invalid_argument, "not here");
    }
    result<double> evaluate(const float_buffer&) const override { return 0.0; }
  } builtin, other;
  builtin.l = mlp.layout();
  other.l.add("w", 3, 3, tensor_role::weight, 0);
  float_buffer p(builtin.l.buffer_floats());
  auto dlmd = save_run_model(dir.file("a.dlmd"), mc, builtin, p);
  REQUIRE(dlmd.ok());
  CHECK(*dlmd == "dlmd");
  CHECK(load_model(dir.file("a.dlmd")).ok());
  auto st = save_run_model(dir.file("a.safetensors"), mc, builtin, p);
  REQUIRE(st.ok());
  CHECK(*st == "safetensors");
  float_buffer q(other.l.buffer_floats());
  auto py = save_run_model(dir.file("b.dlmd"), mc, other, q);
  REQUIRE(py.ok());
  CHECK(*py == "safetensors");  // not the MLP: the model's own names, whatever the extension
  CHECK(load_safetensors(dir.file("b.dlmd")).ok());
  CHECK_FALSE(save_run_model(dir.file("c.safetensors"), mc, other, p).ok());  // wrong size
}

namespace {
// A record with a model-sized buffer between small fields (the shape of an actor's state).
struct piece_record {
  uint64_t id = 0;
  float_buffer big;
  std::vector<uint8_t> owned_bytes;
  std::string name;
};
template <class F>
void persist_fields(F& f, piece_record& x) {
  f(x.id, x.big);
  f.owned(x.owned_bytes);
  f(x.name);
}
}  // namespace

TEST_CASE("persist: a load made to check skips a model's numbers, never a length or a field") {
  piece_record r;
  r.id = 7;
  r.big = float_buffer(1000);
  for (size_t i = 0; i < r.big.size(); ++i) r.big[i] = static_cast<float>(i) + 0.25f;
  r.owned_bytes = bytes_of("owned");
  r.name = "shard";
  const std::vector<uint8_t> bytes = save_bytes(r);
  const byte_view all(bytes.data(), bytes.size());
  {
    piece_record full;
    REQUIRE(load_bytes(all, "the record", full).ok());
    CHECK(full.big.size() == 1000);
    CHECK(std::memcmp(full.big.data(), r.big.data(), 1000 * sizeof(float)) == 0);
  }
  piece_record checked;
  {
    const persist_check_scope checking;
    REQUIRE(load_bytes(all, "the record", checked).ok());
    // Every field after the numbers is read where it is: the skip lands on the next field.
    CHECK(checked.id == 7);
    CHECK(checked.big.size() == 1000);
    CHECK(checked.owned_bytes == bytes_of("owned"));
    CHECK(checked.name == "shard");
    // A length past the end, or bytes cut inside the numbers, is still an error by position.
    auto cut = load_bytes(byte_view(bytes.data(), bytes.size() - 10), "the record", checked);
    REQUIRE_FALSE(cut.ok());
    CHECK(cut.message().find("the record") != std::string::npos);
    std::vector<uint8_t> longer = bytes;
    uint64_t n = 0;
    std::memcpy(&n, longer.data() + 1 + sizeof(uint64_t), sizeof(n));
    REQUIRE(n == 1000);  // the buffer's length follows the byte order and the id
    n = 1001;
    std::memcpy(longer.data() + 1 + sizeof(uint64_t), &n, sizeof(n));
    auto bad = load_bytes(byte_view(longer.data(), longer.size()), "the record", checked);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message().find("at byte") != std::string::npos);
  }
  // The scope ends with its block: the next load copies the numbers again.
  piece_record after;
  REQUIRE(load_bytes(all, "the record", after).ok());
  CHECK(std::memcmp(after.big.data(), r.big.data(), 1000 * sizeof(float)) == 0);
}

TEST_CASE(
    "checkpoint: a frame written from pieces is the frame made whole, and pieces save the same "
    "bytes") {
  testing::temp_dir dir;
  // Payload pieces across the writer's 4 MiB chunks, with an empty one and tiny ones.
  std::vector<std::vector<uint8_t>> pieces = {
      bytes_of("head"), {}, std::vector<uint8_t>(9 << 20), bytes_of("tail")};
  for (size_t i = 0; i < pieces[2].size(); ++i) pieces[2][i] = static_cast<uint8_t>(i * 7 + 3);
  std::vector<byte_view> views;
  std::vector<uint8_t> joined;
  for (const auto& p : pieces) {
    views.emplace_back(p.data(), p.size());
    joined.insert(joined.end(), p.begin(), p.end());
  }
  const std::array<char, 4> magic = {'T', 'E', 'S', 'T'};
  const auto path = dir.file("pieces.bin");
  auto sum = write_frame_atomic(path, magic, 3, views);
  REQUIRE(sum.ok());
  CHECK(*sum == checksum64(joined.data(), joined.size()));
  auto back = read_file(path);
  REQUIRE(back.ok());
  CHECK(*back == make_frame(magic, 3, byte_view(joined.data(), joined.size())));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);  // no temporary left
  // Saving in pieces: the same bytes as one vector; the large buffer and the owned bytes are
  // pieces of their own, the owned bytes taken (left empty), not copied.
  piece_record r;
  r.id = 42;
  r.big = float_buffer(size_t{1} << 19);  // 2 MiB
  for (size_t i = 0; i < r.big.size(); ++i) r.big[i] = static_cast<float>(i) * 0.5f;
  r.owned_bytes.assign(size_t{3} << 20, 0xab);
  r.name = "learner";
  piece_record copy = r;
  const std::vector<uint8_t> whole = save_bytes(copy);
  const std::vector<tensor_blob> parts = save_pieces(r);
  CHECK(r.owned_bytes.empty());
  REQUIRE(parts.size() == 5);  // id | big | length | owned | name
  CHECK(parts[1].size() == r.big.size() * sizeof(float));
  CHECK(parts[3].size() == size_t{3} << 20);
  std::vector<uint8_t> rejoined;
  for (const auto& p : parts) rejoined.insert(rejoined.end(), p.view().begin(), p.view().end());
  CHECK(rejoined == whole);
  // A prefix: the fields it holds, and where the rest begins.
  uint64_t id = 0;
  auto used = load_prefix(byte_view(whole.data(), whole.size()), "the record", id);
  REQUIRE(used.ok());
  CHECK(id == 42);
  CHECK(*used == 1 + sizeof(uint64_t));  // the archive's byte order, then the id
}

TEST_CASE(
    "checkpoint: a snapshot written part by part, in any order, loads; one abandoned is gone") {
  testing::temp_dir dir;
  const std::string root = dir.path().string() + "/snaps";
  std::vector<std::vector<uint8_t>> parts = {bytes_of("part zero"), std::vector<uint8_t>(5 << 20),
                                             bytes_of("two")};
  for (size_t i = 0; i < parts[1].size(); ++i) parts[1][i] = static_cast<uint8_t>(i * 13);
  auto header = [](uint32_t index) {
    actor_file_header h;
    h.run_id = 99;
    h.snapshot = 4;
    h.index = index;
    h.cut_tick = 100 + index;
    h.summary = "actor " + std::to_string(index);
    return h;
  };
  {
    auto w = snapshot_writer::open(root, 4);
    REQUIRE(w.ok());
    for (uint32_t i : {2u, 0u, 1u}) {
      // The middle part in two pieces: written as they are, never joined.
      std::vector<byte_view> views;
      if (i == 1) {
        views = {byte_view(parts[1].data(), 1000),
                 byte_view(parts[1].data() + 1000, parts[1].size() - 1000)};
      } else {
        views = {byte_view(parts[i].data(), parts[i].size())};
      }
      REQUIRE((*w)->write_part(header(i), views).ok());
    }
    snapshot_manifest m;
    m.run_id = 99;
    m.snapshot = 4;
    m.resume_tick = 100;
    auto written = (*w)->commit(m, 3);
    REQUIRE(written.ok());
    auto loaded = load_snapshot(*written);
    REQUIRE(loaded.ok());
    REQUIRE(loaded->parts.size() == 3);
    for (uint32_t i = 0; i < 3; ++i) {
      CHECK(loaded->parts[i].copy() == parts[i]);
      CHECK(loaded->manifest.actors[i].index == i);
      CHECK(loaded->manifest.actors[i].summary == "actor " + std::to_string(i));
    }
    {
      // Where files cannot be mapped they are read into memory of their own: the same parts.
      struct reading {
        reading() { set_file_mapping(false); }
        ~reading() { set_file_mapping(true); }
      } read_them;
      auto read = load_snapshot(*written);
      REQUIRE(read.ok());
      REQUIRE(read->parts.size() == 3);
      for (uint32_t i = 0; i < 3; ++i) CHECK(read->parts[i].copy() == parts[i]);
    }
    // Only some parts wanted: the others are not read (their parts empty), but their files
    // must still be there at the size the manifest lists.
    const auto only_last = [](uint32_t i) { return i == 2; };
    auto some = load_snapshot(*written, only_last);
    REQUIRE(some.ok());
    REQUIRE(some->parts.size() == 3);
    CHECK(some->parts[0].empty());
    CHECK(some->parts[1].empty());
    CHECK(some->parts[2].copy() == parts[2]);
    const std::string middle = *written + "/actor-00001.dlsa";
    {
      // Its contents changed, its size not: not read, so not noticed when it is not wanted.
      std::fstream f(middle, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(4000);
      f.put('\x7f');
    }
    CHECK(load_snapshot(*written, only_last).ok());
    for (bool mapped : {true, false}) {
      set_file_mapping(mapped);
      auto damaged = load_snapshot(*written);
      set_file_mapping(true);
      REQUIRE_FALSE(damaged.ok());
      CHECK(damaged.error().message().find("actor-00001.dlsa: checksum mismatch") !=
            std::string::npos);
    }
    std::filesystem::resize_file(middle, 100);
    auto cut = load_snapshot(*written, only_last);
    REQUIRE_FALSE(cut.ok());
    CHECK(cut.error().message().find("actor-00001.dlsa: 100 bytes, the manifest says") !=
          std::string::npos);
    std::filesystem::remove(middle);
    auto gone = load_snapshot(*written, only_last);
    REQUIRE_FALSE(gone.ok());
    CHECK(gone.error().message().find("missing") != std::string::npos);
  }
  {
    // Another attempt at the same number goes to its own directory; abandoned, it is removed
    // with what it had written, and the committed one stays.
    auto w = snapshot_writer::open(root, 4);
    REQUIRE(w.ok());
    CHECK((*w)->dir() == root + "/snapshot-000004.1");
    REQUIRE((*w)->write_part(header(0), {byte_view(parts[0].data(), parts[0].size())}).ok());
    CHECK(std::filesystem::exists((*w)->dir() + "/actor-00000.dlsa"));
    REQUIRE((*w)->abandon().ok());
    CHECK_FALSE(std::filesystem::exists(root + "/snapshot-000004.1"));
  }
  {
    // Dropped without a commit (an error on the way): the same.
    auto w = snapshot_writer::open(root, 5);
    REQUIRE(w.ok());
    REQUIRE((*w)->write_part(header(1), {byte_view(parts[2].data(), parts[2].size())}).ok());
  }
  auto list = list_snapshots(root);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK(list->front().name == "snapshot-000004");
  CHECK(list->front().has_manifest);
}

TEST_CASE("checkpoint: pruning keeps another run's snapshots and a user's files") {
  testing::temp_dir dir;
  const std::string root = dir.path().string() + "/snaps";
  auto write = [&](uint64_t run, uint64_t n) {
    actor_file_header h;
    h.run_id = run;
    h.snapshot = n;
    const auto bytes = bytes_of("state");
    snapshot_manifest m;
    m.run_id = run;
    m.snapshot = n;
    auto written = write_snapshot(root, m, {h}, {{byte_view(bytes.data(), bytes.size())}});
    REQUIRE(written.ok());
    return *written;
  };
  // Run 1 wrote 1 to 3, run 2 (same directory, another seed) 4 and 5; a user keeps notes in a
  // directory named like a snapshot; run 1 died while writing 2 once (an incomplete attempt).
  for (uint64_t n : {1, 2, 3}) write(1, n);
  for (uint64_t n : {4, 5}) write(2, n);
  std::filesystem::create_directories(root + "/snapshot-000001.7");
  std::ofstream(root + "/snapshot-000001.7/notes.txt") << "mine";
  std::filesystem::create_directories(root + "/snapshot-000002.1");
  std::ofstream(root + "/snapshot-000002.1/actor-00000.dlsa.tmp.123") << "half";
  auto names = [&] {
    std::vector<std::string> out;
    auto list = list_snapshots(root);
    REQUIRE(list.ok());
    for (const auto& l : *list) out.push_back(l.name);
    return out;
  };
  prune_snapshots(root, 1, 1);
  CHECK(names() == std::vector<std::string>{"snapshot-000001.7", "snapshot-000003",
                                            "snapshot-000004", "snapshot-000005"});
  CHECK(std::filesystem::exists(root + "/snapshot-000001.7/notes.txt"));
  prune_snapshots(root, 1, 2);
  CHECK(names() ==
        std::vector<std::string>{"snapshot-000001.7", "snapshot-000003", "snapshot-000005"});
  // A user's file inside a snapshot directory stays, and so does the directory.
  const std::string five = root + "/snapshot-000005";
  std::ofstream(five + "/README") << "do not delete";
  const auto s = remove_snapshot_dir(five);
  CHECK_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("kept"));
  CHECK(std::filesystem::exists(five + "/README"));
  CHECK_FALSE(std::filesystem::exists(five + "/MANIFEST"));
}

TEST_CASE("checkpoint: a manifest whose resume tick is not the earliest cut is refused by name") {
  // A forged manifest (its checksums made to match) resuming past every cut used to abort the
  // resume inside the runtime ("a timer fired at another tick than it was due").
  testing::temp_dir dir;
  const std::string root = dir.path().string() + "/snaps";
  const auto bytes = bytes_of("state");
  for (int64_t resume : {int64_t{INT64_MAX}, int64_t{4}, int64_t{6}}) {
    INFO("resume tick " << resume);
    actor_file_header a, b;
    a.index = 0;
    a.cut_tick = 5;
    b.index = 1;
    b.cut_tick = 9;
    snapshot_manifest m;
    m.snapshot = 1;
    m.resume_tick = resume;
    auto written = write_snapshot(
        root, m, {a, b},
        {{byte_view(bytes.data(), bytes.size())}, {byte_view(bytes.data(), bytes.size())}});
    REQUIRE(written.ok());
    auto loaded = load_snapshot(*written);
    REQUIRE_FALSE(loaded.ok());
    CHECK_THAT(loaded.error().message(),
               Catch::Contains("MANIFEST") &&
                   Catch::Contains("resume tick " + std::to_string(resume)) &&
                   Catch::Contains("earliest cut, 5"));
  }
}
