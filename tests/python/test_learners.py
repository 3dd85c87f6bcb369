"""PyTorch learners in the runtime: the cross-implementation oracle, determinism, the buffer
sharing, and the errors a bad learner gets (run by ctest as python_learners)."""

import contextlib
import unittest

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
        # One initial copy per learner made (4 learners and the evaluator), one evaluation:
        # the same however many syncs the run has.
        self.assertEqual(short_copies, long_copies)
        self.assertEqual(long_copies, {"initial": 5, "eval": 1, "grads": 0})

    def test_own_data_learner(self):
        r = diloco.simulate(learner=bad_learners.own_data, set=SMALL)
        self.assertEqual(r["failed_learners"], [])
        self.assertEqual(r["tokens"] % 32, 0)
        self.assertLess(r["eval_loss"], 2.7)  # ln 16 = 2.77: it learned something


class BadLearners(unittest.TestCase):
    def assert_refused(self, factory, *needles):
        with self.assertRaises(RuntimeError) as e:
            diloco.simulate(learner=factory, set=SMALL)
        for needle in needles:
            self.assertIn(needle, str(e.exception))

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
        r = diloco.simulate(learner=factory, set=SMALL, threads=threads)
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

    def test_step_raises(self):
        self.assert_learner_failed(bad_learners.step_raises, 3, "ValueError",
                                   "batch has the wrong vocabulary")

    def test_optimizer_raises_while_steps_go_ahead(self):
        # Its update runs in its turn (a user's optimizer class): the error names its line.
        r = self.assert_learner_failed(bad_learners.optimizer_raises, 3, "ValueError",
                                       "lost its moments", "bad_learners.py", threads=2)
        self.assertGreater(r["steps_ahead"]["taken"], 0, r["steps_ahead"])

    def test_loss_not_a_scalar(self):
        r = diloco.simulate(learner=bad_learners.vector_loss, set=SMALL)
        whats = [what for _, _, what in r["failed_learners"]]
        self.assertEqual(len(whats), 4)
        self.assertIn("expected a scalar tensor", whats[0])
        self.assertIn("of shape [64]", whats[0])
        self.assertIn("expected a scalar tensor", r["eval_error"])


if __name__ == "__main__":
    unittest.main()
