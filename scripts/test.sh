#!/usr/bin/env bash
# The test suite on a fresh machine: install what is missing, build, run every default test.
# Soak and scale tests carry the ctest label "soak" and run only with --soak.
set -euo pipefail
cd "$(dirname "$0")/.."
label_filter=(-LE soak)
if [ "${1:-}" = "--soak" ]; then label_filter=(); shift; fi
scripts/install-deps.sh --test
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "${label_filter[@]}" "$@"
