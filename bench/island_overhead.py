#!/usr/bin/env python3
"""An island of 2 ranks against the same model trained bare with DistributedDataParallel on the
same 2 ranks (gloo, CPU): the same module, optimizer, batches (each rank its own, in rank order
from learner 0's data), gradient clipping and number of steps. With --fsdp both sides shard the
module with fully_shard instead (each layer, then the root; torch 2.4 and later), and the
island's outer sync gathers a fragment's parameters to rank 0 when it is due.

(a) bare: 2 processes started with torchrun's environment, each a plain loop (next batch,
    forward, backward through DDP, clipping, AdamW).
(b) island: `diloco node` as the leader with the one syncer shard, and the learner's node as a
    2-rank island (`python3 -m diloco node --learner ...` on each rank): outer gradients every
    H steps, merges, int4 codecs, the merged spans broadcast to rank 1.

Prints the ratios island / bare of the tokens per second and bare / island of the two ranks'
process CPU time (the best of the repeats for each side; and each repeat's island against the
bare run beside it, their median and range), both from the first step's start to the last step's end on each rank (the
processes' start-up, the island's wait for the run and its final evaluation left out; the whole
processes' CPU is printed beside, and the leader's), and rank 0's account of the outer sync: its
time between steps per merged fragment against the island's step time.
The best of --repeats for each side.

usage: PYTHONPATH=build/python python3 bench/island_overhead.py [--hidden 1024] [--steps 1500]
       [--repeats 2] [--fsdp]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_net(context, hidden):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(256, 32)
            self.h1 = torch.nn.Linear(context * 32, hidden)
            self.h2 = torch.nn.Linear(hidden, hidden)
            self.out = torch.nn.Linear(hidden, 256)

        def forward(self, x):
            h = self.embed(x).reshape(x.shape[0], -1)
            h = torch.tanh(self.h1(h))
            h = torch.tanh(self.h2(h))
            return self.out(h)

    return Net()


def wrap(model, world):
    """The module as each side trains it on `world` ranks: sharded with fully_shard (each layer,
    then the root) when BENCH_FSDP is set, else in DistributedDataParallel."""
    import torch

    if world <= 1:
        return model
    if os.environ.get("BENCH_FSDP"):
        from torch.distributed.fsdp import fully_shard

        for layer in (model.embed, model.h1, model.h2, model.out):
            fully_shard(layer)
        fully_shard(model)
        return model
    return torch.nn.parallel.DistributedDataParallel(model)


def make_learner(ctx):
    """The island's factory (`--learner island_overhead:make_learner`)."""
    import torch
    import torch.nn.functional as F

    import diloco

    model = wrap(make_net(ctx.context, int(os.environ.get("BENCH_HIDDEN", "1024"))),
                 ctx.world_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y),
                          schedule_lr=False)


def bare_rank(cluster, steps, hidden):
    """One rank of the bare loop (DDP, or FSDP with --fsdp); prints its timing as JSON (rank 0)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import diloco

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = diloco.open_data(cluster, index=0)
    torch.manual_seed(1)
    model = wrap(make_net(data.context, hidden), world)
    if os.environ.get("BENCH_FLAT"):
        # The parameters and gradients as views into one flat buffer each, as the runtime
        # keeps them (64-byte aligned tensors).
        params = list(model.parameters())
        sizes = [(p.numel() + 15) // 16 * 16 for p in params]
        flat, grad = torch.zeros(sum(sizes)), torch.zeros(sum(sizes))
        at = 0
        with torch.no_grad():
            for p, n in zip(params, sizes):
                v = flat[at:at + p.numel()].view(p.shape)
                v.copy_(p)
                p.data = v
                p.grad = grad[at:at + p.numel()].view(p.shape)
                at += n
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = 0
    for _ in range(steps):
        batches = [data.next_batch() for _ in range(world)]  # the island's read, in rank order
        x, y = batches[rank]
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += world * len(y)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"tokens": tokens, "wall": wall, "cpu": cpu, "loss": float(loss)}),
          flush=True)
    dist.destroy_process_group()


def run_ranks(cmds, env_of, cwd=None):
    """Starts each command with its environment; waits; returns [(code, stdout, CPU s)]."""
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=cwd) for c, e in zip(cmds, env_of)]
    out = []
    for p in procs:
        text = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.append((p.returncode, text, usage.ru_utime + usage.ru_stime))
    return out


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, port, extra):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", **extra)
    return env


def bare(cluster, steps, hidden):
    port = free_port()
    cmd = [sys.executable, os.path.abspath(__file__), "--bare-rank", "--cluster", cluster,
           "--steps", str(steps), "--hidden", str(hidden)]
    res = run_ranks([cmd, cmd], [rank_env(r, port, {}) for r in (0, 1)])
    for code, text, _ in res:
        if code != 0:
            raise SystemExit(f"bare rank failed:\n{text}")
    timing = [json.loads(r[1].strip().splitlines()[-1]) for r in res]
    return (timing[0]["tokens"] / timing[0]["wall"], sum(t["cpu"] for t in timing),
            [t["cpu"] for t in timing], sum(r[2] for r in res))


def island(work, diloco_exe, steps, hidden):
    py = sys.executable
    env = dict(os.environ, BENCH_HIDDEN=str(hidden), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    model = os.path.join(work, "model.dlly")
    subprocess.run([py, "-m", "diloco", "export-model", "--learner",
                    "island_overhead:make_learner", "-o", model], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    base = free_port()
    cluster = os.path.join(work, "island.yaml")
    with open(cluster, "w") as f:
        f.write(f"""learners: 1
shards: 1
token_budget: {steps * 128}
model: {{file: {model}}}
secret_file: {work}/secret
nodes:
  - {{name: a, host: 127.0.0.1, port: {base + 100}}}
  - {{name: b, host: 127.0.0.1, port: {base + 102}}}
placement:
  learners: [b]
  shards: [a]
""")
    run_dir = os.path.join(work, "run")
    leader = subprocess.Popen([diloco_exe, "node", "--cluster", cluster, "--name", "a",
                               "--run-dir", run_dir, "--run-timeout", "3000"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = free_port()
    cmd = [py, "-m", "diloco", "node", "--cluster", cluster, "--name", "b", "--learner",
           "island_overhead:make_learner"]
    res = run_ranks([cmd, cmd], [rank_env(r, port, {k: env[k] for k in ("BENCH_HIDDEN",
                                                                         "PYTHONPATH")})
                                 for r in (0, 1)])
    text = leader.stdout.read()
    _, status, usage = os.wait4(leader.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or any(r[0] != 0 for r in res):
        raise SystemExit("the island run failed:\n" + text + "\n".join(r[1] for r in res))
    end = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e["type"] == "end":
                end = e
    account = re.search(r"island of 2 ranks: .*", res[0][1]).group(0)
    m = re.search(r"(\d+) steps, [0-9.]+ ms each \(([0-9.]+) s from the first to the last, "
                  r"rank 0 ([0-9.]+) CPU s\)", account)
    steps, wall, cpu0 = int(m.group(1)), float(m.group(2)), float(m.group(3))
    cpu1 = float(re.search(r"steps, ([0-9.]+) CPU s from the first", res[1][1]).group(1))
    return (steps * 128 / wall, cpu0 + cpu1, usage.ru_utime + usage.ru_stime, account,
            [cpu0, cpu1], sum(r[2] for r in res), end["tokens"] / end["run_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--diloco", default=os.path.join(ROOT, "build", "apps", "diloco"))
    ap.add_argument("--fsdp", action="store_true", help="shard the module (fully_shard) on "
                    "both sides instead of DistributedDataParallel")
    ap.add_argument("--bare-rank", action="store_true")
    ap.add_argument("--cluster")
    a = ap.parse_args()
    if a.fsdp:
        os.environ["BENCH_FSDP"] = "1"  # both sides' processes inherit it
    if a.bare_rank:
        return bare_rank(a.cluster, a.steps, a.hidden)
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "secret"), "w") as f:
            f.write(os.urandom(32).hex())
        best_bare, best_island = None, None
        pairs = []
        for r in range(a.repeats):
            i = island(work, a.diloco, a.steps, a.hidden)
            cluster = os.path.join(work, "island.yaml")
            b = bare(cluster, a.steps, a.hidden)
            print(f"repeat {r + 1}: bare {'FSDP' if a.fsdp else 'DDP'} {b[0]:,.0f} tokens/s, CPU s {b[1]:.1f} (ranks "
                  f"{b[2][0]:.1f}, {b[2][1]:.1f}; whole processes {b[3]:.1f}); island "
                  f"{i[0]:,.0f} tokens/s, CPU s {i[1]:.1f} (ranks {i[4][0]:.1f}, {i[4][1]:.1f}; "
                  f"whole processes {i[5]:.1f}, the leader {i[2]:.1f}; the whole run "
                  f"{i[6]:,.0f} tokens/s)", flush=True)
            pairs.append((i[0] / b[0], b[1] / i[1]))
            if best_bare is None or b[0] > best_bare[0]:
                best_bare = b
            if best_island is None or i[0] > best_island[0]:
                best_island = i
        import torch

        import diloco
        context = diloco.open_data(os.path.join(work, "island.yaml"), index=0).context
        params = sum(p.numel() for p in make_net(context, a.hidden).parameters())
        print(f"model: {params / 1e6:.2f}M parameters (hidden {a.hidden}), {a.steps} steps of "
              f"2 x 64 tokens; PyTorch {torch.__version__}, {os.cpu_count()} CPUs")
        side = "FSDP" if a.fsdp else "DDP"
        print(f"tokens/s: island {best_island[0]:,.0f} / bare {side} {best_bare[0]:,.0f} = "
              f"{best_island[0] / best_bare[0]:.3f}")
        print(f"CPU time of the 2 ranks: bare {side} {best_bare[1]:.1f} s / island "
              f"{best_island[1]:.1f} s = {best_bare[1] / best_island[1]:.3f} (the leader with "
              f"the shard: {best_island[2]:.1f} s more)")
        print(f"outer sync: {best_island[3]}")
        if len(pairs) > 1:
            tok = sorted(p[0] for p in pairs)
            cpu = sorted(p[1] for p in pairs)
            print(f"each repeat's island against its own bare run: tokens/s median "
                  f"{tok[len(tok) // 2]:.3f} (from {tok[0]:.3f} to {tok[-1]:.3f}), CPU median "
                  f"{cpu[len(cpu) // 2]:.3f} (from {cpu[0]:.3f} to {cpu[-1]:.3f}) over "
                  f"{len(pairs)} repeats")


if __name__ == "__main__":
    main()
