#!/usr/bin/env bash
# Parallel simulation, measured against one thread in the same run: `diloco chaos` (its cells
# are independent cost-model runs) with --threads 1 and --threads N; the speedup, and whether
# the two tables are the same bit for bit (they must be).
#
# Usage: bench/parallel_sim.sh [--threads N] [-- extra chaos flags]   (N: default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
threads=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/parallel_sim.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "bench/parallel_sim.sh: $(nproc) cores, $(date -u +%Y-%m-%d)"
run() {  # run THREADS -> wall seconds; the table in $work/table-THREADS
  local start end
  start=$(date +%s.%N)
  "$bin" chaos --log-level error --threads "$1" "${@:2}" >"$work/out-$1" 2>&1 ||
    { echo "chaos --threads $1 failed:" >&2; tail -5 "$work/out-$1" >&2; exit 1; }
  end=$(date +%s.%N)
  # Everything but the header (it names the threads) and the timing line.
  grep -v '^diloco chaos: \|^sweep: \|^chaos ' "$work/out-$1" >"$work/table-$1"
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }' 
}
one=$(run 1 "$@")
many=$(run "$threads" "$@")
same=$(cmp -s "$work/table-1" "$work/table-$threads" && echo "same table bit for bit" || echo "TABLES DIFFER")
printf 'diloco chaos (default sweep, 30 runs): 1 thread %.2f s, %d threads %.2f s: speedup %.2fx; %s\n' \
  "$one" "$threads" "$many" "$(awk -v a="$one" -v b="$many" 'BEGIN { print a / b }')" "$same"
grep '^sweep: ' "$work/out-$threads" | sed 's/^/  /'
[ "$same" = "same table bit for bit" ]
