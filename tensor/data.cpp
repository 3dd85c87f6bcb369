#include "tensor/data.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "base/check.hpp"

namespace diloco {

status markov_config::validate() const {
  auto bad = [](const char* f, const std::string& w) {
    return status(errc::invalid_argument, std::string("data.markov.") + f + ": " + w);
  };
  if (order < 1 || order > 8) return bad("order", "must be in [1, 8]");
  if (alphabet < 2 || alphabet > 256) return bad("alphabet", "must be in [2, 256]");
  if (std::pow(static_cast<double>(alphabet), order + 1) > 16.0 * 1024 * 1024) {
    return bad("order", "alphabet^(order+1) must be at most 2^24 transition probabilities");
  }
  if (!(concentration > 0 && concentration <= 100))
    return bad("concentration", "must be in (0, 100]");
  return {};
}

status data_config::validate() const {
  if (text_file.empty()) {
    if (auto st = markov.validate(); !st.ok()) return st;
  }
  if (!(eval_fraction > 0 && eval_fraction < 1)) {
    return status(errc::invalid_argument, "data.eval_fraction: must be in (0, 1)");
  }
  if (eval_tokens < 1 || eval_tokens > (1 << 24)) {
    return status(errc::invalid_argument, "data.eval_tokens: must be in [1, 16777216]");
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Markov chain

result<markov_chain> markov_chain::build(const markov_config& config) {
  if (auto st = config.validate(); !st.ok()) return st;
  markov_chain mc;
  mc.order_ = config.order;
  mc.alphabet_ = config.alphabet;
  mc.states_ = 1;
  for (int i = 0; i < config.order; ++i) mc.states_ *= static_cast<size_t>(config.alphabet);
  const size_t S = mc.states_, A = static_cast<size_t>(config.alphabet);

  // Each row is a Dirichlet(concentration) draw: gamma variates normalized. Every entry is
  // positive, so the chain is irreducible and aperiodic and its stationary law is unique.
  rng gen(derive_seed(config.seed, "data.markov", 0));
  mc.probs_.resize(S * A);
  mc.cumulative_.resize(S * A);
  for (size_t s = 0; s < S; ++s) {
    double sum = 0.0;
    for (size_t a = 0; a < A; ++a) {
      const double g = std::max(gen.gamma(config.concentration), 1e-300);
      mc.probs_[s * A + a] = g;
      sum += g;
    }
    double run = 0.0;
    for (size_t a = 0; a < A; ++a) {
      mc.probs_[s * A + a] /= sum;
      run += mc.probs_[s * A + a];
      mc.cumulative_[s * A + a] = run;
    }
    mc.cumulative_[s * A + A - 1] = 1.0;
  }

  // Stationary law by power iteration on the state chain (s -> next_state(s, a)), started
  // uniform; bounded iterations, converged when the L1 change is at the rounding level.
  std::vector<double> pi(S, 1.0 / static_cast<double>(S)), next(S);
  constexpr int iterations_max = 100000;
  for (int it = 0; it < iterations_max; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (size_t s = 0; s < S; ++s) {
      const double mass = pi[s];
      for (size_t a = 0; a < A; ++a)
        next[mc.next_state(s, static_cast<int>(a))] += mass * mc.probs_[s * A + a];
    }
    double change = 0.0, total = 0.0;
    for (size_t s = 0; s < S; ++s) total += next[s];
    for (size_t s = 0; s < S; ++s) {
      next[s] /= total;
      change += std::fabs(next[s] - pi[s]);
    }
    pi.swap(next);
    if (change < 1e-14) break;
  }
  mc.stationary_ = pi;
  mc.stationary_cumulative_.resize(S);
  double run = 0.0;
  for (size_t s = 0; s < S; ++s) mc.stationary_cumulative_[s] = (run += pi[s]);
  mc.stationary_cumulative_[S - 1] = 1.0;

  double h = 0.0;
  for (size_t s = 0; s < S; ++s) {
    double row = 0.0;
    for (size_t a = 0; a < A; ++a) {
      const double p = mc.probs_[s * A + a];
      if (p > 0) row -= p * std::log(p);
    }
    h += pi[s] * row;
  }
  mc.entropy_rate_ = h;
  return mc;
}

uint8_t markov_chain::byte_of(int symbol) const {
  DILOCO_CHECK(symbol >= 0 && symbol < alphabet_, "markov_chain: a symbol outside the alphabet");
  return static_cast<uint8_t>(alphabet_ <= 95 ? 32 + symbol : symbol);
}

namespace {
size_t sample_from(const double* cumulative, size_t n, double u) {
  const double* it = std::upper_bound(cumulative, cumulative + n, u);
  return std::min(static_cast<size_t>(it - cumulative), n - 1);
}
}  // namespace

int markov_chain::sample_symbol(size_t state, rng& gen) const {
  return static_cast<int>(sample_from(&cumulative_[state * alphabet_], alphabet_, gen.uniform()));
}

size_t markov_chain::sample_stationary_state(rng& gen) const {
  return sample_from(stationary_cumulative_.data(), states_, gen.uniform());
}

// ---------------------------------------------------------------------------------------------
// Data source

status data_source::load_text(const std::string& path, double eval_fraction) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return status(errc::not_found, path + ": cannot open data file: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return status(errc::invalid_argument, path + ": not a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return status(errc::io_error, path + ": cannot open data file: " + std::strerror(errno));
  }
  text_.resize(static_cast<size_t>(st.st_size));
  const size_t got = text_.empty() ? 0 : std::fread(text_.data(), 1, text_.size(), f);
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  if (read_error || got != text_.size()) {
    return status(errc::io_error, path + ": read " + std::to_string(got) + " of " +
                                      std::to_string(text_.size()) + " bytes");
  }
  if (text_.empty()) return status(errc::invalid_argument, path + ": data file is empty");
  // A text file has no NUL bytes; one means a binary or corrupted file was given by mistake.
  if (const void* nul = std::memchr(text_.data(), 0, text_.size())) {
    const auto at = static_cast<const uint8_t*>(nul) - text_.data();
    return status(errc::corrupt_data,
                  path + ": byte offset " + std::to_string(at) + " is NUL; expected a text file");
  }
  const size_t min_bytes = 2 * static_cast<size_t>(context_ + 1);
  if (text_.size() < min_bytes) {
    return status(errc::invalid_argument, path + ": " + std::to_string(text_.size()) +
                                              " bytes; need at least " + std::to_string(min_bytes) +
                                              " for a context of " + std::to_string(context_));
  }
  const auto eval_bytes = std::max<size_t>(1, static_cast<size_t>(text_.size() * eval_fraction));
  train_bytes_ = text_.size() - eval_bytes;
  text_path_ = path;
  return {};
}

result<std::shared_ptr<const data_source>> data_source::build(const data_config& config,
                                                              int context) {
  if (auto st = config.validate(); !st.ok()) return st;
  DILOCO_CHECK(context > 0, "data: a context of at least one token (validated)");
  auto src = std::make_shared<data_source>();
  src->context_ = context;
  if (config.text_file.empty()) {
    auto chain = markov_chain::build(config.markov);
    if (!chain) return chain.error();
    src->chain_ = std::make_unique<markov_chain>(std::move(chain).value());
    src->build_eval_set(config.markov.seed, config.eval_tokens);
  } else {
    if (auto st = src->load_text(config.text_file, config.eval_fraction); !st.ok()) return st;
    src->contiguous_ = config.contiguous;
    src->build_eval_set(0, config.eval_tokens);
  }
  return std::shared_ptr<const data_source>(std::move(src));
}

void data_source::build_eval_set(uint64_t seed, int eval_tokens) {
  const auto C = static_cast<size_t>(context_);
  if (chain_) {
    constexpr int eval_streams = 64;
    data_cursor cur = open_shard(derive_seed(seed, "data.eval", 0), 0, 1, eval_streams);
    const int rounds = (eval_tokens + eval_streams - 1) / eval_streams;
    eval_contexts_.resize(static_cast<size_t>(rounds) * eval_streams * C);
    eval_targets_.resize(static_cast<size_t>(rounds) * eval_streams);
    // The chain's own loss on each target: -ln P(target | the state it was drawn in).
    std::vector<int> symbol_of(256, -1);
    for (int s = 0; s < chain_->alphabet(); ++s) symbol_of[chain_->byte_of(s)] = s;
    double floor_sum = 0;
    int counted = 0;
    for (int r = 0; r < rounds; ++r) {
      const std::vector<uint64_t> states = cur.position;
      uint8_t* targets = &eval_targets_[static_cast<size_t>(r) * eval_streams];
      next_batch(cur, &eval_contexts_[static_cast<size_t>(r) * eval_streams * C], targets);
      for (int b = 0; b < eval_streams && counted < eval_tokens; ++b, ++counted) {
        const int sym = symbol_of[targets[b]];
        DILOCO_CHECK(sym >= 0, "data: an evaluation target is a byte of the chain's alphabet");
        floor_sum -= std::log(chain_->transition(static_cast<size_t>(states[b]), sym));
      }
    }
    eval_floor_ = floor_sum / static_cast<double>(counted);
    eval_contexts_.resize(static_cast<size_t>(eval_tokens) * C);
    eval_targets_.resize(static_cast<size_t>(eval_tokens));
    return;
  }
  // Text: evenly spaced targets in the held-out tail (all of them if it is short).
  const size_t tail = text_.size() - train_bytes_;
  const size_t n = std::min<size_t>(tail, static_cast<size_t>(eval_tokens));
  eval_contexts_.assign(n * C, 0);
  eval_targets_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t pos = train_bytes_ + i * tail / n;
    eval_targets_[i] = text_[pos];
    for (size_t c = 0; c < C; ++c) {
      const size_t back = C - c;
      eval_contexts_[i * C + c] = pos >= back ? text_[pos - back] : 0;
    }
  }
}

data_cursor data_source::open_shard(uint64_t seed, int index, int learners, int streams) const {
  DILOCO_CHECK(index >= 0 && index < learners && streams > 0,
               "data: a shard of the learners there are");
  data_cursor cur;
  cur.streams = streams;
  cur.context = context_;
  const auto B = static_cast<size_t>(streams), C = static_cast<size_t>(context_);
  cur.history.assign(B * C, 0);
  cur.position.assign(B, 0);
  rng gen(derive_seed(seed, "data.shard", static_cast<uint64_t>(index)));
  if (chain_) {
    // Each stream starts in a stationary state and fills its context window by running the
    // chain C steps (not counted as tokens).
    for (size_t b = 0; b < B; ++b) {
      size_t state = chain_->sample_stationary_state(gen);
      for (size_t c = 0; c < C; ++c) {
        const int sym = chain_->sample_symbol(state, gen);
        cur.history[b * C + c] = chain_->byte_of(sym);
        state = chain_->next_state(state, sym);
      }
      cur.position[b] = state;
    }
  } else if (!contiguous_) {
    // Shuffled: the whole training part; each example's position is drawn when it is read.
    cur.shard_begin = 0;
    cur.shard_end = train_bytes_;
  } else {
    const auto L = static_cast<uint64_t>(learners);
    cur.shard_begin = train_bytes_ * static_cast<uint64_t>(index) / L;
    cur.shard_end = train_bytes_ * static_cast<uint64_t>(index + 1) / L;
    if (cur.shard_end <= cur.shard_begin) cur.shard_end = cur.shard_begin + 1;
    const uint64_t len = cur.shard_end - cur.shard_begin;
    // Streams start evenly spaced, shifted by a seeded offset so seeds see different orders.
    const uint64_t shift = gen.below(len);
    for (size_t b = 0; b < B; ++b) {
      cur.position[b] = cur.shard_begin + (shift + b * len / B) % len;
    }
  }
  cur.rng_state = gen.state();
  return cur;
}

void data_source::next_batch(data_cursor& cur, uint8_t* contexts, uint8_t* targets) const {
  const auto B = static_cast<size_t>(cur.streams), C = static_cast<size_t>(cur.context);
  DILOCO_CHECK(cur.context == context_, "data: a cursor of this source");
  if (chain_) {
    rng gen;
    gen.set_state(cur.rng_state);
    for (size_t b = 0; b < B; ++b) {
      uint8_t* hist = &cur.history[b * C];
      const size_t state = cur.position[b];
      const int sym = chain_->sample_symbol(state, gen);
      std::memcpy(contexts + b * C, hist, C);
      targets[b] = chain_->byte_of(sym);
      std::memmove(hist, hist + 1, C - 1);
      hist[C - 1] = targets[b];
      cur.position[b] = chain_->next_state(state, sym);
    }
    cur.rng_state = gen.state();
  } else {
    rng gen;
    if (!contiguous_) gen.set_state(cur.rng_state);
    for (size_t b = 0; b < B; ++b) {
      if (!contiguous_) cur.position[b] = gen.below(cur.shard_end - cur.shard_begin);
      const uint64_t pos = cur.position[b];
      targets[b] = text_[pos];
      for (size_t c = 0; c < C; ++c) {
        const size_t back = C - c;
        contexts[b * C + c] = pos >= back ? text_[pos - back] : 0;
      }
      cur.position[b] = pos + 1 == cur.shard_end ? cur.shard_begin : pos + 1;
    }
    if (!contiguous_) cur.rng_state = gen.state();
  }
  cur.tokens += B;
}

std::string data_source::describe() const {
  std::ostringstream out;
  if (chain_) {
    out << "markov chain: order " << chain_->order() << ", alphabet " << chain_->alphabet()
        << ", entropy rate " << chain_->entropy_rate_nats() << " nats/token ("
        << chain_->entropy_rate_nats() / std::log(2.0) << " bits)";
  } else {
    out << "text file " << text_path_ << ": " << text_.size() << " bytes, "
        << (text_.size() - train_bytes_) << " held out";
  }
  return out.str();
}

double evaluate(const mlp_lm& model, const float_buffer& params, const data_source& data,
                mlp_lm::workspace& ws) {
  const auto& ctx = data.eval_contexts();
  const auto& tgt = data.eval_targets();
  const size_t n = tgt.size(), C = static_cast<size_t>(data.context());
  DILOCO_CHECK(n > 0, "data: an evaluation set that is not empty");
  double loss_sum = 0.0;
  for (size_t i = 0; i < n; i += static_cast<size_t>(ws.batch)) {
    const int b = static_cast<int>(std::min<size_t>(ws.batch, n - i));
    batch_view view{&ctx[i * C], &tgt[i], b};
    loss_sum += model.forward(params, view, ws) * b;
  }
  return loss_sum / static_cast<double>(n);
}

}  // namespace diloco
