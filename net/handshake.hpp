// How a connection to either public port of a node (the framing front and the bulk channel)
// proves it comes from a node of this run, before anything else it sends is read.
//
// The accepting side speaks first: a challenge of 24 bytes,
//   magic (u32, the protocol's), version (u16), flags (u16, bit 0: a secret is required),
//   nonce (16 random bytes).
// The connecting side answers with its hello (net/le.hpp, 24 bytes) and a tag of 32 bytes,
//   HMAC-SHA256(key, challenge || hello),
// where the key is the run's shared secret (the cluster file's `secret_file`). A run without a
// secret keys the tag with the run identity, which anyone holding the cluster file can
// compute: it then tells nodes of other runs apart, and authenticates nobody (docs/deploy.md).
// A fresh nonce per connection means a recorded answer does not open another connection.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/status.hpp"
#include "net/le.hpp"

namespace diloco {

constexpr size_t challenge_size = 24;
constexpr size_t tag_size = 32;
constexpr size_t answer_size = hello_size + tag_size;

using challenge_bytes = std::array<uint8_t, challenge_size>;
using answer_bytes = std::array<uint8_t, answer_size>;

// The key both sides tag hellos with: the shared secret's bytes, or the run identity's.
struct hello_key {
  std::string bytes;
  bool secret = false;  // a real shared secret (not derivable from the cluster file)
  static hello_key of_identity(uint64_t identity);
  static hello_key of_secret(std::string secret);
};

// The shared secret of a run from a file: at least 16 bytes, at most 4 KiB; surrounding white
// space is not part of it. Errors name the file and what is wrong.
result<std::string> read_secret_file(const std::string& path);

challenge_bytes make_challenge(uint32_t magic, uint16_t version, bool secret_required);
struct challenge_fields {
  uint32_t magic = 0;
  uint16_t version = 0;
  bool secret_required = false;
};
challenge_fields get_challenge(const uint8_t* p);

// The connecting side's answer to `challenge`: its hello and the tag over both.
answer_bytes make_answer(const hello_key& key, const challenge_bytes& challenge,
                         const hello_fields& hello);
// The accepting side's check of an answer: the tag, in constant time. The hello's fields are
// the caller's to check.
bool answer_tag_valid(const hello_key& key, const challenge_bytes& challenge,
                      const answer_bytes& answer);

// What an accepting node expects of a hello: its protocol and the run, of `nodes` nodes.
struct hello_expected {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint64_t identity = 0;
  uint32_t nodes = 0;
  uint32_t self = 0;  // the accepting node (a hello from itself is refused)
};
enum class hello_verdict {
  ok,
  malformed,     // another protocol or version
  other_run,     // the identity of another cluster file
  unknown_node,  // no such node, or the accepting node itself
  bad_tag,       // not tagged with this run's key
};
// The answer's hello checked field by field, in that order, then its tag.
hello_verdict check_answer(const answer_bytes& answer, const challenge_bytes& challenge,
                           const hello_key& key, const hello_expected& expected);

}  // namespace diloco
