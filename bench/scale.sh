#!/usr/bin/env bash
# Model size against memory and snapshots (docs/benchmarks.md, "Model size"): the built-in MLP
# grown to about 2M, 20M and 100M parameters, simulated with 2 learners and 1 syncer shard
# (H 8, so that fragments merge within the few steps a large model affords here):
#   - peak RSS of the run without snapshots, per learner, in model sizes (fp32 bytes of the
#     parameters): what one process holds per learner, its shard and scratch included;
#   - the same run taking 3 snapshots: each snapshot's bytes and write time, against `dd
#     conv=fsync` writing as many bytes to the same file system in the same minute (the ratio
#     is the figure);
#   - `--resume` from the last snapshot: peak RSS and wall time, and whether the resumed run
#     ends with the uninterrupted run's trace hash (it must).
# Labelled scale: it writes 3 snapshots of up to 20 model sizes each (100M: about 8 GB each;
# the directory is removed at the end) and takes about 15 minutes on 2 cores.
#
# Usage: bench/scale.sh [SIZE...]   (SIZE: 2M, 20M, 100M; default all three)
#        SCALE_DIR=/path/with/space bench/scale.sh   (default: a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2M 20M 100M)
work=$(mktemp -d "${SCALE_DIR:-${TMPDIR:-/tmp}}/diloco-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "bench/scale.sh: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(free -g | awk '/^Mem:/{print $2}') GiB, $(date -u +%Y-%m-%d)"
echo "snapshots and dd write to: $(df -h "$work" | awk 'NR==2{print $1" ("$2")"}')"
status=0

# The MLP's parameter count for hidden width H and L hidden layers (context 8, embed 32,
# vocabulary 256), as tensor/model.cpp lays it out.
params_of() {
  local h=$1 l=$2
  echo $((256 * 32 + (8 * 32 * h + h) + (l - 1) * (h * h + h) + (h * 256 + 256)))
}

# run NAME ARGS...: runs `diloco simulate ARGS`, output in $work/NAME.out; sets rss_kb, wall_s.
run() {
  local name=$1
  shift
  /usr/bin/time -f "%M %e" -o "$work/$name.time" "$bin" simulate "$@" >"$work/$name.out" 2>&1 || {
    echo "$name failed:" >&2
    tail -5 "$work/$name.out" >&2
    exit 1
  }
  read -r rss_kb wall_s <"$work/$name.time"
}
trace_of() { sed -n 's/.*trace \([0-9a-f]\{16\}\).*/\1/p' "$work/$1.out" | tail -1; }

printf '\n%-5s %12s %10s | %8s %8s | %10s %9s %9s %6s | %8s %8s %6s\n' size parameters model_MB \
  rss_x/l rss_x/l+s snapshot_MB write_MB/s dd_MB/s ratio resume_s rss_x/l exact
for size in "${sizes[@]}"; do
  case $size in
    2M) h=1024 l=3 ;;
    20M) h=2048 l=6 ;;
    100M) h=4096 l=7 ;;
    *) echo "bench/scale.sh: unknown size '$size' (2M, 20M or 100M)" >&2; exit 2 ;;
  esac
  n=$(params_of $h $l)
  model_bytes=$((n * 4))
  common=(--set model.hidden=$h --set model.hidden_layers=$l --learners 2 --set shards=1
    --period 8 --budget 3072 --set data.eval_tokens=1024 --eval-every 0)
  run "$size-plain" "${common[@]}"
  rss_plain=$rss_kb
  plain_trace=$(trace_of "$size-plain")
  snaps="$work/snaps-$size"
  run "$size-snap" "${common[@]}" --snapshot-dir "$snaps" --snapshot-every 6
  rss_snap=$rss_kb
  # The last snapshot: "(1436.1 MB in 7.72 s, 186 MB/s)".
  last=$(grep -E '^snapshot [0-9]+ written' "$work/$size-snap.out" | tail -1)
  snap_mb=$(sed -n 's/.*(\([0-9.]*\) MB in.*/\1/p' <<<"$last")
  snap_rate=$(sed -n 's/.* s, \([0-9.]*\) MB\/s).*/\1/p' <<<"$last")
  # dd: as many bytes, fsynced, on the same file system, now.
  count=$(awk -v mb="$snap_mb" 'BEGIN{printf "%d", mb / 4.194304 + 1}')
  dd_rate=$(dd if=/dev/zero of="$work/dd.bin" bs=4M count="$count" conv=fsync 2>&1 |
    awk '/copied/{for (i = 1; i <= NF; i++) if ($i == "s,") {print ($(i+1) + 0) * ($(i+2) ~ /^GB/ ? 1000 : 1); exit}}')
  rm -f "$work/dd.bin"
  run "$size-resume" "${common[@]}" --snapshot-dir "$snaps" --snapshot-every 6 --resume "$snaps"
  resume_trace=$(trace_of "$size-resume")
  exact=yes
  if [ "$resume_trace" != "$plain_trace" ] || [ "$(trace_of "$size-snap")" != "$plain_trace" ]; then
    exact=NO
    status=1
  fi
  rm -rf "$snaps"
  awk -v size="$size" -v n="$n" -v mb="$model_bytes" -v plain="$rss_plain" -v snap="$rss_snap" \
    -v smb="$snap_mb" -v srate="$snap_rate" -v dd="$dd_rate" -v rs="$wall_s" -v rrss="$rss_kb" \
    -v exact="$exact" 'BEGIN{
      m = mb / 1e6; per = 2 * mb / 1024;
      printf "%-5s %12d %10.1f | %8.2f %8.2f | %10.1f %9.0f %9.0f %6.2f | %8.1f %8.2f %6s\n",
        size, n, m, plain / per, snap / per, smb, srate, dd, srate / dd, rs, rrss / per, exact }'
done
echo
echo "rss_x/l: peak RSS / (2 learners x model bytes), without snapshots and with 3 snapshots;"
echo "ratio: the last snapshot's write rate / dd conv=fsync of as many bytes just after it;"
echo "resume: --resume from the last snapshot to the end; exact: its trace hash and the"
echo "snapshotting run's are the uninterrupted run's."
exit $status
