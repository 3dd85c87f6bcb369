#!/bin/sh
# What `diloco simulate` exits with: 0 for a run with a result; 3 for one without (its final
# model evaluates worse than the model it started from, or a learner diverged, unless
# --tolerate-divergence accepts that and the global model stayed finite), naming why.
# usage: exit_codes_cli.sh PATH/TO/diloco
set -eu
diloco=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tail -20 "$f"; done >&2; exit 1; }
small="--budget 64000 --log-level error"

# shellcheck disable=SC2086
"$diloco" simulate $small >"$work/ok.txt" 2>&1 || fail "a healthy run did not exit 0"

# Settings inside the configuration's limits that diverge: exit 3, saying so.
rc=0
# shellcheck disable=SC2086
"$diloco" simulate $small --set outer.lr=10 --set outer.momentum=0.99 --set inner.lr=1 \
  >"$work/diverged.txt" 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "a diverged run exited $rc, not 3"
grep -q "above the initial model's .*: the run diverged (a run without a result: exit 3)" \
  "$work/diverged.txt" || fail "the diverged run does not say why it exits 3"

# A learner whose numerics go NaN: exit 3; tolerated, the others' model is the result.
rc=0
# shellcheck disable=SC2086
"$diloco" simulate $small --set debug.nonfinite_learner=1 --set debug.nonfinite_step=30 \
  >"$work/nan.txt" 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "a run with a diverged learner exited $rc, not 3"
grep -q "learner 1 diverged at step" "$work/nan.txt" || fail "the diverged learner is not named"
# shellcheck disable=SC2086
"$diloco" simulate $small --set debug.nonfinite_learner=1 --set debug.nonfinite_step=30 \
  --tolerate-divergence >"$work/tolerated.txt" 2>&1 || fail "a tolerated divergence did not exit 0"
# With --log-format json every line on stderr is one JSON object, the reason among them.
rc=0
# shellcheck disable=SC2086
"$diloco" simulate $small --log-format json --set outer.lr=10 --set outer.momentum=0.99 \
  --set inner.lr=1 2>"$work/json.err" >/dev/null || rc=$?
[ "$rc" = 3 ] || fail "the diverged run with JSON logs exited $rc, not 3"
python3 - "$work/json.err" <<'PY' || fail "stderr is not JSON lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines and all(set(l) >= {"time", "level", "msg"} for l in lines), lines[:3]
assert any(l["level"] == "error" and "the run diverged" in l["msg"] for l in lines), lines[-3:]
assert all(len(l.get("run", "")) == 16 for l in lines), lines[:3]  # the run's identity
PY
rc=0
"$diloco" simulate --log-format xml >/dev/null 2>"$work/bad.err" || rc=$?
[ "$rc" = 2 ] && grep -q "log-format: 'xml' is not text or json" "$work/bad.err" ||
  fail "a bad --log-format is not refused by name (exit $rc)"
echo "exit codes OK"
