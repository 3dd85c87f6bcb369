#include "config/printing.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <sstream>
#include <vector>

#include "base/check.hpp"
#include "config/keys.hpp"

namespace diloco {

// Plain when the text is made only of characters that cannot start or end a YAML construct
// here, double-quoted with escapes otherwise (a path holding " # " or ": ", a newline, a
// leading "*", an empty string).
std::string yaml_scalar(const std::string& text) {
  auto plain_char = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
           std::string("_.+-/=").find(ch) != std::string::npos;
  };
  bool plain = !text.empty() && text != "~" &&
               (std::isalnum(static_cast<unsigned char>(text[0])) != 0 ||
                std::string("_./+").find(text[0]) != std::string::npos ||
                (text[0] == '-' && text.size() > 1));
  for (char ch : text) plain = plain && plain_char(ch);
  // Words YAML reads as null or a boolean are text only when quoted.
  std::string lower = text;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* word : {"null", "true", "false", "yes", "no", "on", "off", "y", "n"})
    plain = plain && lower != word;
  if (plain) return text;
  std::string out = "\"";
  for (char ch : text) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x",
                        static_cast<unsigned>(static_cast<unsigned char>(ch)));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string yaml_comment_text(const std::string& text) {
  std::string out = text;
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
  return out;
}

std::string describe_run(const run_config& c) {
  std::ostringstream out;
  auto count = [](uint64_t n, const char* one) {
    return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
  };
  out << "cluster: " << to_string(c.mode) << ", " << count(c.learners, "learner") << ", "
      << count(c.shards, "syncer shard") << ", " << count(c.fragments, "fragment") << " ("
      << to_string(c.packing) << "), H " << c.period_steps << ", tau " << c.overlap_steps << ", K "
      << c.quorum << (c.grace ? " + grace" : "") << ", merge " << to_string(c.merge) << ", uplink "
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
          << " Gbps " << l.latency_s * 1000 << " ms";
      if (const int r = c.regional_of(i); r >= 0) {
        const link_config local = c.regional_local(static_cast<uint32_t>(r));
        out << " via its regional syncer (" << local.bandwidth_gbps << " Gbps "
            << local.latency_s * 1000 << " ms to it)";
      }
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
    DILOCO_CHECK(at->key == nullptr && at->children.empty(),
                 "config keys: each name once, and none is also a section");
    at->key = &k;
  }
  // A section prints only with something in it (its keys may all be unset only_when_set ones).
  std::function<void(const node&, int, std::ostream&)> print = [&](const node& n, int depth,
                                                                   std::ostream& to) {
    const std::string indent(static_cast<size_t>(depth) * 2, ' ');
    if (n.key != nullptr) {
      const std::string value = n.key->get(c);
      if (n.key->only_when_set && value == n.key->get(run_config{})) return;
      // Free text is quoted as YAML needs; numbers, booleans and names print as they are.
      const std::string shown = n.key->text ? yaml_scalar(n.key->text(c)) : value;
      to << indent << n.name << ": " << shown << "  # " << n.key->help << "\n";
      return;
    }
    std::ostringstream inside;
    for (const auto& child : n.children) print(child, depth + 1, inside);
    if (!inside.str().empty()) to << indent << n.name << ":\n" << inside.str();
  };
  std::ostringstream out;
  for (const auto& child : root.children) print(child, 0, out);
  // Lists, with numbers that read back exactly (a snapshot's manifest relies on it).
  const auto x = [](double v) { return format_exact(v); };
  if (!c.speeds.empty()) {
    out << "speeds:\n";
    for (const auto& s : c.speeds) {
      out << "  - {slowdown: " << x(s.slowdown) << ", jitter: " << x(s.jitter)
          << ", step_time_s: " << x(s.step_time_s);
      if (s.link_latency_s >= 0) out << ", link_latency_s: " << x(s.link_latency_s);
      if (!s.region.empty()) out << ", region: " << yaml_scalar(s.region);
      if (s.chips > 0) out << ", chips: " << s.chips;
      if (s.batch > 0) out << ", batch: " << s.batch;
      if (s.ranks > 1) out << ", ranks: " << s.ranks;
      out << "}\n";
    }
  }
  if (!c.regions.empty()) {
    out << "regions:\n";
    for (const auto& r : c.regions) {
      out << "  - {name: " << yaml_scalar(r.name) << ", latency_s: " << x(r.latency_s)
          << ", bandwidth_gbps: " << x(r.bandwidth_gbps);
      if (r.syncer)
        out << ", syncer: true, local_latency_s: " << x(r.local_latency_s)
            << ", local_bandwidth_gbps: " << x(r.local_bandwidth_gbps);
      out << "}\n";
    }
  }
  if (!c.link_changes.empty()) {
    out << "link_changes:\n";
    for (const auto& ch : c.link_changes) {
      out << "  - {";
      if (!ch.region.empty()) out << "region: " << yaml_scalar(ch.region) << ", ";
      out << "at_s: " << x(ch.at_s) << ", for_s: " << x(ch.for_s)
          << ", bandwidth_factor: " << x(ch.bandwidth_factor)
          << ", latency_factor: " << x(ch.latency_factor) << "}\n";
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
      out << "  - {name: " << yaml_scalar(n.name) << ", host: " << yaml_scalar(n.host)
          << ", port: " << n.port << "}\n";
    }
  }
  if (!c.shard_restarts.empty()) {
    out << "shard_restarts:\n";
    for (const auto& r : c.shard_restarts) {
      out << "  - {shard: " << r.shard << ", at_s: " << x(r.at_s) << ", down_s: " << x(r.down_s)
          << "}\n";
    }
  }
  if (!c.regional_restarts.empty()) {
    out << "regional_restarts:\n";
    for (const auto& r : c.regional_restarts) {
      out << "  - {region: " << yaml_scalar(r.region) << ", at_s: " << x(r.at_s)
          << ", down_s: " << x(r.down_s) << "}\n";
    }
  }
  return out.str();
}

namespace {
void flatten(const YAML::Node& n, const std::string& name,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n)
      flatten(kv.second, (name.empty() ? "" : name + ".") + kv.first.Scalar(), out);
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) flatten(n[i], name + "[" + std::to_string(i) + "]", out);
  } else {
    out.emplace_back(name, n.IsScalar() ? n.Scalar() : std::string());
  }
}
}  // namespace

std::vector<std::pair<std::string, std::string>> config_settings(const run_config& config) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten(YAML::Load(config_as_yaml(config)), "", out);
  return out;
}

}  // namespace diloco
