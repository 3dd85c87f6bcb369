// Values as people type them, for the configuration and the command line alike: numbers in the
// forms a person writes (1000000, 1e6, 1_000_000, 1.28M), strict and range-checked; every error
// of one pass as one status; the closest known word to a misspelt one.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.hpp"

namespace diloco::text {

// Every error of one pass as one status, one per line (report_error prints each line with the
// command's name); ok when there is none.
status one_per_line(const std::vector<std::string>& errors);

// The candidate closest to a mistyped word, or "" when none is close enough to be a typo
// (at most a quarter of the word's letters edited, and at least one).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// Strict conversions used by the parser (whole string, range-checked). Numbers take the forms
// a person types: 1000000, 1e6, 1_000_000, 1.28M (suffixes k, M, G, T: powers of 1000); an
// integer may be written in any of them when its value is whole.
// A value as an error message shows it: in quotes, cut after 64 characters with its length
// (a 10 MB value is not echoed whole).
std::string quoted(const std::string& text);

result<int64_t> parse_int(const std::string& text);
result<uint64_t> parse_uint(const std::string& text);
result<double> parse_double(const std::string& text);

// A duration in seconds: plain seconds (30, 1.5e3, 1_000) or a number with one unit, ns, us,
// ms, s, min, h or d (250ms, 8s, 10min, 1.5h). The k/M/G/T multipliers are refused with a hint
// here ("10M" reads as ten million seconds, which nobody means).
result<double> parse_seconds(const std::string& text);

// The reader of a numeric field by its name: a name ending in "_s" holds seconds
// (parse_seconds), any other a number (parse_double).
result<double> parse_field(const std::string& name, const std::string& text);

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

}  // namespace diloco::text
