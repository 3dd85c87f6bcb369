#include "net/handshake.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <iterator>
#include <random>

#include "base/check.hpp"

namespace diloco {

namespace {

std::array<uint8_t, tag_size> tag_of(const hello_key& key, const challenge_bytes& challenge,
                                     const uint8_t* hello) {
  std::array<uint8_t, challenge_size + hello_size> text{};
  std::copy(challenge.begin(), challenge.end(), text.begin());
  std::copy(hello, hello + hello_size, text.begin() + challenge_size);
  std::array<uint8_t, tag_size> out{};
  unsigned int n = 0;
  const uint8_t* made = HMAC(EVP_sha256(), key.bytes.data(), static_cast<int>(key.bytes.size()),
                             text.data(), text.size(), out.data(), &n);
  DILOCO_CHECK(made != nullptr && n == tag_size, "handshake: HMAC made a tag of its size");
  return out;
}

}  // namespace

hello_key hello_key::of_identity(uint64_t identity) {
  hello_key k;
  k.bytes.resize(8);
  le::put(reinterpret_cast<uint8_t*>(k.bytes.data()), identity, 8);
  return k;
}

hello_key hello_key::of_secret(std::string secret) {
  hello_key k;
  k.bytes = std::move(secret);
  k.secret = true;
  return k;
}

result<std::string> read_secret_file(const std::string& path) {
  constexpr size_t secret_bytes_min = 16, secret_bytes_max = 4096;
  std::ifstream in(path, std::ios::binary);
  if (!in) return status(errc::not_found, "secret_file: " + path + ": cannot be read");
  std::string s;
  s.resize(secret_bytes_max + 1);
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  if (s.size() > secret_bytes_max) {
    return status(errc::invalid_argument, "secret_file: " + path + ": longer than " +
                                              std::to_string(secret_bytes_max) + " bytes");
  }
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && space(s[lead])) ++lead;
  s.erase(0, lead);
  if (s.size() < secret_bytes_min) {
    return status(errc::invalid_argument, "secret_file: " + path + ": " + std::to_string(s.size()) +
                                              " bytes, need at least " +
                                              std::to_string(secret_bytes_min) +
                                              " (e.g. openssl rand -hex 32 > " + path + ")");
  }
  return s;
}

challenge_bytes make_challenge(uint32_t magic, uint16_t version, bool secret_required) {
  challenge_bytes c{};
  le::put(c.data(), magic, 4);
  le::put(c.data() + 4, version, 2);
  le::put(c.data() + 6, secret_required ? 1 : 0, 2);
  if (RAND_bytes(c.data() + 8, 16) != 1) {
    // OpenSSL's generator failed (no entropy): the nonce must still differ per connection.
    std::random_device rd;
    for (size_t i = 8; i < challenge_size; ++i) c[i] = static_cast<uint8_t>(rd());
  }
  return c;
}

challenge_fields get_challenge(const uint8_t* p) {
  return {static_cast<uint32_t>(le::get(p, 4)), static_cast<uint16_t>(le::get(p + 4, 2)),
          (le::get(p + 6, 2) & 1) != 0};
}

answer_bytes make_answer(const hello_key& key, const challenge_bytes& challenge,
                         const hello_fields& hello) {
  answer_bytes a{};
  put_hello(a.data(), hello);
  const auto tag = tag_of(key, challenge, a.data());
  std::copy(tag.begin(), tag.end(), a.begin() + hello_size);
  return a;
}

hello_verdict check_answer(const answer_bytes& answer, const challenge_bytes& challenge,
                           const hello_key& key, const hello_expected& e) {
  const hello_fields h = get_hello(answer.data());
  if (h.magic != e.magic || h.version != e.version) return hello_verdict::malformed;
  if (h.identity != e.identity) return hello_verdict::other_run;
  if (h.node >= e.nodes || h.node == e.self) return hello_verdict::unknown_node;
  if (!answer_tag_valid(key, challenge, answer)) return hello_verdict::bad_tag;
  return hello_verdict::ok;
}

bool answer_tag_valid(const hello_key& key, const challenge_bytes& challenge,
                      const answer_bytes& answer) {
  const auto want = tag_of(key, challenge, answer.data());
  return CRYPTO_memcmp(want.data(), answer.data() + hello_size, tag_size) == 0;
}

}  // namespace diloco
