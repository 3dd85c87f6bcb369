#include "observe/monitor.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include <cmath>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "config/identity.hpp"
#include "config/printing.hpp"
#include "runtime/shared_clock.hpp"

namespace diloco {

namespace {

// The process's own metrics, named as Prometheus' client libraries name them, from /proc.
std::string process_metrics() {
  std::ostringstream o;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // /proc/self/stat: the fields after the command's closing parenthesis.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    std::vector<std::string> f((std::istream_iterator<std::string>(in)),
                               std::istream_iterator<std::string>());
    // Field 3 (state) is f[0]: utime 14, stime 15, starttime 22, vsize 23, rss 24.
    if (f.size() > 21) {
      const double cpu = (std::stod(f[11]) + std::stod(f[12])) / tick;
      o << "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
        << "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total " << cpu << '\n';
      o << "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
        << "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes " << f[20]
        << '\n';
      o << "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        << "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes "
        << static_cast<uint64_t>(std::stod(f[21]) * page) << '\n';
      std::ifstream proc_stat("/proc/stat");
      std::string key;
      double boot = -1;
      while (proc_stat >> key) {
        if (key == "btime") {
          proc_stat >> boot;
          break;
        }
      }
      if (boot >= 0) {
        char start[64];
        std::snprintf(start, sizeof start, "%.2f", boot + std::stod(f[19]) / tick);
        o << "# HELP process_start_time_seconds Start time of the process since unix epoch in "
             "seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds "
          << start << '\n';
      }
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    int n = 0;
    while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    o << "# HELP process_open_fds Number of open file descriptors.\n"
      << "# TYPE process_open_fds gauge\nprocess_open_fds " << n - 1 << '\n';  // not the DIR
  }
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    o << "# HELP process_max_fds Maximum number of open file descriptors.\n"
      << "# TYPE process_max_fds gauge\nprocess_max_fds " << files.rlim_cur << '\n';
  }
  return o.str();
}

// Every process's part of /metrics: the build, the process's place in the run (its node of a
// deployed run, "" in a one-process run; the run's identity, which the alerting rules join
// onto every alert), the process.
std::string node_metrics(const std::string& node, bool leader, const std::string& run_id) {
  std::ostringstream o;
  o << "# HELP diloco_build_info The program's version; always 1.\n"
    << "# TYPE diloco_build_info gauge\ndiloco_build_info{version=\"" << DILOCO_VERSION
    << "\"} 1\n";
  if (!node.empty() || !run_id.empty()) {
    o << "# HELP diloco_node_info This process: its node of a deployed run (\"\" in a "
         "one-process run), role and the run's identity; always 1.\n"
      << "# TYPE diloco_node_info gauge\ndiloco_node_info{node=\"" << node << "\",role=\""
      << (leader ? "leader" : "node") << "\",run_id=\"" << run_id << "\"} 1\n";
  }
  o << "# HELP diloco_leader 1 when this process leads the run (hosts its metrics actor).\n"
    << "# TYPE diloco_leader gauge\ndiloco_leader " << (leader ? 1 : 0) << '\n';
  // A node that is not the leader: its clock against the leader's, as its latest heartbeat
  // measured it.
  if (const clock_check c = last_clock_check(); c.measured) {
    o << "# HELP diloco_clock_residual_seconds The leader's time minus this node's run time at "
         "the latest heartbeat: drift since the node took the leader's time at its join.\n"
      << "# TYPE diloco_clock_residual_seconds gauge\ndiloco_clock_residual_seconds "
      << static_cast<double>(c.residual_ns) / 1e9 << '\n'
      << "# HELP diloco_clock_offset_seconds The leader's clock minus this host's clock (the "
         "correction taken at the join plus the residual since).\n"
      << "# TYPE diloco_clock_offset_seconds gauge\ndiloco_clock_offset_seconds "
      << static_cast<double>(shared_clock_ns() - host_clock_ns() + c.residual_ns) / 1e9 << '\n'
      << "# HELP diloco_clock_error_seconds Half the round trip of that heartbeat: the bound of "
         "both figures' error.\n"
      << "# TYPE diloco_clock_error_seconds gauge\ndiloco_clock_error_seconds "
      << static_cast<double>(c.error_ns) / 1e9 << '\n';
  }
  return o.str() + process_metrics();
}

// JSON has no NaN or Inf: a number that is not finite is written as 0.
double finite_or_zero(double v) {
  return std::isfinite(v) ? v : 0.0;
}

}  // namespace

void run_monitor::linger() const {
  if (server_ && options_.linger_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.linger_s));
}

result<std::unique_ptr<run_monitor>> run_monitor::start(const monitor_options& options) {
  std::unique_ptr<run_monitor> m(new run_monitor(options));
  if (!options.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.run_dir, ec);
    if (ec || !std::filesystem::is_directory(options.run_dir)) {
      return status(errc::io_error, "--run-dir: " + options.run_dir + ": cannot create: " +
                                        (ec ? ec.message() : "not a directory"));
    }
  }
  if (options.port >= 0) {
    if (options.port > 65535)
      return status(errc::invalid_argument, "--metrics-port: must be in [0, 65535]");
    run_monitor* raw = m.get();
    auto srv = http_server::start(
        options.host, static_cast<uint16_t>(options.port), [raw](const std::string& path) {
          std::shared_ptr<live_metrics> live;
          std::string node, run_id;
          bool leader = true;
          {
            std::lock_guard<std::mutex> g(raw->mu_);
            live = raw->current_;
            node = raw->node_;
            run_id = raw->run_id_;
            leader = raw->leader_;
          }
          http_response r;
          if (path == "/metrics") {
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r.body = live && leader ? live->prometheus() : "";
            r.body += node_metrics(node, leader, run_id);
          } else if (path == "/status") {
            r.content_type = "application/json";
            r.body = live ? live->status_json() : "{}";
          } else if (path == "/healthz") {
            r.body = "ok\n";
          } else if (path == "/readyz") {
            const bool ready = raw->ready_.load();
            r.code = ready ? 200 : 503;
            r.body = ready ? "ready\n" : "not running its part of the run\n";
          } else if (path == "/") {
            r.content_type = "text/html; charset=utf-8";
            r.body =
                "<!doctype html><title>diloco</title><p><a href=\"/metrics\">/metrics</a> "
                "(Prometheus) <a href=\"/status\">/status</a> (JSON) <a href=\"/healthz\">"
                "/healthz</a> <a href=\"/readyz\">/readyz</a></p>";
          } else {
            r.code = 404;
            r.body = "not found: " + path + " (try /metrics, /status, /healthz or /readyz)\n";
          }
          return r;
        });
    if (!srv) return status(srv.error().code(), "--metrics-port: " + srv.error().message());
    m->server_ = std::move(*srv);
  }
  return m;
}

run_monitor::~run_monitor() = default;

std::string run_monitor::url() const {
  if (!server_) return "";
  return "http://" + options_.host + ":" + std::to_string(server_->port()) + "/metrics";
}

std::shared_ptr<live_metrics> run_monitor::begin(const std::string& name,
                                                 const run_config& config) {
  live_options lo;
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(run_identity(config)));
  lo.run_id = id;
  lo.version = DILOCO_VERSION;
  lo.system = name;
  if (!options_.run_dir.empty()) {
    lo.settings = config_settings(config);
    lo.jsonl_path = options_.run_dir + "/metrics" +
                    (summaries_.empty() ? std::string() : "-" + name) + ".jsonl";
  }
  auto live = std::make_shared<live_metrics>(config, lo);
  std::lock_guard<std::mutex> g(mu_);
  current_ = live;
  run_id_ = lo.run_id;
  return live;
}

void run_monitor::end(const std::string& name, const sim_result* r, const std::string& stopped_by) {
  std::shared_ptr<live_metrics> live;
  {
    std::lock_guard<std::mutex> g(mu_);
    live = current_;
  }
  nlohmann::ordered_json fields = {{"system", name}};
  if (r != nullptr) {
    fields.update({{"eval_loss", finite_or_zero(r->eval_loss)},
                   {"entropy_rate", finite_or_zero(r->entropy_rate)},
                   {"eval_floor", finite_or_zero(r->eval_floor)},
                   {"tokens", r->tokens()},
                   {"learner_bytes", r->learner_bytes()},
                   {"goodput", finite_or_zero(r->goodput())},
                   {"uptime", finite_or_zero(r->uptime())},
                   {"run_s", finite_or_zero(r->virtual_s)},
                   {"seed", r->config.seed}});
  } else {
    fields["failed"] = true;
  }
  if (!stopped_by.empty()) fields["stopped_by"] = stopped_by;
  if (live) live->finish(fields);
  std::lock_guard<std::mutex> g(mu_);
  fields["metrics"] = "metrics" + (summaries_.empty() ? std::string() : "-" + name) + ".jsonl";
  summaries_.push_back(fields.dump());
}

status run_monitor::write_summary() const {
  if (options_.run_dir.empty()) return ok_status();
  nlohmann::ordered_json systems = nlohmann::ordered_json::array();
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& s : summaries_) systems.push_back(nlohmann::ordered_json::parse(s));
  }
  const std::string text = nlohmann::ordered_json{{"systems", std::move(systems)}}.dump(1) + "\n";
  const std::string path = options_.run_dir + "/summary.json";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return status(errc::io_error, path + ": cannot write");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok ? ok_status() : status(errc::io_error, path + ": write failed");
}

void run_monitor::set_node(const std::string& name, bool leader) {
  std::lock_guard<std::mutex> g(mu_);
  node_ = name;
  leader_ = leader;
}

}  // namespace diloco
