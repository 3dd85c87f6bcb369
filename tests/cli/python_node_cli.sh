#!/bin/sh
# A deployed run on loopback whose learners are PyTorch: node a is `diloco node` (the leader and
# both syncer shards, no PyTorch: it takes the layout and the initial model from the cluster
# file's model.file, written by `python3 -m diloco export-model`), nodes b and c are
# `python3 -m diloco node --learner ...`. Node c is killed with SIGKILL mid-run and started
# again: the other learner never stops, the restarted process rejoins from the shards' global
# model, and the run completes with its invariants held; a learner node evaluates the final
# global model for the leader. Every node records a tape: the run replays, PyTorch learners and
# the restarted process included, with `python3 -m diloco replay DIR --learner ...`.
# usage: python_node_cli.sh PATH/TO/diloco PATH/TO/python3   (PYTHONPATH: build/python, tests/python)
set -eu
ts=${DILOCO_TIME_SCALE:-1}
cxx=$1
py=$2
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -30; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 6 30
learner=bad_learners:good

# The Python learner nodes, through node_lib's start_node (which runs "$diloco" node ...).
printf '#!/bin/sh\nexec "%s" -m diloco "$@" --learner %s\n' "$py" "$learner" >"$work/pynode"
chmod +x "$work/pynode"

"$py" -m diloco export-model --learner $learner -o "$work/model.dlly" >"$work/export.txt" 2>&1 ||
  fail "export-model failed"
grep -q "18688 parameters in 3 tensors" "$work/export.txt" || fail "export-model: $(cat "$work/export.txt")"

# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
loopback_cluster "$work/c.yaml" $base 1500000 "{file: $work/model.dlly}"
# A node that hosts a learner cannot run the file's model without the learner: refused by name.
diloco=$cxx
if "$cxx" node --cluster "$work/c.yaml" --name b >"$work/refused.txt" 2>&1; then
  fail "diloco node hosting a PyTorch learner started"
fi
grep -q "hosts learner 0.*python3 -m diloco" "$work/refused.txt" || fail "the refusal does not say why"

diloco=$cxx start_node "$work/a" "$work/c.yaml" a --run-timeout $((300 * ts)) --run-dir "$work/run" \
  --tape "$work/tapes" --save-model "$work/final.safetensors"
diloco=$work/pynode
start_node "$work/b" "$work/c.yaml" b --tape "$work/tapes"
start_node "$work/c1" "$work/c.yaml" c --tape "$work/tapes"
await "$work/a.txt" "nodes wired: starting"
await "$work/run/metrics.jsonl" '"type":"progress","t":[0-9.e+-]*,"learner":1,'
kill -9 "$(cat "$work/c1.pid")"
await "$work/a.txt" "node c went away"
start_node "$work/c2" "$work/c.yaml" c --tape "$work/tapes"
await "$work/c2.txt" "rejoined from the global model"
wait
[ "$(cat "$work/a.rc")" = 0 ] || fail "the leader failed"
[ "$(cat "$work/b.rc")" = 0 ] || fail "node b (the other PyTorch learner) failed"
[ "$(cat "$work/c2.rc")" = 0 ] || fail "the restarted node c failed"
grep -q "invariants held" "$work/a.txt" || fail "invariants"
grep -q "node c rejoined with process 1" "$work/a.txt" || fail "no rejoin at the leader"
grep -q "learner: $learner" "$work/c2.txt" || fail "node c does not say which learner it runs"
grep -q "the final model evaluated by learner" "$work/a.txt" || fail "no learner evaluated the final model"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 0.5 && l < 5.5) }' || fail "eval loss '$loss' (ln 256 = 5.55)"
# The leader knows the layout, not the module, and does not call the data's entropy its floor.
if grep -q "entropy rate" "$work/a.txt"; then fail "the leader claims an entropy floor for a PyTorch model"; fi
# The trained model comes back: the leader saved it; loaded into the learner's own module
# (shaped like it), it is the global model the run evaluated.
grep -q "final model saved to $work/final.safetensors (safetensors)" "$work/a.txt" ||
  fail "the leader did not save the final model"
"$py" - "$work/final.safetensors" "$loss" "$work/c.yaml" <<'PY' >"$work/load.txt" 2>&1 || fail "the saved model does not load and evaluate"
import sys
import torch
import torch.nn.functional as F
import diloco
import bad_learners
path, loss, cluster = sys.argv[1], float(sys.argv[2]), sys.argv[3]
data = diloco.open_data(cluster, index=0)
model = bad_learners.Tiny(context=data.context)
model.load_state_dict(diloco.load_model(path, like=model))
with torch.no_grad():
    total = sum(float(F.cross_entropy(model(x), y)) * len(y) for x, y in data.eval_batches(256))
got = total / sum(len(y) for _, y in data.eval_batches(256))
print(f"saved model: eval loss {got:.4f}, the run's {loss:.4f}")
assert abs(got - loss) < 1e-3, (got, loss)
PY
tokens=$(sed -n 's/^learner 1: process 1 (restarted), \([0-9.]*\)\([kM]*\) tokens.*/\1\2/p' "$work/a.txt")
[ -n "$tokens" ] && [ "$tokens" != 0 ] || fail "the restarted learner did no work"
"$py" -m diloco replay "$work/tapes" --learner $learner >"$work/replay.txt" 2>&1 ||
  { cat "$work/replay.txt" >&2; fail "the deployed PyTorch run did not replay"; }
grep -q "node c process 1: .*c.1.tape" "$work/replay.txt" || fail "the restarted process's tape not replayed"
grep -q "replay matches the recording: 8 actors" "$work/replay.txt" ||
  fail "deployed PyTorch replay: $(tail -3 "$work/replay.txt")"
echo "python node workflow OK (restarted learner: $tokens tokens; $(sed -n 's/.*replay matches the recording: //p' "$work/replay.txt"))"
