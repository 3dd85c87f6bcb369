#!/usr/bin/env bash
# Model quality with its spread over seeds: for each setting, `diloco simulate --compare dp,diloco`
# (data parallel, synchronous DiLoCo and Decoupled DiLoCo on the same model, data and token
# budget) once per seed, and per system the mean +- sample standard deviation of the loss above
# the data's entropy rate (the reducible loss: what training can still remove), with the
# ratio to data parallel's. Where the entropy rate is unknown (a --data text file) the
# figure is the eval loss itself and the ratio compares total losses.
#
# Usage: bench/quality.sh [--seeds N] [--decoupled-only] [--setting "NAME:FLAGS"]...
#                         [-- extra simulate flags]
#   default settings: the built-in run (4 learners) and 8 learners; 3 seeds.
#   --decoupled-only skips the baselines (a sweep over Decoupled DiLoCo's own settings).
# Example: bench/quality.sh --seeds 5 --setting "M=4:" --setting "M=16:--learners 16"
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
seeds=3
compare="--compare dp,diloco"
settings=()
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --setting) settings+=("$2"); shift 2 ;;
    --decoupled-only) compare=""; shift ;;
    --) shift; break ;;
    *) echo "bench/quality.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
[ ${#settings[@]} -gt 0 ] || settings=("M=4:" "M=8:--learners 8")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "bench/quality.sh: $seeds seeds per setting ($(nproc) cores, $(date -u +%Y-%m-%d))"
for setting in "${settings[@]}"; do
  name=${setting%%:*}
  flags=${setting#*:}
  : >"$work/rows"
  for seed in $(seq 1 "$seeds"); do
    # shellcheck disable=SC2086
    "$bin" simulate --log-level error --seed "$seed" $compare $flags "$@" \
      >"$work/out" 2>&1 || { echo "$name seed $seed failed:" >&2; tail -5 "$work/out" >&2; exit 1; }
    h=$(sed -n 's/^entropy rate of the data: \([0-9.]*\) nats\/token/\1/p' "$work/out")
    awk -v h="${h:-0}" -v seed="$seed" \
      '$1 ~ /^(decoupled|dp|diloco)$/ && $2 ~ /^[0-9.]+$/ {print $1, seed, $2, (h > 0 ? $2 - h : $2)}' \
      "$work/out" >>"$work/rows"
  done
  echo
  echo "$name ($flags):"
  awk -v known="$([ -n "$h" ] && echo 1 || echo 0)" '
    { n[$1]++; s[$1] += $4; q[$1] += $4 * $4; l[$1] += $3
      if (!($1 in lo) || $4 < lo[$1]) lo[$1] = $4
      if (!($1 in hi) || $4 > hi[$1]) hi[$1] = $4 }
    END {
      what = known ? "loss above entropy" : "eval loss"
      printf "  %-10s %8s  %-32s %-16s %s\n", "system", "eval", what " (mean +- sd)", "min..max", "vs dp"
      split("dp diloco decoupled", order, " ")
      for (i = 1; i <= 3; i++) {
        k = order[i]; if (!(k in n)) continue
        m = s[k] / n[k]; sd = n[k] > 1 ? sqrt((q[k] - n[k] * m * m) / (n[k] - 1)) : 0
        if (sd != sd) sd = 0
        ratio = ("dp" in n) ? sprintf("%.2fx", m / (s["dp"] / n["dp"])) : "-"
        printf "  %-10s %8.4f  %-32s %-16s %s\n", k, l[k] / n[k], sprintf("%.4f +- %.4f", m, sd), sprintf("%.4f..%.4f", lo[k], hi[k]), ratio
      }
    }' "$work/rows"
done
