#include "tensor/model.hpp"

#include <cmath>
#include <string>

#include "base/check.hpp"
#include "tensor/layers.hpp"
#include "tensor/rng.hpp"

namespace diloco {

status model_config::validate() const {
  auto bad = [](const char* field, const std::string& what) {
    return status(errc::invalid_argument, std::string("model.") + field + ": " + what);
  };
  if (vocab < 2 || vocab > 256) return bad("vocab", "must be in [2, 256] (byte-level tokens)");
  if (context < 1 || context > 256) return bad("context", "must be in [1, 256]");
  if (embed_dim < 1 || embed_dim > 4096) return bad("embed_dim", "must be in [1, 4096]");
  if (hidden < 1 || hidden > 16384) return bad("hidden", "must be in [1, 16384]");
  if (hidden_layers < 2 || hidden_layers > 64) return bad("hidden_layers", "must be in [2, 64]");
  return {};
}

mlp_lm::mlp_lm(const model_config& config) : config_(config) {
  DILOCO_CHECK(config.validate().ok(), "mlp_lm: a model config that did not pass validate()");
  const auto V = static_cast<size_t>(config.vocab);
  const auto CE = static_cast<size_t>(config.context * config.embed_dim);
  const auto H = static_cast<size_t>(config.hidden);
  embedding_ = layout_.add("embedding", V, config.embed_dim, tensor_role::embedding, 0);
  size_t in = CE;
  for (int l = 1; l <= config.hidden_layers; ++l) {
    const std::string name = "h" + std::to_string(l);
    weights_.push_back(layout_.add(name + ".weight", in, H, tensor_role::weight, l));
    biases_.push_back(layout_.add(name + ".bias", 1, H, tensor_role::bias, l));
    in = H;
  }
  const int out_layer = config.hidden_layers + 1;
  weights_.push_back(layout_.add("out.weight", H, V, tensor_role::weight, out_layer));
  biases_.push_back(layout_.add("out.bias", 1, V, tensor_role::bias, out_layer));
}

void mlp_lm::init(float_buffer& params, uint64_t seed) const {
  DILOCO_CHECK(params.size() == layout_.buffer_floats(), "model: parameters as many as its layout");
  params.fill(0.0f);
  rng gen(derive_seed(seed, "model.init", 0));
  auto fill_normal = [&](size_t tensor, double stddev) {
    fspan v = params.view(layout_.at(tensor));
    for (float& x : v) x = static_cast<float>(gen.normal() * stddev);
  };
  fill_normal(embedding_, 1.0);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const tensor_info& w = layout_.at(weights_[i]);
    const bool output = i + 1 == weights_.size();
    // LeCun normal keeps tanh pre-activations near unit variance; the output layer starts
    // small so the first predictions are close to uniform.
    fill_normal(weights_[i], (output ? 0.1 : 1.0) / std::sqrt(static_cast<double>(w.rows)));
  }
}

mlp_lm::workspace mlp_lm::make_workspace(int batch) const {
  DILOCO_CHECK(batch > 0, "model: a workspace for at least one sequence");
  const auto B = static_cast<size_t>(batch);
  workspace ws;
  ws.batch = batch;
  ws.x0 = float_buffer(B * config_.context * config_.embed_dim);
  for (int l = 0; l < config_.hidden_layers; ++l) ws.h.emplace_back(B * config_.hidden);
  ws.probs = float_buffer(B * config_.vocab);
  ws.dlogits = float_buffer(B * config_.vocab);
  ws.dh_a = float_buffer(B * config_.hidden);
  ws.dh_b = float_buffer(B * config_.hidden);
  ws.dx0 = float_buffer(B * config_.context * config_.embed_dim);
  return ws;
}

double mlp_lm::forward(const float_buffer& params, const batch_view& batch, workspace& ws) const {
  DILOCO_CHECK(batch.size > 0 && batch.size <= ws.batch, "model: a batch its workspace holds");
  const int B = batch.size, C = config_.context, E = config_.embed_dim;
  const int H = config_.hidden, V = config_.vocab, L = config_.hidden_layers;
  auto p = [&](size_t tensor) { return params.data() + layout_.at(tensor).offset; };

  layers::embedding_forward(ws.x0.data(), batch.contexts, p(embedding_), B, C, E);
  const float* in = ws.x0.data();
  int in_dim = C * E;
  for (int l = 0; l < L; ++l) {
    float* h = ws.h[l].data();  // (B, H)
    layers::linear_forward(h, in, p(weights_[l]), p(biases_[l]), B, in_dim, H);
    layers::tanh_forward(h, h, B * H);
    in = h;
    in_dim = H;
  }
  float* logits = ws.probs.data();  // (B, V)
  layers::linear_forward(logits, in, p(weights_[L]), p(biases_[L]), B, H, V);
  return layers::softmax_xent_forward(logits, logits, batch.targets, B, V);
}

void mlp_lm::backward(const float_buffer& params, float_buffer& grads, const batch_view& batch,
                      workspace& ws) const {
  const int B = batch.size, C = config_.context, E = config_.embed_dim;
  const int H = config_.hidden, V = config_.vocab, L = config_.hidden_layers;
  auto p = [&](size_t tensor) { return params.data() + layout_.at(tensor).offset; };
  auto g = [&](size_t tensor) { return grads.data() + layout_.at(tensor).offset; };

  layers::softmax_xent_backward(ws.dlogits.data(), ws.probs.data(), batch.targets, B, V);
  float* dh = ws.dh_a.data();  // (B, H) gradient of the current hidden output
  float* dh_next = ws.dh_b.data();
  layers::linear_backward(dh, g(weights_[L]), g(biases_[L]), ws.dlogits.data(), ws.h[L - 1].data(),
                          p(weights_[L]), B, H, V);
  for (int l = L - 1; l >= 0; --l) {
    layers::tanh_backward(dh, dh, ws.h[l].data(), B * H);  // now d pre-activation
    const bool first = l == 0;
    const float* in = first ? ws.x0.data() : ws.h[l - 1].data();
    const int in_dim = first ? C * E : H;
    float* din = first ? ws.dx0.data() : dh_next;
    layers::linear_backward(din, g(weights_[l]), g(biases_[l]), dh, in, p(weights_[l]), B, in_dim,
                            H);
    std::swap(dh, dh_next);
  }
  layers::embedding_backward(g(embedding_), ws.dx0.data(), batch.contexts, B, C, E);
}

double mlp_lm::train_flops_per_token() const {
  const double CE = config_.context * config_.embed_dim;
  const double H = config_.hidden, V = config_.vocab;
  const double macs = CE * H + (config_.hidden_layers - 1) * H * H + H * V;
  return 6.0 * macs;  // 2 flops per MAC, forward + 2x for backward
}

}  // namespace diloco
