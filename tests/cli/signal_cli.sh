#!/bin/sh
# SIGTERM to a running deployed run, as a service manager or a scheduler sends it. The whole
# job stopped at once: the leader takes a final snapshot (the other nodes' actors take part),
# stops the run as its deadline would and reports it (exit 143, a complete summary that
# `diloco report` renders); the other nodes end with the run (exit 0). /readyz says 200 and
# /healthz ok while it runs.
# The final snapshot resumes, and there a learner node stopped alone leaves (exit 143, saying
# so) while the run goes on and completes without it. A node signalled while it waits for the
# others stops at once (exit 143).
# usage: signal_cli.sh PATH/TO/diloco
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -30; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 4 30
# Long enough that the signals come mid-run on a fast machine (about 25 s here).
budget=$((20000000 / (ts * ts)))
# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
# Periodic snapshots far apart: the one the leader takes on the signal is the only one.
loopback_cluster "$work/c.yaml" $base $budget "{hidden: 32, embed_dim: 8}" \
  "snapshot: {dir: $work/snaps, every_s: 100000}"
node() { n=$1 o=$2; shift 2; start_node "$o" "$work/c.yaml" "$n" "$@"; }
mport=$((base + 6))
# GET URL -> "CODE BODY" (python3: no curl on a minimal Debian).
http_get() {
  python3 -c '
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print(r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
except OSError:
    print(0)' "$1"
}

# Before the run starts, a signal ends the wait for the other nodes at once.
node a "$work/a0"
await "$work/a0.txt" "listening on port"
kill -TERM "$(cat "$work/a0.pid")"
wait
[ "$(cat "$work/a0.rc")" = 143 ] || fail "a node waiting for the others exited $(cat "$work/a0.rc") on SIGTERM, not 143"
grep -q "stopped by SIGTERM before the run started" "$work/a0.txt" || fail "the waiting node did not say why it stopped"

node a "$work/a1" --run-timeout $((120 * ts)) --run-dir "$work/run1" --metrics-port $mport
node b "$work/b1"
node c "$work/c1"
await "$work/a1.txt" "all 3 nodes wired"
# /healthz and /readyz while it runs.
i=0
until [ "$(http_get "http://127.0.0.1:$mport/readyz")" = "200 ready" ]; do
  i=$((i + 1)); [ $i -le $((200 * ts)) ] || fail "/readyz did not answer 200 while the run ran"; sleep 0.1
done
[ "$(http_get "http://127.0.0.1:$mport/healthz")" = "200 ok" ] || fail "/healthz did not answer ok"
# (the readiness above: the run has started)

# The whole job stopped at once.
kill -TERM "$(cat "$work/a1.pid")" "$(cat "$work/b1.pid")" "$(cat "$work/c1.pid")"
wait
[ "$(cat "$work/a1.rc")" = 143 ] || fail "the leader exited $(cat "$work/a1.rc") on SIGTERM, not 143"
for n in b1 c1; do
  [ "$(cat "$work/$n.rc")" = 0 ] || fail "node $n exited $(cat "$work/$n.rc"), not 0, when the leader stopped the run"
  grep -q "the leader ended the run" "$work/$n.txt" || fail "node $n left before the leader ended the run"
done
grep -q "SIGTERM: taking a final snapshot, then stopping the run" "$work/a1.txt" ||
  fail "the leader did not say it stops"
snap=$(sed -n 's/^node a: snapshot \([0-9]*\) committed.*/\1/p' "$work/a1.txt" | tail -1)
[ -n "$snap" ] || fail "no snapshot committed after the signal"
grep -q "stopped by SIGTERM before the budget was spent, final snapshot $snap (continue with --resume $work/snaps)" "$work/a1.txt" ||
  fail "the leader did not report the stop with its snapshot"
grep -q "^eval loss" "$work/a1.txt" || fail "no result from the stopped run"
grep -q "invariants held" "$work/a1.txt" || fail "stopped run: invariants"
grep -q '"stopped_by": "SIGTERM"' "$work/run1/summary.json" || fail "summary.json does not say the run was stopped"
# Every line of metrics.jsonl is whole JSON: the report reads it.
"$diloco" report "$work/run1" >"$work/report.txt" 2>&1 || fail "diloco report refused the stopped run"
grep -q "report written: $work/run1/report.html" "$work/report.txt" || fail "no report"

# The final snapshot resumes; node b, stopped alone, leaves and the run completes without it.
# A longer --peer-timeout than the default 5 s: this part is about a lone stop, not about
# detecting a frozen node, and in a fresh Debian 12 image with the whole suite beside it node c
# once missed the leader's heartbeat answers for 5 s and left (the run then timed out).
node a "$work/a2" --run-timeout $((120 * ts)) --resume "$work/snaps" --peer-timeout $((20 * ts))
node b "$work/b2" --stop-timeout 2 --peer-timeout $((20 * ts))
node c "$work/c2" --peer-timeout $((20 * ts))
await "$work/a2.txt" "all 3 nodes wired"
kill -TERM "$(cat "$work/b2.pid")"
wait
[ "$(cat "$work/b2.rc")" = 143 ] || fail "node b exited $(cat "$work/b2.rc") on SIGTERM, not 143"
grep -q "left the run on SIGTERM" "$work/b2.txt" || fail "node b did not say it left on SIGTERM"
grep -q "node b: stopped by SIGTERM (the run goes on without it)" "$work/b2.txt" ||
  fail "node b did not report its stop"
for n in a2 c2; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "resumed: node $n exited $(cat "$work/$n.rc")"; done
grep -q "resuming from $work/snaps/snapshot-0*$snap " "$work/a2.txt" || fail "resumed from another snapshot than $snap"
grep -q "invariants held" "$work/a2.txt" || fail "resumed: invariants"
echo "signal workflow OK (the job stopped with snapshot $snap, report rendered, resumed; node b left alone on SIGTERM)"
