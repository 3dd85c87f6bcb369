#!/usr/bin/env python3
"""PyTorch learners computing their next step ahead on a simulation's threads: the built-in
run with the PyTorch twin of the built-in MLP (tests/python/mlp_twin.py, a learner that allows
steps ahead), on one thread and on N, alternating, `--rounds` times each. Prints the mean wall
times, their ratio (one thread over N: above 1.0 is faster), the steps taken ahead and put
back, and fails unless every run prints the same trace hash and eval loss.

usage: PYTHONPATH=build/python:tests/python python3 bench/python_threads.py
           [--threads N] [--rounds R] [--hidden H] [--budget TOKENS]
(--hidden: the MLP's hidden width, 128 by default; 1024 is a model with ~4x the compute per
step; --budget: the run's token budget, 320000 by default, a quarter of the built-in run's)
"""

import argparse
import os
import statistics
import sys
import time

import diloco
import mlp_twin


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=0)
    ap.add_argument("--budget", type=int, default=320000)
    a = ap.parse_args()
    if a.threads < 2 or a.rounds < 1:
        sys.exit("python_threads.py: --threads must be at least 2 and --rounds at least 1")
    sets = {"token_budget": a.budget}
    if a.hidden > 0:
        sets["model.hidden"] = a.hidden
    times = {1: [], a.threads: []}
    seen = set()
    ahead = None
    for _ in range(a.rounds):
        for n in (1, a.threads):
            t0 = time.perf_counter()
            r = diloco.simulate(learner=mlp_twin.make_learner, set=sets, threads=n,
                                progress=False)
            times[n].append(time.perf_counter() - t0)
            seen.add((r["trace_hash"], r["eval_loss"]))
            if n > 1:
                ahead = r["steps_ahead"]
    one, many = statistics.mean(times[1]), statistics.mean(times[a.threads])
    print(f"bench/python_threads.py: {os.cpu_count()} cores, model.hidden "
          f"{a.hidden or 'default'}, {a.budget} tokens, {a.rounds} rounds")
    print(f"1 thread   {one:7.2f} s  ({', '.join(f'{t:.2f}' for t in times[1])})")
    print(f"{a.threads} threads {many:7.2f} s  ({', '.join(f'{t:.2f}' for t in times[a.threads])})"
          f"  steps ahead: {ahead['taken']} taken, {ahead['put_back']} put back")
    print(f"speedup {one / many:.2f}x")
    if len(seen) != 1:
        sys.exit(f"python_threads.py: the runs differ: {sorted(seen)}")
    trace, loss = seen.pop()
    print(f"every run: eval loss {loss:.4f}, trace {trace}")


if __name__ == "__main__":
    main()
