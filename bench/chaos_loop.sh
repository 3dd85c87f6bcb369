#!/usr/bin/env bash
# The cost-model event loop against a baseline build, measured in the same run: the default
# `diloco chaos` sweep (30 cost-model runs) with each binary, alternating, R times on one
# thread and R times on all cores. Prints each time, the mean ratio baseline / candidate, and
# whether every table is the same bit for bit (it must be: the script fails otherwise).
# With --instructions it also counts the instructions of a small sweep (4 simulated days,
# 2.4M chips, M = 16 and the two data-parallel rows) under valgrind's callgrind, which does
# not depend on what else the machine is doing.
#
# A baseline is any earlier build of `diloco`, e.g.
#   git worktree add /tmp/base <commit> && (cd /tmp/base && scripts/build.sh)
#
# Usage: bench/chaos_loop.sh BASELINE [--candidate BIN] [--rounds R] [--instructions]
#        (candidate: default build/apps/diloco; R: default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/chaos_loop.sh BASELINE [--candidate BIN] [--rounds R] [--instructions]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
base=$1
shift
cand=${DILOCO:-build/apps/diloco}
rounds=2
instructions=0
while [ $# -gt 0 ]; do
  case $1 in
    --candidate) cand=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --instructions) instructions=1; shift ;;
    *) echo "bench/chaos_loop.sh: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
for b in "$base" "$cand"; do
  [ -x "$b" ] || { echo "bench/chaos_loop.sh: '$b' is not an executable diloco" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "bench/chaos_loop.sh: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(date -u +%Y-%m-%d)"
echo "baseline $base, candidate $cand"
status=0

# sweep OUT ARGS...: the sweep's wall seconds as it reports them; its table in OUT.
sweep() {
  local out=$1
  shift
  "$@" >"$out.full" 2>/dev/null || { echo "failed: $*" >&2; exit 1; }
  grep -v '^sweep:' "$out.full" >"$out"
  sed -n 's/^sweep: .* events in \([0-9.]*\) s .*/\1/p' "$out.full"
}

for threads in 1 "$(nproc)"; do
  sum_b=0
  sum_c=0
  for ((r = 1; r <= rounds; r++)); do
    tb=$(sweep "$work/base-$threads-$r" "$base" chaos --threads "$threads")
    tc=$(sweep "$work/cand-$threads-$r" "$cand" chaos --threads "$threads")
    echo "  --threads $threads, round $r: baseline $tb s, candidate $tc s"
    if ! cmp -s "$work/base-$threads-$r" "$work/cand-$threads-$r"; then
      echo "  the tables differ:" >&2
      diff "$work/base-$threads-$r" "$work/cand-$threads-$r" >&2 || true
      status=1
    fi
    sum_b=$(awk -v a="$sum_b" -v b="$tb" 'BEGIN { print a + b }')
    sum_c=$(awk -v a="$sum_c" -v b="$tc" 'BEGIN { print a + b }')
  done
  awk -v t="$threads" -v b="$sum_b" -v c="$sum_c" -v r="$rounds" \
    'BEGIN { printf "--threads %s: baseline %.2f s, candidate %.2f s (means of %d), speedup %.2fx\n", t, b / r, c / r, r, b / c }'
done

if [ "$instructions" = 1 ]; then
  command -v valgrind >/dev/null || { echo "--instructions needs valgrind" >&2; exit 2; }
  small=(chaos --threads 1 --days 4 --chips 2400000 --learners 16)
  count() {
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$2" "$1" "${small[@]}" 2>&1 >/dev/null |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
  }
  ib=$(count "$base" base)
  ic=$(count "$cand" cand)
  awk -v b="$ib" -v c="$ic" \
    'BEGIN { printf "instructions (4 days, 2.4M chips, M = 16): baseline %.3fG, candidate %.3fG, %.1f%% fewer\n", b / 1e9, c / 1e9, 100 * (1 - c / b) }'
fi
[ "$status" = 0 ] && echo "every table the same bit for bit" || echo "TABLES DIFFER" >&2
exit "$status"
