#!/bin/sh
# examples/kubernetes/diloco.yaml: its objects fit together (the Service is the pods' subdomain
# and selects them, the mounts name the ConfigMap, Secret and claim, the node count is the
# Job's), its schema where kubernetes-validate is installed, and its node.sh run as the Job's
# three pods would run it, on loopback: node n2's process killed (its pod starts it again and
# it rejoins), then the leader's process killed and its pod made again (it resumes the run from
# the newest snapshot; the other nodes start again and join it); the run completes with its
# invariants held.
# usage: kubernetes_cli.sh path/to/diloco path/to/diloco.yaml
set -eu
diloco=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
manifest=$2
ts=${DILOCO_TIME_SCALE:-1}
work=$(mktemp -d)
pods=""
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/data/node-*.log "$work"/pod-*.txt; do
    [ -f "$f" ] && { echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens' | tail -40; }
  done >&2
  exit 1
}
cleanup() {
  for p in $pods; do kill -9 "$p" 2>/dev/null || true; done
  pkill -9 -f "diloco node --cluster $work/" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
command -v python3 >/dev/null && python3 -c "import yaml" 2>/dev/null ||
  { echo "SKIPPED: no python3 with yaml (python3-yaml)"; exit 77; }

# 1. The objects fit together; node.sh and run.yaml out of the ConfigMap.
python3 - "$manifest" "$work" <<'PY' >"$work/check.txt" 2>&1 || fail "the manifest: $(cat "$work/check.txt")"
import os, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {}
for d in docs:
    by.setdefault(d["kind"], []).append(d)
for kind in ("Service", "ConfigMap", "PersistentVolumeClaim", "Job"):
    assert len(by.get(kind, [])) == 1, f"one {kind}, not {len(by.get(kind, []))}"
svc, cm, pvc, job = (by[k][0] for k in ("Service", "ConfigMap", "PersistentVolumeClaim", "Job"))
spec, pod = job["spec"], job["spec"]["template"]["spec"]
assert spec["completionMode"] == "Indexed", "the Job is not Indexed"
n = spec["completions"]
assert spec["parallelism"] == n, "parallelism differs from completions: some nodes would wait"
assert svc["spec"]["clusterIP"] == "None", "the Service is not headless"
assert svc["spec"].get("publishNotReadyAddresses") is True, "pods not found before ready"
assert pod["subdomain"] == svc["metadata"]["name"], "the pods' subdomain is not the Service"
labels = job["spec"]["template"]["metadata"]["labels"]
for k, v in svc["spec"]["selector"].items():
    assert labels.get(k) == v, f"the Service does not select the pods ({k})"
assert pod["restartPolicy"] in ("Never", "OnFailure")
assert {p["port"] for p in svc["spec"]["ports"]} >= {4400, 4401}, "node and bulk ports"
(c,) = pod["containers"]
env = {e["name"]: e.get("value") for e in c.get("env", [])}
assert int(env["DILOCO_NODES"]) == n, "DILOCO_NODES is not the Job's completions"
vols = {v["name"]: v for v in pod["volumes"]}
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
assert vols[mounts["/etc/diloco"]]["configMap"]["name"] == cm["metadata"]["name"]
assert vols[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
assert vols[mounts["/etc/diloco-secret"]]["secret"]["secretName"] == "diloco-secret"
assert c["command"][-1] == "/etc/diloco/node.sh" and "node.sh" in cm["data"]
assert pod["terminationGracePeriodSeconds"] > 60, "no time for the leader's final snapshot"
run = yaml.safe_load(cm["data"]["run.yaml"])
assert "nodes" not in run, "run.yaml names nodes: node.sh writes them"
names = {f"n{i}" for i in range(n)}
for role, where in run.get("placement", {}).items():
    for x in (where if isinstance(where, list) else [where]):
        assert x in names, f"placement.{role} names {x}, not one of the Job's nodes"
for key in ("node.sh", "run.yaml"):
    with open(os.path.join(sys.argv[2], key), "w") as f:
        f.write(cm["data"][key])
print(f"manifest: {n} nodes, objects fit together")
PY
cat "$work/check.txt"
sh -n "$work/node.sh" || fail "node.sh does not parse"
if python3 -c "import kubernetes_validate" 2>/dev/null; then
  python3 -m kubernetes_validate --strict "$manifest" >"$work/schema.txt" 2>&1 ||
    fail "kubernetes-validate: $(cat "$work/schema.txt")"
  echo "schema: $(tail -1 "$work/schema.txt")"
else
  echo "schema: not checked (pip install kubernetes-validate to check it)"
fi

# 2. node.sh as the Job's pods run it, on one host.
. "$(dirname "$0")/ports.sh"
pick_ports 3 40
openssl rand -hex 32 >"$work/secret"
python3 - "$work/run.yaml" "$ts" <<'PY' || fail "run.yaml"
import sys, yaml
path, ts = sys.argv[1], int(sys.argv[2])
run = yaml.safe_load(open(path))
# The manifest's cluster, sized for a test: a small model, short steps, frequent snapshots.
run.update({"token_budget": 30000000 // ts, "speed": {"step_time_s": 0.002},
            "model": {"hidden": 32, "embed_dim": 8}, "snapshot": {"every_s": 3}})
yaml.safe_dump(run, open(path, "w"))
PY
pod() {  # pod INDEX: the Job's pod of that index, in the background ($!): made again when it
  # fails, as the Job does up to its backoff limit (a leader made again while the other nodes
  # still run the run it led refuses to start; they restart once its heartbeats stop)
  (
    tries=0
    while :; do
      rc=0
      JOB_COMPLETION_INDEX=$1 DILOCO_NODES=3 DILOCO="$diloco" DILOCO_HOST_FORMAT=127.0.0.1 \
        DILOCO_PORT=$base DILOCO_PORT_STRIDE=10 DILOCO_METRICS_PORT=$((base + 35)) \
        DILOCO_SETTINGS="$work/run.yaml" DILOCO_SECRET="$work/secret" DILOCO_DATA="$work/data" \
        sh "$work/node.sh" >>"$work/pod-$1.txt" 2>&1 || rc=$?
      [ "$rc" -ne 0 ] && [ "$tries" -lt 6 ] || exit "$rc"
      tries=$((tries + 1))
      echo "pod $1: failed with $rc; the Job makes it again ($tries)" >>"$work/pod-$1.txt"
      sleep 2
    done
  ) &
}
await() {
  i=0
  until [ -f "$1" ] && tr '\r' '\n' <"$1" | grep -q "$2"; do
    i=$((i + 1))
    [ $i -le $((10 * $3 * ts)) ] || fail "no '$2' in $1 within $(($3 * ts)) s"
    sleep 0.1
  done
}
pod 0
p0=$!
pod 1
p1=$!
pod 2
p2=$!
pods="$p0 $p1 $p2"
log0=$work/data/node-n0.log
await "$log0" "all 3 nodes wired: starting" 90
await "$log0" "snapshot 1 committed" 60

# n2's process dies: its pod starts it again, and it rejoins.
pkill -9 -f "diloco node --cluster $work/run.yaml --name n2 " || fail "no process of node n2"
await "$work/data/node-n2.log" "node n2: process ended with 137; starting it again" 30
await "$log0" "node n0: node n2 rejoined with process 1" 90
await "$log0" "snapshot 3 committed" 60

# The leader's pod is lost: the Job makes it again, and it resumes from the newest snapshot.
pkill -9 -f "diloco node --cluster $work/run.yaml --name n0 " || fail "no process of node n0"
await "$work/pod-0.txt" "pod 0: failed with 137; the Job makes it again" 30
await "$log0" "resuming from $work/data/snapshots/snapshot-" 60
await "$log0" "all 3 nodes wired: starting" 120
for p in $p0 $p1 $p2; do
  i=0
  while kill -0 "$p" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le $((3000 * ts)) ] || fail "pod process $p still running after $((300 * ts)) s"
    sleep 0.1
  done
  rc=0
  wait "$p" || rc=$?
  [ "$rc" = 0 ] || fail "a pod ended with $rc"
done
pods=""
grep -q "invariants held" "$log0" || fail "no 'invariants held' in the leader's log"
loss=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$log0" | tail -1)
[ -n "$loss" ] || fail "no eval loss"
awk -v l="$loss" 'BEGIN { exit !(l > 1.0 && l < 3.0) }' || fail "eval loss $loss out of range"
grep -c "starting it again" "$work/data/node-n1.log" "$work/data/node-n2.log" | tr '\n' ' '
echo
echo "kubernetes manifest OK (eval loss $loss)"
