# Port choice for the tests that listen on loopback, and the clean-up of what they started.
# Sourced (POSIX sh); the caller defines fail().
#
# Each test has its own window of 1000 ports (its WINDOW number; a few tests share one), and
# within the window the start depends on the process id. A block is taken only when no socket
# on this machine uses any of its ports (/proc/net/tcp and tcp6, any state) and no test still
# running holds it: a test's block is written, with its process id, to a registry in /tmp (one
# per user) that every pick reads and rewrites under a file lock. A socket is seen only once
# its node binds, seconds after the pick on a busy machine; the registry covers that gap, for
# tests of one suite side by side and for two suites at once. All windows are below the
# kernel's ephemeral range (32768 and up), where outgoing connections take their ports.

# ports_in_use LO COUNT: exits 0 if a socket on this machine has a local port in LO..LO+COUNT-1.
ports_in_use() {
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v lo="$1" -v n="$2" '
    function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789ABCDEF", toupper(substr(s, i, 1))) - 1; return v }
    NR > 0 && $2 ~ /:/ { k = split($2, a, ":"); p = hex(a[k]); if (p >= lo && p < lo + n) found = 1 }
    END { exit found ? 0 : 1 }'
}

# ports_held LO COUNT: exits 0 if a block in $held (lines "LO COUNT PID") overlaps LO..LO+COUNT-1.
ports_held() {
  printf '%s' "$held" | awk -v lo="$1" -v n="$2" '
    NF == 3 && $1 < lo + n && lo < $1 + $2 { found = 1 }
    END { exit found ? 0 : 1 }'
}

# pick_ports WINDOW COUNT: sets $base to the first of COUNT consecutive free ports in window
# WINDOW (0..9: ports 20000 + 1000 * WINDOW and up), held for this test until its shell exits.
pick_ports() {
  slots=$((1000 / $2))
  slot=$((($$ * 7) % slots))
  registry=
  held=
  if command -v flock >/dev/null 2>&1; then
    registry=/tmp/diloco-test-ports-$(id -u)
    exec 9>>"$registry.lock"
    flock -w 120 9 || fail "the port registry $registry.lock stayed locked for 120 s"
    # The blocks of tests still running (a process gone frees its block).
    if [ -f "$registry" ]; then
      while read -r lo n pid; do
        [ -d "/proc/$pid" ] && held="$held$lo $n $pid
"
      done <"$registry"
    fi
  fi
  tries=0
  while :; do
    base=$((20000 + $1 * 1000 + slot * $2))
    ports_in_use $base "$2" || ports_held $base "$2" || break
    tries=$((tries + 1))
    [ $tries -lt $slots ] || fail "no $2 free ports in 20000 + 1000 * $1 and up"
    slot=$(((slot + 1) % slots))
  done
  if [ -n "$registry" ]; then
    printf '%s%s %s %s\n' "$held" "$base" "$2" "$$" >"$registry.$$" && mv "$registry.$$" "$registry"
    exec 9>&-
  fi
}

# stop_jobs (in a test's EXIT trap): kills the test's background jobs and everything they
# started, deepest first: a node under `( ... ) &` or an island's torchrun agent and its ranks
# run on after the subshell that started them is killed. `jobs -p` is written to a file, not
# read through $( ): dash runs a command substitution in a subshell, which has no jobs. The
# trap says `stop_jobs 2>/dev/null || true`: a test that exits before it sourced this file has
# no jobs, and its exit code (77 for a skip) must stay its own.
kill_tree() {
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -9 "$1" 2>/dev/null || true
}
stop_jobs() {
  jobs_file=$(mktemp) || return 0
  jobs -p >"$jobs_file"
  for job in $(cat "$jobs_file"); do kill_tree "$job"; done
  rm -f "$jobs_file"
}
