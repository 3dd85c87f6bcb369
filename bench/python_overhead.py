#!/usr/bin/env python3
"""Runtime overhead around a PyTorch learner: the same model trained for the same number of
steps on the same batches and threads, (a) as a bare PyTorch loop (next batch, forward,
backward, clipping, AdamW) and (b) as the one learner of a simulated Decoupled DiLoCo run
(diloco.simulate: the runtime's actors, outer gradients every H steps, merges, int4 codecs).
One learner, so that both sides keep one model's working set in cache.
Prints the ratio bare / runtime: 1.0 is no overhead. The run's wall time excludes set-up and
the final evaluation; the bare loop is timed the same way. The best of --repeats.

usage: PYTHONPATH=build/python:tests/python python3 bench/python_overhead.py [--model mlp|transformer]
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


def bare(make, sets, steps):
    """The same learner built by the same factory, stepped by a plain loop."""
    data = diloco.open_data(set=sets, index=0)

    ctx = diloco.LearnerContext(0, 1, 1, 0, data, None, None, data.batch, data.context,
                                diloco.config_yaml(set=sets))
    ctx.inner = {"lr": 2e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
                 "clip_norm": 1.0}
    ctx.model = {"vocab": 256, "context": data.context, "embed_dim": 32, "hidden": 256,
                 "hidden_layers": 2}
    learner = make(ctx)
    params = [p for p in learner.module.parameters()]
    t0 = time.perf_counter()
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
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "transformer"])
    ap.add_argument("--tokens", type=int, default=256000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    make = factory(a.model)
    sets = {"token_budget": a.tokens, "learners": 1}
    if a.model == "transformer":
        import transformer_text
        corpus = "/tmp/diloco-bench-fortunes.txt"
        transformer_text.build_corpus(corpus)
        sets.update({"model.context": 32, "batch": 1024, "data.text_file": corpus,
                     "token_budget": a.tokens * 4})
    best_run, best_bare, steps = None, None, 0
    with pinned(1):
        for _ in range(a.repeats):
            r = diloco.simulate(learner=make, set=sets)
            steps = sum(l["steps"] for l in r["learners"])
            best_run = r["run_wall_s"] if best_run is None else min(best_run, r["run_wall_s"])
            t = bare(make, sets, steps)
            best_bare = t if best_bare is None else min(best_bare, t)
    print(f"model {a.model}: {steps} steps of one learner (Decoupled DiLoCo, its shards and syncs), torch threads 1")
    print(f"bare PyTorch loop: {best_bare:.2f} s ({steps / best_bare:.0f} steps/s)")
    print(f"diloco.simulate:   {best_run:.2f} s ({steps / best_run:.0f} steps/s)")
    print(f"overhead ratio (bare / runtime): {best_bare / best_run:.3f}")


if __name__ == "__main__":
    main()
