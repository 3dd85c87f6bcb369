// Progress of long commands: one line updated in place on a terminal, plain periodic lines when
// the output is a file or a pipe, always with rate and ETA. Reads the wall clock; only the
// command-line layer uses it, never actor logic.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace diloco {

// "12.3k", "4.56M": a count shortened for humans.
std::string human_count(double value);
// "45s", "3m12s", "2h05m".
std::string human_duration(double seconds);

class progress_line {
 public:
  // total: the amount that makes 100% (steps, tokens, simulated seconds), in `unit`.
  progress_line(std::string label, double total, std::string unit, std::FILE* out = stderr);

  // Reports `done`; prints at most every 0.25 s on a terminal, every `plain_interval_s` otherwise.
  void update(double done, const std::string& detail = "");
  // Prints the final line (always) and ends it with a newline.
  void finish(double done, const std::string& detail = "");

  // A line of its own above the progress line (an event worth keeping on screen).
  void note(const std::string& text);
  // The work starts at `done` (a resumed run): rates and the ETA count from there.
  void begin_at(double done) { base_ = done; }

  double elapsed_s() const;
  void set_plain_interval(double seconds) { plain_interval_s_ = seconds; }

 private:
  void print(double done, const std::string& detail, bool final);

  std::string label_;
  double total_;
  std::string unit_;
  std::FILE* out_;
  bool tty_;
  double plain_interval_s_ = 10.0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  size_t last_width_ = 0;
  bool printed_ = false;
  double base_ = 0.0;
};

}  // namespace diloco
