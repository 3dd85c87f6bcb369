#!/bin/bash
# Observability as a user sees it: a simulation serves /metrics while it runs; promtool (the
# Prometheus project's own checker) parses and lints what it serves; /status is JSON; the run
# directory gets its JSON lines and summary; `diloco report` writes the HTML page of a run with
# a killed learner, and of it laid over a second run; headless Chromium renders both, and the
# DOM says what each view drew: every view has series with data, no axis runs past its range
# and no data past its axis, the two runs overlay. A screenshot is saved next to the report
# (a CI artifact).
# usage: observe_cli.sh PATH/TO/diloco [RUN_DIR to keep]
set -eu
# Timeouts scale with DILOCO_TIME_SCALE (a sanitizer build runs several times slower).
ts=${DILOCO_TIME_SCALE:-1}
diloco=$1
work=$(mktemp -d)
run=$(realpath -m "${2:-$work/run}")
trap 'stop_jobs 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
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
"$diloco" simulate --set token_budget=256000 --compare diloco --failures 1@300+200 --run-dir "$run" \
  --metrics-port "$port" --metrics-linger 30 >"$work/sim.txt" 2>&1 &
sim=$!
# Scrape while it runs (and, once it is done, during the linger).
deadline=$((SECONDS + 120 * ts))
until get /metrics >"$work/metrics.prom" 2>/dev/null && grep -q '^diloco_tokens_total [1-9]' "$work/metrics.prom"; do
  kill -0 $sim 2>/dev/null || break  # done and its linger over: the check below says so
  [ $SECONDS -lt $deadline ] || break
  sleep 0.2
done
grep -q '^diloco_tokens_total [1-9]' "$work/metrics.prom" || fail "no live metrics served"
promtool check metrics <"$work/metrics.prom" >"$work/promtool.txt" 2>&1 || fail "promtool rejects /metrics"
get /status >"$work/status.json"
grep -q '"learners":\[{' "$work/status.json" || fail "/status has no learners"
get /nowhere | grep -q "not found" || fail "an unknown path is not a 404"
# The run ends; its directory has the metrics of both systems and the summary.
while [ ! -f "$run/summary.json" ]; do kill -0 $sim 2>/dev/null || fail "simulate died"; sleep 0.2; done
[ -s "$run/metrics.jsonl" ] && [ -s "$run/metrics-diloco.jsonl" ] || fail "no metrics files"
get /metrics | promtool check metrics >/dev/null 2>&1 || fail "promtool rejects the final metrics"
kill $sim 2>/dev/null || true
wait $sim 2>/dev/null || true

# A second run to lay over the first: another seed, a learner killed and restarted.
"$diloco" simulate --set token_budget=128000 --seed 2 --failures 1@100+80 --run-dir "$work/run2" \
  --log-level error >"$work/sim2.txt" 2>&1 || fail "the second run failed"
"$diloco" report "$run" >"$work/report.txt" || fail "diloco report failed"
grep -q "report written: $run/report.html (15 views, 2 systems from 1 run)" "$work/report.txt" || fail "unexpected report: $(cat "$work/report.txt")"
"$diloco" report "$run" "$work/run2" --out "$work/both.html" >"$work/report2.txt" || fail "diloco report of two runs failed"
grep -q "(15 views, 3 systems from 2 runs)" "$work/report2.txt" || fail "unexpected report: $(cat "$work/report2.txt")"
# A bad run directory is an error that names the file.
if "$diloco" report "$work" >"$work/bad.txt" 2>&1; then fail "report of a directory without a run"; fi
grep -q "summary.json: cannot be read" "$work/bad.txt" || fail "the error does not name the file"
cp -r "$work/run2" "$work/run3" && printf 'not json\n' >>"$work/run3/metrics.jsonl"
if "$diloco" report "$work/run3" >"$work/bad3.txt" 2>&1; then fail "report of a corrupt metrics file"; fi
grep -q "run3/metrics.jsonl:[0-9]*: not a JSON object" "$work/bad3.txt" || fail "the error does not name the line: $(cat "$work/bad3.txt")"
# Damaged or hand-made summaries and metrics: each an error naming what is wrong, never
# an abort, a read outside the run directory, or gigabytes for a summary repeating one system
# (exit 2, as for any bad input).
bad_report() {  # bad_report NAME PYTHON-EDIT PATTERN
  rm -rf "$work/$1" && cp -r "$work/run2" "$work/$1"
  python3 - "$work/$1" <<PY || fail "could not make $1"
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
$2
json.dump(s, open(d + "/summary.json", "w"))
PY
  rc=0
  "$diloco" report "$work/$1" >"$work/$1.txt" 2>&1 || rc=$?
  [ $rc = 2 ] || fail "report of $1 exited $rc: $(tail -3 "$work/$1.txt")"
  grep -q "$3" "$work/$1.txt" || fail "report of $1: no '$3' in: $(cat "$work/$1.txt")"
}
bad_report empty 'open(d + "/metrics.jsonl", "w").close()' 'metrics.jsonl: no "start" record'
bad_report dot 's["systems"][0]["metrics"] = "."' "'\\.' is not a file name in the run directory"
bad_report escape 's["systems"][0]["metrics"] = "../../../../etc/hostname"' "is not a file name in the run directory"
bad_report number 's["systems"][0]["metrics"] = 5' '"metrics" is not a string'
bad_report many 's["systems"] = s["systems"] * 100000' "100000 systems"
bad_report twice 's["systems"] = s["systems"] * 2' "two systems name the same metrics file"
bad_report typed 'open(d + "/metrics.jsonl", "a").write(json.dumps({"type": "progress", "learner": "x", "t": 1}) + chr(10))' "a record has a field of the wrong type"

# Render both pages in headless Chromium. Each view leaves, in the DOM, what it drew
# (data-check: series and points, the axes' ranges, the data's); check it.
chrome="chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars"
for page in "$run/report.html" "$work/both.html"; do
  timeout $((120 * ts)) $chrome --window-size=1300,1000 --dump-dom "file://$page" >"$work/dom.html" 2>"$work/chromium.txt" || fail "chromium failed on $page"
  python3 - "$work/dom.html" "$page" "$(basename "$run")" <<'PY' || fail "the rendered report of $page is wrong (above)"
import html.parser, json, re, sys
views = ["loss", "learner-loss", "eval", "goodput", "throughput", "lr", "staleness", "participants",
         "delays", "bytes", "bandwidth", "compression", "cosine", "timeline", "shares"]
checks, csvs, ids, ready, width, tables = {}, {}, [], False, 0, {}
class P(html.parser.HTMLParser):
    table = None
    def handle_starttag(self, tag, attrs):
        global ready, width
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1": ready, width = True, int(a.get("data-width", "0"))
        if tag == "section" and a.get("class") == "view":
            ids.append(a["id"])
            if a.get("data-csv"): csvs[a["id"]] = json.loads(a["data-csv"])
        if tag == "div" and a.get("class") == "chart" and "data-check" in a:
            checks[ids[-1]] = json.loads(a["data-check"])
        if tag == "table" and a.get("class") == "settings": self.table = a["id"]; tables[self.table] = []
        if tag == "tr" and self.table: tables[self.table].append([])
    def handle_endtag(self, tag):
        if tag == "table": self.table = None
    def handle_data(self, data):
        if self.table and tables[self.table] and data.strip(): tables[self.table][-1].append(data.strip())
P().feed(open(sys.argv[1]).read())
bad = []
if not ready: bad.append("the page's script did not finish")
if ids != views: bad.append("views %s, expected %s" % (ids, views))
if not 0 < width <= 1300: bad.append("the page is %d px wide in a 1300 px window" % width)
two = sys.argv[2].endswith("both.html")
# A tick label reads as the value it marks (no 2.75 shown as 2.8), and no two ticks read alike.
scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
def tick_value(label):
    m = re.fullmatch(r"(-?[\d,]*\.?\d+(?:e[-+]?\d+)?)(?: ?([kMGT]))?(?: ?(%|ms|s|h|d|B|B/s))?", label)
    if not m: return None
    v = float(m.group(1).replace(",", "")) * scale[m.group(2) or ""]
    return v * {"%": 0.01, "ms": 1e-3, "h": 3600, "d": 86400}.get(m.group(3), 1)
for v, c in checks.items():
    for k, axis in enumerate(c.get("ticks", [])):
        if v == "timeline" and k == 1: continue  # learner names
        shown = [l for l in axis["labels"] if l]
        if len(set(shown)) != len(shown): bad.append("%s: axis %d repeats a tick label: %s" % (v, k, shown))
        for at, label in zip(axis["splits"], axis["labels"]):
            x = tick_value(label) if label else None
            if label and (x is None or abs(x - at) > 1e-6 * max(1.0, abs(at))):
                bad.append("%s: axis %d tick %r at %r" % (v, k, label, at))
    # Every chart can be had as CSV: its x and one column per series.
    if v not in ("timeline",) and not c.get("empty"):
        t = csvs.get(v)
        if not t or t["rows"] < 1 or t["columns"] != 1 + len(c["series"]): bad.append("%s: CSV %s for %d series" % (v, t, len(c["series"])))
# The settings: every one behind a fold; with two runs, those that differ (their seeds do).
if "settings-all" not in tables or len(tables["settings-all"]) < 50: bad.append("no table of all settings")
if two:
    differ = {r[0]: r[1:] for r in tables.get("settings-differ", [])[1:]}
    if "seed" not in differ or differ["seed"][0] == differ["seed"][1]: bad.append("settings that differ: %s" % differ)
    if "learners" in differ: bad.append("learners differ? %s" % differ)
    # run2's learner 1 was down from 100 s for 80 s: its loss line has a gap there.
    ll = checks["learner-loss"]
    gaps = {s["name"]: g for s, g in zip(ll["series"], ll["gaps"])}
    if not gaps.get("run2/decoupled learner 1"): bad.append("no gap in run2's learner 1: %s" % gaps)
for v in views:
    c = checks.get(v)
    if c is None or c.get("empty"):
        bad.append(v + ": not drawn"); continue
    drawn = [s for s in c["series"] if s["points"] > 0]
    if not drawn: bad.append(v + ": no series with data"); continue
    x0, x1 = c["x"]; y0, y1 = c["y"]
    if not (x1 > x0 and y1 > y0): bad.append("%s: an empty axis %s %s" % (v, c["x"], c["y"]))
    dx, dy = c["dataX"], c["dataY"]
    eps = 1e-9 * max(1.0, abs(y1), abs(x1))
    # Nothing drawn off the axes, and no axis past its range: ratios in [0, 1], counts from 0.
    if dx and (dx[0] < x0 - eps or dx[1] > x1 + eps) and v not in ("timeline",): bad.append("%s: data x %s outside the axis %s" % (v, dx, c["x"]))
    # and no x axis far past its data (one evaluation is not an axis twice the run).
    if dx and v not in ("timeline",) and x1 - min(x0, 0) > 1.2 * (dx[1] - min(dx[0], 0)) + eps: bad.append("%s: x axis %s far past the data %s" % (v, c["x"], dx))
    if dy and c["yrange"] != "log" and (dy[0] < y0 - eps or dy[1] > y1 + eps): bad.append("%s: data y %s outside the axis %s" % (v, dy, c["y"]))
    if c["yrange"] == "ratio" and (y0 < 0 or y1 > 1): bad.append("%s: a ratio axis %s past [0, 1]" % (v, c["y"]))
    if c["yrange"] == "nonneg" and y0 < 0: bad.append("%s: a count axis from %s" % (v, y0))
    # and no axis far wider than its data (counts start at 0 on purpose).
    if dy and dy[1] > dy[0] and c["yrange"] == "auto" and (y1 - y0) > 3 * max(dy[1] - dy[0], abs(dy[1]) * 0.1):
        bad.append("%s: the axis %s is far wider than the data %s" % (v, c["y"], dy))
    if dy and dy[1] > 0 and c["yrange"] == "nonneg" and y1 > 1.5 * dy[1]:
        bad.append("%s: the axis %s runs far past the data %s" % (v, c["y"], dy))
    names = [s["name"] for s in drawn]
    if two:
        for run in (sys.argv[3] + "/", "run2/"):
            if v not in ("lr",) and not any(n.startswith(run) or (" " + run) in n for n in names):
                bad.append("%s: no series of %s in %s" % (v, run, names))
    print("%-13s %2d series, x %s, y %s: %s" % (v, len(drawn), c["x"], [round(y0, 6), round(y1, 6)], ", ".join(names[:4])))
loss = [s["name"] for s in checks["loss"]["series"] if s["points"] > 0]
want = ["decoupled train", "decoupled eval", "diloco train", "diloco eval", "eval floor"]
if not two and loss != want: bad.append("loss series %s, expected %s" % (loss, want))
if not two and checks["eval"]["series"][0]["points"] < 5: bad.append("fewer than 5 evaluations drawn")
tl = checks["timeline"]["series"]
if not two and [s["name"] for s in tl][:4] != ["decoupled 0", "decoupled 1", "decoupled 2", "decoupled 3"]: bad.append("timeline rows %s" % tl)
shares = [s["name"] for s in checks["shares"]["series"] if s["points"] > 0]
if not two and shares != ["learner 0", "learner 1", "learner 2", "learner 3"]: bad.append("token shares %s" % shares)
if not two and checks["loss"]["alerts"] < 1: bad.append("no alert marked on the loss curve")
for b in bad: print("FAILED:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
done
timeout $((120 * ts)) $chrome --window-size=1300,3600 --screenshot="$run/report.png" "file://$run/report.html" \
  >/dev/null 2>&1 || fail "no screenshot"
[ "$(stat -c %s "$run/report.png")" -gt 20000 ] || fail "the screenshot is (nearly) blank"
echo "observability workflow OK ($(grep -c . "$work/metrics.prom") metric lines; report $run/report.html)"
