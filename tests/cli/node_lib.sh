# Helpers for the deployment tests that start, kill and restart `diloco node` processes.
# Sourced (POSIX sh); the caller sets $diloco and $ts (the timeout scale) and defines fail().

# start_node OUT FILE NAME [flags]: `diloco node --cluster FILE --name NAME` in the background;
# its output goes to OUT.txt, its pid to OUT.pid (for kill -9), its exit code to OUT.rc.
start_node() {
  out=$1 file=$2 name=$3
  shift 3
  # shellcheck disable=SC2016
  ( if sh -c 'echo $$ >"$0"; exec "$@"' "$out.pid" "$diloco" node --cluster "$file" \
      --name "$name" --connect-timeout $((20 * ts)) "$@" >"$out.txt" 2>&1; then echo 0; else echo $?; fi \
      >"$out.rc" ) &
}

# await_file FILE: until FILE exists and is not empty (at most 20 s).
await_file() {
  i=0
  until [ -s "$1" ]; do
    i=$((i + 1))
    [ $i -le $((200 * ts)) ] || fail "$1 did not appear within $((20 * ts)) s"
    sleep 0.1
  done
}

# await FILE PATTERN [SECONDS]: until FILE has a line matching PATTERN (at most SECONDS, 20).
await() {
  i=0
  until grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le $((10 * ${3:-20} * ts)) ] || fail "no '$2' in $1 within $((${3:-20} * ts)) s"
    sleep 0.1
  done
}

# await_more FILE PATTERN N: until FILE has more than N lines matching PATTERN (at most 20 s).
await_more() {
  i=0
  until [ "$(grep -c "$2" "$1" 2>/dev/null)" -gt "$3" ]; do
    i=$((i + 1))
    [ $i -le $((200 * ts)) ] || fail "no more than $3 lines '$2' in $1 within $((20 * ts)) s"
    sleep 0.1
  done
}

# loopback_cluster FILE PORT BUDGET MODEL [extra yaml]: the three-node loopback cluster the
# deployment tests share: learners 0 and 1 on nodes b and c, both shards on node a, ports from
# PORT; MODEL is the model section (a flow mapping); $work/secret is the shared secret.
loopback_cluster() {
  cat >"$1" <<YAML
learners: 2
shards: 2
token_budget: $3
speed: {step_time_s: 0.004}
model: $4
secret_file: $work/secret
nodes:
  - {name: a, host: 127.0.0.1, port: $2}
  - {name: b, host: 127.0.0.1, port: $(($2 + 2))}
  - {name: c, host: 127.0.0.1, port: $(($2 + 4))}
placement:
  learners: [b, c]
  shards: [a, a]
${5:-}
YAML
}
