#include "apps/cli.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

namespace diloco::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
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

// strtod over the plain form, the whole string.
std::optional<double> read_double(const std::string& text) {
  const std::string plain = plain_number(text);
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
      return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
    return static_cast<int64_t>(v);
  }
  const auto v = whole_value(text);
  if (!v) return status(errc::invalid_argument, "expected an integer, got '" + text + "'");
  if (*v < -9.2e18L || *v > 9.2e18L)
    return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
  return static_cast<int64_t>(*v);
}

result<uint64_t> parse_uint(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    return status(errc::invalid_argument, "expected a non-negative integer, got '" + text + "'");
  }
  const std::string plain = plain_number(text);
  if (all_digits(plain, 0)) {
    errno = 0;
    const unsigned long long v = std::strtoull(plain.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
    return static_cast<uint64_t>(v);
  }
  const auto v = whole_value(text);
  if (!v || *v < 0)
    return status(errc::invalid_argument, "expected a non-negative integer, got '" + text + "'");
  if (*v > 1.8e19L)
    return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
  return static_cast<uint64_t>(*v);
}

result<double> parse_double(const std::string& text) {
  const auto v = read_double(text);
  if (!v) return status(errc::invalid_argument, "expected a number, got '" + text + "'");
  if (errno == ERANGE || !std::isfinite(*v)) {
    return status(errc::invalid_argument, "'" + text + "' is not a finite number");
  }
  return *v;
}

arg_parser::arg_parser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void arg_parser::flag(const std::string& name, bool* target, const std::string& help) {
  entries_.push_back({name, "", "", help, [target](const std::string&) {
                        *target = true;
                        return status();
                      }});
}

namespace {
template <class T, class Parse>
std::function<status(const std::string&)> setter(T* target, Parse parse) {
  return [target, parse](const std::string& text) -> status {
    auto v = parse(text);
    if (!v) return v.error();
    if constexpr (std::is_same_v<T, int>) {
      if (*v < INT_MIN || *v > INT_MAX)
        return status(errc::invalid_argument, "'" + text + "' does not fit in 32 bits");
    }
    *target = static_cast<T>(*v);
    return status();
  };
}

template <class T>
std::string show(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}
}  // namespace

void arg_parser::option(const std::string& name, int* target, const std::string& help) {
  entries_.push_back({name, "N", show(*target), help, setter(target, parse_int)});
}
void arg_parser::option(const std::string& name, int64_t* target, const std::string& help) {
  entries_.push_back({name, "N", show(*target), help, setter(target, parse_int)});
}
void arg_parser::option(const std::string& name, uint64_t* target, const std::string& help) {
  entries_.push_back({name, "N", show(*target), help, setter(target, parse_uint)});
}
void arg_parser::option(const std::string& name, double* target, const std::string& help) {
  entries_.push_back({name, "X", show(*target), help, setter(target, parse_double)});
}
void arg_parser::option(const std::string& name, std::string* target, const std::string& help) {
  entries_.push_back({name, "TEXT", *target, help, [target](const std::string& text) {
                        *target = text;
                        return status();
                      }});
}
void arg_parser::option(const std::string& name, std::function<status(const std::string&)> set,
                        const std::string& metavar, const std::string& shown_default,
                        const std::string& help) {
  entries_.push_back({name, metavar, shown_default, help, std::move(set)});
}

void arg_parser::positional(const std::string& name, std::string* target, const std::string& help,
                            bool required) {
  positionals_.push_back({name, help, target, required});
}

void arg_parser::positional_list(const std::string& name, std::vector<std::string>* target,
                                 const std::string& help) {
  rest_ = {name, help, nullptr, true};
  rest_target_ = target;
}

const arg_parser::entry* arg_parser::find(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// Every mistake on the line is reported in one pass, one per line; the caller prefixes each
// line with the command's name.
status arg_parser::parse(int argc, const char* const* argv) {
  std::vector<std::string> errors;
  size_t next_positional = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--help" || word == "-h") {
      help_requested_ = true;
      return {};
    }
    if (word.rfind("--", 0) != 0 || word.size() == 2) {
      if (next_positional < positionals_.size()) {
        *positionals_[next_positional++].target = word;
      } else if (rest_target_ != nullptr) {
        rest_target_->push_back(word);
      } else {
        errors.push_back("unexpected argument '" + word + "'");
      }
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const entry* e = find(name);
    if (e == nullptr) {
      std::vector<std::string> names;
      for (const auto& x : entries_) names.push_back(x.name);
      names.push_back("help");
      const std::string near = nearest(name, names);
      errors.push_back("unknown option '--" + name + "'" +
                       (near.empty() ? "" : " (did you mean '--" + near + "'?)"));
      // Its value, if it was given one, is not a stray argument.
      if (eq == std::string::npos && i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0)
        ++i;
      continue;
    }
    std::string value;
    if (e->metavar.empty()) {
      if (eq != std::string::npos) {
        errors.push_back("option '--" + name + "' takes no value");
        continue;
      }
    } else if (eq != std::string::npos) {
      value = word.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      errors.push_back("option '--" + name + "' needs a value (" + e->metavar + ")");
      continue;
    }
    if (auto st = e->set(value); !st.ok()) {
      // A multi-line error (every bad entry of a list) keeps its lines.
      std::istringstream lines(st.message());
      for (std::string line; std::getline(lines, line);)
        errors.push_back("--" + name + ": " + line);
    }
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) errors.push_back("missing argument " + positionals_[p].name);
  }
  if (rest_target_ != nullptr && rest_target_->empty())
    errors.push_back("missing argument " + rest_.name);
  if (errors.empty()) return {};
  errors.push_back("see '" + command_ + " --help'");
  return one_per_line(errors);
}

std::string arg_parser::help() const {
  std::ostringstream out;
  out << "usage: " << command_ << " [options]";
  for (const auto& p : positionals_)
    out << (p.required ? " " : " [") << p.name << (p.required ? "" : "]");
  if (rest_target_ != nullptr) out << " " << rest_.name << "...";
  out << "\n\n" << summary_ << "\n";
  if (!positionals_.empty() || rest_target_ != nullptr) {
    out << "\narguments:\n";
    for (const auto& p : positionals_) out << "  " << p.name << "\n      " << p.help << "\n";
    if (rest_target_ != nullptr) out << "  " << rest_.name << "...\n      " << rest_.help << "\n";
  }
  out << "\noptions:\n";
  for (const auto& e : entries_) {
    out << "  --" << e.name;
    if (!e.metavar.empty()) out << " " << e.metavar;
    out << "\n      " << e.help;
    // A help text that says its default itself ("default off") is not given a second one.
    if (!e.metavar.empty() && !e.shown_default.empty() &&
        e.help.find("default") == std::string::npos)
      out << " (default: " << e.shown_default << ")";
    out << "\n";
  }
  out << "  --help\n      show this help and exit\n";
  return out.str();
}

}  // namespace diloco::cli
