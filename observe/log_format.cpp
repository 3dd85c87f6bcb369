#include "observe/log_format.hpp"

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

namespace diloco {

namespace {

std::atomic<log_format>& format_now() {
  static std::atomic<log_format> f{log_format::text};
  return f;
}
std::mutex& node_mutex() {
  static std::mutex mu;
  return mu;
}
std::string& node_name() {
  static std::string name;
  return name;
}
std::string& run_name() {
  static std::string name;
  return name;
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof buf - n, ".%03lldZ", static_cast<long long>(ms % 1000));
  return buf;
}

// The JSON object of one line, newline included. Bytes that are not UTF-8 are replaced, never
// an exception.
std::string json_line(std::chrono::system_clock::time_point t, const char* level,
                      const std::string& text) {
  nlohmann::ordered_json j;
  j["time"] = iso_time(t);
  j["level"] = level;
  {
    std::lock_guard<std::mutex> g(node_mutex());
    if (!node_name().empty()) j["node"] = node_name();
    if (!run_name().empty()) j["run"] = run_name();
  }
  j["msg"] = text;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

const char* level_name(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

class json_formatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string line = json_line(msg.time, level_name(msg.level),
                                       std::string(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<json_formatter>();
  }
};

}  // namespace

void set_log_format(log_format f) {
  format_now().store(f);
}
log_format current_log_format() {
  return format_now().load();
}

void set_log_node(const std::string& node) {
  std::lock_guard<std::mutex> g(node_mutex());
  node_name() = node;
}

void set_log_run(uint64_t run_id) {
  char id[17] = "";
  if (run_id != 0) std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(run_id));
  std::lock_guard<std::mutex> g(node_mutex());
  run_name() = id;
}

void log_line(const char* level, const std::string& text) {
  if (current_log_format() == log_format::json) {
    const std::string line = json_line(std::chrono::system_clock::now(), level, text);
    std::fwrite(line.data(), 1, line.size(), stderr);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

std::unique_ptr<spdlog::formatter> json_log_formatter() {
  return std::make_unique<json_formatter>();
}

}  // namespace diloco
