// The framing front: bytes cross a pair of tunnels intact in both directions; a connection
// to the front that is not a hello of this run, or that breaks the framing, is closed and
// counted without a byte reaching the service behind it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "net/frame_tunnel.hpp"

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
          (void)!::write(c, buf, static_cast<size_t>(n));
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
  std::thread writer([&] { (void)!::write(c, msg.data(), msg.size()); });
  const auto back = read_exactly(c, msg.size());
  writer.join();
  CHECK(back == msg);
  CHECK(echo.received == msg.size());
  ::close(c);
  CHECK(eventually([&] { return (*t1)->stats().tunnels == 1; }));
  CHECK((*t0)->outbound_port(0) == 0);
}

TEST_CASE("frame tunnel: input that is not framed for this run never reaches the service") {
  echo_service echo;
  tunnel_options o;
  o.peers = {{"127.0.0.1", 1}, {"127.0.0.1", 0}};
  o.listen_host = "127.0.0.1";
  o.identity = 5;
  o.self = 1;
  o.caf_port = echo.port;
  o.max_frame_bytes = 1024;
  auto t = frame_tunnel::open(o);
  REQUIRE(t.ok());
  const uint16_t front = (*t)->front_port();
  auto hello = [](uint32_t node, uint64_t identity) {
    std::vector<uint8_t> h(24, 0);
    const uint32_t magic = 0x48544c44;
    std::memcpy(h.data(), &magic, 4);
    h[4] = 1;
    std::memcpy(h.data() + 8, &node, 4);
    std::memcpy(h.data() + 16, &identity, 8);
    return h;
  };
  auto frame = [](uint32_t magic, uint32_t length) {
    std::vector<uint8_t> f(8);
    std::memcpy(f.data(), &magic, 4);
    std::memcpy(f.data() + 4, &length, 4);
    return f;
  };
  auto send = [&](std::vector<std::vector<uint8_t>> parts) {
    int c = connect_local(front);
    for (const auto& p : parts) (void)!::write(c, p.data(), p.size());
    timeval tv{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char x[16];
    while (::read(c, x, sizeof x) > 0) {
    }
    ::close(c);
  };
  send({std::vector<uint8_t>(100, 0xee)});  // garbage
  send({hello(0, 6)});                      // another run
  send({hello(1, 5)});                      // the node itself
  CHECK(eventually([&] { return (*t)->stats().bad_hello == 3; }));
  send({hello(0, 5), frame(0x12345678, 10)});  // bad frame magic
  send({hello(0, 5), frame(0x46544c44, 0)});   // empty frame
  CHECK(eventually([&] { return (*t)->stats().bad_frame == 2; }));
  send({hello(0, 5), frame(0x46544c44, 1'000'000)});  // above the limit
  CHECK(eventually([&] { return (*t)->stats().oversized == 1; }));
  send({hello(0, 5), frame(0x46544c44, 500), std::vector<uint8_t>(100, 1)});  // cut short
  CHECK(eventually([&] { return (*t)->stats().truncated == 1; }));
  // Nothing of it reached the service (after a good hello a connection to it is opened, and
  // closed without a byte when the framing breaks).
  CHECK(echo.received == 0);
  // A well-framed hello and frame of this run do.
  int c = connect_local(front);
  auto h = hello(0, 5);
  auto f = frame(0x46544c44, 3);
  (void)!::write(c, h.data(), h.size());
  (void)!::write(c, f.data(), f.size());
  (void)!::write(c, "abc", 3);
  CHECK(eventually([&] { return echo.received == 3; }));
  ::close(c);
}
