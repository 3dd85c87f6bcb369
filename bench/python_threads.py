#!/usr/bin/env python3
"""PyTorch learners computing their next step ahead on a simulation's threads: the built-in
run with the PyTorch twin of the built-in MLP (tests/python/mlp_twin.py, a learner that allows
steps ahead), on one thread and on N, alternating, `--rounds` times each. Prints the mean
wall times, their speedup over one thread, the steps taken ahead and put back, and the ceiling
of the same hour (two one-thread runs side by side in two processes against one alone); fails
unless every run prints the same trace hash and eval loss.

usage: PYTHONPATH=build/python:tests/python python3 bench/python_threads.py
           [--threads N] [--rounds R] [--hidden H] [--budget TOKENS]
(--hidden: the MLP's hidden width, 256 by default; 1024 is a model with ~4x the compute per
step; --budget: the run's token budget, 320000 by default, a quarter of the built-in run's)

       PYTHONPATH=build/python:tests/python python3 bench/python_threads.py --lock
What Python's lock leaves to threads: a torch training loop run once alone, then twice at once
on two threads of this process, and twice at once in two processes: the throughput of each
pair over one alone. The loops: the twin's own step (forward, backward, AdamW; batch 64,
hidden 256 and 1024) and a batch x n by n x n product with tanh, backward and AdamW (n = 128,
1024, 2048). torch's threads and its BLAS's are pinned to 1, as a simulation pins them; the
last row leaves OpenBLAS's own pool at its default, which two threads calling it at once
fight over.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time

import torch

import diloco
import mlp_twin


def product_loop(n, size, batch):
    a = torch.randn(batch, size)
    w = torch.randn(size, size, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=1e-3)
    for _ in range(n):
        opt.zero_grad()
        (a @ w).tanh().sum().backward()
        opt.step()


def twin_loop(n, hidden, batch):
    model = mlp_twin.MlpTwin(256, 8, 32, hidden, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (batch, 8))
    y = torch.randint(0, 256, (batch,))
    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def pair_seconds(start, loop, args):
    workers = [start(target=loop, args=args) for _ in range(2)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if any(getattr(w, "exitcode", 0) for w in workers):
        sys.exit("python_threads.py: a loop of the pair failed (its error is above)")
    return time.perf_counter() - t0


def pair_row(name, loop, args):
    import threading
    fork = multiprocessing.get_context("fork")
    loop(max(1, args[0] // 20), *args[1:])  # warm up
    t0 = time.perf_counter()
    loop(*args)
    one = time.perf_counter() - t0
    threads = pair_seconds(threading.Thread, loop, args)
    processes = pair_seconds(fork.Process, loop, args)
    print(f"{name:38s} one alone {one:6.2f} s; two threads {threads:6.2f} s "
          f"({2 * one / threads:.2f}x); two processes {processes:6.2f} s "
          f"({2 * one / processes:.2f}x)", flush=True)


def lock():
    from diloco._threads import pinned
    print("bench/python_threads.py --lock: two loops at once over one alone (2.0 = twice the work"
          " in the same time)")
    rows = [(f"twin, hidden {h}, batch 64, {n} steps", twin_loop, (n, h, 64))
            for h, n in ((256, 1500), (1024, 200))]
    rows += [(f"n {size}, batch {batch}, {n} steps", product_loop, (n, size, batch))
             for size, batch, n in ((128, 64, 3000), (1024, 256, 40), (2048, 512, 8))]
    with pinned(1):
        for name, loop, args in rows:
            pair_row(name, loop, args)
    torch.set_num_threads(1)
    name, loop, args = rows[0]
    pair_row(name + ", BLAS pool", loop, args)


def run(sets, threads):
    t0 = time.perf_counter()
    r = diloco.simulate(learner=mlp_twin.make_learner, set=sets, threads=threads,
                        progress=False)
    return time.perf_counter() - t0, r


def ceiling(sets):
    """Two one-thread runs side by side in two processes, against one alone before: what the
    cores give to two independent jobs of this kind (2.0 at best)."""
    fork = multiprocessing.get_context("fork")
    alone, _ = run(sets, 1)
    jobs = [fork.Process(target=run, args=(sets, 1)) for _ in range(2)]
    t0 = time.perf_counter()
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    pair = time.perf_counter() - t0
    if any(j.exitcode != 0 for j in jobs):
        sys.exit(f"python_threads.py: a run of the ceiling's pair failed (exit codes "
                 f"{[j.exitcode for j in jobs]}; its error is above)")
    return alone, pair


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=0)
    ap.add_argument("--budget", type=int, default=320000)
    ap.add_argument("--lock", action="store_true")
    a = ap.parse_args()
    if a.lock:
        lock()
        return
    if a.threads < 2 or a.rounds < 1:
        sys.exit("python_threads.py: --threads must be at least 2 and --rounds at least 1")
    sets = {"token_budget": a.budget}
    if a.hidden > 0:
        sets["model.hidden"] = a.hidden
    modes = [("1 thread", 1), (f"{a.threads} threads", a.threads)]
    times = {m: [] for m in modes}
    ahead = {}
    seen = set()
    for _ in range(a.rounds):
        for m in modes:
            seconds, r = run(sets, m[1])
            times[m].append(seconds)
            seen.add((r["trace_hash"], r["eval_loss"]))
            ahead[m] = r["steps_ahead"]
    alone, pair = ceiling(sets)
    print(f"bench/python_threads.py: {os.cpu_count()} cores, model.hidden "
          f"{a.hidden or 'default'}, {a.budget} tokens, {a.rounds} rounds")
    base = statistics.mean(times[modes[0]])
    for m in modes:
        mean = statistics.mean(times[m])
        extra = "" if m[1] == 1 else (f"  steps ahead: {ahead[m]['taken']} taken, "
                                      f"{ahead[m]['put_back']} put back")
        print(f"{m[0]:22s} {mean:7.2f} s  ({', '.join(f'{t:.2f}' for t in times[m])})  "
              f"speedup {base / mean:.2f}x{extra}")
    print(f"ceiling: two one-thread runs side by side {pair:.2f} s against {alone:.2f} s "
          f"alone: {2 * alone / pair:.2f}x")
    if len(seen) != 1:
        sys.exit(f"python_threads.py: the runs differ: {sorted(seen)}")
    trace, loss = seen.pop()
    print(f"every run: eval loss {loss:.4f}, trace {trace}")


if __name__ == "__main__":
    main()
