#!/bin/bash
# The shipped alerting rules (docs/alerts.rules.yml) as a Prometheus server uses them:
# `promtool check rules` accepts them, `promtool test rules` exercises each on recorded series
# (tests/prometheus/alerts_test.yml), and a real Prometheus server (Debian's `prometheus`),
# started here on loopback, scrapes a live simulation in which two of four learners die for
# good under quorum 3, evaluates the rules, and fires DilocoPartition (critical); the test
# reads the firing alert back through the server's HTTP API.
# usage: alerts_cli.sh PATH/TO/diloco SOURCE_DIR
set -eu
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
src=$2
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; tail -20 "$work"/*.txt >&2 2>/dev/null || true; exit 1; }
command -v prometheus >/dev/null && command -v promtool >/dev/null || {
  echo "prometheus and promtool are not installed (scripts/install-deps.sh --test): skipped"
  exit 77
}
. "$(dirname "$0")/ports.sh"
pick_ports 8 2
metrics_port=$base
prom_port=$((base + 1))

promtool check rules "$src/docs/alerts.rules.yml" >"$work/check.txt" 2>&1 || fail "promtool check rules"
promtool test rules "$src/tests/prometheus/alerts_test.yml" >"$work/unit.txt" 2>&1 || fail "promtool test rules"

# GET URL -> the body (python3: no curl on a minimal Debian).
get() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"
}

# The run: learners 2 and 3 die at 100 s and never come back (their restart is due long after
# the run's end); quorum 3, so M - K = 1 and the merges lack 2. It keeps serving its final
# metrics for as long as the test needs them.
"$diloco" simulate --set token_budget=192000 --quorum 3 --failures 2@100+1e6,3@100+1e6 \
  --metrics-port "$metrics_port" --metrics-linger $((300 * ts)) --log-level error >"$work/sim.txt" 2>&1 &
sim=$!

cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $src/docs/alerts.rules.yml
scrape_configs:
  - job_name: diloco
    static_configs:
      - targets: ['127.0.0.1:$metrics_port']
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.txt" 2>&1 &
prom=$!
api="http://127.0.0.1:$prom_port/api/v1"

# Wait (bounded, on conditions) for the server to scrape the run, then for the alert.
deadline=$((SECONDS + 240 * ts))
until get "$api/query?query=diloco_run_info" 2>/dev/null | grep -q '"seed":"1"'; do
  kill -0 $prom 2>/dev/null || fail "prometheus exited"
  kill -0 $sim 2>/dev/null || fail "simulate exited before it was scraped"
  [ $SECONDS -lt $deadline ] || fail "prometheus never scraped the run"
  sleep 0.5
done
get "$api/query?query=diloco_run_info" >"$work/info.json"
until get "$api/alerts" >"$work/alerts.json" 2>/dev/null &&
  python3 - "$work/alerts.json" "$work/info.json" <<'PY'
import json, sys
alerts = json.load(open(sys.argv[1]))["data"]["alerts"]
run_id = json.load(open(sys.argv[2]))["data"]["result"][0]["metric"]["run_id"]
firing = [a for a in alerts if a["labels"]["alertname"] == "DilocoPartition" and a["state"] == "firing"]
if not firing: sys.exit(1)
a = firing[0]
assert a["labels"]["severity"] == "critical", a
assert a["labels"]["job"] == "diloco", a
assert a["labels"]["run_id"] == run_id and len(run_id) == 16, (a, run_id)  # the run's identity
assert float(a["value"]) == 2, a
assert "2 learners missing" in a["annotations"]["summary"], a
print("firing:", a["labels"]["alertname"], a["labels"]["severity"], a["annotations"]["summary"])
PY
do
  kill -0 $prom 2>/dev/null || fail "prometheus exited"
  kill -0 $sim 2>/dev/null || fail "simulate exited before the alert fired"
  [ $SECONDS -lt $deadline ] || fail "DilocoPartition never fired: $(cat "$work/alerts.json")"
  sleep 0.5
done
# The learners' own state, as the server has it: 2 and 3 down, 0 and 1 up.
get "$api/query?query=diloco_learner_up" >"$work/up.json"
python3 - "$work/up.json" <<'PY' || fail "diloco_learner_up as Prometheus has it"
import json, sys
r = {x["metric"]["learner"]: x["value"][1] for x in json.load(open(sys.argv[1]))["data"]["result"]}
assert r == {"0": "1", "1": "1", "2": "0", "3": "0"}, r
PY
# A run's own table lists every slot, those without a process at the end too (the same
# failures, in a short run of its own: the one above keeps serving until the test ends).
"$diloco" simulate --set token_budget=64000 --failures 2@30+1e6,3@30+1e6 --log-level error \
  >"$work/table.txt" 2>&1 || fail "the short run with two learners lost"
grep -q '2 kills, 0 restarts' "$work/table.txt" || fail "the summary does not count the 2 kills"
for l in 2 3; do
  grep -Eq "^ +$l +[0-9.]+[kM]? +[0-9]+ +- .*no process at the end\$" "$work/table.txt" ||
    fail "learner $l has no row in the learner table: $(cat "$work/table.txt")"
done
rows=$(awk '/learners:$/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {print $1}' "$work/table.txt" | tr '\n' ' ')
[ "$rows" = "0 1 2 3 " ] || fail "learner table rows '$rows', expected 0 1 2 3 in order"
echo "alerting rules OK (promtool check and test; a live Prometheus fired DilocoPartition)"
