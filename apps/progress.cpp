#include "apps/progress.hpp"
#include "observe/log_format.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace diloco {

std::string human_count(double value) {
  char buf[32];
  const double a = std::fabs(value);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fG", value / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", value / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof buf, "%.1fk", value / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  }
  return buf;
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  char buf[32];
  const auto s = static_cast<long>(std::lround(seconds));
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

progress_line::progress_line(std::string label, double total, std::string unit, std::FILE* out)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      out_(out),
      tty_(::isatty(::fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

double progress_line::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void progress_line::update(double done, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (since < (tty_ ? 0.25 : plain_interval_s_)) return;
  last_print_ = now;
  print(done, detail, false);
}

void progress_line::note(const std::string& text) {
  if (current_log_format() == log_format::json && out_ == stderr) {
    log_line("info", text);
    return;
  }
  if (tty_ && last_width_ > 0) {
    std::string line = text;
    if (line.size() < last_width_) line.append(last_width_ - line.size(), ' ');
    std::fprintf(out_, "\r%s\n", line.c_str());
    last_width_ = 0;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void progress_line::finish(double done, const std::string& detail) {
  print(done, detail, true);
}

void progress_line::print(double done, const std::string& detail, bool final) {
  const double elapsed = elapsed_s();
  const double rate = elapsed > 0 ? (done - base_) / elapsed : 0.0;
  const double eta = rate > 0 ? (total_ - done) / rate : -1.0;
  const double pct = total_ > 0 ? 100.0 * std::min(done / total_, 1.0) : 0.0;
  char head[256];
  std::snprintf(head, sizeof head, "%s %5.1f%% %s/%s %s  %s %s/s  %s %s", label_.c_str(), pct,
                human_count(done).c_str(), human_count(total_).c_str(), unit_.c_str(),
                human_count(rate).c_str(), unit_.c_str(), final ? "took" : "ETA",
                human_duration(final ? elapsed : eta).c_str());
  std::string line = head;
  if (!detail.empty()) line += "  " + detail;
  if (current_log_format() == log_format::json && out_ == stderr) {
    log_line("info", line);  // no line updated in place: each one a record
  } else if (tty_) {
    const size_t width = line.size();
    if (width < last_width_) line.append(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
  printed_ = true;
}

}  // namespace diloco
