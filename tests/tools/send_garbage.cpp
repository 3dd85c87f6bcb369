// Test helper: hostile input to a node's port. Connects to HOST:PORT several times and sends,
// each on its own connection: random bytes; a header-sized block claiming a 4 GiB payload; a
// truncated header followed by a close; and nothing at all (connect and close).
// usage: send_garbage HOST PORT [ROUNDS]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

int connect_to(const char* host, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host, &a.sin_addr);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

bool send_and_close(const char* host, uint16_t port, const std::vector<uint8_t>& bytes) {
  int s = connect_to(host, port);
  if (s < 0) return false;
  if (!bytes.empty()) (void)!::write(s, bytes.data(), bytes.size());
  ::usleep(20000);
  ::close(s);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: send_garbage HOST PORT [ROUNDS]\n");
    return 2;
  }
  const char* host = argv[1];
  const auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  std::mt19937 gen(42);
  int sent = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint8_t> noise(4096);
    for (auto& b : noise) b = static_cast<uint8_t>(gen());
    std::vector<uint8_t> huge(64, 0);
    std::memset(huge.data() + 8, 0xff, 8);  // length fields: as large as they go
    std::memset(huge.data() + 16, 0xff, 8);
    sent += send_and_close(host, port, noise);
    sent += send_and_close(host, port, huge);
    sent += send_and_close(host, port, std::vector<uint8_t>(noise.begin(), noise.begin() + 7));
    sent += send_and_close(host, port, {});
  }
  std::printf("send_garbage: %d hostile connections to %s:%u\n", sent, host, port);
  return sent == 4 * rounds ? 0 : 1;
}
