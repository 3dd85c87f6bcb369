#include "observe/monitor.hpp"

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include <cmath>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "config/identity.hpp"

namespace diloco {

namespace {

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
          {
            std::lock_guard<std::mutex> g(raw->mu_);
            live = raw->current_;
          }
          http_response r;
          if (path == "/metrics") {
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r.body = live ? live->prometheus() : "";
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
    lo.jsonl_path = options_.run_dir + "/metrics" +
                    (summaries_.empty() ? std::string() : "-" + name) + ".jsonl";
  }
  auto live = std::make_shared<live_metrics>(config, lo);
  std::lock_guard<std::mutex> g(mu_);
  current_ = live;
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

}  // namespace diloco
