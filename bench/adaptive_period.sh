#!/usr/bin/env bash
# Adaptive inner steps against fixed ones, on a link that slows to a tenth for a third of the
# run. The built-in cluster (4 learners, 2 shards) with 16 fragments, its payloads taking the
# wire time of a 2e10-parameter model (link.model_params) on 5 Gbit/s links, 320k tokens (1250
# simulated seconds); from 400 s to 820 s every link runs at 0.5 Gbit/s. Each system over the
# seeds given (default 1 2 3): eval loss, goodput, bytes per token, replies that came after
# their mixing step, as mean +- sample standard deviation.
# Systems: the default (H 64, tau 4); period_steps: auto (from H 64, tau 4); fixed (H, tau) from
# a sweep wide enough to hold the pair adaptive H picks while the link is slow.
# Usage: bench/adaptive_period.sh [seed ...]; DROP=none for the same runs on links that keep
# their speed (DROP=FACTOR@AT_S+FOR_S for another change), SYSTEMS=N for the first N systems.
# REGIONAL=1: the same 4 learners in two regions of two, each region with a regional syncer
# that alone crosses its wide-area link (5 Gbit/s, 50 ms, slowed by DROP like every link; its
# learners reach it over the region's own network, 100 Gbit/s, 0.5 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/apps/diloco
[ -x "$bin" ] || scripts/build.sh >/dev/null
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
common=(--budget 320000 --fragments 16 --set link.model_params=2e10 --set link.bandwidth_gbps=5)
if [ -n "${REGIONAL:-}" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cat >"$work/regional.yaml" <<'YAML'
regions:
  - {name: eu, latency_s: 0.05, bandwidth_gbps: 5, syncer: true}
  - {name: us, latency_s: 0.05, bandwidth_gbps: 5, syncer: true}
speeds: [{region: eu}, {region: eu}, {region: us}, {region: us}]
YAML
  common=(--cluster "$work/regional.yaml" "${common[@]}")
fi
drop=${DROP:-0.1@400+420}
[ "$drop" = none ] || common+=(--set "link_changes=$drop")
systems=${SYSTEMS:-99}
# bytes/token: the learners' (with regional syncers: the wide-area link's, what the shards
# sent and received).
printf "%-26s %16s %10s %14s %10s\n" "system" "eval loss" "goodput" "bytes/token" "late"
for variant in "default H 64 tau 4:" "auto (from H 64 tau 4):--set period_steps=auto" \
  "fixed H 128 tau 28:--period 128 --overlap 28" \
  "fixed H 64 tau 16:--overlap 16" "fixed H 64 tau 28:--overlap 28" "fixed H 128 tau 4:--period 128" \
  "fixed H 128 tau 56:--period 128 --overlap 56" "fixed H 256 tau 56:--period 256 --overlap 56"; do
  systems=$((systems - 1))
  [ "$systems" -ge 0 ] || break
  name=${variant%%:*}
  read -r -a flags <<<"${variant#*:}"
  rows=""
  for seed in "${seeds[@]}"; do
    out=$($bin simulate --seed "$seed" "${common[@]}" "${flags[@]}" 2>/dev/null)
    loss=$(echo "$out" | awk '$1=="decoupled" && $2 ~ /^[0-9]/ {print $2}')
    if [ -n "${REGIONAL:-}" ]; then
      bpt=$(echo "$out" | awk '$1=="decoupled:" && $2=="wide-area" {print $3}')
    else
      bpt=$(echo "$out" | awk '$1=="decoupled" && $2 ~ /^[0-9]/ {print $5}')
    fi
    good=$(echo "$out" | awk '/goodput/ {gsub("%,","",$3); print $3}')
    late=$(echo "$out" | awk '$1=="decoupled" && $2 ~ /^[0-9]/ {print $7}')
    rows+="$loss $good $bpt $late"$'\n'
  done
  echo -n "$rows" | awk -v name="$name" '
    { for (i = 1; i <= 4; ++i) { s[i] += $i; q[i] += $i * $i } n += 1 }
    END {
      for (i = 1; i <= 4; ++i) { m[i] = s[i] / n; v = n > 1 ? (q[i] - n * m[i] * m[i]) / (n - 1) : 0; d[i] = v > 0 ? sqrt(v) : 0 }
      printf "%-26s %8.4f +- %.4f %8.2f%% %8.1f +- %-4.1f %6.0f\n", name, m[1], d[1], m[2], m[3], d[3], m[4]
    }'
done
