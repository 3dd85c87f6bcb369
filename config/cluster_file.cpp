#include "config/cluster_file.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>

#include "config/keys.hpp"
#include "config/published.hpp"
#include "config/values.hpp"

namespace diloco {

namespace {

struct loader {
  std::string path;
  loaded_cluster out;

  static text_position position_of(const YAML::Mark& mark) {
    return {mark.line + 1, mark.column + 1};
  }
  status error_at(const YAML::Mark& mark, const std::string& what) const {
    return status(errc::invalid_argument, path + ":" + std::to_string(mark.line + 1) + ":" +
                                              std::to_string(mark.column + 1) + ": " + what);
  }

  // A map's keys, each once: YAML leaves a repeated key to the reader, and taking the last one
  // silently hides a mistake. `what` names the map in the error; every repeat is an error.
  status unique_keys(const YAML::Node& node, const std::string& what) const {
    std::map<std::string, int> seen;
    std::vector<std::string> errors;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) return error_at(kv.first.Mark(), "keys must be plain names");
      const std::string k = kv.first.Scalar();
      const int line = kv.first.Mark().line + 1;
      if (auto [at, fresh] = seen.emplace(k, line); !fresh) {
        errors.push_back(error_at(kv.first.Mark(), (what.empty() ? "" : what + ": ") + "key '" + k +
                                                       "' is set twice (also line " +
                                                       std::to_string(at->second) + ")")
                             .message());
      }
    }
    return text::one_per_line(errors);
  }

  status scalar(const std::string& key, const YAML::Node& node) {
    if (!node.IsScalar()) {
      return error_at(node.Mark(), key + ": expected a single value, got a " +
                                       (node.IsMap()        ? std::string("map")
                                        : node.IsSequence() ? "list"
                                                            : "null"));
    }
    if (auto st = set_config_key(out.config, key, node.Scalar()); !st.ok())
      return error_at(node.Mark(), st.message());
    out.key_lines[key] = position_of(node.Mark());
    return {};
  }

  // speeds (or learners as a list): one map per learner, {slowdown, jitter, step_time_s,
  // link_latency_s, region, chips, batch, ranks}; missing fields keep `speed`'s and the run's.
  status speeds(const std::string& list, const YAML::Node& node) {
    if (!node.IsSequence())
      return error_at(node.Mark(), list + ": expected a list of maps, one per learner");
    out.config.speeds.clear();
    // Each entry starts from `speed` and is parsed by the same keys; the probe is made once
    // (a copy of the whole config per entry would copy the growing list: quadratic).
    run_config probe;
    std::vector<std::string> errors;
    size_t i = 0;
    for (const YAML::Node& item : node) {
      const std::string entry = list + "[" + std::to_string(i++) + "]";
      if (!item.IsMap()) {
        errors.push_back(error_at(item.Mark(), entry + ": expected a map").message());
        continue;
      }
      if (auto st = unique_keys(item, entry); !st.ok()) errors.push_back(st.message());
      probe.speed = out.config.speed;
      speed_config learner;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        const std::string at = entry + "." + field;
        if (!kv.second.IsScalar()) {
          errors.push_back(error_at(kv.second.Mark(), at + ": expected a value").message());
          continue;
        }
        const std::string v = kv.second.Scalar();
        status st;
        if (field == "slowdown" || field == "jitter" || field == "step_time_s") {
          st = set_config_key(probe, "speed." + field, v);
        } else if (field == "link_latency_s") {
          auto x = text::parse_seconds(v);
          st = x ? status{} : x.error();
          if (x) learner.link_latency_s = *x;
        } else if (field == "region") {
          learner.region = v;
        } else if (field == "chips") {
          auto n = text::parse_number<uint64_t>(v);
          if (n && *n == 0) n = status(errc::invalid_argument, "must be at least 1");
          st = n ? status{} : n.error();
          if (n) learner.chips = *n;
        } else if (field == "batch") {
          auto n = text::parse_number<int>(v);
          if (n && *n < 1) n = status(errc::invalid_argument, "must be at least 1");
          st = n ? status{} : n.error();
          if (n) learner.batch = *n;
        } else if (field == "ranks") {
          auto n = text::parse_number<int>(v);
          if (n && *n < 1) n = status(errc::invalid_argument, "must be at least 1");
          st = n ? status{} : n.error();
          if (n) learner.ranks = *n;
        } else {
          errors.push_back(
              error_at(kv.first.Mark(),
                       entry + ": unknown key '" + field +
                           "' (expected slowdown, jitter, step_time_s, link_latency_s, region, "
                           "chips, batch, ranks)")
                  .message());
          continue;
        }
        if (!st.ok())
          errors.push_back(error_at(kv.second.Mark(), at + ": " + st.message()).message());
      }
      const speed_config& timing = probe.speed;
      learner.step_time_s = timing.step_time_s;
      learner.slowdown = timing.slowdown;
      learner.jitter = timing.jitter;
      out.config.speeds.push_back(learner);
      out.key_lines["speeds[" + std::to_string(i - 1) + "]"] = position_of(item.Mark());
    }
    return text::one_per_line(errors);
  }

  // regions: a list of {name, latency_s, bandwidth_gbps} (missing numbers keep link's).
  status regions(const YAML::Node& node) {
    if (!node.IsSequence())
      return error_at(node.Mark(), "regions: expected a list of {name, latency_s, bandwidth_gbps}");
    out.config.regions.clear();
    std::vector<std::string> errors;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string entry = "regions[" + std::to_string(i) + "]";
      if (!item.IsMap()) {
        errors.push_back(error_at(item.Mark(), entry + ": expected a map").message());
        continue;
      }
      if (auto st = unique_keys(item, entry); !st.ok()) errors.push_back(st.message());
      region_config r;
      r.latency_s = out.config.link.latency_s;
      r.bandwidth_gbps = out.config.link.bandwidth_gbps;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        const std::string at = entry + "." + field;
        if (!kv.second.IsScalar()) {
          errors.push_back(error_at(kv.second.Mark(), at + ": expected a value").message());
        } else if (field == "name") {
          r.name = kv.second.Scalar();
        } else if (field == "latency_s" || field == "bandwidth_gbps" ||
                   field == "local_latency_s" || field == "local_bandwidth_gbps") {
          auto x = text::parse_field(field, kv.second.Scalar());
          if (!x)
            errors.push_back(error_at(kv.second.Mark(), at + ": " + x.error().message()).message());
          else
            (field == "latency_s"         ? r.latency_s
             : field == "bandwidth_gbps"  ? r.bandwidth_gbps
             : field == "local_latency_s" ? r.local_latency_s
                                          : r.local_bandwidth_gbps) = *x;
        } else if (field == "syncer") {
          const std::string& t = kv.second.Scalar();
          if (t == "true" || t == "yes" || t == "on") {
            r.syncer = true;
          } else if (t == "false" || t == "no" || t == "off") {
            r.syncer = false;
          } else {
            errors.push_back(
                error_at(kv.second.Mark(), at + ": expected true or false, got '" + t + "'")
                    .message());
          }
        } else {
          errors.push_back(error_at(kv.first.Mark(), entry + ": unknown key '" + field +
                                                         "' (expected name, latency_s, "
                                                         "bandwidth_gbps, syncer, local_latency_s, "
                                                         "local_bandwidth_gbps)")
                               .message());
        }
      }
      if (!item["name"])
        errors.push_back(error_at(item.Mark(), entry + ": missing 'name'").message());
      out.config.regions.push_back(r);
      out.key_lines[entry] = position_of(item.Mark());
    }
    return text::one_per_line(errors);
  }

  // failures: a list of {learner, at_s, down_s}.
  status failures(const YAML::Node& node) {
    if (!node.IsSequence())
      return error_at(node.Mark(), "failures: expected a list of {learner, at_s, down_s} maps");
    out.config.failures.clear();
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string key = "failures[" + std::to_string(i) + "]";
      if (!item.IsMap()) return error_at(item.Mark(), key + ": expected a map");
      if (auto st = unique_keys(item, key); !st.ok()) return st;
      failure_event f;
      bool has_learner = false;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        if (!kv.second.IsScalar())
          return error_at(kv.second.Mark(), key + "." + field + ": expected a value");
        const std::string v = kv.second.Scalar();
        if (field == "learner") {
          auto n = text::parse_number<uint32_t>(v);
          if (!n) return error_at(kv.second.Mark(), key + ".learner: " + n.error().message());
          f.learner = static_cast<uint32_t>(*n);
          has_learner = true;
        } else if (field == "at_s" || field == "down_s") {
          auto x = text::parse_seconds(v);
          if (!x) return error_at(kv.second.Mark(), key + "." + field + ": " + x.error().message());
          (field == "at_s" ? f.at_s : f.down_s) = *x;
        } else {
          return error_at(kv.first.Mark(),
                          key + ": unknown key '" + field + "' (expected learner, at_s, down_s)");
        }
      }
      if (!has_learner) return error_at(item.Mark(), key + ": missing 'learner'");
      out.config.failures.push_back(f);
      out.key_lines[key] = position_of(item.Mark());
    }
    return {};
  }

  // link_changes: a list of {region, at_s, for_s, bandwidth_factor, latency_factor}.
  status link_changes(const YAML::Node& node) {
    const std::string expected = "expected region, at_s, for_s, bandwidth_factor, latency_factor";
    if (!node.IsSequence())
      return error_at(node.Mark(), "link_changes: expected a list of maps (" + expected + ")");
    out.config.link_changes.clear();
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string entry = "link_changes[" + std::to_string(i) + "]";
      if (!item.IsMap()) return error_at(item.Mark(), entry + ": expected a map");
      if (auto st = unique_keys(item, entry); !st.ok()) return st;
      link_change ch;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        const std::string at = entry + "." + field;
        if (!kv.second.IsScalar()) return error_at(kv.second.Mark(), at + ": expected a value");
        if (field == "region") {
          ch.region = kv.second.Scalar();
          continue;
        }
        double* slot = field == "at_s"               ? &ch.at_s
                       : field == "for_s"            ? &ch.for_s
                       : field == "bandwidth_factor" ? &ch.bandwidth_factor
                       : field == "latency_factor"   ? &ch.latency_factor
                                                     : nullptr;
        if (slot == nullptr)
          return error_at(kv.first.Mark(),
                          entry + ": unknown key '" + field + "' (" + expected + ")");
        auto x = text::parse_field(field, kv.second.Scalar());
        if (!x) return error_at(kv.second.Mark(), at + ": " + x.error().message());
        *slot = *x;
      }
      if (!item["at_s"] || !item["for_s"])
        return error_at(item.Mark(), entry + ": needs at_s and for_s");
      out.config.link_changes.push_back(std::move(ch));
      out.key_lines[entry] = position_of(item.Mark());
    }
    return {};
  }

  // partitions: a list of {learners: [i, ...], at_s, heal_s}.
  status partitions(const YAML::Node& node) {
    if (!node.IsSequence())
      return error_at(node.Mark(), "partitions: expected a list of {learners, at_s, heal_s} maps");
    out.config.partitions.clear();
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string key = "partitions[" + std::to_string(i) + "]";
      if (!item.IsMap()) return error_at(item.Mark(), key + ": expected a map");
      if (auto st = unique_keys(item, key); !st.ok()) return st;
      partition_event pe;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        if (field == "learners") {
          if (!kv.second.IsSequence())
            return error_at(kv.second.Mark(), key + ".learners: expected a list of indices");
          for (const auto& l : kv.second) {
            auto v = l.IsScalar() ? text::parse_number<uint32_t>(l.Scalar())
                                  : result<uint32_t>(status(errc::invalid_argument, "not a value"));
            if (!v) return error_at(l.Mark(), key + ".learners: expected learner indices");
            pe.learners.push_back(static_cast<uint32_t>(*v));
          }
        } else if (field == "at_s" || field == "heal_s") {
          auto x = kv.second.IsScalar()
                       ? text::parse_seconds(kv.second.Scalar())
                       : result<double>(status(errc::invalid_argument, "expected seconds"));
          if (!x) return error_at(kv.second.Mark(), key + "." + field + ": " + x.error().message());
          (field == "at_s" ? pe.at_s : pe.heal_s) = *x;
        } else {
          return error_at(kv.first.Mark(),
                          key + ": unknown key '" + field + "' (expected learners, at_s, heal_s)");
        }
      }
      out.config.partitions.push_back(std::move(pe));
      out.key_lines[key] = position_of(item.Mark());
    }
    return {};
  }

  // A list of maps whose fields are all numbers: each entry becomes one compact entry of
  // set_config_key's text form (shared parsing, shared errors).
  status number_maps(
      const std::string& key, const YAML::Node& node, const std::vector<std::string>& fields,
      const std::function<std::string(const std::map<std::string, std::string>&)>& compact) {
    if (!node.IsSequence()) return error_at(node.Mark(), key + ": expected a list of maps");
    std::string text;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string entry = key + "[" + std::to_string(i) + "]";
      if (!item.IsMap()) return error_at(item.Mark(), entry + ": expected a map");
      if (auto st = unique_keys(item, entry); !st.ok()) return st;
      if (key == "membership" && item["join"] && item["leave"]) {
        return error_at(item.Mark(), entry +
                                         ": both 'join' and 'leave' (one event per entry: write "
                                         "the leave as an entry of its own)");
      }
      if (key == "nodes" && item["name"] && item["name"].IsScalar()) {
        const std::string n = item["name"].Scalar();
        const bool plain =
            !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
            });
        if (!plain) {
          return error_at(
              item["name"].Mark(),
              entry + ".name: '" + n + "' is not a plain name (letters, digits, - and _)");
        }
      }
      std::map<std::string, std::string> values;
      for (const auto& kv : item) {
        const std::string field = kv.first.Scalar();
        if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
          return error_at(kv.first.Mark(), entry + ": unknown key '" + field + "'");
        }
        if (!kv.second.IsScalar())
          return error_at(kv.second.Mark(), entry + "." + field + ": expected a value");
        values[field] = kv.second.Scalar();
      }
      for (const auto& f : fields) {
        if (f != "join" && f != "leave" && values.count(f) == 0 && !(key == "membership")) {
          return error_at(item.Mark(), entry + ": missing '" + f + "'");
        }
      }
      text += (text.empty() ? "" : ",") + compact(values);
    }
    if (auto st = set_config_key(out.config, key, text); !st.ok())
      return error_at(node.Mark(), st.message());
    return {};
  }

  // Every error of the file, in the order of its lines: one per key at most.
  std::vector<std::string> file_errors;

  status map(const std::string& prefix, const YAML::Node& node) {
    if (auto st = unique_keys(node, prefix); !st.ok()) {
      file_errors.push_back(st.message());
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return st;  // names that are not names: nothing to go on
      }
    }
    for (const auto& kv : node) {  // every key is a plain name (checked above)
      const std::string key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
      if (auto st = entry(key, kv.first, kv.second); !st.ok()) file_errors.push_back(st.message());
    }
    return {};
  }

  // One key of a map and its value.
  status entry(const std::string& key, const YAML::Node& name, const YAML::Node& value) {
    if (key == "speeds" || (key == "learners" && value.IsSequence())) {
      // `learners` as a list: one entry per learner, and their count.
      if (auto st = speeds(key, value); !st.ok()) return st;
      if (key == "learners") out.config.learners = static_cast<int>(value.size());
      out.key_lines["speeds"] = position_of(name.Mark());
      out.key_lines[key] = position_of(name.Mark());
    } else if (key == "regions") {
      if (auto st = regions(value); !st.ok()) return st;
      out.key_lines["regions"] = position_of(name.Mark());
    } else if (key == "failures") {
      if (auto st = failures(value); !st.ok()) return st;
      out.key_lines["failures"] = position_of(name.Mark());
    } else if (key == "partitions") {
      if (auto st = partitions(value); !st.ok()) return st;
      out.key_lines["partitions"] = position_of(name.Mark());
    } else if (key == "link_changes") {
      if (auto st = link_changes(value); !st.ok()) return st;
      out.key_lines["link_changes"] = position_of(name.Mark());
    } else if (key == "shard_restarts") {
      auto st = number_maps(key, value, {"shard", "at_s", "down_s"}, [](const auto& v) {
        return v.at("shard") + "@" + v.at("at_s") + "+" + v.at("down_s");
      });
      if (!st.ok()) return st;
      out.key_lines[key] = position_of(name.Mark());
    } else if (key == "regional_restarts") {
      auto st = number_maps(key, value, {"region", "at_s", "down_s"}, [](const auto& v) {
        return v.at("region") + "@" + v.at("at_s") + "+" + v.at("down_s");
      });
      if (!st.ok()) return st;
      out.key_lines[key] = position_of(name.Mark());
    } else if (key == "membership") {
      // {learner: 4, join: 300} or {learner: 1, leave: 500}
      auto st = number_maps(key, value, {"learner", "join", "leave"}, [](const auto& v) {
        const bool join = v.count("join") > 0;
        return std::string(join ? "+" : "-") + (v.count("learner") ? v.at("learner") : "?") + "@" +
               (join ? v.at("join") : (v.count("leave") ? v.at("leave") : "?"));
      });
      if (!st.ok()) return st;
      out.key_lines[key] = position_of(name.Mark());
    } else if (key == "nodes") {
      // {name: a, host: 10.0.0.1, port: 4400}; names and addresses must be unique (checked
      // here too, to point at the line of the second one).
      auto st = number_maps(key, value, {"name", "host", "port"}, [](const auto& v) {
        return v.at("name") + "@" + v.at("host") + ":" + v.at("port");
      });
      if (!st.ok()) return st;
      out.key_lines[key] = position_of(name.Mark());
      std::map<std::string, int> seen_name, seen_addr;
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string node = value[i]["name"].Scalar();
        const std::string addr = value[i]["host"].Scalar() + ":" + value[i]["port"].Scalar();
        const int line = value[i].Mark().line + 1;
        if (seen_name.count(node)) {
          return error_at(value[i]["name"].Mark(), "nodes[" + std::to_string(i) + "].name: '" +
                                                       node + "' is used twice (also line " +
                                                       std::to_string(seen_name[node]) + ")");
        }
        if (seen_addr.count(addr)) {
          return error_at(value[i]["port"].Mark(), "nodes[" + std::to_string(i) + "]: " + addr +
                                                       " is also the address of the node on line " +
                                                       std::to_string(seen_addr[addr]));
        }
        seen_name[node] = line;
        seen_addr[addr] = line;
      }
    } else if ((key == "placement.learners" || key == "placement.shards" ||
                key == "placement.regionals") &&
               value.IsSequence()) {
      return scalar_list(key, name, value, "a node name");
    } else if (key == "snapshot.at_s" && value.IsSequence()) {
      return scalar_list(key, name, value, "a time in seconds");
    } else if (value.IsMap() && !is_key(key)) {
      if (!is_prefix(key)) return unknown(name, key);
      return map(key, value);
    } else if (!is_key(key) && is_prefix(key)) {
      // `uplink: sign1`: a section given a value.
      return error_at(value.Mark(), key + ": expected a map of " + key + ".* keys (e.g. " +
                                        first_key_under(key) + "), got " +
                                        (value.IsSequence() ? "a list" : "a single value"));
    } else {
      if (!is_key(key)) return unknown(name, key);
      if (auto st = scalar(key, value); !st.ok()) return st;
    }
    return {};
  }

  // A list of single values given to a key whose text form is comma separated.
  status scalar_list(const std::string& key, const YAML::Node& name, const YAML::Node& value,
                     const std::string& what) {
    std::string text;
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].IsScalar())
        return error_at(value[i].Mark(), key + "[" + std::to_string(i) + "]: expected " + what);
      text += (i ? "," : "") + value[i].Scalar();
    }
    if (auto st = set_config_key(out.config, key, text); !st.ok())
      return error_at(value.Mark(), st.message());
    out.key_lines[key] = position_of(name.Mark());
    return {};
  }

  static bool is_key(const std::string& key) {
    for (const auto& k : run_config_keys()) {
      if (k.name == key) return true;
    }
    return false;
  }
  static std::string first_key_under(const std::string& prefix) {
    for (const auto& k : run_config_keys()) {
      if (k.name.rfind(prefix + ".", 0) == 0) return k.name.substr(prefix.size() + 1);
    }
    return "";
  }
  static bool is_prefix(const std::string& key) {
    for (const auto& k : run_config_keys()) {
      if (k.name.rfind(key + ".", 0) == 0) return true;
    }
    return false;
  }
  status unknown(const YAML::Node& at, const std::string& key) const {
    const std::string near = suggest_key(key);
    return error_at(at.Mark(), "unknown key '" + key + "'" +
                                   (near.empty() ? "" : " (did you mean '" + near + "'?)"));
  }
};

}  // namespace

namespace {

// Where a second YAML document starts, if the text has one. Not YAML::LoadAll: yaml-cpp 0.7's
// LoadAll loops without end, allocating, on input such as a leading ',' (yaml-cpp PR 1319);
// here the parser is asked for at most two documents.
// The second member: the parser did not move past the first document's start.
std::optional<std::pair<YAML::Mark, bool>> second_document(const std::string& text) {
  struct starts final : YAML::EventHandler {
    std::vector<YAML::Mark> marks;
    void OnDocumentStart(const YAML::Mark& m) override { marks.push_back(m); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } handler;
  std::istringstream in(text);
  YAML::Parser parser(in);
  for (int doc = 0; doc < 2 && parser.HandleNextDocument(handler); ++doc) {
  }
  if (handler.marks.size() < 2) return std::nullopt;
  return std::make_pair(handler.marks[1], handler.marks[1].pos == handler.marks[0].pos);
}

result<loaded_cluster> load_cluster(const std::string& path, const std::string* text,
                                    const run_config& base) {
  loader l;
  l.path = path;
  l.out.config = base;
  YAML::Node root;
  try {
    std::string content;
    if (text != nullptr) {
      content = *text;
    } else {
      std::ifstream in(path, std::ios::binary);
      if (!in) return status(errc::io_error, path + ": cannot read the cluster file");
      content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    // A cluster file is a page or two; yaml-cpp takes about 100x a file's size in memory and
    // minutes for tens of megabytes (a 50 MB list: 159 s and 4.8 GB before its error).
    if (content.size() > cluster_file_max_bytes) {
      return status(errc::invalid_argument, path + ": " + std::to_string(content.size()) +
                                                " bytes, more than a cluster " + "file may hold (" +
                                                std::to_string(cluster_file_max_bytes) + ")");
    }
    root = YAML::Load(content);
    if (const auto second = second_document(content)) {
      // The parser did not move (yaml-cpp takes some invalid input, such as a leading ',', for
      // endless empty documents).
      if (second->second)
        return l.error_at(second->first, "not valid YAML: cannot be parsed past here");
      return l.error_at(second->first,
                        "a second YAML document ('---'): a cluster file is one document");
    }
  } catch (const YAML::ParserException& e) {
    return l.error_at(e.mark, "not valid YAML: " + e.msg);
  } catch (const YAML::BadFile&) {
    return status(errc::io_error, path + ": cannot read the cluster file");
  }
  if (root.IsNull()) return status(errc::invalid_argument, path + ": the cluster file is empty");
  if (!root.IsMap()) return l.error_at(root.Mark(), "the cluster file must be a map of keys");
  if (is_published_form(root)) {
    // The published shape, read through its conversion (diloco config convert shows it).
    auto ours = convert_published(root, path);
    if (!ours) return ours.error();
    if (!ours->assumed.empty())
      spdlog::warn("{}: read as the published form, assuming {}", path, ours->assumed);
    return load_cluster(path + " (converted; see diloco config convert " + path + ")", &ours->yaml,
                        base);
  }
  if (auto st = l.map("", root); !st.ok()) l.file_errors.push_back(st.message());
  if (auto st = text::one_per_line(l.file_errors); !st.ok()) return st;
  return l.out;
}

}  // namespace

result<loaded_cluster> load_cluster_file(const std::string& path, const run_config& base) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    return status(errc::not_found, path + ": cluster file not found");
  return load_cluster(path, nullptr, base);
}

result<loaded_cluster> load_cluster_text(const std::string& text, const std::string& name,
                                         const run_config& base) {
  return load_cluster(name, &text, base);
}

namespace {

// One validation error with the file and line of the key it names, when the file set it.
status with_line(const status& st, const std::string& path,
                 const std::map<std::string, text_position>& key_lines) {
  // Messages start with the key ("quorum: must be in ..."); find the longest key that matches.
  std::string best;
  for (const auto& [key, at] : key_lines) {
    if (st.message().rfind(key + ":", 0) == 0 || st.message().rfind(key + ".", 0) == 0 ||
        st.message().rfind(key + "[", 0) == 0) {
      if (key.size() > best.size()) best = key;
    }
  }
  text_position at = best.empty() ? text_position{} : key_lines.at(best);
  if (best.empty()) {
    // A key the file left out ("tls.key: missing"): point at its section ("tls.ca").
    const std::string section = st.message().substr(0, st.message().find_first_of(".:["));
    for (const auto& [key, p] : key_lines) {
      if (key.rfind(section + ".", 0) == 0 && (at.line == 0 || p.line < at.line)) at = p;
    }
  }
  if (at.line == 0) return st;
  return status(st.code(), path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) +
                               ": " + st.message());
}

}  // namespace

status validate_with_lines(const run_config& config, const std::string& path,
                           const std::map<std::string, text_position>& key_lines) {
  std::vector<std::string> all;
  for (const status& st : config.problems())
    all.push_back(with_line(st, path, key_lines).message());
  return text::one_per_line(all);
}

}  // namespace diloco
