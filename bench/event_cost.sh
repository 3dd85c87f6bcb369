#!/usr/bin/env bash
# What a modelled event costs as the cluster grows: `diloco chaos` sweeps on one thread with
# M = 64, 256, 1024 and 4096 learners (2.4M chips, the two data-parallel rows included), each
# long enough for about a million events. Prints the microseconds per event and the ratio to
# the first M measured in the same run; the vector clocks, the only per-message state that grows
# with the cluster, are what would make it grow. Each size runs --reps times, the sizes taking
# turns (this VM's speed moves by a third within minutes): the median per size, its range,
# and the ratio of the medians.
#
# Usage: bench/event_cost.sh [--candidate BIN] [--learners "64 256 1024 4096"] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
sizes="64 256 1024 4096"
reps=3
while [ $# -gt 0 ]; do
  case $1 in
    --candidate) bin=$2; shift 2 ;;
    --learners) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "bench/event_cost.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/event_cost.sh: '$bin' is not an executable diloco" >&2; exit 2; }
echo "bench/event_cost.sh: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(date -u +%Y-%m-%d)"
case $reps in ''|*[!0-9]*|0) echo "bench/event_cost.sh: --reps takes a count, not '$reps'" >&2; exit 2 ;; esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$reps"); do
  for m in $sizes; do
    # About 1M events: the sweep's event count grows about linearly with M at a fixed span.
    days=$(awk -v m="$m" 'BEGIN { d = 2.0 * 1024 / m; if (d > 4) d = 4; printf "%.3f", d }')
    # The rate, not the seconds: the summary prints seconds to 10 ms, a quarter-second run's
    # time to 4%; the rate has every digit.
    line=$("$bin" chaos --threads 1 --days "$days" --chips 2400000 --learners "$m" 2>/dev/null |
      sed -n 's/^sweep: .* \([0-9]*\) events in [0-9.]* s (\([0-9]*\) events\/s).*/\1 \2/p')
    [ -n "$line" ] || { echo "bench/event_cost.sh: the sweep at M = $m printed no summary" >&2; exit 1; }
    echo "$m $days $line" >>"$out"
  done
done
base_us=""
base_m=""
for m in $sizes; do
  # The median of this size's runs (and the range), in microseconds per event.
  read -r days events med lo hi <<EOF2
$(awk -v m="$m" '$1 == m { us[n++] = 1e6 / $4; d = $2; e = $3 }
  END { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (us[j] < us[i]) { t = us[i]; us[i] = us[j]; us[j] = t }
        med = n % 2 ? us[(n - 1) / 2] : (us[n / 2 - 1] + us[n / 2]) / 2
        printf "%s %d %.3f %.3f %.3f", d, e, med, us[0], us[n - 1] }' "$out")
EOF2
  [ -n "$base_us" ] || { base_us=$med; base_m=$m; }
  awk -v m="$m" -v d="$days" -v e="$events" -v us="$med" -v lo="$lo" -v hi="$hi" -v b="$base_us" -v bm="$base_m" -v r="$reps" \
    'BEGIN { printf "M = %5d: %5.2f days, %9d events, %6.3f us/event (median of %d, %.3f to %.3f), %.2fx M = %d\n", m, d, e, us, r, lo, hi, us / b, bm }'
done
