#!/usr/bin/env python3
"""What recording a tape costs a real-time run, and how big the tape grows.

The same run with and without a tape, alternately (so that a machine that gets busier or
quieter affects both alike), `--pairs` times each:

  realtime  `diloco simulate --realtime` of the built-in default cluster (4 learners, 2 shards);
  deployed  the same cluster as three `diloco node` processes on loopback (shards and service
            actors on node a, learners 0-1 on b, 2-3 on c), each recording with `--tape`.

Prints, per setup, tokens per second of each run, the median over pairs of taped / untaped
(1.0: recording is free), and the tape's size per hour of training (all nodes together).

usage: bench/tape_overhead.py [--diloco build/apps/diloco] [--pairs 5] [--budget 1280000]
       [--only realtime|deployed]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def realtime_run(diloco, budget, work, taped):
    run_dir = os.path.join(work, "rt-%d" % time.monotonic_ns())
    cmd = [diloco, "simulate", "--realtime", "--budget", str(budget), "--run-dir", run_dir,
           "--log-level", "error"]
    tape_bytes = 0
    if taped:
        tape = os.path.join(work, "rt-%d.tape" % time.monotonic_ns())
        cmd += ["--tape", tape]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))["systems"][0]
    if taped:
        tape_bytes = os.path.getsize(tape)
        os.remove(tape)
    shutil.rmtree(run_dir)
    return summary["tokens"] / summary["run_s"], summary["run_s"], tape_bytes


def cluster_file(work, port, budget):
    path = os.path.join(work, "cluster.yaml")
    with open(path, "w") as f:
        f.write(f"""token_budget: {budget}
secret_file: {work}/secret
nodes:
  - {{name: a, host: 127.0.0.1, port: {port}}}
  - {{name: b, host: 127.0.0.1, port: {port + 2}}}
  - {{name: c, host: 127.0.0.1, port: {port + 4}}}
placement:
  learners: [b, b, c, c]
  shards: [a, a]
""")
    return path


def deployed_run(diloco, cluster, work, taped, port_base):
    tapes = os.path.join(work, "tapes-%d" % time.monotonic_ns())
    run_dir = os.path.join(work, "dep-%d" % time.monotonic_ns())
    procs = []
    for name in "abc":
        cmd = [diloco, "node", "--cluster", cluster, "--name", name, "--log-level", "error",
               "--connect-timeout", "60"]
        if name == "a":
            cmd += ["--run-dir", run_dir, "--run-timeout", "600"]
        if taped:
            cmd += ["--tape", tapes]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit("a node failed: " + err.decode()[-2000:])
    summary = json.load(open(os.path.join(run_dir, "summary.json")))["systems"][0]
    tape_bytes = 0
    if taped:
        tape_bytes = sum(os.path.getsize(os.path.join(tapes, f)) for f in os.listdir(tapes))
        shutil.rmtree(tapes)
    shutil.rmtree(run_dir)
    return summary["tokens"] / summary["run_s"], summary["run_s"], tape_bytes


def measure(name, run, pairs):
    ratios, plain_rates, taped_rates, per_hour = [], [], [], []
    for k in range(pairs):
        plain, _, _ = run(False)
        taped, seconds, size = run(True)
        ratios.append(taped / plain)
        plain_rates.append(plain)
        taped_rates.append(taped)
        per_hour.append(size / seconds * 3600)
        print(f"  {name} pair {k + 1}: untaped {plain:,.0f} tokens/s, taped {taped:,.0f} "
              f"tokens/s, ratio {taped / plain:.3f}, tape {size / 1e6:.1f} MB in {seconds:.1f} s",
              flush=True)
    print(f"{name}: taped / untaped tokens/s, median of {pairs} pairs: "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); "
          f"tape {statistics.median(per_hour) / 1e9:.2f} GB per hour of training", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--diloco", default="build/apps/diloco")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--budget", type=int, default=1280000)
    ap.add_argument("--only", choices=["realtime", "deployed"])
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tape-overhead-")
    try:
        with open(os.path.join(work, "secret"), "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        if a.only in (None, "realtime"):
            measure("realtime", lambda taped: realtime_run(a.diloco, a.budget, work, taped), a.pairs)
        if a.only in (None, "deployed"):
            port = 24000 + (os.getpid() * 7) % 4000
            cluster = cluster_file(work, port, a.budget)
            measure("deployed", lambda taped: deployed_run(a.diloco, cluster, work, taped, port),
                    a.pairs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
