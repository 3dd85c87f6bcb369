#!/bin/sh
# Bad cluster files and flag sets: every one is refused before anything runs, with exit code 2
# and an error that names the file, the line and the key (flags: the key). Each file in
# bad_configs/ says what its error must match on its first line (`# expect: REGEX`, matched
# after "FILE:LINE"); bad_flags.txt holds `REGEX<TAB>FLAGS` lines. A case that hangs (the old
# failure for times like 1e300 or 1e-300) is stopped after 10 s and fails; the slowest case is
# printed (about 0.01 s each here).
# usage: config_corpus_cli.sh PATH/TO/diloco
set -eu
ts=${DILOCO_TIME_SCALE:-1}  # timeouts scale (a sanitizer build runs slower)
diloco=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0 cases=0 slowest=0 slowest_name=""
now_ms() { date +%s%3N; }
check() {  # check NAME REGEX CMD...: exit 2 and stderr matching REGEX
  name=$1 regex=$2
  shift 2
  cases=$((cases + 1))
  t0=$(now_ms)
  set +e
  timeout $((10 * ts)) "$@" >"$work/out.txt" 2>"$work/err.txt"
  rc=$?
  set -e
  took=$(($(now_ms) - t0))
  if [ "$took" -gt "$slowest" ]; then slowest=$took slowest_name=$name; fi
  if [ $rc != 2 ] || ! grep -Eq -- "$regex" "$work/err.txt"; then
    echo "FAILED: $name: exit $rc (expected 2), stderr: $(cat "$work/err.txt")" >&2
    echo "  expected to match: $regex" >&2
    failed=$((failed + 1))
  fi
}
for f in "$here"/bad_configs/*.yaml; do
  name=$(basename "$f" .yaml)
  expect=$(sed -n '1s/^# expect: //p' "$f")
  [ -n "$expect" ] || { echo "FAILED: $f has no '# expect:' line" >&2; exit 1; }
  # The error starts with the file's path and line: FILE:LINE[:COLUMN]: key: ...
  check "$name" "^diloco simulate: $f$expect" "$diloco" simulate --cluster "$f" --print-config
done
tab=$(printf '\t')
while IFS="$tab" read -r expect flags; do
  [ -n "$flags" ] || continue
  # shellcheck disable=SC2086
  check "flags: $flags" "$expect" "$diloco" simulate $flags --print-config
done <"$here/bad_flags.txt"
[ "$cases" -ge 60 ] || { echo "FAILED: only $cases cases" >&2; exit 1; }
[ "$failed" = 0 ] || { echo "FAILED: $failed of $cases bad configurations were not refused as expected" >&2; exit 1; }
echo "config corpus: all $cases bad configurations refused with exit 2, naming file, line and key (slowest: $slowest_name, ${slowest} ms)"
