"""FSDP inside an island (python/diloco/_sharded.py), on two gloo ranks in this machine: which
rows each rank holds, gathering parameters whole, writing ranges of the runtime's buffer into
the shards (only the part of a range in a rank's rows, nothing around it), the gradient's norm
over the shards, and the optimizer state whole and back. Skipped where torch has no fully_shard
(FSDP2, torch 2.4 and later). The same again on two GPUs (the island's default group gloo for
CPU tensors and NCCL for CUDA ones) where there are two; skipped, saying so, elsewhere."""

import os
import socket
import tempfile
import unittest

import torch

try:
    from torch.distributed.fsdp import fully_shard
except Exception:  # noqa: BLE001 (torch before 2.4; 1.13 on Python 3.11 fails in importing FSDP)
    fully_shard = None


class Net(torch.nn.Module):
    """Rows that do not split evenly over two ranks: 5 (3 + 2), 1 (1 + 0), 7 (4 + 3)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 5)
        self.b = torch.nn.Linear(5, 1)
        self.c = torch.nn.Parameter(torch.randn(7, 2))

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).sum() + (self.c * self.c).sum()


def make(seed, shard, device="cpu"):
    torch.manual_seed(seed)
    net = Net().to(device)
    if shard:
        for layer in (net.a, net.b):
            fully_shard(layer)
        fully_shard(net)
    return net


def _rank(rank, world, port, out_dir, cuda=False):
    import torch.distributed as dist

    from diloco import _island, _sharded

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = "cpu"
    if cuda:
        # As an island starts on GPUs: gloo for CPU tensors, NCCL for CUDA ones.
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        dist.init_process_group(_island.Island.backend(), rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    try:
        ref = make(0, False)
        net = make(0, True, device)
        named = list(net.named_parameters())
        island = type("Island", (), {"world": world, "rank": rank})()
        results["refusal"] = _sharded.refusal(net, named, island)
        sp = _sharded.ShardedParams(named, rank, world)
        results["rows"] = sp.rows
        offsets, at = [], 0
        for _, p in named:
            offsets.append(at)
            at += p.numel()
        sp.bind(offsets)
        where = {name: off for (name, _), off in zip(named, offsets)}
        results["names"] = [name for name, _ in named]
        # Gathered whole: the unsharded model's values, in the buffer's layout.
        host = torch.zeros(at)
        sp.gather(list(range(len(named))), host, True)
        want = torch.cat([p.detach().reshape(-1) for _, p in ref.named_parameters()])
        results["gather_equal"] = bool(torch.equal(host, want))
        # Ranges written into the shards: a.weight's elements 4..11 (rows 1-3, across the
        # boundary between rank 0's rows 0-2 and rank 1's 3-4), and all of b.bias. Every rank's
        # host copy holds the written values there and garbage everywhere else: nothing outside
        # the ranges may reach a shard.
        host = torch.full((at,), float("nan"))
        ranges = [(where["a.weight"] + 4, 8), (where["b.bias"], 1)]
        for o, c in ranges:
            host[o:o + c] = torch.arange(c, dtype=torch.float32) + 100.0
        written = sp.scatter(ranges, host)
        results["written"] = written
        expect = want.clone()
        for o, c in ranges:
            expect[o:o + c] = torch.arange(c, dtype=torch.float32) + 100.0
        got = torch.zeros(at)
        sp.gather(list(range(len(named))), got, True)
        results["scatter_equal"] = bool(torch.equal(got, expect))
        # The same ranges sent as an island sends them (share_shards): rank 0 has the host
        # buffer (garbage outside the ranges), the other rank none, and is sent only the part
        # in its own rows.
        net4 = make(0, True, device)
        sp4 = _sharded.ShardedParams(list(net4.named_parameters()), rank, world)
        sp4.bind(offsets)
        isl = _island.Island.__new__(_island.Island)
        isl.rank, isl.world, isl.incoming = rank, world, len(ranges)
        results["shared"] = isl.share_shards(ranges if rank == 0 else None, sp4,
                                             host if rank == 0 else None)
        got = torch.zeros(at)
        sp4.gather(list(range(len(named))), got, True)
        results["share_equal"] = bool(torch.equal(got, expect))
        # The gradient's norm over the shards: the same batch on both ranks, so FSDP's average
        # is the unsharded model's gradient.
        net2, ref2 = make(1, True, device), make(1, False)
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
        net2(x.to(device)).backward()
        ref2(x).backward()
        sp2 = _sharded.ShardedParams(list(net2.named_parameters()), rank, world)
        t = torch.tensor([sp2.grad_square_sum()], dtype=torch.float64)
        dist.all_reduce(t)
        ref_sq = sum(float((p.grad.double() ** 2).sum()) for p in ref2.parameters())
        results["norm"] = (float(t), ref_sq)
        # The optimizer state whole on rank 0 and back into a fresh module's shards.
        opt = torch.optim.AdamW(net2.parameters(), lr=0.1)
        opt.step()
        whole = _sharded.optimizer_state(net2, opt)
        box = [whole if rank == 0 else None]
        dist.broadcast_object_list(box, 0)
        whole = box[0]
        results["whole_shapes"] = {k: tuple(v["exp_avg"].shape) for k, v in whole["state"].items()}
        net3 = make(2, True, device)
        opt3 = torch.optim.AdamW(net3.parameters(), lr=0.1)
        _sharded.load_optimizer_state(net3, opt3, whole)
        same = True
        for (name, p2), p3 in zip(net2.named_parameters(), net3.parameters()):
            s2, s3 = opt.state[p2], opt3.state[p3]
            same = same and torch.equal(s2["exp_avg"].to_local(), s3["exp_avg"].to_local())
            same = same and torch.equal(s2["exp_avg_sq"].to_local(), s3["exp_avg_sq"].to_local())
        results["opt_round_trip"] = bool(same)
        # Some parameters sharded and others not: refused, naming one that is not.
        half = Net().to(device)
        fully_shard(half.a)
        results["half"] = _sharded.refusal(half, list(half.named_parameters()), island)
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.destroy_process_group()


@unittest.skipIf(fully_shard is None, "this PyTorch has no fully_shard (FSDP2)")
class Sharded(unittest.TestCase):
    cuda = False

    @classmethod
    def setUpClass(cls):
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cls.dir = tempfile.mkdtemp()
        mp.spawn(_rank, args=(2, port, cls.dir, cls.cuda), nprocs=2, join=True)
        cls.r = [torch.load(os.path.join(cls.dir, f"rank{k}.pt"), weights_only=False)
                 for k in range(2)]

    def test_rows_as_torch_chunk_deals_them(self):
        self.assertEqual(self.r[0]["refusal"], "")
        # (first row, end row, floats per row) per parameter, in the module's order (its own
        # parameter first).
        self.assertEqual(self.r[0]["names"], ["c", "a.weight", "a.bias", "b.weight", "b.bias"])
        self.assertEqual(self.r[0]["rows"], [(0, 4, 2), (0, 3, 3), (0, 3, 1), (0, 1, 5), (0, 1, 1)])
        self.assertEqual(self.r[1]["rows"], [(4, 7, 2), (3, 5, 3), (3, 5, 1), (1, 1, 5), (1, 1, 1)])

    def test_gather_gives_the_whole_parameters(self):
        self.assertTrue(self.r[0]["gather_equal"])

    def test_scatter_writes_the_ranges_and_nothing_else(self):
        self.assertTrue(self.r[0]["scatter_equal"])
        # a.weight's elements 4..11: rank 0's rows end at element 9 (5 floats), rank 1's
        # begin there (3); b.bias's one row is rank 0's.
        self.assertEqual(self.r[0]["written"], 5 + 1)
        self.assertEqual(self.r[1]["written"], 3)

    def test_each_rank_is_sent_only_its_rows(self):
        self.assertTrue(self.r[0]["share_equal"])
        self.assertTrue(self.r[1]["share_equal"])
        # (floats written into the rank's shards, floats rank 0 sent): rank 1 is sent its 3.
        self.assertEqual(self.r[0]["shared"], (5 + 1, 3))
        self.assertEqual(self.r[1]["shared"], (3, 0))

    def test_gradient_norm_over_the_shards(self):
        got, want = self.r[0]["norm"]
        self.assertAlmostEqual(got, want, delta=1e-5 * want)
        self.assertEqual(self.r[1]["norm"][0], got)

    def test_optimizer_state_whole_and_back(self):
        self.assertEqual(self.r[0]["whole_shapes"], {"a.weight": (5, 3), "a.bias": (5,),
                                                     "b.weight": (1, 5), "b.bias": (1,),
                                                     "c": (7, 2)})
        self.assertTrue(self.r[0]["opt_round_trip"])
        self.assertTrue(self.r[1]["opt_round_trip"])

    def test_partly_sharded_is_refused(self):
        self.assertIn("some parameters are sharded and others not (c is a plain tensor)",
                      self.r[0]["half"])


@unittest.skipIf(fully_shard is None or not torch.cuda.is_available() or
                 torch.cuda.device_count() < 2,
                 "the same on two GPUs (NCCL for the shards): this machine has fewer than two")
class ShardedOnGPUs(Sharded):
    cuda = True


if __name__ == "__main__":
    unittest.main()
