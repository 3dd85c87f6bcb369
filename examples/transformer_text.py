#!/usr/bin/env python3
"""A small decoder-only transformer (examples/tiny_transformer.py) learning English text, trained
three ways on the same token budget: data parallel, synchronous DiLoCo, and Decoupled DiLoCo,
the last both undisturbed and with a learner killed mid-run. Prints eval loss, bytes exchanged
per token and goodput side by side, and writes each run's HTML report with its plots.

The text: the English fortune-cookie files Debian's `fortunes` package installs (quotations,
jokes, poems, definitions; 2.3 MB), concatenated. No download.

usage: PYTHONPATH=build/python python3 examples/transformer_text.py [--steps N] [--out DIR]
(takes about 5 minutes on 2 cores with the defaults)
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FORTUNES = "/usr/share/games/fortunes"


def build_corpus(path):
    if not os.path.isdir(FORTUNES):
        sys.exit(f"transformer_text: {FORTUNES} is missing: install Debian's fortunes package "
                 "(scripts/install-deps.sh --bench does)")
    parts = []
    for name in sorted(os.listdir(FORTUNES)):
        full = os.path.join(FORTUNES, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(full) or "art" in name:
            continue
        with open(full, "rb") as f:
            text = f.read()
        # fortunes are separated by lines holding only '%'
        parts.append(b"\n".join(l for l in text.split(b"\n") if l.strip() != b"%"))
    data = b"\n".join(parts)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def cluster(path, corpus, steps, learners, seed):
    context, batch = 32, 1024  # 32 windows of 32 bytes: 1024 target bytes per step
    with open(path, "w") as f:
        f.write(f"""seed: {seed}
learners: {learners}
shards: 2
batch: {batch}
token_budget: {steps * learners * batch}
fragments: 4
period_steps: 25
overlap_steps: 2
model: {{context: {context}}}
data: {{text_file: {corpus}}}
inner: {{lr: 0.003, warmup_steps: 20, weight_decay: 0.1}}
speed: {{step_time_s: 1}}
""")


def diloco_cli(args, log):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + env.get("PYTHONPATH", "").split(os.pathsep))
    cmd = [sys.executable, "-m", "diloco"] + args + ["--learner", "tiny_transformer:make_learner"]
    print("$ python3 -m diloco " + " ".join(args), flush=True)
    with open(log, "w") as out:
        r = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode not in (0, 3):
        sys.exit(f"transformer_text: the run failed (exit {r.returncode}); see {log}")


def end_record(path):
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "end":
                return rec
    sys.exit(f"transformer_text: {path} has no end record")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="inner steps per learner")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="runs/transformer-text")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = os.path.abspath(os.path.join(a.out, "fortunes.txt"))
    size = build_corpus(corpus)
    conf = os.path.join(a.out, "cluster.yaml")
    cluster(conf, corpus, a.steps, a.learners, a.seed)
    print(f"text: {size} bytes of English ({corpus}); {a.learners} learners, "
          f"{a.steps} steps of 1024 tokens each, seed {a.seed}", flush=True)

    base = os.path.join(a.out, "baselines")
    diloco_cli(["simulate", "--cluster", conf, "--compare", "dp,diloco", "--run-dir", base],
               os.path.join(a.out, "baselines.log"))
    down_at = a.steps // 3  # a learner dies a third of the way in, for a fifth of the run
    fail = os.path.join(a.out, "failures")
    diloco_cli(["simulate", "--cluster", conf, "--failures", f"1@{down_at}+{a.steps // 5}",
                "--run-dir", fail], os.path.join(a.out, "failures.log"))
    for d in (base, fail):
        diloco_cli(["report", d], os.path.join(a.out, "report.log"))

    rows = [("data parallel", end_record(os.path.join(base, "metrics-dp.jsonl"))),
            ("DiLoCo (synchronous)", end_record(os.path.join(base, "metrics-diloco.jsonl"))),
            ("Decoupled DiLoCo", end_record(os.path.join(base, "metrics.jsonl"))),
            ("Decoupled, 1 learner down", end_record(os.path.join(fail, "metrics.jsonl")))]
    dp = rows[0][1]
    dp_bpt = dp["learner_bytes"] / dp["tokens"]
    print()
    print(f"{'system':28}{'eval loss':>10}{'vs DP':>9}{'bytes/token':>13}{'DP/this':>9}"
          f"{'goodput':>9}{'tokens':>10}")
    for name, r in rows:
        bpt = r["learner_bytes"] / r["tokens"]
        print(f"{name:28}{r['eval_loss']:10.4f}{(r['eval_loss'] / dp['eval_loss'] - 1) * 100:+8.2f}%"
              f"{bpt:13.1f}{dp_bpt / bpt:8.0f}x{r['goodput'] * 100:8.1f}%{r['tokens']:10d}")
    print(f"\neval loss: nats per byte on the held-out tenth of the text; plots: "
          f"{base}/report.html, {fail}/report.html")


if __name__ == "__main__":
    main()
