#!/bin/sh
# A deployed run of a large model on loopback (docs/benchmarks.md, "Model size"): the built-in
# MLP grown to HIDDEN x LAYERS (default 4096 x 7, about 100M parameters), 2 learner nodes (b, c)
# and one syncer shard on the leader (a), payloads on the bulk channel, a snapshot every STEPS
# inner steps of the cluster (steps, not seconds: the run is as long in snapshots on a busy
# machine as on an idle one). It measures and checks:
#   - 3 snapshots committed (each one's bytes and write rate, as the leader prints them);
#   - node c killed with SIGKILL after the third, and started again: the seconds from its
#     command to "rejoined from the global model" (the pull of every fragment included);
#   - the run completing with its invariants, nothing left as a .tmp file, no snapshot given up
#     but one whose cut spans the kill;
#   - `--resume` from the newest snapshot: the shard starts from its part (versions past the
#     initial model), the learners pull, the run completes again.
# Labelled scale: about 15 minutes and 6 GB of snapshots at 100M on a 2-core machine.
#
# Usage: bench/scale_deploy.sh [--hidden H] [--layers L] [--budget TOKENS] [--snapshot-steps STEPS]
#        (the binary: $DILOCO or build/apps/diloco; the work directory: $SCALE_DIR or /tmp)
set -eu
cd "$(dirname "$0")/.."
diloco=${DILOCO:-build/apps/diloco}
hidden=4096 layers=7 budget=24576 snap_steps=64
while [ $# -gt 0 ]; do
  case $1 in
    --hidden) hidden=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --snapshot-steps) snap_steps=$2; shift 2 ;;
    *) echo "bench/scale_deploy.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$diloco" ] || { echo "bench/scale_deploy.sh: '$diloco' is not built" >&2; exit 2; }
work=$(mktemp -d "${SCALE_DIR:-/tmp}/scale-deploy.XXXXXX")
openssl rand -hex 32 >"$work/secret"
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -25; done >&2; exit 1; }
ts=${DILOCO_TIME_SCALE:-1}
. tests/cli/ports.sh
pick_ports 9 6
. tests/cli/node_lib.sh
# Long waits: a snapshot or a pull of a large model takes tens of seconds here.
await_long() {  # await_long FILE PATTERN SECONDS [LEADER]: fails early if the leader (a1) has exited
  i=0
  leader=${4:-a1}
  until grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le $(($3 * 10)) ] || fail "no '$2' in $1 within $3 s"
    [ ! -s "$work/$leader.rc" ] || fail "the run ended before '$2' appeared in $1 (a longer --budget?)"
    sleep 0.1
  done
}
cat >"$work/c.yaml" <<YAML
learners: 2
shards: 1
token_budget: $budget
period_steps: 8
model: {hidden: $hidden, hidden_layers: $layers}
data: {eval_tokens: 1024}
secret_file: $work/secret
snapshot: {dir: $work/snaps, every_steps: $snap_steps}
nodes:
  - {name: a, host: 127.0.0.1, port: $base}
  - {name: b, host: 127.0.0.1, port: $((base + 2))}
  - {name: c, host: 127.0.0.1, port: $((base + 4))}
placement:
  learners: [b, c]
  shards: [a]
YAML
node() { n=$1 o=$2; shift 2; start_node "$o" "$work/c.yaml" "$n" --peer-timeout 30 "$@"; }
now() { date +%s.%N; }
echo "bench/scale_deploy.sh: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(date -u +%Y-%m-%d); MLP $hidden x $layers, budget $budget tokens, a snapshot every $snap_steps steps"

t0=$(now)
node a "$work/a1" --run-timeout 3600
node b "$work/b1"
node c "$work/c1"
await_long "$work/a1.txt" "nodes wired: starting" 600
await_long "$work/a1.txt" "snapshot 3 committed" 1800
sed -n 's/^node a: \(snapshot [0-9]* committed.*\)/  \1/p' "$work/a1.txt"
params=$(sed -n 's/.* \([0-9,]*\) parameters.*/\1/p' "$work/a1.txt" | head -1)
[ -z "$params" ] || echo "  parameters: $params"
# Each node's peak resident memory so far (3 snapshots taken).
rss_line=""
for n in a1 b1 c1; do
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$(cat "$work/$n.pid")/status" 2>/dev/null || echo 0)
  rss_line="$rss_line ${n%1} $(awk -v k="$hwm" 'BEGIN { printf "%.2f GB", k / 1e6 }')"
done
echo "  peak RSS after 3 snapshots:$rss_line"

# Node c (learner 1) killed, then started again once the leader has noticed.
kill -9 "$(cat "$work/c1.pid")"
await_long "$work/a1.txt" "node c went away" 120
t_restart=$(now)
node c "$work/c2"
await_long "$work/c2.txt" "rejoined from the global model" 1200
t_back=$(now)
rejoin=$(awk -v r="$t_restart" -v b="$t_back" 'BEGIN { printf "%.1f", b - r }')
echo "  rejoin: node c training again $rejoin s after its command (the pull of the global model included)"
wait
for n in a1 b1 c2; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "node $n exited $(cat "$work/$n.rc")"; done
grep -q "invariants held" "$work/a1.txt" || fail "the run's invariants"
# A snapshot whose cut spans the kill is given up (the dead process's markers never come);
# none before it may be.
before=$(sed -n '1,/node c went away/p' "$work/a1.txt" | grep -c "given up" || true)
[ "$before" = 0 ] || fail "a snapshot was given up before the kill: $(grep "given up" "$work/a1.txt" | head -1)"
given_up=$(grep -c "given up" "$work/a1.txt" || true)
left=$(find "$work/snaps" -name '*.tmp*' | wc -l)
[ "$left" = 0 ] || fail "$left .tmp files left in the snapshot directory"
t1=$(now)
echo "  run: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s, $(grep -c "committed" "$work/a1.txt") snapshots committed, $given_up given up across the kill, no .tmp left"

# The whole run resumed from the newest snapshot, the leader's peak memory read until it ends.
hwm_until_exit() {  # hwm_until_exit NAME: the node's peak RSS in kB, into $work/NAME.hwm
  i=0
  until [ -s "$work/$1.pid" ] || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
  pid=$(cat "$work/$1.pid")
  while kill -0 "$pid" 2>/dev/null; do
    awk '/VmHWM/ {print $2}' "/proc/$pid/status" >"$work/$1.hwm.new" 2>/dev/null &&
      [ -s "$work/$1.hwm.new" ] && mv "$work/$1.hwm.new" "$work/$1.hwm"
    sleep 0.2
  done
}
t2=$(now)
node a "$work/a2" --run-timeout 3600 --resume "$work/snaps"
hwm_until_exit a2 &
node b "$work/b2"
node c "$work/c2r"
# What the leader holds once its shard has loaded its part (before the run's next snapshot).
await_long "$work/a2.txt" "recovered at versions" 600 a2
started_rss=$(awk '/VmRSS/ { printf "%.2f GB", $2 / 1e6 }' "/proc/$(cat "$work/a2.pid")/status" 2>/dev/null || echo "?")
wait
for n in a2 b2 c2r; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "resumed: node $n exited $(cat "$work/$n.rc")"; done
from=$(sed -n 's/.*resuming from \([^ ]*\) (snapshot.*/\1/p' "$work/a2.txt")
[ -n "$from" ] || fail "resumed: no 'resuming from' line"
line=$(grep "^shard 0: process 1 (restarted), recovered at versions .* from snapshot" "$work/a2.txt") ||
  fail "resumed: the shard did not start from the snapshot"
grep -q "invariants held" "$work/a2.txt" || fail "resumed: invariants"
t3=$(now)
echo "  resume: from $(basename "$from"), $(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.0f", b - a }') s to the end; $line"
echo "  resumed leader: RSS $started_rss once its shard had loaded its part; peak RSS $(awk '{ printf "%.2f GB", $1 / 1e6 }' "$work/a2.hwm" 2>/dev/null) (the resumed run's snapshots included)"
echo "scale_deploy OK"
