// The byte-level MLP language model (Bengio et al. 2003): embed the previous `context` bytes,
// pass the concatenation through `hidden_layers` tanh layers, predict the next byte.
//
// The model owns no parameters: it describes the layout of the flat buffer and runs forward
// and backward over buffers that the caller (a learner, a test) owns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct model_config {
  int vocab = 256;        // byte-level; tests use smaller vocabularies
  int context = 8;        // previous tokens seen, C
  int embed_dim = 32;     // E
  int hidden = 256;       // H, width of every hidden layer
  int hidden_layers = 2;  // L >= 2
  // A user's model instead of the MLP (docs/python.md): the file with its layout and initial
  // parameters (checkpoint/layout_file.hpp), for the nodes that do not run it. Empty: none.
  std::string file;

  status validate() const;
};

// B examples: each a context of C tokens and the token that follows it.
struct batch_view {
  const uint8_t* contexts = nullptr;  // (B, C)
  const uint8_t* targets = nullptr;   // (B)
  int size = 0;                       // B
};

class mlp_lm {
 public:
  // Activations and their gradients for one batch size; reused across steps (no allocation on
  // the training path after construction).
  struct workspace {
    int batch = 0;
    float_buffer x0;              // (B, C*E) concatenated embeddings
    std::vector<float_buffer> h;  // L x (B, H) hidden activations after tanh
    float_buffer probs;           // (B, V) logits, then softmax in place
    float_buffer dlogits;         // (B, V)
    float_buffer dh_a, dh_b;      // (B, H) ping-pong gradients of hidden activations
    float_buffer dx0;             // (B, C*E)
  };

  explicit mlp_lm(const model_config& config);

  const model_config& config() const { return config_; }
  const param_layout& layout() const { return layout_; }

  // LeCun-normal weights, zero biases, unit-variance embeddings, small output layer.
  void init(float_buffer& params, uint64_t seed) const;

  workspace make_workspace(int batch) const;

  // Mean cross-entropy (nats) of the batch; leaves activations in ws for backward.
  double forward(const float_buffer& params, const batch_view& batch, workspace& ws) const;
  // Accumulates d(mean loss)/d(params) into grads; call after forward on the same batch.
  void backward(const float_buffer& params, float_buffer& grads, const batch_view& batch,
                workspace& ws) const;

  // Multiply-adds of the dense layers x 2 x 3 (forward + backward), per token.
  double train_flops_per_token() const;

 private:
  model_config config_;
  param_layout layout_;
  size_t embedding_ = 0;
  std::vector<size_t> weights_;  // hidden layers then output
  std::vector<size_t> biases_;
};

}  // namespace diloco
