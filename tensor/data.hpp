// Training data: a seeded Markov chain over bytes with an exactly known entropy rate, or the
// bytes of a text file; each learner reads its own deterministic shard.
//
// A `data_source` is immutable once built and may be shared by every learner of a process
// (every process builds the same one from the same config). A `data_cursor` is one learner's
// mutable position in it: B parallel streams, each yielding one (context, next byte) example
// per step, so every target byte is counted once as a token.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "tensor/model.hpp"
#include "tensor/rng.hpp"

namespace diloco {

struct markov_config {
  int order = 2;               // symbols of history the next symbol depends on
  int alphabet = 16;           // symbols used, mapped to printable bytes
  double concentration = 0.2;  // Dirichlet parameter of each transition row; small = peaky
  uint64_t seed = 1;           // the chain itself: fixed apart from the run seed, so runs
                               // with different seeds learn the same task

  status validate() const;
};

struct data_config {
  std::string text_file;  // empty: the built-in Markov source
  markov_config markov;
  double eval_fraction = 0.1;  // text files: the tail held out for evaluation
  // Text files: each learner reads its own contiguous slice, in order (a non-iid split);
  // false: every example is drawn at a uniformly random position of the whole training part,
  // by each learner's own generator (iid, as a shuffled data loader gives).
  bool contiguous = false;
  int eval_tokens = 16384;  // examples in the evaluation set

  status validate() const;
};

class markov_chain {
 public:
  static result<markov_chain> build(const markov_config& config);

  int order() const { return order_; }
  int alphabet() const { return alphabet_; }
  size_t states() const { return states_; }
  // The byte a symbol is written as (printable ASCII when the alphabet fits).
  uint8_t byte_of(int symbol) const;
  // Entropy rate in nats per symbol: sum_s pi(s) H(P(. | s)) with pi the stationary law.
  double entropy_rate_nats() const { return entropy_rate_; }
  double transition(size_t state, int symbol) const { return probs_[state * alphabet_ + symbol]; }
  const std::vector<double>& stationary() const { return stationary_; }

  size_t next_state(size_t state, int symbol) const {
    return (state * alphabet_ + symbol) % states_;
  }
  int sample_symbol(size_t state, rng& gen) const;
  size_t sample_stationary_state(rng& gen) const;

 private:
  int order_ = 0;
  int alphabet_ = 0;
  size_t states_ = 0;
  std::vector<double> probs_;       // (states, alphabet)
  std::vector<double> cumulative_;  // (states, alphabet) running sums for sampling
  std::vector<double> stationary_;  // (states)
  std::vector<double> stationary_cumulative_;
  double entropy_rate_ = 0.0;
};

// One learner's position: per stream the last C bytes and the chain state or file offset,
// plus the generator. Plain data so snapshots can serialize it.
struct data_cursor {
  int streams = 0;                      // B
  int context = 0;                      // C
  std::vector<uint8_t> history;         // (B, C) most recent bytes, oldest first
  std::vector<uint64_t> position;       // (B) chain state, or file offset of the next target
  std::array<uint64_t, 4> rng_state{};  // the cursor's generator
  uint64_t shard_begin = 0;             // text: the learner's slice [begin, end) of the file
  uint64_t shard_end = 0;
  uint64_t tokens = 0;  // targets produced so far
};

// What a snapshot keeps of a cursor (protocol/persist.hpp walks it): every field.
template <class F>
void persist_fields(F& f, data_cursor& x) {
  f(x.streams, x.context, x.history, x.position, x.rng_state, x.shard_begin, x.shard_end, x.tokens);
}

class data_source {
 public:
  // The evaluation set is fixed by the data config alone (chain seed or file), not by the run
  // seed, so losses of runs with different seeds are comparable.
  static result<std::shared_ptr<const data_source>> build(const data_config& config, int context);

  bool synthetic() const { return chain_ != nullptr; }
  const markov_chain* chain() const { return chain_.get(); }
  // Best achievable loss, nats per token; negative when unknown (text files).
  double entropy_rate_nats() const { return chain_ ? chain_->entropy_rate_nats() : -1.0; }
  // The true model's mean loss on the evaluation set (the chain's own probabilities of its
  // targets), nats per token: the floor of a loss measured on that set, which a finite sample
  // puts above or below the entropy rate. Negative when unknown (text files).
  double eval_floor_nats() const { return eval_floor_; }
  std::string describe() const;

  // Learner `index` of `learners` gets a shard: its own chain streams (synthetic); for a text
  // file, its own contiguous slice of the training part (data_config::contiguous) or the whole
  // of it sampled at random. Deterministic in (seed, index).
  data_cursor open_shard(uint64_t seed, int index, int learners, int streams) const;

  // Writes the next example of each stream: contexts (B, C), targets (B).
  void next_batch(data_cursor& cursor, uint8_t* contexts, uint8_t* targets) const;

  // The fixed held-out set: contexts (N, C), targets (N).
  const std::vector<uint8_t>& eval_contexts() const { return eval_contexts_; }
  const std::vector<uint8_t>& eval_targets() const { return eval_targets_; }
  int context() const { return context_; }

 private:
  int context_ = 0;
  std::unique_ptr<markov_chain> chain_;
  std::string text_path_;
  std::vector<uint8_t> text_;  // whole file
  size_t train_bytes_ = 0;     // [0, train_bytes_) trains, the rest evaluates
  bool contiguous_ = false;    // text: data_config::contiguous
  std::vector<uint8_t> eval_contexts_;
  std::vector<uint8_t> eval_targets_;
  double eval_floor_ = -1.0;

  status load_text(const std::string& path, double eval_fraction);
  void build_eval_set(uint64_t seed, int eval_tokens);
};

// Mean loss of the model on the source's evaluation set, in batches of `batch`.
double evaluate(const mlp_lm& model, const float_buffer& params, const data_source& data,
                mlp_lm::workspace& ws);

}  // namespace diloco
