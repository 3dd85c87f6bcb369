// Test helper: a hostile client that knows the cluster file (so it can compute the run's
// identity and answer a node's challenge as a node of the run would, when the run has no
// secret) and attacks one port of a live node.
//
// usage: hostile_peer CLUSTER_FILE HOST PORT MODE [ARG] [--secret FILE]
//   front-frame      answer the front's challenge as node 0, then send one frame of 64 random
//                    bytes (CAF 0.17.6's middleman crashes on it if it gets through)
//   front-huge       answer the front's challenge as node 0 (a holder of the secret, with
//                    --secret), then send 8 frames of a middleman (BASP) header declaring a
//                    4 GiB payload and 32 bytes of it (CAF allocates what a header declares)
//   bulk-huge        answer the bulk channel's challenge as node 0, then send a header claiming
//                    a 2 GiB payload and 1 MiB of it
//   bulk-claims N M  N connections that each answer, claim a frame of M MiB and send 1 MiB of
//                    it, held open 3 s
//   idle N SECONDS   N connections that send nothing, held open SECONDS; prints how many the
//                    node closed
// Prints one line saying what the node did: "closed" / "open" and counts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "config/identity.hpp"
#include "config/resolve.hpp"
#include "net/handshake.hpp"

using namespace diloco;

namespace {

int connect_to(const std::string& host, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

bool read_all(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Answers the node's challenge as node 0 of the run; false if the node closed first.
bool answer(int fd, uint32_t hello_magic, uint64_t identity, const hello_key& key) {
  challenge_bytes c{};
  if (!read_all(fd, c.data(), c.size())) return false;
  // The version the node asks for (the tunnel's and the bulk channel's differ).
  const auto a = make_answer(key, c, {hello_magic, get_challenge(c.data()).version, 0, identity});
  return write_all(fd, a.data(), a.size());
}

// Whether the node closed the connection within `seconds` (what it sends is passed over).
bool closed_within(int fd, double seconds) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(seconds));
  char buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::vector<uint8_t> bulk_header(uint64_t id, uint64_t length) {
  std::vector<uint8_t> h;
  put(h, 0x46424c44, 4);
  put(h, 0, 4);
  put(h, id, 8);
  put(h, length, 8);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::string secret_file;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--secret" && i + 1 < argc) {
      secret_file = argv[++i];
    } else {
      args.emplace_back(argv[i]);
    }
  }
  if (args.size() < 4) {
    std::fprintf(stderr, "usage: hostile_peer CLUSTER_FILE HOST PORT MODE [ARG...] [--secret F]\n");
    return 2;
  }
  auto config = resolve_config(args[0], {});
  if (!config) {
    std::fprintf(stderr, "hostile_peer: %s\n", config.error().message().c_str());
    return 2;
  }
  const uint64_t identity = cluster_identity(*config);
  hello_key key = hello_key::of_identity(identity);
  if (!secret_file.empty()) {
    auto s = read_secret_file(secret_file);
    if (!s) {
      std::fprintf(stderr, "hostile_peer: %s\n", s.error().message().c_str());
      return 2;
    }
    key = hello_key::of_secret(*s);
  }
  const std::string& host = args[1];
  const auto port = static_cast<uint16_t>(std::atoi(args[2].c_str()));
  const std::string& mode = args[3];
  std::mt19937 gen(7);

  if (mode == "front-frame") {
    int fd = connect_to(host, port);
    if (fd < 0) return 1;
    const bool through = answer(fd, 0x48544c44, identity, key);
    std::vector<uint8_t> f;
    put(f, 0x46544c44, 4);
    put(f, 64, 4);
    // A BASP header of operation ARG (random when absent) claiming a 40-byte payload, and 40
    // random bytes.
    const int op = args.size() > 4 ? std::atoi(args[4].c_str()) : -1;
    for (int i = 0; i < 64; ++i) f.push_back(static_cast<uint8_t>(gen()));
    if (op >= 0) {
      f[8] = static_cast<uint8_t>(op);
      f[8 + 3] = 0;
      f[8 + 4] = 40;
      f[8 + 5] = f[8 + 6] = f[8 + 7] = 0;
    }
    write_all(fd, f.data(), f.size());
    const bool closed = closed_within(fd, 3);
    std::printf("hostile_peer front-frame: answered %s, connection %s\n", through ? "yes" : "no",
                closed ? "closed" : "open");
    ::close(fd);
    return 0;
  }
  if (mode == "front-huge") {
    int fd = connect_to(host, port);
    if (fd < 0) return 1;
    const bool through = answer(fd, 0x48544c44, identity, key);
    for (int k = 0; k < 8; ++k) {
      std::vector<uint8_t> f;
      put(f, 0x46544c44, 4);
      put(f, 64, 4);
      std::vector<uint8_t> basp(64, 0);
      basp[0] = 1;  // a direct message
      basp[4] = basp[5] = basp[6] = 0xff;
      basp[7] = 0xf0;  // 4 GiB - 16, big endian
      f.insert(f.end(), basp.begin(), basp.end());
      write_all(fd, f.data(), f.size());
    }
    const bool closed = closed_within(fd, 3);
    std::printf("hostile_peer front-huge: answered %s, connection %s\n", through ? "yes" : "no",
                closed ? "closed" : "open");
    ::close(fd);
    return 0;
  }
  if (mode == "bulk-huge" || mode == "bulk-claims") {
    const int n = mode == "bulk-huge" ? 1 : std::atoi(args.size() > 4 ? args[4].c_str() : "3");
    const uint64_t claim = mode == "bulk-huge" ? uint64_t{1} << 31 : 0;
    std::vector<int> fds;
    for (int k = 0; k < n; ++k) {
      int fd = connect_to(host, port);
      if (fd < 0) return 1;
      answer(fd, 0x48424c44, identity, key);
      const uint64_t mib = std::strtoull(args.size() > 5 ? args[5].c_str() : "16", nullptr, 10);
      const auto h = bulk_header(static_cast<uint64_t>(k + 1), claim != 0 ? claim : mib << 20);
      write_all(fd, h.data(), h.size());
      std::vector<uint8_t> some(1 << 20, 0x5a);
      write_all(fd, some.data(), some.size());
      fds.push_back(fd);
    }
    int closed = 0;
    for (int fd : fds) closed += closed_within(fd, 3) ? 1 : 0;
    for (int fd : fds) ::close(fd);
    std::printf("hostile_peer %s: %d of %d connections closed\n", mode.c_str(), closed, n);
    return 0;
  }
  if (mode == "idle") {
    const int n = std::atoi(args.size() > 4 ? args[4].c_str() : "100");
    const double hold_s = std::atof(args.size() > 5 ? args[5].c_str() : "10");
    std::vector<int> fds;
    for (int k = 0; k < n; ++k) {
      int fd = connect_to(host, port);
      if (fd >= 0) fds.push_back(fd);
    }
    int closed = 0;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(hold_s));
    std::vector<bool> done(fds.size(), false);
    char buf[256];
    while (std::chrono::steady_clock::now() < until && closed < static_cast<int>(fds.size())) {
      std::vector<pollfd> ps;
      for (int fd : fds) ps.push_back({fd, POLLIN, 0});
      if (::poll(ps.data(), ps.size(), 100) <= 0) continue;
      for (size_t k = 0; k < ps.size(); ++k) {
        if (done[k] || !(ps[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t r = ::read(fds[k], buf, sizeof buf);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) {
          done[k] = true;
          ++closed;
        }
      }
    }
    for (int fd : fds) ::close(fd);
    std::printf("hostile_peer idle: %d of %zu connections opened, %d closed by the node\n", n,
                fds.size(), closed);
    return 0;
  }
  std::fprintf(stderr, "hostile_peer: unknown mode '%s'\n", mode.c_str());
  return 2;
}
