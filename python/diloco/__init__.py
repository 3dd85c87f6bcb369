"""diloco: Decoupled DiLoCo with your own PyTorch model as the learner.

    import diloco
    result = diloco.simulate("cluster.yaml", learner=make_learner, set={"learners": 4})

The learners run your module; the syncer shards, fragment scheduler, chaos and snapshots are
the runtime's own actors, exactly as in `diloco simulate`. See docs/python.md.
"""

import os
import sys

from . import _diloco
from . import _learner
from . import _blas
from ._context import Data, LearnerContext
from ._learner import Learner, LearnerError

_blas.fit_kernels()  # torch is loaded (by _learner); no learner computes yet

__all__ = ["simulate", "learner_compute", "open_data", "Learner", "LearnerContext", "Data", "LearnerError", "config_yaml",
           "builtin_initial_params", "copy_counts", "main"]


def _sets(values):
    if values is None:
        return []
    items = values.items() if isinstance(values, dict) else values
    out = []
    for item in items:
        if isinstance(item, str):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"set: '{item}' is not KEY=VALUE")
        else:
            key, value = item
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((str(key), str(value)))
    return out


def _cluster(cluster):
    if cluster is None:
        return ""
    path = os.fspath(cluster)
    if not os.path.exists(path):
        raise FileNotFoundError(f"cluster file {path} does not exist")
    return path


def simulate(cluster=None, learner=None, set=None, torch_threads=1, progress=True,
             threads=None):
    """Runs a cluster in one process on virtual time, deterministically.

    cluster: a cluster YAML file (None: the built-in default cluster).
    learner: a factory, called as learner(ctx) with a diloco.LearnerContext, returning a
        diloco.Learner (or a (module, optimizer, step) tuple); None: the built-in MLP.
    set: overrides of cluster keys, {"learners": 4, "seed": 7} or ["learners=4", ...].
    torch_threads: torch's (and its BLAS's) threads during the run; the default, 1, keeps
        results bit-identical across machines with different core counts.
    progress: a progress line on stderr (simulated time, rate, time left), as the command
        line shows it.
    threads: threads on which learners compute their next step ahead (None: the machine's
        cores): the built-in learners, and PyTorch learners that allow it
        (diloco.Learner(..., ahead=True)). The run is the same, trace_hash included, for any
        number; the dict's steps_ahead counts the steps taken ahead and put back.

    Returns a dict: eval_loss, trace_hash, seed, threads, events, tokens, bytes_per_token,
    goodput, failed_learners [(learner, step, what)], learners [...], violations [...], blas
    (the kernels torch's matrix products ran: they decide the last bits), and more.
    The same config and seed give the same trace_hash.
    """
    from ._threads import pinned
    with pinned(torch_threads):
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a whole number of at least 1, not {threads!r}")
        drew = _learner.AHEAD["drew"]
        if progress:
            _blas.tell_once(sys.stderr)
        r = _diloco.simulate(_cluster(cluster), _sets(set), learner, progress, threads or 0)
        r["steps_ahead"]["drew"] = _learner.AHEAD["drew"] - drew
        r["blas"] = _blas.describe()
        return r


def config_yaml(cluster=None, set=None):
    """The resolved configuration (defaults, file, overrides) as YAML text."""
    return _diloco.config_yaml(_cluster(cluster), _sets(set))


def builtin_initial_params(ctx):
    """The built-in MLP's initial parameters for a learner's run (its ctx.model and ctx.seed):
    {name: 2-D float32 array}, rows x cols as in the runtime's layout."""
    m = ctx.model
    model = _diloco.ModelConfig(m["vocab"], m["context"], m["embed_dim"], m["hidden"],
                                m["hidden_layers"])
    return _diloco.builtin_initial_params(model, ctx.seed)


def learner_compute(cluster=None, learner=None, set=None, index=0):
    """One learner's computation outside any run, stepped by hand: .step(schedule_step) ->
    {loss, tokens, grad_norm, lr}, .evaluate(), .params() -> {name: array}, .describe().
    learner=None is the built-in MLP: the same interface the runtime's learners drive."""
    return _diloco.Compute(_cluster(cluster), _sets(set), learner, index)


def open_data(cluster=None, set=None, index=0):
    """Learner `index`'s part of a run's data, as the runtime feeds it (a diloco.Data): for a
    bare training loop over the same batches."""
    return Data(_diloco.open_data(_cluster(cluster), _sets(set), index))


def copy_counts():
    """Model copies the Python layer made so far: initial (a learner's buffer set to the
    initial model), eval (a model copied to the evaluator), grads (gradients moved back into
    the runtime's buffer). Syncs copy nothing."""
    return {**_diloco.copy_counts(), "grads": _learner.COPIES["grads"]}


def main(argv=None):
    """`python3 -m diloco`: the diloco command line, with --learner MODULE:FUNCTION."""
    from ._cli import main as cli_main
    return cli_main(argv)
