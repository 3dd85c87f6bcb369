#!/bin/bash
# Two nodes on two "hosts": Linux network namespaces joined by a veth pair, each direction
# limited by a tc token bucket (tbf; netem is not available on these machines). The deployed
# run must finish with the right result, its payloads must cross on the bulk channel, the
# run must take at least as long as the bytes that crossed need at the limited rate, and the
# bucket must have held packets back (its overlimits count): the limit was in force. Needs
# root and iproute2; exits 77 (skipped) without them.
# usage: netns_cli.sh PATH/TO/diloco
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$(readlink -f "$1")
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null ||
   ! command -v nsenter >/dev/null; then
  echo "skipped: needs root, ip, tc and nsenter"; exit 77
fi
tag=dl$$
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  ip netns del ${tag}a 2>/dev/null || true
  ip netns del ${tag}b 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; cat "$work"/*.txt >&2; exit 1; }
rate_mbit=16
# shellcheck source=tests/cli/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"
# The two "hosts". Where the kernel or the sandbox does not allow a step (no namespaces, no
# veth, no tbf), the test is skipped and says which step.
setup() {
  ip netns add ${tag}a && ip netns add ${tag}b || { echo "network namespaces"; return 1; }
  ip link add ${tag}x type veth peer name ${tag}y || { echo "a veth pair"; return 1; }
  ip link set ${tag}x netns ${tag}a && ip link set ${tag}y netns ${tag}b &&
    in_ns a ip addr add 10.77.0.1/24 dev ${tag}x && in_ns b ip addr add 10.77.0.2/24 dev ${tag}y &&
    in_ns a ip link set lo up && in_ns b ip link set lo up &&
    in_ns a ip link set ${tag}x up && in_ns b ip link set ${tag}y up ||
    { echo "addresses in the namespaces"; return 1; }
  in_ns a tc qdisc add dev ${tag}x root tbf rate ${rate_mbit}mbit burst 32kb latency 200ms &&
    in_ns b tc qdisc add dev ${tag}y root tbf rate ${rate_mbit}mbit burst 32kb latency 200ms ||
    { echo "a tc tbf qdisc"; return 1; }
}
set_up_or_skip setup

# Every merge waits for both learners (quorum 2): with one learner enough (K = 1), partial
# merges of learners whose deltas the slow link delays by different amounts can make the run
# diverge when the learners compute slowly (a sanitizer build); this test is about the link.
cat >"$work/cluster.yaml" <<YAML
learners: 2
shards: 2
quorum: 2
token_budget: 96000
speed: {step_time_s: 0.003}
model: {hidden: 256, embed_dim: 32}
secret_file: $work/secret
nodes:
  - {name: a, host: 10.77.0.1, port: 4400}
  - {name: b, host: 10.77.0.2, port: 4400}
placement:
  learners: [a, b]
  shards: [b, a]
YAML
in_ns b "$diloco" node --cluster "$work/cluster.yaml" --name b --bulk-min-kib 0 \
  --connect-timeout $((20 * ts)) >"$work/b.txt" 2>&1 &
bpid=$!
in_ns a "$diloco" node --cluster "$work/cluster.yaml" --name a --bulk-min-kib 0 \
  --connect-timeout $((20 * ts)) --run-timeout $((120 * ts)) >"$work/a.txt" 2>&1 || fail "node a failed"
wait $bpid || fail "node b failed"
grep -q "invariants held" "$work/a.txt" || fail "no result"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 3.5) }' || fail "eval loss $loss out of range"
run_s=$(sed -n 's/.* tokens in \([0-9.]*\) s.*/\1/p' "$work/a.txt")
# MB sent on the bulk channel by each node (one direction of the link each), as printed with one
# decimal: a short run sends 20 payloads each way, printed as 0.5 MB.
mb() { sed -n 's/.*bulk channel: sent [0-9]* payloads (\([0-9.]*\) MB).*/\1/p' "$1"; }
mb_a=$(mb "$work/a.txt"); mb_b=$(mb "$work/b.txt")
[ -n "$mb_a" ] && [ -n "$mb_b" ] || fail "no bulk channel summary"
awk -v a="$mb_a" -v b="$mb_b" 'BEGIN { exit !(a >= 0.5 && b >= 0.5) }' || fail "too little crossed: $mb_a / $mb_b MB"
# The busier direction needs at least bytes * 8 / rate seconds (90%: the bucket's burst).
need=$(awk -v a="$mb_a" -v b="$mb_b" -v r=$rate_mbit 'BEGIN { m = a > b ? a : b; printf "%.2f", 0.9 * m * 8 / r }')
awk -v t="$run_s" -v n="$need" 'BEGIN { exit !(t >= n) }' || fail "the run took $run_s s, less than the $need s the limit allows"
over=0
for ns in a b; do
  dev=${tag}x; [ $ns = b ] && dev=${tag}y
  n=$(in_ns $ns tc -s qdisc show dev $dev | sed -n 's/.*overlimits \([0-9]*\).*/\1/p' | head -1)
  over=$((over + ${n:-0}))
done
[ "$over" -gt 0 ] || fail "the token buckets never held a packet back"
echo "network namespaces OK: eval loss $loss, $mb_a MB a->b and $mb_b MB b->a at ${rate_mbit} Mbit/s in $run_s s (>= $need s), $over packets held back by the buckets"
