#include "config/values.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace diloco::text {

namespace {

// Edits from a to b: insertions, deletions, substitutions, and two neighbours swapped ("bf61"
// is one edit from "bf16").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

// The plain decimal form of a number as typed: '_' between digits dropped, a k/M/G/T suffix
// turned into an exponent. Anything else is left for strtod to refuse.
std::string plain_number(const std::string& text) {
  std::string s;
  s.reserve(text.size() + 3);
  for (size_t i = 0; i < text.size(); ++i) {
    const bool between_digits = text[i] == '_' && i > 0 && i + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!between_digits) s += text[i];
  }
  if (s.size() >= 2 && std::isdigit(static_cast<unsigned char>(s[s.size() - 2])) &&
      s.find_first_of("eE") == std::string::npos) {
    const char* exponent = nullptr;
    switch (s.back()) {
      case 'k':
        exponent = "e3";
        break;
      case 'M':
        exponent = "e6";
        break;
      case 'G':
        exponent = "e9";
        break;
      case 'T':
        exponent = "e12";
        break;
      default:
        break;
    }
    if (exponent != nullptr) s = s.substr(0, s.size() - 1) + exponent;
  }
  return s;
}

// strtod over the plain form, the whole string. Decimal only: strtod also reads hexadecimal
// ("0x10" as 16), which a config value never means.
std::optional<double> read_double(const std::string& text) {
  const std::string plain = plain_number(text);
  if (plain.find_first_of("xX") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(plain.c_str(), &end);
  if (plain.empty() || *end != '\0' || std::isspace(static_cast<unsigned char>(plain[0])))
    return std::nullopt;
  return v;
}

// An integer written as a decimal, an exponent or with a suffix: its whole value, or nullopt.
std::optional<long double> whole_value(const std::string& text) {
  const auto v = read_double(text);
  if (!v || errno == ERANGE || !std::isfinite(*v) || std::floor(*v) != *v) return std::nullopt;
  return static_cast<long double>(*v);
}

bool all_digits(const std::string& s, size_t from) {
  return s.size() > from && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                                        [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string quoted(const std::string& text) {
  constexpr size_t shown = 64;
  if (text.size() <= shown) return "'" + text + "'";
  return "'" + text.substr(0, shown) + "...' (" + std::to_string(text.size()) + " bytes)";
}

status one_per_line(const std::vector<std::string>& errors) {
  if (errors.empty()) return ok_status();
  std::string text;
  for (const auto& e : errors) text += (text.empty() ? "" : "\n") + e;
  return status(errc::invalid_argument, text);
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 4) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

result<int64_t> parse_int(const std::string& text) {
  const std::string plain = plain_number(text);
  if (all_digits(plain, !plain.empty() && plain[0] == '-' ? 1 : 0)) {
    errno = 0;
    const long long v = std::strtoll(plain.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return status(errc::invalid_argument, quoted(text) + " is out of the 64-bit range");
    return static_cast<int64_t>(v);
  }
  const auto v = whole_value(text);
  if (!v) return status(errc::invalid_argument, "expected an integer, got " + quoted(text));
  if (*v < -9.2e18L || *v > 9.2e18L)
    return status(errc::invalid_argument, quoted(text) + " is out of the 64-bit range");
  return static_cast<int64_t>(*v);
}

result<uint64_t> parse_uint(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    return status(errc::invalid_argument, "expected a non-negative integer, got " + quoted(text));
  }
  const std::string plain = plain_number(text);
  if (all_digits(plain, 0)) {
    errno = 0;
    const unsigned long long v = std::strtoull(plain.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return status(errc::invalid_argument, quoted(text) + " is out of the 64-bit range");
    return static_cast<uint64_t>(v);
  }
  const auto v = whole_value(text);
  if (!v || *v < 0)
    return status(errc::invalid_argument, "expected a non-negative integer, got " + quoted(text));
  if (*v > 1.8e19L)
    return status(errc::invalid_argument, quoted(text) + " is out of the 64-bit range");
  return static_cast<uint64_t>(*v);
}

result<double> parse_double(const std::string& text) {
  const auto v = read_double(text);
  if (!v) return status(errc::invalid_argument, "expected a number, got " + quoted(text));
  if (errno == ERANGE || !std::isfinite(*v)) {
    return status(errc::invalid_argument, quoted(text) + " is not a finite number");
  }
  return *v;
}

result<double> parse_seconds(const std::string& text) {
  // The longest unit first: "ms" before "s", "min" before "m" (which is not a unit: a minute
  // and a metre and a milli look alike).
  static const std::pair<const char*, double> units[] = {{"ns", 1e-9},  {"us", 1e-6}, {"ms", 1e-3},
                                                         {"min", 60.0}, {"s", 1.0},   {"h", 3600.0},
                                                         {"d", 86400.0}};
  for (const auto& [unit, scale] : units) {
    const size_t n = std::char_traits<char>::length(unit);
    if (text.size() <= n || text.compare(text.size() - n, n, unit) != 0) continue;
    const std::string number = text.substr(0, text.size() - n);
    const char last = number.back();
    if (!std::isdigit(static_cast<unsigned char>(last)) && last != '.') break;
    const auto v = read_double(number);
    if (!v || errno == ERANGE || !std::isfinite(*v * scale)) break;
    return *v * scale;
  }
  const std::string plain = plain_number(text);
  if (plain != text && plain.find('e') != std::string::npos &&
      text.find_first_of("kMGT") != std::string::npos) {
    return status(errc::invalid_argument,
                  quoted(text) +
                      ": a duration in seconds takes no k/M/G/T multiplier; write it with a "
                      "unit (250ms, 30s, 10min, 2h, 1d) or as plain seconds");
  }
  auto v = parse_double(text);
  if (!v && v.error().message().rfind("expected a number", 0) == 0) {
    return status(errc::invalid_argument,
                  "expected seconds, or a duration with a unit (250ms, 30s, 10min, 2h, 1d), "
                  "got " +
                      quoted(text));
  }
  return v;
}

result<double> parse_field(const std::string& name, const std::string& text) {
  const bool seconds = name.size() > 2 && name.compare(name.size() - 2, 2, "_s") == 0;
  return seconds ? parse_seconds(text) : parse_double(text);
}

}  // namespace diloco::text
