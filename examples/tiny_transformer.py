"""A small decoder-only transformer over bytes, as a diloco learner (examples/README in
docs/python.md). Byte-level, so no tokenizer: the vocabulary is the 256 byte values.

make_learner(ctx) is the learner factory: `--learner tiny_transformer:make_learner` with this
directory on PYTHONPATH (or the current directory). It brings its own data: windows of
model.context + 1 bytes of the run's data.text_file, every byte of a window a target.
Width, depth and heads come from the environment (TINY_TRANSFORMER=d_model,layers,heads) or
default to 48, 2, 4. The evaluation set is the first 256 windows of the held-out tenth, or as
many as TINY_TRANSFORMER_EVAL_WINDOWS says (0: every window of it). Each learner draws its
windows from its own contiguous part of the training text, or with TINY_TRANSFORMER_DATA=whole
from all of it (independent, identically distributed batches, as data parallel's replicas and
the scaling-law papers' learners see them).
"""

import math
import os

import torch
import torch.nn.functional as F

import diloco


class Block(torch.nn.Module):
    """Pre-norm attention and MLP, each added to the residual stream."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        B, T, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class TinyTransformer(torch.nn.Module):
    def __init__(self, context, d=64, layers=2, heads=4):
        super().__init__()
        self.tok = torch.nn.Embedding(256, d)
        self.pos = torch.nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, 256)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1),
                             persistent=False)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2 and name != "tok.weight":
                torch.nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, x):
        """x: (batch, T) bytes -> logits of each next byte, (batch, T, 256)."""
        h = self.tok(x) + self.pos[: x.shape[1]]
        for block in self.blocks:
            h = block(h, self.mask)
        return self.head(self.ln_f(h))


def shape():
    spec = os.environ.get("TINY_TRANSFORMER", "48,2,4")
    d, layers, heads = (int(v) for v in spec.split(","))
    return d, layers, heads


class TextWindows:
    """A learner's own data: windows of context + 1 bytes of a text file, every position a
    training target (the transformer predicts each next byte in the window).

    The first 90% of the file trains, split into one contiguous part per learner (or, with
    whole=True, all of it for every learner); the last 10% is the evaluation set (the same for
    every learner). Windows are drawn from the learner's
    part with its own generator (seeded from the run seed, the learner and its process), and
    the generator's state is what a snapshot keeps of the data position.
    """

    def __init__(self, path, context, batch, index, learners, seed, whole=False):
        with open(path, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
        if len(data) < 100 * (context + 1):
            raise ValueError(f"{path}: {len(data)} bytes is too little text")
        split = int(len(data) * 0.9)
        part = split // learners
        self.train = data[:split] if whole else data[index * part:(index + 1) * part]
        self.eval = data[split:]
        self.context, self.batch = context, batch
        self.gen = torch.Generator().manual_seed(seed)

    def next_batch(self):
        starts = torch.randint(0, len(self.train) - self.context - 1, (self.batch,),
                               generator=self.gen)
        w = torch.stack([self.train[s:s + self.context + 1] for s in starts.tolist()])
        return w[:, :-1], w[:, 1:]

    def eval_batches(self, windows=256):
        """The held-out tenth cut into windows: the first `windows` of them (0: all)."""
        n = (len(self.eval) - 1) // (self.context + 1)
        if windows > 0:
            n = min(windows, n)
        w = self.eval[: n * (self.context + 1)].view(n, self.context + 1)
        return [(w[i:i + 64, :-1], w[i:i + 64, 1:]) for i in range(0, n, 64)]

    def state_dict(self):
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, state):
        self.gen.set_state(state["gen"])


def text_file_of(config_yaml):
    for line in config_yaml.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "text_file":
            return value.split("#")[0].strip().strip('"')
    return ""


def make_learner(ctx):
    """The transformer on its own windows of the run's text file (data.text_file), learning
    every next byte of each window: batch = ctx.batch // context windows per step, so one step
    trains on ctx.batch tokens."""
    d, layers, heads = shape()
    T = ctx.context
    model = TinyTransformer(T, d, layers, heads)
    path = text_file_of(ctx.config)
    if not path:
        raise ValueError("tiny_transformer: set data.text_file (the text it learns)")
    split = os.environ.get("TINY_TRANSFORMER_DATA", "parts")
    if split not in ("parts", "whole"):
        raise ValueError(f"TINY_TRANSFORMER_DATA={split!r}: expected parts or whole")
    data = TextWindows(path, T, max(1, ctx.batch // T), ctx.index, ctx.learners,
                       ctx.seed * 1000003 + ctx.index * 1009 + ctx.incarnation,
                       whole=split == "whole")
    inner = ctx.inner
    opt = torch.optim.AdamW(model.parameters(), lr=inner["lr"],
                            betas=(inner["beta1"], inner["beta2"]), eps=inner["eps"],
                            weight_decay=inner["weight_decay"])

    def loss_of(x, y):
        return F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))

    def step():
        x, y = data.next_batch()
        return loss_of(x, y), y.numel()

    windows = os.environ.get("TINY_TRANSFORMER_EVAL_WINDOWS", "256")
    if not windows.isdigit():
        raise ValueError(f"TINY_TRANSFORMER_EVAL_WINDOWS={windows!r}: expected a count (0: all)")
    eval_set = data.eval_batches(int(windows))

    def evaluate():
        total = sum(float(loss_of(x, y)) * y.numel() for x, y in eval_set)
        return total / sum(y.numel() for _, y in eval_set)

    return diloco.Learner(model, opt, step=step, evaluate=evaluate,
                          state_dict=data.state_dict, load_state_dict=data.load_state_dict)
