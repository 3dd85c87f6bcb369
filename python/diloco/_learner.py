"""The runtime's side of a user's PyTorch learner: what the C++ learner calls, once per step.

The runtime owns one flat float32 buffer per learner (parameters) and one for the gradients.
After the factory returns, every parameter's storage is replaced by a view into that buffer and
every gradient by a view into the gradient buffer, so merging a global fragment or measuring an
outer gradient reads and writes the module's own parameters: no copy per sync. (A module on a
GPU, and an island's rank 0, keep the buffer as a host copy instead: the device mirror; a
module sharded over an island's ranks with fully_shard too: python/diloco/_sharded.py.)

Determinism: every call into the user's code runs with this learner's own torch generator state
swapped in (and the process's swapped back after), so learners that interleave in one process
draw from their own streams, seeded from the run seed. torch has one default generator per
process, and a torch operation lets go of Python's lock while it computes: so such calls hold
the process's gate alone, and a call on another thread (an evaluation of the global model on a
simulation's pool, a second learner of a node) waits for the one running instead of swapping
the generator under it.

Steps computed ahead (a simulation with threads): a learner whose steps draw nothing from the
generator may compute the gradients of its next step on a pool thread while the simulation goes
on, at its parameters or at a copy of them in shadow buffers of its own; the optimizer is not
touched, so nothing of it is put back when the step is not taken. A step taken from ahead
leaves its update due, and the update runs on the pool with the next step ahead. Steps ahead
and updates share the gate with each other, never with a call that swaps the generator; each
compares the process's generator state before and after it, and a step ahead that saw a draw is
thrown away (and the learner computes its steps one at a time from then on). A step ahead is
taken only when nothing changed since it began (python/py_learner.cpp): the same bits as the
step computed in its turn.
"""

import contextlib
import io
import math
import os
import sys
import threading
import time
import traceback
import weakref

import torch
from torch.nn.parallel import DistributedDataParallel

from . import _island, _sharded
from ._context import LearnerContext


class LearnerError(Exception):
    """A user's learner did something the runtime cannot train with."""


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
    schedule_lr: set every parameter group's lr to the run's inner schedule (inner.lr, warmup,
        cosine decay) before each optimizer step. The default (None) does so unless a
        scheduler is given; the runtime says once when it replaces an lr the optimizer was
        made with. False keeps the optimizer's lr as the user's code sets it.
    scheduler: the user's own learning-rate scheduler (a torch.optim.lr_scheduler, or any
        object with step(), and state_dict()/load_state_dict() to be kept in snapshots),
        stepped after every optimizer step the runtime takes. Excludes schedule_lr=True.
    clip: clip the gradients' global norm to the run's inner.clip_norm.
    state_dict / load_state_dict: extra state of the learner to keep in snapshots (e.g. the
        position of its own data iterator).
    embeddings: names of parameters that are embedding tables (averaged, never RDA-merged);
        parameters of torch.nn.Embedding modules are found without it.
    ahead: a simulation with threads may compute the gradients of this learner's next step
        ahead on another thread, and throw them away when a merge overtakes them (the module's
        buffers are put back; the optimizer steps only for steps taken, on the pool for torch's
        own optimizers, in the learner's turn for an optimizer class of your own). Only for a
        `loss` that keeps no state of its own between calls (no counters, no lists it appends
        to): a thrown-away step has called it. Steps that draw from torch's generator
        (dropout) never go ahead, whatever this says.
    mirror: keep the module's parameters in storage of their own and the runtime's buffer as
        their host copy (the device mirror), as for a module on a GPU, where it is always on.
        For a CPU module it tests that path: the same bits as sharing the buffer, with the
        copies counted (diloco.copy_counts()).
    """

    def __init__(self, module, optimizer, loss=None, step=None, evaluate=None, schedule_lr=None,
                 clip=True, state_dict=None, load_state_dict=None, embeddings=(), ahead=False,
                 scheduler=None, mirror=False):
        self.module = module
        self.optimizer = optimizer
        self.loss = loss
        self.step = step
        self.evaluate = evaluate
        if schedule_lr and scheduler is not None:
            raise LearnerError("give either schedule_lr=True (the run's inner schedule) or "
                               "scheduler= (your own), not both")
        self.schedule_lr = (scheduler is None) if schedule_lr is None else bool(schedule_lr)
        self.scheduler = scheduler
        self.clip = clip
        self.state_dict = state_dict
        self.load_state_dict = load_state_dict
        self.embeddings = tuple(embeddings)
        self.ahead = bool(ahead)
        self.mirror = bool(mirror)


def _pin(tensor):
    """Page-locks a host tensor's memory for the CUDA driver (the runtime's buffer, which torch
    did not allocate): copies to and from the device then go without a staging copy."""
    cudart = torch.cuda.cudart()
    err = cudart.cudaHostRegister(tensor.data_ptr(), tensor.numel() * tensor.element_size(), 0)
    if int(err) != 0:
        raise LearnerError(f"cannot pin the runtime's host buffer for the device mirror "
                           f"(cudaHostRegister: {err})")
    # Unpinned when the tensor goes, before the runtime frees the buffer under it.
    weakref.finalize(tensor, cudart.cudaHostUnregister, tensor.data_ptr())


_TOLD = set()
# torch.load(weights_only=True) reads optimizer states from torch 2.4 on.
_WEIGHTS_ONLY = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]
                      if x.isdigit()) >= (2, 4)


def _tell_once(text):
    """A note on stderr, once per process for each text."""
    if text not in _TOLD:
        _TOLD.add(text)
        print(text, file=sys.stderr, flush=True)


# Gradient tensors copied back into the runtime's buffer (user code replaced a .grad), and the
# device mirror's copies: ranges of the parameter buffer (a fragment's spans, or the whole)
# device-to-host (d2h) and host-to-device (h2d) and their bytes, and the whole gradient buffer
# each way for data parallel (grads_d2h, grads_h2d).
COPIES = {"grads": 0, "d2h": 0, "h2d": 0, "d2h_bytes": 0, "h2d_bytes": 0, "grads_d2h": 0,
          "grads_h2d": 0, "island_shares": 0, "island_bytes": 0, "shard_gathers": 0,
          "shard_gather_bytes": 0, "shard_writes": 0}
# Steps computed ahead that saw a draw from torch's generator (and were put back).
AHEAD = {"drew": 0}

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


class _Gate:
    """Who may run learners' code: one call that swaps the generator (held alone, reentrant on
    its thread: a call may nest another's), or any number of steps computed ahead (shared). A
    call waiting to hold it alone keeps new steps ahead out, so it is not starved."""

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._owner = None
        self._depth = 0
        self._waiting = 0
        self._shared = 0

    def acquire(self):
        me = threading.get_ident()
        with self._cv:
            if self._owner == me:
                self._depth += 1
                return
            self._waiting += 1
            try:
                while self._owner is not None or self._shared > 0:
                    self._cv.wait()
            finally:
                self._waiting -= 1
            self._owner, self._depth = me, 1

    def release(self):
        with self._cv:
            assert self._owner == threading.get_ident(), "_Gate: released by another thread"
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cv.notify_all()

    def acquire_shared(self):
        with self._cv:
            while self._owner is not None or self._waiting > 0:
                self._cv.wait()
            self._shared += 1

    def release_shared(self):
        with self._cv:
            assert self._shared > 0, "_Gate: a shared release without its acquire"
            self._shared -= 1
            if self._shared == 0:
                self._cv.notify_all()


_GATE = _Gate()


class _Rng:
    """A learner's own torch generator state, swapped in around each call into its code, one
    such call in the process at a time. `drew` says whether the last call drew from it."""

    def __init__(self, seed):
        gen = torch.Generator()
        gen.manual_seed(seed & 0x7FFFFFFFFFFFFFFF)
        self.state = gen.get_state()
        self.saved = []
        self.drew = False

    def __enter__(self):
        _GATE.acquire()
        try:
            saved = torch.get_rng_state()
            torch.set_rng_state(self.state)
            self.saved.append(saved)
        except BaseException:
            _GATE.release()
            raise

    def __exit__(self, *exc):
        try:
            state = torch.get_rng_state()
            self.drew = not torch.equal(state, self.state)
            self.state = state
            torch.set_rng_state(self.saved.pop())
        finally:
            _GATE.release()
        return False


class Runner:
    """One learner's PyTorch side (the C++ learner holds it: python/py_learner.cpp)."""

    def __init__(self, factory, ctx: LearnerContext, torch_seed, island=None, slot=None):
        self.who = f"learner {ctx.index}"
        self.ctx = ctx
        self.torch_seed = torch_seed
        # An island's rank 0 orders the other ranks to make this learner too (their factory
        # runs beside this one: a DDP built in it is built on every rank).
        self.island = _island.current() if island is None else island
        if self.island is not None and self.island.leader:
            self.slot = self.island.slots
            self.island.slots += 1
        else:
            self.slot = slot
        # Replay of a deployed run: this learner's process ran as an island (its tape says so).
        self.emulated = None if self.island is not None else _island.replayed(ctx)
        with self._op(_island.INIT):
            if self.island is not None and self.island.leader:
                self.island.objects([self._setup()])
                ctx.data = _island.LeaderData(ctx.data, self.island)
            isl = self.island
            ctx.rank = isl.rank if isl else 0
            ctx.world_size = isl.world if isl else 1
            ctx.local_rank = isl.local_rank if isl else 0
            ctx.device = isl.device() if isl else torch.device("cpu")
            self._make(factory, ctx, torch_seed)

    @classmethod
    def follower(cls, factory, island, slot):
        """A follower's twin of rank 0's learner in this slot (_island.Island.follow)."""
        setup = island.objects([None])[0]
        data = _island.FollowerData(island, setup["batch"], setup["context"])
        ctx = LearnerContext(setup["index"], setup["learners"], setup["seed"],
                             setup["incarnation"], data, setup["inner"], setup["model"],
                             setup["batch"], setup["context"], setup["config"])
        return cls(factory, ctx, setup["torch_seed"], island=island, slot=slot)

    def _setup(self):
        c = self.ctx
        return {"index": c.index, "learners": c.learners, "seed": c.seed,
                "incarnation": c.incarnation, "inner": dict(c.inner), "model": dict(c.model),
                "batch": c.batch, "context": c.context, "config": c.config,
                "torch_seed": self.torch_seed}

    @contextlib.contextmanager
    def _op(self, op, *values):
        """An operation of an island's learner: rank 0 orders every rank to do it, and holds
        the island until all its collectives are done. Rank 0's part failing leaves the other
        ranks out of step: the island stops (its process exits, as a crash would)."""
        isl = self.island
        if isl is None or not isl.leader:
            yield
            return
        with isl.lock:
            if isl.stopped:
                raise LearnerError("the island's other ranks have stopped (the run ended)")
            # A step or an evaluation first sends the ranges the runtime wrote (its order says
            # how many: no collective of its own when there are none).
            self._share = self._written() if op in (_island.STEP, _island.EVAL) else None
            isl.order(op, self.slot or 0, *values,
                      shares=len(self._share) if self._share is not None else 0)
            try:
                yield
            except BaseException as e:  # noqa: BLE001
                if _island.is_collective_failure(e):
                    isl.broken(e, f"'{_island.NAMES[op]}' of {self.who}")
                what = describe_error(type(e), e, e.__traceback__)
                print(f"diloco: {self.who}: {what}\ndiloco: island rank 0 of {isl.world}: "
                      "the other ranks are out of step after this error: the island stops",
                      file=sys.stderr, flush=True)
                os._exit(1)

    def _make(self, factory, ctx, torch_seed):
        self.rng = _Rng(torch_seed)
        with self.rng:
            out = factory(ctx)
        self.learner = _as_learner(out, self.who)
        self.recorded = False
        if self.emulated is not None and self.learner.loss is None:
            raise LearnerError(
                f"{self.who} (process {ctx.incarnation}) ran as an island of "
                f"{self.emulated['world']} ranks drawing its own data (step=): replay cannot "
                "compute its ranks' steps again in one process (their batches were theirs)")
        # A DistributedDataParallel module: its parameters under their own names (those of the
        # module inside); it averages the gradients over the island itself.
        self._share = None  # rank 0: the ranges the current order sends first
        self.ddp = isinstance(self.learner.module, DistributedDataParallel)
        self.inner_module = self.learner.module.module if self.ddp else self.learner.module
        if self.island is None and self.ddp:
            raise LearnerError("the module is wrapped in DistributedDataParallel but this "
                               "process is not an island's rank (start it with torchrun)")
        self.named = list(self.inner_module.named_parameters())
        if not self.named:
            raise LearnerError(f"the module has no parameters")
        # FSDP inside the island (fully_shard): each rank holds its rows of every parameter
        # (python/diloco/_sharded.py); the runtime's buffer is then a host copy, as a device
        # mirror's is.
        why = _sharded.refusal(self.learner.module, self.named, self.island)
        if why:
            raise LearnerError(why)
        self.sharded = None
        if _sharded.is_dtensor(self.named[0][1]):
            try:
                self.sharded = _sharded.ShardedParams(self.named, self.island.rank,
                                                      self.island.world)
            except ValueError as e:
                raise LearnerError(str(e)) from None
            # The initial model whole, on rank 0 (every rank takes part in the gathers).
            self._initial = self.sharded.full_values(self.island.leader)
            if self.island.leader:
                _tell_once(f"diloco: {self.who}'s parameters are sharded over the island's "
                           f"{self.island.world} ranks (fully_shard): rank 0 gathers a "
                           "fragment's parameters when it syncs them, and each rank writes the "
                           "merged values into its own rows")
        if self.emulated is not None and self.emulated.get("sharded"):
            raise LearnerError(
                f"{self.who} (process {ctx.incarnation}) ran as an island of "
                f"{self.emulated['world']} ranks with its parameters sharded (fully_shard): "
                "replay cannot compute its ranks' steps again in one process (FSDP sums the "
                "gradients in its reduce-scatter's order, on each rank's shard)")
        devices = set()
        for name, p in self.named:
            if p.dtype != torch.float32:
                raise LearnerError(f"parameter {name} is {p.dtype}; the runtime "
                                   "trains float32 parameters (bf16 autocast inside the step "
                                   "is yours to use)")
            devices.add(p.device)
        if len(devices) > 1:
            raise LearnerError("the module's parameters are on several devices ("
                               f"{', '.join(sorted(str(d) for d in devices))}); a learner's "
                               "module lives on one (an island of ranks: one device per rank)")
        self.device = devices.pop()
        # The device mirror: the module keeps its parameters on its device, the runtime's
        # buffer is their host copy (a GPU module; or a CPU one that asks, to test the path).
        # An island's rank 0 keeps the mirror too: the ranges the runtime wrote are the ones
        # the other ranks are sent.
        self.mirror = (self.device.type != "cpu" or self.learner.mirror or
                       (self.island is not None and self.island.leader) or
                       self.sharded is not None)
        self.group = self.island.group(self.device) if self.island is not None else None
        owned = {id(p) for _, p in self.named}
        for group in self.learner.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in owned:
                    raise LearnerError(f"the optimizer holds a tensor that is not a "
                                       "parameter of the module")
        self.kinds = _kinds(self.inner_module, self.learner.embeddings)
        if (self.learner.schedule_lr and ctx.index == 0 and
                (self.island is None or self.island.leader)):
            made = sorted({g["lr"] for g in self.learner.optimizer.param_groups})
            if made != [ctx.inner["lr"]]:
                _tell_once(f"diloco: the optimizer was made with lr {made[0] if len(made) == 1 else made}; "
                           f"each step sets it from the run's inner schedule (inner.lr "
                           f"{ctx.inner['lr']:g}, warmup and cosine decay). Pass "
                           "diloco.Learner(..., schedule_lr=False) or scheduler=... to keep "
                           "your own")
        self.eval_set = None
        self.bound = False
        # Steps ahead: only for a learner on the runtime's data (its batches can be drawn ahead)
        # that allows them, once a step in its turn drew nothing from the generator, and never
        # again once one did.
        self.can_ahead = (self.learner.loss is not None and self.learner.ahead and
                          not self.mirror)
        # The update of a step taken from ahead may run on the pool, with no generator of this
        # learner's swapped in, only for torch's own optimizers, which draw nothing; a user's
        # optimizer class steps in the learner's turn, with its generator.
        self.pool_update = type(self.learner.optimizer).__module__.startswith("torch.optim")
        self.ahead_ok = False
        self.ahead_off = False
        self.main = None
        self.shadow = None
        self.flat = None
        self._kept_buffers = None

    # --- layout --------------------------------------------------------------------------
    def layout(self):
        """[(name, shape, kind, layer)] in the module's parameter order."""
        return [(name, tuple(p.shape), *self.kinds[name]) for name, p in self.named]

    def values(self):
        """The module's current parameter values, flattened (copies, for the initial model)."""
        if self.sharded is not None:
            return self._initial  # gathered when the learner was made
        return [p.detach().reshape(-1).numpy().copy() for _, p in self.named]

    def _buffers(self, flat, grad):
        """A pair of buffers (the runtime's numpy arrays, or the mirror's device tensors), with
        each parameter's views into them."""
        flat_t = flat if isinstance(flat, torch.Tensor) else torch.from_numpy(flat)
        grad_t = grad if isinstance(grad, torch.Tensor) else torch.from_numpy(grad)
        views = []
        for (name, p), off in zip(self.named, self.offsets):
            n = p.numel()
            views.append((flat_t[off:off + n].view(p.shape), grad_t[off:off + n].view(p.shape)))
        return flat_t, grad_t, views

    def _point(self, buffers):
        """Every parameter (and its gradient) into these buffers."""
        flat_t, grad_t, views = buffers
        self.views = []
        with torch.no_grad():
            for (name, p), (pv, gv) in zip(self.named, views):
                p.data = pv
                p.grad = gv
                self.views.append((p.data_ptr(), tuple(p.shape)))
        self.flat, self.grad = flat_t, grad_t

    def bind(self, flat, grad, offsets):
        """Points every parameter (and its gradient) into the runtime's buffers; with the
        device mirror, into device buffers of the same layout, the runtime's being their host
        copy."""
        with self._op(_island.BIND):
            if self.island is not None:
                self.island.objects([list(offsets), int(flat.shape[0])])
            self._bind(flat, grad, offsets)

    def follow_bind(self):
        """A follower: buffers of its own, in the layout rank 0 was given."""
        import numpy as np

        offsets, n = self.island.objects([None, None])
        if self.sharded is not None:
            # Its shards are its parameters; merged spans come as the parts in its rows.
            return self._bind(None, None, offsets)
        self._bind(np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.float32), offsets)

    def _bind(self, flat, grad, offsets):
        self.offsets = list(offsets)
        if self.sharded is not None:
            # The parameters stay the module's shards; rank 0's buffer (the runtime's) is their
            # host copy, current where the runtime needs it (to_host); the other ranks have none.
            self.sharded.bind(self.offsets)
            self.host_flat = torch.from_numpy(flat) if flat is not None else None
            self.flat, self.grad = self.host_flat, None
            self.fresh = set()  # parameters gathered since the last step
            self.host_fresh, self.host_all = set(), True
            self.device_stale, self.device_all = set(), True
            self.bound = True
            return
        if self.mirror:
            self.host_flat = torch.from_numpy(flat)
            self.host_grad = torch.from_numpy(grad)
            if self.device.type == "cuda":
                _pin(self.host_flat)
                _pin(self.host_grad)
            dev_flat = torch.empty(self.host_flat.numel(), dtype=torch.float32,
                                   device=self.device)
            dev_grad = torch.zeros(self.host_grad.numel(), dtype=torch.float32,
                                   device=self.device)
            self.main = self._buffers(dev_flat, dev_grad)
            # Ranges (offset, count) of the buffer whose host copy is current since the last
            # step (all of it: host_all), and ranges the runtime wrote on the host, to go to the
            # device before the next step (all of it: device_all).
            # The host holds the initial model: it is current, and all of it goes to the device.
            self.host_fresh, self.host_all = set(), True
            self.device_stale, self.device_all = set(), True
        else:
            self.main = self._buffers(flat, grad)
        self._point(self.main)
        self.bound = True

    # --- the device mirror (python/py_learner.cpp calls these) ------------------------------
    def _copy(self, dst, src, offset, count, kind):
        dst[offset:offset + count].copy_(src[offset:offset + count],
                                         non_blocking=self.device.type == "cuda")
        COPIES[kind] += 1
        COPIES[kind + "_bytes"] += 4 * count

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def to_host(self, ranges, write, read=True):
        """The host copy of these ranges [(offset, count)] of the buffer (all of it: None)
        made current, copying what the device moved since; with `write`, the runtime will
        write them: they go back to the device before the next step. Without `read` the
        runtime only writes them (a merge that adopts the global values): nothing is copied
        to the host, and what the runtime writes is the current value."""
        if not self.mirror:
            return
        if not read:
            if not write or ranges is None:
                raise LearnerError("the device mirror: ranges written without reading them "
                                   "must be named")
            self.device_stale.update(ranges)
            if self.sharded is None:
                self.host_fresh.update(ranges)
            return
        if self.sharded is not None:
            return self._gather_to_host(ranges, write)
        n = self.host_flat.numel()
        copied = False
        if ranges is None:
            if not self.host_all:
                # Only what is not current already: the ranges copied since the last step are.
                for offset, count in self._gaps(n):
                    self._copy(self.host_flat, self.flat, offset, count, "d2h")
                    copied = True
                self.host_all = True
            if write:
                self.device_all = True
        else:
            for offset, count in ranges:
                if not self.host_all and (offset, count) not in self.host_fresh:
                    self._copy(self.host_flat, self.flat, offset, count, "d2h")
                    self.host_fresh.add((offset, count))
                    copied = True
                if write:
                    self.device_stale.add((offset, count))
        if copied:
            self._sync()

    def _gather_to_host(self, ranges, write):
        """to_host for a sharded module: the parameters these ranges touch gathered whole into
        rank 0's buffer (every rank taking part), those not gathered since the last step."""
        need = [] if self.host_all else [i for i in self.sharded.overlapping(ranges)
                                           if i not in self.fresh]
        if need:
            with self._op(_island.GATHER):
                self.island.objects([need])
                moved = self.sharded.gather(need, self.host_flat, True)
            COPIES["shard_gathers"] += 1
            COPIES["shard_gather_bytes"] += 4 * moved
            self.fresh.update(need)
        if ranges is None:
            self.host_all = True
            if write:
                self.device_all = True
        elif write:
            self.device_stale.update(ranges)

    def follow_gather(self):
        """A follower's part of rank 0's gather (its shards of the parameters rank 0 needs)."""
        need = self.island.objects([None])[0]
        self.sharded.gather(need, None, False)

    def _gaps(self, n):
        """The buffer [0, n) less the ranges already current, as (offset, count) ranges."""
        out, at = [], 0
        for offset, count in sorted(self.host_fresh):
            if offset > at:
                out.append((at, offset - at))
            at = max(at, offset + count)
        if at < n:
            out.append((at, n - at))
        return out

    def host_written(self):
        """The runtime replaced the whole host copy (a snapshot loaded)."""
        if self.mirror:
            self.fresh = set()
            self.host_fresh, self.host_all = set(), True
            self.device_stale, self.device_all = set(), True

    def _to_device(self):
        """What the runtime wrote on the host, to the device (before a step or evaluation); on
        an island, to every rank's."""
        if self.island is not None:
            return self._island_params()
        if self.mirror:
            self._push(self._written())

    def _push(self, ranges):
        """These ranges of the host copy to the device; nothing written is left behind."""
        for offset, count in ranges:
            self._copy(self.flat, self.host_flat, offset, count, "h2d")
        self.device_stale, self.device_all = set(), False
        if ranges:
            self._sync()

    def _written(self):
        """Rank 0: the ranges the runtime wrote since the last step (a merge's spans; all of it
        after a load or a rejoin)."""
        return ([(0, self.host_flat.numel())] if self.device_all else
                sorted(self.device_stale)) if self.bound else []

    def _island_params(self):
        """Rank 0: the ranges the runtime wrote to its module and to every other rank's, once
        per step or evaluation (its order announced them). A follower: receives them."""
        isl = self.island
        if not isl.leader:
            if isl.incoming:
                if self.sharded is not None:
                    isl.share_shards(None, self.sharded, None)
                else:
                    isl.share(None, self.flat, self.group)
                isl.incoming = 0
            return
        ranges, self._share = self._share, None
        if ranges is None:
            return
        t0 = time.perf_counter()
        if self.sharded is None:
            self._push(ranges)
            isl.share(ranges, self.flat, self.group)
            sent = 4 * sum(c for _, c in ranges) * (isl.world - 1)
        else:
            self.device_stale, self.device_all = set(), False
            written, floats = isl.share_shards(ranges, self.sharded, self.host_flat)
            COPIES["shard_writes"] += written
            sent = 4 * floats
        if ranges:
            COPIES["island_shares"] += 1
            COPIES["island_bytes"] += sent
            isl.stats["shares"] += 1
            isl.stats["share_bytes"] += sent
            isl.stats["share_s"] += time.perf_counter() - t0

    def _device_moved(self):
        """After an optimizer step: every host copy is behind."""
        if self.mirror:
            self.fresh = set()
            self.host_fresh, self.host_all = set(), False

    def bind_shadow(self, flat, grad):
        """The buffers a step computed ahead trains in (python/py_learner.cpp copies them)."""
        self.shadow = self._buffers(flat, grad)

    def _check_params(self):
        if self.sharded is not None:
            return  # the module's own shards: nothing of the runtime's to point into
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
    def _forward(self, batch=None):
        """The loss of the next batch (`batch`, when given: a step computed ahead)."""
        L = self.learner
        tokens = None
        if L.loss is not None:
            x, y = self.ctx.data.next_batch() if batch is None else batch
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

    def _gradients(self, batch=None):
        if self.emulated is not None and batch is None:
            return self._emulated_gradients()
        return self._gradients_once(batch)

    def _emulated_gradients(self):
        """Replay of an island's learner, in one process: each rank's gradients in rank order
        (each on its batch), averaged as the island did (DDP: each scaled by 1/world, then
        summed; the runtime's all-reduce: summed, then divided), and the mean loss. The same
        bits as the island for 2 ranks; for more, the island's sums were in gloo's order."""
        world, ddp = self.emulated["world"], self.emulated["ddp"]
        acc, total = None, 0.0
        for _ in range(world):
            value, _ = self._gradients_once(None)
            total += value
            g = self.grad * (1.0 / world) if ddp else self.grad.clone()
            acc = g if acc is None else acc.add_(g)
        if not ddp:
            acc.div_(world)
        self.grad.copy_(acc)
        return total / world, None

    def _gradients_once(self, batch=None):
        if self.sharded is not None:
            self.sharded.zero_grads()
        else:
            self.grad.zero_()
        try:
            loss, tokens = self._forward(batch)
            loss.backward()
        except LearnerError:
            raise
        except Exception:
            self._check_params()  # a parameter the user's code broke is the cause to name
            raise
        if self.sharded is None:
            self._regrad()
        self._check_params()
        value = float(loss.detach())
        if self.island is not None:
            value, tokens = self._island_mean(value, tokens)
        return value, tokens

    def _island_mean(self, value, tokens):
        """The island's step: gradients averaged over its ranks (DDP did it in backward), the
        mean loss, and the tokens of every rank."""
        isl = self.island
        if not self.ddp and self.sharded is None:  # FSDP reduce-scattered them in backward
            isl.all_reduce(self.grad, self.group, what="averaging the gradients")
            self.grad.div_(isl.world)
        t = torch.tensor([value, float(tokens or 0), 1.0 if tokens is not None else 0.0],
                         dtype=torch.float64)
        isl.all_reduce(t, what="summing the island's loss and tokens")
        total, toks, told = t.tolist()
        return total / isl.world, (int(toks) if told == isl.world else None)

    def _gradients_turn(self):
        self._on_main()
        with self.rng:
            return self._gradients()

    def gradients(self):
        """Data parallel's first half: forward and backward into the runtime's gradient
        buffer (python/py_learner.cpp averages it across learners); returns (loss, tokens)."""
        if self.island is not None:
            raise LearnerError("data parallel across learners runs in one process: not on an "
                               "island")
        out = self._gradients_turn()
        if self.mirror:
            self.host_grad.copy_(self.grad)
            COPIES["grads_d2h"] += 1
            self._sync()
        return out

    def _grad_norm(self):
        if self.sharded is not None:
            t = torch.tensor([self.sharded.grad_square_sum()], dtype=torch.float64)
            self.island.all_reduce(t, what="the gradient's norm over the shards")
            return math.sqrt(float(t))
        return float(torch.linalg.vector_norm(self.grad))

    def _update(self, lr, clip_norm, norm=None):
        L = self.learner
        if norm is None:
            norm = self._grad_norm()
        if L.clip and clip_norm > 0 and norm > clip_norm:
            if self.sharded is not None:
                self.sharded.scale_grads(clip_norm / (norm + 1e-6))
            else:
                self.grad.mul_(clip_norm / (norm + 1e-6))
        if L.schedule_lr:
            for group in L.optimizer.param_groups:
                group["lr"] = lr
        L.optimizer.step()
        self._device_moved()
        if L.scheduler is not None:
            L.scheduler.step()
        self._check_params()
        return norm

    def _on_main(self):
        """The module's parameters in the runtime's buffers (a step ahead may have left them in
        the shadow ones)."""
        if self.main is not None and self.flat is not self.main[0]:
            self._point(self.main)
        self._to_device()

    def _apply_turn(self, lr, clip_norm, norm=None):
        self._on_main()
        with self.rng:
            return self._update(lr, clip_norm, norm)

    def apply(self, lr, clip_norm, norm=None):
        """Data parallel's second half: clipping and the optimizer step on the (averaged)
        gradients; returns the gradient norm before clipping (`norm`, when the caller measured
        it)."""
        if self.mirror:
            self._on_main()
            self.grad.copy_(self.host_grad)
            COPIES["grads_h2d"] += 1
        return self._apply_turn(lr, clip_norm, norm)

    def step(self, lr, clip_norm):
        with self._op(_island.STEP, lr, clip_norm):
            if self.island is None:
                return self._step(lr, clip_norm)
            if not self.recorded and self.island.leader:
                self.recorded = True
                self.island.record(self.ctx, self.ddp, self.learner.loss is None,
                                   self.sharded is not None)
            c0, t0 = time.process_time(), time.perf_counter()
            out = self._step(lr, clip_norm)
            t1 = time.perf_counter()
            self.island.step_timed(t1 - t0, t1, c0)
            return out

    def _step(self, lr, clip_norm):
        loss, tokens = self._gradients_turn()
        drew = self.rng.drew
        if not math.isfinite(loss):
            return loss, tokens, 0.0  # the learner reports the divergence
        norm = self._apply_turn(lr, clip_norm)
        drew = drew or self.rng.drew
        self.ahead_ok = self.can_ahead and not drew and not self.ahead_off
        return loss, tokens, norm

    # --- steps computed ahead (python/py_learner.cpp) ---------------------------------------
    # A step ahead computes the gradients only, on a pool thread: at the runtime's parameters
    # (`shadow` False: nothing may write them meanwhile) or at a copy of them in the shadow
    # buffers. The optimizer is untouched, so a step ahead not taken has nothing of it to put
    # back. A step taken ahead leaves its update due: it runs with the next step ahead, on the
    # pool (update), or in its turn (update_now) when something needs the parameters first.
    def gradients_ahead(self, x, y, shadow):
        """The gradients of step() on batch (x, y): (loss, gradient norm before clipping), or
        None when they cannot be taken (the learner steps in its turn then)."""
        if not self.ahead_ok or (shadow and self.shadow is None):
            return None
        _GATE.acquire_shared()
        try:
            before = torch.get_rng_state()
            self._kept_buffers = [b.detach().clone() for b in self.learner.module.buffers()]
            if shadow:
                self._point(self.shadow)
            else:
                self._on_main()
            try:
                value, _ = self._gradients((torch.from_numpy(x).long(),
                                            torch.from_numpy(y).long()))
                norm = self._grad_norm() if math.isfinite(value) else 0.0
            except Exception:
                return None  # the step in its turn meets it again, and reports it
            if not torch.equal(before, torch.get_rng_state()):
                # It drew from the process's generator: its numbers depend on the threads'
                # timing. Thrown away, and no more steps ahead for this learner.
                self.ahead_off = True
                self.ahead_ok = False
                AHEAD["drew"] += 1
                return None
            return value, norm
        finally:
            _GATE.release_shared()

    def update(self, lr, clip_norm, norm):
        """The update of a step taken from ahead, on a pool thread, on the runtime's buffers
        (their gradients are the step's). Only for torch's own optimizers (pool_update), which
        draw nothing from torch's generator: one that did would draw from the process's, not
        this learner's. (Whether it drew cannot be told here: a step ahead of another learner's
        may draw from the process's generator at the same time.)"""
        _GATE.acquire_shared()
        try:
            self._on_main()
            self._update(lr, clip_norm, norm)
        finally:
            _GATE.release_shared()

    def update_now(self, lr, clip_norm, norm):
        """The same update in its turn, with this learner's generator."""
        self._apply_turn(lr, clip_norm, norm)
        if self.rng.drew:
            self.ahead_ok = False
            self.ahead_off = True

    def discard(self):
        """A step ahead not taken: the module's buffers as they were, the runtime's bound."""
        if self._kept_buffers is not None:
            with torch.no_grad():
                for b, kept in zip(self.learner.module.buffers(), self._kept_buffers):
                    b.copy_(kept)  # e.g. a batch norm's running statistics
            self._kept_buffers = None
        self._on_main()

    def evaluate(self):
        with self._op(_island.EVAL):
            return self._evaluate()

    def _evaluate(self):
        L = self.learner
        self._on_main()
        with self.rng, torch.no_grad():
            was_training = L.module.training
            L.module.eval()
            try:
                if L.evaluate is not None:
                    return float(L.evaluate())
                if L.loss is None:
                    # "no evaluation:" tells the runtime the run offers none (hosts/harness.cpp):
                    # the trained model is its result, and the exit code says so.
                    raise LearnerError("no evaluation: the learner brings its own data (step=) "
                                       "and gives no evaluate=; pass diloco.Learner(..., "
                                       "evaluate=fn) for an evaluation loss")
                if self.eval_set is None:
                    self.eval_set = self.ctx.data.eval_batches(256)
                if self.emulated is not None:
                    return self._emulated_evaluation()
                total, count = 0.0, 0
                for x, y in self.eval_set:
                    total += float(_scalar(self.who, L.loss(x, y))) * len(y)
                    count += len(y)
                if self.island is not None:
                    # Each rank evaluated its share of the set.
                    t = self.island.all_reduce(torch.tensor([total, float(count)],
                                                            dtype=torch.float64),
                                               what="summing the evaluation")
                    total, count = t.tolist()
                return total / count
            finally:
                L.module.train(was_training)

    def _emulated_evaluation(self):
        """Replay of an island's evaluation: each rank's share, summed in rank order."""
        world = self.emulated["world"]
        x = torch.cat([b[0] for b in self.eval_set])
        y = torch.cat([b[1] for b in self.eval_set])
        total, count = 0.0, 0.0
        for rank in range(world):
            part, n = 0.0, 0
            for xb, yb in _island.eval_share(x, y, 256, rank, world):
                part += float(_scalar(self.who, self.learner.loss(xb, yb))) * len(yb)
                n += len(yb)
            total += part
            count += n
        return total / count

    def restart(self):
        """A crash lost the optimizer state: its moments and step counts start over."""
        with self._op(_island.RESTART):
            self.learner.optimizer.state.clear()

    # --- snapshots -----------------------------------------------------------------------
    def save(self):
        """The learner's state for a snapshot (its parameters are the runtime's). An island's:
        rank 0's, with each other rank's generator and learner state (the optimizer state is
        the same on every rank)."""
        with self._op(_island.SAVE):
            L = self.learner
            with self.rng:
                mine = {"rng": self.rng.state}
                if L.state_dict is not None:
                    mine["learner"] = L.state_dict()
                if self.sharded is not None:
                    # Whole on rank 0, keyed by parameter name: it loads on any world size.
                    whole = self.island.call(_sharded.optimizer_state, self.inner_module,
                                             L.optimizer, what="gathering the optimizer state")
                    state = {"optimizer": whole, "sharded": True, **mine}
                else:
                    state = {"optimizer": L.optimizer.state_dict(), **mine}
                if L.scheduler is not None and hasattr(L.scheduler, "state_dict"):
                    state["scheduler"] = L.scheduler.state_dict()
            isl = self.island
            if isl is not None:
                parts = [None] * isl.world if isl.leader else None
                isl.call(torch.distributed.gather_object, mine, parts, 0,
                         what="gathering the island's state")
                if not isl.leader:
                    return b""
                state["island"] = {"world": isl.world, "ranks": parts[1:]}
            buf = io.BytesIO()
            torch.save(state, buf)
            return buf.getvalue()

    def load(self, data):
        isl = self.island
        if isl is None:
            return self._load(self._read(data), None)
        if isl.leader:
            state = self._read(data)  # a bad file is refused before the other ranks hear of it
            with self._op(_island.LOAD):
                isl.objects([data])
                return self._load(state, None)
        state = self._read(isl.objects([None])[0])
        ranks = state.get("island", {}).get("ranks", [])
        if isl.rank - 1 < len(ranks):
            return self._load(state, ranks[isl.rank - 1])
        _tell_once(f"diloco: island rank {isl.rank}: the snapshot was saved by an island of "
                   f"{1 + len(ranks)} ranks: this rank takes rank 0's optimizer state and keeps "
                   "its own generator (and no learner state of its own)")
        return self._load(state, {"rng": self.rng.state})

    def _read(self, data):
        try:
            # Tensors and plain values only: a snapshot is data, never code to run. (torch
            # before 2.4 cannot read even floats that way: there it loads as it always did.)
            state = torch.load(io.BytesIO(data), weights_only=_WEIGHTS_ONLY)
        except Exception as e:
            raise LearnerError(f"the saved learner state cannot be read as tensors and plain "
                               f"values ({type(e).__name__}: {e}); a learner's state_dict "
                               "must hold only those") from None
        for key in ("optimizer", "rng"):
            if key not in state:
                raise LearnerError(f"the saved state has no {key}")
        return state

    def _load(self, state, part):
        """`state` loaded (`part`: a follower's own generator and learner state in it)."""
        L = self.learner
        if bool(state.get("sharded")) != (self.sharded is not None):
            raise LearnerError(
                "the snapshot's optimizer state was saved by a learner whose parameters were "
                f"{'' if state.get('sharded') else 'not '}sharded (fully_shard), and this "
                f"learner's are {'not ' if self.sharded is None else ''}sharded: build the "
                "module the same way to resume it")
        if self.sharded is not None:
            self.island.call(_sharded.load_optimizer_state, self.inner_module, L.optimizer,
                             state["optimizer"], what="loading the optimizer state")
        else:
            L.optimizer.load_state_dict(state["optimizer"])
        own = state if part is None else part
        self.rng.state = own["rng"]
        if "scheduler" in state:
            if L.scheduler is None or not hasattr(L.scheduler, "load_state_dict"):
                raise LearnerError("the snapshot holds an lr scheduler's state but the learner "
                                   "has no scheduler= with load_state_dict")
            L.scheduler.load_state_dict(state["scheduler"])
        if "learner" in own:
            if L.load_state_dict is None:
                raise LearnerError(f"the snapshot holds learner state but the "
                                   "learner has no load_state_dict")
            with self.rng:
                L.load_state_dict(own["learner"])
