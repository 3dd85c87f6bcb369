#!/bin/bash
# The leader's host vanishes mid-run without closing its connections, and the leader comes
# back on another host (a new process resumed from the run's snapshots) before the other nodes
# saw it go. Three network namespaces: host A runs the leader a, host B the nodes b and c
# (learners and shards); host A2 is the leader's new host. A's link is cut (no FIN, no RST
# reaches B: b and c would notice only after --peer-timeout, 60 s here), then the leader is
# killed, and `diloco node --name a --resume DIR` starts on A2. Its handshake reaches b and c
# while they still run the old run: they stop, naming the leader's new process; the leader says
# it waits for their next processes, which the test starts as a supervisor would, and the run
# resumes from the newest snapshot and ends with its invariants held. The same without
# --resume: the leader refuses (exit 2), naming b and c, which stop as well. Heartbeats every
# 0.2 s: b and c are then waiting for the cut-off leader's answer to one when its new process
# reaches them, and must stop on the new process all the same.
# Needs root, ip and nsenter; exits 77 (skipped) without them.
# usage: leader_restart_cli.sh PATH/TO/diloco
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$(readlink -f "$1")
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "skipped: needs root, ip and nsenter"; exit 77
fi
tag=dr$$
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
cleanup() {
  pkill -9 -f "diloco node --cluster $work/cluster.yaml" 2>/dev/null || true
  kill -9 $(jobs -p) 2>/dev/null || true
  for ns in a b c; do ip netns del ${tag}$ns 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -25; done >&2
  exit 1
}
# shellcheck source=tests/cli/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"
# Host A (10.77.0.1) and host B (10.77.0.2) on one veth pair; host A2 (namespace c, 10.77.1.1)
# on another pair to B (10.77.1.2), reaching B's nodes at 10.77.0.2 through it.
setup() {
  ip netns add ${tag}a && ip netns add ${tag}b && ip netns add ${tag}c || { echo "network namespaces"; return 1; }
  ip link add ${tag}x type veth peer name ${tag}y && ip link add ${tag}u type veth peer name ${tag}v ||
    { echo "veth pairs"; return 1; }
  ip link set ${tag}x netns ${tag}a && ip link set ${tag}y netns ${tag}b &&
    ip link set ${tag}u netns ${tag}c && ip link set ${tag}v netns ${tag}b &&
    in_ns a ip addr add 10.77.0.1/24 dev ${tag}x && in_ns b ip addr add 10.77.0.2/24 dev ${tag}y &&
    in_ns c ip addr add 10.77.1.1/24 dev ${tag}u && in_ns b ip addr add 10.77.1.2/24 dev ${tag}v &&
    for ns in a b c; do in_ns $ns ip link set lo up || return 1; done &&
    in_ns a ip link set ${tag}x up && in_ns b ip link set ${tag}y up &&
    in_ns c ip link set ${tag}u up && in_ns b ip link set ${tag}v up &&
    in_ns c ip route add 10.77.0.2/32 via 10.77.1.2 || { echo "addresses and routes"; return 1; }
}
set_up_or_skip setup

cat >"$work/cluster.yaml" <<YAML
learners: 2
shards: 2
token_budget: $((6000000 / (ts * ts)))
speed: {step_time_s: 0.004}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
snapshot: {dir: $work/snaps, every_s: 1}
nodes:
  - {name: a, host: 10.77.0.1, port: 4400}
  - {name: b, host: 10.77.0.2, port: 4400}
  - {name: c, host: 10.77.0.2, port: 4410}
placement:
  learners: [b, c]
  shards: [b, c]
YAML
# node NS NAME OUT [flags]: `diloco node` in namespace NS, in the background; exit code to OUT.rc.
node() {
  local ns=$1 name=$2 out=$3
  shift 3
  ( rc=0
    in_ns "$ns" "$diloco" node --cluster "$work/cluster.yaml" --name "$name" --bulk off \
      --heartbeat 0.2 --peer-timeout 60 --connect-timeout $((60 * ts)) "$@" >"$out.txt" 2>&1 || rc=$?
    echo $rc >"$out.rc" ) &
}
# await FILE PATTERN [SECONDS]
await() {
  local i=0
  until grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le $((10 * ${3:-60} * ts)) ] || fail "no '$2' in $1 within $((${3:-60} * ts)) s"
    sleep 0.1
  done
}
await_rc() { local i=0; until [ -s "$1.rc" ]; do i=$((i + 1)); [ $i -le $((600 * ts)) ] || fail "$1 did not end"; sleep 0.1; done; }

# leader_vanishes RUN: the run's nodes start (outputs RUN-a1, RUN-b1, RUN-c1), a snapshot is
# committed, then host A's link goes down and the leader is killed.
leader_vanishes() {
  in_ns a ip link set ${tag}x up
  node a a "$work/$1-a1" --run-timeout $((300 * ts))
  node b b "$work/$1-b1"
  node b c "$work/$1-c1"
  await "$work/$1-a1.txt" "snapshot [0-9]* committed"
  in_ns a ip link set ${tag}x down
  in_ns a pkill -9 -f "diloco node --cluster $work/cluster.yaml --name a" || fail "the leader was not running"
  await_rc "$work/$1-a1"
}

# 1. Resumed on its new host, the leader waits for the old run's nodes to come back.
rm -rf "$work/snaps"
leader_vanishes run
node c a "$work/run-a2" --run-timeout $((300 * ts)) --resume "$work/snaps"
for n in b c; do
  await_rc "$work/run-${n}1"
  [ "$(cat "$work/run-${n}1.rc")" != 0 ] || fail "node $n ended its old run with exit 0"
  grep -q "node a (the leader) started a new process: the run it led ended with its old one" \
    "$work/run-${n}1.txt" || fail "node $n did not name the leader's new process"
done
await "$work/run-a2.txt" "still run the run an earlier process of this node led; they end it now"
node b b "$work/run-b2"
node b c "$work/run-c2"
for n in a2 b2 c2; do await_rc "$work/run-$n"; done
for n in a2 b2 c2; do [ "$(cat "$work/run-$n.rc")" = 0 ] || fail "resumed: node $n exited $(cat "$work/run-$n.rc")"; done
grep -q "resuming from $work/snaps/snapshot-" "$work/run-a2.txt" || fail "the leader did not resume"
grep -q "invariants held" "$work/run-a2.txt" || fail "resumed: invariants"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/run-a2.txt")

# 2. Without --resume the leader refuses, naming the nodes, which stop as well.
leader_vanishes norm
node c a "$work/norm-a2"
await_rc "$work/norm-a2"
[ "$(cat "$work/norm-a2.rc")" = 2 ] || fail "the leader without --resume exited $(cat "$work/norm-a2.rc"), not 2"
grep -q "cannot rejoin it: node(s) b, c still ran the run an earlier process of it led" "$work/norm-a2.txt" ||
  fail "the refusal does not name b and c"
for n in b c; do
  await_rc "$work/norm-${n}1"
  grep -q "node a (the leader) started a new process" "$work/norm-${n}1.txt" ||
    fail "without --resume: node $n did not stop on the leader's new process"
done
echo "leader restart OK: resumed on a new host after b and c ended the old run (eval loss $loss); without --resume refused by name"
