#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run diloco on its
# built-in default. Extra arguments are passed to the diloco command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
if [ $# -eq 0 ]; then
  # The built-in cluster with what Decoupled DiLoCo is for: learner 2 fails at 1500 s and is
  # back 1000 s later (a fifth of the run), and the merges go on without it meanwhile.
  # Synchronous DiLoCo gets the same failure; data parallel, which cannot lose a replica, runs
  # without it as the failure-free reference.
  set -- --failures 2@1500+1000 --compare dp,diloco
else
  set -- --compare dp "$@"
fi
exec build/apps/diloco simulate "$@"
