#!/bin/sh
# A deployed run as a Slurm job on a real single-host Slurm: Debian's munged, slurmctld and
# slurmd, started here with their configuration, state and sockets in a private directory.
# examples/slurm/diloco.sbatch runs a 3-node job (3 tasks, node n2 holding a learner); n2's
# diloco process is killed with SIGKILL and the job starts it again, and it rejoins; then the
# whole job is requeued (`scontrol requeue`): the leader takes a final snapshot on SIGTERM,
# and the requeued job resumes from it and finishes the run.
# Needs root (slurmd starts the job's processes as their user) and the packages slurmctld,
# slurmd, slurm-client and munge (scripts/install-deps.sh --slurm); exits 77 (skipped)
# without them. Labelled soak: it takes a few minutes.
# usage: slurm_job.sh PATH/TO/diloco PATH/TO/diloco.sbatch
set -eu
diloco=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
sbatch_script=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
ts=${DILOCO_TIME_SCALE:-1}
if [ "$(id -u)" != 0 ]; then echo "SKIPPED: needs root (slurmd starts the job's processes)"; exit 77; fi
for p in munged slurmctld slurmd sbatch scontrol srun; do
  command -v $p >/dev/null || { echo "SKIPPED: no $p (scripts/install-deps.sh --slurm)"; exit 77; }
done
work=$(mktemp -d)
chmod 755 "$work"
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/d/node-*.log "$work"/job.out "$work"/slurmctld.log "$work"/slurmd.log; do
    [ -f "$f" ] && { echo "== $f"; tr '\r' '\n' <"$f" | grep -v '% .*tokens' | tail -40; }
  done >&2
  exit 1
}
stop_all() {
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --full "${job:-0}" 2>/dev/null || true
  pkill -9 -f "diloco node --cluster $work" 2>/dev/null || true
  for p in slurmd slurmctld munge/munged; do
    [ -f "$work/$p.pid" ] && kill -9 "$(cat "$work/$p.pid")" 2>/dev/null || true
  done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap stop_all EXIT
. "$(dirname "$0")/../cli/ports.sh"
pick_ports 8 40
host=$(hostname -s)

# munge: the credentials Slurm's daemons and commands exchange.
mkdir -m 700 "$work/munge"
dd if=/dev/urandom bs=1 count=1024 of="$work/munge/munge.key" 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged --force --socket="$work/munge/socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed" || fail "munged did not start"

# One node (this host) with room for the job's three tasks; requeueing on; 60 s between a
# job's SIGTERM and its SIGKILL, so that the leader's final snapshot (half of --stop-timeout,
# 60 s) fits.
mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<EOF
ClusterName=dilocotest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=60
MinJobAge=3600
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$work/slurm.conf"
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
i=0
until sinfo --noheader -o %t 2>/dev/null | grep -q idle; do
  i=$((i + 1))
  [ $i -le $((300 * ts)) ] || fail "the Slurm node did not become idle within $((30 * ts)) s"
  sleep 0.1
done

# The run: two learners (on n1 and n2) and two shards (on n0 and n1), a snapshot every 3 s.
cat >"$work/run.yaml" <<EOF
learners: 2
shards: 2
token_budget: $((60000000 / ts))
speed: {step_time_s: 0.002}
model: {hidden: 32, embed_dim: 8}
snapshot: {every_s: 3}
placement:
  learners: [n1, n2]
  shards: [n0, n1]
EOF
# Addresses, not host names: a fresh image need not resolve its own name.
job=$(cd "$work" && DILOCO="$diloco" DILOCO_SETTINGS="$work/run.yaml" DILOCO_DIR="$work/d" \
  DILOCO_HOST_CMD="echo 127.0.0.1" \
  DILOCO_PORT=$((base + 10)) sbatch --parsable --ntasks=3 --output="$work/job.out" "$sbatch_script") ||
  fail "sbatch refused the job"

# await FILE PATTERN SECONDS
await() {
  i=0
  until tr '\r' '\n' <"$1" 2>/dev/null | grep -q "$2"; do
    i=$((i + 1))
    [ $i -le $((10 * $3 * ts)) ] || fail "no '$2' in $1 within $(($3 * ts)) s"
    sleep 0.1
  done
}
await "$work/d/node-n0.log" "all 3 nodes wired: starting" 60
await "$work/d/node-n0.log" "snapshot 1 committed" 60

# Node n2's process killed: the job starts it again and it rejoins the run.
pkill -9 -f "diloco node --cluster $work/run.yaml --name n2 " || fail "no process of node n2"
await "$work/d/node-n2.log" "node n2: process ended with 137; starting it again" 30
await "$work/d/node-n0.log" "node n0: node n2 rejoined with process 1" 90

# The whole job requeued: a final snapshot, and the requeued job resumes from it.
scontrol requeue "$job" || fail "scontrol requeue $job"
await "$work/d/node-n0.log" "SIGTERM: taking a final snapshot" 60
await "$work/job.out" "execution 1" 300
await "$work/d/node-n0.log" "resuming from $work/d/snapshots/snapshot-" 60
i=0
until scontrol show job "$job" 2>/dev/null | grep -q "JobState=COMPLETED"; do
  i=$((i + 1))
  [ $i -le $((600 * ts)) ] || fail "the requeued job did not complete within $((600 * ts)) s"
  state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $state in FAILED | CANCELLED | TIMEOUT | NODE_FAIL) fail "job $job ended $state" ;; esac
  sleep 1
done
grep -q "invariants held" "$work/d/node-n0.log" || fail "the resumed run did not hold its invariants"
[ -s "$work/d/run-n0/summary.json" ] || fail "no summary.json from the leader"
loss=$(tr '\r' '\n' <"$work/d/node-n0.log" | sed -n 's/^eval loss \([0-9.]*\).*/\1/p' | tail -1)
awk -v l="$loss" 'BEGIN { exit !(l > 1.5 && l < 3.2) }' || fail "eval loss '$loss'"
echo "slurm job OK: job $job, node n2 killed and rejoined, requeued and resumed; eval $loss"
