#include "hosts/resume_check.hpp"

#include <memory>
#include <string>

#include "actors/state_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "config/resolve.hpp"
#include "runtime/env.hpp"

namespace diloco {

namespace {
status check_loads(const loaded_snapshot& s, bool skip_pytorch_learners, int* skipped) {
  const snapshot_manifest& m = s.manifest;
  const std::string where = s.path + "/MANIFEST";
  auto reopened = reopen_recorded(m.config_text, where, m.run_id);
  if (!reopened) return reopened.error();
  const run_config& config = *reopened;
  const bool deployed = m.tick_scale == 1;
  auto made = actor_env::make(config, !deployed);
  if (!made) return made.error().with_context(where);
  // The environment as resume builds it, with inspect's leniency for PyTorch learners.
  auto checked = std::make_shared<actor_env>(**made);
  checked->skip_pytorch_learners = skip_pytorch_learners;
  const std::shared_ptr<const actor_env> env = checked;
  const auto& ids = env->ids;
  if (s.parts.size() != ids.count() || m.actors.size() != ids.count() ||
      (!deployed && m.tick_scale != env->tick_scale)) {
    return status(errc::corrupt_data, where + ": " + std::to_string(s.parts.size()) +
                                          " actor parts at tick scale " +
                                          std::to_string(m.tick_scale) + " for a run of " +
                                          std::to_string(ids.count()) + " actors at " +
                                          std::to_string(env->tick_scale));
  }
  for (uint32_t i = 0; i < s.parts.size(); ++i) {
    const std::string what = s.path + "/" + m.actors[i].file;
    if (auto role = check_role(*env, i, m.actors[i].role, what); !role.ok()) return role;
    const status st = check_part(env, i, s.parts[i].view(), what);
    if (skipped != nullptr) *skipped = env->pytorch_learners_skipped;
    if (!st.ok()) return st;
  }
  return ok_status();
}
}  // namespace

status check_snapshot_loads(const loaded_snapshot& s) {
  return check_loads(s, false, nullptr);
}

result<bool> check_snapshot_loads_for_inspect(const loaded_snapshot& s) {
  int skipped = 0;
  const status st = check_loads(s, true, &skipped);
  if (skipped > 0) return false;  // the rest was checked against the built-in model's layout
  if (!st.ok()) return st;
  return true;
}

}  // namespace diloco
