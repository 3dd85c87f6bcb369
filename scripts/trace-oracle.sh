#!/usr/bin/env bash
# The regression oracle for refactors: a fixed set of simulated runs, each printed as
# "name  trace-hash  eval-loss". A change that should not alter behaviour must leave every
# line the same; save the output before the change and diff it after:
#   scripts/trace-oracle.sh > before.txt; ...; scripts/trace-oracle.sh | diff before.txt -
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || { echo "trace-oracle: $bin is not built (scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
  local name=$1; shift
  "$bin" simulate --log-level error "$@" > "$work/out" 2>&1 || {
    local rc=$?
    # exit 3 is a diverged run, still a result to compare
    [ $rc = 3 ] || { echo "trace-oracle: $name failed (exit $rc):" >&2; cat "$work/out" >&2; exit 1; }
  }
  # every "..., trace HASH" line of the run (the main run and each baseline)
  grep -o 'eval loss [^,]*, [0-9]* events, trace [0-9a-f]*' "$work/out" |
    sed "s/^/$name  /"
}

run default
run faults --budget 640000 --failures 2@300+120,0@900+60 \
  --set link.drop_rate=0.05 --set link.dup_rate=0.02 \
  --set 'partitions=1@800+200' --set shard_restarts=1@1200+60
run baselines --budget 320000 --compare dp,diloco,vanilla
run quorum-all --budget 320000 --quorum 4 --grace false --codec int8 --speeds 1,1,1.18:0.1,1.3
run membership --budget 320000 --set max_learners=6 --set 'membership=+4@100,-1@200,+5@250'
run cost-chaos --set compute=cost --set duration_s=20000 --set interruptions.mtbi_hours=50 \
  --set chips_per_learner=256 --learners 16
run snapshots --budget 320000 --snapshot-dir "$work/snaps" --snapshot-every 300 --tape "$work/run.tape"
run interleave --budget 320000 --set interleave_seed=5
# the tape of the snapshots run re-executes to the same sends
"$bin" replay --log-level error "$work/run.tape" 2>&1 | grep -o 'replay matches.*' | sed 's/^/replay  /'
