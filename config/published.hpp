// The cluster file shape the Decoupled DiLoCo write-ups publish: `global_config`,
// `synchronizer`, one `learner_N` block per learner and `network`. Each of its keys is mapped to
// ours (docs/config.md, "The published cluster file") or refused by name with the reason; the
// result is our form as YAML text with a comment on each line saying where it came from.
#pragma once

#include <string>

#include "base/status.hpp"

namespace YAML {
class Node;
}

namespace diloco {

// Whether a parsed cluster file is in the published shape (has global_config, synchronizer,
// network or a learner_N block).
bool is_published_form(const YAML::Node& root);

// Our form of a published file, read as its authors mean it: a learner_N block that leaves
// keys out has learner_0's ("the rest as learner_0"), and fewer learner_N blocks than
// total_learners repeat in order (learner_2 as learner_0, ...). Every error of it at once (one
// per line, file:line:column). `path` names the file in errors and in the header comment.
struct published_conversion {
  std::string yaml;     // our form, each key with where it comes from
  std::string assumed;  // what was assumed, on one line ("" when nothing was)
};
result<published_conversion> convert_published(const YAML::Node& root, const std::string& path);

}  // namespace diloco
