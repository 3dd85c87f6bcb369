// `diloco train`: one learner, the bare inner training loop, no actor runtime. It is the
// reference the actor runtime is measured against and a quick check that the model learns.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "checkpoint/model_file.hpp"
#include "tensor/trainer.hpp"

namespace diloco {

namespace {

// The built-in experiment tunes the inner learning rate for the 205k-parameter MLP: the generic
// 4e-4 is a transformer default and needs about 3x the tokens here (docs/config.md).
adamw_config builtin_inner() {
  adamw_config c;
  c.lr = 2e-3;
  return c;
}

struct train_options {
  model_config model;
  data_config data;
  adamw_config inner = builtin_inner();
  int batch = 64;
  int64_t steps = 5000;
  int64_t eval_every = 1000;
  uint64_t seed = 1;
  std::string save_path;
  std::string init_path;
  common_options common;

  status validate() const {
    if (auto st = model.validate(); !st.ok()) return st;
    if (auto st = data.validate(); !st.ok()) return st;
    if (auto st = inner.validate(); !st.ok()) return st;
    if (batch < 1 || batch > 65536)
      return status(errc::invalid_argument, "--batch: must be in [1, 65536]");
    if (steps < 1) return status(errc::invalid_argument, "--steps: must be >= 1");
    if (eval_every < 0)
      return status(errc::invalid_argument, "--eval-every: must be >= 0 (0: only at the end)");
    return {};
  }
};

void bind(cli::arg_parser& p, train_options& o) {
  p.option("steps", &o.steps, "inner steps to train");
  p.option("batch", &o.batch, "examples (tokens) per step");
  p.option("seed", &o.seed, "run seed: initialization and data order");
  p.option("eval-every", &o.eval_every, "evaluate every N steps (0: only at the end)");
  p.option("context", &o.model.context, "model: previous bytes seen");
  p.option("embed-dim", &o.model.embed_dim, "model: embedding width");
  p.option("hidden", &o.model.hidden, "model: hidden layer width");
  p.option("layers", &o.model.hidden_layers, "model: hidden layers (>= 2)");
  p.option("lr", &o.inner.lr, "AdamW peak learning rate");
  p.option("warmup", &o.inner.warmup_steps, "AdamW linear warmup steps");
  p.option("min-lr-ratio", &o.inner.min_lr_ratio, "cosine decay floor, as a share of --lr");
  p.option("weight-decay", &o.inner.weight_decay, "AdamW decoupled weight decay");
  p.option("clip", &o.inner.clip_norm, "global gradient-norm clip (0: off)");
  p.option("data", &o.data.text_file,
           "train on this text file instead of the built-in Markov chain");
  p.option("markov-order", &o.data.markov.order, "built-in data: order of the chain");
  p.option("markov-alphabet", &o.data.markov.alphabet, "built-in data: symbols");
  p.option("markov-concentration", &o.data.markov.concentration,
           "built-in data: Dirichlet concentration of transitions (smaller: more predictable)");
  p.option("data-seed", &o.data.markov.seed, "built-in data: seed of the chain itself");
  p.option("eval-tokens", &o.data.eval_tokens, "size of the held-out evaluation set");
  p.option("save", &o.save_path, "write the trained model to this file (checksummed, atomic)");
  p.option("init", &o.init_path, "start from a model file (its shape replaces the model flags)");
  add_common_options(p, o.common);
}

}  // namespace

int run_train(int argc, const char* const* argv) {
  train_options o;
  cli::arg_parser parser(
      "diloco train",
      "Trains one learner (the MLP byte-level language model) with AdamW on the\n"
      "built-in Markov data or a text file, printing progress, the final loss\n"
      "and, for the built-in data, the entropy rate that bounds it.");
  bind(parser, o);
  if (auto st = parser.parse(argc, argv); !st.ok()) return report_error("diloco train", st);
  if (parser.help_requested()) {
    std::fputs(parser.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;
  o.inner.total_steps = o.steps;
  if (auto st = o.validate(); !st.ok()) return report_error("diloco train", st);

  std::optional<model_file> init;
  if (!o.init_path.empty()) {
    auto loaded = load_model(o.init_path);
    if (!loaded) return report_error("diloco train", loaded.error());
    o.model = loaded->config;
    init = std::move(loaded).value();
  }
  auto data = data_source::build(o.data, o.model.context);
  if (!data) return report_error("diloco train", data.error());
  inner_trainer trainer(o.model, *data, o.batch, o.seed, 0, 1);
  if (init) trainer.params() = init->params;

  std::printf("diloco train: seed %llu\n", static_cast<unsigned long long>(o.seed));
  std::printf("data: %s\n", (*data)->describe().c_str());
  std::printf(
      "model: %zu parameters (context %d, embed %d, hidden %d x %d), batch %d, %lld steps\n",
      trainer.model().layout().param_count(), o.model.context, o.model.embed_dim, o.model.hidden,
      o.model.hidden_layers, o.batch, static_cast<long long>(o.steps));
  std::fflush(stdout);

  const double entropy = (*data)->entropy_rate_nats();
  progress_line progress("train", static_cast<double>(o.steps), "steps");
  double loss_avg = 0.0, last_eval = NAN;
  double compute_s = 0.0;
  for (int64_t s = 0; s < o.steps; ++s) {
    const step_stats st = trainer.step(o.inner);
    if (!std::isfinite(st.loss)) {
      return report_error(
          "diloco train",
          status(errc::non_finite, "loss became " + std::to_string(st.loss) + " at step " +
                                       std::to_string(s) + "; lower --lr"));
    }
    // Exponential average over ~100 steps: the batch loss alone is too noisy to read.
    loss_avg = s == 0 ? st.loss : 0.99 * loss_avg + 0.01 * st.loss;
    if (o.eval_every > 0 && (s + 1) % o.eval_every == 0 && s + 1 < o.steps) {
      last_eval = trainer.evaluate();
      spdlog::debug("step {} eval loss {:.4f}", s + 1, last_eval);
    }
    char detail[128];
    // No evaluation yet: the train loss alone.
    if (std::isnan(last_eval))
      std::snprintf(detail, sizeof detail, "loss %.4f", loss_avg);
    else
      std::snprintf(detail, sizeof detail, "loss %.4f  eval %.4f", loss_avg, last_eval);
    progress.update(static_cast<double>(s + 1), detail);
  }
  compute_s = progress.elapsed_s();
  const double eval = trainer.evaluate();
  char detail[128];
  std::snprintf(detail, sizeof detail, "loss %.4f  eval %.4f", loss_avg, eval);
  progress.finish(static_cast<double>(o.steps), detail);

  const double tokens = static_cast<double>(trainer.tokens_done());
  const double tok_s = tokens / compute_s;
  std::printf("final: train loss %.4f (moving average), eval loss %.4f nats/token\n", loss_avg,
              eval);
  if (entropy >= 0) {
    std::printf("entropy rate %.4f nats/token: eval loss is %.4f above it (%.2f%%)\n", entropy,
                eval - entropy, 100.0 * (eval - entropy) / entropy);
  }
  std::printf("tokens %s in %.2f s: %s tokens/s, %.2f GFLOP/s of model compute\n",
              human_count(tokens).c_str(), compute_s, human_count(tok_s).c_str(),
              tok_s * trainer.model().train_flops_per_token() / 1e9);
  if (!o.save_path.empty()) {
    if (auto st = save_model(o.save_path, o.model, trainer.params()); !st.ok()) {
      return report_error("diloco train", st);
    }
    std::printf("model saved to %s\n", o.save_path.c_str());
  }
  return 0;
}

}  // namespace diloco
