"""The runtime's side of a user's PyTorch learner: what the C++ learner calls, once per step.

The runtime owns one flat float32 buffer per learner (parameters) and one for the gradients.
After the factory returns, every parameter's storage is replaced by a view into that buffer and
every gradient by a view into the gradient buffer, so merging a global fragment or measuring an
outer gradient reads and writes the module's own parameters: no copy per sync.

Determinism: every call into the user's code runs with this learner's own torch generator state
swapped in (and the process's swapped back after), so learners that interleave in one process
draw from their own streams, seeded from the run seed. torch has one default generator per
process, and a torch operation lets go of Python's lock while it computes: so such calls take
one process-wide lock, and a call on another thread (an evaluation of the global model on a
simulation's pool, a second learner of a node) waits for the one running instead of swapping
the generator under it.
"""

import io
import math
import os
import threading
import traceback

import torch

from ._context import LearnerContext


class Learner:
    """What a learner factory returns.

    module: the torch.nn.Module to train (float32 parameters).
    optimizer: a torch.optim.Optimizer over the module's parameters.
    loss: loss(inputs, targets) -> scalar tensor, for a learner on the runtime's data: the
        runtime feeds it the next batch each step, and the evaluation set for evaluation.
    step: step() -> scalar loss tensor, or (loss, tokens): for a learner that brings its own
        data; it draws its batch and runs the forward pass (the runtime runs backward and the
        optimizer step).
    evaluate: evaluate() -> float, the evaluation loss; by default `loss` over the runtime's
        evaluation set (a learner with its own data and no evaluate reports none).
    schedule_lr: set every parameter group's lr to the run's inner schedule each step.
    clip: clip the gradients' global norm to the run's inner.clip_norm.
    state_dict / load_state_dict: extra state of the learner to keep in snapshots (e.g. the
        position of its own data iterator).
    embeddings: names of parameters that are embedding tables (averaged, never RDA-merged);
        parameters of torch.nn.Embedding modules are found without it.
    """

    def __init__(self, module, optimizer, loss=None, step=None, evaluate=None, schedule_lr=True,
                 clip=True, state_dict=None, load_state_dict=None, embeddings=()):
        self.module = module
        self.optimizer = optimizer
        self.loss = loss
        self.step = step
        self.evaluate = evaluate
        self.schedule_lr = schedule_lr
        self.clip = clip
        self.state_dict = state_dict
        self.load_state_dict = load_state_dict
        self.embeddings = tuple(embeddings)


class LearnerError(Exception):
    """A user's learner did something the runtime cannot train with."""


# Gradient tensors copied back into the runtime's buffer (user code replaced a .grad).
COPIES = {"grads": 0}

_OURS = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(torch.__file__))


def describe_error(kind, value, tb):
    """'ValueError: message (at file.py:12 in loss)': the exception, and the innermost frame of
    the user's own code (not torch's, not the runtime's)."""
    if isinstance(value, LearnerError):
        return str(value)
    text = f"{getattr(kind, '__name__', kind)}: {value}"
    where = None
    for frame in traceback.extract_tb(tb):
        if not os.path.abspath(frame.filename).startswith(_OURS):
            where = frame
    if where is not None:
        text += f" (at {os.path.basename(where.filename)}:{where.lineno} in {where.name})"
    return text


def _scalar(who, loss):
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = f" of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
        raise LearnerError(f"the loss is {type(loss).__name__}{shape}; expected a scalar "
                           "tensor")
    return loss


def _as_learner(out, who):
    if isinstance(out, Learner):
        learner = out
    elif isinstance(out, tuple) and len(out) == 3:
        learner = Learner(out[0], out[1], step=out[2])
    else:
        raise LearnerError(f"the factory returned {type(out).__name__}; expected "
                           "diloco.Learner(module, optimizer, loss=... or step=...) or a "
                           "(module, optimizer, step) tuple")
    if not isinstance(learner.module, torch.nn.Module):
        raise LearnerError(f"module is {type(learner.module).__name__}, not a "
                           "torch.nn.Module")
    if not isinstance(learner.optimizer, torch.optim.Optimizer):
        raise LearnerError(f"optimizer is {type(learner.optimizer).__name__}, not a "
                           "torch.optim.Optimizer")
    if (learner.loss is None) == (learner.step is None):
        raise LearnerError(f"give exactly one of loss= (the runtime's data) and step= "
                           "(your own data)")
    fn = learner.loss if learner.loss is not None else learner.step
    if not callable(fn):
        raise LearnerError(f"the {'loss' if learner.loss is not None else 'step'} "
                           "function is not callable")
    return learner


def _kinds(module, embeddings):
    """Per parameter name: (kind, layer). Embedding tables are those of nn.Embedding modules or
    named; other 1-D tensors are biases. Layers number the top-level groups (a child module, or
    a parameter of the module itself) in parameter order: the strided fragment pattern deals
    out whole layers."""
    kinds = {}
    groups = {}
    for mod_name, mod in module.named_modules():
        for p_name, _ in mod.named_parameters(recurse=False):
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            if isinstance(mod, torch.nn.Embedding):
                kinds[full] = "embedding"
    out = {}
    for name, p in module.named_parameters():
        layer = groups.setdefault(name.split(".")[0], len(groups))
        if name in embeddings or kinds.get(name) == "embedding":
            kind = "embedding"
        elif p.dim() <= 1:
            kind = "bias"
        else:
            kind = "weight"
        out[name] = (kind, layer)
    return out


# Held around every call into a learner's code (reentrant: a call may nest another's).
_CALLS = threading.RLock()


class _Rng:
    """A learner's own torch generator state, swapped in around each call into its code, one
    such call in the process at a time."""

    def __init__(self, seed):
        gen = torch.Generator()
        gen.manual_seed(seed & 0x7FFFFFFFFFFFFFFF)
        self.state = gen.get_state()
        self.saved = []

    def __enter__(self):
        _CALLS.acquire()
        try:
            saved = torch.get_rng_state()
            torch.set_rng_state(self.state)
            self.saved.append(saved)
        except BaseException:
            _CALLS.release()
            raise

    def __exit__(self, *exc):
        try:
            self.state = torch.get_rng_state()
            torch.set_rng_state(self.saved.pop())
        finally:
            _CALLS.release()
        return False


class Runner:
    """One learner's PyTorch side (the C++ learner holds it: python/py_learner.cpp)."""

    def __init__(self, factory, ctx: LearnerContext, torch_seed):
        self.who = f"learner {ctx.index}"
        self.ctx = ctx
        self.rng = _Rng(torch_seed)
        with self.rng:
            out = factory(ctx)
        self.learner = _as_learner(out, self.who)
        self.named = list(self.learner.module.named_parameters())
        if not self.named:
            raise LearnerError(f"the module has no parameters")
        for name, p in self.named:
            if p.dtype != torch.float32:
                raise LearnerError(f"parameter {name} is {p.dtype}; the runtime "
                                   "trains float32 parameters")
            if p.device.type != "cpu":
                raise LearnerError(f"parameter {name} is on {p.device}; give the "
                                   "runtime a CPU module (docs/python.md: GPU models)")
        owned = {id(p) for _, p in self.named}
        for group in self.learner.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in owned:
                    raise LearnerError(f"the optimizer holds a tensor that is not a "
                                       "parameter of the module")
        self.kinds = _kinds(self.learner.module, self.learner.embeddings)
        self.eval_set = None
        self.bound = False

    # --- layout --------------------------------------------------------------------------
    def layout(self):
        """[(name, shape, kind, layer)] in the module's parameter order."""
        return [(name, tuple(p.shape), *self.kinds[name]) for name, p in self.named]

    def values(self):
        """The module's current parameter values, flattened (copies, for the initial model)."""
        return [p.detach().reshape(-1).numpy().copy() for _, p in self.named]

    def bind(self, flat, grad, offsets):
        """Points every parameter (and its gradient) into the runtime's buffers."""
        flat_t = torch.from_numpy(flat)
        grad_t = torch.from_numpy(grad)
        self.views = []
        with torch.no_grad():
            for (name, p), off in zip(self.named, offsets):
                n = p.numel()
                view = flat_t[off:off + n].view(p.shape)
                p.data = view
                p.grad = grad_t[off:off + n].view(p.shape)
                self.views.append((p.data_ptr(), tuple(p.shape)))
        self.flat, self.grad = flat_t, grad_t
        self.bound = True

    def _check_params(self):
        for (name, p), (ptr, shape) in zip(self.named, self.views):
            if tuple(p.shape) != shape:
                raise LearnerError(f"parameter {name} changed shape from "
                                   f"{list(shape)} to {list(p.shape)}")
            if p.dtype != torch.float32:
                raise LearnerError(f"parameter {name} changed dtype to {p.dtype}")
            if p.data_ptr() != ptr:
                raise LearnerError(f"parameter {name} was replaced (its storage "
                                   "moved out of the runtime's buffer); update it in place")

    def _regrad(self):
        """Gradients back in the runtime's buffer if the user's code dropped them."""
        copies = 0
        for (name, p), (ptr, shape) in zip(self.named, self.views):
            g = p.grad
            if g is None:
                continue
            if g.data_ptr() != ptr - self.flat.data_ptr() + self.grad.data_ptr():
                off = (ptr - self.flat.data_ptr()) // 4
                view = self.grad[off:off + p.numel()].view(p.shape)
                view.copy_(g)
                p.grad = view
                copies += 1
        COPIES["grads"] += copies
        return copies

    # --- steps ---------------------------------------------------------------------------
    def _forward(self):
        L = self.learner
        tokens = None
        if L.loss is not None:
            x, y = self.ctx.data.next_batch()
            loss = L.loss(x, y)
        else:
            out = L.step()
            if isinstance(out, tuple) and len(out) == 2:
                loss, tokens = out
                tokens = int(tokens)
            else:
                loss = out
        _scalar(self.who, loss)
        if not loss.requires_grad:
            raise LearnerError(f"the loss does not depend on any parameter "
                               "(requires_grad is False)")
        return loss, tokens

    def gradients(self):
        """Forward and backward into the gradient buffer; returns (loss, tokens)."""
        with self.rng:
            self.grad.zero_()
            try:
                loss, tokens = self._forward()
                loss.backward()
            except LearnerError:
                raise
            except Exception:
                self._check_params()  # a parameter the user's code broke is the cause to name
                raise
            self._regrad()
            self._check_params()
        return float(loss.detach()), tokens

    def apply(self, lr, clip_norm):
        """Clipping and the optimizer step; returns the gradient norm before clipping."""
        L = self.learner
        with self.rng:
            norm = float(torch.linalg.vector_norm(self.grad))
            if L.clip and clip_norm > 0 and norm > clip_norm:
                self.grad.mul_(clip_norm / (norm + 1e-6))
            if L.schedule_lr:
                for group in L.optimizer.param_groups:
                    group["lr"] = lr
            L.optimizer.step()
            self._check_params()
        return norm

    def step(self, lr, clip_norm):
        loss, tokens = self.gradients()
        if not math.isfinite(loss):
            return loss, tokens, 0.0  # the learner reports the divergence
        return loss, tokens, self.apply(lr, clip_norm)

    def evaluate(self):
        L = self.learner
        with self.rng, torch.no_grad():
            was_training = L.module.training
            L.module.eval()
            try:
                if L.evaluate is not None:
                    return float(L.evaluate())
                if L.loss is None:
                    return float("nan")
                if self.eval_set is None:
                    self.eval_set = self.ctx.data.eval_batches(256)
                total, count = 0.0, 0
                for x, y in self.eval_set:
                    total += float(_scalar(self.who, L.loss(x, y))) * len(y)
                    count += len(y)
                return total / count
            finally:
                L.module.train(was_training)

    def restart(self):
        """A crash lost the optimizer state: its moments and step counts start over."""
        opt = self.learner.optimizer
        opt.state.clear()

    # --- snapshots -----------------------------------------------------------------------
    def save(self):
        L = self.learner
        with self.rng:
            state = {"optimizer": L.optimizer.state_dict(), "rng": self.rng.state}
            if L.state_dict is not None:
                state["learner"] = L.state_dict()
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()

    def load(self, data):
        L = self.learner
        state = torch.load(io.BytesIO(data))
        for key in ("optimizer", "rng"):
            if key not in state:
                raise LearnerError(f"the saved state has no {key}")
        L.optimizer.load_state_dict(state["optimizer"])
        self.rng.state = state["rng"]
        if "learner" in state:
            if L.load_state_dict is None:
                raise LearnerError(f"the snapshot holds learner state but the "
                                   "learner has no load_state_dict")
            with self.rng:
                L.load_state_dict(state["learner"])
