#!/usr/bin/env bash
# Heterogeneous learners (half of them 18% slower with 10% step-time variance), Decoupled
# DiLoCo three ways: K = M, K = 1 without grace, K = 1 with the adaptive grace window, each K = 1
# also with late deltas counted whole (staleness_decay 0); and synchronous DiLoCo for contrast
# (it waits for the slowest). Prints the final eval loss,
# the learners' idle share and the updates that arrived after their mixing deadline.
# Usage: bench/heterogeneity.sh [extra diloco simulate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/apps/diloco
[ -x "$bin" ] || scripts/build.sh >/dev/null
speeds="1,1,1.18:0.1,1.18:0.1"
printf "%-22s %10s %10s %10s %8s\n" "system" "eval loss" "vs K=M" "idle" "late"
base=""
sync="--mode diloco --set schedule_clock=local --fragments 1 --set shards=1 --overlap 0 --quorum 4"
for variant in "K=M:--quorum 4 --grace false" "K=1 no grace:--quorum 1 --grace false" "K=1 + grace:--quorum 1 --grace true" \
  "K=1 no grace, p=0:--quorum 1 --grace false --set staleness_decay=0" \
  "K=1 + grace, p=0:--quorum 1 --grace true --set staleness_decay=0" "sync DiLoCo (waits):$sync"; do
  name=${variant%%:*}
  flags=${variant#*:}
  # shellcheck disable=SC2086
  out=$($bin simulate --speeds "$speeds" $flags "$@" 2>/dev/null)
  row=$(echo "$out" | awk '($1=="decoupled" || $1=="diloco") && $2 ~ /^[0-9]/')
  loss=$(echo "$row" | awk '{print $2}')
  idle=$(echo "$row" | awk '{print $9}')
  late=$(echo "$out" | awk '/^ +[0-9]+ +[0-9.]+[kM]? /{s+=$7} END{print s+0}')
  [ -z "$base" ] && base=$loss
  printf "%-22s %10s %9.2f%% %10s %8s\n" "$name" "$loss" "$(awk -v a="$loss" -v b="$base" 'BEGIN{print 100*(a-b)/b}')" "$idle" "$late"
done
