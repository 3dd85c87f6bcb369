#include "config/identity.hpp"

#include <yaml-cpp/yaml.h>

#include <map>

#include "base/checksum.hpp"
#include "config/keys.hpp"
#include "config/printing.hpp"

namespace diloco {

namespace {

// The values as "name=value" lines: each scalar key in the table's order with its exact form
// (format_exact for numbers, the canonical name for choices), then each list entry field by
// field. A key printed only when set (config_key::only_when_set) counts only when set, so a
// key added later leaves older identities as they were.
class value_lines {
 public:
  void add(const std::string& name, const std::string& value) {
    text_ += name;
    text_ += '=';
    text_ += value;
    text_ += '\n';
  }
  void add(const std::string& name, double v) { add(name, format_exact(v)); }
  void add_int(const std::string& name, int64_t v) { add(name, std::to_string(v)); }
  uint64_t hash() const { return checksum64(text_.data(), text_.size()); }

 private:
  std::string text_ = "diloco run configuration, values 1\n";
};

uint64_t identity_of(const run_config& c) {
  value_lines v;
  const run_config defaults;
  for (const auto& k : run_config_keys()) {
    const std::string value = k.get(c);
    if (k.only_when_set && value == k.get(defaults)) continue;
    v.add(k.name, value);
  }
  for (size_t i = 0; i < c.speeds.size(); ++i) {
    const auto& s = c.speeds[i];
    const std::string at = "speeds." + std::to_string(i) + ".";
    v.add(at + "slowdown", s.slowdown);
    v.add(at + "jitter", s.jitter);
    v.add(at + "step_time_s", s.step_time_s);
    v.add(at + "link_latency_s", s.link_latency_s);
    v.add(at + "region", s.region);
    v.add_int(at + "chips", static_cast<int64_t>(s.chips));
    v.add_int(at + "batch", s.batch);
    v.add_int(at + "ranks", s.ranks);
  }
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const auto& r = c.regions[i];
    const std::string at = "regions." + std::to_string(i) + ".";
    v.add(at + "name", r.name);
    v.add(at + "latency_s", r.latency_s);
    v.add(at + "bandwidth_gbps", r.bandwidth_gbps);
    if (r.syncer) {  // only when set: a run without regional syncers keeps its identity
      v.add_int(at + "syncer", 1);
      v.add(at + "local_latency_s", r.local_latency_s);
      v.add(at + "local_bandwidth_gbps", r.local_bandwidth_gbps);
    }
  }
  for (size_t i = 0; i < c.link_changes.size(); ++i) {
    const auto& ch = c.link_changes[i];
    const std::string at = "link_changes." + std::to_string(i) + ".";
    v.add(at + "region", ch.region);
    v.add(at + "at_s", ch.at_s);
    v.add(at + "for_s", ch.for_s);
    v.add(at + "bandwidth_factor", ch.bandwidth_factor);
    v.add(at + "latency_factor", ch.latency_factor);
  }
  for (size_t i = 0; i < c.partitions.size(); ++i) {
    const auto& p = c.partitions[i];
    const std::string at = "partitions." + std::to_string(i) + ".";
    for (size_t j = 0; j < p.learners.size(); ++j)
      v.add_int(at + "learners." + std::to_string(j), p.learners[j]);
    v.add(at + "at_s", p.at_s);
    v.add(at + "heal_s", p.heal_s);
  }
  for (size_t i = 0; i < c.failures.size(); ++i) {
    const auto& f = c.failures[i];
    const std::string at = "failures." + std::to_string(i) + ".";
    v.add_int(at + "learner", f.learner);
    v.add(at + "at_s", f.at_s);
    v.add(at + "down_s", f.down_s);
  }
  for (size_t i = 0; i < c.membership.size(); ++i) {
    const auto& m = c.membership[i];
    const std::string at = "membership." + std::to_string(i) + ".";
    v.add_int(at + "learner", m.learner);
    v.add(at + (m.join ? "join" : "leave"), m.at_s);
  }
  for (size_t i = 0; i < c.deploy.nodes.size(); ++i) {
    const auto& n = c.deploy.nodes[i];
    const std::string at = "nodes." + std::to_string(i) + ".";
    v.add(at + "name", n.name);
    v.add(at + "host", n.host);
    v.add_int(at + "port", n.port);
  }
  for (size_t i = 0; i < c.shard_restarts.size(); ++i) {
    const auto& r = c.shard_restarts[i];
    const std::string at = "shard_restarts." + std::to_string(i) + ".";
    v.add_int(at + "shard", r.shard);
    v.add(at + "at_s", r.at_s);
    v.add(at + "down_s", r.down_s);
  }
  for (size_t i = 0; i < c.regional_restarts.size(); ++i) {
    const auto& r = c.regional_restarts[i];
    const std::string at = "regional_restarts." + std::to_string(i) + ".";
    v.add(at + "region", r.region);
    v.add(at + "at_s", r.at_s);
    v.add(at + "down_s", r.down_s);
  }
  return v.hash();
}

// The configuration as it identifies a run: snapshot settings, placement and alerts reset.
run_config without_setting(const run_config& c) {
  run_config copy = c;
  copy.snapshot = snapshot_config{};
  copy.deploy = deployment_config{};  // the same run in any placement
  copy.alerts = alert_config{};       // alerts only watch
  return copy;
}

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
  std::map<std::string, std::string> out;
  flatten(YAML::Load(config_as_yaml(without_setting(c))), "", out);
  return out;
}

}  // namespace

uint64_t run_identity(const run_config& config) {
  return identity_of(without_setting(config));
}

uint64_t cluster_identity(const run_config& config) {
  return identity_of(config);
}

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
