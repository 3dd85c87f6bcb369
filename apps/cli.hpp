// A small command-line parser for the `diloco` subcommands: typed options bound to config
// fields, generated --help, and errors that name the flag, the bad value and what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "config/values.hpp"

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
  // A duration in seconds: plain, or with a unit (250ms, 8s, 10min, 2h; text::parse_seconds).
  void seconds(const std::string& name, double* target, const std::string& help);
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

}  // namespace diloco::cli
