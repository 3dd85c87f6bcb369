#include "apps/run_options.hpp"

#include <algorithm>
#include <functional>
#include <sstream>

#include "config/keys.hpp"
#include "config/resolve.hpp"
#include "observe/monitor.hpp"

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

void bind_monitor_options(cli::arg_parser& p, monitor_options& o) {
  p.option("run-dir", &o.run_dir,
           "write metrics.jsonl and summary.json here (then: diloco report DIR)");
  p.option("metrics-port", &o.port,
           "serve /metrics (Prometheus) and /status (JSON) on this port (0: any free port; "
           "default off)");
  p.option("metrics-host", &o.host, "address the metrics server listens on");
  p.option("metrics-linger", &o.linger_s,
           "keep serving the metrics this many seconds after the run");
}

result<run_config> resolve_run_options(const run_options& o, const run_config* base) {
  return resolve_config(o.cluster_file, o.sets, base);
}

result<std::vector<std::string>> parse_compare_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    if (item != "dp" && item != "diloco" && item != "vanilla") {
      return status(errc::invalid_argument,
                    "--compare: unknown system '" + item + "' (expected dp, diloco or vanilla)");
    }
    out.push_back(item);
  }
  return out;
}

}  // namespace diloco
