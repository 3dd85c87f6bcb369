#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run diloco on its
# built-in default. Extra arguments are passed to the diloco command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/apps/diloco simulate --compare dp "$@"
