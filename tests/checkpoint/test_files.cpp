#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "checkpoint/model_file.hpp"
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
