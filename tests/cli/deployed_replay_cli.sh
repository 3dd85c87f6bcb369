#!/bin/sh
# Replaying real-time and deployed runs from their tapes:
#  1. `simulate --realtime --tape`: every actor replays with no divergence (the clock reads are
#     on the tape), and a nondeterminism planted only in the replay is found at its learner;
#  2. three nodes on loopback over mutual TLS, each recording its actors (`node --tape`); the
#     node of learner 1 is killed with SIGKILL and started again. The directory of tapes (four:
#     the killed process's cut short) replays every actor, the restarted learner's two
#     processes stitched, with no divergence; a nondeterminism planted in learner 0 is found at
#     that learner, on its node, at a step whose state is past the planted step; tapes that do
#     not make one run are refused by name. Node a's tape rotates (--tape-max-bytes): only its
#     newest volumes are kept, and its actors replay from their checkpoints.
# usage: deployed_replay_cli.sh PATH/TO/diloco PATH/TO/make-certs.sh
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
make_certs=$2
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*/s' | tail -30; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 5 30
small="--set model.hidden=32 --set model.embed_dim=8"

# 1. A real-time run in one process.
# shellcheck disable=SC2086
"$diloco" simulate --realtime --budget 120000 $small --tape "$work/rt.tape" >"$work/rt.txt" 2>&1 ||
  fail "the real-time run failed"
"$diloco" replay "$work/rt.tape" >"$work/rt-replay.txt" 2>&1 || fail "the real-time tape did not replay"
grep -q "replay matches the recording: 10 actors, .* clock reads given back" "$work/rt-replay.txt" ||
  fail "real-time replay: $(tail -3 "$work/rt-replay.txt")"
if "$diloco" replay "$work/rt.tape" --set debug.nondeterministic_learner=2 \
  --set debug.nondeterministic_step=30 >"$work/rt-planted.txt" 2>&1; then
  fail "real-time replay with a planted nondeterminism matched"
fi
grep -q "DIVERGENCE in learner 2 (actor 2)" "$work/rt-planted.txt" || fail "real-time: planted divergence not pinpointed"

# 2. A deployed run, one node killed and restarted.
# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
"$make_certs" "$work/certs" a b c >/dev/null
# The budget shrinks with the time scale: a sanitizer build trains several times slower, and
# the run must end within its timeout.
loopback_cluster "$work/c.yaml" $base $((3000000 / ts)) "{hidden: 32, embed_dim: 8}" "tls:
  ca: $work/certs/ca.pem
  certificate: \"$work/certs/{node}.pem\"
  key: \"$work/certs/{node}.key\""
# Node a's tape rotates and keeps its newest 1 MB: its actors replay from their checkpoints.
start_node "$work/a" "$work/c.yaml" a --tape "$work/tapes" --tape-max-bytes 1e6 --run-timeout $((120 * ts))
start_node "$work/b" "$work/c.yaml" b --tape "$work/tapes"
start_node "$work/c1" "$work/c.yaml" c --tape "$work/tapes"
await "$work/a.txt" "nodes wired: starting"
# Learner 1's process has a history on its tape (flushed every second) before it is killed.
i=0
until [ "$(wc -c <"$work/tapes/c.0.tape" 2>/dev/null || echo 0)" -gt 200000 ]; do
  i=$((i + 1))
  [ $i -le $((300 * ts)) ] || fail "node c's tape did not grow past 200 kB within $((30 * ts)) s"
  sleep 0.1
done
kill -9 "$(cat "$work/c1.pid")"
await "$work/a.txt" "node c went away"
start_node "$work/c2" "$work/c.yaml" c --tape "$work/tapes"
wait
for n in a b c2; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "node $n failed"; done
grep -q "rejoined the running run as process 1" "$work/c2.txt" || fail "node c did not rejoin"
for f in b.0 c.0 c.1; do [ -s "$work/tapes/$f.tape" ] || fail "no tape $f"; done
grep -q "tape written: .*a.0.v[0-9]*.tape (.*; volumes [1-9][0-9]* to [0-9]* kept" "$work/a.txt" ||
  fail "node a's tape did not rotate: $(grep 'tape written' "$work/a.txt")"
[ ! -e "$work/tapes/a.0.tape" ] || fail "node a's first volume was kept past --tape-max-bytes"
[ "$(ls "$work/tapes"/a.0.v*.tape | wc -l)" = 4 ] || fail "node a kept $(ls "$work/tapes"/a.0.v*.tape | wc -l) volumes, not 4"
grep -q "tape written: .*c.1.tape" "$work/c2.txt" || fail "the restarted node did not close its tape"

"$diloco" replay "$work/tapes" >"$work/replay.txt" 2>&1 || fail "the deployed run did not replay"
grep -q "node c process 0: .*c.0.tape, cut short" "$work/replay.txt" || fail "the killed process's tape not shown as cut"
grep -q "node a process 0: .*a.0.v[0-9]*.tape.*; volumes [1-9][0-9]* to [0-9]* (the earlier ones rotated away" "$work/replay.txt" ||
  fail "node a's window not shown"
grep -q "checkpointed states matched" "$work/replay.txt" || fail "no checkpoint checked in the window"
grep -q "replay matches the recording: 8 actors" "$work/replay.txt" || fail "deployed replay: $(tail -3 "$work/replay.txt")"
# The same from a list of files, and one node's actors alone.
"$diloco" replay "$work/tapes/c.0.tape" "$work/tapes/c.1.tape" --actor 1 >"$work/replay-c.txt" 2>&1 ||
  fail "learner 1's two processes did not replay"
grep -q "replay matches the recording: 1 actor" "$work/replay-c.txt" || fail "learner 1 replay output"

if "$diloco" replay "$work/tapes" --set debug.nondeterministic_learner=0 \
  --set debug.nondeterministic_step=40 >"$work/planted.txt" 2>&1; then
  fail "deployed replay with a planted nondeterminism matched"
fi
grep -q "DIVERGENCE in learner 0 (actor 0)" "$work/planted.txt" || fail "planted divergence: wrong actor"
grep -q "while handling its input [0-9]* (tape event [0-9]* on node b, process 0): timer step_tick" \
  "$work/planted.txt" || fail "planted divergence: wrong host or input"
input=$(sed -n 's/.*while handling its input \([0-9]*\) .*/\1/p' "$work/planted.txt")
"$diloco" replay "$work/tapes" --actor 0 --until "$input" --state-out "$work/l0.state" >"$work/until.txt" 2>&1 ||
  fail "--until $input failed"
step=$(sed -n 's/.*state of learner 0 before input [0-9]*: running, process 0, step \([0-9]*\),.*/\1/p' "$work/until.txt")
[ -n "$step" ] && [ "$step" -ge 40 ] || fail "the divergence (input $input, step '$step') is before the planted step 40"

# One timeline across the nodes: a process per node, flows from each send to its receipt (most
# of them between nodes) that never run backwards, and a ShiViz log whose clocks follow Fidge's
# rules in the order it lists the events.
"$diloco" replay "$work/tapes" --export-only --chrome-trace "$work/t.json" --shiviz "$work/t.log" \
  >"$work/export.txt" 2>&1 || fail "export of the deployed run failed"
"$diloco" replay "$work/tapes" --export-only --chrome-trace "$work/logical.json" --trace-clock logical \
  >"$work/export-logical.txt" 2>&1 || fail "the logical export of the deployed run failed"
python3 - "$work/t.json" "$work/t.log" "$work/logical.json" <<'PY' || fail "merged exports"
import json, re, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
nodes = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
assert nodes == ["node a", "node b", "node c"], nodes
# Real time: each node's clock less its estimated offset from node a's. The three nodes share
# this host's clock, so the offsets come out within the estimate's bound of 0.
clock = trace["otherData"]["clock"]
assert clock.startswith("real time"), clock
for node, off, err in re.findall(r"(\w+): ([-+][\d.]+) ms \+- ([\d.]+) ms", clock):
    assert abs(float(off)) <= float(err) + 1.0 and float(err) < 100, (node, off, err, clock)
assert len(re.findall(r"ms \+-", clock)) == 2, clock
starts = {e["id"]: e for e in events if e["ph"] == "s"}
ends = {e["id"]: e for e in events if e["ph"] == "f"}
assert starts.keys() == ends.keys() and len(ends) > 100, len(ends)
across = sum(starts[k]["pid"] != ends[k]["pid"] for k in ends)
assert across > len(ends) / 2, (across, len(ends))
assert all(starts[k]["ts"] < ends[k]["ts"] for k in ends)
# The run's seconds are seconds on the trace (not microseconds), and where the time went shows
# as spans on every node: inner steps, rounds up to their merges, transfers.
slices = [e["ts"] for e in events if e["ph"] == "X"]
length_s = (max(slices) - min(slices)) / 1e6
assert 1 < length_s < 600, length_s
steps = {e["pid"] for e in events if e.get("cat") == "span" and e["name"] == "inner step"}
assert len(steps) >= 2, steps
assert any(e.get("cat") == "span" and e["name"].startswith("merge v") for e in events)
assert sum(e["ph"] == "b" for e in events) > 100
assert any(e.get("cat") == "process" and e["name"].startswith("restarted: process 1 of node c")
           for e in events)
logical = json.load(open(sys.argv[3]))["otherData"]["clock"]
assert logical.startswith("logical"), logical
lines = open(sys.argv[2]).read().split("\n")
regex = re.compile(lines[0].replace("(?<", "(?P<"))
text = "\n".join(lines[2:])
seen = {}
n = 0
for m in regex.finditer(text):
    host, clock = m.group("host"), json.loads(m.group("clock"))
    assert clock[host] == seen.get(host, 0) + 1, (host, clock)
    seen[host] = clock[host]
    n += 1
assert n > 1000 and any(h.startswith("c:") for h in seen), (n, list(seen)[:4])
PY

# Tapes that do not make one run are refused by name: the same process twice, another run's.
cp "$work/tapes/c.1.tape" "$work/again.tape"
if "$diloco" replay "$work/tapes" "$work/again.tape" >"$work/twice.txt" 2>&1; then fail "a process given twice replayed"; fi
grep -q "record the same process" "$work/twice.txt" || fail "same process twice: $(cat "$work/twice.txt")"
if "$diloco" replay "$work/tapes" "$work/rt.tape" >"$work/other.txt" 2>&1; then fail "another run's tape replayed"; fi
grep -q "is of another run" "$work/other.txt" || fail "another run's tape: $(cat "$work/other.txt")"
echo "deployed replay OK ($(sed -n 's/.*replay matches the recording: //p' "$work/replay.txt"))"
