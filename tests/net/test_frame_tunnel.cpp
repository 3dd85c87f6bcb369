// The framing front: bytes cross a pair of tunnels intact in both directions; a connection
// to the front that does not answer its challenge as a node of this run (with the run's secret,
// when it has one) in time, or that breaks the framing, is closed and counted without a byte
// reaching the service behind it; connections waiting for their answer are capped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/catch.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "net/frame_tunnel.hpp"
#include "net/handshake.hpp"

using namespace diloco;

namespace {

int listen_local(uint16_t& port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(s, 8) == 0);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

int connect_local(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return s;
}

// The service behind node 1's front: echoes every byte back, counts the bytes it got.
struct echo_service {
  uint16_t port = 0;
  int srv = -1;
  std::atomic<uint64_t> received{0};
  std::thread t;
  echo_service() {
    srv = listen_local(port);
    t = std::thread([this] {
      for (;;) {
        int c = ::accept(srv, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        ssize_t n;
        while ((n = ::read(c, buf, sizeof buf)) > 0) {
          received += static_cast<uint64_t>(n);
          (void)!::send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
        }
        ::close(c);
      }
    });
  }
  ~echo_service() {
    ::shutdown(srv, SHUT_RDWR);
    ::close(srv);
    t.join();
  }
};

std::vector<uint8_t> read_exactly(int fd, size_t n) {
  std::vector<uint8_t> out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t r = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (r <= 0) break;
    out.insert(out.end(), buf, buf + r);
  }
  return out;
}

template <class F>
bool eventually(F&& f) {
  for (int i = 0; i < 200 && !f(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return f();
}

}  // namespace

TEST_CASE("frame tunnel: bytes cross two tunnels intact both ways") {
  echo_service echo;
  uint16_t p0 = 0, p1 = 0;
  {  // two free ports for the fronts
    int a = listen_local(p0), b = listen_local(p1);
    ::close(a);
    ::close(b);
  }
  tunnel_options o;
  o.peers = {{"127.0.0.1", p0}, {"127.0.0.1", p1}};
  o.listen_host = "127.0.0.1";
  o.identity = 5;
  o.self = 1;
  o.front_port = p1;
  o.caf_port = echo.port;
  auto t1 = frame_tunnel::open(o);
  REQUIRE(t1.ok());
  o.self = 0;
  o.front_port = p0;
  o.caf_port = 1;  // nothing behind node 0's front in this test
  auto t0 = frame_tunnel::open(o);
  REQUIRE(t0.ok());
  // Node 0's side connects to its local end of the tunnel to node 1.
  int c = connect_local((*t0)->outbound_port(1));
  std::vector<uint8_t> msg(300'000);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7 + 3);
  std::thread writer([&] { (void)!::send(c, msg.data(), msg.size(), MSG_NOSIGNAL); });
  const auto back = read_exactly(c, msg.size());
  writer.join();
  CHECK(back == msg);
  CHECK(echo.received == msg.size());
  ::close(c);
  CHECK(eventually([&] { return (*t1)->stats().tunnels == 1; }));
  CHECK((*t0)->outbound_port(0) == 0);
}

namespace {

// A client of a front: reads its challenge and answers as `node` of run `identity`.
struct front_client {
  int fd = -1;
  challenge_bytes challenge{};
  explicit front_client(uint16_t port) : fd(connect_local(port)) {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~front_client() { ::close(fd); }
  void write(const std::vector<uint8_t>& bytes) const {
    (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  void answer(uint32_t node, uint64_t identity, const hello_key& key) {
    const auto c = read_exactly(fd, challenge.size());
    REQUIRE(c.size() == challenge.size());
    std::copy(c.begin(), c.end(), challenge.begin());
    const auto a = make_answer(key, challenge, {0x48544c44, 2, node, identity});
    write(std::vector<uint8_t>(a.begin(), a.end()));
  }
  void answer(uint32_t node, uint64_t identity) {
    answer(node, identity, hello_key::of_identity(identity));
  }
  // Reads until the front closes (or 5 s of silence); true if it closed.
  bool wait_closed() const {
    char x[256];
    for (;;) {
      const ssize_t r = ::read(fd, x, sizeof x);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
      if (r < 0) return false;
    }
  }
};

// Options of node 1 of a two-node run whose front leads to `service_port`.
tunnel_options front_of_node_1(uint16_t service_port) {
  tunnel_options o;
  o.peers = {{"127.0.0.1", 1}, {"127.0.0.1", 0}};
  o.listen_host = "127.0.0.1";
  o.identity = 5;
  o.self = 1;
  o.caf_port = service_port;
  return o;
}

std::vector<uint8_t> frame(uint32_t magic, uint32_t length) {
  std::vector<uint8_t> f(8);
  std::memcpy(f.data(), &magic, 4);
  std::memcpy(f.data() + 4, &length, 4);
  return f;
}

}  // namespace

TEST_CASE("frame tunnel: input that is not framed for this run never reaches the service") {
  echo_service echo;
  tunnel_options o = front_of_node_1(echo.port);
  o.max_frame_bytes = 1024;
  auto t = frame_tunnel::open(o);
  REQUIRE(t.ok());
  const uint16_t front = (*t)->front_port();
  {
    front_client garbage(front);
    garbage.write(std::vector<uint8_t>(100, 0xee));
    CHECK(garbage.wait_closed());
  }
  const std::pair<unsigned, uint64_t> strangers[] = {{0u, uint64_t{6}},   // another run
                                                     {1u, uint64_t{5}},   // the node itself
                                                     {7u, uint64_t{5}}};  // no such node
  for (const auto& [node, identity] : strangers) {
    front_client c(front);
    c.answer(node, identity);
    CHECK(c.wait_closed());
  }
  {
    front_client wrong_tag(front);
    wrong_tag.answer(0, 5, hello_key::of_identity(6));
    CHECK(wrong_tag.wait_closed());
  }
  CHECK(eventually([&] { return (*t)->stats().bad_hello == 5; }));
  auto framed = [&](std::vector<std::vector<uint8_t>> parts) {
    front_client c(front);
    c.answer(0, 5);
    for (const auto& p : parts) c.write(p);
    CHECK(c.wait_closed());
  };
  framed({frame(0x12345678, 10)});  // bad frame magic
  framed({frame(0x46544c44, 0)});   // empty frame
  CHECK(eventually([&] { return (*t)->stats().bad_frame == 2; }));
  framed({frame(0x46544c44, 1'000'000)});  // above the limit
  CHECK(eventually([&] { return (*t)->stats().oversized == 1; }));
  {
    front_client cut(front);
    cut.answer(0, 5);
    cut.write(frame(0x46544c44, 500));
    cut.write(std::vector<uint8_t>(100, 1));
  }  // cut short
  CHECK(eventually([&] { return (*t)->stats().truncated == 1; }));
  // Nothing of it reached the service (after a good hello a connection to it is opened, and
  // closed without a byte when the framing breaks).
  CHECK(echo.received == 0);
  // A well-framed hello and frame of this run do.
  front_client c(front);
  c.answer(0, 5);
  c.write(frame(0x46544c44, 3));
  c.write({'a', 'b', 'c'});
  CHECK(eventually([&] { return echo.received == 3; }));
}

namespace {

// A middleman (CAF 0.17 BASP) header declaring a payload of `length` bytes.
std::vector<uint8_t> basp_header(uint32_t length) {
  std::vector<uint8_t> h(32, 0);
  h[0] = 1;  // an operation
  h[4] = static_cast<uint8_t>(length >> 24);
  h[5] = static_cast<uint8_t>(length >> 16);
  h[6] = static_cast<uint8_t>(length >> 8);
  h[7] = static_cast<uint8_t>(length);
  return h;
}

std::vector<uint8_t> framed_bytes(const std::vector<uint8_t>& body) {
  const auto head = frame(0x46544c44, static_cast<uint32_t>(body.size()));
  std::vector<uint8_t> f(head.size() + body.size());
  std::copy(head.begin(), head.end(), f.begin());
  std::copy(body.begin(), body.end(), f.begin() + static_cast<std::ptrdiff_t>(head.size()));
  return f;
}

}  // namespace

TEST_CASE("frame tunnel: a message declared above the run's largest never reaches the middleman") {
  echo_service echo;
  tunnel_options o = front_of_node_1(echo.port);
  o.max_message_bytes = 1000;
  auto t = frame_tunnel::open(o);
  REQUIRE(t.ok());
  const uint16_t front = (*t)->front_port();
  {
    front_client c(front);
    c.answer(0, 5);
    // A message of 500 bytes, its header cut across two frames: through.
    const auto head = basp_header(500);
    c.write(framed_bytes(std::vector<uint8_t>(head.begin(), head.begin() + 10)));
    std::vector<uint8_t> rest(head.begin() + 10, head.end());
    rest.resize(rest.size() + 500, 7);
    c.write(framed_bytes(rest));
    CHECK(eventually([&] { return echo.received == 532; }));
    // Then a header declaring 2^31 bytes, as a peer holding the secret could send: closed, and
    // not a byte of it goes through.
    c.write(framed_bytes(basp_header(1u << 31)));
    CHECK(c.wait_closed());
  }
  CHECK(eventually([&] { return (*t)->stats().oversized_message == 1; }));
  CHECK(echo.received == 532);
  {
    // Exactly the bound, then a message without payload, in one frame: through.
    front_client c(front);
    c.answer(0, 5);
    auto bytes = basp_header(1000);
    bytes.resize(bytes.size() + 1000, 9);
    const auto empty = basp_header(0);
    bytes.insert(bytes.end(), empty.begin(), empty.end());
    c.write(framed_bytes(bytes));
    CHECK(eventually([&] { return echo.received == 532 + 1064; }));
  }
  CHECK((*t)->stats().oversized_message == 1);
}

TEST_CASE("frame tunnel: with a secret only its holders reach the service") {
  echo_service echo;
  uint16_t p0 = 0, p1 = 0;
  {
    int a = listen_local(p0), b = listen_local(p1);
    ::close(a);
    ::close(b);
  }
  const std::string secret = "a secret of this run, 32 bytes..";
  tunnel_options o;
  o.peers = {{"127.0.0.1", p0}, {"127.0.0.1", p1}};
  o.listen_host = "127.0.0.1";
  o.identity = 5;
  o.secret = secret;
  o.self = 1;
  o.front_port = p1;
  o.caf_port = echo.port;
  auto t1 = frame_tunnel::open(o);
  REQUIRE(t1.ok());
  {
    // Holding the cluster file (the identity) is not enough.
    front_client outsider(p1);
    outsider.answer(0, 5);
    outsider.write(frame(0x46544c44, 3));
    outsider.write({'x', 'y', 'z'});
    CHECK(outsider.wait_closed());
    CHECK(get_challenge(outsider.challenge.data()).secret_required);
  }
  CHECK(eventually([&] { return (*t1)->stats().bad_hello == 1; }));
  CHECK(echo.received == 0);
  // A node of the run without the secret is told why.
  tunnel_options no_secret = o;
  no_secret.secret.clear();
  no_secret.self = 0;
  no_secret.front_port = p0;
  no_secret.caf_port = 1;
  {
    auto t0 = frame_tunnel::open(no_secret);
    REQUIRE(t0.ok());
    int c = connect_local((*t0)->outbound_port(1));
    CHECK(eventually([&] { return !(*t0)->refusal(1).empty(); }));
    CHECK_THAT((*t0)->refusal(1), Catch::Contains("secret_file"));
    ::close(c);
  }
  // The holder gets through, both ways.
  o.self = 0;
  o.front_port = p0;
  o.caf_port = 1;
  auto t0 = frame_tunnel::open(o);
  REQUIRE(t0.ok());
  int c = connect_local((*t0)->outbound_port(1));
  const std::vector<uint8_t> msg = {1, 2, 3, 4, 5};
  (void)!::send(c, msg.data(), msg.size(), MSG_NOSIGNAL);
  CHECK(read_exactly(c, msg.size()) == msg);
  ::close(c);
}

TEST_CASE("frame tunnel: silent connections are closed after the hello timeout and capped") {
  echo_service echo;
  tunnel_options o = front_of_node_1(echo.port);
  o.hello_timeout_s = 0.3;
  o.pending_max = 3;
  auto t = frame_tunnel::open(o);
  REQUIRE(t.ok());
  const uint16_t front = (*t)->front_port();
  {
    std::vector<std::unique_ptr<front_client>> idle;
    for (int i = 0; i < 8; ++i) idle.push_back(std::make_unique<front_client>(front));
    CHECK(eventually([&] { return (*t)->stats().over_capacity == 5; }));
    CHECK(eventually([&] { return (*t)->stats().hello_timeout == 3; }));
    for (auto& c : idle) CHECK(c->wait_closed());
  }
  front_client c(front);
  c.answer(0, 5);
  c.write(frame(0x46544c44, 2));
  c.write({'o', 'k'});
  CHECK(eventually([&] { return echo.received == 2; }));
}
