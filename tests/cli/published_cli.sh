#!/bin/sh
# The published cluster-file form and a command line that is right the first time:
# - examples/published_cluster.yaml converts (diloco config convert) to a file of our form that
#   loads, and `simulate --cluster` runs the published file as written with its four learners
#   in their regions; the write-ups' file as printed (learner_1 "the rest as learner_0", two
#   blocks for four learners) runs, saying on one line what was assumed;
# - every mistake of a file and of the flags is reported in one pass, each on its own line;
# - numbers as people type them (1e6, 1_000_000, 1.28M) are taken;
# - a baseline the configuration cannot run is refused before the main run starts;
# - --version, "did you mean" for flags and commands, no doubled prefixes or defaults.
# usage: published_cli.sh PATH/TO/diloco EXAMPLES_DIR
set -eu
diloco=$1
examples=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# --- the published file, converted and as written
"$diloco" config convert "$examples/published_cluster.yaml" --output "$work/ours.yaml" >/dev/null
# learner_1: 1920 of 2560 chips' tokens per step (batch 48 of 64), on chips twice as fast per
# chip as learner_0's (step time 1 against 2).
grep -q "region: us-east1, chips: 1920, batch: 48, slowdown: 1}" "$work/ours.yaml" &&
  grep -q "region: us-central1, chips: 2560, batch: 64, slowdown: 2}" "$work/ours.yaml" ||
  fail "convert: learners 0 and 1 not as expected: $(cat "$work/ours.yaml")"
grep -q 'name: asia-east1, latency_s: 0.025, bandwidth_gbps: 5' "$work/ours.yaml" ||
  fail "convert: no asia-east1 region at 25 ms one way and 5 Gbps"
grep -q 'model_params: 1.2e+10' "$work/ours.yaml" || fail "convert: model_size 12B not kept"
grep -q 'codec: topk' "$work/ours.yaml" && grep -q 'topk_fraction: 0.005' "$work/ours.yaml" ||
  fail "convert: compression_ratio 100 is not top-k of 0.5%"
"$diloco" simulate --cluster "$work/ours.yaml" --print-config >"$work/ours.printed"
"$diloco" simulate --cluster "$examples/published_cluster.yaml" --print-config >"$work/published.printed"
cmp -s "$work/ours.printed" "$work/published.printed" ||
  fail "the published file and its conversion give different configurations"
"$diloco" simulate --cluster "$examples/published_cluster.yaml" --budget 51_200 --log-level error \
  >"$work/run.txt" 2>&1 || fail "the published file does not run: $(tail -5 "$work/run.txt")"
rows=$(awk '/learners:$/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$work/run.txt")
[ "$rows" = 4 ] || fail "expected 4 learners in the learner table, got $rows: $(cat "$work/run.txt")"
grep -q "invariants held" "$work/run.txt" || fail "invariants: $(cat "$work/run.txt")"
# The write-ups' file as written (learner_1 "the rest as learner_0", two blocks for four
# learners) runs, with one line saying what was assumed.
"$diloco" simulate --cluster "$examples/published_cluster_as_written.yaml" --budget 51_200 \
  --log-level warn >"$work/written.txt" 2>&1 || fail "the file as written does not run: $(tail -5 "$work/written.txt")"
[ "$(grep -c 'assuming' "$work/written.txt")" = 1 ] || fail "not one line of assumptions: $(cat "$work/written.txt")"
grep -q "assuming learner_1's batch_size_per_chip, local_optimizer, local_lr, momentum_beta as learner_0's; learner_2 .. learner_3 repeat learner_0 .. learner_1 in order (total_learners 4, 2 learner_N blocks)" "$work/written.txt" ||
  fail "the assumptions: $(grep assuming "$work/written.txt")"
rows=$(awk '/learners:$/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$work/written.txt")
[ "$rows" = 4 ] || fail "as written: expected 4 learners, got $rows"
grep -q "invariants held" "$work/written.txt" || fail "as written: invariants"

# --- every error in one pass
set +e
"$diloco" simulate --cluster "$here/bad_configs/many_errors.yaml" --lerners 3 --set inner.beta1=2 \
  >/dev/null 2>"$work/err.txt"
rc=$?
set -e
[ $rc = 2 ] || fail "many errors: exit $rc"
for want in "unknown key 'quorum_size' (did you mean 'quorum'?)" \
  "unknown key 'inner_steps' (did you mean 'period_steps'?)" \
  "uplink: expected a map of uplink.* keys" "key 'learners' is set twice" \
  "inner.lr: expected a number, got 'fast'" "unknown option '--lerners' (did you mean '--learners'?)"; do
  grep -qF -- "$want" "$work/err.txt" || fail "many errors: '$want' missing from: $(cat "$work/err.txt")"
done
grep -q "diloco simulate: diloco simulate" "$work/err.txt" && fail "doubled prefix: $(cat "$work/err.txt")"
set +e
"$diloco" simulate --set inner.beta1=2 --set quorum=9 --set learners=2 --print-config \
  >/dev/null 2>"$work/err.txt"
set -e
lines=$(wc -l <"$work/err.txt")
[ "$lines" -ge 2 ] || fail "two validation errors, one line: $(cat "$work/err.txt")"

# --- numbers as typed
for b in 1e6 1_000_000 1M 1.28M; do
  "$diloco" simulate --budget $b --print-config | grep -q '^token_budget: ' || fail "--budget $b refused"
done
[ "$("$diloco" simulate --budget 1.28M --print-config | sed -n 's/^token_budget: \([0-9]*\).*/\1/p')" = 1280000 ] ||
  fail "--budget 1.28M is not 1280000"

# --- a baseline the configuration cannot run is refused before the main run
set +e
"$diloco" simulate --compare dp --set compute=cost --set duration_s=100 >"$work/out.txt" 2>"$work/err.txt"
rc=$?
set -e
[ $rc = 2 ] || fail "--compare dp with the cost model: exit $rc"
grep -q "compare dp: compute" "$work/err.txt" || fail "--compare dp: $(cat "$work/err.txt")"
grep -q "simulate decoupled" "$work/out.txt" "$work/err.txt" && fail "the main run started before the refusal"
# --- beside failures, data parallel (no elasticity) runs without them, and says so
"$diloco" simulate --budget 64000 --compare dp --failures 2@30+20 >"$work/dp.txt" 2>&1 ||
  fail "--compare dp with failures failed: $(tail -3 "$work/dp.txt")"
grep -q "compare dp: data parallel has no elasticity.*failure-free reference" "$work/dp.txt" ||
  fail "--compare dp beside failures does not say it runs without them"
grep -q "^dp " "$work/dp.txt" || fail "no dp row beside the failures"
# --- --system runs one baseline alone: the same run as its --compare row, to the trace
"$diloco" simulate --budget 64000 --learners 2 --compare vanilla >"$work/cmp.txt" 2>&1 ||
  fail "--compare vanilla failed: $(tail -3 "$work/cmp.txt")"
"$diloco" simulate --budget 64000 --learners 2 --system vanilla >"$work/sys.txt" 2>&1 ||
  fail "--system vanilla failed: $(tail -3 "$work/sys.txt")"
trace_of() { sed -n "s/^simulate $1 .*eval loss \([0-9.]*\), .*trace \([0-9a-f]*\)$/\1 \2/p" "$2"; }
[ -n "$(trace_of vanilla "$work/cmp.txt")" ] || fail "no vanilla progress line: $(cat "$work/cmp.txt")"
[ "$(trace_of vanilla "$work/sys.txt")" = "$(trace_of vanilla "$work/cmp.txt")" ] ||
  fail "--system vanilla differs from --compare vanilla: $(trace_of vanilla "$work/sys.txt")"
grep -q "simulate decoupled" "$work/sys.txt" && fail "--system vanilla also ran the cluster's own mode"
# ...and its tape records the run it made: replay matches it
"$diloco" simulate --budget 32000 --learners 2 --system vanilla --tape "$work/sys.tape" \
  --log-level error >/dev/null 2>&1 || fail "--system vanilla --tape failed"
"$diloco" replay "$work/sys.tape" 2>&1 | grep -q "replay matches the recording" ||
  fail "the tape of --system vanilla does not replay: $("$diloco" replay "$work/sys.tape" 2>&1 | tail -3)"
grep -q "^cluster: diloco, 2 learners, 1 syncer shard, 1 fragment " "$work/sys.txt" ||
  fail "--system vanilla does not describe the run it made: $(grep '^cluster' "$work/sys.txt")"
set +e
"$diloco" simulate --budget 64000 --system dp --failures 1@30+20 >"$work/out.txt" 2>"$work/err.txt"
rc=$?
set -e
[ $rc = 2 ] || fail "--system dp with failures: exit $rc"
grep -q -- "--system dp: .*failures" "$work/err.txt" || fail "--system dp with failures: $(cat "$work/err.txt")"

# --- goodput: one figure in the summary, summary.json and metrics.jsonl, within [0, 1]
"$diloco" simulate --mode diloco --set schedule_clock=local --fragments 1 --set shards=1 --overlap 0 \
  --quorum 4 --grace false --speeds 1,1,1,1.5 --budget 64000 --run-dir "$work/rd" \
  --log-level error >"$work/gp.txt" 2>&1 || fail "goodput run: $(tail -3 "$work/gp.txt")"
printed=$(sed -n 's/^diloco: goodput \([0-9.]*\)%.*/\1/p' "$work/gp.txt")
/usr/bin/python3 - "$work/rd" "$printed" <<'PY' || fail "goodput disagrees: $(cat "$work/gp.txt")"
import json, sys
rd, printed = sys.argv[1], float(sys.argv[2])
summary = json.load(open(rd + "/summary.json"))["systems"][0]["goodput"]
samples = [json.loads(l)["goodput"] for l in open(rd + "/metrics.jsonl") if '"sample"' in l]
assert all(0 <= g <= 1 for g in samples), max(samples)
assert samples[-1] == summary, (samples[-1], summary)
assert abs(100 * summary - printed) < 0.01, (summary, printed)
assert summary < 0.95, summary  # the three fast learners wait at every sync
evals = [json.loads(l) for l in open(rd + "/metrics.jsonl") if '"eval"' in l]
assert len(evals) >= 9, len(evals)  # about ten over the run by default
assert all(e["loss"] > 0 for e in evals) and evals[-1]["loss"] < evals[0]["loss"], evals
PY
grep -q "diloco eval at .* sim-s: loss " "$work/gp.txt" || fail "no evaluation lines: $(cat "$work/gp.txt")"

# --- version, suggestions, help
"$diloco" --version | grep -Eq '^diloco [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
set +e
"$diloco" simulat 2>"$work/err.txt"
set -e
grep -q "did you mean 'simulate'" "$work/err.txt" || fail "command suggestion: $(cat "$work/err.txt")"
"$diloco" node --help | grep -q -- '--compare' && fail "node --help lists --compare"
"$diloco" simulate --help | grep -q 'default.*(default' && fail "a doubled default in simulate --help"
echo "published form: converted and run with 4 learners; every error in one pass; numbers as typed; baselines refused first"
