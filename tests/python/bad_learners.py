"""Learner factories that go wrong in each way the runtime must name (tests/python)."""

import torch
import torch.nn.functional as F

import diloco


class Tiny(torch.nn.Module):
    def __init__(self, vocab=256, context=8, dim=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.out = torch.nn.Linear(context * dim, vocab)

    def forward(self, x):
        return self.out(self.embed(x).reshape(x.shape[0], -1))


def good(ctx, **kw):
    model = Tiny(context=ctx.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y), **kw)


def raises(ctx):
    if ctx.index == 1:
        raise RuntimeError("no GPU named cuda:7")
    return good(ctx)


def raises_first(ctx):
    if ctx.index == 0:
        raise RuntimeError("no GPU named cuda:7")
    return good(ctx)


def wrong_return(ctx):
    return {"model": Tiny()}


def float64(ctx):
    model = Tiny(context=ctx.context).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y))


def not_a_module(ctx):
    return diloco.Learner("model", torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1),
                          loss=lambda x, y: None)


def _faulty(ctx, learner, at_step, fault):
    """A learner on the runtime's data whose `learner` calls fault(model, loss) at its step
    `at_step` (1-based) and trains with what it returns."""
    model = Tiny(context=ctx.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = [0]

    def loss(x, y):
        steps[0] += 1
        faulty = ctx.index == learner and steps[0] >= at_step
        if faulty and steps[0] == at_step:
            fault(model)
        value = F.cross_entropy(model(x), y)
        return value * float("nan") if faulty and fault is _nan else value

    return diloco.Learner(model, opt, loss=loss)


def _nan(model):
    pass


def _shrink_bias(model):
    with torch.no_grad():
        model.out.bias.data = torch.zeros(3)


def _new_storage(model):
    model.out.weight.data = model.out.weight.data.clone()


def _to_double(model):
    model.out.bias.data = model.out.bias.data.double()


def _raise(model):
    raise ValueError("batch has the wrong vocabulary")


def nan_loss(ctx):
    """Learner 2's loss becomes NaN from its 30th step; the others train on."""
    return _faulty(ctx, 2, 30, _nan)


def nan_everywhere(ctx):
    """Every learner's loss becomes NaN from its 30th step: no learner is left."""
    return _faulty(ctx, ctx.index, 30, _nan)


def own_data_no_eval(ctx):
    """own_data without its evaluate=: the run has no evaluation loss, and says why."""
    learner = own_data(ctx)
    learner.evaluate = None
    return learner


def eval_nan(ctx):
    """own_data whose evaluate= returns NaN: the run has no result (RunError, exit 3)."""
    learner = own_data(ctx)
    learner.evaluate = lambda: float("nan")
    return learner


def eval_text(ctx):
    """own_data whose evaluate= returns a string: no result either, and the error says so."""
    learner = own_data(ctx)
    learner.evaluate = lambda: "fine"
    return learner


def reshapes(ctx):
    """Learner 1 replaces a parameter's tensor with one of another shape at its 20th step."""
    return _faulty(ctx, 1, 20, _shrink_bias)


def replaces(ctx):
    """Learner 2 gives a parameter new storage of the same shape at its 20th step."""
    return _faulty(ctx, 2, 20, _new_storage)


def retypes(ctx):
    """Learner 3 turns a parameter into float64 at its 20th step."""
    return _faulty(ctx, 3, 20, _to_double)


def step_raises(ctx):
    """Learner 3's step raises at its 25th step."""
    return _faulty(ctx, 3, 25, _raise)


def vector_loss(ctx):
    model = Tiny(context=ctx.context)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return diloco.Learner(model, opt,
                          loss=lambda x, y: F.cross_entropy(model(x), y, reduction="none"))


def different_models(ctx):
    model = Tiny(context=ctx.context, dim=4 if ctx.index == 1 else 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y))


def own_data(ctx):
    """A learner that brings its own data (a seeded random stream) and its own evaluation."""
    model = Tiny(context=ctx.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.seed * 100 + ctx.index)

    def step():
        x = torch.randint(0, 16, (32, ctx.context), generator=gen)
        return F.cross_entropy(model(x), x[:, -1]), 32  # learn to repeat the last token

    def evaluate():
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 16, (256, ctx.context), generator=g)
        return float(F.cross_entropy(model(x), x[:, -1]))

    return diloco.Learner(model, opt, step=step, evaluate=evaluate)


def _tokens_learner(ctx, learner, tokens):
    """Learner `learner` brings its own data and reports `tokens` consumed per step."""
    model = Tiny(context=ctx.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.seed * 100 + ctx.index)

    def step():
        x = torch.randint(0, 16, (32, ctx.context), generator=gen)
        return F.cross_entropy(model(x), x[:, -1]), tokens if ctx.index == learner else 32

    return diloco.Learner(model, opt, step=step)


def negative_tokens(ctx):
    """Learner 2's step says it consumed -5 tokens."""
    return _tokens_learner(ctx, 2, -5)


def huge_tokens(ctx):
    """Learner 1's step says it consumed 2^62 tokens (a run that never ended)."""
    return _tokens_learner(ctx, 1, 2**62)


def unsaveable(ctx):
    """Learner 1's extra snapshot state cannot be saved (its state_dict raises)."""
    learner = good(ctx)

    def state_dict():
        if ctx.index == 1:
            raise OSError("iterator state is on a closed file")
        return {}

    learner.state_dict = state_dict
    learner.load_state_dict = lambda state: None
    return learner


def unsaveable_later(ctx):
    """Learner 1's extra state saves twice, then raises: snapshots 1 and 2 are usable."""
    learner = unsaveable(ctx)
    calls = [0]
    failing = learner.state_dict

    def state_dict():
        calls[0] += 1
        return {} if calls[0] <= 2 else failing()

    learner.state_dict = state_dict
    return learner


class _OwnAdamW(torch.optim.AdamW):
    """A user's optimizer class (defined outside torch.optim): its updates step in the
    learner's turn, never on a pool thread. `hook(n)` runs before its n-th step (1-based)."""

    def __init__(self, params, hook, **kw):
        super().__init__(params, **kw)
        self._hook = hook
        self._calls = 0

    def step(self, closure=None):
        self._calls += 1
        self._hook(self._calls)
        return super().step(closure)


def _ahead_with_own_optimizer(ctx, hook):
    model = Tiny(context=ctx.context)
    opt = _OwnAdamW(model.parameters(), hook, lr=1e-3)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y), ahead=True)


def optimizer_raises(ctx):
    """Learner 3's optimizer raises at its 25th update; its steps go ahead on threads."""
    def hook(n):
        if ctx.index == 3 and n == 25:
            raise ValueError("the optimizer lost its moments")
    return _ahead_with_own_optimizer(ctx, hook)


def optimizer_draws(ctx):
    """Every learner's optimizer draws from torch's generator from its 40th update on (noise
    it adds to nothing), after its steps have begun to go ahead."""
    def hook(n):
        if n >= 40:
            torch.rand(1)
    return _ahead_with_own_optimizer(ctx, hook)


def island(ctx):
    """`good`, wrapped in DistributedDataParallel on an island of several ranks (the factory a
    torchrun user writes)."""
    model = Tiny(context=ctx.context)
    if ctx.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y))


def island_fsdp(ctx):
    """`good` with FSDP inside the island: fully_shard on each layer and on the root, so each
    rank holds its rows of every parameter (torch 2.x)."""
    model = Tiny(context=ctx.context)
    if ctx.world_size > 1:
        from torch.distributed.fsdp import fully_shard
        for layer in (model.embed, model.out):
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return diloco.Learner(model, opt, loss=lambda x, y: F.cross_entropy(model(x), y))


def step_hangs(ctx):
    """Learner 1's step never returns from its 20th step on (it sleeps): the step timeout ends
    the process (exit 3), naming the learner."""
    return _faulty(ctx, 1, 20, _hang)


def _hang(model):
    import time
    while True:
        time.sleep(3600)
