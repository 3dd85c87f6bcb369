#!/bin/sh
# Islands on loopback: learners that are groups of processes, started with torchrun (gloo, CPU).
# Node a is `diloco node` (the leader and both syncer shards, no PyTorch).
#  1. Two islands of 2 ranks each (nodes b and c, each `torchrun --nproc_per_node 2 -m diloco
#     node ... --max_restarts 3`, the module wrapped in DistributedDataParallel). One rank of
#     island c is killed with SIGKILL mid-run: rank 0 of c finds its collective broken at once
#     and exits, torchrun starts the island again, and it rejoins from the global model. The
#     other island never stops; the run completes with its invariants held and an eval loss,
#     and its tapes replay to the same bits (each island's ranks computed one after another).
#  2. Islands of 1 and 2 ranks in one run (node b one process, node c two ranks started with
#     torchrun's environment by hand), with snapshots: each step of the 2-rank island counts
#     the tokens of both ranks, the merges weigh the islands by the tokens they trained, a
#     snapshot's learner state of the island holds its other rank's state.
# With a third argument `smaller`: part 1 only, island c started again as one process (a
# smaller world) after torchrun gave up on it; it rejoins, and the run replays (the island's
# first process computed as 2 ranks, the second as one).
# usage: python_island_cli.sh PATH/TO/diloco PATH/TO/python3 [smaller]
#        (PYTHONPATH: build/python, tests/python)
set -eu
ts=${DILOCO_TIME_SCALE:-1}
cxx=$1
py=$2
mode=${3:-}
restarts=3
[ "$mode" != smaller ] || restarts=0
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
# shellcheck source=tests/cli/island_lib.sh
. "$(dirname "$0")/island_lib.sh"
. "$(dirname "$0")/ports.sh"
pick_ports 7 12
learner=bad_learners:island
skip_without_torchrun

"$py" -m diloco export-model --learner $learner -o "$work/model.dlly" >"$work/export.txt" 2>&1 ||
  fail "export-model failed"

# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
diloco=$cxx

# island OUT NAME RDZV_PORT [flags]: a 2-rank island of node NAME under torchrun, in the
# background (torchrun's exit code to OUT.rc). Debian 12's torchrun (torch 1.13 on Python
# 3.11) fails on its default --redirects/--tee of 0: 2 (stderr) works everywhere. Up to 3
# restarts: with torch 2.13, a restarted island's rank 1 now and then fails to connect to the
# new rank 0's gloo (Connection refused) and torchrun has to start the island once more.
island() {
  out=$1 name=$2 port=$3
  shift 3
  ( if "$py" -m torch.distributed.run --nnodes 1 --nproc_per_node 2 --rdzv_backend c10d \
      --rdzv_endpoint 127.0.0.1:$port --max_restarts $restarts --redirects 2 --tee 2 \
      -m diloco node --cluster "$work/c.yaml" --name "$name" --learner $learner \
      --connect-timeout $((30 * ts)) --tape "$work/tapes" "$@" >"$out.txt" 2>&1; then echo 0; else echo $?; fi \
      >"$out.rc" ) &
}

# 1. Two islands of 2 ranks; one rank of island c killed and the island restarted.
loopback_cluster "$work/c.yaml" $base 500000 "{file: $work/model.dlly}"
# The islands import torch and meet under torchrun before they connect: on a busy machine that
# takes well over the default 20 s (a suite run beside two heavy jobs missed it once).
start_node "$work/a" "$work/c.yaml" a --run-timeout $((400 * ts)) --run-dir "$work/run" \
  --tape "$work/tapes" --connect-timeout $((120 * ts))
island "$work/b" b $((base + 8))
island "$work/c" c $((base + 9))
await "$work/a.txt" "nodes wired: starting" 120
await "$work/run/metrics.jsonl" '"type":"progress","t":[0-9.e+-]*,"learner":1,'
pid=$(sed -n 's/.*island rank 1 of 2: following rank 0 (pid \([0-9]*\)).*/\1/p' "$work/c.txt" | head -1)
[ -n "$pid" ] || fail "island c's rank 1 did not say its pid"
kill -9 "$pid"
await "$work/a.txt" "node c went away"
if [ "$mode" = smaller ]; then
  # torchrun ends the island (no restarts left); c comes back as one process.
  await "$work/c.rc" "[0-9]"
  ( if "$py" -m diloco node --cluster "$work/c.yaml" --name c --learner $learner \
      --tape "$work/tapes" >"$work/c1.txt" 2>&1; then echo 0; else echo $?; fi >"$work/c1.rc" ) &
  await "$work/c1.txt" "rejoined from the global model"
else
  # torchrun notices the dead rank at its next check (every 5 s in torch 1.13), restarts both.
  ts1=$ts ts=$((ts * 3))
  await "$work/c.txt" "rejoined from the global model"
  ts=$ts1
fi
wait
[ "$(cat "$work/a.rc")" = 0 ] || fail "the leader failed"
[ "$(cat "$work/b.rc")" = 0 ] || fail "island b failed"
if [ "$mode" = smaller ]; then
  [ "$(cat "$work/c1.rc")" = 0 ] || fail "c started again as one process failed"
  island_process=0
else
  [ "$(cat "$work/c.rc")" = 0 ] || fail "island c (restarted by torchrun) failed"
  island_process="[1-9]"
fi
grep -q "invariants held" "$work/a.txt" || fail "invariants"
grep -q "node c rejoined with process [1-9]" "$work/a.txt" || fail "no rejoin at the leader"
# Rank 0 of c found the broken collective itself (a closed connection, no timeout).
grep "island rank 0 of 2: .*failed (.*onnection.*the island lost a rank" "$work/c.txt" >/dev/null ||
  fail "rank 0 of island c did not report the lost rank"
if grep -q "island rank 1 of 2: .*failed" "$work/b.txt"; then fail "island b lost a rank"; fi
grep -q "island rank 1 of 2: rank 0 ended the island (exit 0)" "$work/b.txt" ||
  fail "island b's rank 1 did not end with its rank 0"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 0.5 && l < 5.5) }' || fail "eval loss '$loss' (ln 256 = 5.55)"
restarted=$(sed -n 's/^learner 1: process [1-9] (restarted), \([0-9.]*[kM]*\) tokens.*/\1/p' "$work/a.txt")
[ -n "$restarted" ] && [ "$restarted" != 0 ] || fail "the restarted island did no work"
# The recorded run replays, the killed island's first process and its restart included: an
# island's learner computes its 2 ranks' steps one after another, to the same bits.
"$py" -m diloco replay "$work/tapes" --learner $learner >"$work/replay.txt" 2>&1 ||
  fail "the deployed run with an island did not replay"
grep -q "learner 1 process $island_process ran as an island of 2 ranks (DDP): replay computes its ranks' steps one after another (the same bits)" \
  "$work/replay.txt" || fail "replay does not say it replays the island"
grep -q "replay matches the recording" "$work/replay.txt" || fail "replay: $(tail -3 "$work/replay.txt")"
sed -n 's/.*\(replay matches the recording.*\)/\1/p' "$work/replay.txt"
echo "1. two islands of 2 ranks, one killed and restarted${mode:+ ($mode)}: eval loss $loss, restarted island $restarted tokens"
if [ "$mode" = smaller ]; then
  echo "python island workflow (an island restarted smaller) OK"
  exit 0
fi

# 2. Islands of 1 and 2 ranks, with snapshots.
rm -rf "$work/run"
loopback_cluster "$work/c.yaml" $base 300000 "{file: $work/model.dlly}" \
  "snapshot: {dir: $work/snaps, every_s: 2}"
start_node "$work/a2" "$work/c.yaml" a --run-timeout $((300 * ts)) --run-dir "$work/run"
diloco="$py"
start_node_py() {
  out=$1 name=$2
  shift 2
  ( if "$@" "$py" -m diloco node --cluster "$work/c.yaml" --name "$name" --learner $learner \
      --connect-timeout $((30 * ts)) >"$out.txt" 2>&1; then echo 0; else echo $?; fi \
      >"$out.rc" ) &
}
start_node_py "$work/b2" b env
for r in 0 1; do
  start_node_py "$work/c2r$r" c env MASTER_ADDR=127.0.0.1 MASTER_PORT=$((base + 10)) RANK=$r \
    LOCAL_RANK=$r WORLD_SIZE=2
done
wait
for f in a2 b2 c2r0 c2r1; do [ "$(cat "$work/$f.rc")" = 0 ] || fail "$f failed"; done
grep -q "invariants held" "$work/a2.txt" || fail "invariants (1 and 2 ranks)"
grep -q "snapshot [0-9]* committed" "$work/a2.txt" || fail "no snapshot committed"
"$py" - "$work/run/metrics.jsonl" "$work/snaps" <<'PY' >"$work/weights.txt" 2>&1 || fail "token weights"
import json, sys
steps, tokens, merged, trained = {0: 0, 1: 0}, {0: 0, 1: 0}, {0: 0, 1: 0}, None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] == "progress":  # the steps and tokens since the learner's last report
        steps[e["learner"]] += e["steps"]
        tokens[e["learner"]] += e["tokens"]
    elif e["type"] == "merge":
        for c in e["contributors"]:
            merged[c["learner"]] += c["tokens"]
    elif e["type"] == "sample":  # each learner's tokens so far
        trained = {l["id"]: l["tokens"] for l in e["learners"]}
per_step = {l: tokens[l] / steps[l] for l in steps}
print(f"tokens per step: learner 0 (1 rank) {per_step[0]:g}, learner 1 (2 ranks) {per_step[1]:g}")
assert per_step[0] == 64 and per_step[1] == 128, per_step
worked = trained[1] / trained[0]
weighed = merged[1] / merged[0]
print(f"tokens trained, island of 2 / island of 1: {worked:.3f}; in the merges: {weighed:.3f}")
assert abs(weighed / worked - 1) < 0.15, (worked, weighed)
PY
cat "$work/weights.txt"
# The island's learner state in the last snapshot (the torch.save archive inside its actor's
# state): rank 0's optimizer and generator, and rank 1's generator; the 1-rank learner's has no
# island part.
last=$(ls -d "$work"/snaps/snapshot-* | tail -1)
"$py" - "$last" <<'PY' >"$work/snapstate.txt" 2>&1 || fail "the island's state in the snapshot"
import glob, io, sys
import torch
found = {}
for f in sorted(glob.glob(sys.argv[1] + "/actor-*.dlsa")):
    d = open(f, "rb").read()
    start, end = d.find(b"PK\x03\x04"), d.rfind(b"PK\x05\x06")
    if start < 0:
        continue
    state = torch.load(io.BytesIO(d[start:end + 22]))
    found[f] = state
islands = [s["island"] for s in found.values() if "island" in s]
print(f"{len(found)} PyTorch learner states, {len(islands)} of an island")
assert len(found) == 2 and len(islands) == 1, found.keys()
assert islands[0]["world"] == 2 and len(islands[0]["ranks"]) == 1, islands[0]
assert "rng" in islands[0]["ranks"][0], islands[0]["ranks"][0].keys()
PY
cat "$work/snapstate.txt"
echo "python island workflow OK"
