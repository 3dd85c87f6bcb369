#!/usr/bin/env bash
# Scavenging: 4 learners by day, 8 by night. Decoupled DiLoCo takes the night's 4 extra
# learners as they come and lets them go at dawn (membership); data parallel cannot change its
# world size mid-run, so it trains on the 4 learners it always has. Every system runs the same
# simulated time T (days and nights of `--half` seconds each, night first at `--half`) with a
# constant inner lr after warmup (inner.min_lr_ratio 1), so a shorter run is a prefix of a
# longer one and the loss at time t is a fair point of a curve:
#   - Decoupled DiLoCo evaluates the global model every `--half / 4` seconds (--eval-every);
#   - data parallel keeps no global model, so its curve is its final loss after runs of
#     half, 2 half, ..., T seconds.
# The targets are data parallel's losses at half, 2 half, ..., T; printed per seed: each
# system's loss at T and the time it first reached each target (linear between evaluations;
# "-" if it did not within T).
#
# Usage: bench/scavenging.sh [--seeds N] [--half S] [--cycles C] [-- extra simulate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
seeds=3
half=1000
cycles=2
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --half) half=$2; shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/scavenging.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
T=$((2 * half * cycles))
membership=""
for c in $(seq 0 $((cycles - 1))); do
  dusk=$(((2 * c + 1) * half))
  dawn=$(((2 * c + 2) * half))
  for l in 4 5 6 7; do membership="$membership,+$l@$dusk"; done
  # the last night runs to the end of the run
  if [ "$dawn" -lt "$T" ]; then for l in 4 5 6 7; do membership="$membership,-$l@$dawn"; done; fi
done
membership=${membership#,}
common=(--log-level error --budget 100M --set inner.min_lr_ratio=1 --set duration_s="$T")

# "time loss" lines of a Decoupled run's evaluations of the global model, the last at T: the
# curve, measured the same way at every point. Not the run's final loss, which comes after the
# final merge of every learner's last delta (docs/architecture.md, "The final merge").
decoupled_curve() {
  "$bin" simulate "${common[@]}" --eval-every $((half / 4)) "$@" 2>&1 |
    awk '/^decoupled eval at / { print $4, $7 }'
}

# time to reach `target` along "time loss" lines (linear between points)
time_to() {
  awk -v target="$1" '
    { if ($2 <= target) { if (n == 0 || pl <= target) { printf "%.0f", $1; found = 1; exit }
                          printf "%.0f", pt + ($1 - pt) * (pl - target) / (pl - $2); found = 1; exit }
      pt = $1; pl = $2; n++ }
    END { if (!found) printf "-" }'
}

echo "bench/scavenging.sh: $seeds seeds, T = $T s, days and nights of $half s ($(nproc) cores, $(date -u +%Y-%m-%d))"
echo "membership: $membership"
echo "| seed | system | loss at T | time to data parallel's loss at $(seq -s ', ' "$half" "$half" "$T") s |"
echo "|---|---|---|---|"
for s in $(seq 1 "$seeds"); do
  dp_curve=""
  for t in $(seq "$half" "$half" "$T"); do
    out=$("$bin" simulate "${common[@]}" --mode dp --seed "$s" --set duration_s="$t" "$@" 2>&1) ||
      { echo "data parallel seed $s, $t s failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
    loss=$(echo "$out" | awk '$1 == "dp" && $2 ~ /^[0-9.]+$/ { print $2; exit }')
    dp_curve="$dp_curve$t $loss"$'\n'
  done
  targets=$(echo -n "$dp_curve" | awk '{print $2}')
  row() {  # name, curve
    local times=""
    for target in $targets; do times="$times, $(echo "$2" | time_to "$target")"; done
    printf "| %s | %s | %s | %s |\n" "$s" "$1" "$(echo "$2" | tail -1 | awk '{print $2}')" "${times#, }"
  }
  row "data parallel, 4 learners (targets: $(echo $targets | tr ' ' '/'))" "$(echo -n "$dp_curve")"
  row "Decoupled DiLoCo, 4 learners" "$(decoupled_curve --seed "$s" "$@")"
  row "Decoupled DiLoCo, 4 by day, 8 by night" \
    "$(decoupled_curve --seed "$s" --set max_learners=8 --set membership="$membership" "$@")"
done
