#!/usr/bin/env python3
"""The DiLoCo scaling-law trend in miniature: byte-level transformers at three sizes on held-out
English text, each trained on about 20 tokens per parameter by data parallel, DiLoCo with M = 1,
2 and 4 replicas (as published, "vanilla", and this runtime's synchronous variant) and
Decoupled DiLoCo with M = 4, the global batch split across the replicas. Every replica draws
its windows from the whole training text (independent, identically distributed batches), so
data parallel is the same system for any M and only the method differs.

Each system runs with the settings in bench/scaling-settings.json (or --settings FILE), which
`--sweep` derives again: at the smallest size, on the mean of three seeds kept apart from the
main runs' seeds, data parallel's inner lr x weight decay (ten settings), then each DiLoCo
system's outer lr and outer momentum at data parallel's inner lr and weight decay (six
settings), then its inner lr, one grid step at a time from data parallel's while that improves
the mean. The settings are carried to the larger sizes, as the scaling-law paper does. The
tables give eval loss (nats per byte on the whole held-out tenth of the text) as mean +-
sample standard deviation over seeds and the gap to data parallel of the same seed.

usage: bench/scaling.py [--sweep] [--seeds 1,2,3] [--sizes 32x2,48x2,64x2] [--jobs 2] [--out DIR]
(the main runs: about 40 minutes of runs, two at a time on 2 cores about 22 minutes; --sweep
adds 210 runs at the smallest size, about 66 minutes of runs. Finished runs are kept in
DIR/runs and not run again, so an interrupted bench continues where it stopped)
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
# The inner lr grid, steps of sqrt(2); data parallel tries the middle five, each DiLoCo system
# walks from data parallel's choice while the mean improves.
INNER_LRS = (0.004, 0.0057, 0.008, 0.011, 0.016, 0.023, 0.032, 0.045, 0.064)
DP_INNER_LRS = INNER_LRS[2:7]
WEIGHT_DECAYS = (0.0, 0.1)
# (outer lr, Nesterov momentum): plain averaging and a little less or more of it without
# momentum, and the published momentum 0.9 at four outer lrs (a run of 14 to 44 outer steps is
# short for a momentum whose memory is about 10 of them).
OUTER = ((0.7, 0.0), (1.0, 0.0), (0.1, 0.9), (0.2, 0.9), (0.4, 0.9), (0.7, 0.9))
SETTINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling-settings.json")


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
        self.small_tokens = 0  # a sweep run's weight
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
outer: {{lr: {s['outer']}, momentum: {s['momentum']}}}
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


def mean(xs):
    return math.inf if any(math.isinf(x) for x in xs) else statistics.mean(xs)


def describe(key, s):
    """A setting as the tables print it: inner lr / weight decay [/ outer lr / momentum]."""
    text = f"{s['lr']:g} / {s['wd']:g}"
    return text if key == "dp" else text + f" / {s['outer']:g} / {s['momentum']:g}"


def sweep(runner, job, small, seeds):
    """Tunes every system at the smallest size on the mean over `seeds`; returns (best, tried)
    with tried[key] the list of (setting, [eval per seed]) in the order they ran."""
    tried = {}

    def trial(pairs):
        """Runs (system, setting) pairs on every seed, all at once (the runs fill the cores);
        records and returns each pair's evals."""
        res = iter(runner.all([job(small, sd, system, st, tag(st)) for system, st in pairs
                               for sd in seeds]))
        out = []
        for system, st in pairs:
            evals = [next(res)["eval"] for _ in seeds]
            tried.setdefault(system[0], []).append((st, evals))
            out.append(evals)
        return out

    def tag(s):
        return f"-lr{s['lr']:g}-wd{s['wd']:g}-o{s['outer']:g}-m{s['momentum']:g}"

    def best_of(key):
        return min(tried[key], key=lambda t: mean(t[1]))[0]

    dp = SYSTEMS[0]
    trial([(dp, {"lr": lr, "wd": wd, "outer": 1.0, "momentum": 0.0})
           for lr in DP_INNER_LRS for wd in WEIGHT_DECAYS])
    base = best_of("dp")
    diloco = SYSTEMS[1:]
    # Outer lr and momentum for every DiLoCo system at data parallel's inner settings, all at once
    # (the runs fill both cores).
    trial([(sys_, dict(base, outer=o, momentum=m)) for sys_ in diloco for o, m in OUTER])
    # Then each system's inner lr, a grid step at a time in both directions from data
    # parallel's, every system's next step run together.
    at = {sys_[0]: INNER_LRS.index(base["lr"]) for sys_ in diloco}
    walking = {(sys_[0], d): sys_ for sys_ in diloco for d in (-1, 1)}
    walked = 0
    while walking:
        step = []
        for (key, d), sys_ in sorted(walking.items()):
            i = at[key] + d * (1 + sum(1 for s, _ in tried[key] if s["lr"] != base["lr"]
                                       and (s["lr"] > base["lr"]) == (d > 0)))
            if not 0 <= i < len(INNER_LRS):
                del walking[(key, d)]
                continue
            step.append(((key, d), sys_, dict(best_of(key), lr=INNER_LRS[i])))
        if not step:
            break
        before = {key: mean(next(r for s, r in tried[key] if s == best_of(key)))
                  for (key, _), _, _ in step}
        # The progress count planned for one step each way per system: more steps, more runs.
        beyond = max(0, walked + len(step) - 2 * len(diloco)) - max(0, walked - 2 * len(diloco))
        walked += len(step)
        runner.total += beyond * len(seeds)
        runner.weight_total += beyond * len(seeds) * runner.small_tokens
        results = trial([(sys_, st) for _, sys_, st in step])
        for ((key, d), _, _), evals in zip(step, results):
            if not mean(evals) < before[key]:
                del walking[(key, d)]  # no better a step further: stop walking this way
    return {key: best_of(key) for key in tried}, tried


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32x2,48x2,64x2", help="WIDTHxLAYERS, smallest first")
    ap.add_argument("--seeds", default="1,2,3", help="the main runs' seeds")
    ap.add_argument("--sweep", action="store_true",
                    help="derive the settings again at the smallest size (writes "
                         "OUT/settings.json and uses it) instead of reading --settings")
    ap.add_argument("--sweep-seeds", default="101,102,103",
                    help="the sweep's seeds, kept apart from the main runs' so that the "
                         "smallest size's figures are not chosen on their own noise")
    ap.add_argument("--settings", default=SETTINGS,
                    help="the tuned settings (default: bench/scaling-settings.json)")
    ap.add_argument("--systems", default=",".join(key for key, _, _, _ in SYSTEMS),
                    help="the main runs' systems, by key (data parallel always runs: the gaps "
                         "are to it)")
    ap.add_argument("--tokens-per-param", type=float, default=20)
    ap.add_argument("--global-batch", type=int, default=2048, help="tokens per step, all replicas")
    ap.add_argument("--period", type=int, default=30, help="H, inner steps between syncs")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="runs/scaling")
    a = ap.parse_args()
    sizes = parse_sizes(a.sizes)

    def seed_list(flag, text):
        try:
            seeds = [int(s) for s in text.split(",")]
        except ValueError:
            sys.exit(f"scaling: {flag}: '{text}' is not a comma-separated list of integers")
        if len(seeds) != len(set(seeds)):
            sys.exit(f"scaling: {flag}: '{text}' repeats a seed")
        return seeds

    seeds = seed_list("--seeds", a.seeds)
    keys = [key for key, _, _, _ in SYSTEMS]
    wanted = set(a.systems.split(",")) | {"dp"}
    if not wanted <= set(keys):
        sys.exit(f"scaling: --systems: {', '.join(sorted(wanted - set(keys)))} is not one of "
                 f"{', '.join(keys)}")
    main_systems = [t for t in SYSTEMS if t[0] in wanted]
    sweep_seeds = seed_list("--sweep-seeds", a.sweep_seeds)
    if a.global_batch % (4 * CONTEXT):
        sys.exit(f"scaling: --global-batch must be a multiple of {4 * CONTEXT} (4 replicas of "
                 f"windows of {CONTEXT} bytes)")
    recipe = {"tokens_per_param": a.tokens_per_param, "global_batch": a.global_batch,
              "period": a.period}
    if not a.sweep:
        try:
            with open(a.settings) as f:
                tuned = json.load(f)
            best = tuned["best"]
            for key, _, _, _ in SYSTEMS:
                s = best[key]
                for field in ("lr", "wd", "outer", "momentum"):
                    if not isinstance(s[field], (int, float)):
                        raise ValueError(f"best.{key}.{field} is not a number")
        except (OSError, ValueError, KeyError, TypeError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e)
            sys.exit(f"scaling: --settings {a.settings}: {what} (run with --sweep to derive "
                     f"the settings again)")
        differ = [f"{k} {tuned.get(k)} (here {v:g})" for k, v in recipe.items()
                  if tuned.get(k) != v]
        if differ or tuned.get("size") != f"{sizes[0][0]}x{sizes[0][1]}":
            print(f"scaling: note: {a.settings} was tuned at {tuned.get('size')} with "
                  f"{', '.join(differ) or 'the same recipe'}; --sweep tunes for this one",
                  flush=True)
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

    small = sizes[0]
    main_weight = sum(tokens[z] for z in sizes) * len(seeds) * len(main_systems)
    runner.total = len(sizes) * len(seeds) * len(main_systems) + 4
    runner.weight_total = main_weight + 4 * tokens[small]
    if a.sweep:
        # The count is known only as the inner-lr walks end: the first two stages and one
        # step each way per system, as an estimate.
        first = (len(DP_INNER_LRS) * len(WEIGHT_DECAYS) + (len(SYSTEMS) - 1) * (len(OUTER) + 2))
        runner.total += first * len(sweep_seeds)
        runner.weight_total += first * len(sweep_seeds) * tokens[small]
        runner.small_tokens = tokens[small]
        best, tried = sweep(runner, job, small, sweep_seeds)
        tuned = dict(recipe, size=f"{small[0]}x{small[1]}", seeds=sweep_seeds, best=best,
                     tried={k: [dict(s, eval=r) for s, r in v] for k, v in tried.items()},
                     runtime=runner.stamp)
        a.settings = os.path.join(a.out, "settings.json")
        with open(a.settings, "w") as f:
            json.dump(tuned, f, indent=1)
            f.write("\n")
    best = tuned["best"]

    # --- the check: DiLoCo with one replica, outer lr 1 and no momentum, is data parallel
    seed = seeds[0]
    one = dict(best["dp"], outer=1.0, momentum=0.0)
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
    main_jobs = [(size, sd, sys_) for size in sizes for sd in seeds for sys_ in main_systems]
    res = runner.all([job(size, sd, sys_, best[sys_[0]]) for size, sd, sys_ in main_jobs])
    loss = {}
    for (size, sd, sys_), r in zip(main_jobs, res):
        loss[(size, sys_[0], sd)] = r["eval"]

    # --- what it shows
    lines = [f"Settings: {a.settings}, tuned at {tuned['size']} on the mean over seeds "
             f"{', '.join(map(str, tuned['seeds']))}: eval loss (mean +- sd) of each setting "
             f"tried (inner lr / weight decay / outer lr / outer momentum); * the one kept", ""]
    for key, label, _, _ in SYSTEMS:
        done = tuned.get("tried", {}).get(key, [])
        text = ", ".join(f"{'*' if {k: s[k] for k in best[key]} == best[key] else ''}"
                         f"{describe(key, s)}: {mean_sd(s['eval'])}" for s in done)
        lines.append(f"- {label}: {text or 'not recorded'}")

    grid = {k: DP_INNER_LRS if k == "dp" else INNER_LRS for k in best}
    edge = [k for k, s in best.items() if s["lr"] in (grid[k][0], grid[k][-1])]
    if edge:
        lines.append(f"- inner lr at the edge of the grid: {', '.join(edge)} (a wider grid "
                     f"might do better)")
    # The outer lr kept is the smallest or largest tried with its momentum.
    def outer_edge(s):
        row = sorted(o for o, m in OUTER if m == s["momentum"])
        return bool(row) and s["outer"] in (row[0], row[-1])

    edge = [k for k, s in best.items() if k != "dp" and outer_edge(s)]
    if edge:
        lines.append(f"- outer lr at the edge of its momentum's row: {', '.join(edge)} (a wider "
                     f"grid might do better)")
    d1, v1 = check[0]["eval"], check[1]["eval"]
    lines += ["", f"Check: one replica, outer lr 1, momentum 0, where vanilla DiLoCo is data "
              f"parallel but for rounding: after {a.period + 1} steps (one outer step) "
              f"{differ:,} of {count:,} parameters differ, by at most {worst:.2e}; after the "
              f"whole run eval loss {d1:.4f} (data parallel) against {v1:.4f} (vanilla), the "
              f"rounding grown through training", ""]
    head = ("| system | inner lr / wd / outer lr / momentum | "
            + " | ".join(f"{s[0]}x{s[1]} ({params[s] / 1e3:.0f}k): eval loss | vs DP"
                         for s in sizes) + " |")
    lines += [f"Main runs, seeds {', '.join(map(str, seeds))}:", "", head,
              "|---" * (2 + 2 * len(sizes)) + "|"]
    gaps = {}
    for key, label, _, _ in main_systems:
        row = f"| {label} | {describe(key, best[key])} |"
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
        return " -> ".join(f"{mean(gaps[(key, s)]):+.2f}%" for s in sizes)

    lines += ["", "Gap to data parallel from the smallest to the largest model (mean over seeds):"]
    for key, label, _, _ in main_systems[1:]:
        lines.append(f"- {label}: {trend(key)}")
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"sizes": [f"{d}x{l}" for d, l in sizes], "params": list(params.values()),
                   "tokens": list(tokens.values()), "seeds": seeds, "settings": a.settings,
                   "best": best, "check": {"dp": d1, "vanilla": v1, "short_differ": differ,
                                           "short_worst": worst},
                   "loss": {f"{s[0]}x{s[1]}/{k}/{sd}": v for (s, k, sd), v in loss.items()}},
                  f, indent=1)
    print(f"\n{a.out}/results.md, {a.out}/results.json; runs in {a.out}/runs "
          f"({runner.spent / 60:.0f} min of runs)")


if __name__ == "__main__":
    main()
