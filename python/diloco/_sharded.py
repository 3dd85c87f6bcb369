"""FSDP inside an island: a module whose parameters are shards of the model (torch's
`fully_shard`, FSDP2), each rank holding its rows of every parameter.

The runtime's buffer (rank 0's) holds the whole model, as for any island; the module's
parameters cannot point into it, so the buffer is a host copy kept as the device mirror keeps
its own (_learner.Runner): after a step, a fragment's parameters are gathered into it when the
runtime reads them (one all-gather per parameter, every rank taking part, only the parameters
the runtime asks for); what the runtime wrote (a merge's spans, the global model at a rejoin,
a loaded snapshot) goes out before the next step or evaluation, each rank sent only the part
that falls in its own rows (one scatter from rank 0), which it copies into its shard: the other
ranks hold no copy of the whole model. The inner step is FSDP's own: gradients
reduce-scattered in backward, each rank's optimizer stepping its shard. A snapshot keeps the
optimizer state whole (gathered to rank 0), so it loads on any number of ranks.

What is taken: every parameter a DTensor sharded on its first dimension (Shard(0), torch.chunk's
rows) over a one-dimensional mesh of all the island's ranks in rank order: `fully_shard(module)`
(per layer and on the root, or on the root only) with the default mesh. Anything else (FSDP1's
FullyShardedDataParallel wrapper, hybrid sharding, tensor parallel placements, some parameters
sharded and others not) is refused with what to change.
"""

import torch


def rows_of(rows, rank, world):
    """The rows [lo, hi) of a parameter of `rows` rows that rank `rank` of `world` holds, as
    torch.chunk deals them out (what fully_shard does): chunks of ceil(rows / world), the last
    ones short or empty."""
    per = -(-rows // world)
    return min(rows, rank * per), min(rows, (rank + 1) * per)


def is_dtensor(p):
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"


def refusal(module, named, island):
    """Why this module's sharding cannot be trained ("" when it can, or it is not sharded)."""
    if type(module).__name__ == "FullyShardedDataParallel":
        return ("the module is wrapped in FullyShardedDataParallel (FSDP1); an island takes "
                "torch's fully_shard (FSDP2: torch.distributed.fsdp.fully_shard on the layers "
                "and the root), or DistributedDataParallel, or no wrapper")
    sharded = [n for n, p in named if is_dtensor(p)]
    if not sharded:
        return ""
    if len(sharded) != len(named):
        plain = [n for n, p in named if not is_dtensor(p)]
        return (f"some parameters are sharded and others not ({plain[0]} is a plain tensor): "
                "apply fully_shard to the root module as well, so that every parameter is")
    if island is None:
        return ("the module's parameters are sharded (fully_shard) but this process is not an "
                "island's rank: start the island with torchrun")
    try:
        from torch.distributed.tensor import Shard
    except ImportError:  # torch before 2.4
        from torch.distributed._tensor import Shard
    for name, p in named:
        mesh = p.device_mesh
        ranks = mesh.mesh.flatten().tolist()
        if mesh.ndim != 1 or ranks != list(range(island.world)):
            return (f"parameter {name} is sharded over a mesh of ranks {mesh.mesh.tolist()}; an "
                    f"island of {island.world} ranks takes a one-dimensional mesh of all of them "
                    "in rank order (fully_shard's default; no hybrid sharding)")
        if tuple(p.placements) != (Shard(0),):
            return (f"parameter {name} is placed {tuple(p.placements)}; an island takes "
                    "parameters sharded on their first dimension (fully_shard's Shard(0)), not "
                    "tensor parallel placements")
        if p.dim() == 0:
            return f"parameter {name} is a sharded scalar"
    return ""


class ShardedParams:
    """The parameters of a fully_shard module as this rank holds them, and their place in the
    runtime's buffer (bind)."""

    def __init__(self, named, rank, world):
        self.params = [p for _, p in named]
        self.names = [n for n, _ in named]
        self.rank, self.world = rank, world
        self.numel = [p.numel() for p in self.params]
        # This rank's rows of each parameter, as torch.chunk deals them out (what fully_shard
        # does): chunks of ceil(rows / world), the last ones short or empty.
        self.first = [p.shape[0] for p in self.params]
        self.rows = []
        for name, p in named:
            n0 = p.shape[0]
            lo, hi = rows_of(n0, rank, world)
            with torch.no_grad():
                local = p.to_local()
            if local.shape[0] != hi - lo:
                raise ValueError(f"parameter {name}: this rank holds {local.shape[0]} of its "
                                 f"{n0} rows, not the {hi - lo} torch.chunk gives rank {rank} of "
                                 f"{world} (an unusual shard placement)")
            self.rows.append((lo, hi, p.numel() // n0))
        self.offsets = None

    def bind(self, offsets):
        self.offsets = list(offsets)

    def full_values(self, keep):
        """Every parameter whole (one all-gather each, every rank taking part): flat numpy
        copies where `keep`, else None."""
        out = []
        for p in self.params:
            with torch.no_grad():
                full = p.full_tensor()
            out.append(full.detach().reshape(-1).cpu().numpy().copy() if keep else None)
        return out if keep else None

    def overlapping(self, ranges):
        """Indices of the parameters any of these (offset, count) ranges touches (all: None)."""
        if ranges is None:
            return list(range(len(self.params)))
        out = []
        for i, (off, n) in enumerate(zip(self.offsets, self.numel)):
            if any(o < off + n and off < o + c for o, c in ranges):
                out.append(i)
        return out

    def gather(self, indices, host, keep):
        """These parameters whole into the host buffer (where `keep`: rank 0). Every rank calls
        it with the same indices."""
        moved = 0
        for i in indices:
            with torch.no_grad():
                full = self.params[i].full_tensor()
            if keep:
                off = self.offsets[i]
                host[off:off + self.numel[i]].copy_(full.reshape(-1))
            moved += self.numel[i]
        return moved

    def pieces(self, ranges, rank):
        """The parts of these (offset, count) ranges of the buffer that fall in rank `rank`'s
        rows: (start, end, parameter index, start in that rank's local shard), in parameter
        order, then range order (every rank computes any rank's the same way)."""
        out = []
        for i, (off, n) in enumerate(zip(self.offsets, self.numel)):
            lo, hi = rows_of(self.first[i], rank, self.world)
            row = n // self.first[i]
            a, b = off + lo * row, off + hi * row  # the rank's rows in the buffer
            for o, c in ranges:
                s, e = max(a, o), min(b, o + c)
                if s < e:
                    out.append((s, e, i, s - a))
        return out

    def pack(self, pieces, host, out):
        """These pieces (another rank's, from pieces()) of the host buffer, one after another at
        the start of `out` (what that rank unpacks)."""
        at = 0
        for s, e, _, _ in pieces:
            out[at:at + e - s].copy_(host[s:e])
            at += e - s
        return at

    def write(self, pieces, source, packed):
        """This rank's pieces into its shards, from the host buffer, or (`packed`) one after
        another as pack() laid them out. Returns the floats written."""
        written = 0
        with torch.no_grad():
            locals_ = {}
            for s, e, i, at in pieces:
                if i not in locals_:
                    locals_[i] = self.params[i].to_local().reshape(-1)
                local = locals_[i]
                src = source[written:written + e - s] if packed else source[s:e]
                local[at:at + e - s].copy_(src.to(local.device), non_blocking=False)
                written += e - s
        return written

    def scatter(self, ranges, host):
        """What these ranges of the host buffer hold into this rank's shards: the part of each
        range within this rank's rows of a parameter. Returns the floats written."""
        return self.write(self.pieces(ranges, self.rank), host, False)

    def zero_grads(self):
        for p in self.params:
            p.grad = None

    def grad_square_sum(self):
        """The sum of squares of this rank's shards of the gradient (the island's sum of them
        is the whole gradient's squared norm)."""
        acc = 0.0
        with torch.no_grad():
            for p in self.params:
                if p.grad is not None:
                    g = p.grad.to_local().double()
                    acc += float(torch.sum(g * g))
        return acc

    def scale_grads(self, factor):
        """Every rank's shards of the gradient times `factor` (each on its own: the local tensor,
        not the DTensor, whose every operation goes through sharding propagation)."""
        with torch.no_grad():
            for p in self.params:
                if p.grad is not None:
                    p.grad.to_local().mul_(factor)


def optimizer_state(module, optimizer):
    """The optimizer's state whole on rank 0 (keyed by parameter name; empty elsewhere): a
    collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer,
                                    options=StateDictOptions(full_state_dict=True,
                                                             cpu_offload=True))


def load_optimizer_state(module, optimizer, state):
    """A whole optimizer state (every rank has it) into each rank's shards: a collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(module, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))
