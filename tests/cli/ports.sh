# Port choice for the tests that listen on loopback. Sourced (POSIX sh); the caller defines
# fail().
#
# Each test has its own window of 1000 ports (its WINDOW number), so tests that ctest runs
# side by side never pick the same port; within the window the start depends on the process
# id, so two suites run at once on one machine rarely meet, and a block that any socket
# already uses (/proc/net/tcp and tcp6, any state) is skipped. All windows are below the
# kernel's ephemeral range (32768 and up), where outgoing connections take their ports.

# ports_in_use LO COUNT: exits 0 if a socket on this machine has a local port in LO..LO+COUNT-1.
ports_in_use() {
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v lo="$1" -v n="$2" '
    function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789ABCDEF", toupper(substr(s, i, 1))) - 1; return v }
    NR > 0 && $2 ~ /:/ { k = split($2, a, ":"); p = hex(a[k]); if (p >= lo && p < lo + n) found = 1 }
    END { exit found ? 0 : 1 }'
}

# pick_ports WINDOW COUNT: sets $base to the first of COUNT consecutive free ports in window
# WINDOW (0..9: ports 20000 + 1000 * WINDOW and up).
pick_ports() {
  slots=$((1000 / $2))
  slot=$((($$ * 7) % slots))
  tries=0
  while :; do
    base=$((20000 + $1 * 1000 + slot * $2))
    ports_in_use $base "$2" || return 0
    tries=$((tries + 1))
    [ $tries -lt $slots ] || fail "no $2 free ports in 20000 + 1000 * $1 and up"
    slot=$(((slot + 1) % slots))
  done
}
