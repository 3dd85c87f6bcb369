#!/bin/sh
# Regional syncers in a deployed run, on loopback: node a runs the shards and the services,
# b the learners of region eu, c those of region us with us's regional syncer, d eu's regional
# syncer alone. Node d is killed with SIGKILL mid-run: eu's learners go on with the shards
# directly (their progress keeps reaching the leader), d is started again, its regional syncer
# recovers every fragment from the shards and the learners come back to it; the run ends with
# its invariants (every learner at the shards' versions and values) and both regional syncers
# merged their learners' deltas. With `auto`, the same under adaptive inner steps: the regional
# syncers report their wide-area rounds to the fragment scheduler on node a (it logs each
# report at debug level), which tells them every change of H.
# usage: regional_cli.sh PATH/TO/diloco [auto]
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
mode=${2:-fixed}
period=""
leader_log=""
if [ "$mode" = auto ]; then
  period="period_steps: auto"
  leader_log="--log-level debug"
fi
work=$(mktemp -d)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -30; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
# Window 9, shared with clock_skew_cli.sh and adaptive_cli.sh: all hold ctest's `realtime` lock.
pick_ports 9 10
# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
openssl rand -hex 32 >"$work/secret"
cat >"$work/c.yaml" <<YAML
learners: 4
shards: 2
$period
token_budget: $((8000000 / (ts * ts)))
speed: {step_time_s: 0.004}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
regions:
  - {name: eu, syncer: true}
  - {name: us, syncer: true}
speeds:
  - {region: eu}
  - {region: eu}
  - {region: us}
  - {region: us}
nodes:
  - {name: a, host: 127.0.0.1, port: $base}
  - {name: b, host: 127.0.0.1, port: $((base + 2))}
  - {name: c, host: 127.0.0.1, port: $((base + 4))}
  - {name: d, host: 127.0.0.1, port: $((base + 6))}
placement:
  learners: [b, b, c, c]
  shards: [a, a]
  regionals: [d, c]
YAML
# shellcheck disable=SC2086
start_node "$work/a" "$work/c.yaml" a $leader_log --run-timeout $((180 * ts)) --run-dir "$work/run"
start_node "$work/b" "$work/c.yaml" b
start_node "$work/c" "$work/c.yaml" c
start_node "$work/d1" "$work/c.yaml" d
await "$work/a.txt" "nodes wired: starting"
progress0='"type":"progress","t":[0-9.e+-]*,"learner":0,'
await "$work/run/metrics.jsonl" "$progress0"
kill -9 "$(cat "$work/d1.pid")"
await "$work/b.txt" "node d went away"
await "$work/b.txt" "learner 0: its regional syncer is down; syncing with the shards"
# Learner 0 trains on with the shards: its progress keeps reaching the leader.
await_more "$work/run/metrics.jsonl" "$progress0" "$(grep -c "$progress0" "$work/run/metrics.jsonl")"
start_node "$work/d2" "$work/c.yaml" d
await "$work/d2.txt" "regional syncer 0: process [1-9][0-9]* recovered every fragment from the shards"
await "$work/b.txt" "learner 0: its regional syncer is back"
wait
for n in a b c d2; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "node $n exited $(cat "$work/$n.rc")"; done
grep -q "invariants held" "$work/a.txt" || fail "the run did not hold its invariants"
for r in 0 1; do
  line=$(grep "^regional syncer $r: " "$work/a.txt") || fail "no report of regional syncer $r"
  merges=$(echo "$line" | sed -n 's/.*, \([0-9]*\) merges of.*/\1/p')
  [ "${merges:-0}" -gt 0 ] || fail "regional syncer $r merged nothing: $line"
done
grep -q "^regional syncer 0: process [1-9]" "$work/a.txt" || fail "eu's regional syncer did not report its new process"
if [ "$mode" = auto ]; then
  for r in 0 1; do
    grep -q "fragment scheduler: regional syncer $r at change" "$work/a.txt" ||
      fail "regional syncer $r sent the scheduler no pace report"
  done
  ! grep -q "rejected pace report\|rejected join\|rejected a schedule" "$work"/*.txt ||
    fail "a pace report, join or schedule was rejected"
fi
echo "regional syncers deployed OK: $(grep '^regional syncer' "$work/a.txt" | tr '\n' ';')"
