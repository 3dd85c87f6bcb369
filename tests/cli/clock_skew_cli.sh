#!/bin/sh
# A deployed run whose shards' node (it hosts a learner too) has its wall clock a minute behind
# (DILOCO_DEBUG_CLOCK_SKEW_S, as a host with a wrong time service): the node measures its clock
# against the leader's when it joins, says how far off it is, and keeps the leader's time, so
# the run trains as an undisturbed one. Uncorrected, the shards' grace windows and the
# learners' deadlines disagree by a minute and the run ends at eval 21.5 (exit 0 and no word
# before the exit codes of 21105e6; exit 3 since).
# usage: clock_skew_cli.sh PATH/TO/diloco
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
work=$(mktemp -d)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tail -30 "$f"; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 9 10
# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
openssl rand -hex 32 >"$work/secret"
cat >"$work/c.yaml" <<YAML
learners: 2
shards: 2
token_budget: $((6000000 / ts))
speed: {step_time_s: 0.002}
model: {hidden: 32, embed_dim: 8}
secret_file: $work/secret
nodes:
  - {name: a, host: 127.0.0.1, port: $base}
  - {name: b, host: 127.0.0.1, port: $((base + 2))}
  - {name: c, host: 127.0.0.1, port: $((base + 4))}
placement:
  learners: [b, c]
  shards: [c, c]
YAML
start_node "$work/a" "$work/c.yaml" a --run-timeout $((120 * ts))
start_node "$work/b" "$work/c.yaml" b
DILOCO_DEBUG_CLOCK_SKEW_S=-60 start_node "$work/c" "$work/c.yaml" c --log-format json \
  --metrics-port $((base + 6))
# Node c's /metrics: its clock against the leader's, checked at every heartbeat: 60 s behind
# (corrected at the join), nothing left to correct since, within half a round trip.
python3 - "http://127.0.0.1:$((base + 6))/metrics" $((60 * ts)) >"$work/metrics-c.txt" 2>&1 <<'PY' ||
import re, sys, time, urllib.request
deadline = time.time() + float(sys.argv[2])
while time.time() < deadline:
    try:
        text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
    except OSError:
        time.sleep(0.2)
        continue
    m = dict(re.findall(r"^(diloco_clock_\w+) (\S+)$", text, re.M))
    if len(m) == 3:
        print(m)
        off, res, err = (float(m["diloco_clock_" + k + "_seconds"]) for k in ("offset", "residual", "error"))
        sys.exit(0 if 59.9 < off < 60.1 and abs(res) < 0.1 and 0 <= err < 1 else 1)
    time.sleep(0.2)
print("no diloco_clock_* gauges on node c's /metrics")
sys.exit(1)
PY
  fail "node c's clock metrics: $(cat "$work/metrics-c.txt")"
wait
for n in a b c; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "node $n exited $(cat "$work/$n.rc")"; done
grep -q "invariants held" "$work/a.txt" || fail "the run did not hold its invariants"
# Node c logs JSON lines (--log-format json): its events carry the node as a field.
line=$(grep '^{.*"node":"c".*clock: .* behind the leader' "$work/c.txt") ||
  fail "node c did not say how far its clock is off, as a JSON line"
grep -q '^{.*"node":"c","run":"[0-9a-f]\{16\}","msg":"listening on port' "$work/c.txt" &&
  ! grep -q "^node c: listening" "$work/c.txt" || fail "node c's events are not JSON lines"
off=$(echo "$line" | sed -n 's/.*clock: \([0-9.]*\) s behind.*/\1/p')
awk -v o="$off" 'BEGIN { exit !(o > 59.9 && o < 60.1) }' || fail "node c measured $off s, not 60"
grep -q "clock: .* the leader's" "$work/b.txt" || fail "node b did not measure its clock"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 3.2) }' || fail "eval loss $loss"
echo "clock skew OK: node c $off s behind, corrected; eval $loss"
