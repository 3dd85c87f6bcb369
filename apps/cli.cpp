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
  entries_.push_back({name, "N", show(*target), help, setter(target, text::parse_int)});
}
void arg_parser::option(const std::string& name, int64_t* target, const std::string& help) {
  entries_.push_back({name, "N", show(*target), help, setter(target, text::parse_int)});
}
void arg_parser::option(const std::string& name, uint64_t* target, const std::string& help) {
  entries_.push_back({name, "N", show(*target), help, setter(target, text::parse_uint)});
}
void arg_parser::option(const std::string& name, double* target, const std::string& help) {
  entries_.push_back({name, "X", show(*target), help, setter(target, text::parse_double)});
}
void arg_parser::seconds(const std::string& name, double* target, const std::string& help) {
  entries_.push_back({name, "S", show(*target), help, setter(target, text::parse_seconds)});
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
      const std::string near = text::nearest(name, names);
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
  return text::one_per_line(errors);
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
