#!/bin/sh
# The replay workflow through the command line: record a tape, replay it clean, find an
# injected nondeterminism, stop before an input and dump the state, export traces, refuse
# a damaged tape with its position.
# usage: replay_cli.sh PATH/TO/diloco
set -eu
diloco=$1
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
small="--budget 64000 --set model.hidden=32 --set model.embed_dim=8"
fail() { echo "FAILED: $*" >&2; exit 1; }

# shellcheck disable=SC2086
"$diloco" simulate $small --failures 1@60+30 --tape "$work/run.tape" >"$work/sim.txt" 2>&1
grep -q "tape written" "$work/sim.txt" || fail "simulate did not say it wrote the tape"
if "$diloco" simulate $small --tape "$work/run.tape" >/dev/null 2>&1; then
  fail "a second run wrote over the tape"
fi

"$diloco" replay "$work/run.tape" >"$work/clean.txt" 2>&1 || fail "clean replay failed: $(cat "$work/clean.txt")"
grep -q "replay matches the recording: 10 actors" "$work/clean.txt" || fail "clean replay output"

if "$diloco" replay "$work/run.tape" --set debug.nondeterministic_learner=3 \
  --set debug.nondeterministic_step=50 >"$work/bad.txt" 2>&1; then
  fail "replay with a nondeterministic learner succeeded"
fi
grep -q "DIVERGENCE in learner 3 (actor 3)" "$work/bad.txt" || fail "divergence not pinpointed: $(cat "$work/bad.txt")"
grep -q "vector clock recorded" "$work/bad.txt" || fail "no vector clock in the divergence report"

"$diloco" replay "$work/run.tape" --actor 3 --until 20 --state-out "$work/l3.state" >"$work/until.txt" 2>&1 \
  || fail "--until failed: $(cat "$work/until.txt")"
[ -s "$work/l3.state" ] || fail "no state file written"
grep -q "state of learner 3 before input 20" "$work/until.txt" || fail "--until output"

"$diloco" replay "$work/run.tape" --export-only --chrome-trace "$work/t.json" --shiviz "$work/t.log" >/dev/null
head -c 20 "$work/t.json" | grep -q '{"displayTimeUnit"' || fail "chrome trace header"
head -1 "$work/t.log" | grep -q '(?<event>' || fail "shiviz regex line"

head -c 5000 "$work/run.tape" >"$work/cut.tape"
if "$diloco" replay "$work/cut.tape" >"$work/cut.txt" 2>&1; then fail "a cut tape replayed"; fi
grep -q "chunk .* at byte .*truncated" "$work/cut.txt" || fail "cut tape error: $(cat "$work/cut.txt")"
echo "replay workflow OK"
