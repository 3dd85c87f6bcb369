#!/bin/sh
# The leader of a deployed run killed with SIGKILL mid-run, and the whole run resumed from its
# newest intact snapshot. The other nodes stop naming the leader. Started again with
# `--resume DIR` on the leader (the newest snapshot damaged: it is skipped, and said so), the
# shards start from their parts of the snapshot (versions past the initial model), the
# learners pull the global model, and the token count goes on from the snapshot's, so the
# learners' new work is what was left of the budget, not all of it.
# usage: resume_cli.sh PATH/TO/diloco
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -30; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 3 30
# A sanitizer build (DILOCO_TIME_SCALE 4) trains about 50x slower with a snapshot every second:
# the run shrinks with the square of the scale so that it ends within its timeout.
budget=$((9000000 / (ts * ts)))

# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
loopback_cluster "$work/c.yaml" $base $budget "{hidden: 32, embed_dim: 8}" \
  "snapshot: {dir: $work/snaps, every_s: 1}"
node() { n=$1 o=$2; shift 2; start_node "$o" "$work/c.yaml" "$n" "$@"; }  # node NAME OUT [flags]

node a "$work/a1" --run-timeout $((60 * ts))
node b "$work/b1"
node c "$work/c1"
await "$work/a1.txt" "snapshot 3 committed"
kill -9 "$(cat "$work/a1.pid")" 2>/dev/null || {
  wait
  fail "the leader had ended before it was killed (exit $(cat "$work/a1.rc"))"
}
wait
for n in b1 c1; do
  [ "$(cat "$work/$n.rc")" != 0 ] || fail "node $n went on although the leader was gone"
  # The kill shows as a closed connection, or (on a slow machine) as heartbeats missed first.
  grep -q "node a went away\|node a did not answer a heartbeat" "$work/$n.txt" ||
    fail "node $n did not name the leader"
done

# Without --resume on the leader, a resume elsewhere is refused by name.
if "$diloco" node --cluster "$work/c.yaml" --name b --resume "$work/snaps" >"$work/wrong.txt" 2>&1; then
  fail "--resume on a node that does not lead was accepted"
fi
grep -q "only the leader (node a) resumes a run" "$work/wrong.txt" || fail "no reason for the refusal"

# The most recently written complete snapshot is damaged (its metrics file cut to nothing):
# resume says it skips it and takes the one before. (The next one may have been begun, without
# its MANIFEST, when the leader was killed.)
newest=$(ls -td "$work"/snaps/snapshot-*/MANIFEST | head -1)
newest=${newest%/MANIFEST}
: >"$newest/actor-00005.dlsa"
node a "$work/a2" --run-timeout $((60 * ts)) --resume "$work/snaps"
node b "$work/b2"
node c "$work/c2"
wait
for n in a2 b2 c2; do [ "$(cat "$work/$n.rc")" = 0 ] || fail "resumed: node $n failed"; done
grep -q "skipping $newest.*actor-00005.dlsa" "$work/a2.txt" || fail "resume did not say it skipped $newest"
used=$(sed -n 's/.*resuming from \([^ ]*\) (snapshot.*/\1/p' "$work/a2.txt")
[ -n "$used" ] && [ "$used" != "$newest" ] || fail "resumed from '$used', not from the one before $newest"
grep -q "resuming from $work/snaps/snapshot-00000[2-9]" "$work/a2.txt" ||
  fail "the leader did not resume from the newest intact snapshot (2 or later)"
grep -q "invariants held" "$work/a2.txt" || fail "resumed: invariants"
# The resumed run's snapshots are numbered above every one in the directory: the restored actors
# take part in each (none given up), and no number is used twice (no ".1" directory).
if grep -q "given up" "$work/a2.txt"; then fail "resumed: $(grep "given up" "$work/a2.txt" | head -1)"; fi
old_max=$(basename "$newest" | sed 's/snapshot-0*//')
first=$(sed -n 's/^node a: snapshot \([0-9]*\) committed.*/\1/p' "$work/a2.txt" | head -1)
[ -n "$first" ] && [ "$first" -gt "$old_max" ] ||
  fail "resumed: its first snapshot is ${first:-none}, not above $old_max"
if ls -d "$work"/snaps/snapshot-*.* >/dev/null 2>&1; then fail "resumed: a snapshot number was used twice"; fi
for s in 0 1; do
  line=$(grep "^shard $s: process 1 (restarted), recovered at versions .* from snapshot" "$work/a2.txt") ||
    fail "resumed: shard $s did not start from the snapshot"
  echo "$line" | sed -n 's/.*recovered at versions \[\([^]]*\)\].*/\1/p' | tr ',' '\n' |
    awk '$1 > 0 { n++ } END { exit !(n > 0) }' || fail "resumed: shard $s at the initial model: $line"
  # The learners count their steps anew: a filter taken from the snapshot dropped their sends.
  echo "$line" | grep -q "(0 sends dropped as repeats)" || fail "resumed: sends dropped: $line"
done
# The learners' new work: the budget less what the snapshot had counted (in k or M tokens).
new=$(sed -n 's/^learner [0-9]*: process 1 (restarted), \([0-9.]*\)\([kM]\) tokens.*/\1 \2/p' "$work/a2.txt" |
  awk '{ t += $1 * ($2 == "M" ? 1e6 : 1e3) } END { printf "%.0f", t }')
# What the snapshot had counted ("the count goes on from 3.19M tokens"): more than nothing, and
# with the new work it makes the budget (the last steps of the learners may pass it a little).
from=$(sed -n 's/.*the count goes on from \([0-9.]*\)\([kM]\) tokens.*/\1 \2/p' "$work/a2.txt" |
  awk '{ printf "%.0f", $1 * ($2 == "M" ? 1e6 : 1e3) }')
awk -v n="$new" -v f="$from" -v b=$budget 'BEGIN { exit !(n > 0 && f > 0 && n + f > 0.97 * b && n + f < 1.05 * b) }' ||
  fail "resumed: the learners processed $new new tokens after the snapshot's ${from:-?} of the $budget budget (the count did not go on)"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a2.txt")
awk -v l="$loss" 'BEGIN { exit !(l > 1.6 && l < 2.6) }' || fail "resumed: eval loss $loss"
echo "resume workflow OK (damaged $(basename "$newest") skipped, resumed from $(basename "$used"), $new new tokens of $budget, eval $loss)"
