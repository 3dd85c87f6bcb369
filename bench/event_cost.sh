#!/usr/bin/env bash
# What a modelled event costs as the cluster grows: `diloco chaos` sweeps on one thread with
# M = 64, 256, 1024 and 4096 learners (2.4M chips, the two data-parallel rows included), each
# long enough for about a million events. Prints the microseconds per event and the ratio to
# the first M measured in the same run; the vector clocks, the only per-message state that grows
# with the cluster, are what would make it grow.
#
# Usage: bench/event_cost.sh [--candidate BIN] [--learners "64 256 1024 4096"]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
sizes="64 256 1024 4096"
while [ $# -gt 0 ]; do
  case $1 in
    --candidate) bin=$2; shift 2 ;;
    --learners) sizes=$2; shift 2 ;;
    *) echo "bench/event_cost.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/event_cost.sh: '$bin' is not an executable diloco" >&2; exit 2; }
echo "bench/event_cost.sh: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(date -u +%Y-%m-%d)"
base_us=""
base_m=""
for m in $sizes; do
  # About 1M events: the sweep's event count grows about linearly with M at a fixed span.
  days=$(awk -v m="$m" 'BEGIN { d = 2.0 * 1024 / m; if (d > 4) d = 4; printf "%.3f", d }')
  line=$("$bin" chaos --threads 1 --days "$days" --chips 2400000 --learners "$m" 2>/dev/null |
    sed -n 's/^sweep: .* \([0-9]*\) events in \([0-9.]*\) s .*/\1 \2/p')
  [ -n "$line" ] || { echo "bench/event_cost.sh: the sweep at M = $m printed no summary" >&2; exit 1; }
  read -r events secs <<<"$line"
  us=$(awk -v e="$events" -v s="$secs" 'BEGIN { printf "%.3f", s * 1e6 / e }')
  [ -n "$base_us" ] || { base_us=$us; base_m=$m; }
  awk -v m="$m" -v d="$days" -v e="$events" -v s="$secs" -v us="$us" -v b="$base_us" -v bm="$base_m" \
    'BEGIN { printf "M = %5d: %5.2f days, %9d events in %7.2f s, %6.3f us/event, %.2fx M = %d\n", m, d, e, s, us, us / b, bm }'
done
