#include "config/published.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "config/keys.hpp"
#include "config/printing.hpp"
#include "config/values.hpp"
#include "tensor/codec.hpp"

namespace diloco {

namespace {

// Peak dense bf16 throughput per chip (TFLOP/s), from the vendors' spec sheets. Only ratios
// between learners are used: a learner's step time is its per-chip batch over this.
const std::map<std::string, double>& accelerators() {
  static const std::map<std::string, double> table = {
      {"tpu-v4", 275}, {"tpu-v5e", 197}, {"tpu-v5p", 459}, {"tpu-v6e", 918},
      {"a100", 312},   {"h100", 989},    {"h200", 989},    {"b200", 2250},
  };
  return table;
}

// The batch of the learner with the most tokens per step; the others get theirs in proportion.
constexpr int largest_batch = 64;

struct converter {
  std::string path;
  std::vector<std::string> errors;
  // "block.key" a misspelt key's error already named: its absence is not a second error.
  std::set<std::string> meant;

  std::string where(const YAML::Node& n) const {
    return path + ":" + std::to_string(n.Mark().line + 1) + ":" +
           std::to_string(n.Mark().column + 1) + ": ";
  }
  void error(const YAML::Node& at, const std::string& what) { errors.push_back(where(at) + what); }
  // Every error so far, one per line.
  status failed() const { return text::one_per_line(errors); }

  // The value of `block.key` as text; missing or not a single value is an error.
  std::string text(const YAML::Node& block, const std::string& name, const std::string& key) {
    const YAML::Node v = block[key];
    if (!v) {
      if (meant.count(name + "." + key) == 0) error(block, name + ": missing '" + key + "'");
      return "";
    }
    if (!v.IsScalar()) {
      error(v, name + "." + key + ": expected a single value");
      return "";
    }
    return v.Scalar();
  }
  double number(const YAML::Node& block, const std::string& name, const std::string& key, double lo,
                double hi) {
    const std::string t = text(block, name, key);
    if (t.empty()) return NAN;
    auto x = text::parse_double(t);
    if (!x) {
      error(block[key], name + "." + key + ": " + x.error().message());
      return NAN;
    }
    if (!(*x >= lo && *x <= hi)) {
      error(block[key], name + "." + key + ": " + t + " is outside [" + format_exact(lo) + ", " +
                            format_exact(hi) + "]");
      return NAN;
    }
    return *x;
  }
  bool boolean(const YAML::Node& block, const std::string& name, const std::string& key) {
    const std::string t = text(block, name, key);
    if (t == "true" || t == "yes" || t == "on") return true;
    if (t != "false" && t != "no" && t != "off" && !t.empty())
      error(block[key], name + "." + key + ": expected true or false, got '" + t + "'");
    return false;
  }
  // Keys of a block other than `known` are refused with the nearest known one.
  void only(const YAML::Node& block, const std::string& name,
            const std::vector<std::string>& known) {
    if (!block.IsMap()) {
      error(block, name + ": expected a map");
      return;
    }
    std::set<std::string> seen;
    for (const auto& kv : block) {
      const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (!seen.insert(k).second) {
        error(kv.first, name + ": key '" + k + "' is set twice");
        continue;
      }
      if (std::find(known.begin(), known.end(), k) != known.end()) continue;
      const std::string near = text::nearest(k, known);
      if (!near.empty() && !block[near]) meant.insert(name + "." + near);
      std::string list;
      for (const auto& x : known) list += (list.empty() ? "" : ", ") + x;
      error(kv.first, name + ": unknown key '" + k + "'" +
                          (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                          "; this form has " + list);
    }
  }
};

// "12B", "350M", "1.3e9" -> parameters: the command line's numbers, with B for billions.
result<double> model_size(const std::string& t) {
  std::string s = t;
  if (!s.empty() && s.back() == 'B') s.back() = 'G';
  auto x = text::parse_double(s);
  if (!x || !(*x > 0))
    return status(errc::invalid_argument,
                  "expected a parameter count such as 12B, 350M or 1.3e9, got '" + t + "'");
  return *x;
}

// The uplink codec whose compression of fp32 outer gradients (as the codec computes it, for a
// large fragment) is nearest `ratio` in log terms; above 40x, top-k keeping 1 / (2 ratio) of
// the values (each kept value costs a float and an index).
std::string codec_for_ratio(double ratio, double& topk_fraction) {
  if (ratio > 40) {
    topk_fraction = 1 / (2 * ratio);
    return "topk";
  }
  constexpr size_t large = size_t{1} << 20;
  codec_kind best = codec_kind::fp32;
  double best_gap = INFINITY;
  for (codec_kind k : {codec_kind::fp32, codec_kind::bf16, codec_kind::int8, codec_kind::fp4,
                       codec_kind::int2, codec_kind::sign1}) {
    const double gap =
        std::abs(std::log(expected_compression_ratio(codec_config::make(k), large) / ratio));
    if (gap < best_gap) {
      best_gap = gap;
      best = k;
    }
  }
  return to_string(best);
}

// What a published cluster file says, read and checked block by block.
struct published_learner {
  int index = 0;
  YAML::Node block;
  std::string region, accelerator;
  double chips = NAN, per_chip = NAN, lr = NAN, beta1 = NAN;
};
struct published {
  // global_config
  std::string size_text;
  double params = 0, learners = NAN, inner = NAN, sync = NAN;
  bool compress = false;
  // synchronizer
  std::string host, port, strategy, merge;
  double quorum = NAN, grace_s = NAN;
  // network
  double gbps = NAN, rtt_ms = NAN, ratio = NAN;
  std::vector<published_learner> ls;
  std::vector<std::string> assumed;  // what the file leaves out, as read
};

// Top level: the four kinds of blocks, nothing else. Returns the learner_N blocks by N.
std::map<int, YAML::Node> top_level(converter& c, const YAML::Node& root) {
  std::map<int, YAML::Node> learner_blocks;
  for (const auto& kv : root) {
    const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (k == "global_config" || k == "synchronizer" || k == "network") continue;
    if (k.rfind("learner_", 0) == 0) {
      auto n = text::parse_number<int>(k.substr(8));
      if (n && *n >= 0 && *n < 100000 && k.substr(8) == std::to_string(*n)) {
        if (learner_blocks.count(*n)) c.error(kv.first, "'" + k + "' is set twice");
        learner_blocks[*n] = kv.second;
        continue;
      }
    }
    const std::string near = suggest_key(k);
    c.error(kv.first, "unknown key '" + k +
                          "' in the published form (it has global_config, "
                          "synchronizer, learner_0, learner_1, ... and network)" +
                          (near.empty() ? "" : "; in our form '" + near + "' is the nearest key"));
  }
  for (const char* block : {"global_config", "synchronizer", "network"}) {
    if (!root[block]) c.error(root, "missing '" + std::string(block) + "'");
  }
  return learner_blocks;
}

void read_global(converter& c, const YAML::Node& g, published& p) {
  p.size_text = c.text(g, "global_config", "model_size");
  if (!p.size_text.empty()) {
    auto n = model_size(p.size_text);
    if (!n)
      c.error(g["model_size"], "global_config.model_size: " + n.error().message());
    else if (*n > 1e15)
      c.error(g["model_size"], "global_config.model_size: at most 1e15 parameters");
    else
      p.params = *n;
  }
  p.learners = c.number(g, "global_config", "total_learners", 1, 4096);
  p.inner = c.number(g, "global_config", "inner_steps", 1, 1e6);
  p.sync = c.number(g, "global_config", "outer_sync_frequency", 1, 1e6);
  if (std::isfinite(p.inner) && std::isfinite(p.sync) && p.inner != p.sync) {
    c.error(g["outer_sync_frequency"],
            "global_config.outer_sync_frequency: " + format_exact(p.sync) +
                " differs from inner_steps " + format_exact(p.inner) +
                "; both are the inner steps between two syncs of a fragment (H) here");
  }
  if (std::isfinite(p.inner) && std::floor(p.inner) != p.inner)
    c.error(g["inner_steps"], "global_config.inner_steps: expected a whole number of steps");
  p.compress = c.boolean(g, "global_config", "compress_before_send");
}

void read_synchronizer(converter& c, const YAML::Node& s, published& p) {
  const std::string endpoint = c.text(s, "synchronizer", "endpoint");
  if (!endpoint.empty()) {
    const size_t colon = endpoint.rfind(':');
    auto port = colon == std::string::npos
                    ? result<uint16_t>(status(errc::invalid_argument, ""))
                    : text::parse_number<uint16_t>(endpoint.substr(colon + 1));
    if (colon == 0 || !port || *port == 0) {
      c.error(s["endpoint"], "synchronizer.endpoint: expected host:port, got '" + endpoint + "'");
    } else {
      p.host = endpoint.substr(0, colon);
      p.port = std::to_string(*port);
    }
  }
  p.quorum = c.number(s, "synchronizer", "quorum_size", 1, 4096);
  if (std::isfinite(p.quorum) && std::isfinite(p.learners) && p.quorum > p.learners) {
    c.error(s["quorum_size"], "synchronizer.quorum_size: " + format_exact(p.quorum) +
                                  " is above global_config.total_learners " +
                                  format_exact(p.learners));
  }
  p.grace_s = c.number(s, "synchronizer", "grace_window_seconds", 0, 86400);
  p.strategy = c.text(s, "synchronizer", "merge_strategy");
  if (p.strategy == "token_weighted") p.merge = "weighted";
  if (p.strategy == "rda") p.merge = "rda";
  if (p.strategy == "uniform" || p.strategy == "plain") p.merge = "plain";
  if (p.merge.empty() && !p.strategy.empty()) {
    c.error(s["merge_strategy"], "synchronizer.merge_strategy: '" + p.strategy +
                                     "' is not one of token_weighted, rda, uniform");
  }
  const std::string fallback = c.text(s, "synchronizer", "fallback");
  if (!fallback.empty() && fallback != "skip_straggler") {
    c.error(s["fallback"],
            "synchronizer.fallback: '" + fallback +
                "' is not supported: a merge here never waits past its quorum and grace "
                "window for a straggler, whose delta joins a later merge (skip_straggler)");
  }
}

void read_network(converter& c, const YAML::Node& n, published& p) {
  p.gbps = c.number(n, "network", "wan_bandwidth_gbps", 1e-6, 1e6);
  p.rtt_ms = c.number(n, "network", "wan_latency_ms", 0, 86400e3);
  p.ratio = c.number(n, "network", "compression_ratio", 1, 1e6);
}

// `rest`: where the keys the block leaves out come from (learner_0's block; null for none).
published_learner read_learner(converter& c, int index, const YAML::Node& given,
                               const YAML::Node& rest) {
  const std::string name = "learner_" + std::to_string(index);
  c.only(given, name,
         {"region", "accelerator", "chips", "batch_size_per_chip", "local_optimizer", "local_lr",
          "momentum_beta"});
  published_learner l;
  l.index = index;
  l.block = given;
  if (!given.IsMap()) return l;
  // Each key from the block, or from `rest` when the block has none (an error about it then
  // points at rest's line).
  YAML::Node block = given;
  const char* keys[] = {"region",          "accelerator", "chips",        "batch_size_per_chip",
                        "local_optimizer", "local_lr",    "momentum_beta"};
  if (rest.IsMap() && std::any_of(std::begin(keys), std::end(keys),
                                  [&](const char* k) { return !given[k] && rest[k]; })) {
    block = YAML::Node(YAML::NodeType::Map);
    for (const char* key : keys) {
      if (given[key]) {
        block[key] = given[key];
      } else if (rest[key]) {
        block[key] = rest[key];
      }
    }
  }
  l.region = c.text(block, name, "region");
  l.accelerator = c.text(block, name, "accelerator");
  if (!l.accelerator.empty() && accelerators().count(l.accelerator) == 0) {
    std::string known;
    for (const auto& [a, tf] : accelerators()) known += (known.empty() ? "" : ", ") + a;
    c.error(block["accelerator"], name + ".accelerator: unknown '" + l.accelerator + "' (known: " +
                                      known + "); convert without it and set speeds[i].slowdown");
  }
  l.chips = c.number(block, name, "chips", 1, 4294967296.0);
  l.per_chip = c.number(block, name, "batch_size_per_chip", 1, 1e9);
  const std::string opt = c.text(block, name, "local_optimizer");
  if (!opt.empty() && opt != "adamw") {
    c.error(block["local_optimizer"],
            name + ".local_optimizer: '" + opt + "' is not supported: learners train with AdamW");
  }
  l.lr = c.number(block, name, "local_lr", 1e-12, 10);
  l.beta1 = c.number(block, name, "momentum_beta", 0, 0.999999);
  return l;
}

// Every learner_N block, numbered from 0 without gaps, as many as total_learners, with the
// one inner optimizer's settings alike.
void read_learners(converter& c, const std::map<int, YAML::Node>& blocks, const YAML::Node& g,
                   published& p) {
  auto& ls = p.ls;
  // "The rest as learner_0": a key a later block leaves out is learner_0's.
  const auto first = blocks.find(0);
  const YAML::Node none;
  std::string taken_by;
  for (const auto& [index, block] : blocks) {
    const bool inherits = index > 0 && first != blocks.end() && first->second.IsMap();
    if (inherits && block.IsMap()) {
      std::string taken;
      const YAML::Node& given = block;
      for (const auto& kv : first->second) {
        if (kv.first.IsScalar() && !given[kv.first.Scalar()])
          taken += (taken.empty() ? "" : ", ") + kv.first.Scalar();
      }
      if (!taken.empty())
        taken_by +=
            (taken_by.empty() ? "" : "; ") + ("learner_" + std::to_string(index) + "'s ") + taken;
    }
    auto l = read_learner(c, index, block, inherits ? first->second : none);
    if (block.IsMap()) ls.push_back(std::move(l));
  }
  if (!taken_by.empty()) p.assumed.push_back(taken_by + " as learner_0's");
  // Fewer blocks than learners, numbered without gaps: the blocks repeat in order.
  const bool numbered = std::all_of(ls.begin(), ls.end(), [&](const published_learner& l) {
    return l.index == static_cast<int>(&l - ls.data());
  });
  if (std::isfinite(p.learners) && numbered && !ls.empty() &&
      ls.size() < static_cast<size_t>(p.learners)) {
    const size_t given = ls.size(), total = static_cast<size_t>(p.learners);
    for (size_t i = given; i < total; ++i) {
      published_learner l = ls[i % given];
      l.index = static_cast<int>(i);
      ls.push_back(std::move(l));
    }
    p.assumed.push_back(
        "learner_" + std::to_string(given) + " .. learner_" + std::to_string(total - 1) +
        " repeat learner_0 .. learner_" + std::to_string(given - 1) + " in order (total_learners " +
        std::to_string(total) + ", " + std::to_string(given) + " learner_N blocks)");
  }
  if (std::isfinite(p.learners) && ls.size() != static_cast<size_t>(p.learners)) {
    c.error(g["total_learners"], "global_config.total_learners: " + format_exact(p.learners) +
                                     " but the file has " + std::to_string(ls.size()) +
                                     " learner_N blocks");
  }
  for (size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].index != static_cast<int>(i)) {
      c.error(ls[i].block, "learner_" + std::to_string(ls[i].index) +
                               ": learner blocks are numbered from learner_0 without gaps "
                               "(expected learner_" +
                               std::to_string(i) + ")");
      break;
    }
  }
  // One inner optimizer for all: the learners share its settings.
  for (const auto& l : ls) {
    if (l.lr != ls.front().lr && std::isfinite(l.lr)) {
      c.error(l.block["local_lr"], "learner_" + std::to_string(l.index) +
                                       ".local_lr: differs from learner_" +
                                       std::to_string(ls.front().index) +
                                       "'s; every learner trains with the one inner.lr");
    }
    if (l.beta1 != ls.front().beta1 && std::isfinite(l.beta1)) {
      c.error(l.block["momentum_beta"], "learner_" + std::to_string(l.index) +
                                            ".momentum_beta: differs from learner_" +
                                            std::to_string(ls.front().index) +
                                            "'s; every learner trains with the one inner.beta1");
    }
  }
}

// Our form of a checked published file, each key with where it comes from.
std::string write_config(const published& p, const std::string& path) {
  const auto& ls = p.ls;
  std::ostringstream out;
  out << "# Converted from " << yaml_comment_text(path)
      << " (the published cluster-file form) by diloco config convert.\n"
      << "# Each key says which key of that file it comes from; keys not listed keep the\n"
      << "# built-in defaults (diloco simulate --print-config).\n";
  for (const auto& a : p.assumed) out << "# Assumed: " << yaml_comment_text(a) << ".\n";
  // Tokens per step (chips x per-chip batch) set each learner's batch, the largest getting
  // `largest_batch`; the per-chip batch over the chip's throughput sets its step time, the
  // fastest taking one step per simulated second.
  double most_tokens = 0, fastest = INFINITY;
  for (const auto& l : ls) {
    most_tokens = std::max(most_tokens, l.chips * l.per_chip);
    fastest = std::min(fastest, l.per_chip / accelerators().at(l.accelerator));
  }
  const double latency_s = p.rtt_ms / 2 / 1000;
  const auto x = [](double v) { return format_exact(v); };
  out << "learners:  # learner_0 .. learner_" << ls.size() - 1
      << " (global_config.total_learners: " << ls.size() << ")\n";
  std::vector<std::string> regions;
  for (const auto& l : ls) {
    const int batch = std::max(
        1, static_cast<int>(std::lround(largest_batch * l.chips * l.per_chip / most_tokens)));
    const double slowdown = (l.per_chip / accelerators().at(l.accelerator)) / fastest;
    out << "  - {region: " << yaml_scalar(l.region) << ", chips: " << x(l.chips)
        << ", batch: " << batch << ", slowdown: " << x(slowdown) << "}  # learner_" << l.index
        << ": " << x(l.chips) << " x " << l.accelerator << ", " << x(l.per_chip)
        << " per chip: batch in proportion to its tokens per step, step time per chip's "
           "peak bf16 throughput\n";
    if (std::find(regions.begin(), regions.end(), l.region) == regions.end())
      regions.push_back(l.region);
  }
  out << "regions:  # network.wan_*: each region's links to the syncers, both directions\n";
  for (const auto& r : regions) {
    out << "  - {name: " << yaml_scalar(r) << ", latency_s: " << x(latency_s)
        << ", bandwidth_gbps: " << x(p.gbps) << "}\n";
  }
  out << "period_steps: " << x(p.inner)
      << "  # global_config.inner_steps (= outer_sync_frequency)\n";
  out << "quorum: " << x(p.quorum) << "  # synchronizer.quorum_size\n";
  out << "grace: " << (p.grace_s > 0 ? "true" : "false")
      << "  # synchronizer.grace_window_seconds: " << x(p.grace_s) << "\n";
  if (p.grace_s > 0)
    out << "grace_cap_s: " << x(p.grace_s) << "  # synchronizer.grace_window_seconds\n";
  out << "merge: " << p.merge << "  # synchronizer.merge_strategy: " << p.strategy << "\n";
  out << "# synchronizer.fallback: skip_straggler, what a merge does past quorum and grace "
         "window\n";
  double topk = 0;
  const std::string codec = p.compress ? codec_for_ratio(p.ratio, topk) : "fp32";
  out << "uplink:  # global_config.compress_before_send: " << (p.compress ? "true" : "false")
      << ", network.compression_ratio: " << x(p.ratio) << "\n";
  out << "  codec: " << codec << "\n";
  if (codec == "topk") out << "  topk_fraction: " << x(topk) << "\n";
  out << "downlink: " << (p.compress ? "int4" : "fp32")
      << "  # global_config.compress_before_send (updates sent back: int4 at most)\n";
  out << "inner:\n";
  out << "  lr: " << x(ls.front().lr) << "  # learner_N.local_lr\n";
  out << "  beta1: " << x(ls.front().beta1)
      << "  # learner_N.momentum_beta; learner_N.local_optimizer: adamw\n";
  out << "link:\n";
  out << "  latency_s: " << x(latency_s) << "  # network.wan_latency_ms: " << x(p.rtt_ms)
      << " (round trip), one way\n";
  out << "  bandwidth_gbps: " << x(p.gbps) << "  # network.wan_bandwidth_gbps\n";
  out << "  model_params: " << x(p.params) << "  # global_config.model_size: " << p.size_text
      << " (payloads take its wire time)\n";
  out << "nodes:  # synchronizer.endpoint: one node there runs every actor; add nodes and\n"
      << "        # placement.learners to put learners elsewhere (docs/deploy.md)\n";
  out << "  - {name: syncer, host: " << yaml_scalar(p.host) << ", port: " << p.port << "}\n";
  return out.str();
}

}  // namespace

bool is_published_form(const YAML::Node& root) {
  if (!root.IsMap()) return false;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) continue;
    const std::string k = kv.first.Scalar();
    if (k == "global_config" || k == "synchronizer" || k == "network" ||
        (k.rfind("learner_", 0) == 0 && k.size() > 8 &&
         std::all_of(k.begin() + 8, k.end(), [](char c) { return c >= '0' && c <= '9'; })))
      return true;
  }
  return false;
}

result<published_conversion> convert_published(const YAML::Node& root, const std::string& path) {
  converter c{path, {}, {}};
  const auto learner_blocks = top_level(c, root);
  if (!c.errors.empty() && !(root["global_config"] && root["synchronizer"] && root["network"])) {
    return c.failed();
  }
  const YAML::Node g = root["global_config"];
  c.only(g, "global_config",
         {"model_size", "total_learners", "inner_steps", "outer_sync_frequency",
          "compress_before_send"});
  const YAML::Node s = root["synchronizer"];
  c.only(s, "synchronizer",
         {"endpoint", "quorum_size", "grace_window_seconds", "merge_strategy", "fallback"});
  const YAML::Node n = root["network"];
  c.only(n, "network", {"wan_bandwidth_gbps", "wan_latency_ms", "compression_ratio"});
  if (!c.errors.empty() && !(g.IsMap() && s.IsMap() && n.IsMap())) {
    return c.failed();
  }
  published p;
  read_global(c, g, p);
  read_synchronizer(c, s, p);
  read_network(c, n, p);
  read_learners(c, learner_blocks, g, p);
  if (!c.errors.empty()) return c.failed();
  published_conversion out;
  out.yaml = write_config(p, path);
  for (const auto& a : p.assumed) out.assumed += (out.assumed.empty() ? "" : "; ") + a;
  return out;
}

}  // namespace diloco
