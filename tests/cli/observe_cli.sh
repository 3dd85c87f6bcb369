#!/bin/bash
# Observability as a user sees it: a simulation serves /metrics while it runs; promtool (the
# Prometheus project's own checker) parses and lints what it serves; /status is JSON; the run
# directory gets its JSON lines and summary; `diloco report` writes the HTML page, and
# headless Chromium renders it: every plot has laid-out series (checked by a script run in
# the rendered page), and a screenshot is saved next to the report (a CI artifact).
# usage: observe_cli.sh PATH/TO/diloco [RUN_DIR to keep]
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
work=$(mktemp -d)
run=${2:-$work/run}
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
fail() { echo "FAILED: $*" >&2; cat "$work"/*.txt >&2 2>/dev/null || true; exit 1; }
. "$(dirname "$0")/ports.sh"
pick_ports 7 1
port=$base

get() {  # get PATH -> the response body on stdout
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

rm -rf "$run"
"$diloco" simulate --set token_budget=256000 --compare dp --run-dir "$run" --metrics-port "$port" \
  --metrics-linger 30 >"$work/sim.txt" 2>&1 &
sim=$!
# Scrape while it runs (and, once it is done, during the linger).
for i in $(seq 1 100); do
  if get /metrics >"$work/metrics.prom" 2>/dev/null && grep -q '^diloco_tokens_total [1-9]' "$work/metrics.prom"; then
    break
  fi
  sleep 0.2
done
grep -q '^diloco_tokens_total [1-9]' "$work/metrics.prom" || fail "no live metrics served"
promtool check metrics <"$work/metrics.prom" >"$work/promtool.txt" 2>&1 || fail "promtool rejects /metrics"
get /status >"$work/status.json"
grep -q '"learners":\[{' "$work/status.json" || fail "/status has no learners"
get /nowhere | grep -q "not found" || fail "an unknown path is not a 404"
# The run ends; its directory has the metrics of both systems and the summary.
while [ ! -f "$run/summary.json" ]; do kill -0 $sim 2>/dev/null || fail "simulate died"; sleep 0.2; done
[ -s "$run/metrics.jsonl" ] && [ -s "$run/metrics-dp.jsonl" ] || fail "no metrics files"
get /metrics | promtool check metrics >/dev/null 2>&1 || fail "promtool rejects the final metrics"
kill $sim 2>/dev/null || true
wait $sim 2>/dev/null || true

"$diloco" report "$run" >"$work/report.txt" || fail "diloco report failed"
grep -q "report written: $run/report.html (6 plots, 2 systems)" "$work/report.txt" || fail "unexpected report: $(cat "$work/report.txt")"
# A bad run directory is an error that names the file.
if "$diloco" report "$work" >"$work/bad.txt" 2>&1; then fail "report of a directory without a run"; fi
grep -q "summary.json: cannot be read" "$work/bad.txt" || fail "the error does not name the file"

# Render in Chromium. A copy of the report with a checking script: for every plot, the
# laid-out size of each series; the results go into the DOM that --dump-dom prints.
sed 's|</body>|<script>const out=[];for(const svg of document.querySelectorAll("svg.plot")){const r=svg.getBoundingClientRect();const names=new Set();let drawn=0;for(const s of svg.querySelectorAll(".series")){const b=s.getBBox();if(b.width>0\|\|b.height>0){drawn++;names.add(s.dataset.name)}}out.push(svg.id+" "+Math.round(r.width)+"x"+Math.round(r.height)+" drawn="+drawn+" series="+[...names].slice(0,6).join("\|"))}const p=document.createElement("pre");p.id="check";p.textContent=out.join("\\n");document.body.appendChild(p);</script></body>|' \
  "$run/report.html" >"$work/check.html"
chrome="chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars"
timeout $((120 * ts)) $chrome --dump-dom "file://$work/check.html" >"$work/dom.html" 2>"$work/chromium.txt" || fail "chromium failed"
sed -e 's/.*<pre id="check">//' -e 's|</pre>.*||' "$work/dom.html" | grep ' drawn=' >"$work/check.txt" || true
for plot in loss goodput goodput-dp timeline shares bytes; do
  line=$(grep "^$plot [0-9]" "$work/check.txt" || true)
  [ -n "$line" ] || fail "plot $plot did not render"
  echo "$line" | grep -q "drawn=[1-9]" || fail "plot $plot has no drawn series: $line"
done
grep "^loss " "$work/check.txt" | grep -q "series=decoupled|dp|decoupled eval|dp eval|entropy rate" \
  || fail "the loss plot lacks a series: $(grep loss "$work/check.txt")"
grep "^shares " "$work/check.txt" | grep -q "learner 0|learner 1|learner 2|learner 3" || fail "token shares lack a learner"
timeout $((120 * ts)) $chrome --window-size=1000,2600 --screenshot="$run/report.png" "file://$run/report.html" \
  >/dev/null 2>&1 || fail "no screenshot"
[ "$(stat -c %s "$run/report.png")" -gt 20000 ] || fail "the screenshot is (nearly) blank"
echo "observability workflow OK ($(grep -c . "$work/metrics.prom") metric lines; report $run/report.html)"
