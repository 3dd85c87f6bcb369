#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "tests/catch.hpp"

#include "tensor/data.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;

TEST_CASE("data: entropy rate of a two-state chain matches the closed form") {
  markov_config c;
  c.order = 1;
  c.alphabet = 2;
  c.concentration = 1.0;
  auto mc = markov_chain::build(c);
  REQUIRE(mc.ok());
  const double p01 = mc->transition(0, 1), p10 = mc->transition(1, 0);
  const double pi0 = p10 / (p01 + p10), pi1 = 1 - pi0;
  auto h = [](double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); };
  CHECK(mc->stationary()[0] == Approx(pi0).epsilon(1e-12));
  CHECK(mc->entropy_rate_nats() == Approx(pi0 * h(p01) + pi1 * h(p10)).epsilon(1e-12));
}

TEST_CASE("data: the stationary law is stationary and rows are distributions") {
  markov_config c;  // default: order 2, alphabet 16
  auto mc = markov_chain::build(c);
  REQUIRE(mc.ok());
  const auto& pi = mc->stationary();
  std::vector<double> next(mc->states(), 0.0);
  for (size_t s = 0; s < mc->states(); ++s) {
    double row = 0;
    for (int a = 0; a < mc->alphabet(); ++a) {
      REQUIRE(mc->transition(s, a) > 0.0);
      row += mc->transition(s, a);
      next[mc->next_state(s, a)] += pi[s] * mc->transition(s, a);
    }
    REQUIRE(row == Approx(1.0).epsilon(1e-12));
  }
  for (size_t s = 0; s < mc->states(); ++s) REQUIRE(next[s] == Approx(pi[s]).margin(1e-13));
  CHECK(mc->entropy_rate_nats() > 0.0);
  CHECK(mc->entropy_rate_nats() < std::log(16.0));
}

TEST_CASE("data: sampled streams have the computed entropy rate (empirically)") {
  data_config dc;
  auto src = data_source::build(dc, 4);
  REQUIRE(src.ok());
  const markov_chain& mc = *(*src)->chain();
  data_cursor cur = (*src)->open_shard(3, 0, 1, 32);
  std::vector<uint8_t> ctx(32 * 4), tgt(32);
  // Symbols come back as bytes 32 + symbol; recover the chain state from the last `order` bytes.
  double nll = 0;
  size_t n = 0;
  for (int step = 0; step < 4000; ++step) {
    (*src)->next_batch(cur, ctx.data(), tgt.data());
    for (int b = 0; b < 32; ++b) {
      const size_t state =
          static_cast<size_t>(ctx[b * 4 + 2] - 32) * mc.alphabet() + (ctx[b * 4 + 3] - 32);
      nll -= std::log(mc.transition(state, tgt[b] - 32));
      ++n;
    }
  }
  CHECK(cur.tokens == n);
  CHECK(nll / n == Approx(mc.entropy_rate_nats()).epsilon(0.01));
}

TEST_CASE("data: the evaluation set's floor is the true model's loss on it") {
  // Recomputed from the set itself (the chain state from the last `order` bytes of each
  // context), as the sampling test above does; a large set's floor meets the entropy rate, the
  // default one (16,384 tokens) sits off it by its sampling error.
  for (const int tokens : {16384, 1 << 20}) {
    data_config dc;
    dc.eval_tokens = tokens;
    auto src = data_source::build(dc, 4);
    REQUIRE(src.ok());
    const markov_chain& mc = *(*src)->chain();
    const auto& ctx = (*src)->eval_contexts();
    const auto& tgt = (*src)->eval_targets();
    REQUIRE(tgt.size() == static_cast<size_t>(tokens));
    double nll = 0;
    for (size_t i = 0; i < tgt.size(); ++i) {
      const size_t state =
          static_cast<size_t>(ctx[i * 4 + 2] - 32) * mc.alphabet() + (ctx[i * 4 + 3] - 32);
      nll -= std::log(mc.transition(state, tgt[i] - 32));
    }
    CAPTURE(tokens, (*src)->eval_floor_nats(), mc.entropy_rate_nats());
    CHECK((*src)->eval_floor_nats() ==
          Approx(nll / static_cast<double>(tgt.size())).epsilon(1e-12));
    if (tokens == 16384) {
      CHECK(std::fabs((*src)->eval_floor_nats() - mc.entropy_rate_nats()) > 1e-3);
    } else {
      CHECK((*src)->eval_floor_nats() == Approx(mc.entropy_rate_nats()).epsilon(0.002));
    }
  }
}

TEST_CASE("data: shards are deterministic in (seed, index) and differ between learners") {
  data_config dc;
  auto src = data_source::build(dc, 8);
  REQUIRE(src.ok());
  auto batches = [&](uint64_t seed, int index) {
    data_cursor cur = (*src)->open_shard(seed, index, 4, 16);
    std::vector<uint8_t> ctx(16 * 8), tgt(16), all;
    for (int s = 0; s < 10; ++s) {
      (*src)->next_batch(cur, ctx.data(), tgt.data());
      all.insert(all.end(), tgt.begin(), tgt.end());
    }
    return all;
  };
  CHECK(batches(1, 0) == batches(1, 0));
  CHECK(batches(1, 0) != batches(1, 1));
  CHECK(batches(1, 0) != batches(2, 0));
  // The evaluation set depends on the data config only.
  auto again = data_source::build(dc, 8);
  CHECK((*again)->eval_targets() == (*src)->eval_targets());
  CHECK((*src)->eval_targets().size() == static_cast<size_t>(dc.eval_tokens));
}

namespace {
// 1000 bytes of letters: a text whose every byte says where it is modulo 26.
std::string cyclic_text() {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  return text;
}
}  // namespace

TEST_CASE("data: text files split contiguous: disjoint slices, read in order") {
  testing::temp_dir dir;
  const std::string text = cyclic_text();
  data_config dc;
  dc.text_file = dir.write("t.txt", text);
  dc.contiguous = true;
  auto src = data_source::build(dc, 3);
  REQUIRE(src.ok());
  CHECK_FALSE((*src)->synthetic());
  CHECK((*src)->entropy_rate_nats() < 0);
  CHECK((*src)->eval_targets().size() == 100);  // 10% held out
  uint64_t prev_end = 0;
  for (int m = 0; m < 3; ++m) {
    data_cursor cur = (*src)->open_shard(1, m, 3, 4);
    CHECK(cur.shard_begin == prev_end);
    prev_end = cur.shard_end;
    std::vector<uint8_t> ctx(4 * 3), tgt(4);
    for (int s = 0; s < 500; ++s) {  // wraps around the 300-byte shard
      const auto pos = cur.position;
      (*src)->next_batch(cur, ctx.data(), tgt.data());
      for (int b = 0; b < 4; ++b) {
        REQUIRE(pos[b] >= cur.shard_begin);
        REQUIRE(pos[b] < cur.shard_end);
        REQUIRE(tgt[b] == static_cast<uint8_t>(text[pos[b]]));
        if (pos[b] >= 3) REQUIRE(ctx[b * 3 + 2] == static_cast<uint8_t>(text[pos[b] - 1]));
      }
    }
  }
  CHECK(prev_end == 900);
}

TEST_CASE("data: text files shuffled (the default): each learner samples the whole text") {
  testing::temp_dir dir;
  const std::string text = cyclic_text();
  data_config dc;
  dc.text_file = dir.write("t.txt", text);
  auto src = data_source::build(dc, 3);
  REQUIRE(src.ok());
  std::vector<std::vector<uint64_t>> seen(3);
  for (int m = 0; m < 3; ++m) {
    data_cursor cur = (*src)->open_shard(1, m, 3, 4);
    CHECK(cur.shard_begin == 0);
    CHECK(cur.shard_end == 900);  // the whole training part
    std::vector<uint8_t> ctx(4 * 3), tgt(4);
    for (int s = 0; s < 500; ++s) {
      (*src)->next_batch(cur, ctx.data(), tgt.data());
      for (int b = 0; b < 4; ++b) {
        // The target is the byte after the position drawn (position holds the next one).
        const uint64_t pos = cur.position[b] == 0 ? 899 : cur.position[b] - 1;
        REQUIRE(pos < 900);
        REQUIRE(tgt[b] == static_cast<uint8_t>(text[pos]));
        if (pos >= 3) REQUIRE(ctx[b * 3 + 2] == static_cast<uint8_t>(text[pos - 1]));
        seen[m].push_back(pos);
      }
    }
  }
  for (int m = 0; m < 3; ++m) {
    // 2000 draws from 900 positions: about 1 - e^-2.2 = 89% of them, spread over the text.
    std::vector<uint64_t> distinct = seen[m];
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    CHECK(distinct.size() > 750);
    CHECK(distinct.front() < 30);
    CHECK(distinct.back() > 870);
  }
  CHECK(seen[0] != seen[1]);  // each learner its own order
  // Deterministic in (seed, index), and a copied cursor (what a snapshot keeps) continues the
  // same way.
  data_cursor a = (*src)->open_shard(7, 1, 3, 4), b = (*src)->open_shard(7, 1, 3, 4);
  std::vector<uint8_t> ca(12), ta(4), cb(12), tb(4);
  for (int s = 0; s < 50; ++s) {
    (*src)->next_batch(a, ca.data(), ta.data());
    (*src)->next_batch(b, cb.data(), tb.data());
    REQUIRE(ta == tb);
  }
  data_cursor copy = a;
  (*src)->next_batch(a, ca.data(), ta.data());
  (*src)->next_batch(copy, cb.data(), tb.data());
  CHECK(ta == tb);
}

TEST_CASE("data: bad text files give errors that name the file and the problem") {
  testing::temp_dir dir;
  data_config dc;
  dc.text_file = dir.file("missing.txt");
  auto r = data_source::build(dc, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == errc::not_found);
  CHECK(r.error().message().find("missing.txt") != std::string::npos);

  dc.text_file = dir.write("empty.txt", "");
  r = data_source::build(dc, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("empty") != std::string::npos);

  dc.text_file = dir.write("bin.txt", std::string("hello\0world, this is long enough", 32));
  r = data_source::build(dc, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == errc::corrupt_data);
  CHECK(r.error().message().find("offset 5") != std::string::npos);

  dc.text_file = dir.write("short.txt", "abc");
  r = data_source::build(dc, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("need at least") != std::string::npos);

  dc.text_file = dir.path().string();
  r = data_source::build(dc, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("not a regular file") != std::string::npos);
}

TEST_CASE("data: config validation") {
  data_config dc;
  dc.markov.order = 9;
  CHECK(dc.validate().message().find("data.markov.order") != std::string::npos);
  dc = data_config{};
  dc.markov.alphabet = 256;
  dc.markov.order = 3;  // 256^4 transitions is too many
  CHECK_FALSE(dc.validate().ok());
  dc = data_config{};
  dc.eval_fraction = 1.0;
  CHECK(dc.validate().message().find("eval_fraction") != std::string::npos);
}
