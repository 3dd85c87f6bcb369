#!/usr/bin/env bash
# Regional syncers against flat shards and against data parallel: 4 regions x 4 learners (16
# learners, the built-in model), each region behind a 1 Gbit/s, 50 ms wide-area link; with
# regional syncers each region's learners reach theirs over the region's own 100 Gbit/s, 0.5 ms
# network. Each system over the seeds given (default 1 2 3): eval loss, wide-area bytes per
# token (every byte the shards sent or received), learner bytes per token, goodput; mean +-
# sample standard deviation. The systems differ only in the regional syncers (and data parallel
# in being data parallel): same budget, H, tau, codecs, quorum and grace.
# Usage: bench/regional.sh [seed ...]; BUDGET=tokens (default 2560000).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cluster() {  # cluster FILE true|false
  {
    echo "learners: 16"
    echo "token_budget: ${BUDGET:-2560000}"
    echo "regions:"
    for r in eu us asia sa; do
      echo "  - {name: $r, latency_s: 0.05, bandwidth_gbps: 1, syncer: $2}"
    done
    echo "speeds:"
    for r in eu us asia sa; do
      for _ in 1 2 3 4; do echo "  - {region: $r}"; done
    done
  } >"$1"
}
cluster "$work/regional.yaml" true
cluster "$work/flat.yaml" false
printf "%-30s %18s %20s %16s %10s\n" "system" "eval loss" "wide-area bytes/tok" "learner bytes/tok" "goodput"
summary() {  # summary NAME < rows of "loss wan bpt goodput"
  awk -v name="$1" '
    { for (i = 1; i <= 4; ++i) { s[i] += $i; q[i] += $i * $i } n += 1 }
    END {
      for (i = 1; i <= 4; ++i) { m[i] = s[i] / n; v = n > 1 ? (q[i] - n * m[i] * m[i]) / (n - 1) : 0; d[i] = v > 0 ? sqrt(v) : 0 }
      printf "%-30s %8.4f +- %.4f %12.1f +- %-5.1f %10.1f +- %-4.1f %8.2f%%\n", name, m[1], d[1], m[2], d[2], m[3], d[3], m[4]
    }'
}
row() {  # row SYSTEM OUTPUT: "loss wan bpt goodput" of that system's line
  echo "$2" | awk -v sys="$1" '
    $1==sys && $2 ~ /^[0-9]/ { loss=$2; bpt=$5 }
    $1==sys":" && $2=="wide-area" { wan=$3 }
    $1==sys":" && $2=="goodput" { g=$3; gsub("%,?", "", g) }
    END { print loss, wan, bpt, g }'
}
reg="" flat="" dp=""
for seed in "${seeds[@]}"; do
  out=$($bin simulate --log-level error --seed "$seed" --cluster "$work/regional.yaml" 2>/dev/null)
  reg+="$(row decoupled "$out")"$'\n'
  out=$($bin simulate --log-level error --seed "$seed" --cluster "$work/flat.yaml" --compare dp 2>/dev/null)
  flat+="$(row decoupled "$out")"$'\n'
  dp+="$(row dp "$out")"$'\n'
  echo "seed $seed done" >&2
done
echo -n "$reg" | summary "regional syncers (4 x 4)"
echo -n "$flat" | summary "flat shards"
echo -n "$dp" | summary "data parallel"
