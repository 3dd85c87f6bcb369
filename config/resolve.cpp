#include "config/resolve.hpp"

#include <map>

#include "config/cluster_file.hpp"
#include "config/identity.hpp"
#include "config/keys.hpp"
#include "config/values.hpp"

namespace diloco {

void derive_dependent(run_config& config) {
  config.inner.total_steps = config.steps_per_learner();
}

result<run_config> resolve_config(const std::string& cluster_file,
                                  const std::vector<std::pair<std::string, std::string>>& sets,
                                  const run_config* base) {
  run_config config = base != nullptr && cluster_file.empty() ? *base : builtin_run_config();
  std::map<std::string, text_position> lines;
  std::vector<std::string> errors;
  if (!cluster_file.empty()) {
    auto loaded = load_cluster_file(cluster_file, config);
    if (!loaded) {
      if (loaded.error().code() != errc::invalid_argument) return loaded.error();  // unreadable
      errors.push_back(loaded.error().message());
    } else {
      config = loaded->config;
      lines = loaded->key_lines;
    }
  }
  for (const auto& [key, value] : sets) {
    if (auto st = set_config_key(config, key, value); !st.ok())
      errors.push_back(st.with_context("command line").message());
    lines.erase(key);  // the setting, not the file, set it now
  }
  derive_dependent(config);
  if (auto st = validate_with_lines(config, cluster_file, lines); !st.ok())
    errors.push_back(st.message());
  if (auto st = text::one_per_line(errors); !st.ok()) return st;
  return config;
}

result<run_config> reopen_recorded(const std::string& text, const std::string& where,
                                   uint64_t run_id) {
  const std::string what = where + " (its configuration)";
  auto loaded = load_cluster_text(text, what, builtin_run_config());
  if (!loaded) return loaded.error();
  run_config config = loaded->config;
  derive_dependent(config);
  if (auto st = config.validate(); !st.ok()) return st.with_context(what);
  if (run_id != 0 && run_identity(config) != run_id)
    return status(errc::corrupt_data,
                  where + ": its configuration does not match its run identity");
  return config;
}

}  // namespace diloco
