// A small command-line parser for the `diloco` subcommands: typed options bound to config
// fields, generated --help, and errors that name the flag, the bad value and what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.hpp"

namespace diloco::cli {

class arg_parser {
 public:
  arg_parser(std::string command, std::string summary);

  // --name (no value) sets *target to true.
  void flag(const std::string& name, bool* target, const std::string& help);
  // --name VALUE or --name=VALUE, converted to the target's type.
  void option(const std::string& name, int* target, const std::string& help);
  void option(const std::string& name, int64_t* target, const std::string& help);
  void option(const std::string& name, uint64_t* target, const std::string& help);
  void option(const std::string& name, double* target, const std::string& help);
  void option(const std::string& name, std::string* target, const std::string& help);
  // A custom conversion; `shown_default` is printed in --help.
  void option(const std::string& name, std::function<status(const std::string&)> set,
              const std::string& metavar, const std::string& shown_default,
              const std::string& help);
  // Positional arguments, in order; required ones first.
  void positional(const std::string& name, std::string* target, const std::string& help,
                  bool required = true);
  // After the positionals: every further word that is not an option (at least one).
  void positional_list(const std::string& name, std::vector<std::string>* target,
                       const std::string& help);

  // Parses argv[0..argc) (the words after the subcommand name).
  status parse(int argc, const char* const* argv);
  bool help_requested() const { return help_requested_; }
  std::string help() const;

 private:
  struct entry {
    std::string name;
    std::string metavar;  // empty for flags
    std::string shown_default;
    std::string help;
    std::function<status(const std::string&)> set;
  };
  struct positional_entry {
    std::string name;
    std::string help;
    std::string* target;
    bool required;
  };
  const entry* find(const std::string& name) const;

  std::string command_;
  std::string summary_;
  std::vector<entry> entries_;
  std::vector<positional_entry> positionals_;
  positional_entry rest_{"", "", nullptr, false};
  std::vector<std::string>* rest_target_ = nullptr;
  bool help_requested_ = false;
};

// Every error of one pass as one status, one per line (report_error prints each line with the
// command's name); ok when there is none.
status one_per_line(const std::vector<std::string>& errors);

// The candidate closest to a mistyped word, or "" when none is close enough to be a typo
// (at most a quarter of the word's letters edited, and at least one).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// Strict conversions used by the parser (whole string, range-checked). Numbers take the forms
// a person types: 1000000, 1e6, 1_000_000, 1.28M (suffixes k, M, G, T: powers of 1000); an
// integer may be written in any of them when its value is whole.
result<int64_t> parse_int(const std::string& text);
result<uint64_t> parse_uint(const std::string& text);
result<double> parse_double(const std::string& text);

// A number of type T from text: the whole string, within T's range (an integer that does not
// fit is an error, never wrapped; a float must be representable: not above FLT_MAX, and not so
// small that it rounds to zero or loses precision below FLT_MIN).
template <class T>
result<T> parse_number(const std::string& text) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_floating_point_v<T>) {
    auto v = parse_double(text);
    if (!v) return v.error();
    if constexpr (std::is_same_v<T, float>) {
      const double a = *v < 0 ? -*v : *v;
      if (a > static_cast<double>(std::numeric_limits<float>::max()) ||
          (a != 0 && a < static_cast<double>(std::numeric_limits<float>::min()))) {
        return status(errc::invalid_argument,
                      "'" + text + "' does not fit a float (1.2e-38 to 3.4e38, or 0)");
      }
    }
    return static_cast<T>(*v);
  } else if constexpr (std::is_unsigned_v<T>) {
    auto v = parse_uint(text);
    if (!v) return v.error();
    if (*v > std::numeric_limits<T>::max()) {
      return status(errc::invalid_argument, "'" + text + "' is out of range (at most " +
                                                std::to_string(std::numeric_limits<T>::max()) +
                                                ")");
    }
    return static_cast<T>(*v);
  } else {
    auto v = parse_int(text);
    if (!v) return v.error();
    if (*v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        *v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      return status(errc::invalid_argument,
                    "'" + text + "' is out of range (" +
                        std::to_string(std::numeric_limits<T>::min()) + " to " +
                        std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    return static_cast<T>(*v);
  }
}

}  // namespace diloco::cli
