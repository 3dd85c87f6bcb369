#!/bin/sh
# The snapshot workflow through the command line, as a user runs it: a run stopped after a
# snapshot and resumed ends exactly as the run that was never stopped; `diloco inspect` lists
# and checks snapshots; a damaged newest snapshot is reported and resume falls back.
# usage: snapshot_cli.sh PATH/TO/diloco
set -eu
diloco=$1
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
small="--budget 64000 --set model.hidden=32 --set model.embed_dim=8"
fail() { echo "FAILED: $*" >&2; exit 1; }
trace_of() { sed -n 's/.*trace \([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -1; }

# shellcheck disable=SC2086
"$diloco" simulate $small >"$work/full.txt" 2>&1
full=$(trace_of "$work/full.txt")
[ -n "$full" ] || fail "no trace hash in the uninterrupted run's output"

# shellcheck disable=SC2086
"$diloco" simulate $small --snapshot-dir "$work/snaps" --snapshot-every 20 --stop-after-snapshot 3 \
  >"$work/stopped.txt" 2>&1
grep -q "stopped after snapshot 3" "$work/stopped.txt" || fail "the run did not stop after snapshot 3"

"$diloco" inspect "$work/snaps" >"$work/list.txt" || fail "inspect of good snapshots failed"
grep -q "3 usable" "$work/list.txt" || fail "inspect does not list 3 usable snapshots: $(cat "$work/list.txt")"
"$diloco" inspect "$work/snaps" --snapshot 2 >"$work/two.txt" || fail "inspect --snapshot 2 failed"
grep -q "every file checks out" "$work/two.txt" || fail "snapshot 2 does not check out"
[ "$(grep -c ' OK ' "$work/two.txt")" -ge 10 ] || fail "inspect shows fewer than 10 intact actor files"

# Resuming a copy writes into the copy, never into the directory its manifests name (the
# original's snapshots would be pruned).
cp -r "$work/snaps" "$work/copy"
before=$(ls "$work/snaps")
"$diloco" simulate --resume "$work/copy" >"$work/copy.txt" 2>&1
[ "$(ls "$work/snaps")" = "$before" ] || fail "resuming a copy changed the original: $(ls "$work/snaps")"
[ "$(ls "$work/copy" | sort | tail -1)" != "$(echo "$before" | sort | tail -1)" ] ||
  fail "the resumed copy wrote no snapshot"
[ "$(trace_of "$work/copy.txt")" = "$full" ] || fail "the resumed copy ended differently"

"$diloco" simulate --resume "$work/snaps" >"$work/resumed.txt" 2>&1
grep -q "resuming from .*snapshot-000003" "$work/resumed.txt" || fail "did not resume from snapshot 3"
[ "$(trace_of "$work/resumed.txt")" = "$full" ] || fail "resumed trace $(trace_of "$work/resumed.txt") != $full"

# Damage the newest snapshot (the resumed run wrote more): inspect names it, resume skips it.
newest=$(ls -d "$work"/snaps/snapshot-* | sort | tail -1)
: >"$newest/actor-00002.dlsa"
if "$diloco" inspect "$newest" >"$work/bad.txt"; then fail "inspect of a damaged snapshot succeeded"; fi
grep -q "actor-00002.dlsa: 0 bytes" "$work/bad.txt" || fail "inspect does not name the damaged file"
"$diloco" simulate --resume "$work/snaps" >"$work/fallback.txt" 2>&1
grep -q "skipping .*actor-00002.dlsa" "$work/fallback.txt" || fail "resume did not say it skipped the damaged snapshot"
[ "$(trace_of "$work/fallback.txt")" = "$full" ] || fail "the fallback resume ended differently"

# A configuration that differs from the snapshot's is refused by name.
if "$diloco" simulate --resume "$work/snaps" --learners 3 >"$work/other.txt" 2>&1; then
  fail "resume with another configuration succeeded"
fi
grep -q "learners" "$work/other.txt" || fail "the refusal does not name the key: $(cat "$work/other.txt")"
echo "snapshot workflow OK (trace $full)"
