#include "apps/cli.hpp"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace diloco::cli {

result<int64_t> parse_int(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    return status(errc::invalid_argument, "expected an integer, got '" + text + "'");
  if (errno == ERANGE)
    return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
  return static_cast<int64_t>(v);
}

result<uint64_t> parse_uint(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    return status(errc::invalid_argument, "expected a non-negative integer, got '" + text + "'");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    return status(errc::invalid_argument, "expected a non-negative integer, got '" + text + "'");
  }
  if (errno == ERANGE)
    return status(errc::invalid_argument, "'" + text + "' is out of the 64-bit range");
  return static_cast<uint64_t>(v);
}

result<double> parse_double(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    return status(errc::invalid_argument, "expected a number, got '" + text + "'");
  if (errno == ERANGE || !std::isfinite(v)) {
    return status(errc::invalid_argument, "'" + text + "' is not a finite number");
  }
  return v;
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

status arg_parser::error(const std::string& what) const {
  return status(errc::invalid_argument,
                command_ + ": " + what + " (see '" + command_ + " --help')");
}

status arg_parser::parse(int argc, const char* const* argv) {
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
        return error("unexpected argument '" + word + "'");
      }
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const entry* e = find(name);
    if (e == nullptr) return error("unknown option '--" + name + "'");
    std::string value;
    if (e->metavar.empty()) {
      if (eq != std::string::npos) return error("option '--" + name + "' takes no value");
    } else if (eq != std::string::npos) {
      value = word.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return error("option '--" + name + "' needs a value (" + e->metavar + ")");
    }
    if (auto st = e->set(value); !st.ok()) return error("--" + name + ": " + st.message());
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) return error("missing argument " + positionals_[p].name);
  }
  if (rest_target_ != nullptr && rest_target_->empty())
    return error("missing argument " + rest_.name);
  return {};
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
    if (!e.metavar.empty() && !e.shown_default.empty())
      out << " (default: " << e.shown_default << ")";
    out << "\n";
  }
  out << "  --help\n      show this help and exit\n";
  return out.str();
}

}  // namespace diloco::cli
