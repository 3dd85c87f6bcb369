"""PyTorch learners in the runtime: the cross-implementation oracle, determinism, the buffer
sharing, and the errors a bad learner gets (run by ctest as python_learners)."""

import contextlib
import math
import os
import tempfile
import unittest

import torch

import diloco
from diloco import _diloco

import bad_learners
import mlp_twin

SMALL = {"token_budget": 64000, "model.hidden": 32, "model.embed_dim": 8}


class Oracle(unittest.TestCase):
    def test_twin_follows_the_builtin_learner_step_by_step(self):
        cpp = diloco.learner_compute()
        twin = diloco.learner_compute(learner=mlp_twin.make_learner)
        self.assertEqual(cpp.describe().split(",")[1].strip(),
                         twin.describe().split(",")[1].strip().split(" in ")[0])
        init_cpp, init_twin = cpp.params(), twin.params()
        for name, value in init_cpp.items():
            self.assertTrue((value == init_twin[name]).all(), name)
        worst = 0.0
        for step in range(200):
            a, b = cpp.step(step), twin.step(step)
            self.assertEqual(a["tokens"], b["tokens"])
            self.assertEqual(a["lr"], b["lr"])
            worst = max(worst, abs(a["loss"] - b["loss"]) / abs(a["loss"]))
        self.assertLess(worst, 1e-4)
        self.assertLess(abs(cpp.evaluate() - twin.evaluate()) / cpp.evaluate(), 1e-4)

    def test_default_decoupled_run_with_twin_learners(self):
        builtin = diloco.simulate()
        twin = diloco.simulate(learner=mlp_twin.make_learner)
        self.assertEqual(twin["violations"], [])
        self.assertEqual(twin["failed_learners"], [])
        self.assertEqual(twin["tokens"], builtin["tokens"])
        rel = abs(twin["eval_loss"] - builtin["eval_loss"]) / builtin["eval_loss"]
        self.assertLess(rel, 0.005, (twin["eval_loss"], builtin["eval_loss"]))


@contextlib.contextmanager
def never_called_off():
    """Steps ahead that a merge overtakes before they begin run anyway and are put back, so how
    many are put back is the run's alone, not the pool's timing."""
    _diloco._never_call_off(True)
    try:
        yield
    finally:
        _diloco._never_call_off(False)


class Determinism(unittest.TestCase):
    def test_any_number_of_threads_gives_the_same_run(self):
        one = diloco.simulate(set=SMALL, threads=1, progress=False)
        two = diloco.simulate(set=SMALL, threads=2, progress=False)
        self.assertEqual((one["threads"], two["threads"]), (1, 2))
        self.assertEqual(one["trace_hash"], two["trace_hash"])
        self.assertEqual(one["eval_loss"], two["eval_loss"])
        self.assertGreaterEqual(diloco.simulate(set=SMALL, progress=False)["threads"], 1)
        with self.assertRaises(ValueError):
            diloco.simulate(set=SMALL, threads=0)

    def test_pytorch_learners_compute_ahead_on_threads_and_the_run_is_the_same(self):
        with never_called_off():
            runs = [diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, threads=n,
                                    progress=False) for n in (1, 2, 3)]
        self.assertEqual(runs[0]["steps_ahead"], {"taken": 0, "put_back": 0, "drew": 0})
        steps = sum(l["steps"] for l in runs[0]["learners"])
        for r in runs[1:]:
            self.assertEqual(r["trace_hash"], runs[0]["trace_hash"])
            self.assertEqual(r["eval_loss"], runs[0]["eval_loss"])
            # Most steps were computed ahead and taken; those a merge overtook were put back.
            self.assertGreater(r["steps_ahead"]["taken"], steps // 2, r["steps_ahead"])
            self.assertLessEqual(r["steps_ahead"]["taken"], steps)
            self.assertGreater(r["steps_ahead"]["put_back"], 0, r["steps_ahead"])
        # Which steps go ahead, and which a merge overtakes, is the run's: the same on 2 and 3.
        self.assertEqual(runs[1]["steps_ahead"], runs[2]["steps_ahead"])
        # Called off or not, the same run.
        free = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, threads=2,
                               progress=False)
        self.assertEqual(free["trace_hash"], runs[0]["trace_hash"])
        # A learner that does not say its loss keeps no state computes in its turn.
        plain = diloco.simulate(learner=bad_learners.good, set=SMALL, threads=2, progress=False)
        self.assertEqual(plain["steps_ahead"]["taken"], 0)

    def test_the_optimizer_steps_once_per_step_taken_and_never_for_one_put_back(self):
        calls = []

        def make(ctx):
            learner = mlp_twin.make_learner(ctx)
            opt = learner.optimizer
            step = opt.step

            def counted(*args, **kw):
                calls.append(ctx.index)
                return step(*args, **kw)
            opt.step = counted  # still torch's AdamW: its updates run on the pool
            return learner

        with never_called_off():
            r = diloco.simulate(learner=make, set=SMALL, threads=2, progress=False)
        self.assertGreater(r["steps_ahead"]["put_back"], 0, r["steps_ahead"])
        for l in r["learners"]:
            self.assertEqual(calls.count(l["learner"]), l["steps"], l)

    def test_a_step_put_back_leaves_the_modules_buffers_as_they_were(self):
        import torch

        class Drifting(torch.nn.Module):
            """Its forward moves a buffer that the next forward uses."""

            def __init__(self, context):
                super().__init__()
                self.embed = torch.nn.Embedding(256, 8)
                self.out = torch.nn.Linear(8 * context, 256)
                self.register_buffer("level", torch.zeros(256))

            def forward(self, x):
                logits = self.out(self.embed(x).flatten(1))
                with torch.no_grad():
                    self.level.mul_(0.9).add_(0.1 * logits.mean(0))
                return logits - self.level

        def make(ctx):
            model = Drifting(ctx.context)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            return diloco.Learner(model, opt, ahead=True,
                                  loss=lambda x, y: torch.nn.functional.cross_entropy(model(x), y))

        one = diloco.simulate(learner=make, set=SMALL, threads=1, progress=False)
        with never_called_off():
            two = diloco.simulate(learner=make, set=SMALL, threads=2, progress=False)
        self.assertGreater(two["steps_ahead"]["put_back"], 0, two["steps_ahead"])
        self.assertEqual(one["trace_hash"], two["trace_hash"])
        self.assertEqual(one["eval_loss"], two["eval_loss"])

    def test_a_step_that_draws_is_never_taken_ahead(self):
        import torch

        def make(ctx):
            learner = bad_learners.good(ctx, ahead=True)
            model = learner.module

            def loss(x, y):
                out = torch.nn.functional.cross_entropy(model(x), y)
                if int(y[0]) % 5 == 0:  # some batches draw from the generator, others not
                    out = out + 0.0 * torch.rand(1).sum()
                return out
            learner.loss = loss
            return learner

        one = diloco.simulate(learner=make, set=SMALL, threads=1, progress=False)
        with never_called_off():
            two = diloco.simulate(learner=make, set=SMALL, threads=2, progress=False)
        self.assertEqual(one["trace_hash"], two["trace_hash"])
        self.assertEqual(one["eval_loss"], two["eval_loss"])
        # Steps ahead began once a step drew nothing; the first that drew was put back.
        self.assertGreaterEqual(two["steps_ahead"]["drew"], 1, two["steps_ahead"])
        self.assertGreaterEqual(two["steps_ahead"]["put_back"], two["steps_ahead"]["drew"])

    def test_an_optimizer_that_draws_gives_the_same_run(self):
        # Steps go ahead from the first step that drew nothing; a user's optimizer class updates
        # in the learner's turn with its own generator, so its later draws change nothing.
        one = diloco.simulate(learner=bad_learners.optimizer_draws, set=SMALL, threads=1,
                              progress=False)
        two = diloco.simulate(learner=bad_learners.optimizer_draws, set=SMALL, threads=2,
                              progress=False)
        self.assertEqual(one["trace_hash"], two["trace_hash"])
        self.assertEqual(one["eval_loss"], two["eval_loss"])
        self.assertGreater(two["steps_ahead"]["taken"], 0, two["steps_ahead"])

    def test_same_seed_same_trace_other_seed_other_trace(self):
        a = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL)
        b = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL)
        c = diloco.simulate(learner=mlp_twin.make_learner, set={**SMALL, "seed": 2})
        self.assertEqual(a["trace_hash"], b["trace_hash"])
        self.assertEqual(a["eval_loss"], b["eval_loss"])
        self.assertNotEqual(a["trace_hash"], c["trace_hash"])

    def test_dropout_draws_from_each_learners_own_generator(self):
        def make(ctx):
            learner = bad_learners.good(ctx, ahead=True)
            drop = torch.nn.Dropout(0.3)
            model = learner.module
            learner.loss = lambda x, y: torch.nn.functional.cross_entropy(drop(model(x)), y)
            return learner

        import torch
        a = diloco.simulate(learner=make, set=SMALL)
        torch.manual_seed(12345)  # the process's generator does not leak into the run
        b = diloco.simulate(learner=make, set=SMALL)
        self.assertEqual(a["trace_hash"], b["trace_hash"])
        # Every step draws: none goes ahead, and one thread gives the same run.
        one = diloco.simulate(learner=make, set=SMALL, threads=1, progress=False)
        two = diloco.simulate(learner=make, set=SMALL, threads=2, progress=False)
        self.assertEqual(two["steps_ahead"]["taken"], 0)
        self.assertEqual(one["trace_hash"], two["trace_hash"])


class Buffers(unittest.TestCase):
    def test_syncs_copy_no_model(self):
        def copies_of(budget):
            before = diloco.copy_counts()
            r = diloco.simulate(learner=mlp_twin.make_learner, set={**SMALL, "token_budget": budget})
            after = diloco.copy_counts()
            return r, {k: after[k] - before[k] for k in after}

        short, short_copies = copies_of(32000)
        long, long_copies = copies_of(128000)
        self.assertGreater(long["learners"][0]["steps"], 3 * short["learners"][0]["steps"])
        # One initial copy per learner made (4 learners and the evaluator), two evaluations
        # (the final model, and the initial one a diverged run ends above): the same however
        # many syncs the run has.
        self.assertEqual(short_copies, long_copies)
        self.assertEqual(long_copies, {"initial": 5, "eval": 2, "grads": 0, "d2h": 0, "h2d": 0,
                                       "d2h_bytes": 0, "h2d_bytes": 0, "grads_d2h": 0,
                                       "grads_h2d": 0, "island_shares": 0, "island_bytes": 0,
                                       "shard_gathers": 0, "shard_gather_bytes": 0,
                                       "shard_writes": 0})

    def test_own_data_learner(self):
        r = diloco.simulate(learner=bad_learners.own_data, set=SMALL)
        self.assertEqual(r["failed_learners"], [])
        self.assertEqual(r["tokens"] % 32, 0)
        self.assertLess(r["eval_loss"], 2.7)  # ln 16 = 2.77: it learned something


def twin_recorder():
    """mlp_twin's factory, keeping each context it was called with (for a fresh module)."""
    contexts = []

    def make(ctx):
        contexts.append(ctx)
        return mlp_twin.make_learner(ctx)
    return make, contexts


def evaluate_module(module, data):
    """The runtime's evaluation: mean cross-entropy over the evaluation set, in its batches."""
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in data.eval_batches(256):
            total += float(torch.nn.functional.cross_entropy(module(x), y)) * len(y)
            count += len(y)
    return total / count


class ModelOut(unittest.TestCase):
    def test_the_returned_model_in_a_fresh_module_evaluates_to_the_runs_loss(self):
        make, contexts = twin_recorder()
        r = diloco.simulate(learner=make, set=SMALL, progress=False)
        model = r["model"]
        self.assertIsInstance(model["embedding"], torch.Tensor)
        fresh = mlp_twin.MlpTwin(*mlp_twin.model_shape(contexts[0].model))
        fresh.load_state_dict(model)  # strict: every parameter, each in its shape
        loss = evaluate_module(fresh, diloco.open_data(set=SMALL))
        self.assertAlmostEqual(loss, r["eval_loss"], delta=1e-6 * r["eval_loss"])
        # Not the initial model: training moved it.
        start = mlp_twin.MlpTwin(*mlp_twin.model_shape(contexts[0].model))
        mlp_twin.load_initial(start, diloco.builtin_initial_params(contexts[0]))
        self.assertGreater(evaluate_module(start, diloco.open_data(set=SMALL)), loss + 0.1)

    def test_save_model_writes_the_same_model_as_safetensors(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("m.safetensors", "m.dlmd"):
                path = os.path.join(d, name)
                r = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, progress=False,
                                    save_model=path)
                saved = diloco.load_model(path)
                self.assertEqual(list(saved), list(r["model"]))
                for key, value in r["model"].items():
                    self.assertTrue(torch.equal(saved[key], value), key)

    def test_load_model_reshapes_to_a_module_and_names_what_is_missing(self):
        make, contexts = twin_recorder()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.safetensors")
            diloco.simulate(learner=make, set=SMALL, progress=False, save_model=path)
            module = mlp_twin.MlpTwin(*mlp_twin.model_shape(contexts[0].model))
            module.load_state_dict(diloco.load_model(path, like=module))
            other = torch.nn.Linear(3, 3)
            with self.assertRaises(ValueError) as e:
                diloco.load_model(path, like=other)
            self.assertIn("no tensor weight", str(e.exception))
            with open(path, "r+b") as f:
                f.write(b"\xff" * 8)  # a header length beyond the file
            with self.assertRaises(ValueError) as e:
                diloco.load_model(path)
            self.assertIn("header length", str(e.exception))

    def test_options_of_the_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            r = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, progress=False,
                                run_dir=os.path.join(d, "run"), eval_every=20, compare="dp")
            self.assertTrue(os.path.exists(os.path.join(d, "run", "summary.json")))
            self.assertIn("dp", r["baselines"])
            self.assertGreater(r["baselines"]["dp"]["tokens"], 0)
            with self.assertRaises(diloco.RunError) as e:
                diloco.simulate(set=SMALL, progress=False, no_such_option=3)
            self.assertIn("no-such-option", str(e.exception))
            self.assertEqual(e.exception.code, 2)

    def test_user_lr_scheduler_steps_after_every_optimizer_step(self):
        steps = []

        def make(ctx):
            learner = mlp_twin.make_learner(ctx)
            sched = torch.optim.lr_scheduler.LambdaLR(
                learner.optimizer, lambda n: (steps.append(n), 0.5 ** (n // 50))[1])
            return diloco.Learner(learner.module, learner.optimizer, loss=learner.loss,
                                  embeddings=["embedding"], scheduler=sched)
        r = diloco.simulate(learner=make, set=SMALL, progress=False)
        # LambdaLR calls its lambda once at construction (n = 0) and once per step after it.
        made = sum(1 for n in steps if n == 0)
        self.assertEqual(len(steps) - made, sum(l["steps"] for l in r["learners"]))
        with self.assertRaises(diloco.LearnerError):
            diloco.Learner(torch.nn.Linear(2, 2), None, schedule_lr=True, scheduler=object())

    def test_versions_name_what_a_crash_report_needs(self):
        v = diloco.versions()
        self.assertEqual(v["torch"], torch.__version__)
        self.assertIn("__pybind11_internals_v", v["pybind11_internals"])
        self.assertEqual(v["python_built_for"].split(".")[:2], v["python"].split(".")[:2])

    def test_every_learner_failing_raises(self):
        with self.assertRaises(diloco.RunError) as e:
            diloco.simulate(learner=bad_learners.nan_everywhere, set=SMALL, progress=False)
        self.assertEqual(len(e.exception.result["failed_learners"]), 4)

    def test_own_data_without_evaluate_says_why_there_is_no_evaluation(self):
        r = diloco.simulate(learner=bad_learners.own_data_no_eval, set=SMALL, progress=False)
        self.assertTrue(math.isnan(r["eval_loss"]))
        self.assertIn("no evaluation", r["eval_error"])
        self.assertIn("evaluate=", r["eval_error"])
        self.assertIsNone(r["entropy_rate"])  # its data is its own: no known floor


class Mirror(unittest.TestCase):
    """The device mirror (a module on a GPU), exercised with a CPU module in storage of its
    own: the same code, the copies counted."""

    def test_the_mirror_gives_the_same_run_bit_for_bit_with_the_copies_counted(self):
        shared = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, threads=1,
                                 progress=False)

        def mirrored(ctx):
            learner = mlp_twin.make_learner(ctx)
            learner.mirror = True
            learner.ahead = False
            return learner
        before = diloco.copy_counts()
        r = diloco.simulate(learner=mirrored, set=SMALL, threads=1, progress=False)
        after = diloco.copy_counts()
        copies = {k: after[k] - before[k] for k in after}
        self.assertEqual(r["trace_hash"], shared["trace_hash"])
        self.assertEqual(r["eval_loss"], shared["eval_loss"])
        # Per sync: the fragment's tensors device-to-host when its outer gradient is measured,
        # and host-to-device once the merged fragment is mixed in, never the whole model.
        self.assertGreater(copies["d2h"], 0)
        self.assertGreater(copies["h2d"], 0)
        self.assertEqual(copies["grads_d2h"] + copies["grads_h2d"], 0)  # not data parallel

    def test_copies_per_sync_are_one_fragment_each_way(self):
        # H = 64 steps between two syncs of a fragment, 4 fragments: a quarter of the model is
        # synced every 16 steps. Each sync copies its fragment device-to-host when the outer
        # gradient is measured and host-to-device once after the merge: per step of a learner,
        # 1/64 of the model each way, not the model. A merge that keeps a share of the local
        # values (alpha > 0) reads them first: a second device-to-host copy of the fragment
        # (the device moved in between, tau steps), 2/64. At alpha 0 (the default) the merge
        # adopts the global values and reads nothing.
        def mirrored(ctx):
            learner = mlp_twin.make_learner(ctx)
            learner.mirror = True
            return learner

        for alpha, want_d2h in ((0.0, 1 / 64), (0.25, 2 / 64)):
            sets = {**SMALL, "fragments": 4, "period_steps": 64, "alpha": alpha}
            runs = {}
            for budget in (64000, 128000):
                before = diloco.copy_counts()
                r = diloco.simulate(learner=mirrored, set={**sets, "token_budget": budget},
                                    threads=1, progress=False)
                after = diloco.copy_counts()
                runs[budget] = (r, {k: after[k] - before[k] for k in after})
            (short, c1), (long, c2) = runs[64000], runs[128000]
            model_bytes = 4 * sum(v.numel() for v in long["model"].values())
            steps = lambda r: sum(l["steps"] for l in r["learners"])
            extra_steps = steps(long) - steps(short)  # the run's ends cancel out
            d2h = (c2["d2h_bytes"] - c1["d2h_bytes"]) / model_bytes / extra_steps
            h2d = (c2["h2d_bytes"] - c1["h2d_bytes"]) / model_bytes / extra_steps
            with self.subTest(alpha=alpha):
                self.assertAlmostEqual(d2h, want_d2h, delta=0.15 * want_d2h)
                self.assertAlmostEqual(h2d, 1 / 64, delta=0.15 * 1 / 64)

    def test_data_parallel_copies_the_gradients_each_way_per_step(self):
        def mirrored(ctx):
            learner = mlp_twin.make_learner(ctx)
            learner.mirror = True
            return learner
        shared = diloco.simulate(learner=mlp_twin.make_learner, set={**SMALL, "mode": "dp"},
                                 threads=1, progress=False)
        before = diloco.copy_counts()
        r = diloco.simulate(learner=mirrored, set={**SMALL, "mode": "dp"}, threads=1,
                            progress=False)
        after = diloco.copy_counts()
        self.assertEqual(r["trace_hash"], shared["trace_hash"])
        steps = sum(l["steps"] for l in r["learners"])
        d2h = after["grads_d2h"] - before["grads_d2h"]
        h2d = after["grads_h2d"] - before["grads_h2d"]
        self.assertEqual(h2d, steps)  # one per optimizer step
        # One per gradient computed: each step's, and at most one more per learner whose last
        # round the run's end cut off before it was applied.
        self.assertGreaterEqual(d2h, steps)
        self.assertLessEqual(d2h, steps + len(r["learners"]))

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device on this machine")
    def test_a_cuda_module_trains_through_the_mirror(self):
        def on_gpu(ctx):
            learner = mlp_twin.make_learner(ctx)
            learner.module.cuda()
            learner.optimizer = torch.optim.AdamW(learner.module.parameters(),
                                                  lr=ctx.inner["lr"])
            model = learner.module
            learner.loss = lambda x, y: torch.nn.functional.cross_entropy(
                model(x.cuda()), y.cuda())
            return learner
        r = diloco.simulate(learner=on_gpu, set=SMALL, threads=1, progress=False)
        self.assertLess(r["eval_loss"], 5.0)


def _torch2_step_missing():
    """Why this torch cannot run a compiled, autocast, fused step here ("" if it can)."""
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0 or later (this is torch %s)" % torch.__version__
    # Inductor compiles its CPU kernels against torch's C++ headers: Debian's python3-torch
    # ships them apart (libtorch-dev).
    from torch.utils import cpp_extension
    if not any(os.path.exists(os.path.join(d, "ATen", "NumericUtils.h"))
               for d in cpp_extension.include_paths()):
        return ("torch.compile's CPU backend needs torch's C++ headers (ATen), which this torch "
                "%s lacks (on Debian: libtorch-dev)" % torch.__version__)
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], fused=True)
    except (RuntimeError, TypeError, ValueError) as e:
        return "AdamW(fused=True) on the CPU: %s (torch %s)" % (e, torch.__version__)
    return ""


@unittest.skipIf(_torch2_step_missing(), _torch2_step_missing())
class Torch2Step(unittest.TestCase):
    """What PyTorch 2.x users put inside a step runs as their code: torch.compile, bf16
    autocast, AdamW's fused kernel, with the steps computed ahead on the run's threads."""

    def test_a_compiled_module_trains_as_the_module_does(self):
        plain = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, threads=2,
                                progress=False)
        compiled = diloco.simulate(learner=mlp_twin.make_compiled_learner, set=SMALL,
                                   threads=2, progress=False)
        # The compiled graph reads the parameters the runtime writes at each merge: were it
        # reading copies, the learners would train away from the global model.
        self.assertAlmostEqual(compiled["eval_loss"], plain["eval_loss"],
                               delta=1e-4 * plain["eval_loss"])
        self.assertEqual(compiled["events"], plain["events"])
        for name, value in plain["model"].items():
            self.assertLess(float((compiled["model"][name] - value).abs().max()), 1e-4, name)

    def test_bf16_autocast_and_fused_adamw_train_and_repeat(self):
        def make(ctx):
            return mlp_twin.make_compiled_learner(ctx, bf16=True, fused=True)

        plain = diloco.simulate(learner=mlp_twin.make_learner, set=SMALL, progress=False)
        a = diloco.simulate(learner=make, set=SMALL, threads=2, progress=False)
        b = diloco.simulate(learner=make, set=SMALL, threads=1, progress=False)
        self.assertTrue(math.isfinite(a["eval_loss"]))
        # bf16 products round to 8 bits of mantissa: the same training, not the same bits.
        self.assertAlmostEqual(a["eval_loss"], plain["eval_loss"], delta=0.02 * plain["eval_loss"])
        self.assertNotEqual(a["trace_hash"], plain["trace_hash"])
        # Still a function of (config, seed), whatever the thread count.
        self.assertEqual(a["trace_hash"], b["trace_hash"])
        self.assertEqual(a["eval_loss"], b["eval_loss"])


class BadLearners(unittest.TestCase):
    def assert_refused(self, factory, *needles):
        with self.assertRaises(RuntimeError) as e:
            diloco.simulate(learner=factory, set=SMALL)
        for needle in needles:
            self.assertIn(needle, str(e.exception))

    def test_an_evaluation_that_is_not_a_number_is_no_result(self):
        self.assert_refused(bad_learners.eval_nan, "does not evaluate to a finite loss",
                            "exit 3")
        self.assert_refused(bad_learners.eval_text, "does not evaluate to a finite loss",
                            "could not convert string to float")

    def test_first_factory_raises(self):
        # Learner 0's model is the run's layout: without it there is no run.
        self.assert_refused(bad_learners.raises_first, "learner 0", "RuntimeError",
                            "no GPU named cuda:7", "bad_learners.py")

    def test_factory_returns_the_wrong_thing(self):
        self.assert_refused(bad_learners.wrong_return, "learner 0", "returned dict",
                            "diloco.Learner")

    def test_not_a_module(self):
        self.assert_refused(bad_learners.not_a_module, "learner 0", "not a torch.nn.Module")

    def test_float64_parameters(self):
        self.assert_refused(bad_learners.float64, "learner 0", "torch.float64", "float32")

    def test_another_factory_raises(self):
        self.assert_learner_failed(bad_learners.raises, 1, "model could not be made",
                                   "no GPU named cuda:7", "bad_learners.py")

    def test_learners_that_build_different_models(self):
        self.assert_learner_failed(bad_learners.different_models, 1, "embed.weight",
                                   "[256, 4]", "[256, 8]")

    def assert_learner_failed(self, factory, learner, *needles, threads=None):
        # A learner that failed fails the call (diloco.RunError), with the run's result in it.
        with self.assertRaises(diloco.RunError) as e:
            diloco.simulate(learner=factory, set=SMALL, threads=threads)
        self.assertEqual(e.exception.code, 3)
        self.assertIn(f"learner {learner} failed", str(e.exception))
        r = e.exception.result
        self.assertIsNotNone(r)
        failed = {l: what for l, _, what in r["failed_learners"]}
        self.assertEqual(list(failed), [learner], r["failed_learners"])
        for needle in needles:
            self.assertIn(needle, failed[learner])
        steps = {l["learner"]: l["steps"] for l in r["learners"]}
        others = [s for l, s in steps.items() if l != learner]
        self.assertTrue(all(s > 100 for s in others), steps)  # its peers went on
        self.assertEqual(r["violations"], [])
        return r

    def test_nan_loss(self):
        r = self.assert_learner_failed(bad_learners.nan_loss, 2, "NaN")
        self.assertTrue(r["eval_loss"] < 10)  # nothing non-finite was merged

    def test_parameter_changes_shape(self):
        self.assert_learner_failed(bad_learners.reshapes, 1, "out.bias", "changed shape",
                                   "[256]", "[3]")

    def test_parameter_changes_dtype(self):
        self.assert_learner_failed(bad_learners.retypes, 3, "out.bias", "changed dtype",
                                   "torch.float64")

    def test_parameter_replaced(self):
        self.assert_learner_failed(bad_learners.replaces, 2, "out.weight", "was replaced")

    def test_step_token_counts_out_of_range(self):
        # Issue 50: a negative count gave four pybind11 cast errors, 2^62 a run that never ended.
        self.assert_learner_failed(bad_learners.negative_tokens, 2, "its step returned -5",
                                   "expected a whole number in [0, 2^40]")
        self.assert_learner_failed(bad_learners.huge_tokens, 1,
                                   f"its step returned {2**62}")

    def test_step_raises(self):
        self.assert_learner_failed(bad_learners.step_raises, 3, "ValueError",
                                   "batch has the wrong vocabulary")

    def test_optimizer_raises_while_steps_go_ahead(self):
        # Its update runs in its turn (a user's optimizer class): the error names its line.
        r = self.assert_learner_failed(bad_learners.optimizer_raises, 3, "ValueError",
                                       "lost its moments", "bad_learners.py", threads=2)
        self.assertGreater(r["steps_ahead"]["taken"], 0, r["steps_ahead"])

    def test_loss_not_a_scalar(self):
        r = diloco.simulate(learner=bad_learners.vector_loss, set=SMALL, check=False)
        whats = [what for _, _, what in r["failed_learners"]]
        self.assertEqual(len(whats), 4)
        self.assertIn("expected a scalar tensor", whats[0])
        self.assertIn("of shape [64]", whats[0])
        self.assertIn("expected a scalar tensor", r["eval_error"])


if __name__ == "__main__":
    unittest.main()


class Islands(unittest.TestCase):
    """The parts of an island that need no second process (tests/cli/python_island_cli.sh runs
    islands of ranks)."""

    def test_evaluation_shares_cover_the_set_in_equal_batch_counts(self):
        from diloco import _island
        for rows, world in ((1000, 2), (1001, 3), (7, 4), (4096, 2)):
            x = torch.arange(rows * 3).reshape(rows, 3)
            y = torch.arange(rows)
            shares = [_island.eval_share(x, y, 256, r, world) for r in range(world)]
            # Every rank runs its loss as often (a DDP forward may be a collective).
            self.assertEqual(len({len(s) for s in shares}), 1, (rows, world))
            seen = torch.cat([b[1] for s in shares for b in s])
            self.assertTrue(torch.equal(seen, y), (rows, world))
            for s in shares:
                for bx, by in s:
                    self.assertTrue(torch.equal(bx[:, 0] // 3, by))

    def test_island_records_for_replay(self):
        from diloco import _island
        with tempfile.TemporaryDirectory() as d:
            isl = _island.Island(0, 2, 0, 60)
            isl.tape_dir = d
            ctx = diloco.LearnerContext(1, 2, 1, 3, None, {}, {}, 64, 8, "")
            isl.record(ctx, True, False)
            found = _island.load_replayed([d])
            self.assertEqual(found, [(1, 3, 2, True)])
            self.assertEqual(_island.replayed(ctx), {"world": 2, "ddp": True, "own_data": False,
                                                     "sharded": False})
            with open(os.path.join(d, "learner-0.0.island.json"), "w") as f:
                f.write("{not json")
            with self.assertRaises(SystemExit) as e:
                _island.load_replayed([d])
            self.assertIn("learner-0.0.island.json: not an island record", str(e.exception))
        _island._REPLAYED.clear()

    def test_sharding_that_cannot_be_trained_is_refused_by_name(self):
        # fully_shard's own cases are in test_sharded (torch 2.4 and later); these need none.
        from diloco import _sharded

        class DTensor(torch.Tensor):  # stands for torch.distributed's (its type name is read)
            pass

        class FullyShardedDataParallel(torch.nn.Linear):  # FSDP1's wrapper, by its name
            pass

        sharded = [("w", torch.zeros(2).as_subclass(DTensor))]
        self.assertIn("this process is not an island's rank: start the island with torchrun",
                      _sharded.refusal(torch.nn.Linear(2, 2), sharded, None))
        self.assertIn("FullyShardedDataParallel (FSDP1)",
                      _sharded.refusal(FullyShardedDataParallel(2, 2), [], None))
        plain = list(torch.nn.Linear(2, 2).named_parameters())
        self.assertEqual(_sharded.refusal(torch.nn.Linear(2, 2), plain, None), "")
        self.assertIn("some parameters are sharded and others not (b is a plain tensor)",
                      _sharded.refusal(torch.nn.Linear(2, 2), sharded + [("b", torch.zeros(1))],
                                       None))

    def test_ranks_in_a_simulation(self):
        # An island of 2 ranks in a simulation trains twice the tokens per step.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.yaml")
            with open(path, "w") as f:
                f.write("learners:\n  - {ranks: 2}\n  - {}\ntoken_budget: 20000\n"
                        "fragments: 2\nperiod_steps: 8\nbatch: 16\n")
            r = diloco.simulate(learner=bad_learners.good, cluster=path)
        per_step = [l["tokens"] / l["steps"] for l in r["learners"]]
        self.assertEqual(per_step, [32, 16])

    def test_replay_refuses_an_island_with_its_own_data(self):
        from diloco import _island, _learner
        _island._REPLAYED[(0, 0)] = {"world": 2, "ddp": False, "own_data": True}
        try:
            ctx = diloco.LearnerContext(0, 1, 1, 0, None, {"lr": 1e-3}, {}, 64, 8, "")
            with self.assertRaises(diloco.LearnerError) as e:
                _learner.Runner(bad_learners.own_data, ctx, 1)
            self.assertIn("ran as an island of 2 ranks drawing its own data", str(e.exception))
            # The same learner on the runtime's data is computed rank by rank instead.
            r = _learner.Runner(bad_learners.good, ctx, 1)
            self.assertEqual(r.emulated["world"], 2)
        finally:
            _island._REPLAYED.clear()

    def test_replay_refuses_a_sharded_island(self):
        from diloco import _island, _learner
        _island._REPLAYED[(0, 0)] = {"world": 2, "ddp": False, "own_data": False,
                                     "sharded": True}
        try:
            ctx = diloco.LearnerContext(0, 1, 1, 0, None, {"lr": 1e-3}, {}, 64, 8, "")
            with self.assertRaises(diloco.LearnerError) as e:
                _learner.Runner(bad_learners.good, ctx, 1)
            self.assertIn("ran as an island of 2 ranks with its parameters sharded (fully_shard): "
                          "replay cannot compute", str(e.exception))
        finally:
            _island._REPLAYED.clear()
