#!/bin/sh
# Deployed runs on one machine: two `diloco node` processes on loopback, over plain TCP and
# over mutual TLS; a node whose certificate the CA did not sign is refused; a node with
# another cluster file is refused by name.
# usage: node_cli.sh PATH/TO/diloco PATH/TO/make-certs.sh
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
make_certs=$2
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; cat "$f"; done >&2; exit 1; }
. "$(dirname "$0")/node_lib.sh"  # await
. "$(dirname "$0")/ports.sh"
pick_ports 0 30

cluster() {  # cluster FILE PORT_A PORT_B [extra yaml]
  cat >"$1" <<YAML
learners: 2
shards: 2
token_budget: 64000
speed: {step_time_s: 0.002}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
nodes:
  - {name: a, host: 127.0.0.1, port: $2}
  - {name: b, host: 127.0.0.1, port: $3}
placement:
  learners: [a, b]
  shards: [b, a]
$4
YAML
}

run_pair() {  # run_pair FILE_A FILE_B TAG [node flags] -> exit codes in $work/TAG.rc.{a,b}
  ( if "$diloco" node --cluster "$2" --name b --connect-timeout $((8 * ts)) ${4:-} >"$work/$3.b.txt" 2>&1; then
      echo 0; else echo $?; fi >"$work/$3.rc.b" ) &
  ( if "$diloco" node --cluster "$1" --name a --connect-timeout $((8 * ts)) --run-timeout $((60 * ts)) ${4:-} \
      >"$work/$3.a.txt" 2>&1; then echo 0; else echo $?; fi >"$work/$3.rc.a" ) &
  wait
}

# Plain TCP without a shared secret: refused before anything listens, naming the key; a secret
# file that is too short likewise, naming the file.
cluster "$work/nosecret.yaml" $base $((base + 2)) ""
sed -i '/^secret_file:/d' "$work/nosecret.yaml"
set +e
"$diloco" node --cluster "$work/nosecret.yaml" --name a >"$work/nosecret.txt" 2>&1
rc=$?
printf 'short\n' >"$work/short"
cluster "$work/short.yaml" $base $((base + 2)) ""
sed -i "s|^secret_file: .*|secret_file: $work/short|" "$work/short.yaml"
"$diloco" node --cluster "$work/short.yaml" --name a >"$work/short.txt" 2>&1
rc_short=$?
set -e
[ $rc = 2 ] || fail "no secret: exit $rc, expected 2"
grep -q "nosecret.yaml: secret_file: missing" "$work/nosecret.txt" || fail "no secret: not named"
[ $rc_short != 0 ] || fail "a 5-byte secret was accepted"
grep -q "$work/short: 5 bytes, need at least 16" "$work/short.txt" || fail "short secret: not named"

# Two nodes given different secret files: each says the other's secret differs (issue 50: they
# ended after 20 s with "disconnect_during_handshake", never naming the secret).
# The same cluster file (secret_file: a relative path) read from two directories whose secret
# files differ, as on two hosts.
mkdir -p "$work/host_a" "$work/host_b"
cp "$work/secret" "$work/host_a/secret"
openssl rand -hex 32 >"$work/host_b/secret"
cluster "$work/sec.yaml" $base $((base + 2)) ""
sed -i "s|^secret_file: .*|secret_file: secret|" "$work/sec.yaml"
( cd "$work/host_b" && if "$diloco" node --cluster "$work/sec.yaml" --name b \
    --connect-timeout $((8 * ts)) >"$work/secret.b.txt" 2>&1; then echo 0; else echo $?; fi \
    >"$work/secret.rc.b" ) &
( cd "$work/host_a" && if "$diloco" node --cluster "$work/sec.yaml" --name a \
    --connect-timeout $((8 * ts)) --run-timeout $((60 * ts)) >"$work/secret.a.txt" 2>&1; then
    echo 0; else echo $?; fi >"$work/secret.rc.a" ) &
wait
[ "$(cat "$work/secret.rc.a")" != 0 ] || fail "different secrets: node a ran"
grep -q "shared secret differs" "$work/secret.a.txt" "$work/secret.b.txt" ||
  fail "different secrets: not named: $(tail -2 "$work/secret.a.txt")"

# Plain TCP, every payload on the bulk channel (a node listens on port and port + 1).
cluster "$work/plain.yaml" $base $((base + 2)) ""
run_pair "$work/plain.yaml" "$work/plain.yaml" plain "--bulk-min-kib 0"
[ "$(cat "$work/plain.rc.a")" = 0 ] || fail "plain: node a failed"
[ "$(cat "$work/plain.rc.b")" = 0 ] || fail "plain: node b failed"
grep -q "invariants held" "$work/plain.a.txt" || fail "plain: no result from the leader"
grep -q "plain TCP" "$work/plain.a.txt" || fail "plain: no warning about plain TCP"
for n in a b; do
  grep -q "bulk channel: sent [1-9][0-9]* payloads .*received [1-9][0-9]* .* 0 unresolved" \
    "$work/plain.$n.txt" || fail "plain: node $n moved no payload on the bulk channel"
done
# The run learned across the two processes. A real-time run's quality depends on how the OS
# schedules its threads: learners step as fast as they compute, so a node held up for a moment
# sends one large, late delta. This 0.2 s run ends at 2.75 to 2.85 on an idle machine and was
# seen at 3.59 once on a machine running three heavy jobs; the untrained model is at ln 256 =
# 5.55, and a tenth of the budget (simulated) reaches 4.64. The bound asks only that it learned;
# quality itself is measured in simulation, where timing is part of the config.
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/plain.a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 4.2) }' || fail "plain: eval loss $loss out of range"

# Mutual TLS.
"$make_certs" "$work/certs" a b >/dev/null
tls="tls:
  ca: $work/certs/ca.pem
  certificate: \"$work/certs/{node}.pem\"
  key: \"$work/certs/{node}.key\""
cluster "$work/tls.yaml" $((base + 4)) $((base + 6)) "$tls"
run_pair "$work/tls.yaml" "$work/tls.yaml" tls "--bulk-min-kib 0"
[ "$(cat "$work/tls.rc.a")" = 0 ] || fail "tls: node a failed"
[ "$(cat "$work/tls.rc.b")" = 0 ] || fail "tls: node b failed"
grep -q "mutual TLS" "$work/tls.a.txt" || fail "tls: not over TLS"
for n in a b; do
  grep -q "bulk channel: sent [1-9][0-9]* payloads .*received [1-9][0-9]* .* 0 unresolved" \
    "$work/tls.$n.txt" || fail "tls: node $n moved no payload on the (TLS) bulk channel"
done

# A node whose certificate is self-signed (not by the CA) is refused during the handshake.
mkdir -p "$work/rogue"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=b" \
  -keyout "$work/rogue/b.key" -out "$work/rogue/b.pem" 2>/dev/null
cp "$work/certs/ca.pem" "$work/rogue/ca.pem"
cp "$work/certs/a.pem" "$work/certs/a.key" "$work/rogue/"
rogue="tls:
  ca: $work/rogue/ca.pem
  certificate: \"$work/rogue/{node}.pem\"
  key: \"$work/rogue/{node}.key\""
cluster "$work/rogue.yaml" $((base + 8)) $((base + 10)) "$rogue"
run_pair "$work/rogue.yaml" "$work/rogue.yaml" rogue
[ "$(cat "$work/rogue.rc.a")" != 0 ] || fail "rogue: node a accepted a certificate the CA did not sign"
[ "$(cat "$work/rogue.rc.b")" != 0 ] || fail "rogue: node b ran"
grep -q "signed by tls.ca" "$work/rogue.a.txt" || fail "rogue: the refusal is not explained"

# Another cluster file (another budget) on node b is refused by name.
cluster "$work/one.yaml" $((base + 12)) $((base + 14)) ""
sed 's/token_budget: 64000/token_budget: 96000/' "$work/one.yaml" >"$work/other.yaml"
run_pair "$work/one.yaml" "$work/other.yaml" other
[ "$(cat "$work/other.rc.a")" != 0 ] || fail "other: node a ran with another cluster file"
grep -q "runs another cluster file" "$work/other.a.txt" "$work/other.b.txt" || fail "other: no reason given"
# A node that dies mid-run (kill -9) or freezes (SIGSTOP) is noticed within the stated bound
# (--peer-timeout 3 + --heartbeat 1). It hosts a shard, so the leader waits --restart-wait 2 s
# for its process to be restarted (tests/cli/restart_cli.sh restarts it), then stops with an
# error naming it.
for sig in KILL STOP; do
  cluster "$work/long.yaml" $((base + 16)) $((base + 18)) ""
  sed -i 's/token_budget: 64000/token_budget: 500000000/' "$work/long.yaml"
  "$diloco" node --cluster "$work/long.yaml" --name b --peer-timeout 3 >"$work/long.b.txt" 2>&1 &
  bpid=$!
  # once the run is going on
  ( await "$work/long.a.txt" "nodes wired: starting"; date +%s >"$work/long.killed"; kill -$sig $bpid ) &
  if "$diloco" node --cluster "$work/long.yaml" --name a --peer-timeout 3 --connect-timeout $((8 * ts)) \
      --restart-wait 2 --run-timeout $((60 * ts)) >"$work/long.a.txt" 2>&1; then
    fail "$sig: the leader finished although node b was gone"
  fi
  took=$(( $(date +%s) - $(cat "$work/long.killed") ))
  kill -9 $bpid 2>/dev/null || true
  wait $bpid 2>/dev/null || true
  grep -q "node b went away .* was not restarted within 2 s" "$work/long.a.txt" || fail "$sig: not named"
  [ $took -le $((7 * ts)) ] || fail "$sig: gave up only $took s after the kill (at most 4 s + 2 s)"
  base=$((base + 4))
done
echo "node workflow OK (plain TCP loss $loss)"
