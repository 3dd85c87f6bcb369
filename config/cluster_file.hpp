// Loading a YAML cluster file into a run_config. Every error names the file, the line and the
// key: unknown keys (with a suggestion), wrong types, out-of-range values.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "runtime/config.hpp"

namespace diloco {

// The largest cluster file (or recorded configuration) read: 4 MiB, room for every learner of
// tens of thousands listed one per line (yaml-cpp needs about 100x a file's size in memory).
constexpr size_t cluster_file_max_bytes = size_t{4} << 20;

// Where a key was set in a file: line and column, 1-based.
struct text_position {
  int line = 0;
  int column = 0;
};

struct loaded_cluster {
  run_config config;
  std::map<std::string, text_position> key_lines;  // where each key was set, for later errors
};

// Applies the file's keys on top of `base`.
result<loaded_cluster> load_cluster_file(const std::string& path, const run_config& base);

// The same from text in memory (a snapshot manifest's config); `name` stands for the file in
// errors.
result<loaded_cluster> load_cluster_text(const std::string& text, const std::string& name,
                                         const run_config& base);

// Validates, reporting every problem (one per line); an error about a key the file set gets that
// key's file, line and column prefixed.
status validate_with_lines(const run_config& config, const std::string& path,
                           const std::map<std::string, text_position>& key_lines);

}  // namespace diloco
