// Tensor payloads between two processes: an outer gradient carrying a 16 MiB blob (and one of
// the int4-encoded size of 16 MiB of floats) through CAF's middleman alone, and with the blob on
// the bulk channel (net/bulk_channel.hpp, what deployed nodes use: the message goes through the
// middleman with a reference, the receiver resolves it while deserializing), against a raw TCP
// stream of the same bytes on loopback, measured in the same run. The receiver acknowledges
// every message, the sender keeps `window` messages in flight. Prints GB/s and the ratios to
// raw TCP (issue 6 target: >= 0.70).
// With --certs DIR (made by scripts/make-certs.sh DIR a b) also the bulk channel over mutual
// TLS, against the same raw TCP stream (unencrypted: what TLS costs shows in the ratio).
// usage: bench_transport [--mib 16] [--messages 24] [--window 4] [--certs DIR] [--only tls]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "net/bulk_channel.hpp"
#include "protocol/type_ids.hpp"
#include "tensor/codec.hpp"

using namespace diloco;

namespace {

constexpr uint16_t tcp_port = 24901;
constexpr uint16_t caf_port = 24902;
constexpr uint16_t bulk_ports[2] = {24903, 24904};

// The bulk channel of this process (node 0 sends, node 1 receives), and its resolver.
std::unique_ptr<bulk_channel> channel;
std::string certs;  // "": plain TCP
// The messages here go right after their push, not after the acknowledgement as a node's do,
// so the receiver waits for the bytes (the throughput is the channel's either way).
tensor_blob::bytes_ptr resolve(uint64_t id, uint64_t size) {
  return channel->take(id, size, 30);
}
void open_channel(uint32_t self) {
  bulk_options o;
  o.self = self;
  o.peers = {{"127.0.0.1", bulk_ports[0]}, {"127.0.0.1", bulk_ports[1]}};
  o.listen_host = "127.0.0.1";
  o.listen_port = bulk_ports[self];
  o.identity = 0xbe7c4;
  if (!certs.empty()) {
    const std::string name = self == 0 ? "a" : "b";
    o.tls_ca = certs + "/ca.pem";
    o.tls_certificate = certs + "/" + name + ".pem";
    o.tls_key = certs + "/" + name + ".key";
  }
  auto ch = bulk_channel::open(o);
  if (!ch) {
    std::fprintf(stderr, "bench_transport: %s\n", ch.error().message().c_str());
    std::exit(1);
  }
  channel = std::move(*ch);
  tensor_blob::set_resolver(&resolve);
}

// Raw TCP: the child writes `total` bytes; the parent reads them. Returns GB/s.
double raw_tcp(size_t total) {
  int srv = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(tcp_port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(srv, 1) != 0) {
    std::perror("bench_transport: raw tcp listen");
    std::exit(1);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    while (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::usleep(1000);
    std::vector<char> buf(1 << 20, 7);
    size_t sent = 0;
    while (sent < total) {
      const ssize_t n = ::write(c, buf.data(), std::min(buf.size(), total - sent));
      if (n <= 0) std::_Exit(1);
      sent += static_cast<size_t>(n);
    }
    ::close(c);
    std::_Exit(0);
  }
  int c = ::accept(srv, nullptr, nullptr);
  std::vector<char> buf(1 << 20);
  size_t got = 0;
  const double t0 = bench::now_s();
  while (got < total) {
    const ssize_t n = ::read(c, buf.data(), buf.size());
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  const double dt = bench::now_s() - t0;
  ::close(c);
  ::close(srv);
  ::waitpid(child, nullptr, 0);
  return static_cast<double>(got) / dt / 1e9;
}

caf::actor_system_config make_config() {
  caf::actor_system_config cfg;
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  register_protocol(cfg);
  cfg.load<caf::io::middleman>();
  return cfg;
}

// The child: publishes a sink that acknowledges each outer gradient, until told to quit.
[[noreturn]] void caf_receiver(bool bulk) {
  if (bulk) open_channel(1);
  auto cfg = make_config();
  caf::actor_system sys{cfg};
  auto sink = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {
        [](const outer_gradient_msg& m) { return static_cast<uint64_t>(m.delta.size()); },
        [self](caf::close_atom) { self->quit(); },
    };
  });
  if (!sys.middleman().publish(sink, caf_port, nullptr, true)) std::_Exit(1);
  caf::scoped_actor self{sys};
  self->wait_for(sink);
  std::_Exit(0);
}

// The parent: sends `count` messages of `bytes` each with `window` in flight. Returns GB/s.
double caf_send(size_t bytes, int count, int window, bool bulk) {
  if (bulk) open_channel(0);
  auto cfg = make_config();
  caf::actor_system sys{cfg};
  caf::expected<caf::actor> sink = caf::sec::none;
  for (int i = 0; i < 500 && !(sink = sys.middleman().remote_actor("127.0.0.1", caf_port)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!sink) {
    std::fprintf(stderr, "bench_transport: %s\n", sys.render(sink.error()).c_str());
    std::exit(1);
  }
  std::vector<uint8_t> payload(bytes);
  for (size_t i = 0; i < bytes; ++i) payload[i] = static_cast<uint8_t>(i * 131);
  outer_gradient_msg m;
  m.delta = tensor_blob(std::move(payload));
  caf::scoped_actor self{sys};
  // With the bulk channel, each message is sent as a deployed node sends it: the bytes go
  // ahead under a fresh id and the message carries the reference.
  auto next = [&] {
    if (!bulk) return m;
    outer_gradient_msg r = m;
    r.delta = tensor_blob::reference(channel->push(1, m.delta.shared_bytes()), m.delta.size());
    return r;
  };
  // Warm-up: the connection and the proxy.
  self->request(*sink, std::chrono::seconds(30), next())
      .receive([](uint64_t) {}, [](caf::error&) {});
  int sent = 0, acked = 0;
  const double t0 = bench::now_s();
  while (acked < count) {
    while (sent < count && sent - acked < window) {
      self->send(*sink, next());
      ++sent;
    }
    self->receive([&](uint64_t n) {
      if (n != bytes) std::exit(1);
      ++acked;
    });
  }
  const double dt = bench::now_s() - t0;
  self->send(*sink, caf::close_atom_v);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  tensor_blob::set_resolver(nullptr);
  channel.reset();
  return static_cast<double>(bytes) * count / dt / 1e9;
}

double middleman(size_t bytes, int count, int window, bool bulk) {
  const pid_t child = ::fork();
  if (child == 0) caf_receiver(bulk);
  const double gbs = caf_send(bytes, count, window, bulk);
  ::waitpid(child, nullptr, 0);
  return gbs;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 16;
  int messages = 24, window = 4;
  std::string only;  // "tls": raw TCP and the bulk channel over TLS only
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--messages") == 0) messages = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--window") == 0) window = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--certs") == 0) certs = argv[i + 1];
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  if (!only.empty() && only != "tls") {
    std::fprintf(stderr, "bench_transport: --only takes tls (raw TCP and TLS only)\n");
    return 2;
  }
  if (only == "tls" && certs.empty()) {
    std::fprintf(stderr, "bench_transport: --only tls needs --certs DIR\n");
    return 2;
  }
  const size_t full = mib << 20;
  // The int4 blob of the same tensor: 16 MiB of floats is 4 Mi values.
  const size_t int4 = encoded_bytes(codec_config::make(codec_kind::int4), full / sizeof(float));
  for (size_t bytes : {full, int4}) {
    const double raw = raw_tcp(bytes * static_cast<size_t>(messages));
    if (only.empty()) {
      const double caf = middleman(bytes, messages, window, false);
      const std::string tls_dir = certs;
      certs.clear();
      const double bulk = middleman(bytes, messages, window, true);
      certs = tls_dir;
      std::printf(
          "%-26s raw TCP %5.2f GB/s  middleman %5.2f GB/s (ratio %.3f)  bulk channel %5.2f GB/s "
          "(ratio %.3f)\n",
          bytes == full ? "fragment, 16 MiB raw bytes" : "fragment, int4-encoded", raw, caf,
          caf / raw, bulk, bulk / raw);
    } else {
      std::printf("%-26s raw TCP %5.2f GB/s\n",
                  bytes == full ? "fragment, 16 MiB raw bytes" : "fragment, int4-encoded", raw);
    }
    if (!certs.empty()) {
      const double tls = middleman(bytes, messages, window, true);
      std::printf("%-26s bulk channel over mutual TLS %5.2f GB/s (ratio %.3f to raw TCP)\n", "",
                  tls, tls / raw);
    }
    std::fflush(stdout);
  }
  return 0;
}
