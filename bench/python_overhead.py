#!/usr/bin/env python3
"""Runtime overhead around a PyTorch learner: the same model trained for the same number of
steps on the same batches and threads, (a) as a bare PyTorch loop (next batch, forward,
backward, clipping, AdamW) and (b) as the one learner of a simulated Decoupled DiLoCo run
(diloco.simulate: the runtime's actors, outer gradients every H steps, merges, int4 codecs).
One learner, so that both sides keep one model's working set in cache.
Prints the ratio bare / runtime: 1.0 is no overhead, by wall time (the run's excludes set-up
and the final evaluation; the bare loop is timed the same way) and by the process's CPU time
(the whole simulate() call, set-up included, against the bare loop's). The best of --repeats.
--mirror runs the learner through the device mirror (its parameters in storage of their own,
copied to and from the runtime's buffer at each sync, as a GPU module's are); --hidden widens
the MLP (1280: 2.3M parameters).

usage: PYTHONPATH=build/python:tests/python python3 bench/python_overhead.py [--model mlp|transformer]
       [--hidden N] [--mirror]
(transformer: examples/tiny_transformer.py on the fortunes text, 1024 tokens per step)
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import diloco  # noqa: E402
from diloco._threads import pinned  # noqa: E402


def factory(model_name):
    if model_name == "mlp":
        import mlp_twin
        return mlp_twin.make_learner
    import tiny_transformer
    return tiny_transformer.make_learner


def bare(make, sets, steps, hidden):
    """The same learner built by the same factory, stepped by a plain loop. Returns (wall, CPU)
    seconds."""
    data = diloco.open_data(set=sets, index=0)

    ctx = diloco.LearnerContext(0, 1, 1, 0, data, None, None, data.batch, data.context,
                                diloco.config_yaml(set=sets))
    ctx.inner = {"lr": 2e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
                 "clip_norm": 1.0}
    ctx.model = {"vocab": 256, "context": data.context, "embed_dim": 32, "hidden": hidden,
                 "hidden_layers": 2}
    ctx.seed = 1
    learner = make(ctx)
    params = [p for p in learner.module.parameters()]
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _ in range(steps):
        learner.optimizer.zero_grad(set_to_none=False)
        if learner.loss is not None:
            x, y = data.next_batch()
            loss = learner.loss(x, y)
        else:
            loss, _ = learner.step()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        learner.optimizer.step()
    return time.perf_counter() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "transformer"])
    ap.add_argument("--tokens", type=int, default=256000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256, help="the MLP's hidden width")
    ap.add_argument("--mirror", action="store_true", help="the learner through the device mirror")
    a = ap.parse_args()
    make = factory(a.model)
    if a.mirror:
        plain = make

        def make(ctx):
            learner = plain(ctx)
            learner.mirror = True
            return learner
    sets = {"token_budget": a.tokens, "learners": 1, "model.hidden": a.hidden}
    if a.model == "transformer":
        import transformer_text
        corpus = "/tmp/diloco-bench-fortunes.txt"
        transformer_text.build_corpus(corpus)
        sets.update({"model.context": 32, "batch": 1024, "data.text_file": corpus,
                     "token_budget": a.tokens * 4})
    best = {"run": None, "bare": None, "run_cpu": None, "bare_cpu": None}
    keep = lambda k, v: best.update({k: v if best[k] is None else min(best[k], v)})
    steps, params, copies = 0, 0, {}
    with pinned(1):
        for _ in range(a.repeats):
            before = diloco.copy_counts()
            c0 = time.process_time()
            r = diloco.simulate(learner=make, set=sets, eval_every=0, progress=False)
            keep("run_cpu", time.process_time() - c0)
            after = diloco.copy_counts()
            copies = {k: after[k] - before[k] for k in ("d2h", "h2d", "d2h_bytes", "h2d_bytes")}
            steps = sum(l["steps"] for l in r["learners"])
            params = sum(t.numel() for t in r["model"].values())
            keep("run", r["run_wall_s"])
            wall, cpu = bare(make, sets, steps, a.hidden)
            keep("bare", wall)
            keep("bare_cpu", cpu)
    print(f"model {a.model}: {params / 1e6:.2f}M parameters, {steps} steps of one learner "
          f"(Decoupled DiLoCo, its shards and syncs), torch threads 1"
          f"{', device mirror' if a.mirror else ''}")
    if a.mirror:
        model_bytes = 4 * params
        print(f"mirror copies: {copies['d2h']} ranges device-to-host "
              f"({copies['d2h_bytes'] / model_bytes:.2f} models), {copies['h2d']} host-to-device "
              f"({copies['h2d_bytes'] / model_bytes:.2f} models) over {steps} steps")
    print(f"bare PyTorch loop: {best['bare']:.2f} s wall, {best['bare_cpu']:.2f} s CPU "
          f"({steps / best['bare']:.0f} steps/s)")
    print(f"diloco.simulate:   {best['run']:.2f} s wall (the run), {best['run_cpu']:.2f} s CPU "
          f"(the whole call) ({steps / best['run']:.0f} steps/s)")
    print(f"overhead ratio (bare / runtime): wall {best['bare'] / best['run']:.3f}, "
          f"CPU {best['bare_cpu'] / best['run_cpu']:.3f}")


if __name__ == "__main__":
    main()
