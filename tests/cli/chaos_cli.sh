#!/bin/bash
# `diloco chaos` on several threads: its cells are independent runs, so the table must be the
# same bit for bit with 1, 2 and 3 threads (each cell writes its own slot; the table is printed
# in order). With --trace (1 and 2 threads) the sweep's trace hash is the same too, and the
# table without it (3 threads, the default) is the traced one. A bad --threads is refused by name.
# usage: chaos_cli.sh PATH/TO/diloco
set -eu
diloco=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
for n in 1 2 3; do
  trace=--trace
  [ $n = 3 ] && trace=
  "$diloco" chaos --log-level error --days 3 --chips 150000,600000,2400000 --learners 2,8 \
    --threads $n $trace >"$work/out-$n" 2>&1 || fail "chaos --threads $n: $(tail -3 "$work/out-$n")"
  grep -q "^diloco chaos: seed 1, $n thread" "$work/out-$n" || fail "the header does not say $n threads"
  grep -v '^diloco chaos: \|^sweep: \|^chaos \|^trace: \|^$' "$work/out-$n" >"$work/table-$n"
  grep -q "Decoupled M=8" "$work/table-$n" || fail "no table with --threads $n"
  grep '^trace: ' "$work/out-$n" >"$work/trace-$n" || true
done
cmp "$work/table-1" "$work/table-2" || fail "2 threads give another table: $(diff "$work/table-1" "$work/table-2")"
cmp "$work/table-1" "$work/table-3" || fail "3 threads without --trace give another table"
grep -q '^trace: [0-9a-f]\{16\} (the 12 runs' "$work/trace-1" || fail "no trace line with --trace: $(cat "$work/out-1")"
cmp "$work/trace-1" "$work/trace-2" || fail "2 threads give another trace: $(cat "$work/trace-1" "$work/trace-2")"
[ -s "$work/trace-3" ] && fail "a trace line without --trace"
if "$diloco" chaos --threads 0 >"$work/bad" 2>&1; then fail "--threads 0 accepted"; fi
grep -q -- "--threads: must be at least 1, got 0" "$work/bad" || fail "unclear error: $(cat "$work/bad")"
echo "chaos OK: the same table with 1, 2 and 3 threads, and the same trace with 1 and 2"
