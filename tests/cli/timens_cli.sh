#!/bin/sh
# Hosts with different clocks: a deployed run where one learner's node runs in a Linux time
# namespace whose monotonic clock is 100000 s ahead (as a host that booted a day earlier).
# Times cross hosts (the schedule's epoch, delta deadlines, stamps), so the actors must use a
# time base the hosts share: with each host's steady clock, this run ended at eval loss 11.3
# instead of 1.95. Needs `unshare --time` (root, Linux >= 5.6); exits 77 (skipped) without it.
# usage: timens_cli.sh PATH/TO/diloco
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
if ! unshare --time --fork --monotonic 100000 true 2>/dev/null; then
  echo "skipped: unshare --time is not allowed here"; exit 77
fi
work=$(mktemp -d)
openssl rand -hex 32 >"$work/secret"  # the run's shared secret (plain TCP needs one)
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do echo "== $f"; cat "$f"; done >&2; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 4 30
# shellcheck source=tests/cli/node_lib.sh
. "$(dirname "$0")/node_lib.sh"
# A sanitizer build (DILOCO_TIME_SCALE 4) trains tens of times slower: a shorter run there.
loopback_cluster "$work/c.yaml" $base $((4000000 / (ts * ts))) "{hidden: 32, embed_dim: 8}"
"$diloco" node --cluster "$work/c.yaml" --name a --connect-timeout $((20 * ts)) --run-timeout $((60 * ts)) \
  >"$work/a.txt" 2>&1 &
"$diloco" node --cluster "$work/c.yaml" --name b --connect-timeout $((20 * ts)) >"$work/b.txt" 2>&1 &
unshare --time --fork --monotonic 100000 \
  "$diloco" node --cluster "$work/c.yaml" --name c --connect-timeout $((20 * ts)) >"$work/c.txt" 2>&1 &
wait
grep -q "invariants held" "$work/a.txt" || fail "the run did not end with its invariants held"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/a.txt")
# The shorter run of a sanitizer build ends higher (about 2.7); hosts' own clocks give 11.3.
# A real-time run's loss follows how its learners got the CPU: 1.96-2.41 in six runs of a clean
# clone on an idle machine (2.41 failed the bound of 2.4 it had), so the bound sits well above
# that and far below the failure it is for.
hi=3.0
[ "$ts" = 1 ] || hi=3.5
awk -v l="$loss" -v hi="$hi" 'BEGIN { exit !(l > 1.6 && l < hi) }' ||
  fail "eval loss $loss with node c's clock 100000 s ahead (about 1.95 with equal clocks)"
echo "time namespace OK (eval loss $loss with node c's monotonic clock 100000 s ahead)"
