#include "config/keys.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "config/values.hpp"

namespace diloco {

namespace {

status bad_value(const std::string& key, const std::string& what) {
  // Parsers of enumerations name their key already ("mode: 'fast': expected ...").
  if (what.rfind(key + ": ", 0) == 0) return status(errc::invalid_argument, what);
  return status(errc::invalid_argument, key + ": " + what);
}

template <class T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.empty() ? "\"\"" : v;  // an empty string must not read back as null
  } else if constexpr (std::is_floating_point_v<T>) {
    // The shortest text that reads back as the same double.
    for (int precision = 6; precision <= 17; ++precision) {
      std::ostringstream out;
      out.precision(precision);
      out << v;
      if (std::strtod(out.str().c_str(), nullptr) == static_cast<double>(v)) return out.str();
    }
    return std::to_string(v);
  } else {
    std::ostringstream out;
    out << v;
    return out.str();
  }
}

// The one reader of a key's scalar value: a number (integers in range, finite doubles), a
// boolean (true/yes/on/1, false/no/off/0) or a string as it is.
template <class T>
status parse_value(const std::string& name, const std::string& text, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "yes" || text == "on" || text == "1") {
      out = true;
    } else if (text == "false" || text == "no" || text == "off" || text == "0") {
      out = false;
    } else {
      return bad_value(name, "expected true or false, got " + text::quoted(text));
    }
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = text;
  } else if constexpr (std::is_same_v<T, double>) {
    // A name ending in "_s" holds seconds, which may carry a unit (text::parse_field).
    auto v = text::parse_field(name, text);
    if (!v) return bad_value(name, v.error().message());
    out = *v;
  } else {
    auto v = text::parse_number<T>(text);
    if (!v) return bad_value(name, v.error().message());
    out = *v;
  }
  return {};
}

template <class T>
config_key number_key(std::string name, std::string help, T run_config::*top) {
  config_key k;
  k.name = name;
  k.help = std::move(help);
  k.set = [name, top](run_config& c, const std::string& text) -> status {
    return parse_value(name, text, c.*top);
  };
  k.get = [top](const run_config& c) { return show(c.*top); };
  if constexpr (std::is_same_v<T, std::string>)
    k.text = [top](const run_config& c) { return c.*top; };
  return k;
}

// A key for a field of a nested struct: member pointer to the struct, then to the field.
template <class S, class T>
config_key nested_key(std::string name, std::string help, S run_config::*outer, T S::*inner) {
  config_key k;
  k.name = name;
  k.help = std::move(help);
  k.set = [name, outer, inner](run_config& c, const std::string& text) -> status {
    return parse_value(name, text, (c.*outer).*inner);
  };
  k.get = [outer, inner](const run_config& c) { return show((c.*outer).*inner); };
  if constexpr (std::is_same_v<T, std::string>)
    k.text = [outer, inner](const run_config& c) { return (c.*outer).*inner; };
  return k;
}

// The words an enumeration's parser takes, found by printing each value and reading it back.
template <class E>
std::vector<std::string> enum_words(result<E> (*parse)(const std::string&),
                                    const char* (*print)(E)) {
  std::vector<std::string> words;
  for (int i = 0; i < 64; ++i) {
    const auto e = static_cast<E>(i);
    const std::string w = print(e);
    const auto back = parse(w);
    if (back && *back == e) words.push_back(w);
  }
  return words;
}

// A misspelt word's error, with the word it was probably meant to be.
template <class E>
status bad_word(const std::string& name, const std::string& text, const status& error,
                result<E> (*parse)(const std::string&), const char* (*print)(E)) {
  const std::string near = text::nearest(text, enum_words(parse, print));
  return bad_value(name, error.message() + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

// A key whose value is one of a few words.
template <class E>
config_key enum_key(std::string name, std::string help, E run_config::*field,
                    result<E> (*parse)(const std::string&), const char* (*print)(E)) {
  config_key k;
  k.name = name;
  k.help = std::move(help);
  k.set = [name, field, parse, print](run_config& c, const std::string& text) -> status {
    auto v = parse(text);
    if (!v) return bad_word(name, text, v.error(), parse, print);
    c.*field = *v;
    return {};
  };
  k.get = [field, print](const run_config& c) { return std::string(print(c.*field)); };
  return k;
}

// A comma-separated list of node names for a placement field.
config_key node_list_key(std::string name, std::string help,
                         std::vector<std::string> placement_config::*field) {
  config_key k;
  k.name = name;
  k.help = std::move(help);
  k.set = [field](run_config& c, const std::string& text) -> status {
    auto& list = c.deploy.placement.*field;
    list.clear();
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
      const size_t a = item.find_first_not_of(" []"), b = item.find_last_not_of(" []");
      if (a == std::string::npos) continue;
      list.push_back(item.substr(a, b - a + 1));
    }
    return status();
  };
  k.get = [field](const run_config& c) {
    std::string out = "\"";
    const auto& list = c.deploy.placement.*field;
    for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + list[i];
    return out + "\"";
  };
  k.text = [get = k.get](const run_config& c) {
    const std::string quoted = get(c);
    return quoted.substr(1, quoted.size() - 2);
  };
  return k;
}

std::vector<config_key> make_keys() {
  std::vector<config_key> k;
  k.push_back(enum_key("mode", "decoupled, diloco (synchronous DiLoCo) or dp (data parallel)",
                       &run_config::mode, parse_run_mode, to_string));
  k.push_back(number_key("seed", "run seed: initialization, data order, interleaving, speeds",
                         &run_config::seed));
  k.push_back(number_key("interleave_seed",
                         "simulation: seed of the order ready actors run in (0: from seed)",
                         &run_config::interleave_seed));
  k.push_back(number_key("learners", "M, learners (compute islands)", &run_config::learners));
  k.push_back(number_key("max_learners", "learner ids that may join later (0: learners)",
                         &run_config::max_learners));
  k.push_back(number_key("shards", "syncer shards; fragment p lives on shard p mod shards",
                         &run_config::shards));
  k.push_back(number_key("batch", "tokens per inner step per learner", &run_config::batch));
  k.push_back(number_key("token_budget", "tokens over all learners; the run stops when spent",
                         &run_config::token_budget));
  k.push_back(number_key("fragments", "P, fragments of the model", &run_config::fragments));
  k.push_back(enum_key("packing", "tensor-to-fragment packing: balanced or strided (by layer)",
                       &run_config::packing, parse_fragment_pattern, to_string));
  {
    // A number, or `auto`: adaptive inner steps from the H it holds (period_auto.enabled).
    config_key h = number_key("period_steps",
                              "H, inner steps between two syncs of a fragment (auto: the "
                              "scheduler chooses it, period_auto)",
                              &run_config::period_steps);
    h.set = [number = h.set](run_config& c, const std::string& text) -> status {
      if (text == "auto") {
        c.period_auto.enabled = true;
        return {};
      }
      return number(c, text);
    };
    k.push_back(std::move(h));
  }
  k.push_back(nested_key("period_auto.enabled",
                         "adaptive inner steps: the scheduler chooses H from measured step times "
                         "and links, period_steps being the first (true/false)",
                         &run_config::period_auto, &adaptive_period::enabled));
  k.back().only_when_set = true;
  k.push_back(nested_key("period_auto.min_steps",
                         "adaptive inner steps: the smallest H (0: period_steps)",
                         &run_config::period_auto, &adaptive_period::min_steps));
  k.back().only_when_set = true;
  k.push_back(nested_key("period_auto.max_steps", "adaptive inner steps: the largest H",
                         &run_config::period_auto, &adaptive_period::max_steps));
  k.back().only_when_set = true;
  k.push_back(nested_key("period_auto.target_load",
                         "adaptive inner steps: the share of a period a learner's busiest link "
                         "may be busy",
                         &run_config::period_auto, &adaptive_period::target_load));
  k.back().only_when_set = true;
  k.push_back(number_key("overlap_steps",
                         "tau, steps between sending a fragment and mixing its update",
                         &run_config::overlap_steps));
  k.push_back(enum_key("schedule", "fragment offsets: strided (spread over H) or sequential",
                       &run_config::schedule, parse_schedule_pattern, to_string));
  k.push_back(enum_key("schedule_clock",
                       "what a schedule step is: global (the shared clock; rounds aligned across "
                       "learners of any speed) or local (each learner's own steps)",
                       &run_config::clock, parse_schedule_clock, to_string));
  k.push_back(number_key("alpha", "learner mix on receipt: alpha*local + (1-alpha)*global",
                         &run_config::alpha));
  k.push_back(number_key("quorum", "K, outer gradients a merge waits for", &run_config::quorum));
  {
    config_key g;
    g.name = "grace";
    g.help = "adaptive grace window after the quorum (true/false)";
    g.set = [](run_config& c, const std::string& t) -> status {
      if (t == "true" || t == "yes" || t == "on")
        c.grace = true;
      else if (t == "false" || t == "no" || t == "off")
        c.grace = false;
      else
        return bad_value("grace", "expected true or false, got '" + t + "'");
      return {};
    };
    g.get = [](const run_config& c) { return std::string(c.grace ? "true" : "false"); };
    k.push_back(g);
  }
  k.push_back(number_key("grace_gamma", "gamma < 1, share of the slack the grace window may use",
                         &run_config::grace_gamma));
  k.push_back(number_key("grace_cap_s", "upper bound of the grace window, seconds",
                         &run_config::grace_cap_s));
  k.push_back(enum_key("merge", "rda, weighted or plain (embedding spans always weighted)",
                       &run_config::merge, parse_merge_rule, to_string));
  k.push_back(number_key("staleness_max", "versions behind beyond which a delta is dropped",
                         &run_config::staleness_max));
  k.push_back(number_key("staleness_decay",
                         "p: a delta the global moved r rounds past counts (1+r)^-p of its weight "
                         "(0: whole)",
                         &run_config::staleness_decay));
  k.push_back(enum_key("final_merge",
                       "the run's last merge: average (the learners' last models merged, applied "
                       "whole) or outer (one more outer step)",
                       &run_config::final_merge, parse_final_merge_rule, to_string));
  {
    config_key u;
    u.name = "uplink.codec";
    u.help =
        "outer-gradient codec: fp32 bf16 int8 int4 fp4 int2 sign1 topk (sets the codec's "
        "default error feedback: on for int2, sign1 and topk)";
    u.set = [](run_config& c, const std::string& t) -> status {
      auto kind = parse_codec_kind(t);
      if (!kind) return bad_word("uplink.codec", t, kind.error(), parse_codec_kind, to_string);
      const codec_config fresh = codec_config::make(*kind);
      c.uplink.kind = fresh.kind;
      c.uplink.error_feedback = fresh.error_feedback;
      return {};
    };
    u.get = [](const run_config& c) { return std::string(to_string(c.uplink.kind)); };
    k.push_back(u);
  }
  k.push_back(nested_key("uplink.block", "values per scale of the blockwise codecs",
                         &run_config::uplink, &codec_config::block));
  k.push_back(nested_key("uplink.topk_fraction", "share of values top-k keeps", &run_config::uplink,
                         &codec_config::topk_fraction));
  k.push_back(nested_key("uplink.error_feedback", "error feedback at the learner (true/false)",
                         &run_config::uplink, &codec_config::error_feedback));
  k.push_back(enum_key("downlink", "codec of the outer updates sent back: fp32 bf16 int8 int4 fp4",
                       &run_config::downlink, parse_codec_kind, to_string));
  k.push_back(nested_key("speed.step_time_s", "simulated seconds per inner step at nominal speed",
                         &run_config::speed, &speed_config::step_time_s));
  k.push_back(nested_key("speed.slowdown", "every learner's step time multiplier",
                         &run_config::speed, &speed_config::slowdown));
  k.push_back(nested_key("speed.jitter", "relative step-to-step variation (lognormal)",
                         &run_config::speed, &speed_config::jitter));
  k.push_back(nested_key("link.latency_s", "simulated one-way latency learner <-> shard",
                         &run_config::link, &link_config::latency_s));
  k.push_back(nested_key("link.bandwidth_gbps",
                         "simulated bandwidth of each learner <-> shard link", &run_config::link,
                         &link_config::bandwidth_gbps));
  k.push_back(enum_key("compute", "real (train the model) or cost (steps are durations, no math)",
                       &run_config::compute, parse_compute_mode, to_string));
  k.push_back(number_key("chips_per_learner", "chips of each learner (failure rate, goodput)",
                         &run_config::chips_per_learner));
  k.push_back(number_key("duration_s",
                         "stop after this much (simulated) time; 0: only the token budget",
                         &run_config::duration_s));
  k.push_back(nested_key("interruptions.mtbi_hours",
                         "per-chip mean time between interruptions (0: none)",
                         &run_config::interruptions, &failure_model::mtbi_hours));
  k.push_back(nested_key("interruptions.recovery_s",
                         "a failed non-elastic learner is down this long",
                         &run_config::interruptions, &failure_model::recovery_s));
  k.push_back(nested_key("interruptions.elastic",
                         "learners shrink and grow instead of going down (true/false)",
                         &run_config::interruptions, &failure_model::elastic));
  k.push_back(nested_key("interruptions.rescale_s", "pause of an elastic learner to shrink or grow",
                         &run_config::interruptions, &failure_model::rescale_s));
  k.push_back(nested_key("interruptions.unit_chips", "chips an elastic learner loses per failure",
                         &run_config::interruptions, &failure_model::unit_chips));
  k.push_back(nested_key("link.model_params",
                         "simulated: payloads take the wire time of a model of this many "
                         "parameters (0: the model's own)",
                         &run_config::link, &link_config::model_params));
  k.back().only_when_set = true;
  k.push_back(nested_key("link.drop_rate", "simulated: share of data messages lost on a link",
                         &run_config::link, &link_config::drop_rate));
  k.push_back(nested_key("link.dup_rate", "simulated: share of data messages delivered twice",
                         &run_config::link, &link_config::dup_rate));
  k.push_back(number_key("progress_every_steps", "learner progress reports to the metrics actor",
                         &run_config::progress_every_steps));
  k.push_back(number_key("max_unanswered_deltas",
                         "backpressure: unanswered deltas per learner and fragment (0: no limit)",
                         &run_config::max_unanswered_deltas));
  k.push_back(number_key("step_timeout_s",
                         "a PyTorch learner's step not returned after this many seconds ends "
                         "the process, exit 3 (0: never)",
                         &run_config::step_timeout_s));
  k.back().only_when_set = true;  // an operating limit: runs before the key keep their identity
  k.push_back(nested_key("snapshot.dir", "write Chandy-Lamport snapshots here (\"\": none)",
                         &run_config::snapshot, &snapshot_config::dir));
  k.push_back(nested_key("snapshot.every_s", "a snapshot every this much simulated time (0: none)",
                         &run_config::snapshot, &snapshot_config::every_s));
  k.push_back(nested_key("snapshot.every_steps",
                         "a snapshot every this many cluster steps (0: none)",
                         &run_config::snapshot, &snapshot_config::every_steps));
  {
    config_key at;
    at.name = "snapshot.at_s";
    at.help = "and at these simulated times (comma separated)";
    at.set = [](run_config& c, const std::string& text) -> status {
      c.snapshot.at_s.clear();
      std::stringstream in(text);
      std::string item;
      while (std::getline(in, item, ',')) {
        if (item.find_first_not_of(" []") == std::string::npos) continue;
        auto v = text::parse_seconds(item.substr(item.find_first_not_of(" [")));
        if (!v) return bad_value("snapshot.at_s", "'" + item + "': " + v.error().message());
        c.snapshot.at_s.push_back(*v);
      }
      return {};
    };
    at.get = [](const run_config& c) {
      std::string out = "\"";
      for (size_t i = 0; i < c.snapshot.at_s.size(); ++i)
        out += (i ? "," : "") + show(c.snapshot.at_s[i]);
      return out + "\"";
    };
    at.text = [get = at.get](const run_config& c) {
      const std::string quoted = get(c);
      return quoted.substr(1, quoted.size() - 2);
    };
    k.push_back(std::move(at));
  }
  k.push_back(nested_key("snapshot.keep", "complete snapshots kept (older ones are deleted)",
                         &run_config::snapshot, &snapshot_config::keep));
  k.push_back(node_list_key("placement.learners",
                            "deployed: the node of each learner slot (\"\": all on the first node)",
                            &placement_config::learners));
  k.push_back(node_list_key("placement.shards",
                            "deployed: the node of each syncer shard (\"\": the first node)",
                            &placement_config::shards));
  k.push_back(node_list_key("placement.regionals",
                            "deployed: the node of each regional syncer (\"\": the first node)",
                            &placement_config::regionals));
  k.back().only_when_set = true;
  for (const auto& [name, field] :
       {std::make_pair("placement.scheduler", &placement_config::scheduler),
        std::make_pair("placement.metrics", &placement_config::metrics),
        std::make_pair("placement.chaos", &placement_config::chaos),
        std::make_pair("placement.coordinator", &placement_config::coordinator)}) {
    config_key pk;
    pk.name = name;
    pk.help = "deployed: the node of this actor (\"\": the first node)";
    pk.set = [field = field](run_config& c, const std::string& text) {
      c.deploy.placement.*field = text;
      return status();
    };
    pk.get = [field = field](const run_config& c) {
      return "\"" + c.deploy.placement.*field + "\"";
    };
    pk.text = [field = field](const run_config& c) { return c.deploy.placement.*field; };
    k.push_back(std::move(pk));
  }
  for (const auto& [name, help, field] :
       {std::make_tuple("tls.ca", "deployed: CA certificate (PEM) of mutual TLS (\"\": plain TCP)",
                        &tls_config::ca),
        std::make_tuple("tls.certificate", "deployed: a node's certificate; {node} is its name",
                        &tls_config::certificate),
        std::make_tuple("tls.key", "deployed: a node's private key; {node} is its name",
                        &tls_config::key)}) {
    config_key tk;
    tk.name = name;
    tk.help = help;
    tk.set = [field = field](run_config& c, const std::string& text) {
      c.deploy.tls.*field = text;
      return status();
    };
    tk.get = [field = field](const run_config& c) { return "\"" + c.deploy.tls.*field + "\""; };
    tk.text = [field = field](const run_config& c) { return c.deploy.tls.*field; };
    k.push_back(std::move(tk));
  }
  {
    config_key sk;
    sk.name = "secret_file";
    sk.help =
        "deployed: file with the run's shared secret (>= 16 bytes); nodes prove they hold it "
        "(required for plain TCP)";
    sk.set = [](run_config& c, const std::string& text) {
      c.deploy.secret_file = text;
      return status();
    };
    sk.get = [](const run_config& c) { return "\"" + c.deploy.secret_file + "\""; };
    sk.text = [](const run_config& c) { return c.deploy.secret_file; };
    k.push_back(std::move(sk));
  }
  k.push_back(nested_key("debug.nondeterministic_learner",
                         "testing replay: this learner adds a truly random perturbation (-1: none)",
                         &run_config::debug, &debug_config::nondeterministic_learner));
  k.push_back(nested_key("debug.nonfinite_learner",
                         "testing numerics: this learner's weights get a NaN (-1: none)",
                         &run_config::debug, &debug_config::nonfinite_learner));
  k.push_back(nested_key("debug.nonfinite_step", "testing numerics: after this many of its steps",
                         &run_config::debug, &debug_config::nonfinite_step));
  k.push_back(nested_key("alerts.dropped_learners",
                         "alert: learners missing from a merge above this (-1: M - K)",
                         &run_config::alerts, &alert_config::dropped_learners));
  k.push_back(nested_key("alerts.loss_rise",
                         "alert: a learner's loss above this x its first reported loss",
                         &run_config::alerts, &alert_config::loss_rise));
  k.push_back(nested_key("alerts.token_share",
                         "alert: one learner's share of the merged tokens above this (data skew)",
                         &run_config::alerts, &alert_config::token_share));
  k.push_back(nested_key("alerts.staleness_versions",
                         "alert: mean version gap of a merge above this (0: staleness_max / 2)",
                         &run_config::alerts, &alert_config::staleness_versions));
  k.push_back(nested_key("alerts.loss_gap",
                         "alert: a learner's loss rises by more than this share at merges",
                         &run_config::alerts, &alert_config::loss_gap));
  k.push_back(nested_key("alerts.compression_tolerance",
                         "alert: achieved compression off the codec's expected by more than this",
                         &run_config::alerts, &alert_config::compression_tolerance));
  k.push_back(nested_key("debug.nondeterministic_step",
                         "testing replay: after this many of that learner's steps",
                         &run_config::debug, &debug_config::nondeterministic_step));
  k.push_back(nested_key("debug.slow_shard_s",
                         "a slow syncer: shards spend this much longer on each delta (real time: "
                         "sleeping; simulated: deltas queue)",
                         &run_config::debug, &debug_config::slow_shard_s));
  k.push_back(nested_key("model.vocab", "vocabulary (bytes: 256)", &run_config::model,
                         &model_config::vocab));
  k.push_back(nested_key("model.context", "previous bytes seen", &run_config::model,
                         &model_config::context));
  k.push_back(nested_key("model.embed_dim", "embedding width", &run_config::model,
                         &model_config::embed_dim));
  k.push_back(
      nested_key("model.hidden", "hidden layer width", &run_config::model, &model_config::hidden));
  k.push_back(nested_key("model.hidden_layers", "hidden layers (>= 2)", &run_config::model,
                         &model_config::hidden_layers));
  k.push_back(nested_key("model.file",
                         "a PyTorch learner's layout and initial model (python3 -m diloco "
                         "export-model), for nodes without the learner (\"\": the MLP)",
                         &run_config::model, &model_config::file));
  k.push_back(nested_key("data.text_file", "train on this text file instead of the Markov chain",
                         &run_config::data, &data_config::text_file));
  k.push_back(nested_key("data.eval_fraction", "text files: tail held out", &run_config::data,
                         &data_config::eval_fraction));
  k.push_back(nested_key("data.contiguous",
                         "text files: each learner reads its own slice in order (a non-iid "
                         "split; false: examples at random positions of the whole text)",
                         &run_config::data, &data_config::contiguous));
  k.push_back(nested_key("data.eval_tokens", "size of the evaluation set", &run_config::data,
                         &data_config::eval_tokens));
  k.push_back(
      nested_key("inner.lr", "AdamW peak learning rate", &run_config::inner, &adamw_config::lr));
  k.push_back(nested_key("inner.beta1", "AdamW beta1", &run_config::inner, &adamw_config::beta1));
  k.push_back(nested_key("inner.beta2", "AdamW beta2", &run_config::inner, &adamw_config::beta2));
  k.push_back(nested_key("inner.eps", "AdamW epsilon", &run_config::inner, &adamw_config::eps));
  k.push_back(nested_key("inner.weight_decay", "AdamW decoupled weight decay", &run_config::inner,
                         &adamw_config::weight_decay));
  k.push_back(nested_key("inner.clip_norm", "global gradient-norm clip (0: off)",
                         &run_config::inner, &adamw_config::clip_norm));
  k.push_back(nested_key("inner.warmup_steps", "linear warmup steps", &run_config::inner,
                         &adamw_config::warmup_steps));
  k.push_back(nested_key("inner.min_lr_ratio", "cosine floor as a share of inner.lr",
                         &run_config::inner, &adamw_config::min_lr_ratio));
  k.push_back(nested_key("outer.lr", "outer Nesterov learning rate", &run_config::outer,
                         &nesterov_config::lr));
  k.push_back(nested_key("outer.momentum", "outer Nesterov momentum", &run_config::outer,
                         &nesterov_config::momentum));
  return k;
}

// Markov keys live two levels down.
void add_markov_keys(std::vector<config_key>& k) {
  auto mk = [](std::string name, std::string help, auto markov_config::*field) {
    config_key key;
    key.name = name;
    key.help = std::move(help);
    key.set = [name, field](run_config& c, const std::string& text) -> status {
      return parse_value(name, text, c.data.markov.*field);
    };
    key.get = [field](const run_config& c) { return show(c.data.markov.*field); };
    return key;
  };
  k.push_back(mk("data.markov.order", "built-in chain: order", &markov_config::order));
  k.push_back(mk("data.markov.alphabet", "built-in chain: symbols", &markov_config::alphabet));
  k.push_back(mk("data.markov.concentration", "built-in chain: Dirichlet concentration",
                 &markov_config::concentration));
  k.push_back(mk("data.markov.seed", "built-in chain: its own seed", &markov_config::seed));
}

}  // namespace

std::string format_exact(double v) {
  return show(v);
}

const std::vector<config_key>& run_config_keys() {
  static const std::vector<config_key> keys = [] {
    auto k = make_keys();
    add_markov_keys(k);
    return k;
  }();
  return keys;
}

std::string suggest_key(const std::string& key) {
  // Names other tools (and the published cluster files) use for our keys.
  static const std::map<std::string, std::string> aliases = {
      {"quorum_size", "quorum"},
      {"min_quorum", "quorum"},
      {"inner_steps", "period_steps"},
      {"outer_sync_frequency", "period_steps"},
      {"sync_every", "period_steps"},
      {"total_learners", "learners"},
      {"num_learners", "learners"},
      {"local_lr", "inner.lr"},
      {"learning_rate", "inner.lr"},
      {"lr", "inner.lr"},
      {"outer_lr", "outer.lr"},
      {"momentum_beta", "inner.beta1"},
      {"outer_momentum", "outer.momentum"},
      {"grace_window_seconds", "grace_cap_s"},
      {"grace_window", "grace"},
      {"merge_strategy", "merge"},
      {"batch_size", "batch"},
      {"batch_size_per_chip", "batch"},
      {"chips", "chips_per_learner"},
      {"wan_bandwidth_gbps", "link.bandwidth_gbps"},
      {"wan_latency_ms", "link.latency_s"},
      {"num_fragments", "fragments"},
      {"total_tokens", "token_budget"},
      {"tokens", "token_budget"},
  };
  const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  if (auto it = aliases.find(last); it != aliases.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& k : run_config_keys()) {
    names.push_back(k.name);
    // A section's own name too ("snapshots" is a typo of the section "snapshot").
    const size_t dot = k.name.find('.');
    if (dot != std::string::npos && !key.empty() && key.find('.') == std::string::npos &&
        std::find(names.begin(), names.end(), k.name.substr(0, dot)) == names.end())
      names.push_back(k.name.substr(0, dot));
  }
  for (const char* list : {"speeds", "failures", "partitions", "membership", "shard_restarts",
                           "nodes", "link_changes", "regional_restarts", "regions"}) {
    names.emplace_back(list);
  }
  return text::nearest(key, names);
}

status set_config_key(run_config& config, const std::string& key, const std::string& value) {
  if (key == "speeds") return parse_speeds(config, value);
  if (key == "failures") return parse_failures(config, value);
  if (key == "partitions") return parse_partitions(config, value);
  if (key == "membership") return parse_membership(config, value);
  if (key == "shard_restarts") return parse_shard_restarts(config, value);
  if (key == "regional_restarts") return parse_regional_restarts(config, value);
  if (key == "nodes") return parse_nodes(config, value);
  if (key == "link_changes") return parse_link_changes(config, value);
  for (const auto& k : run_config_keys()) {
    if (k.name == key) return k.set(config, value);
  }
  const std::string near = suggest_key(key);
  return status(
      errc::invalid_argument,
      "unknown key '" + key + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

status parse_speeds(run_config& config, const std::string& text) {
  config.speeds.clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    speed_config s = config.speed;
    const size_t colon = item.find(':');
    auto slow = text::parse_double(item.substr(0, colon));
    if (!slow) return bad_value("speeds", "entry '" + item + "': " + slow.error().message());
    s.slowdown = *slow;
    if (colon != std::string::npos) {
      auto jit = text::parse_double(item.substr(colon + 1));
      if (!jit) return bad_value("speeds", "entry '" + item + "': " + jit.error().message());
      s.jitter = *jit;
    }
    config.speeds.push_back(s);
  }
  return {};
}

namespace {

// One entry of a scripted event list: WHO@AT_S+LENGTH_S (failures, partitions, shard restarts)
// or, without a length, WHO@AT_S (membership); WHO is the text before the '@'.
struct timed_entry {
  std::string who;
  double at_s = 0;
  double length_s = 0;
};

// `form` names the entry's shape for the errors (e.g. "learner@at_s+down_s, e.g. 2@300+120").
result<timed_entry> parse_timed_entry(const std::string& key, const std::string& item,
                                      bool with_length, const std::string& form) {
  const size_t at = item.find('@');
  const size_t plus = with_length ? item.find('+', at == std::string::npos ? 0 : at) : item.size();
  if (at == std::string::npos || plus == std::string::npos) {
    return bad_value(key, "entry '" + item + "': expected " + form);
  }
  timed_entry e;
  e.who = item.substr(0, at);
  auto a = text::parse_seconds(item.substr(at + 1, plus - at - 1));
  if (!a) return bad_value(key, "entry '" + item + "' (" + form + "): " + a.error().message());
  e.at_s = *a;
  if (with_length) {
    auto d = text::parse_seconds(item.substr(plus + 1));
    if (!d) return bad_value(key, "entry '" + item + "' (" + form + "): " + d.error().message());
    e.length_s = *d;
  }
  return e;
}

// The WHO of an entry as one index (a learner or a shard).
result<uint32_t> entry_index(const std::string& key, const std::string& item,
                             const std::string& who, const std::string& form) {
  auto v = text::parse_number<uint32_t>(who);
  if (!v) return bad_value(key, "entry '" + item + "' (" + form + "): " + v.error().message());
  return *v;
}

// Splits `text` at `sep` and hands each entry to `take`, stopping at the first error.
template <class F>
status each_entry(const std::string& text, char sep, F take) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (auto s = take(item); !s.ok()) return s;
  }
  return {};
}

// A list of INDEX@AT_S+LENGTH_S entries (a learner's failures, a shard's restarts) into `out`.
template <class Event>
status parse_index_events(const std::string& key, const std::string& form, const std::string& text,
                          std::vector<Event>& out) {
  out.clear();
  return each_entry(text, ',', [&](const std::string& item) -> status {
    auto e = parse_timed_entry(key, item, true, form);
    if (!e) return e.error();
    auto index = entry_index(key, item, e->who, form);
    if (!index) return index.error();
    out.push_back({*index, e->at_s, e->length_s});
    return {};
  });
}

}  // namespace

status parse_failures(run_config& config, const std::string& text) {
  return parse_index_events("failures", "learner@at_s+down_s, e.g. 2@300+120", text,
                            config.failures);
}

status parse_partitions(run_config& config, const std::string& text) {
  config.partitions.clear();
  const std::string form = "learners@at_s+heal_s, e.g. 1,2@300+60";
  return each_entry(text, ';', [&](const std::string& item) -> status {
    auto e = parse_timed_entry("partitions", item, true, form);
    if (!e) return e.error();
    partition_event p;
    if (auto s = each_entry(e->who, ',',
                            [&](const std::string& l) -> status {
                              auto v = text::parse_number<uint32_t>(l);
                              if (!v)
                                return bad_value("partitions", "entry '" + item + "': learner '" +
                                                                   l + "' is not an index");
                              p.learners.push_back(*v);
                              return {};
                            });
        !s.ok())
      return s;
    p.at_s = e->at_s;
    p.heal_s = e->length_s;
    config.partitions.push_back(std::move(p));
    return {};
  });
}

status parse_regional_restarts(run_config& config, const std::string& text) {
  config.regional_restarts.clear();
  const std::string form = "region@at_s+down_s, e.g. eu@300+60";
  return each_entry(text, ',', [&](const std::string& item) -> status {
    auto e = parse_timed_entry("regional_restarts", item, true, form);
    if (!e) return e.error();
    if (e->who.empty())
      return bad_value("regional_restarts", "entry '" + item + "' names no region (" + form + ")");
    config.regional_restarts.push_back({e->who, e->at_s, e->length_s});
    return {};
  });
}

status parse_link_changes(run_config& config, const std::string& text) {
  config.link_changes.clear();
  const std::string form =
      "[region:]bandwidth_factor@at_s+for_s, e.g. 0.1@300+200 or eu:0.1@300+200";
  return each_entry(text, ',', [&](const std::string& item) -> status {
    auto e = parse_timed_entry("link_changes", item, true, form);
    if (!e) return e.error();
    link_change ch;
    std::string factor = e->who;
    if (const size_t colon = factor.find(':'); colon != std::string::npos) {
      ch.region = factor.substr(0, colon);
      factor = factor.substr(colon + 1);
    }
    auto f = text::parse_double(factor);
    if (!f)
      return bad_value("link_changes",
                       "entry '" + item + "' (" + form + "): " + f.error().message());
    ch.bandwidth_factor = *f;
    ch.at_s = e->at_s;
    ch.for_s = e->length_s;
    config.link_changes.push_back(std::move(ch));
    return {};
  });
}

status parse_membership(run_config& config, const std::string& text) {
  config.membership.clear();
  const std::string form = "+learner@at_s (joins) or -learner@at_s (leaves)";
  return each_entry(text, ',', [&](const std::string& item) -> status {
    if (item.size() < 3 || (item[0] != '+' && item[0] != '-'))
      return bad_value("membership", "entry '" + item + "': expected " + form);
    auto e = parse_timed_entry("membership", item.substr(1), false, form);
    if (!e) return e.error();
    auto l = entry_index("membership", item, e->who, form);
    if (!l) return l.error();
    config.membership.push_back({*l, e->at_s, item[0] == '+'});
    return {};
  });
}

status parse_shard_restarts(run_config& config, const std::string& text) {
  return parse_index_events("shard_restarts", "shard@at_s+down_s, e.g. 0@300+60", text,
                            config.shard_restarts);
}

status parse_nodes(run_config& config, const std::string& text) {
  config.deploy.nodes.clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    const size_t at = item.find('@'), colon = item.rfind(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at) {
      return bad_value("nodes", "entry '" + item + "': expected name@host:port");
    }
    node_config n;
    n.name = item.substr(item.find_first_not_of(' '), at - item.find_first_not_of(' '));
    n.host = item.substr(at + 1, colon - at - 1);
    auto port = text::parse_number<uint32_t>(item.substr(colon + 1));
    if (!port || *port > 65535)
      return bad_value("nodes", "entry '" + item + "': the port must be in [1, 65535]");
    n.port = static_cast<uint32_t>(*port);
    config.deploy.nodes.push_back(std::move(n));
  }
  return status();
}

}  // namespace diloco
