#!/bin/sh
# Processes of a deployed run killed with SIGKILL mid-run and started again, on loopback:
#  1. a learner's node: the other learner never stops, the restarted process rejoins from the
#     shards' global model and the run completes;
#  2. a syncer shard's node (over mutual TLS, payloads on the bulk channel, snapshots every
#     second): the learners go on with the other shard, the restarted process starts from its
#     part of the newest snapshot of this execution (not one an earlier execution of the same
#     file left in snapshot.dir) and takes the learners' newer copies, the learners send to it
#     again, and the version accounting holds (no learner had seen a version newer than the one
#     the shard recovered at; every learner ends at the shards' versions and values; every
#     delta the new process received is accounted for);
#  3. two nodes at once (a learner's, and a learner's and a shard's), started again together:
#     both learners rejoin and the run completes;
#  4. a shard's node killed and started again only after the learners stopped: their final
#     deltas for its fragments went nowhere, and they send them to its new process, which
#     flushes, so the run ends (it waited for the run timeout before).
# usage: restart_cli.sh PATH/TO/diloco PATH/TO/make-certs.sh
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
make_certs=$2
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -40; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 2 40

# The budget shrinks with the square of the time scale: a sanitizer build (scale 4) trains about
# 50x slower, and the run must end within its timeout (the kill and restart come early in it).
cluster() {  # cluster FILE PORT LEARNER_NODES SHARD_NODES NODES [extra yaml]
  {
    cat <<YAML
learners: 2
shards: 2
token_budget: $((9000000 / (ts * ts)))
speed: {step_time_s: 0.004}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
nodes:
YAML
    port=$2
    for n in $5; do
      echo "  - {name: $n, host: 127.0.0.1, port: $port}"
      port=$((port + 2))
    done
    cat <<YAML
placement:
  learners: [$3]
  shards: [$4]
${6:-}
YAML
  } >"$1"
}

# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
node() { f=$1 n=$2 o=$3; shift 3; start_node "$o" "$f" "$n" "$@"; }  # node FILE NAME OUT [flags]

# 1. A learner's node is killed and restarted.
cluster "$work/l.yaml" $base "b, c" "a, a" "a b c"
node "$work/l.yaml" a "$work/l.a" --run-timeout $((120 * ts)) --run-dir "$work/l.run"
node "$work/l.yaml" b "$work/l.b"
node "$work/l.yaml" c "$work/l.c1"
await "$work/l.a.txt" "nodes wired: starting"
# learner 1 (on node c) is computing: the leader's metrics have its progress
await "$work/l.run/metrics.jsonl" '"type":"progress","t":[0-9.e+-]*,"learner":1,'
now() { date +%s.%N; }
progress0='"type":"progress","t":[0-9.e+-]*,"learner":0,'
t_kill=$(now)
kill -9 "$(cat "$work/l.c1.pid")"
await "$work/l.a.txt" "node c went away"
t_noticed=$(now)
await "$work/l.b.txt" "node c went away"
# learner 0 goes on training while c is away: its progress reaches the leader's metrics
await_more "$work/l.run/metrics.jsonl" "$progress0" "$(grep -c "$progress0" "$work/l.run/metrics.jsonl")"
t_restart=$(now)
node "$work/l.yaml" c "$work/l.c2"
await "$work/l.c2.txt" "rejoined from the global model"
t_back=$(now)
wait
# Seconds (to the 0.1 s of await's polling): the kill noticed by the leader, and the restarted
# process training again after its command started.
timing=$(awk -v k="$t_kill" -v n="$t_noticed" -v r="$t_restart" -v b="$t_back" \
  'BEGIN { printf "noticed in %.1f s, training again %.1f s after the restart", n - k, b - r }')
[ "$(cat "$work/l.a.rc")" = 0 ] || fail "learner restart: the leader failed"
[ "$(cat "$work/l.b.rc")" = 0 ] || fail "learner restart: node b (the other learner) failed"
[ "$(cat "$work/l.c2.rc")" = 0 ] || fail "learner restart: the restarted node c failed"
grep -q "invariants held" "$work/l.a.txt" || fail "learner restart: invariants"
grep -q "node c rejoined with process 1" "$work/l.a.txt" || fail "learner restart: no rejoin at the leader"
grep -q "node c rejoined with process 1" "$work/l.b.txt" || fail "learner restart: no rejoin at node b"
grep -q "rejoined the running run as process 1" "$work/l.c2.txt" || fail "learner restart: c did not rejoin"
# The restarted learner pulled the global model at versions past the start, then trained.
versions=$(sed -n 's/.*learner 1: process 1 rejoined from the global model at versions \[\(.*\)\]/\1/p' "$work/l.c2.txt")
[ -n "$versions" ] || fail "learner restart: no rejoin line from learner 1"
echo "$versions" | tr ',' '\n' | awk '$1 > 0 { n++ } END { exit !(n > 0) }' ||
  fail "learner restart: rejoined at versions [$versions], not past the initial model"
tokens=$(sed -n 's/^learner 1: process 1 (restarted), \([0-9.]*\)\([kM]*\) tokens.*/\1\2/p' "$work/l.a.txt")
[ -n "$tokens" ] && [ "$tokens" != 0 ] || fail "learner restart: the restarted learner did no work"
# The leader's metrics saw node c go and come back (metrics.jsonl; /status and /metrics too).
grep -q '"type":"node",.*"node":"c","up":false,"process":0' "$work/l.run/metrics.jsonl" ||
  fail "learner restart: no line for node c going away in metrics.jsonl"
grep -q '"type":"node",.*"node":"c","up":true,"process":1' "$work/l.run/metrics.jsonl" ||
  fail "learner restart: no line for node c's process 1 in metrics.jsonl"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/l.a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 2.6) }' || fail "learner restart: eval loss $loss"

# 2. A shard's node is killed and restarted (mutual TLS, every payload on the bulk channel).
"$make_certs" "$work/certs" a b c d >/dev/null
tls="tls:
  ca: $work/certs/ca.pem
  certificate: \"$work/certs/{node}.pem\"
  key: \"$work/certs/{node}.key\""
cluster "$work/s.yaml" $((base + 10)) "b, c" "a, d" "a b c d" "$tls
snapshot: {dir: $work/snaps, every_s: 1}"
# An earlier execution of the same cluster file leaves its snapshots in snapshot.dir.
for n in a b c d; do node "$work/s.yaml" $n "$work/s0.$n" --run-timeout $((120 * ts)); done
wait
for n in a b c d; do [ "$(cat "$work/s0.$n.rc")" = 0 ] || fail "earlier execution: node $n failed"; done
grep -q "snapshot 3 committed" "$work/s0.a.txt" || fail "earlier execution: fewer than 3 snapshots"
node "$work/s.yaml" a "$work/s.a" --run-timeout $((120 * ts)) --bulk-min-kib 0
node "$work/s.yaml" b "$work/s.b" --bulk-min-kib 0
node "$work/s.yaml" c "$work/s.c" --bulk-min-kib 0
node "$work/s.yaml" d "$work/s.d1" --bulk-min-kib 0
await "$work/s.a.txt" "snapshot 3 committed"
kill -9 "$(cat "$work/s.d1.pid")"
await "$work/s.a.txt" "node d went away"
# the learners' nodes see it go before it comes back
await "$work/s.b.txt" "node d went away"
await "$work/s.c.txt" "node d went away"
node "$work/s.yaml" d "$work/s.d2" --bulk-min-kib 0
wait
for n in a b c d2; do
  [ "$(cat "$work/s.$n.rc")" = 0 ] || fail "shard restart: node $n failed"
done
grep -q "invariants held" "$work/s.a.txt" || fail "shard restart: invariants (version accounting)"
grep -q "syncer 1: recovered" "$work/s.d2.txt" || fail "shard restart: shard 1 did not recover"
# The snapshot it started from is one this execution's leader committed.
used=$(sed -n 's/.*shards start from \(.*\), then take newer.*/\1/p' "$work/s.d2.txt")
[ -n "$used" ] || fail "shard restart: did not start from a snapshot"
grep -q "snapshot [0-9]* committed: $used (" "$work/s.a.txt" ||
  fail "shard restart: started from $used, which this execution did not write"
grep -q "recovering from snapshot [0-9]* (versions" "$work/s.d2.txt" || fail "shard restart: part not loaded"
line=$(grep "^shard 1: process 1 (restarted), recovered at versions .* from snapshot" "$work/s.a.txt") ||
  fail "shard restart: no report of the restarted shard"
recovered=$(echo "$line" | sed -n 's/.*recovered at versions \[\([^]]*\)\].*/\1/p')
merges=$(echo "$line" | sed -n 's/.*then \([0-9]*\) merges.*/\1/p')
echo "$recovered" | tr ',' '\n' | awk '$1 > 0 { n++ } END { exit !(n > 0) }' ||
  fail "shard restart: recovered at versions [$recovered], not past the initial model"
[ "$merges" -gt 0 ] || fail "shard restart: the learners did not send to the restarted shard"
echo "$line" | grep -q "(0 sends dropped as repeats)" || fail "shard restart: sends dropped: $line"
grep -q "bulk channel: sent [1-9][0-9]* payloads .*received [1-9][0-9]*" "$work/s.d2.txt" ||
  fail "shard restart: no payload on the restarted node's bulk channel"

# 3. Two nodes killed at once and started again together: node b (learner 0 and shard 1) and
# node c (learner 1). Each restarted process rejoins the other while that one is still waiting
# for the leader to dial it; its registry holds the rejoin until its directory has the leader's
# actors (a rewire before then copied a directory without them, and learner 0 never reached the
# scheduler: the run hung in 3 of 4 tries).
cluster "$work/t.yaml" $((base + 20)) "b, c" "a, b" "a b c" "snapshot: {dir: $work/tsnaps, every_s: 1}"
node "$work/t.yaml" a "$work/t.a" --run-timeout $((120 * ts))
node "$work/t.yaml" b "$work/t.b1"
node "$work/t.yaml" c "$work/t.c1"
await "$work/t.a.txt" "snapshot 2 committed"
kill -9 "$(cat "$work/t.b1.pid")" "$(cat "$work/t.c1.pid")"
await "$work/t.a.txt" "node b went away"
await "$work/t.a.txt" "node c went away"
node "$work/t.yaml" b "$work/t.b2"
node "$work/t.yaml" c "$work/t.c2"
wait
for n in a b2 c2; do [ "$(cat "$work/t.$n.rc")" = 0 ] || fail "two nodes at once: node $n exited $(cat "$work/t.$n.rc")"; done
grep -q "learner 0: process 1 rejoined from the global model" "$work/t.b2.txt" ||
  fail "two nodes at once: learner 0 did not rejoin"
grep -q "learner 1: process 1 rejoined from the global model" "$work/t.c2.txt" ||
  fail "two nodes at once: learner 1 did not rejoin"
grep -q "invariants held" "$work/t.a.txt" || fail "two nodes at once: invariants"
# 4. A shard's node is killed, and started again only once the token budget is done: the
# learners stop meanwhile, sending their finals to shard 0 and to nobody for shard 1.
cluster "$work/u.yaml" $((base + 30)) "b, c" "a, d" "a b c d"
node "$work/u.yaml" a "$work/u.a" --run-timeout $((120 * ts))
node "$work/u.yaml" b "$work/u.b"
node "$work/u.yaml" c "$work/u.c"
node "$work/u.yaml" d "$work/u.d1"
await "$work/u.a.txt" "all 4 nodes wired: starting"
kill -9 "$(cat "$work/u.d1.pid")"
await "$work/u.a.txt" "node d went away"
await "$work/u.a.txt" "node a 100.0%" 120
node "$work/u.yaml" d "$work/u.d2"
wait
for n in a b c d2; do
  [ "$(cat "$work/u.$n.rc")" = 0 ] || fail "shard back after the stop: node $n exited $(cat "$work/u.$n.rc")"
done
grep -q "invariants held" "$work/u.a.txt" || fail "shard back after the stop: invariants"
grep -q "^shard 1: process 1 (restarted)" "$work/u.a.txt" ||
  fail "shard back after the stop: no report of the restarted shard"
echo "restart workflow OK (learner restart: $timing, rejoined at [$versions], eval $loss; shard restart: recovered at [$recovered], $merges merges after; two nodes at once: both learners rejoined; a shard back after the learners stopped: flushed)"
