// The one check of a snapshot before a run resumes from it, shared by `diloco simulate
// --resume` (which skips a snapshot it refuses for an older one) and `diloco inspect`.
#pragma once

#include "base/status.hpp"

namespace diloco {

// Whether a snapshot can be resumed, checked as resume itself checks it: its configuration
// loads and matches its run identity, it has a part for every actor, and every part loads
// into a fresh state of its actor's role. `diloco inspect` and `--resume` use the same check,
// so a snapshot that inspect passes resumes, and one it fails is skipped.
struct loaded_snapshot;
status check_snapshot_loads(const loaded_snapshot& snapshot);
// The same for `diloco inspect`: a PyTorch learner's state, which only the Python package with
// the run's learner can load, is taken as it is when this process has no PyTorch learner.
// True: it loads; false: its files check out, but its learners are PyTorch learners, whose
// states (and the model's layout) only the Python package with the run's learner can check.
result<bool> check_snapshot_loads_for_inspect(const loaded_snapshot& snapshot);

}  // namespace diloco
