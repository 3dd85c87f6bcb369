#include "tests/catch.hpp"

#include <array>
#include <cmath>
#include <vector>

#include "tensor/model.hpp"
#include "tensor/optim.hpp"
#include "tensor/rng.hpp"
#include "tensor/trainer.hpp"

using namespace diloco;

namespace {
model_config tiny() {
  model_config c;
  c.vocab = 11;
  c.context = 3;
  c.embed_dim = 4;
  c.hidden = 6;
  c.hidden_layers = 3;
  return c;
}
}  // namespace

TEST_CASE("model: layout holds every tensor, aligned, with the expected counts") {
  mlp_lm m(model_config{});
  const auto& L = m.layout();
  // 256x32 embedding, 256x256 + 256, 256x256 + 256, 256x256 + 256 output
  CHECK(L.param_count() == 256 * 32 + (256 * 256 + 256) * 3);
  CHECK(L.tensors().size() == 7);
  size_t end = 0;
  for (const auto& t : L.tensors()) {
    CHECK(t.offset % param_layout::alignment_floats == 0);
    CHECK(t.offset >= end);  // no overlap
    end = t.offset + t.size();
  }
  CHECK(L.buffer_floats() >= end);
  CHECK(L.at(0).role == tensor_role::embedding);
  CHECK(L.layer_count() == 4);
}

TEST_CASE("model: the loss at initialization is close to log(vocab)") {
  model_config c;
  mlp_lm m(c);
  float_buffer p(m.layout().buffer_floats());
  m.init(p, 3);
  rng g(1);
  const int B = 64;
  std::vector<uint8_t> ctx(B * c.context), tgt(B);
  for (auto& x : ctx) x = static_cast<uint8_t>(g.below(256));
  for (auto& x : tgt) x = static_cast<uint8_t>(g.below(256));
  auto ws = m.make_workspace(B);
  const double loss = m.forward(p, {ctx.data(), tgt.data(), B}, ws);
  CHECK(loss == Approx(std::log(256.0)).margin(0.15));
}

TEST_CASE("model: whole-model backward matches finite differences (float)") {
  const model_config c = tiny();
  mlp_lm m(c);
  float_buffer p(m.layout().buffer_floats()), grad(m.layout().buffer_floats());
  m.init(p, 7);
  // Larger output weights than the init so every gradient is well above float noise.
  for (const auto& t : m.layout().tensors()) {
    for (float& x : p.view(t)) x *= 3.0f;
  }
  rng g(2);
  const int B = 5;
  std::vector<uint8_t> ctx(B * c.context), tgt(B);
  for (auto& x : ctx) x = static_cast<uint8_t>(g.below(c.vocab));
  for (auto& x : tgt) x = static_cast<uint8_t>(g.below(c.vocab));
  const batch_view batch{ctx.data(), tgt.data(), B};
  auto ws = m.make_workspace(B);
  m.forward(p, batch, ws);
  m.backward(p, grad, batch, ws);

  constexpr float h = 1e-2f;
  int checked = 0;
  for (const auto& t : m.layout().tensors()) {
    for (size_t i = 0; i < t.size(); ++i) {
      float& x = p[t.offset + i];
      const float keep = x;
      x = keep + h;
      const double up = m.forward(p, batch, ws);
      x = keep - h;
      const double down = m.forward(p, batch, ws);
      x = keep;
      const double numeric = (up - down) / (2.0 * h);
      INFO(t.name << "[" << i << "]");
      REQUIRE(grad[t.offset + i] == Approx(numeric).epsilon(0.03).margin(3e-4));
      ++checked;
    }
  }
  CHECK(checked == static_cast<int>(m.layout().param_count()));
}

TEST_CASE("model: training on a deterministic sequence drives the loss down") {
  // next byte = (sum of context) mod vocab: learnable, zero entropy.
  model_config c = tiny();
  c.vocab = 8;
  c.context = 2;
  c.hidden = 32;
  c.embed_dim = 8;
  c.hidden_layers = 2;
  mlp_lm m(c);
  float_buffer p(m.layout().buffer_floats()), grad(m.layout().buffer_floats());
  m.init(p, 1);
  adamw_state opt(p.size());
  adamw_config oc;
  oc.lr = 1e-2;
  oc.warmup_steps = 10;
  oc.total_steps = 600;
  oc.weight_decay = 0;
  const int B = 64;
  std::vector<uint8_t> ctx(B * 2), tgt(B);
  for (int b = 0; b < B; ++b) {
    ctx[b * 2] = static_cast<uint8_t>(b % 8);
    ctx[b * 2 + 1] = static_cast<uint8_t>(b / 8);
    tgt[b] = static_cast<uint8_t>((b % 8 + b / 8) % 8);
  }
  auto ws = m.make_workspace(B);
  const batch_view batch{ctx.data(), tgt.data(), B};
  const double first = m.forward(p, batch, ws);
  double last = first;
  for (int s = 0; s < 600; ++s) {
    grad.fill(0);
    last = m.forward(p, batch, ws);
    m.backward(p, grad, batch, ws);
    clip_grad_norm(grad.all(), 1.0);
    adamw_update(p.all(), grad.all(), opt, oc, oc.lr_at(opt.step));
  }
  CHECK(first > 1.9);
  CHECK(last < 0.05);
}

TEST_CASE("model: config validation names the field") {
  model_config c;
  c.hidden_layers = 1;
  auto st = c.validate();
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("model.hidden_layers") != std::string::npos);
  c = model_config{};
  c.vocab = 300;
  CHECK(c.validate().message().find("model.vocab") != std::string::npos);
  CHECK(model_config{}.validate().ok());
}

TEST_CASE(
    "trainer: two trainers with the same seed are bit-identical and the shard index matters") {
  data_config dc;
  auto data = data_source::build(dc, 8);
  REQUIRE(data.ok());
  model_config mc;
  mc.hidden = 32;
  adamw_config oc;
  inner_trainer a(mc, *data, 16, 5, 0, 2), b(mc, *data, 16, 5, 0, 2), other(mc, *data, 16, 5, 1, 2);
  for (int s = 0; s < 20; ++s) {
    const auto sa = a.step(oc), sb = b.step(oc), so = other.step(oc);
    REQUIRE(sa.loss == sb.loss);
    (void)so;
  }
  bool same = true, differs = false;
  for (size_t i = 0; i < a.params().size(); ++i) {
    same = same && a.params()[i] == b.params()[i];
    differs = differs || a.params()[i] != other.params()[i];
  }
  CHECK(same);
  CHECK(differs);
  CHECK(a.tokens_done() == 20 * 16);
  CHECK(a.steps_done() == 20);
}

TEST_CASE("trainer: a step in two halves, the first into a scratch, is the step, bit for bit") {
  data_config dc;
  auto data = data_source::build(dc, 8);
  REQUIRE(data.ok());
  model_config mc;
  mc.hidden = 32;
  adamw_config oc;
  oc.warmup_steps = 3;
  oc.total_steps = 12;
  oc.clip_norm = 0.5;  // clipping bites: it belongs to the first half
  // `plain` steps whole; `halves` computes each step's gradients into one of two scratches
  // (from its parameters, or from a copy of them), then adopts them and updates.
  inner_trainer plain(mc, *data, 16, 5, 0, 2), halves(mc, *data, 16, 5, 0, 2);
  std::array<inner_trainer::ahead_scratch, 2> scratch{halves.make_scratch(), halves.make_scratch()};
  CHECK_FALSE(halves.grads_pending());
  for (int s = 0; s < 12; ++s) {
    const auto p = plain.step(oc, s);
    auto& sc = scratch[static_cast<size_t>(s % 2)];
    const std::vector<float> before(halves.params().data(), halves.params().data() + 8);
    const auto tokens_before = halves.tokens_done();
    if (s % 3 == 2) {
      const float_buffer copy = halves.params();
      halves.gradients_into(copy, halves.cursor(), oc.clip_norm, sc, halves.grads());
    } else {
      halves.gradients_into(halves.params(), halves.cursor(), oc.clip_norm, sc, halves.grads());
    }
    // The first half only reads the trainer.
    CHECK(std::vector<float>(halves.params().data(), halves.params().data() + 8) == before);
    CHECK(halves.tokens_done() == tokens_before);
    const auto q = halves.adopt(sc, oc, s);
    halves.update(oc, q.lr);
    CHECK(p.loss == q.loss);
    CHECK(p.lr == q.lr);
    CHECK(p.grad_norm == q.grad_norm);
    CHECK(p.tokens == q.tokens);
  }
  bool same = true;
  for (size_t i = 0; i < plain.params().size(); ++i) {
    same = same && plain.params()[i] == halves.params()[i] &&
           plain.optimizer().m[i] == halves.optimizer().m[i] &&
           plain.optimizer().v[i] == halves.optimizer().v[i] &&
           plain.grads()[i] == halves.grads()[i];
  }
  CHECK(same);
  CHECK(plain.steps_done() == halves.steps_done());
  CHECK(plain.tokens_done() == halves.tokens_done());
  CHECK(plain.cursor().rng_state == halves.cursor().rng_state);
  CHECK(plain.cursor().history == halves.cursor().history);
}
