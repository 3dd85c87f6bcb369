#!/bin/sh
# Hostile connections to both ports of both nodes during a run: random bytes, a header
# claiming a 4 GiB payload, a truncated header, an empty connection. CAF 0.17.6's middleman
# alone does not survive them (plain TCP: SIGSEGV in caf::io::basp::instance::handle; TLS:
# the node loses its link). With the framing front on the node's port (net/frame_tunnel.hpp)
# and the bulk channel's own checks on port + 1, every such connection is refused and
# counted, and the run completes. `--front off` shows the old failure.
# usage: hostile_cli.sh PATH/TO/diloco PATH/TO/make-certs.sh PATH/TO/send_garbage [tls]
set -eu
diloco=$1
make_certs=$2
send_garbage=$3
mode=${4:-plain}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; cat "$f"; done >&2; exit 1; }
base=$((20000 + ($$ % 400) * 30))
tls=""
if [ "$mode" = tls ]; then
  "$make_certs" "$work/certs" a b >/dev/null
  tls="tls:
  ca: $work/certs/ca.pem
  certificate: \"$work/certs/{node}.pem\"
  key: \"$work/certs/{node}.key\""
fi
cat >"$work/hostile.yaml" <<YAML
learners: 2
shards: 2
token_budget: 6000000
speed: {step_time_s: 0.002}
model: {hidden: 32, embed_dim: 8}
nodes:
  - {name: a, host: 127.0.0.1, port: $((base + 20))}
  - {name: b, host: 127.0.0.1, port: $((base + 22))}
placement:
  learners: [a, b]
  shards: [b, a]
$tls
YAML
run_pair() {
  ( if "$diloco" node --cluster "$2" --name b --connect-timeout 8 --run-timeout 60 >"$work/$3.b.txt" 2>&1; then
      echo 0; else echo $?; fi >"$work/$3.rc.b" ) &
  ( if "$diloco" node --cluster "$1" --name a --connect-timeout 8 --run-timeout 60 \
      >"$work/$3.a.txt" 2>&1; then echo 0; else echo $?; fi >"$work/$3.rc.a" ) &
  wait
}
# Hostile input while a run goes on: garbage, absurd length fields, truncated headers and
# empty connections to both nodes' ports. The run should complete; see the header for what
# happens with CAF 0.17.6 instead.
ports="$((base + 20)) $((base + 21)) $((base + 22)) $((base + 23))"
( sleep 1
  for port in $ports; do
    "$send_garbage" 127.0.0.1 $port 5
  done ) >"$work/hostile.garbage.txt" 2>&1 &
run_pair "$work/hostile.yaml" "$work/hostile.yaml" hostile
[ "$(cat "$work/hostile.rc.a")" = 0 ] || fail "hostile: node a failed"
[ "$(cat "$work/hostile.rc.b")" = 0 ] || fail "hostile: node b failed"
grep -q "invariants held" "$work/hostile.a.txt" || fail "hostile: the run did not complete"
[ "$(grep -c "20 hostile connections" "$work/hostile.garbage.txt")" = "$(echo $ports | wc -w)" ] ||
  fail "hostile: garbage not sent"
# Every hostile connection was refused and counted, by the front or the bulk channel.
for n in a b; do
  grep -q "front: [01] of [0-9]* connections let through; refused: [1-9]" "$work/hostile.$n.txt" ||
    fail "hostile: node $n's front did not count the refusals"
  grep -q "bulk channel: .*refused connections: [1-9]" "$work/hostile.$n.txt" ||
    fail "hostile: node $n's bulk channel did not count the refusals"
done

echo "hostile input survived ($mode)"
