#include "apps/run_options.hpp"

#include <algorithm>
#include <functional>
#include <sstream>

#include "actors/state_io.hpp"
#include "apps/cluster_file.hpp"
#include "apps/config_keys.hpp"
#include "base/checksum.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "runtime/env.hpp"

#include <yaml-cpp/yaml.h>
#include <map>

namespace diloco {

status add_set_flag(const std::string& v, std::vector<std::pair<std::string, std::string>>& sets) {
  const size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0) {
    return status(errc::invalid_argument, "expected key=value, got '" + v + "'");
  }
  sets.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  return status();
}

void bind_run_options(cli::arg_parser& p, run_options& o) {
  p.option("cluster", &o.cluster_file,
           "YAML cluster file (keys: docs/config.md); flags override it");
  auto alias = [&p, &o](const std::string& flag, const std::string& key, const std::string& metavar,
                        const std::string& help) {
    std::string shown;
    for (const auto& k : run_config_keys()) {
      if (k.name == key) shown = k.get(builtin_run_config());
    }
    p.option(
        flag,
        [&o, key](const std::string& v) {
          o.sets.emplace_back(key, v);
          return status();
        },
        metavar, shown, help + " (key " + key + ")");
  };
  alias("seed", "seed", "N", "run seed");
  alias("mode", "mode", "MODE", "decoupled, diloco or dp");
  alias("learners", "learners", "M", "learners");
  alias("quorum", "quorum", "K", "outer gradients a merge waits for");
  alias("grace", "grace", "BOOL", "adaptive grace window after the quorum");
  alias("budget", "token_budget", "TOKENS", "tokens over all learners");
  alias("fragments", "fragments", "P", "model fragments");
  alias("period", "period_steps", "H", "inner steps between syncs of a fragment");
  alias("overlap", "overlap_steps", "TAU", "steps until a sent fragment's update is mixed in");
  alias("codec", "uplink.codec", "CODEC", "outer-gradient codec");
  alias("data", "data.text_file", "FILE", "train on a text file");
  p.option(
      "speeds",
      [&o](const std::string& v) {
        o.sets.emplace_back("speeds", v);
        return status();
      },
      "LIST", "", "per-learner slowdown[:jitter], e.g. 1,1,1.18:0.1,1.18:0.1");
  p.option(
      "failures",
      [&o](const std::string& v) {
        o.sets.emplace_back("failures", v);
        return status();
      },
      "LIST", "", "scripted failures learner@at_s+down_s, e.g. 2@400+150");
  p.option(
      "set", [&o](const std::string& v) { return add_set_flag(v, o.sets); }, "KEY=VALUE", "",
      "set any key of the cluster file (repeatable)");
  p.flag("print-config", &o.print_config, "print the resolved configuration as YAML and exit");
  add_common_options(p, o.common);
}

// Every mistake of the file and the flags together, one per line: a user fixes them in one go.
result<run_config> resolve_run_options(const run_options& o, const run_config* base) {
  run_config config = base != nullptr && o.cluster_file.empty() ? *base : builtin_run_config();
  std::map<std::string, int> lines;
  std::vector<std::string> errors;
  if (!o.cluster_file.empty()) {
    auto loaded = load_cluster_file(o.cluster_file, config);
    if (!loaded) {
      if (loaded.error().code() != errc::invalid_argument) return loaded.error();  // unreadable
      errors.push_back(loaded.error().message());
    } else {
      config = loaded->config;
      lines = loaded->key_lines;
    }
  }
  for (const auto& [key, value] : o.sets) {
    if (auto st = set_config_key(config, key, value); !st.ok())
      errors.push_back(st.with_context("command line").message());
    lines.erase(key);  // the flag, not the file, set it now
  }
  config.inner.total_steps = config.steps_per_learner();
  if (auto st = validate_with_lines(config, o.cluster_file, lines); !st.ok())
    errors.push_back(st.message());
  if (auto st = cli::one_per_line(errors); !st.ok()) return st;
  return config;
}

namespace {
status check_loads(const loaded_snapshot& s, bool skip_pytorch_learners, int* skipped);
}  // namespace

status check_snapshot_loads(const loaded_snapshot& s) {
  return check_loads(s, false, nullptr);
}

result<bool> check_snapshot_loads_for_inspect(const loaded_snapshot& s) {
  int skipped = 0;
  const status st = check_loads(s, true, &skipped);
  if (skipped > 0) return false;  // the rest was checked against the built-in model's layout
  if (!st.ok()) return st;
  return true;
}

namespace {
status check_loads(const loaded_snapshot& s, bool skip_pytorch_learners, int* skipped) {
  const snapshot_manifest& m = s.manifest;
  const std::string where = s.path + "/MANIFEST";
  auto loaded =
      load_cluster_text(m.config_text, where + " (its configuration)", builtin_run_config());
  if (!loaded) return loaded.error();
  run_config config = loaded->config;
  config.inner.total_steps = config.steps_per_learner();
  if (auto st = config.validate(); !st.ok()) return st.with_context(where + " (its configuration)");
  if (run_identity(config) != m.run_id)
    return status(errc::corrupt_data,
                  where + ": its configuration does not match its run identity");
  const bool deployed = m.tick_scale == 1;
  auto made = actor_env::make(config, !deployed);
  if (!made) return made.error().with_context(where);
  // The environment as resume builds it, with inspect's leniency for PyTorch learners.
  auto checked = std::make_shared<actor_env>(**made);
  checked->skip_pytorch_learners = skip_pytorch_learners;
  const std::shared_ptr<const actor_env> env = checked;
  const auto& ids = env->ids;
  if (s.parts.size() != ids.count() || m.actors.size() != ids.count() ||
      (!deployed && m.tick_scale != env->tick_scale)) {
    return status(errc::corrupt_data, where + ": " + std::to_string(s.parts.size()) +
                                          " actor parts at tick scale " +
                                          std::to_string(m.tick_scale) + " for a run of " +
                                          std::to_string(ids.count()) + " actors at " +
                                          std::to_string(env->tick_scale));
  }
  for (uint32_t i = 0; i < s.parts.size(); ++i) {
    const std::string what = s.path + "/" + m.actors[i].file;
    const status st = check_part(env, i, s.parts[i].view(), what);
    if (skipped != nullptr) *skipped = env->pytorch_learners_skipped;
    if (!st.ok()) return st;
  }
  return ok_status();
}
}  // namespace

result<std::vector<std::string>> parse_compare_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    if (item != "dp" && item != "diloco") {
      return status(errc::invalid_argument,
                    "--compare: unknown system '" + item + "' (expected dp or diloco)");
    }
    out.push_back(item);
  }
  return out;
}

std::string describe_run(const run_config& c) {
  std::ostringstream out;
  out << "cluster: " << to_string(c.mode) << ", " << c.learners << " learners, " << c.shards
      << " syncer shards, " << c.fragments << " fragments (" << to_string(c.packing) << "), H "
      << c.period_steps << ", tau " << c.overlap_steps << ", K " << c.quorum
      << (c.grace ? " + grace" : "") << ", merge " << to_string(c.merge) << ", uplink "
      << to_string(c.uplink.kind) << ", downlink " << to_string(c.downlink) << "\n";
  out << "training: " << c.token_budget << " tokens, batch " << c.batch << " per learner, inner lr "
      << c.inner.lr << ", outer lr " << c.outer.lr << " momentum " << c.outer.momentum;
  if (!c.speeds.empty()) {
    out << "\nspeeds:";
    for (const auto& s : c.speeds)
      out << " " << s.slowdown << (s.jitter > 0 ? "~" + std::to_string(s.jitter) : "");
  }
  const bool own = std::any_of(c.speeds.begin(), c.speeds.end(), [](const speed_config& s) {
    return !s.region.empty() || s.chips > 0 || s.batch > 0 || s.ranks > 1;
  });
  if (own) {
    out << "\nlearners:";
    for (uint32_t i = 0; i < c.speeds.size(); ++i) {
      const link_config l = c.link_of(i);
      out << (i ? "; " : " ") << i << ": "
          << (c.speeds[i].region.empty() ? "" : c.speeds[i].region + ", ")
          << (c.speeds[i].ranks > 1 ? "island of " + std::to_string(c.speeds[i].ranks) + " ranks, "
                                    : std::string())
          << c.chips_of(i) << " chips, batch " << c.batch_of(i) << ", " << l.bandwidth_gbps
          << " Gbps "
          << l.latency_s * 1000 << " ms";
    }
  }
  if (!c.failures.empty()) out << "\nfailures: " << c.failures.size() << " scripted";

  return out.str();
}

std::string config_as_yaml(const run_config& c) {
  // Dotted keys become nested maps; a section is printed where its first key appears.
  struct node {
    std::string name;
    const config_key* key = nullptr;
    std::vector<node> children;
  };
  node root;
  for (const auto& k : run_config_keys()) {
    node* at = &root;
    size_t start = 0;
    for (;;) {
      const size_t dot = k.name.find('.', start);
      const std::string part =
          k.name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      auto it = std::find_if(at->children.begin(), at->children.end(),
                             [&](const node& n) { return n.name == part; });
      if (it == at->children.end()) {
        at->children.push_back(node{part, nullptr, {}});
        it = at->children.end() - 1;
      }
      at = &*it;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    at->key = &k;
  }
  std::ostringstream out;
  std::function<void(const node&, int)> print = [&](const node& n, int depth) {
    const std::string indent(static_cast<size_t>(depth) * 2, ' ');
    if (n.key != nullptr) {
      const std::string value = n.key->get(c);
      if (n.key->only_when_set && value == n.key->get(run_config{})) return;
      out << indent << n.name << ": " << value << "  # " << n.key->help << "\n";
      return;
    }
    out << indent << n.name << ":\n";
    for (const auto& child : n.children) print(child, depth + 1);
  };
  for (const auto& child : root.children) print(child, 0);
  // Lists, with numbers that read back exactly (a snapshot's manifest relies on it).
  const auto x = [](double v) { return format_exact(v); };
  if (!c.speeds.empty()) {
    out << "speeds:\n";
    for (const auto& s : c.speeds) {
      out << "  - {slowdown: " << x(s.slowdown) << ", jitter: " << x(s.jitter)
          << ", step_time_s: " << x(s.step_time_s);
      if (s.link_latency_s >= 0) out << ", link_latency_s: " << x(s.link_latency_s);
      if (!s.region.empty()) out << ", region: \"" << s.region << "\"";
      if (s.chips > 0) out << ", chips: " << s.chips;
      if (s.batch > 0) out << ", batch: " << s.batch;
      if (s.ranks > 1) out << ", ranks: " << s.ranks;
      out << "}\n";
    }
  }
  if (!c.regions.empty()) {
    out << "regions:\n";
    for (const auto& r : c.regions) {
      out << "  - {name: \"" << r.name << "\", latency_s: " << x(r.latency_s)
          << ", bandwidth_gbps: " << x(r.bandwidth_gbps) << "}\n";
    }
  }
  if (!c.partitions.empty()) {
    out << "partitions:\n";
    for (const auto& pe : c.partitions) {
      out << "  - {learners: [";
      for (size_t i = 0; i < pe.learners.size(); ++i) out << (i ? ", " : "") << pe.learners[i];
      out << "], at_s: " << x(pe.at_s) << ", heal_s: " << x(pe.heal_s) << "}\n";
    }
  }
  if (!c.failures.empty()) {
    out << "failures:\n";
    for (const auto& f : c.failures) {
      out << "  - {learner: " << f.learner << ", at_s: " << x(f.at_s) << ", down_s: " << x(f.down_s)
          << "}\n";
    }
  }
  if (!c.membership.empty()) {
    out << "membership:\n";
    for (const auto& m : c.membership) {
      out << "  - {learner: " << m.learner << ", " << (m.join ? "join" : "leave") << ": "
          << x(m.at_s) << "}\n";
    }
  }
  if (!c.deploy.nodes.empty()) {
    out << "nodes:\n";
    for (const auto& n : c.deploy.nodes) {
      out << "  - {name: " << n.name << ", host: \"" << n.host << "\", port: " << n.port << "}\n";
    }
  }
  if (!c.shard_restarts.empty()) {
    out << "shard_restarts:\n";
    for (const auto& r : c.shard_restarts) {
      out << "  - {shard: " << r.shard << ", at_s: " << x(r.at_s) << ", down_s: " << x(r.down_s)
          << "}\n";
    }
  }
  return out.str();
}

uint64_t cluster_identity(const run_config& config) {
  const std::string text = config_as_yaml(config);
  return checksum64(text.data(), text.size());
}

uint64_t run_identity(const run_config& c) {
  run_config copy = c;
  copy.snapshot = snapshot_config{};
  copy.deploy = deployment_config{};  // the same run in any placement
  copy.alerts = alert_config{};       // alerts only watch
  const std::string text = config_as_yaml(copy);
  return checksum64(text.data(), text.size());
}

namespace {

// "a.b.c" -> the scalar (or the whole sequence, as flow YAML), for every leaf of a document.
void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

std::map<std::string, std::string> flat_run(const run_config& c) {
  run_config copy = c;
  copy.snapshot = snapshot_config{};
  copy.deploy = deployment_config{};
  std::map<std::string, std::string> out;
  flatten(YAML::Load(config_as_yaml(copy)), "", out);
  return out;
}

}  // namespace

std::vector<std::string> run_differences(const run_config& given, const run_config& other) {
  const auto a = flat_run(given), b = flat_run(other);
  std::vector<std::string> out;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end()) {
      out.push_back(key + ": " + value + " (the other has no such key)");
    } else if (it->second != value) {
      out.push_back(key + ": " + value + ", the other has " + it->second);
    }
  }
  for (const auto& [key, value] : b) {
    if (!a.count(key)) out.push_back(key + ": missing, the other has " + value);
  }
  return out;
}

}  // namespace diloco
