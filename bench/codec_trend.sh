#!/usr/bin/env bash
# The codec trend: Decoupled DiLoCo on the built-in cluster with each uplink codec, over seeds;
# per codec the mean +- sample standard deviation (min..max) of the loss above the data's
# entropy rate, and the bytes per token the learners send and receive. Data parallel does not
# depend on the codec: bench/quality.sh gives its figure on the same run.
#
# Usage: bench/codec_trend.sh [--seeds N] [--codecs "fp32 bf16 ..."] [-- extra simulate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
seeds=3
codecs="fp32 bf16 int8 int4 fp4 int2 sign1"
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --codecs) codecs=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/codec_trend.sh: unknown argument '$1' (see the usage at the top)" >&2; exit 2 ;;
  esac
done
echo "bench/codec_trend.sh: $seeds seeds per codec ($(nproc) cores, $(date -u +%Y-%m-%d))"
echo "| uplink codec | eval loss | above the entropy rate | bytes per token |"
echo "|---|---|---|---|"
for c in $codecs; do
  for s in $(seq 1 "$seeds"); do
    out=$("$bin" simulate --log-level error --seed "$s" --set uplink.codec="$c" "$@" 2>&1) ||
      { echo "$c seed $s failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
    h=$(echo "$out" | sed -n 's/^entropy rate of the data: \([0-9.]*\) nats\/token/\1/p')
    echo "$out" | awk -v h="$h" '$1 == "decoupled" && $2 ~ /^[0-9.]+$/ { print $2, $2 - h, $5; exit }'
  done | awk -v c="$c" '
    { n++; ev += $1; r[n] = $2; s += $2; b = $3 }
    END {
      m = s / n; v = 0; lo = r[1]; hi = r[1]
      for (i = 1; i <= n; i++) { v += (r[i] - m) ^ 2; if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
      sd = n > 1 ? sqrt(v / (n - 1)) : 0
      printf "| %s | %.4f | %.4f +- %.4f (%.4f..%.4f) | %s |\n", c, ev / n, m, sd, lo, hi, b
    }'
done
