"""Islands: one learner that is a group of processes, started like any PyTorch job (torchrun,
or anything that sets torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT).

Rank 0 is the node: it joins the cluster, talks to the syncer shards and drives the island.
The other ranks (followers) never see the cluster. Each of rank 0's learner calls that needs the
island is an order, broadcast to every rank on the island's process group, after which every
rank runs the same code: the user's factory (so a DistributedDataParallel built in it is built
on every rank), a step (each rank on its own batch; the gradients averaged over the island,
by DDP when the module is wrapped in it, else by one all-reduce of the gradient buffer), an
evaluation (each rank a share of the evaluation set), a snapshot's save and load.

The outer sync is rank 0's: it computes the island's outer gradients from its parameters (the
same bits on every rank) and takes the merged fragments; the spans a merge wrote go to the other
ranks in one broadcast before the next step. The shards see one learner whose tokens are the
island's.

Failure is the island's: a rank that dies closes its connections, the collective the others are
in (or the next order) fails at once, and each remaining rank says so and exits. Rank 0 exiting
is its node going away: the shards count the learner out, and the island started again rejoins
from the global model. A rank that hangs is found by the process group's timeout; rank 0 sends
an order at least every few seconds (a no-op when idle), so an idle island never times out.
"""

import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

# Orders rank 0 gives (the first value of an order's header).
NOOP, INIT, BIND, STEP, EVAL, SAVE, LOAD, RESTART, STOP, GATHER = range(10)
NAMES = {NOOP: "no-op", INIT: "make the learner", BIND: "bind", STEP: "step", EVAL: "evaluate",
          SAVE: "save", LOAD: "load", RESTART: "restart", STOP: "stop",
          GATHER: "gather parameters"}
# The exit code of a rank whose island broke (another rank died or hung).
EXIT_BROKEN = 75

_CURRENT = None
# Replay: the islands a deployed run's tapes record, by (learner, process).
_REPLAYED = {}

# What torch.distributed's backends say when a peer is gone or silent (a collective inside the
# user's code, e.g. DDP's all-reduce in backward, raises these).
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Timed out", "timed out", "NCCL communicator was aborted", "ProcessGroupNCCL",
              "gloo/transport")


def is_collective_failure(error):
    """Whether `error` is a collective failing because another rank died or hung."""
    return isinstance(error, RuntimeError) and any(k in str(error) for k in _PEER_GONE)


def current():
    """The island this process is a rank of, or None."""
    return _CURRENT


def record_dir(argv):
    """The tape directory of a `diloco node` command line (None without --tape)."""
    for i, a in enumerate(argv):
        if a == "--tape" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--tape="):
            return a.split("=", 1)[1]
    return None


def load_replayed(paths):
    """Replay: reads the island records beside the tapes given (files or directories);
    returns them, [(learner, process, world, ddp)]."""
    import glob
    import json

    dirs = {p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p)) for p in paths
            if os.path.exists(p)}
    found = []
    for d in sorted(dirs):
        for f in sorted(glob.glob(os.path.join(d, "*.island.json"))):
            try:
                with open(f) as fh:
                    r = json.load(fh)
                key = (int(r["learner"]), int(r["process"]))
                info = {"world": int(r["world"]), "ddp": bool(r["ddp"]),
                        "own_data": bool(r["own_data"]),
                        "sharded": bool(r.get("sharded", False))}
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"diloco replay: {f}: not an island record ({e})")
            if info["world"] < 1:
                raise SystemExit(f"diloco replay: {f}: world {info['world']} is not a size")
            _REPLAYED[key] = info
            found.append((*key, info["world"], info["ddp"]))
    return found


def replayed(ctx):
    """Replay: the island this learner's process was, or None."""
    return _REPLAYED.get((ctx.index, ctx.incarnation))


def from_env(timeout_s=None):
    """The island torchrun's environment describes (WORLD_SIZE > 1), or None."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return None
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"diloco: WORLD_SIZE is {world} but {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not set: start an island with "
                         "torchrun (or set torchrun's environment for each rank)")
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if not 0 <= rank < world:
        raise SystemExit(f"diloco: RANK {rank} is not in 0..{world - 1} (WORLD_SIZE {world})")
    if timeout_s is None:
        timeout_s = float(os.environ.get("DILOCO_ISLAND_TIMEOUT", "120"))
    return Island(rank, world, local, timeout_s)


class Island:
    def __init__(self, rank, world, local_rank, timeout_s):
        self.rank = rank
        self.world = world
        self.local_rank = local_rank
        self.timeout_s = timeout_s
        self.lock = threading.RLock()  # rank 0: one order and its collectives at a time
        self.last = time.monotonic()
        self.slots = 0
        self.incoming = 0  # a follower: parameter ranges the current order sends first
        self.tape_dir = None  # rank 0 of a recorded node: the island is noted beside its tape
        self.stopped = False
        self.data_groups = {}
        # Rank 0's account: steps and their time, the time between steps (its outer sync and
        # messages, while the other ranks wait), and the shares of merged spans.
        self.stats = {"steps": 0, "step_s": 0.0, "between_s": 0.0, "shares": 0, "share_s": 0.0,
                      "share_bytes": 0}
        self._step_end = None
        # Every rank: the wall and process CPU time from its first step's start to its last
        # step's end (start-up, waits before the run and the final evaluation left out).
        self._first = None
        self._last = None

    def step_timed(self, seconds, ended, cpu_before):
        """A step took `seconds` and ended at `ended` (time.perf_counter); the process's CPU
        time was `cpu_before` at its start."""
        st = self.stats
        if self._step_end is not None:
            st["between_s"] += max(0.0, ended - seconds - self._step_end)
        self._step_end = ended
        st["steps"] += 1
        st["step_s"] += seconds
        if self._first is None:
            self._first = (ended - seconds, cpu_before)
        self._last = (ended, time.process_time())

    def steps_span(self):
        """(wall s, CPU s) from the first step's start to the last step's end."""
        if self._first is None:
            return 0.0, 0.0
        return self._last[0] - self._first[0], self._last[1] - self._first[1]

    def record(self, ctx, ddp, own_data, sharded=False):
        """Rank 0 of a recorded node: notes beside the tape that this learner's process is an
        island, for replay (which computes its ranks' steps one after another)."""
        if not self.tape_dir:
            return
        import json

        os.makedirs(self.tape_dir, exist_ok=True)
        path = os.path.join(self.tape_dir,
                            f"learner-{ctx.index}.{ctx.incarnation}.island.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"learner": ctx.index, "process": ctx.incarnation, "world": self.world,
                       "ddp": bool(ddp), "own_data": bool(own_data), "sharded": bool(sharded)},
                      f)
        os.replace(path + ".tmp", path)

    def summary(self):
        """Rank 0's account of the island, one line."""
        st = self.stats
        if st["steps"] == 0:
            return f"island of {self.world} ranks: no steps"
        step_ms = 1e3 * st["step_s"] / st["steps"]
        wall, cpu = self.steps_span()
        text = (f"island of {self.world} ranks: {st['steps']} steps, {step_ms:.2f} ms each "
                f"({wall:.2f} s from the first to the last, rank 0 {cpu:.2f} CPU s); "
                f"rank 0 between steps (outer sync, messages) {st['between_s']:.2f} s, "
                f"{1e3 * st['between_s'] / st['steps']:.2f} ms per step")
        if st["shares"]:
            text += (f"; {st['shares']} merges sent to the other ranks "
                     f"({st['share_bytes'] / 1e6:.1f} MB, {1e3 * st['share_s'] / st['shares']:.2f}"
                     f" ms each, between steps {1e3 * st['between_s'] / st['shares']:.2f} ms per "
                     f"merge = {st['between_s'] / st['shares'] / (st['step_s'] / st['steps']):.2f}"
                     " steps)")
        from ._learner import COPIES

        if COPIES["shard_gathers"]:
            text += (f"; parameters sharded (fully_shard): {COPIES['shard_gathers']} gathers to "
                     f"rank 0 ({COPIES['shard_gather_bytes'] / 1e6:.1f} MB), "
                     f"{COPIES['shard_writes']} floats of merges written into rank 0's rows")
        return text

    @property
    def leader(self):
        return self.rank == 0

    def device(self):
        """The device a rank's factory should put its module on: its GPU (LOCAL_RANK), or the
        CPU where there is none."""
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank % torch.cuda.device_count())
        return torch.device("cpu")

    @staticmethod
    def backend():
        """The default group's backend: gloo, with NCCL for CUDA tensors where there are GPUs."""
        if torch.cuda.is_available() and dist.is_nccl_available():
            return "cpu:gloo,cuda:nccl"
        return "gloo"

    def start(self):
        global _CURRENT
        if torch.cuda.is_available():
            torch.cuda.set_device(self.device())
        # Orders and CPU tensors go over gloo. With GPUs the default group is gloo for CPU
        # tensors and NCCL for CUDA ones: fully_shard's collectives run on the default group
        # (its default mesh), and gloo does not reduce-scatter CUDA tensors. A DDP module's
        # tensors get an NCCL group of their own (group()).
        backend = self.backend()
        timeout = datetime.timedelta(seconds=self.timeout_s)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        print(f"island rank {self.rank} of {self.world}: joining the island at "
              f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
              f"{'' if attempt is None else f' (torchrun attempt {attempt})'}", flush=True)
        try:
            store = self._attempt_store(timeout)
            if store is None:
                dist.init_process_group(backend, rank=self.rank, world_size=self.world,
                                        timeout=timeout)
            else:
                dist.init_process_group(backend, store=store, rank=self.rank,
                                        world_size=self.world, timeout=timeout)
        except Exception as e:  # noqa: BLE001 (torch raises several kinds)
            raise SystemExit(f"diloco: island rank {self.rank} of {self.world}: cannot join the "
                             f"island's process group at {os.environ.get('MASTER_ADDR')}:"
                             f"{os.environ.get('MASTER_PORT')}: {e}")
        _CURRENT = self
        if self.leader:
            threading.Thread(target=self._keepalive, name="diloco-island-keepalive",
                             daemon=True).start()

    def _attempt_store(self, timeout):
        """Under torchrun's agent store: a store of this attempt's own, which no rank of an
        earlier attempt ever wrote. None: torch's own env:// rendezvous.

        The agent's store lives on across torchrun's restarts, and a restarted island's ranks
        were seen reading there the address a rank of the attempt before had left, and failing
        to connect to it (`Connection refused`). Keys under the restart count do not cure it
        when the island's ranks come from several agents (hosts): an agent restarted because
        another one's rank died does not count that restart, so the ranks of one attempt can
        hold different counts and never meet. So rank 0 serves a new store on a free port and
        leaves its address in the agent's store; the other ranks take the address found there
        and connect, reading it again while it names a store that does not answer (the last
        attempt's rank 0, gone)."""
        if (os.environ.get("TORCHELASTIC_RESTART_COUNT") is None or
                os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"):
            return None
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        agent = dist.TCPStore(host, port, self.world, False, timeout)
        key = "diloco-island/store"
        if self.leader:
            own = dist.TCPStore(host, 0, self.world, True, timeout, wait_for_workers=False)
            agent.set(key, f"{own.port}")
            return own
        deadline = time.monotonic() + timeout.total_seconds()
        while True:
            try:
                return dist.TCPStore(host, int(agent.get(key).decode()), self.world, False,
                                     datetime.timedelta(seconds=2))
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def group(self, device):
        """The process group for a DDP module's tensors on `device` (None: the default)."""
        if device.type != "cuda":
            return None
        if "cuda" not in self.data_groups:
            self.data_groups["cuda"] = self.call(dist.new_group, backend="nccl")
        return self.data_groups["cuda"]

    # --- failure --------------------------------------------------------------------------
    def broken(self, error, what):
        print(f"diloco: island rank {self.rank} of {self.world}: {what} failed ({error}): the "
              "island lost a rank, and all its ranks stop. Start the island again (all its "
              "ranks: torchrun --max-restarts, or your scheduler) and it rejoins the run from the "
              "global model.", file=sys.stderr, flush=True)
        os._exit(EXIT_BROKEN)

    def call(self, fn, *args, what="a collective", **kwargs):
        """fn(*args, **kwargs), a collective of the island: a failure ends this rank."""
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if is_collective_failure(e):
                self.broken(e, what)
            raise

    # --- orders ---------------------------------------------------------------------------
    def order(self, op, slot=0, *values, shares=0):
        """Rank 0: tells every rank what to do next (the caller holds self.lock); `shares`:
        the number of parameter ranges the operation will send them first (share())."""
        header = torch.zeros(8, dtype=torch.float64)
        header[0], header[1], header[7] = op, slot, shares
        for i, v in enumerate(values):
            header[2 + i] = v
        self.call(dist.broadcast, header, 0, what=f"the order '{NAMES[op]}'")
        self.last = time.monotonic()

    def receive(self):
        """A follower: the next order, (op, slot, [values])."""
        header = torch.zeros(8, dtype=torch.float64)
        self.call(dist.broadcast, header, 0, what="waiting for rank 0's next order")
        values = header.tolist()
        self.incoming = int(values[7])
        return int(values[0]), int(values[1]), values[2:7]

    def _keepalive(self):
        period = max(0.5, min(5.0, self.timeout_s / 4))
        while not self.stopped:
            time.sleep(period / 2)
            if time.monotonic() - self.last < period:
                continue
            if self.lock.acquire(timeout=period):
                try:
                    if not self.stopped and time.monotonic() - self.last >= period:
                        self.order(NOOP)
                finally:
                    self.lock.release()

    def objects(self, objs):
        """broadcast_object_list from rank 0: the list as rank 0 has it."""
        box = list(objs) if self.leader else [None] * len(objs)
        self.call(dist.broadcast_object_list, box, 0, what="sending the learner's setup")
        return box

    def share(self, ranges, flat, group):
        """Rank 0's values of these (offset, count) ranges of `flat` to every rank (followers
        pass None and learn the ranges; how many, the order said). Returns the ranges."""
        pairs = self._spans(ranges)
        if not pairs:
            return []
        k = len(pairs)
        if k == 1:
            o, c = pairs[0]
            self.call(dist.broadcast, flat[o:o + c], 0, group=group, what="sharing the parameters")
            return pairs
        if self.leader:
            packed = torch.cat([flat[o:o + c] for o, c in pairs])
        else:
            packed = torch.empty(sum(c for _, c in pairs), dtype=flat.dtype, device=flat.device)
        self.call(dist.broadcast, packed, 0, group=group, what="sharing the parameters")
        if not self.leader:
            at = 0
            for o, c in pairs:
                flat[o:o + c].copy_(packed[at:at + c])
                at += c
        return pairs

    def _spans(self, ranges):
        """Rank 0's (offset, count) ranges, known to every rank (how many, the order said)."""
        k = len(ranges) if self.leader else self.incoming
        if k == 0:
            return []
        spans = torch.zeros(2 * k, dtype=torch.int64)
        if self.leader:
            spans.copy_(torch.tensor([v for r in ranges for v in r], dtype=torch.int64))
        self.call(dist.broadcast, spans, 0, what="sharing the parameters")
        return spans.view(k, 2).tolist()

    def share_shards(self, ranges, sharded, host):
        """A sharded module's share(): rank 0's values of these ranges of its host buffer
        (followers pass None for both), each rank sent only the part in its own rows (one
        scatter) and copying it into its shards. Returns (floats written into this rank's
        shards, floats sent to the other ranks)."""
        pairs = self._spans(ranges)
        if not pairs:
            return 0, 0
        # Every rank's pieces (each rank computes them all: scatter's parts are of one size).
        pieces = [sharded.pieces(pairs, r) for r in range(self.world)]
        most = max((sum(e - s for s, e, _, _ in p) for p in pieces[1:]), default=0)
        got = None
        if most:
            got = torch.empty(most, dtype=torch.float32)
            parts = None
            if self.leader:
                parts = [got]
                for r in range(1, self.world):
                    part = torch.empty(most, dtype=torch.float32)
                    sharded.pack(pieces[r], host, part)
                    parts.append(part)
            self.call(dist.scatter, got, parts, 0, what="sharing the parameters")
        if self.leader:
            return sharded.write(pieces[0], host, False), most * (self.world - 1)
        return sharded.write(pieces[self.rank], got, True), 0

    def all_reduce(self, tensor, group=None, what="averaging over the island"):
        self.call(dist.all_reduce, tensor, group=group, what=what)
        return tensor

    def stop(self, code):
        """Rank 0, at the end: the followers exit with this code."""
        with self.lock:
            if not self.stopped:
                self.order(STOP, 0, code)
                self.stopped = True
                print(self.summary(), flush=True)

    # --- a follower ---------------------------------------------------------------------
    def follow(self, factory):
        """A follower's life: does what rank 0 orders until it says stop; the exit code."""
        from ._learner import Runner

        print(f"island rank {self.rank} of {self.world}: following rank 0 (pid {os.getpid()})",
              flush=True)
        runners = {}
        while True:
            op, slot, v = self.receive()
            if op == NOOP:
                continue
            if op == STOP:
                wall, cpu = self.steps_span()
                print(f"island rank {self.rank} of {self.world}: rank 0 ended the island "
                      f"(exit {int(v[0])}); {self.stats['steps']} steps, {cpu:.2f} CPU s from "
                      "the first to the last", flush=True)
                return int(v[0])
            try:
                if op == INIT:
                    runners[slot] = Runner.follower(factory, self, slot)
                    continue
                r = runners[slot]
                if op == BIND:
                    r.follow_bind()
                elif op == STEP:
                    r.step(v[0], v[1])
                elif op == EVAL:
                    r.evaluate()
                elif op == SAVE:
                    r.save()
                elif op == LOAD:
                    r.load(None)
                elif op == RESTART:
                    r.restart()
                elif op == GATHER:
                    r.follow_gather()
                else:
                    raise RuntimeError(f"an order this rank does not know ({op})")
            except Exception as e:  # noqa: BLE001 (the user's code: anything)
                if is_collective_failure(e):
                    self.broken(e, f"'{NAMES.get(op, op)}'")
                import traceback

                traceback.print_exc()
                print(f"diloco: island rank {self.rank} of {self.world}: '{NAMES.get(op, op)}' "
                      "raised (above): this rank stops, and with it the island",
                      file=sys.stderr, flush=True)
                os._exit(1)


class LeaderData:
    """Rank 0's view of the learner's data: each step it reads the island's batches (one per
    rank, in rank order) and sends the others theirs. The cursor, and so the position kept in
    snapshots and the tokens counted, is the island's."""

    def __init__(self, data, island):
        self._data = data
        self._cursor = data._cursor
        self._island = island

    def __getattr__(self, name):
        return getattr(self._data, name)

    def next_batch(self):
        isl = self._island
        batches = [self._data.next_batch() for _ in range(isl.world)]
        x, y = batches[0]
        # One scatter: each rank's inputs with its targets as the last column.
        packed = [torch.cat([bx, by[:, None]], 1) for bx, by in batches]
        isl.call(dist.scatter, torch.empty_like(packed[0]), packed, 0,
                 what="sending the ranks their batches")
        return x, y

    def eval_batches(self, batch=256):
        x, y = self._data._cursor.eval_set()
        x, y = torch.from_numpy(x).long(), torch.from_numpy(y).long()
        n = torch.tensor([x.shape[0], x.shape[1] if x.dim() > 1 else 0], dtype=torch.int64)
        self._island.call(dist.broadcast, n, 0, what="sending the evaluation set")
        self._island.call(dist.broadcast, x.contiguous(), 0, what="sending the evaluation set")
        self._island.call(dist.broadcast, y.contiguous(), 0, what="sending the evaluation set")
        return eval_share(x, y, batch, self._island.rank, self._island.world)


class FollowerData:
    """A follower's view of the learner's data: the batches rank 0 sends it."""

    def __init__(self, island, batch, context):
        self._island = island
        self._batch = batch
        self._context = context

    batch = property(lambda self: self._batch)
    context = property(lambda self: self._context)
    vocab = property(lambda self: 256)
    tokens = property(lambda self: 0)

    def next_batch(self):
        packed = torch.empty(self._batch, self._context + 1, dtype=torch.int64)
        self._island.call(dist.scatter, packed, None, 0, what="receiving this rank's batch")
        return packed[:, :-1].contiguous(), packed[:, -1].contiguous()

    def eval_batches(self, batch=256):
        n = torch.zeros(2, dtype=torch.int64)
        self._island.call(dist.broadcast, n, 0, what="receiving the evaluation set")
        rows, cols = int(n[0]), int(n[1])
        x = torch.empty((rows, cols) if cols else (rows,), dtype=torch.int64)
        y = torch.empty(rows, dtype=torch.int64)
        self._island.call(dist.broadcast, x, 0, what="receiving the evaluation set")
        self._island.call(dist.broadcast, y, 0, what="receiving the evaluation set")
        return eval_share(x, y, batch, self._island.rank, self._island.world)


def eval_share(x, y, batch, rank, world):
    """Rank's share of the evaluation set, in as many batches as every other rank's (a DDP
    module's forward may be a collective: every rank runs it as often)."""
    rows = x.shape[0]
    per = -(-rows // world)
    lo, hi = min(rows, rank * per), min(rows, (rank + 1) * per)
    count = max(1, -(-per // batch))
    xs, ys = torch.tensor_split(x[lo:hi], count), torch.tensor_split(y[lo:hi], count)
    return list(zip(xs, ys))
