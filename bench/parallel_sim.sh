#!/usr/bin/env bash
# Parallel simulation, measured against one thread in the same run (docs/architecture.md,
# "Parallel simulation"):
#   - `diloco simulate` (real compute; 4 learners, the built-in run, and 8 learners): wall time
#     with --threads 1 and --threads N, and whether both print the same trace hash and eval
#     loss (they must);
#   - `diloco chaos` (30 independent cost-model runs): the same, and whether the two tables are
#     the same bit for bit (they must);
#   - what the cores give at all: N one-thread runs of the built-in simulation (a quarter of
#     the budget) side by side, as separate processes, against one alone (N x one alone /
#     side by side). On a VM whose
#     cores share their host with others this ceiling can be well under N, and changes from
#     hour to hour: the speedups above are to be read against it.
#
# Usage: bench/parallel_sim.sh [--threads N] [--quick]   (N: default nproc; --quick: a 4x
#        smaller token budget for simulate)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
threads=$(nproc)
budget=""
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --quick) budget="--set token_budget=320000"; shift ;;
    *) echo "bench/parallel_sim.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "bench/parallel_sim.sh: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(date -u +%Y-%m-%d)"
status=0

# timed NAME COMMAND...: runs it, its output in $work/NAME; prints the wall seconds.
timed() {
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  "$@" >"$work/$name" 2>&1 || { echo "$name failed:" >&2; tail -5 "$work/$name" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# side_by_side N COMMAND...: N copies at once, each output in $work/side-I; the wall seconds.
side_by_side() {
  local n=$1 start end i
  shift
  start=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do "$@" >"$work/side-$i" 2>&1 & done
  wait || { echo "a side-by-side run failed" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}

for learners in 4 8; do
  # shellcheck disable=SC2086
  one=$(timed "sim-$learners-1" "$bin" simulate --log-level error --learners "$learners" --threads 1 $budget)
  # shellcheck disable=SC2086
  many=$(timed "sim-$learners-n" "$bin" simulate --log-level error --learners "$learners" --threads "$threads" $budget)
  h1=$(sed -n 's/.*eval loss \([0-9.]*\), .* trace \([0-9a-f]*\)$/\1 \2/p' "$work/sim-$learners-1" | head -1)
  hn=$(sed -n 's/.*eval loss \([0-9.]*\), .* trace \([0-9a-f]*\)$/\1 \2/p' "$work/sim-$learners-n" | head -1)
  same="same eval loss and trace hash ($h1)"
  [ -n "$h1" ] && [ "$h1" = "$hn" ] || { same="DIFFERENT RUNS: '$h1' against '$hn'"; status=1; }
  printf 'diloco simulate, %d learners: 1 thread %s s, %d threads %s s: speedup %sx; %s\n' \
    "$learners" "$one" "$threads" "$many" "$(ratio "$one" "$many")" "$same"
done
# The ceiling at a quarter of the budget: one alone, N side by side, one alone again (the
# mean of the two alone, as this VM's speed drifts).
quarter="--set token_budget=320000"
# shellcheck disable=SC2086
alone1=$(timed alone-1 "$bin" simulate --log-level error --threads 1 $quarter)
# shellcheck disable=SC2086
pair=$(side_by_side "$threads" "$bin" simulate --log-level error --threads 1 $quarter)
# shellcheck disable=SC2086
alone2=$(timed alone-2 "$bin" simulate --log-level error --threads 1 $quarter)
ceiling=$(awk -v n="$threads" -v a="$alone1" -v c="$alone2" -v b="$pair" \
  'BEGIN { printf "%.2f", n * (a + c) / 2 / b }')
printf 'the cores: %d one-thread runs side by side %s s, one alone %s and %s s: ceiling %sx (quarter budget)\n' \
  "$threads" "$pair" "$alone1" "$alone2" "$ceiling"

chaos_table() { grep -v '^diloco chaos: \|^sweep: \|^chaos ' "$work/$1"; }
one=$(timed chaos-1 "$bin" chaos --log-level error --threads 1)
many=$(timed chaos-n "$bin" chaos --log-level error --threads "$threads")
same="same table bit for bit"
cmp -s <(chaos_table chaos-1) <(chaos_table chaos-n) || { same="TABLES DIFFER"; status=1; }
printf 'diloco chaos (default sweep, 30 runs): 1 thread %s s, %d threads %s s: speedup %sx; %s\n' \
  "$one" "$threads" "$many" "$(ratio "$one" "$many")" "$same"
grep '^sweep: ' "$work/chaos-n" | sed 's/^/  /'
exit $status
