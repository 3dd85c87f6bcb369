// Every message type survives CAF's binary serialization unchanged, under the registered
// type IDs: what a remote node receives is what was sent.
#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include "tests/catch.hpp"

#include "protocol/type_ids.hpp"

using namespace diloco;

namespace {

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  fixture() {
    register_protocol(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  template <class T>
  T round_trip(T value) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    REQUIRE_FALSE(sink(value));
    T back;
    caf::binary_deserializer source{*sys, buf};
    REQUIRE_FALSE(source(back));
    return back;
  }
};

stamp some_stamp() {
  return stamp{3, vector_clock({1, 0, 5, 2}), 123456789};
}

}  // namespace

TEST_CASE("messages: outer gradient and update round-trip with their blobs") {
  fixture fx;
  outer_gradient_msg m;
  m.st = some_stamp();
  m.fragment = 2;
  m.learner = 1;
  m.base_version = 7;
  m.tokens = 640;
  m.steps = 10;
  m.send_step = 99;
  m.step_time_ns = 1000000000;
  m.final = true;
  m.delta = tensor_blob(std::vector<uint8_t>{1, 2, 3, 250});
  auto b = fx.round_trip(m);
  CHECK(b.st.sender == 3);
  CHECK(b.st.clock == m.st.clock);
  CHECK(b.st.sent_at_ns == 123456789);
  CHECK(b.fragment == 2);
  CHECK(b.learner == 1);
  CHECK(b.base_version == 7);
  CHECK(b.tokens == 640);
  CHECK(b.steps == 10);
  CHECK(b.send_step == 99);
  CHECK(b.final);
  CHECK(b.delta.copy() == m.delta.copy());

  fragment_update_msg u;
  u.st = some_stamp();
  u.fragment = 1;
  u.from_version = 4;
  u.to_version = 6;
  u.reply_to_step = 64;
  u.blobs = {tensor_blob(std::vector<uint8_t>(1000, 7)), tensor_blob(std::vector<uint8_t>{9})};
  auto ub = fx.round_trip(u);
  CHECK(ub.to_version == 6);
  REQUIRE(ub.blobs.size() == 2);
  CHECK(ub.blobs[0].copy() == u.blobs[0].copy());
  CHECK(ub.blobs[1].copy() == u.blobs[1].copy());
}

TEST_CASE("messages: the control and report types round-trip") {
  fixture fx;
  schedule_msg s{some_stamp(), 32, 4, {0, 8, 16, 24}};
  auto sb = fx.round_trip(s);
  CHECK(sb.offsets == s.offsets);
  CHECK(sb.period_steps == 32);
  progress_msg p{some_stamp(), 2, 640, 10, 1.25, 5, 6};
  auto pb = fx.round_trip(p);
  CHECK(pb.train_loss == 1.25);
  CHECK(pb.idle_ns == 6);
  shard_report r;
  r.merges = 5;
  r.versions = {1, 2};
  auto rb = fx.round_trip(r);
  CHECK(rb.merges == 5);
  CHECK(rb.versions == r.versions);
}

TEST_CASE("messages: an empty blob and a truncated buffer are handled") {
  fixture fx;
  gradient_msg g;
  auto gb = fx.round_trip(g);
  CHECK(gb.grad.empty());
  outer_gradient_msg m;
  m.delta = tensor_blob(std::vector<uint8_t>(100, 1));
  std::vector<char> buf;
  caf::binary_serializer sink{*fx.sys, buf};
  REQUIRE_FALSE(sink(m));
  buf.resize(buf.size() / 2);
  outer_gradient_msg back;
  caf::binary_deserializer source{*fx.sys, buf};
  CHECK(source(back));  // an error, not a crash
}

TEST_CASE("messages: all types are registered under their names") {
  fixture fx;
  CHECK(caf::type_id<outer_gradient_msg>::value != caf::type_id<fragment_update_msg>::value);
  CHECK(std::string(caf::type_name_by_id<caf::type_id<outer_gradient_msg>::value>::value) ==
        "diloco::outer_gradient_msg");
}

namespace {
// A resolver for the test: id 7 is 300 bytes of 0x5a; anything else did not come.
tensor_blob::bytes_ptr test_resolver(uint64_t id, uint64_t size) {
  if (id != 7 || size != 300) return nullptr;
  return std::make_shared<const std::vector<uint8_t>>(300, 0x5a);
}
}  // namespace

TEST_CASE("messages: a blob reference travels as id and size and resolves to the bytes") {
  fixture fx;
  outer_gradient_msg m;
  m.st = some_stamp();
  m.delta = tensor_blob::reference(7, 300);
  std::vector<char> buf;
  caf::binary_serializer sink{*fx.sys, buf};
  REQUIRE_FALSE(sink(m));
  CHECK(buf.size() < 300);  // the bytes are not in the message
  tensor_blob::set_resolver(&test_resolver);
  outer_gradient_msg back;
  caf::binary_deserializer source{*fx.sys, buf};
  REQUIRE_FALSE(source(back));
  CHECK(back.delta.copy() == std::vector<uint8_t>(300, 0x5a));
  CHECK(back.st.clock == m.st.clock);
  // A reference whose bytes never came arrives as an empty blob (decode rejects it).
  m.delta = tensor_blob::reference(8, 300);
  CHECK(fx.round_trip(m).delta.empty());
  tensor_blob::set_resolver(nullptr);
  m.delta = tensor_blob::reference(7, 300);
  CHECK(fx.round_trip(m).delta.empty());  // no resolver in this process
  // A kind byte other than 0 and 1 is an error, not a crash.
  outer_gradient_msg inline_blob;
  inline_blob.delta = tensor_blob(std::vector<uint8_t>(10, 1));
  std::vector<char> raw;
  caf::binary_serializer s2{*fx.sys, raw};
  REQUIRE_FALSE(s2(inline_blob));
  const std::vector<char> before = raw;
  bool changed = false;
  // The kind byte precedes the 10 bytes' length; find it from the end.
  for (size_t i = raw.size() - 10; i-- > 0;) {
    if (raw[i] == 0) {
      raw[i] = 9;
      changed = true;
      break;
    }
  }
  REQUIRE(changed);
  outer_gradient_msg bad;
  caf::binary_deserializer s3{*fx.sys, raw};
  CHECK(s3(bad));
}
