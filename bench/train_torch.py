#!/usr/bin/env python3
"""The same MLP byte-level LM, batch and optimizer as `diloco train`, in PyTorch (the baseline
of bench/train_vs_pytorch.sh). Prints one line: tokens_per_s=<float>.

Model: embedding (256, E), `layers` tanh layers of width H over the concatenated context
embeddings, linear output to 256 logits, cross-entropy; AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1), global-norm clipping 1.0. Batches are random tokens made before timing, so
the baseline is timed on compute alone (diloco's figure includes its data generation).
"""
import argparse
import os
import sys
import time

import torch

# The kernels of the BLAS under torch, as a PyTorch learner in diloco gets them (a fair
# baseline: on a CPU Debian's OpenBLAS does not know it falls back to SSE3 kernels, and
# python/diloco/_blas.py chooses again). Without the built package, OpenBLAS's own choice.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))
try:
    from diloco import _blas
    print(f"train_torch.py: {_blas.describe()}", file=sys.stderr)
except ImportError as e:
    print(f"train_torch.py: without diloco's BLAS check ({e})", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--context", type=int, default=8)
    ap.add_argument("--embed-dim", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    layers = [torch.nn.Flatten(), torch.nn.Linear(a.context * a.embed_dim, a.hidden), torch.nn.Tanh()]
    for _ in range(a.layers - 1):
        layers += [torch.nn.Linear(a.hidden, a.hidden), torch.nn.Tanh()]
    layers += [torch.nn.Linear(a.hidden, 256)]
    emb = torch.nn.Embedding(256, a.embed_dim)
    mlp = torch.nn.Sequential(*layers)
    params = list(emb.parameters()) + list(mlp.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()

    warm = 50
    ctx = torch.randint(0, 256, (a.steps + warm, a.batch, a.context))
    tgt = torch.randint(0, 256, (a.steps + warm, a.batch))

    def step(i):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(mlp(emb(ctx[i])), tgt[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for i in range(warm):
        step(i)
    start = time.perf_counter()
    for i in range(warm, warm + a.steps):
        step(i)
    elapsed = time.perf_counter() - start
    print(f"tokens_per_s={a.steps * a.batch / elapsed:.1f}")


if __name__ == "__main__":
    main()
