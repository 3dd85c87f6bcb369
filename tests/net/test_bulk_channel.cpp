// The bulk channel: payloads arrive whole under their ids; hostile connections (garbage,
// another run's hello, a wrong secret, silence, a frame of another node, an absurd length, a
// cut frame, more connections than it takes) are closed and counted while the channel keeps
// serving its peers; memory stays within its limits, with a waiting (then dropping) sender,
// and a frame's claimed length costs nothing until its bytes come.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/catch.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "net/bulk_channel.hpp"
#include "net/handshake.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

namespace {

// Two ports the kernel has free now (tests running at the same time cannot collide on them).
std::pair<uint16_t, uint16_t> two_free_ports() {
  uint16_t ports[2] = {0, 0};
  int socks[2];
  for (int k = 0; k < 2; ++k) {
    socks[k] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(socks[k], reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(socks[k], reinterpret_cast<sockaddr*>(&a), &len);
    ports[k] = ntohs(a.sin_port);
  }
  for (int s : socks) ::close(s);
  return {ports[0], ports[1]};
}

struct pair_of_channels {
  std::unique_ptr<bulk_channel> a, b;  // nodes 0 and 1
  uint16_t port_b = 0;
  explicit pair_of_channels(uint64_t limit = uint64_t{64} << 20, double wait_s = 5,
                            const std::function<void(bulk_options&)>& tune = {}) {
    const auto [p, q] = two_free_ports();
    port_b = q;
    bulk_options o;
    o.peers = {{"127.0.0.1", p}, {"127.0.0.1", port_b}};
    o.listen_host = "127.0.0.1";
    o.identity = 77;
    o.max_frame_bytes = 8 << 20;
    o.inbox_limit_bytes = limit;
    o.wait_timeout_s = wait_s;
    if (tune) tune(o);
    o.self = 0;
    o.listen_port = p;
    auto ra = bulk_channel::open(o);
    REQUIRE(ra.ok());
    o.self = 1;
    o.listen_port = port_b;
    auto rb = bulk_channel::open(o);
    REQUIRE(rb.ok());
    a = std::move(*ra);
    b = std::move(*rb);
  }
};

bulk_channel::bytes_ptr bytes_of(size_t n, uint8_t seed) {
  auto v = std::make_shared<std::vector<uint8_t>>(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// A raw connection to the channel's port that writes what it is given.
struct raw_peer {
  int fd = -1;
  challenge_bytes challenge{};
  explicit raw_peer(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~raw_peer() { ::close(fd); }
  // The channel's challenge (sent as soon as it accepts).
  const challenge_bytes& read_challenge() {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    while (got < challenge.size()) {
      const ssize_t r = ::read(fd, challenge.data() + got, challenge.size() - got);
      REQUIRE(r > 0);
      got += static_cast<size_t>(r);
    }
    return challenge;
  }
  // The challenge, then an answer from `node` of the run `identity`, tagged with `key`.
  void say_hello(uint32_t node, uint64_t identity, const hello_key& key,
                 uint32_t magic = 0x48424c44) {
    read_challenge();
    const auto a = make_answer(key, challenge,
                               {magic, get_challenge(challenge.data()).version, node, identity});
    write(std::vector<uint8_t>(a.begin(), a.end()));
  }
  void say_hello(uint32_t node, uint64_t identity) {
    say_hello(node, identity, hello_key::of_identity(identity));
  }
  void write(const std::vector<uint8_t>& bytes) const {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // Whether the other side closed the connection (within 5 s of silence); what it sent before
  // (a challenge) is read and passed over.
  bool closed_by_peer() const {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    for (int i = 0; i < 64; ++i) {
      const ssize_t r = ::read(fd, buf, sizeof buf);
      // Closed with our bytes unread, the kernel resets the connection instead of ending it.
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
      if (r < 0) return false;
    }
    return false;
  }
};

void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
std::vector<uint8_t> frame_header(uint64_t id, uint64_t length, uint32_t magic = 0x46424c44) {
  std::vector<uint8_t> h;
  put(h, magic, 4);
  put(h, 0, 4);
  put(h, id, 8);
  put(h, length, 8);
  return h;
}

// Node `self`'s channel over mutual TLS, with the certificate `name` that scripts/make-certs.sh
// made in `dir`.
std::unique_ptr<bulk_channel> open_tls(bulk_options n, uint32_t self, uint16_t port,
                                       const std::string& dir, const std::string& name) {
  n.self = self;
  n.listen_port = port;
  n.tls_ca = dir + "/ca.pem";
  n.tls_certificate = dir + "/" + name + ".pem";
  n.tls_key = dir + "/" + name + ".key";
  auto r = bulk_channel::open(n);
  REQUIRE(r.ok());
  return std::move(*r);
}

template <class F>
bool eventually(F&& f) {
  for (int i = 0; i < 200; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

}  // namespace

TEST_CASE("bulk channel: payloads arrive whole in any claim order and both ways") {
  pair_of_channels ch;
  auto p1 = bytes_of(3 << 20, 1), p2 = bytes_of(1000, 2), p3 = bytes_of(5 << 20, 3);
  const uint64_t i1 = ch.a->push(1, p1), i2 = ch.a->push(1, p2), i3 = ch.b->push(0, p3);
  REQUIRE(i1 != 0);
  REQUIRE(i2 != 0);
  CHECK(bulk_channel::origin_of(i1) == 0);
  CHECK(bulk_channel::origin_of(i3) == 1);
  auto got2 = ch.b->take(i2, p2->size(), 5);
  auto got1 = ch.b->take(i1, p1->size(), 5);
  auto got3 = ch.a->take(i3, p3->size(), 5);
  REQUIRE(got1);
  REQUIRE(got2);
  REQUIRE(got3);
  CHECK(*got1 == *p1);
  CHECK(*got2 == *p2);
  CHECK(*got3 == *p3);
  // Claimed once: a second claim of the same id finds nothing.
  const auto s = ch.b->stats();
  CHECK(s.frames_received == 2);
  CHECK(s.bytes_received == p1->size() + p2->size());
  CHECK(eventually([&] { return ch.a->stats().frames_sent == 2 && ch.a->stats().acked == 2; }));
  CHECK(ch.a->push(0, p1) == 0);  // to itself: nothing to send
}

TEST_CASE("bulk channel: a claim whose bytes never come or have the wrong size is counted") {
  pair_of_channels ch(uint64_t{64} << 20, 0.3);
  CHECK(ch.b->take(uint64_t{0} << 48 | 12345, 10) == nullptr);
  auto p = bytes_of(100, 4);
  const uint64_t id = ch.a->push(1, p);
  CHECK(ch.b->take(id, 99, 5) == nullptr);
  CHECK(ch.b->stats().unresolved == 2);
}

TEST_CASE("bulk channel: hostile connections are closed and counted and peers are still served") {
  pair_of_channels ch;
  {
    raw_peer garbage(ch.port_b);
    garbage.write(std::vector<uint8_t>(64, 0xab));
    CHECK(garbage.closed_by_peer());
  }
  {
    raw_peer other_run(ch.port_b);
    other_run.say_hello(0, 78);
    CHECK(other_run.closed_by_peer());
  }
  {
    raw_peer itself(ch.port_b);
    itself.say_hello(1, 77);  // node 1 is the receiver itself
    CHECK(itself.closed_by_peer());
  }
  {
    raw_peer wrong_tag(ch.port_b);
    wrong_tag.say_hello(0, 77, hello_key::of_identity(78));
    CHECK(wrong_tag.closed_by_peer());
  }
  CHECK(eventually([&] { return ch.b->stats().bad_hello == 4; }));
  {
    raw_peer bad_magic(ch.port_b);
    bad_magic.say_hello(0, 77);
    bad_magic.write(frame_header(1, 10, 0xdeadbeef));
    CHECK(bad_magic.closed_by_peer());
  }
  {
    raw_peer forged(ch.port_b);
    forged.say_hello(0, 77);
    forged.write(frame_header(uint64_t{1} << 48 | 5, 10));  // an id of node 1 from node 0
    CHECK(forged.closed_by_peer());
  }
  CHECK(eventually([&] { return ch.b->stats().bad_frame == 2; }));
  {
    raw_peer huge(ch.port_b);
    huge.say_hello(0, 77);
    huge.write(frame_header(1, uint64_t{1} << 31));  // 2 GiB: above the run's largest payload
    CHECK(huge.closed_by_peer());
  }
  CHECK(eventually([&] { return ch.b->stats().oversized == 1; }));
  {
    raw_peer cut(ch.port_b);
    cut.say_hello(0, 77);
    cut.write(frame_header(1, 1000));
    cut.write(std::vector<uint8_t>(400, 1));
  }  // closed inside the frame's payload
  CHECK(eventually([&] { return ch.b->stats().truncated == 1; }));
  {
    raw_peer half_hello(ch.port_b);
    half_hello.read_challenge();
    half_hello.write(std::vector<uint8_t>(10, 0x44));
  }
  CHECK(eventually([&] { return ch.b->stats().truncated == 2; }));
  // None of it reached the inbox, and the real peer is still served.
  auto p = bytes_of(2 << 20, 9);
  const uint64_t id = ch.a->push(1, p);
  auto got = ch.b->take(id, p->size(), 5);
  REQUIRE(got);
  CHECK(*got == *p);
  const auto s = ch.b->stats();
  CHECK(s.frames_received == 1);
  CHECK(s.connections_accepted == 10);
}

TEST_CASE("bulk channel: with a secret only its holders get through") {
  const std::string secret = "0123456789abcdef0123";
  pair_of_channels ch(uint64_t{64} << 20, 5, [&](bulk_options& o) { o.secret = secret; });
  {
    // Knowing the cluster file (identity) is not enough.
    raw_peer outsider(ch.port_b);
    outsider.say_hello(0, 77);
    CHECK(outsider.closed_by_peer());
    CHECK(get_challenge(outsider.challenge.data()).secret_required);
  }
  CHECK(eventually([&] { return ch.b->stats().bad_hello == 1; }));
  {
    // An answer is good for its own challenge only: replayed on another connection, refused.
    raw_peer first(ch.port_b), second(ch.port_b);
    first.read_challenge();
    second.read_challenge();
    const auto a = make_answer(hello_key::of_secret(secret), first.challenge,
                               {0x48424c44, get_challenge(first.challenge.data()).version, 0, 77});
    second.write(std::vector<uint8_t>(a.begin(), a.end()));
    CHECK(second.closed_by_peer());
  }
  // The replayed answer, and the first connection, which closed without answering.
  CHECK(eventually([&] { return ch.b->stats().bad_hello == 3; }));
  {
    raw_peer insider(ch.port_b);
    insider.say_hello(0, 77, hello_key::of_secret(secret));
    insider.write(frame_header(uint64_t{0} << 48 | 9, 3));
    insider.write({1, 2, 3});
    auto got = ch.b->take(9, 3, 5);
    REQUIRE(got);
    CHECK(*got == std::vector<uint8_t>{1, 2, 3});
  }
  // The peers themselves hold it.
  auto p = bytes_of(1 << 20, 7);
  const uint64_t id = ch.a->push(1, p);
  auto got = ch.b->take(id, p->size(), 5);
  REQUIRE(got);
  CHECK(*got == *p);
  // A secret file: too short, or unreadable, is an error naming it.
  testing::temp_dir dir;
  const std::string path = dir.path().string() + "/secret";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("short\n", f);
  std::fclose(f);
  auto r = read_secret_file(path);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains(path) && Catch::Contains("at least 16"));
  CHECK_FALSE(read_secret_file(path + ".missing").ok());
  f = std::fopen(path.c_str(), "w");
  std::fputs("  0123456789abcdef0123\n", f);
  std::fclose(f);
  r = read_secret_file(path);
  REQUIRE(r.ok());
  CHECK(*r == secret);
}

TEST_CASE("bulk channel: silent connections are closed after the hello timeout and capped") {
  pair_of_channels ch(uint64_t{64} << 20, 5, [](bulk_options& o) {
    o.hello_timeout_s = 0.3;
    o.pending_max = 4;
  });
  {
    std::vector<std::unique_ptr<raw_peer>> idle;
    for (int i = 0; i < 10; ++i) idle.push_back(std::make_unique<raw_peer>(ch.port_b));
    // Four wait for their answer; the other six are closed at once.
    CHECK(eventually([&] { return ch.b->stats().over_capacity == 6; }));
    CHECK(eventually([&] { return ch.b->stats().hello_timeout == 4; }));
    for (auto& c : idle) CHECK(c->closed_by_peer());
  }
  // With the silent ones gone, a real peer gets through.
  auto p = bytes_of(1000, 5);
  const uint64_t id = ch.a->push(1, p);
  auto got = ch.b->take(id, p->size(), 5);
  REQUIRE(got);
  CHECK(*got == *p);
}

namespace {
// This process's resident memory (bytes), from /proc.
uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  unsigned long size = 0, resident = 0;
  REQUIRE(std::fscanf(f, "%lu %lu", &size, &resident) == 2);
  std::fclose(f);
  return uint64_t{resident} * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

TEST_CASE("bulk channel: a frame's claimed length costs no memory until its bytes come") {
  // Three peers each claim the largest frame allowed (48 MiB) and send a few bytes of it.
  const uint64_t claim = uint64_t{48} << 20;
  pair_of_channels ch(uint64_t{512} << 20, 5, [&](bulk_options& o) { o.max_frame_bytes = claim; });
  const uint64_t before = resident_bytes();
  {
    std::vector<std::unique_ptr<raw_peer>> claims;
    for (uint64_t k = 0; k < 3; ++k) {
      claims.push_back(std::make_unique<raw_peer>(ch.port_b));
      claims.back()->say_hello(0, 77);
      claims.back()->write(frame_header(100 + k, claim));
      claims.back()->write(std::vector<uint8_t>(4096, 7));
    }
    CHECK(eventually([&] { return ch.b->stats().inbox_bytes_peak == 3 * claim; }));
    const uint64_t grown = resident_bytes() - std::min(before, resident_bytes());
    // Zeroed up front, the claims would take 144 MiB; as they are, at most one chunk each.
    CHECK(grown < (uint64_t{16} << 20));
  }
  CHECK(eventually([&] { return ch.b->stats().truncated == 3; }));
  // Their reservations are given back: a real payload as large as the inbox's room passes.
  auto p = bytes_of(8 << 20, 3);
  const uint64_t id = ch.a->push(1, p);
  auto got = ch.b->take(id, p->size(), 5);
  REQUIRE(got);
  CHECK(*got == *p);
}

namespace {
// What a sender's pushes came to: acknowledged or dropped, by the push's number (its done
// callbacks).
struct outcomes {
  std::mutex mu;
  std::set<int> acked, dropped;
  bulk_channel::done_fn on(int k) {
    return [this, k](bool arrived) {
      std::lock_guard<std::mutex> g(mu);
      (arrived ? acked : dropped).insert(k);
    };
  }
  size_t settled() {
    std::lock_guard<std::mutex> g(mu);
    return acked.size() + dropped.size();
  }
};
}  // namespace

TEST_CASE(
    "bulk channel: memory stays bounded, and a stalled lane drops what it queued and says so") {
  const uint64_t limit = 4 << 20;
  // The largest message is 8 MiB: that much may be held from one node.
  pair_of_channels ch(limit, 0.5);
  // Nobody claims: the receiver holds at most 8 MiB, TCP holds some, and once the lane has
  // made no progress for 0.5 s the frames it has not started are dropped.
  const int n = 40;
  outcomes out;
  std::vector<uint64_t> ids(n);
  for (int i = 0; i < n; ++i)
    ids[i] = ch.a->push(1, bytes_of(1 << 20, static_cast<uint8_t>(i)), out.on(i));
  REQUIRE(eventually([&] {
    std::lock_guard<std::mutex> g(out.mu);
    return !out.dropped.empty();
  }));
  CHECK(ch.b->stats().inbox_bytes_peak <= (uint64_t{8} << 20));
  {
    std::lock_guard<std::mutex> g(out.mu);
    CHECK(out.acked.size() <= 8);
  }
  // Claiming makes room: the frames that were on their way arrive, acknowledged, intact;
  // the dropped ones never do.
  std::set<int> claimed;
  for (int round = 0; round < 1000; ++round) {
    std::set<int> acked;
    size_t settled = 0;
    {
      std::lock_guard<std::mutex> g(out.mu);
      acked = out.acked;
      settled = out.acked.size() + out.dropped.size();
    }
    for (int i : acked) {
      if (claimed.count(i) != 0) continue;
      auto got = ch.b->take(ids[i], 1 << 20);
      REQUIRE(got);
      CHECK(*got == *bytes_of(1 << 20, static_cast<uint8_t>(i)));
      claimed.insert(i);
    }
    if (settled == ids.size() && claimed.size() == acked.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(out.settled() == ids.size());
  CHECK(claimed.size() == out.acked.size());
  CHECK(ch.a->stats().send_dropped == out.dropped.size());
  for (int i : out.dropped) CHECK(ch.b->take(ids[i], 1 << 20, 0.2) == nullptr);
  CHECK(ch.b->stats().inbox_bytes_peak <= (uint64_t{8} << 20));
  // And the channel goes on.
  auto p = bytes_of(1 << 20, 50);
  const uint64_t id = ch.a->push(1, p);
  REQUIRE(id != 0);
  auto got = ch.b->take(id, p->size(), 5);
  REQUIRE(got);
  CHECK(*got == *p);
}

TEST_CASE("bulk channel: the bytes are at the receiver when their acknowledgement comes") {
  // A message's payloads together may exceed the inbox limit (6 x 1 MiB against 4 MiB): they
  // are held together up to the largest message (8 MiB), so all are acknowledged before any
  // is claimed, and each is there, without waiting, when its acknowledgement comes.
  pair_of_channels ch(uint64_t{4} << 20, 5);
  outcomes out;
  const int n = 6;
  std::vector<uint64_t> ids(n);
  for (int i = 0; i < n; ++i) {
    ids[i] = ch.a->push(1, bytes_of(1 << 20, static_cast<uint8_t>(i)), out.on(i),
                        i % 2 == 0 ? bulk_channel::lane::payload : bulk_channel::lane::background);
  }
  REQUIRE(eventually([&] { return out.settled() == static_cast<size_t>(n); }));
  CHECK(out.dropped.empty());
  for (int i = 0; i < n; ++i) {
    auto got = ch.b->take(ids[i], 1 << 20);  // no wait
    REQUIRE(got);
    CHECK(*got == *bytes_of(1 << 20, static_cast<uint8_t>(i)));
  }
  // A reset (the peer's process went away) sends what was not acknowledged again, on a new
  // connection; the receiver acknowledges a copy it holds already and keeps one.
  outcomes again;
  std::vector<uint64_t> more(4);
  for (int i = 0; i < 4; ++i) {
    more[i] = ch.a->push(1, bytes_of(2 << 20, static_cast<uint8_t>(i + 10)), again.on(i));
    if (i == 1) ch.a->reset(1);
  }
  REQUIRE(eventually([&] { return again.settled() == 4; }));
  CHECK(again.acked.size() == 4);
  for (int i = 0; i < 4; ++i) {
    auto got = ch.b->take(more[i], 2 << 20);
    REQUIRE(got);
    CHECK(*got == *bytes_of(2 << 20, static_cast<uint8_t>(i + 10)));
  }
}

TEST_CASE("bulk channel: a port in use is an error naming it") {
  pair_of_channels ch;
  bulk_options o;
  o.peers = {{"127.0.0.1", 1}, {"127.0.0.1", ch.port_b}};
  o.self = 1;
  o.listen_host = "127.0.0.1";
  o.listen_port = ch.port_b;
  // SO_REUSEADDR does not let two listeners share a port.
  auto r = bulk_channel::open(o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains(std::to_string(ch.port_b)));
  o.listen_host = "not-an-address";
  CHECK_FALSE(bulk_channel::open(o).ok());
}

TEST_CASE(
    "bulk channel: over mutual TLS payloads arrive and a node the CA did not sign is refused") {
  testing::temp_dir dir;
  const std::string d = dir.path().string();
  const std::string make = std::string(DILOCO_SOURCE_DIR) + "/scripts/make-certs.sh " + d +
                           " a b >/dev/null && openssl req -x509 -newkey rsa:2048 -nodes -days 1 "
                           "-subj /CN=rogue -keyout " +
                           d + "/rogue.key -out " + d + "/rogue.pem 2>/dev/null";
  REQUIRE(std::system(make.c_str()) == 0);
  const auto [p, q] = two_free_ports();
  bulk_options o;
  o.peers = {{"127.0.0.1", p}, {"127.0.0.1", q}};
  o.listen_host = "127.0.0.1";
  o.identity = 77;
  o.wait_timeout_s = 2;
  o.tls_ca = d + "/ca.pem";
  auto node = [&](uint32_t self, const std::string& name) {
    return open_tls(o, self, self == 0 ? p : q, d, name);
  };
  {
    auto a = node(0, "a"), b = node(1, "b");
    auto payload = bytes_of(3 << 20, 11);
    const uint64_t id = a->push(1, payload);
    auto got = b->take(id, payload->size(), 5);
    REQUIRE(got);
    CHECK(*got == *payload);
    // Both ways at once, sizes around TLS's 16 KiB records and the stream's 1 MiB writes, then
    // a burst of small frames (each write completes at once): every payload whole, in any order.
    std::vector<std::pair<uint64_t, bulk_channel::bytes_ptr>> ab, ba;
    const size_t sizes[] = {
        1, 17, 16383, 16384, 16385, (1 << 20) - 1, (1 << 20), (1 << 20) + 3, 5 << 20};
    for (size_t k = 0; k < std::size(sizes); ++k) {
      auto x = bytes_of(sizes[k], static_cast<uint8_t>(20 + k));
      ab.emplace_back(a->push(1, x), x);
      auto y = bytes_of(sizes[k], static_cast<uint8_t>(60 + k));
      ba.emplace_back(b->push(0, y), y);
    }
    for (int k = 0; k < 3000; ++k) {
      auto x = bytes_of(40 + k % 7, static_cast<uint8_t>(k));
      ab.emplace_back(a->push(1, x), x);
    }
    for (auto it = ab.rbegin(); it != ab.rend(); ++it) {
      auto x = b->take(it->first, it->second->size(), 30);
      REQUIRE(x);
      CHECK(*x == *it->second);
    }
    for (auto& [i, y] : ba) {
      auto x = a->take(i, y->size(), 30);
      REQUIRE(x);
      CHECK(*x == *y);
    }
    CHECK(eventually([&] { return a->stats().acked == ab.size() + 1; }));
    // A plain hello on the TLS port is no TLS handshake: refused.
    raw_peer plain(q);
    plain.write(std::vector<uint8_t>(56, 0x44));
    CHECK(plain.closed_by_peer());
    CHECK(eventually([&] { return b->stats().bad_hello == 1; }));
  }
  // A sender whose certificate is self-signed never gets a payload through.
  auto rogue = node(0, "rogue"), b = node(1, "b");
  bool dropped = false;
  std::mutex mu;
  const uint64_t id = rogue->push(1, bytes_of(1000, 3), [&](bool arrived) {
    std::lock_guard<std::mutex> g(mu);
    dropped = !arrived;
  });
  CHECK(b->take(id, 1000, 1) == nullptr);
  // The sender learns it: the lane made no progress for the wait timeout.
  CHECK(eventually([&] {
    std::lock_guard<std::mutex> g(mu);
    return dropped;
  }));
  CHECK(rogue->stats().send_dropped == 1);
  CHECK(b->stats().bad_hello >= 1);
  CHECK(b->stats().frames_received == 0);
  // Half a TLS configuration is an error.
  bulk_options half = o;
  half.tls_key = "";
  CHECK_FALSE(bulk_channel::open(half).ok());
}

namespace {

// A man in the middle on loopback: forwards each connection's bytes both ways; in the first
// connection it flips one bit of what the client sends once `flip_after` bytes have passed.
struct flipping_proxy {
  flipping_proxy(uint16_t to, size_t after) : target(to), flip_after(after) {
    lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(lfd, 8) == 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    th = std::thread([this] { run(); });
  }
  ~flipping_proxy() {
    stop = true;
    th.join();
    for (auto& t : conns) t.join();
    ::close(lfd);
  }
  void run() {
    while (!stop) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(lfd, nullptr, nullptr);
      if (c < 0) continue;
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(target);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(c);
        ::close(s);
        continue;
      }
      const bool first = accepted.fetch_add(1) == 0;
      conns.emplace_back([this, c, s, first] { forward(c, s, first); });
    }
  }
  void forward(int c, int s, bool flip) {
    std::vector<char> buf(1 << 16);
    size_t passed = 0;
    while (!stop) {
      pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      bool gone = false;
      for (int i = 0; i < 2 && !gone; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t r = ::read(p[i].fd, buf.data(), buf.size());
        if (r <= 0) {
          gone = true;
          break;
        }
        const auto n = static_cast<size_t>(r);
        if (i == 0 && flip && passed + n > flip_after) {
          buf[flip_after - passed] ^= 0x40;
          flip = false;
          flipped += 1;
        }
        if (i == 0) passed += n;
        for (size_t at = 0; at < n && !gone;) {
          const ssize_t w = ::send(p[1 - i].fd, buf.data() + at, n - at, MSG_NOSIGNAL);
          gone = w <= 0;
          at += gone ? 0 : static_cast<size_t>(w);
        }
      }
      if (gone) break;
    }
    ::close(c);
    ::close(s);
  }
  uint16_t target;
  size_t flip_after;
  int lfd = -1;
  uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0}, flipped{0};
  std::thread th;
  std::vector<std::thread> conns;  // the accepting thread's
};

}  // namespace

TEST_CASE(
    "bulk channel: over TLS a bit changed on the way closes the connection and the payload "
    "sent again arrives whole") {
  testing::temp_dir dir;
  const std::string d = dir.path().string();
  const std::string make =
      std::string(DILOCO_SOURCE_DIR) + "/scripts/make-certs.sh " + d + " a b >/dev/null";
  REQUIRE(std::system(make.c_str()) == 0);
  const auto [p, q] = two_free_ports();
  // Past the handshake and the hello (a few KiB), inside the payload's records.
  flipping_proxy mitm(q, 300000);
  bulk_options o;
  o.listen_host = "127.0.0.1";
  o.identity = 78;
  o.wait_timeout_s = 30;
  o.tls_ca = d + "/ca.pem";
  auto node = [&](uint32_t self, const std::string& name, uint16_t to_b) {
    bulk_options n = o;
    n.peers = {{"127.0.0.1", p}, {"127.0.0.1", to_b}};
    return open_tls(n, self, self == 0 ? p : q, d, name);
  };
  auto a = node(0, "a", mitm.port), b = node(1, "b", q);
  auto payload = bytes_of(2 << 20, 13);
  const uint64_t id = a->push(1, payload);
  auto got = b->take(id, payload->size(), 60);
  REQUIRE(got);
  CHECK(*got == *payload);
  CHECK(mitm.flipped == 1);
  CHECK(mitm.accepted >= 2);  // the sender connected again
  // TLS found the record altered: the frame it was in never arrived, and the connection it
  // came on was closed, counted as a cut frame.
  CHECK(b->stats().truncated >= 1);
  CHECK(b->stats().frames_received == 1);
}

namespace {
// Waits for `f` to hold, up to `seconds` (a generous bound: a loaded machine is slow, never
// wrong).
template <class F>
bool within(double seconds, F&& f) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(seconds));
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}
}  // namespace

namespace {
// Node 0 receives (a leader's snapshot coordinator); nodes 1 and 2 send on the background
// lane. The largest message is 32 MiB (the budget for background bytes from all senders
// together). A sender's lane without progress for 1.5 s drops what it queued.
struct trio {
  std::unique_ptr<bulk_channel> ch[3];
  explicit trio(double stale_after_s = 120) {
    const auto [p0, p1] = two_free_ports();
    const auto [p2, unused] = two_free_ports();
    (void)unused;
    bulk_options o;
    o.peers = {{"127.0.0.1", p0}, {"127.0.0.1", p1}, {"127.0.0.1", p2}};
    o.listen_host = "127.0.0.1";
    o.identity = 78;
    o.max_frame_bytes = 32 << 20;
    o.inbox_limit_bytes = 1 << 20;
    o.wait_timeout_s = 1.5;
    o.stale_after_s = stale_after_s;
    const uint16_t ports[3] = {p0, p1, p2};
    for (uint32_t k = 0; k < 3; ++k) {
      o.self = k;
      o.listen_port = ports[k];
      auto r = bulk_channel::open(o);
      REQUIRE(r.ok());
      ch[k] = std::move(*r);
    }
  }
};
}  // namespace

TEST_CASE(
    "bulk channel: snapshot parts from several senders come in one sender at a time, held until "
    "let go, and their senders wait without dropping") {
  // Each of nodes 1 and 2 sends a part of 8 pieces of 2 MiB: the budget has room for both,
  // but one sender's come in at a time, until they are let go. The waits below last longer
  // than the senders' 1.5 s wait timeout: only the receiver's wait notices keep the waiting
  // sender's part.
  trio t;
  auto& ch = t.ch;
  const int pieces = 8;
  const size_t piece = 2 << 20;
  outcomes out[3];
  std::vector<uint64_t> ids[3];
  for (uint32_t k = 1; k <= 2; ++k) {
    for (int i = 0; i < pieces; ++i) {
      ids[k].push_back(ch[k]->push(0, bytes_of(piece, static_cast<uint8_t>(10 * k + i)),
                                   out[k].on(i), bulk_channel::lane::background));
    }
  }
  auto acked = [&](uint32_t k) {
    std::lock_guard<std::mutex> g(out[k].mu);
    return out[k].acked.size();
  };
  // One sender's whole part comes in; the other's waits.
  REQUIRE(within(60, [&] {
    return (acked(1) == pieces || acked(2) == pieces) && ch[0]->stats().background_waits >= 1;
  }));
  const uint32_t first = acked(1) == pieces ? 1 : 2, second = 3 - first;
  CHECK(acked(second) == 0);
  // The coordinator claims the first part and holds it (writing it): it still counts, so the
  // second part stays where it is, announced as waiting, its sender's lane kept alive.
  std::vector<bulk_channel::bytes_ptr> held;
  for (int i = 0; i < pieces; ++i) {
    held.push_back(ch[0]->take(ids[first][i], piece));
    REQUIRE(held.back());
    CHECK(*held.back() == *bytes_of(piece, static_cast<uint8_t>(10 * first + i)));
  }
  REQUIRE(within(60, [&] { return ch[0]->stats().waits_announced >= 6; }));
  CHECK(acked(second) == 0);
  CHECK(ch[second]->stats().waits_heard >= 1);
  // Its payload lane does not wait for its snapshot part.
  auto urgent = bytes_of(4096, 99);
  const uint64_t urgent_id = ch[second]->push(0, urgent);
  auto got = ch[0]->take(urgent_id, urgent->size(), 60);
  REQUIRE(got);
  CHECK(*got == *urgent);
  // Written: let go. The second part comes in, whole.
  held.clear();
  REQUIRE(within(60, [&] { return acked(second) == pieces; }));
  for (int i = 0; i < pieces; ++i) {
    auto b = ch[0]->take(ids[second][i], piece);
    REQUIRE(b);
    CHECK(*b == *bytes_of(piece, static_cast<uint8_t>(10 * second + i)));
  }
  const auto s = ch[0]->stats();
  CHECK(s.background_bytes_peak <= (uint64_t{16} << 20));
  CHECK(s.background_bytes_peak >= uint64_t{pieces} * piece);
  for (uint32_t k = 1; k <= 2; ++k) {
    CHECK(ch[k]->stats().send_dropped == 0);
    std::lock_guard<std::mutex> g(out[k].mu);
    CHECK(out[k].dropped.empty());
  }
}

TEST_CASE(
    "bulk channel: a snapshot part whose message never came is given up after stale_after_s, "
    "and the next sender's part comes in") {
  trio t(0.5);
  auto& ch = t.ch;
  const int pieces = 4;
  const size_t piece = 2 << 20;
  outcomes out[3];
  std::vector<uint64_t> ids[3];
  for (int i = 0; i < pieces; ++i) {
    ids[1].push_back(ch[1]->push(0, bytes_of(piece, static_cast<uint8_t>(i)), out[1].on(i),
                                 bulk_channel::lane::background));
  }
  auto acked = [&](uint32_t k) {
    std::lock_guard<std::mutex> g(out[k].mu);
    return out[k].acked.size();
  };
  REQUIRE(within(60, [&] { return acked(1) == pieces; }));
  // Node 1's message never comes (its node went away): nobody claims its part. Node 2's part
  // waits for the budget until node 1's is given up, then comes in whole.
  for (int i = 0; i < pieces; ++i) {
    ids[2].push_back(ch[2]->push(0, bytes_of(piece, static_cast<uint8_t>(50 + i)), out[2].on(i),
                                 bulk_channel::lane::background));
  }
  REQUIRE(within(60, [&] { return acked(2) == pieces; }));
  for (int i = 0; i < pieces; ++i) {
    auto b = ch[0]->take(ids[2][i], piece);
    REQUIRE(b);
    CHECK(*b == *bytes_of(piece, static_cast<uint8_t>(50 + i)));
    CHECK(ch[0]->take(ids[1][i], piece) == nullptr);
  }
  const auto s = ch[0]->stats();
  CHECK(s.background_waits >= 1);
  CHECK(s.unresolved >= static_cast<uint64_t>(pieces));
  CHECK(ch[2]->stats().send_dropped == 0);
}
