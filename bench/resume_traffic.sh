#!/usr/bin/env bash
# Memory traffic of a resume against the snapshot's bytes (docs/benchmarks.md, "Model size").
# A simulated run of the built-in MLP grown to about 2M parameters (2 learners, 1 shard) takes
# 3 snapshots; `--resume` from the last runs under valgrind's DHAT, which counts every byte the
# program reads or writes in heap blocks (the kernel's copy of the files into them included),
# by the place each block was allocated. Resume's share, in snapshot bytes:
#   - the part buffers (checkpoint/snapshot_files.cpp check_actor_file): each file read into
#     its buffer, checksummed, then decoded by the check and by the actor;
#   - the check that every part loads before the snapshot is chosen (actors/state_io.cpp
#     check_part): a state of each actor built from its part and dropped;
#   - the actors' own loads: the same work as the check's on the same bytes, counted as the
#     check's again (their blocks live on into training, where DHAT cannot tell them apart).
# Needs valgrind; about 10 minutes on one core (DHAT runs the resumed run's remaining steps too).
#
# Usage: bench/resume_traffic.sh [HIDDEN LAYERS]   (default 1024 3: 2.1M parameters)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
[ -x "$bin" ] || scripts/build.sh >/dev/null
command -v valgrind >/dev/null || { echo "bench/resume_traffic.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
h=${1:-1024}
l=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "bench/resume_traffic.sh: hidden $h, $l layers; $(nproc) cores, $(date -u +%Y-%m-%d), $(valgrind --version)"
common=(--set model.hidden="$h" --set model.hidden_layers="$l" --learners 2 --set shards=1
  --period 8 --budget 3072 --set data.eval_tokens=1024 --eval-every 0 --threads 1)
"$bin" simulate "${common[@]}" --snapshot-dir "$work/snaps" --snapshot-every 6 >"$work/snap.out" 2>&1 ||
  { tail -5 "$work/snap.out" >&2; exit 1; }
last=$(ls -d "$work"/snaps/snapshot-* | tail -1)
snap_bytes=$(cat "$last"/actor-*.dlsa | wc -c)
echo "snapshot: $last, $snap_bytes bytes in its actor files"
start=$(date +%s)
valgrind --tool=dhat --dhat-out-file="$work/dhat.json" "$bin" simulate "${common[@]}" \
  --resume "$work/snaps" >"$work/resume.out" 2>"$work/resume.err" ||
  { tail -20 "$work/resume.err" >&2; exit 1; }
grep -q "^resuming from $last" "$work/resume.out" "$work/resume.err" ||
  { echo "the run did not resume from $last" >&2; exit 1; }
echo "resumed under DHAT in $(($(date +%s) - start)) s"
python3 - "$work/dhat.json" "$snap_bytes" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
snap = int(sys.argv[2])
frames = d["ftbl"]
def sites(pattern):
    return {i for i, f in enumerate(frames) if re.search(pattern, f)}
def traffic(pattern):
    want = sites(pattern)
    r = w = 0
    for pp in d["pps"]:
        if any(i in want for i in pp["fs"]):
            r += pp["rb"]
            w += pp["wb"]
    return r, w
rows = [("part buffers (read, checksummed, decoded)", traffic(r"check_actor_file"), 1),
        ("the check that every part loads", traffic(r"diloco::check_part\("), 1),
        ("the actors' loads (as the check's)", traffic(r"diloco::check_part\("), 1)]
total = 0
for name, (r, w), _ in rows:
    total += r + w
    print(f"  {name:44s} reads {r / snap:5.2f}x  writes {w / snap:5.2f}x  of the snapshot's bytes")
print(f"resume memory traffic: {total / snap:.2f}x the snapshot's bytes ({total / 1e6:.0f} MB for {snap / 1e6:.1f} MB)")
PY
