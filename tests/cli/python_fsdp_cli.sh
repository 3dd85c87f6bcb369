#!/bin/sh
# FSDP inside an island, on loopback: node b is an island of 2 ranks whose module is sharded with
# fully_shard (each rank holds its rows of every parameter, gloo on CPU), under one torchrun
# agent, or with a third argument `hosts` as on two hosts (two agents of one rank each, meeting
# at a c10d rendezvous; slower to come back, so outside the default run), or `static` the same
# with torchrun's static rendezvous (agent 0 holding rank 0); node c
# is an island of 2 ranks with the same model in DistributedDataParallel; node a is the leader
# with both syncer shards. One rank of island b is killed with SIGKILL mid-run: torchrun starts
# the island again and it rejoins from the global model (the global values written into each
# rank's rows). The run completes with its invariants held; the sharded island trains as well
# as the DDP one beside it (their last training losses); a snapshot's learner state of the
# sharded island holds the optimizer state whole (gathered from the shards, keyed by parameter
# name), with its other rank's generator.
# usage: python_fsdp_cli.sh PATH/TO/diloco PATH/TO/python3 [hosts|static]
#        (PYTHONPATH: the package, tests/python)
# Exit 77 (skipped) where the PyTorch has no fully_shard (torch before 2.4) or its torchrun
# cannot run.
set -eu
ts=${DILOCO_TIME_SCALE:-1}
cxx=$1
py=$2
mode=${3:-}
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
# shellcheck source=tests/cli/island_lib.sh
. "$(dirname "$0")/island_lib.sh"
. "$(dirname "$0")/ports.sh"
pick_ports 7 12
learner=bad_learners:island_fsdp
"$py" -c "from torch.distributed.fsdp import fully_shard; import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null || {
  echo "SKIPPED: this PyTorch has no fully_shard (FSDP2, torch 2.4 and later) with gloo"; exit 77; }
skip_without_torchrun

"$py" -m diloco export-model --learner $learner -o "$work/model.dlly" >"$work/export.txt" 2>&1 ||
  fail "export-model failed"

# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
diloco=$cxx
# Progress every 2 steps: on a busy machine an island's collectives make its steps slow, and
# the kill waits for the sharded island's first report. The budget leaves island b time to
# come back while island c alone trains: up to 30k tokens a second on an idle machine (300k
# was seen spent in 10 s, before b was back); with `hosts` more: its two agents meet again and
# may restart it twice (an agent restarts its rank at the other's new round). Stopping island c
# instead (SIGSTOP) is no cure: the test's processes form an orphaned process group, and when
# b's killed rank exits with c stopped, the kernel sends the whole group SIGHUP (torchrun ends).
budget=600000
[ "$mode" != hosts ] && [ "$mode" != static ] || budget=900000
loopback_cluster "$work/c.yaml" $base $budget "{file: $work/model.dlly}" \
  "snapshot: {dir: $work/snaps, every_s: 2}
progress_every_steps: 2"
start_node "$work/a" "$work/c.yaml" a --run-timeout $((400 * ts)) --run-dir "$work/run" \
  --connect-timeout $((120 * ts))
# island OUT NAME RDZV_PORT LEARNER NNODES NPROC [NODE_RANK]: torchrun's agent of node NAME's
# island (NNODES agents of NPROC ranks each meet at the rendezvous: c10d's, or with NODE_RANK
# the static one, agent NODE_RANK's ranks coming after those of the agents before it).
island() {
  rdzv="--rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$3"
  [ -z "${7:-}" ] || rdzv="--rdzv_backend static --master_addr 127.0.0.1 --master_port $3 --node_rank $7"
  # shellcheck disable=SC2086
  ( if "$py" -m torch.distributed.run --nnodes "$5" --nproc_per_node "$6" $rdzv \
      --max_restarts 3 --redirects 2 --tee 2 \
      -m diloco node --cluster "$work/c.yaml" --name "$2" --learner "$4" \
      --connect-timeout $((120 * ts)) >"$1.txt" 2>&1; then echo 0; else echo $?; fi \
      >"$1.rc" ) &
}
# With `hosts`, the sharded island as two hosts would start it: two agents of one rank each
# (which one gets rank 0 is the rendezvous's choice: their files are read together below).
if [ "$mode" = hosts ]; then
  agents="b0 b1"
  island "$work/b0" b $((base + 8)) $learner 2 1
  island "$work/b1" b $((base + 8)) $learner 2 1
elif [ "$mode" = static ]; then
  agents="b0 b1"
  island "$work/b0" b $((base + 8)) $learner 2 1 0
  island "$work/b1" b $((base + 8)) $learner 2 1 1
else
  agents=b0
  island "$work/b0" b $((base + 8)) $learner 1 2
fi
island "$work/c" c $((base + 9)) bad_learners:island 1 2
await "$work/a.txt" "nodes wired: starting" 120
bcat() { cat "$work/b0.txt" "$work/b1.txt" 2>/dev/null; }
until bcat | grep -q "parameters are sharded over the island's 2 ranks"; do
  [ -s "$work/b0.rc" ] && fail "island b ended before it trained"
  sleep 0.2
done
# The island trained and a snapshot holds its state: then one of its ranks dies.
await "$work/run/metrics.jsonl" '"type":"progress","t":[0-9.e+-]*,"learner":0,' 300
await "$work/a.txt" "snapshot [0-9]* committed" 300
# Its newest process (under load the island may have restarted before: an older pid is gone).
pid=$(bcat | sed -n 's/.*island rank 1 of 2: following rank 0 (pid \([0-9]*\)).*/\1/p' | tail -1)
[ -n "$pid" ] || fail "island b's rank 1 did not say its pid"
kill -9 "$pid" || fail "island b's rank 1 (pid $pid, its newest) was not running"
await "$work/a.txt" "node b went away"
ts1=$ts ts=$((ts * 3))
i=0
until bcat | grep -q "rejoined from the global model"; do
  i=$((i + 1))
  [ $i -le $((600 * ts)) ] || fail "island b did not rejoin within $((60 * ts)) s"
  sleep 0.1
done
ts=$ts1
wait
for n in a $agents c; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "$n exited $(cat "$work/$n.rc")"; done
grep -q "invariants held" "$work/a.txt" || fail "invariants"
# Rank 0 finds the broken collective, or torchrun, seeing rank 1 gone, stops it first.
grep -q "island rank 0 of 2: .*failed (.*the island lost a rank\|failed (exitcode: -9) local_rank: [01]" \
  $(for n in $agents; do echo "$work/$n.txt"; done) ||
  fail "neither rank 0 of island b nor torchrun reported the lost rank"
bcat | grep -q "parameters sharded (fully_shard): [1-9][0-9]* gathers to rank 0" ||
  fail "the island's summary counts no gathers of its shards"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 0.5 && l < 5.0) }' || fail "eval loss '$loss' (ln 256 = 5.55)"
# The sharded island trains as the DDP island does: its last training losses (the mean of its
# last three reports) within 0.3 of the other's. Rows written to the wrong rank or place would
# leave it far behind after a merge.
"$py" - "$work/run/metrics.jsonl" <<'PY' >"$work/losses.txt" 2>&1 || fail "training losses: $(cat "$work/losses.txt")"
import json, sys
loss = {0: [], 1: []}
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] == "progress" and e.get("loss") is not None:
        loss[e["learner"]].append(e["loss"])
last = {l: sum(v[-3:]) / len(v[-3:]) for l, v in loss.items()}
print(f"last training loss: island (sharded) {last[0]:.3f}, island (DDP) {last[1]:.3f}")
assert abs(last[0] - last[1]) < 0.3, last
PY
cat "$work/losses.txt"
# The island's learner state in the last snapshot: the optimizer state whole (each moment the
# shape of its parameter, keyed by name), saved as sharded, with rank 1's generator.
last=$(ls -d "$work"/snaps/snapshot-* | tail -1)
"$py" - "$last" <<'PY' >"$work/snapstate.txt" 2>&1 || fail "the island's state in the snapshot: $(cat "$work/snapstate.txt")"
import glob, io, sys
import torch
states = []
for f in sorted(glob.glob(sys.argv[1] + "/actor-*.dlsa")):
    d = open(f, "rb").read()
    start, end = d.find(b"PK\x03\x04"), d.rfind(b"PK\x05\x06")
    if start >= 0:
        states.append(torch.load(io.BytesIO(d[start:end + 22]), weights_only=True))
sharded = [s for s in states if s.get("sharded")]
assert len(states) == 2 and len(sharded) == 1, [sorted(s) for s in states]
s = sharded[0]
assert s.get("sharded") is True, sorted(s)
shapes = {name: tuple(v["exp_avg"].shape) for name, v in s["optimizer"]["state"].items()}
print("sharded island's optimizer state, whole:", shapes)
assert shapes == {"embed.weight": (256, 8), "out.weight": (256, 64), "out.bias": (256,)}, shapes
assert s["island"]["world"] == 2 and "rng" in s["island"]["ranks"][0]
PY
cat "$work/snapstate.txt"
echo "python fsdp island${mode:+ ($mode)} OK (eval loss $loss)"
