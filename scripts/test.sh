#!/usr/bin/env bash
# The test suite on a fresh machine: install what is missing, build, run every default test.
# Soak and scale tests carry the ctest label "soak" and run only with --soak (which also installs
# a single-host Slurm for the Slurm job test).
# --sanitize builds with AddressSanitizer and UndefinedBehaviorSanitizer (RelWithDebInfo, in
# build-sanitize) and runs the same suite there, with the tests' timeouts scaled by 4 and any
# leak at exit, memory error or undefined behaviour failing the test.
set -euo pipefail
cd "$(dirname "$0")/.."
label_filter=(-LE soak)
sanitize=0
extra_deps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --soak) label_filter=(); extra_deps=(--slurm); shift ;;
    --sanitize) sanitize=1; shift ;;
    *) break ;;
  esac
done
scripts/install-deps.sh --test "${extra_deps[@]}"
jobs=$(nproc 2>/dev/null || echo 2)
if [ $sanitize = 1 ]; then
  cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDILOCO_SANITIZE=ON
  cmake --build build-sanitize -j "$jobs"
  export DILOCO_TIME_SCALE=4
  export DILOCO_MEMORY_SCALE=5  # AddressSanitizer's shadow memory, redzones and quarantine
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/ubsan.supp"
  exec ctest --test-dir build-sanitize --output-on-failure --timeout 3600 -j "$jobs" \
    "${label_filter[@]}" "$@"
fi
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$jobs" "${label_filter[@]}" "$@"
