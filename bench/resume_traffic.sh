#!/usr/bin/env bash
# Memory traffic of a resume against the snapshot's bytes (docs/benchmarks.md, "Model size").
# A simulated run of the built-in MLP grown to about 2M parameters (2 learners, 1 shard) takes
# 3 snapshots, and `diloco simulate --resume` from them is checked to pick the last. Then
# bench_resume (bench/bench_resume.cpp: what that resume does before its actors run, and each
# actor's load of its part, with nothing after) runs under valgrind's DHAT, which counts every
# byte the program reads or writes in heap blocks (the kernel's copy of a file into one
# included), by the place each block was allocated. Resume's share, in snapshot bytes:
#   - the part buffers (checkpoint/snapshot_files.cpp check_actor_file): each file's bytes,
#     checksummed, then decoded by the check and by the actor's load;
#   - the check that every part loads before the snapshot is chosen (actors/state_io.cpp
#     check_part): a state of each actor built from its part and dropped;
#   - the actors' loads (load_part, the load each actor makes when it starts).
# The rest of the process (configuration, data, the run's environment) is printed apart.
# Resume maps the actor files (checkpoint/file_io.hpp map_file): DHAT does not see a mapping, so
# bench_resume runs twice, once reading the files into memory of its own (--read, the path a file
# system without mmap takes), where the part buffers are heap blocks, and once mapped. The mapped
# resume's traffic is its heap traffic plus the reads of the part bytes, which are the same code
# over the same bytes as the read run's (the kernel's copy into a buffer is what it does not do).
# Needs valgrind; a few minutes on one core.
#
# Usage: bench/resume_traffic.sh [HIDDEN LAYERS]   (default 1024 3: 2.1M parameters)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DILOCO:-build/apps/diloco}
bench=${BENCH_RESUME:-build/bench/bench_resume}
[ -x "$bin" ] && [ -x "$bench" ] || scripts/build.sh >/dev/null
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
"$bin" simulate "${common[@]}" --resume "$work/snaps" >"$work/resume.out" 2>"$work/resume.err" ||
  { tail -20 "$work/resume.err" >&2; exit 1; }
grep -q "^resuming from $last" "$work/resume.out" "$work/resume.err" ||
  { echo "the run did not resume from $last" >&2; exit 1; }
start=$(date +%s)
for mode in read mapped; do
  flag=()
  [ "$mode" = read ] && flag=(--read)
  valgrind --tool=dhat --num-callers=64 --dhat-out-file="$work/dhat-$mode.json" "$bench" "$work/snaps" "${flag[@]}" \
    >"$work/bench.out" 2>"$work/bench.err" || { tail -20 "$work/bench.err" >&2; exit 1; }
  grep -q "^bench_resume: $last, .* $mode," "$work/bench.out" ||
    { echo "bench_resume did not choose $last ($mode)" >&2; cat "$work/bench.out" >&2; exit 1; }
done
echo "bench_resume under DHAT, read and mapped, in $(($(date +%s) - start)) s"
python3 - "$work/dhat-read.json" "$work/dhat-mapped.json" "$snap_bytes" <<'PY'
import json, re, sys
snap = int(sys.argv[3])
def rows_of(path):
    d = json.load(open(path))
    frames = d["ftbl"]
    def named(pp, pattern):
        return any(re.search(pattern, frames[i]) for i in pp["fs"])
    rows = {"part": [0, 0], "check": [0, 0], "load": [0, 0], "other": [0, 0]}
    for pp in d["pps"]:
        if named(pp, r"check_actor_file"):
            row = "part"
        elif named(pp, r"diloco::check_part\("):
            row = "check"
        elif named(pp, r"diloco::load_part\("):
            row = "load"
        else:
            row = "other"
        rows[row][0] += pp["rb"]
        rows[row][1] += pp["wb"]
    return rows
names = {"part": "part buffers (filled, checksummed, decoded)",
         "check": "the check that every part loads",
         "load": "the actors' loads"}
totals = {}
for mode, path in (("read", sys.argv[1]), ("mapped", sys.argv[2])):
    rows = rows_of(path)
    if mode == "mapped":
        # The mapping is no heap block: its reads are the read run's reads of the part buffers.
        rows["part"] = [read_rows["part"][0], 0]
    else:
        read_rows = rows
    print(f"{mode}:")
    total = 0
    for key, name in names.items():
        r, w = rows[key]
        total += r + w
        note = " (the read run's reads: the mapping is not a heap block)" if mode == "mapped" and key == "part" else ""
        print(f"  {name:44s} reads {r / snap:5.2f}x  writes {w / snap:5.2f}x  of the snapshot's bytes{note}")
    r, w = rows["other"]
    print(f"  (not counted: the rest of the process, {(r + w) / 1e6:.0f} MB: configuration, data, environment)")
    totals[mode] = total
for mode in ("read", "mapped"):
    t = totals[mode]
    print(f"resume memory traffic, {mode}: {t / snap:.2f}x the snapshot's bytes ({t / 1e6:.0f} MB for {snap / 1e6:.1f} MB)")
PY
