#!/bin/sh
# Hostile connections to both ports of both nodes during a run: random bytes, a header
# claiming a 4 GiB payload, a truncated header, an empty connection; answers to a node's
# challenge from a client that knows the cluster file but not the run's secret, followed by
# BASP-shaped frames (CAF 0.17.6's middleman crashes or stalls on them) or a 2 GiB claim; a
# 2 GiB claim from a holder of the secret; 1100 idle connections to a node with 1024
# descriptors. With the framing front on the node's port (net/frame_tunnel.hpp) and the bulk
# channel's own checks on port + 1, every such connection is refused or closed and counted,
# memory stays bounded, and the run completes with an undisturbed run's result.
# usage: hostile_cli.sh PATH/TO/diloco PATH/TO/make-certs.sh PATH/TO/send_garbage
#        PATH/TO/hostile_peer [tls]
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
make_certs=$2
send_garbage=$3
hostile_peer=$4
mode=${5:-plain}
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; cat "$f"; done >&2; exit 1; }
. "$(dirname "$0")/node_lib.sh"  # await, await_file
. "$(dirname "$0")/ports.sh"
pick_ports 1 30
tls=""
if [ "$mode" = tls ]; then
  "$make_certs" "$work/certs" a b >/dev/null
  tls="tls:
  ca: $work/certs/ca.pem
  certificate: \"$work/certs/{node}.pem\"
  key: \"$work/certs/{node}.key\""
fi
# A sanitizer build (DILOCO_TIME_SCALE 4) trains about 20x slower under these attacks: the run
# shrinks with the scale so that it ends within its timeout (it reached 1.8-2.8M tokens of 6M
# in the 360 s there), and still lasts longer than the attacks.
cat >"$work/hostile.yaml" <<YAML
learners: 2
shards: 2
token_budget: $((6000000 / ts))
speed: {step_time_s: 0.002}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
nodes:
  - {name: a, host: 127.0.0.1, port: $((base + 20))}
  - {name: b, host: 127.0.0.1, port: $((base + 22))}
placement:
  learners: [a, b]
  shards: [b, a]
$tls
YAML
# run_pair FILE NAME: both nodes; node a with at most 1024 descriptors (idle connections must
# not take them all). Each node's pid goes to NAME.pid.N, its peak memory to NAME.hwm.N.
run_pair() {
  for n in b a; do
    # shellcheck disable=SC2016
    ( if sh -c 'echo $$ >"$0"; ulimit -n 1024; exec "$@"' "$work/$2.pid.$n" \
        "$diloco" node --cluster "$1" --name $n --connect-timeout $((8 * ts)) --run-timeout $((90 * ts)) \
        >"$work/$2.$n.txt" 2>&1; then echo 0; else echo $?; fi >"$work/$2.rc.$n" ) &
  done
  for n in a b; do await_file "$work/$2.pid.$n"; done
  for n in a b; do
    ( pid=$(cat "$work/$2.pid.$n"); hwm=0
      while [ -r /proc/$pid/status ]; do
        h=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$pid/status 2>/dev/null)
        [ -n "$h" ] && hwm=$h && echo "$hwm" >"$work/$2.hwm.$n"
        sleep 0.2
      done ) &
  done
  wait
}
# Hostile input while a run goes on, to both ports of both nodes:
# - garbage, absurd length fields, truncated headers and empty connections (send_garbage);
# - a client that knows the cluster file, so it can answer the challenge as a node would if the
#   run had no secret: BASP-shaped frames of every operation to the front (they crashed CAF's
#   middleman, or stalled a node, when they reached it) and a 2 GiB claim to the bulk channel;
# - a holder of the secret claiming 2 GiB (above the run's largest payload: refused) and three
#   claims of 2 MiB it never completes (nothing allocated beyond what came);
# - 1100 idle connections to each port of node a, which has 1024 descriptors.
ports="$((base + 20)) $((base + 21)) $((base + 22)) $((base + 23))"
file="$work/hostile.yaml"
( # once both nodes listen on their ports
  await "$work/hostile.a.txt" "listening on port"
  await "$work/hostile.b.txt" "listening on port"
  ( "$hostile_peer" "$file" 127.0.0.1 $((base + 20)) idle 1100 8
    "$hostile_peer" "$file" 127.0.0.1 $((base + 21)) idle 1100 8 ) >"$work/hostile.idle.txt" 2>&1 &
  for port in $ports; do
    "$send_garbage" 127.0.0.1 $port 5
  done
  for op in 0 1 2 3 4 5 6 7; do
    "$hostile_peer" "$file" 127.0.0.1 $((base + 22)) front-frame $op
  done
  "$hostile_peer" "$file" 127.0.0.1 $((base + 22)) front-huge --secret "$work/secret"
  "$hostile_peer" "$file" 127.0.0.1 $((base + 23)) bulk-huge
  "$hostile_peer" "$file" 127.0.0.1 $((base + 23)) bulk-huge --secret "$work/secret"
  "$hostile_peer" "$file" 127.0.0.1 $((base + 23)) bulk-claims 3 2 --secret "$work/secret"
  wait ) >"$work/hostile.garbage.txt" 2>&1 &
run_pair "$file" hostile
wait
[ "$(cat "$work/hostile.rc.a")" = 0 ] || fail "hostile: node a failed"
[ "$(cat "$work/hostile.rc.b")" = 0 ] || fail "hostile: node b failed"
grep -q "invariants held" "$work/hostile.a.txt" || fail "hostile: the run did not complete"
[ "$(grep -c "20 hostile connections" "$work/hostile.garbage.txt")" = "$(echo $ports | wc -w)" ] ||
  fail "hostile: garbage not sent"
# Knowing the cluster file got nobody through to CAF: every outsider's answer was refused.
[ "$(grep -c "front-frame: answered yes, connection closed" "$work/hostile.garbage.txt")" = 8 ] ||
  fail "hostile: a front-frame connection was not closed"
# A holder of the secret declaring 4 GiB messages to the middleman: closed (by the front, which
# bounds a message by the run's largest; over TLS, CAF refuses the bytes as no TLS record).
grep -q "front-huge: answered yes, connection closed" "$work/hostile.garbage.txt" ||
  fail "hostile: the 4 GiB middleman messages were not refused"
grep -q "bulk-huge: 1 of 1 connections closed" "$work/hostile.garbage.txt" ||
  fail "hostile: the 2 GiB claims were not refused"
# Every idle connection was closed by the node (at once beyond the cap, or after the hello
# timeout), so none of them kept it from its peers.
[ "$(grep -c "1100 of 1100 connections opened, 1100 closed by the node" "$work/hostile.idle.txt")" = 2 ] ||
  fail "hostile: idle connections were left open"
# Every hostile connection was refused and counted, by the front or the bulk channel (the
# secret holder's front connection passes the hello: at most two tunnels, with the peer's).
# Node a also takes the 1100 idle connections: on a busy machine they may fill its pending
# slots while the garbage arrives, which is then refused as over capacity, not as a bad hello.
for n in a b; do
  grep -q "front: [0-2] of [0-9]* connections let through; refused: [1-9]" "$work/hostile.$n.txt" ||
    { [ $n = a ] && grep -q "front: [0-2] of [0-9]* connections let through; refused: .* [1-9][0-9]* over capacity" \
      "$work/hostile.$n.txt"; } ||
    fail "hostile: node $n's front did not count the refusals"
  grep -q "bulk channel: .*refused connections: [1-9]" "$work/hostile.$n.txt" ||
    fail "hostile: node $n's bulk channel did not count the refusals"
done
grep -q "front: .* [1-9][0-9]* silent, [1-9][0-9]* over capacity" "$work/hostile.a.txt" ||
  fail "hostile: node a's front did not count silent and surplus connections"
if [ "$mode" = plain ]; then
  grep -q "bulk channel: .* [1-9] oversized" "$work/hostile.b.txt" ||
    fail "hostile: the secret holder's 2 GiB claim was not refused as oversized"
  grep -q "front: .* 1 oversized message" "$work/hostile.b.txt" ||
    fail "hostile: the secret holder's 4 GiB middleman messages were not counted"
fi
# The run trains as an undisturbed one (eval 1.89 to 1.97 on this cluster on an idle machine;
# real-time runs end worse when other jobs take the CPU: up to 2.8 with a compiler beside this
# test, the same as undisturbed deployment runs under such load). Idle connections that starved
# a node left it at 4.50 before; the bound is node_cli.sh's. Each node's peak memory stays
# under 200 MB (three connections claiming 2 GiB took 2.3 GB before). AddressSanitizer adds
# its shadow memory, redzones and a quarantine of up to 256 MB (a node peaked at 634 MB there):
# scripts/test.sh --sanitize sets DILOCO_MEMORY_SCALE to 5, a bound of 1 GB, still far below
# what the defect took.
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/hostile.a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 3.2) }' || fail "hostile: eval loss $loss"
bound=$((204800 * ${DILOCO_MEMORY_SCALE:-1}))
for n in a b; do
  hwm=$(cat "$work/hostile.hwm.$n")
  [ "$hwm" -lt $bound ] || fail "hostile: node $n peaked at $hwm kB (bound $bound kB)"
done

echo "hostile input survived ($mode): eval $loss, peak memory $(cat "$work/hostile.hwm.a") kB and $(cat "$work/hostile.hwm.b") kB"
