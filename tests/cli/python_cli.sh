#!/bin/sh
# The command line with a PyTorch learner (`python3 -m diloco ... --learner MODULE:FUNCTION`):
# a run stopped after a snapshot and resumed ends bit-identical to the run never stopped, with
# failures, whatever the threads that compute the twin's steps ahead (2 for the run never stopped
# and the one that takes the snapshots, 1 for the resumed one); a recorded run replays with the learner, and without it the replay names the first
# divergence; a bad --learner is refused by name.
# usage: python_cli.sh PATH/TO/python3   (PYTHONPATH holds build/python and tests/python)
set -eu
py=$1
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tail -20 "$f"; done >&2; exit 1; }
trace_of() { sed -n 's/.*trace \([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -1; }
run="--budget 64000 --set model.hidden=32 --set model.embed_dim=8 --failures 2@40+20 --learner mlp_twin:make_learner"

# shellcheck disable=SC2086
"$py" -m diloco simulate $run --threads 2 >"$work/full.txt" 2>&1 || fail "the uninterrupted run failed"
full=$(trace_of "$work/full.txt")
[ -n "$full" ] || fail "no trace hash in the uninterrupted run's output"
grep -q "learner: mlp_twin:make_learner" "$work/full.txt" || fail "the run does not say which learner it trains"

# shellcheck disable=SC2086
"$py" -m diloco simulate $run --threads 2 --snapshot-dir "$work/snaps" --snapshot-every 20 \
  --stop-after-snapshot 3 >"$work/stopped.txt" 2>&1 || fail "the stopped run failed"
grep -q "stopped after snapshot 3" "$work/stopped.txt" || fail "the run did not stop after snapshot 3"
"$py" -m diloco inspect "$work/snaps" --learner mlp_twin:make_learner >"$work/list.txt" ||
  fail "inspect of the snapshots failed"
grep -q "3 usable" "$work/list.txt" || fail "inspect does not list 3 usable snapshots"
# Without --learner, inspect checks the files and every other actor, and says the PyTorch
# learners' states were not checked (it once called every such snapshot BAD).
"$py" -m diloco inspect "$work/snaps" >"$work/list-bare.txt" 2>&1 ||
  fail "inspect of a PyTorch run's snapshots without --learner failed"
grep -q "3 usable" "$work/list-bare.txt" || fail "inspect without --learner does not list 3 usable"
grep -q "PyTorch learners unchecked" "$work/list-bare.txt" ||
  fail "inspect without --learner does not say what it left unchecked"
"$py" -m diloco simulate --resume "$work/snaps" --threads 1 --learner mlp_twin:make_learner \
  >"$work/resumed.txt" 2>&1 || fail "the resumed run failed"
[ "$(trace_of "$work/resumed.txt")" = "$full" ] ||
  fail "resumed trace $(trace_of "$work/resumed.txt") != $full"

# shellcheck disable=SC2086
"$py" -m diloco simulate $run --tape "$work/run.tape" >"$work/taped.txt" 2>&1 || fail "the taped run failed"
"$py" -m diloco replay "$work/run.tape" --learner mlp_twin:make_learner >"$work/replay.txt" 2>&1 ||
  fail "the replay with the learner failed"
grep -q "replay matches the recording" "$work/replay.txt" || fail "the replay with the learner diverged"
if "$py" -m diloco replay "$work/run.tape" >"$work/mismatch.txt" 2>&1; then
  fail "a replay with the built-in MLP in place of the recorded learner matched"
fi
grep -q "DIVERGENCE in learner" "$work/mismatch.txt" || fail "the mismatched replay does not name the divergence"
grep -q "recorded with mlp_twin:make_learner as the learner; this replay runs the built-in MLP" \
  "$work/mismatch.txt" || fail "the mismatched replay does not say which learner the tape needs"

# Periodic evaluations of the global model with PyTorch learners drawing random numbers: the
# same run with 1 and 2 threads (an evaluation beside a learner's step would swap torch's
# generator under it).
for t in 1 2; do
  "$py" -m diloco simulate --budget 32000 --set model.hidden=32 --set model.embed_dim=8 \
    --eval-every 4 --threads $t --learner mlp_twin:make_dropout_learner >"$work/dropout-$t.txt" 2>&1 ||
    fail "the run with dropout on $t thread(s) failed"
done
[ "$(grep -c 'eval at' "$work/dropout-2.txt")" -ge 10 ] || fail "the dropout run evaluated fewer than 10 times"
[ -n "$(trace_of "$work/dropout-1.txt")" ] &&
  [ "$(trace_of "$work/dropout-1.txt")" = "$(trace_of "$work/dropout-2.txt")" ] ||
  fail "dropout run: trace $(trace_of "$work/dropout-1.txt") on 1 thread, $(trace_of "$work/dropout-2.txt") on 2"
[ "$(grep 'eval at' "$work/dropout-1.txt")" = "$(grep 'eval at' "$work/dropout-2.txt")" ] ||
  fail "dropout run: other evaluations on 2 threads than on 1"

# A learner whose state cannot be saved from the third snapshot on: those are not written, the
# two before stay usable (pruning does not delete them for unusable ones), the run goes on.
"$py" -m diloco simulate --budget 64000 --learner bad_learners:unsaveable_later \
  --snapshot-dir "$work/partial" --snapshot-every 20 >"$work/partial.txt" 2>&1 ||
  fail "the run with an unsaveable learner failed"
grep -q "snapshot 3 not written: actor 1's state could not be saved" "$work/partial.txt" ||
  fail "snapshot 3 was not refused by name"
grep -q "OSError: iterator state is on a closed file" "$work/partial.txt" ||
  fail "the learner's error is not shown"
"$py" -m diloco inspect "$work/partial" --learner bad_learners:unsaveable_later \
  >"$work/partial-list.txt" 2>&1 || fail "inspect of the kept snapshots failed"
grep -q "2 usable" "$work/partial-list.txt" || fail "the two good snapshots were not kept"

# docs/python.md's example: failures, and both baselines beside them (data parallel, which
# has no elasticity, as the failure-free reference); the final model saved for the module.
"$py" -m diloco simulate --learner mlp_twin:make_learner --budget 32000 --set model.hidden=32 \
  --set model.embed_dim=8 --failures 2@30+10 --compare dp,diloco --save-model "$work/m.dlmd" \
  >"$work/docs.txt" 2>&1 || fail "the docs' example with --compare dp,diloco and failures failed"
grep -q "failure-free reference" "$work/docs.txt" || fail "dp beside failures is not explained"
grep -q "final model saved to $work/m.dlmd (safetensors)" "$work/docs.txt" ||
  fail "a PyTorch run's model was not saved"

if "$py" -m diloco simulate --learner mlp_twin:nowhere >"$work/bad.txt" 2>&1; then
  fail "a --learner naming nothing was accepted"
fi
grep -q "mlp_twin has no nowhere" "$work/bad.txt" || fail "the refusal does not name the function"
# A step that never returns: the step timeout ends the process with exit 3, naming the learner
# (it waited for ever, without a word, before). 5 s is far beyond a step of this model.
rc=0
"$py" -m diloco simulate --budget 64000 --set model.hidden=32 --set model.embed_dim=8 \
  --learner bad_learners:step_hangs --set step_timeout_s=5 >"$work/hang.txt" 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "a run whose step hangs exited $rc, not 3"
grep -q "learner 1: its step has not returned after 5 s (step_timeout_s)" "$work/hang.txt" ||
  fail "the hung step is not named"

echo "python cli workflow OK (trace $full)"
