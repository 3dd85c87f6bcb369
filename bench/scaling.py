#!/usr/bin/env python3
"""The DiLoCo scaling-law trend in miniature: byte-level transformers at three sizes on held-out
English text, each trained on about 20 tokens per parameter by data parallel, DiLoCo with M = 1,
2 and 4 replicas (as published, "vanilla", and this runtime's synchronous variant) and
Decoupled DiLoCo with M = 4, the global batch split across the replicas. Every replica draws
its windows from the whole training text (independent, identically distributed batches), so
data parallel is the same system for any M and only the method differs.

Settings are swept at the smallest size on one seed and carried to the larger sizes, as the
scaling-law paper does: data parallel's inner lr x weight decay (ten tries); each DiLoCo
system's inner lr over the same five values at outer lr 0.7 and data parallel's weight decay,
then its outer lr over five values at its best inner lr (nine tries each). The main runs repeat
each tuned system on every seed; the tables give eval loss (nats per byte on the whole held-out
tenth of the text) as mean +- sample standard deviation and the gap to data parallel of the
same seed.

usage: bench/scaling.py [--seeds 1,2,3] [--sizes 32x2,48x2,64x2] [--jobs 2] [--out DIR]
(84 minutes of runs with the defaults, two at a time on 2 cores: 45 to 60 minutes; finished runs are kept in
DIR/runs and not run again, so an interrupted sweep continues where it stopped)
"""

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
# The built package: $DILOCO_BUILD/python (default: the build directory scripts/build.sh makes)
PACKAGE = os.path.join(os.environ.get("DILOCO_BUILD", os.path.join(ROOT, "build")), "python")
sys.path[:0] = [EXAMPLES, PACKAGE]

from transformer_text import build_corpus  # noqa: E402  (the same text as the example)

CONTEXT = 32
HEADS = 4
# (key, label, replicas, --system or None for the cluster as written: Decoupled DiLoCo)
SYSTEMS = [
    ("dp", "data parallel", 4, "dp"),
    ("vanilla-1", "DiLoCo M=1, vanilla", 1, "vanilla"),
    ("ours-1", "DiLoCo M=1, ours (sync)", 1, "diloco"),
    ("vanilla-2", "DiLoCo M=2, vanilla", 2, "vanilla"),
    ("ours-2", "DiLoCo M=2, ours (sync)", 2, "diloco"),
    ("vanilla-4", "DiLoCo M=4, vanilla", 4, "vanilla"),
    ("ours-4", "DiLoCo M=4, ours (sync)", 4, "diloco"),
    ("decoupled-4", "Decoupled DiLoCo M=4", 4, None),
]
INNER_LRS = (0.008, 0.016, 0.032, 0.064, 0.128)
WEIGHT_DECAYS = (0.0, 0.1)
OUTER_LRS = (0.1, 0.2, 0.4, 0.7, 1.0)


def parse_sizes(text):
    sizes = []
    for item in text.split(","):
        d, _, layers = item.partition("x")
        if not (d.isdigit() and layers.isdigit()) or int(d) % HEADS or int(layers) < 1:
            sys.exit(f"scaling: --sizes: '{item}' is not WIDTHxLAYERS with WIDTH a multiple of "
                     f"{HEADS}")
        sizes.append((int(d), int(layers)))
    return sizes


def parameters(d, layers):
    """The transformer's parameter count, from the model itself."""
    import torch  # noqa: F401  (tiny_transformer needs it; imported here for a clear failure)
    from tiny_transformer import TinyTransformer
    return sum(p.numel() for p in TinyTransformer(CONTEXT, d, layers, HEADS).parameters())


def fingerprint():
    """What a kept run's result depends on beyond its settings: the runtime and the model."""
    h = hashlib.sha256()
    lib = [f for f in os.listdir(os.path.join(PACKAGE, "diloco")) if f.startswith("_diloco")]
    if not lib:
        sys.exit(f"scaling: no built diloco package in {PACKAGE}: run scripts/build.sh first")
    for path in [os.path.join(PACKAGE, "diloco", lib[0]), os.path.join(EXAMPLES,
                                                                      "tiny_transformer.py")]:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


class Runner:
    """Runs simulations (as subprocesses, `jobs` at a time), keeps their results, shows
    progress."""

    def __init__(self, out, corpus, jobs, stamp):
        self.out, self.corpus, self.jobs, self.stamp = out, corpus, jobs, stamp
        self.lock = threading.Lock()
        self.done = self.total = 0
        self.spent = 0.0
        # The time left, from the work done so far: each run weighs its tokens.
        self.weight_total = self.weight_done = self.weight_kept = 0
        self.started = time.time()

    def cluster(self, size, seed, system, s, tokens, global_batch, period):
        _, m, _ = system
        steps = tokens // global_batch
        return f"""seed: {seed}
learners: {m}
shards: {2 if system[2] is None else 1}
batch: {global_batch // m}
token_budget: {steps * global_batch}
fragments: 4
period_steps: {period}
overlap_steps: 2
model: {{context: {CONTEXT}}}
data: {{text_file: {self.corpus}}}
inner: {{lr: {s['lr']}, weight_decay: {s['wd']}, warmup_steps: {max(10, steps // 20)}}}
outer: {{lr: {s['outer']}, momentum: {s.get('momentum', 0.9)}}}
speed: {{step_time_s: 1}}
"""

    def run(self, job):
        """job: (name, (d, layers), yaml text, --system or None, weight, extra flags) -> result
        dict."""
        name, (d, layers), text, system, weight, extra = job
        key = hashlib.sha256(
            f"{self.stamp}\n{d}x{layers}\n{system}\n{text}{' '.join(extra)}".encode()).hexdigest()
        rd = os.path.join(self.out, "runs", name)
        kept = os.path.join(rd, "result.json")
        if os.path.exists(kept):
            with open(kept) as f:
                r = json.load(f)
            if r.get("key") == key:
                return self.finish(name, r, weight, kept=True)
        os.makedirs(rd, exist_ok=True)
        conf = os.path.join(rd, "cluster.yaml")
        with open(conf, "w") as f:
            f.write(text)
        cmd = [sys.executable, "-m", "diloco", "simulate", "--cluster", conf, "--learner",
               "tiny_transformer:make_learner", "--run-dir", rd, "--threads", "1",
               "--eval-every", "0"]
        if system:
            cmd += ["--system", system]
        cmd += [a.replace("{run}", rd) for a in extra]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, PACKAGE]),
                   TINY_TRANSFORMER=f"{d},{layers},{HEADS}", TINY_TRANSFORMER_EVAL_WINDOWS="0",
                   TINY_TRANSFORMER_DATA="whole",
                   OMP_NUM_THREADS="1")
        t0 = time.time()
        with open(os.path.join(rd, "log.txt"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        r = {"key": key, "exit": rc, "seconds": round(time.time() - t0, 1)}
        if rc == 0:
            end = None
            for metrics in ("metrics.jsonl",):
                with open(os.path.join(rd, metrics)) as f:
                    for line in f:
                        rec = json.loads(line)
                        if rec.get("type") == "end":
                            end = rec
            if end is None:
                sys.exit(f"scaling: {rd}/metrics.jsonl has no end record")
            r.update(eval=end["eval_loss"], tokens=end["tokens"],
                     bytes_per_token=end["learner_bytes"] / end["tokens"])
        elif rc == 3:  # diverged, or ended worse than it began: a setting that lost
            r.update(eval=math.inf)
        else:
            sys.exit(f"scaling: {name} failed (exit {rc}); see {rd}/log.txt")
        with open(kept, "w") as f:
            json.dump(r, f)
        return self.finish(name, r, weight, kept=False)

    def finish(self, name, r, weight, kept):
        with self.lock:
            self.done += 1
            if kept:
                self.weight_kept += weight
            else:
                self.spent += r["seconds"]
                self.weight_done += weight
            left = self.weight_total - self.weight_done - self.weight_kept
            elapsed = time.time() - self.started
            eta = ""
            if self.weight_done > 0 and left > 0:
                eta = f", about {elapsed * left / self.weight_done / 60:.0f} min left"
            how = "kept" if kept else f"{r['seconds']:.0f} s"
            print(f"[{self.done}/{self.total}] {name}: eval {r['eval']:.4f} ({how}{eta})",
                  flush=True)
        return r

    def all(self, jobs):
        with ThreadPoolExecutor(self.jobs) as pool:
            return list(pool.map(self.run, jobs))


def mean_sd(xs):
    if any(math.isinf(x) for x in xs):
        return "diverged"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.4f} +- {sd:.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32x2,48x2,64x2", help="WIDTHxLAYERS, smallest first")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--tokens-per-param", type=float, default=20)
    ap.add_argument("--global-batch", type=int, default=2048, help="tokens per step, all replicas")
    ap.add_argument("--period", type=int, default=30, help="H, inner steps between syncs")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sweep-seed", type=int, default=1)
    ap.add_argument("--out", default="runs/scaling")
    a = ap.parse_args()
    sizes = parse_sizes(a.sizes)
    seeds = [int(s) for s in a.seeds.split(",")]
    if a.global_batch % (4 * CONTEXT):
        sys.exit(f"scaling: --global-batch must be a multiple of {4 * CONTEXT} (4 replicas of "
                 f"windows of {CONTEXT} bytes)")
    os.makedirs(a.out, exist_ok=True)
    corpus = os.path.abspath(os.path.join(a.out, "fortunes.txt"))
    text_bytes = build_corpus(corpus)
    runner = Runner(a.out, corpus, max(1, a.jobs), fingerprint())
    params = {size: parameters(*size) for size in sizes}
    tokens = {size: int(a.tokens_per_param * params[size]) for size in sizes}
    train_bytes = int(text_bytes * 0.9)
    print(f"text: {text_bytes} bytes of English, the last tenth held out for evaluation; "
          f"global batch {a.global_batch} tokens, H {a.period}; {a.jobs} runs at a time")
    for size in sizes:
        print(f"  {size[0]}x{size[1]}: {params[size]:,} parameters, {tokens[size]:,} tokens "
              f"({tokens[size] / train_bytes:.2f} passes over the training text), "
              f"{tokens[size] // a.global_batch} steps")

    def job(size, seed, system, s, tag="", steps=None, extra=()):
        key, _, m, how = system
        budget = tokens[size] if steps is None else steps * a.global_batch
        text = runner.cluster(size, seed, (key, m, how), s, budget, a.global_batch, a.period)
        name = f"{size[0]}x{size[1]}-s{seed}-{key}{tag}"
        return name, size, text, how, budget, tuple(extra)

    # --- the sweep, at the smallest size on one seed
    small, seed = sizes[0], a.sweep_seed
    sweep_runs = (len(INNER_LRS) * len(WEIGHT_DECAYS)
                  + (len(SYSTEMS) - 1) * (len(INNER_LRS) + len(OUTER_LRS) - 1) + 4)
    runner.total = sweep_runs + len(sizes) * len(seeds) * len(SYSTEMS)
    runner.weight_total = (sweep_runs * tokens[small]
                           + sum(tokens[z] for z in sizes) * len(seeds) * len(SYSTEMS))
    dp = SYSTEMS[0]
    grid = [{"lr": lr, "wd": wd, "outer": 0.7} for lr in INNER_LRS for wd in WEIGHT_DECAYS]
    res = runner.all([job(small, seed, dp, s, f"-lr{s['lr']}-wd{s['wd']}") for s in grid])
    sweep = {dp[0]: list(zip(grid, res))}
    best = {dp[0]: min(zip(grid, res), key=lambda t: t[1]["eval"])[0]}
    base = best[dp[0]]
    diloco = SYSTEMS[1:]
    # Each DiLoCo system's inner lr at outer lr 0.7, then its outer lr at the best inner lr.
    stage = [(sys_, dict(base, lr=lr, outer=0.7)) for sys_ in diloco for lr in INNER_LRS]
    res = runner.all([job(small, seed, sys_, s, f"-lr{s['lr']}-wd{s['wd']}-o{s['outer']}")
                      for sys_, s in stage])
    for (sys_, s), r in zip(stage, res):
        sweep.setdefault(sys_[0], []).append((s, r))
    stage = []
    for sys_ in diloco:
        lr = min(sweep[sys_[0]], key=lambda t: t[1]["eval"])[0]["lr"]
        stage += [(sys_, dict(base, lr=lr, outer=o)) for o in OUTER_LRS if o != 0.7]
    res = runner.all([job(small, seed, sys_, s, f"-lr{s['lr']}-wd{s['wd']}-o{s['outer']}")
                      for sys_, s in stage])
    for (sys_, s), r in zip(stage, res):
        sweep[sys_[0]].append((s, r))
    for sys_ in diloco:
        best[sys_[0]] = min(sweep[sys_[0]], key=lambda t: t[1]["eval"])[0]

    # --- the check: DiLoCo with one replica, outer lr 1 and no momentum, is data parallel
    one = dict(base, outer=1.0, momentum=0.0)
    check = runner.all([job(small, seed, ("dp", "", 1, "dp"), one, "-check"),
                        job(small, seed, ("vanilla-1", "", 1, "vanilla"), one, "-check")])
    # The same just past the first outer step, the final models compared value by value.
    save = ("--save-model", "{run}/model.safetensors")
    runner.all([job(small, seed, ("dp", "", 1, "dp"), one, "-check-short", a.period + 1, save),
                job(small, seed, ("vanilla-1", "", 1, "vanilla"), one, "-check-short",
                    a.period + 1, save)])
    import diloco
    short = [diloco.load_model(os.path.join(a.out, "runs", f"{small[0]}x{small[1]}-s{seed}-{k}"
                                            "-check-short", "model.safetensors"))
             for k in ("dp", "vanilla-1")]
    differ = sum(int((short[0][n] != short[1][n]).sum()) for n in short[0])
    worst = max(float((short[0][n] - short[1][n]).abs().max()) for n in short[0])
    count = sum(v.numel() for v in short[0].values())

    # --- the main runs: every size, every seed, each system at its tuned settings
    main_jobs = [(size, sd, sys_) for size in sizes for sd in seeds for sys_ in SYSTEMS]
    res = runner.all([job(size, sd, sys_, best[sys_[0]]) for size, sd, sys_ in main_jobs])
    loss = {}
    for (size, sd, sys_), r in zip(main_jobs, res):
        loss[(size, sys_[0], sd)] = r["eval"]

    # --- what it shows
    lines = [f"Sweep at {small[0]}x{small[1]} ({params[small]:,} parameters), seed {seed}: eval "
             f"loss of each setting tried (inner lr, weight decay, outer lr); * the one kept", ""]
    for key, label, _, _ in SYSTEMS:
        tried = ", ".join(f"{'*' if s == best[key] else ''}{s['lr']:g}/{s['wd']:g}/{s['outer']:g}"
                          f" {r['eval']:.4f}" for s, r in sweep[key])
        lines.append(f"- {label}: {tried}")
    def at_edge(key, s):
        return s["lr"] in (INNER_LRS[0], INNER_LRS[-1]) or (
            key != "dp" and s["outer"] in (OUTER_LRS[0], OUTER_LRS[-1]))

    edge = [k for k, s in best.items() if at_edge(k, s)]
    if edge:
        lines.append(f"- at the edge of the grid: {', '.join(edge)} (a wider grid might do "
                     f"better)")
    d1, v1 = check[0]["eval"], check[1]["eval"]
    lines += ["", f"Check: one replica, outer lr 1, momentum 0, where vanilla DiLoCo is data "
              f"parallel but for rounding: after {a.period + 1} steps (one outer step) "
              f"{differ:,} of {count:,} parameters differ, by at most {worst:.2e}; after the "
              f"whole run eval loss {d1:.4f} (data parallel) against {v1:.4f} (vanilla), the "
              f"rounding grown through training", ""]
    head = "| system | inner lr / wd / outer lr | " + " | ".join(f"{s[0]}x{s[1]} ({params[s] / 1e3:.0f}k): eval loss | vs DP"
                                      for s in sizes) + " |"
    lines += [head, "|---" * (2 + 2 * len(sizes)) + "|"]
    gaps = {}
    for key, label, _, _ in SYSTEMS:
        t = best[key]
        outer = "-" if key == "dp" else f"{t['outer']:g}"
        row = f"| {label} | {t['lr']:g} / {t['wd']:g} / {outer} |"
        for size in sizes:
            xs = [loss[(size, key, sd)] for sd in seeds]
            row += f" {mean_sd(xs)} |"
            if key == "dp":
                row += " - |"
                continue
            g = [100 * (loss[(size, key, sd)] / loss[(size, 'dp', sd)] - 1) for sd in seeds]
            gaps[(key, size)] = g
            if any(math.isinf(x) for x in g):
                row += " diverged |"
            else:
                row += f" {statistics.mean(g):+.2f}% ({min(g):+.2f} .. {max(g):+.2f}) |"
        lines.append(row)

    def trend(key):
        return " -> ".join(f"{statistics.mean(gaps[(key, s)]):+.2f}%" for s in sizes)

    lines += ["", "Gap to data parallel from the smallest to the largest model (mean over seeds):"]
    for key, label, _, _ in SYSTEMS[1:]:
        lines.append(f"- {label}: {trend(key)}")
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"sizes": [f"{d}x{l}" for d, l in sizes], "params": list(params.values()),
                   "tokens": list(tokens.values()), "seeds": seeds,
                   "best": best, "check": {"dp": d1, "vanilla": v1, "short_differ": differ,
                                           "short_worst": worst},
                   "loss": {f"{s[0]}x{s[1]}/{k}/{sd}": v for (s, k, sd), v in loss.items()}},
                  f, indent=1)
    print(f"\n{a.out}/results.md, {a.out}/results.json; runs in {a.out}/runs "
          f"({runner.spent / 60:.0f} min of runs)")


if __name__ == "__main__":
    main()
