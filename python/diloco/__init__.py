"""diloco: Decoupled DiLoCo with your own PyTorch model as the learner.

    import diloco
    result = diloco.simulate("cluster.yaml", learner=make_learner, set={"learners": 4})

The learners run your module; the syncer shards, fragment scheduler, chaos and snapshots are
the runtime's own actors, exactly as in `diloco simulate`. See docs/python.md.
"""

import contextlib
import os
import sys
import tempfile

from . import _versions

_versions.check()  # before anything imports torch: a clear message if it is missing or too old

from . import _diloco
from . import _learner
from . import _blas
from ._context import Data, LearnerContext
from ._learner import Learner, LearnerError

_blas.fit_kernels()  # torch is loaded (by _learner); no learner computes yet

__all__ = ["simulate", "load_model", "RunError", "versions", "learner_compute", "open_data", "Learner",
           "LearnerContext", "Data", "LearnerError", "config_yaml", "builtin_initial_params",
           "copy_counts", "main"]


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


class RunError(RuntimeError):
    """A run that did not give a result to trust: a learner failed (its code raised, it
    diverged, or it built another model than learner 0), an invariant broke, or the command
    refused its input. `result` is what the run returned (None if it did not run), `code` the
    exit code `python3 -m diloco simulate` would have ended with."""

    def __init__(self, message, code, result=None):
        super().__init__(message)
        self.code = code
        self.result = result


def _flag_args(options):
    """simulate()'s keyword options as command-line flags: eval_every=100 -> --eval-every 100,
    tolerate_divergence=True -> --tolerate-divergence, compare=["dp", "diloco"] ->
    --compare dp,diloco. False and None leave a flag out."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


@contextlib.contextmanager
def _quiet():
    """The process's stdout and stderr (the C++ side's too) to a scratch file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as scratch:
        try:
            os.dup2(scratch.fileno(), 1)
            os.dup2(scratch.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _as_torch(model):
    import collections
    import torch
    if model is None:
        return None
    return collections.OrderedDict((name, torch.from_numpy(a)) for name, a in model.items())


def simulate(cluster=None, learner=None, set=None, torch_threads=1, progress=True,
             threads=None, check=True, **options):
    """Runs a cluster in one process on virtual time, deterministically: `diloco simulate`
    with your learner.

    cluster: a cluster YAML file (None: the built-in default cluster).
    learner: a factory, called as learner(ctx) with a diloco.LearnerContext, returning a
        diloco.Learner (or a (module, optimizer, step) tuple); None: the built-in MLP.
    set: overrides of cluster keys, {"learners": 4, "seed": 7} or ["learners=4", ...].
    torch_threads: torch's (and its BLAS's) threads during the run; the default, 1, keeps
        results bit-identical across machines with different core counts.
    progress: print what the command line prints (the header, a progress line with rate and
        time left, the results); False runs quietly.
    threads: threads on which learners compute their next step ahead (None: the machine's
        cores): the built-in learners, and PyTorch learners that allow it
        (diloco.Learner(..., ahead=True)). The run is the same, trace_hash included, for any
        number; the dict's steps_ahead counts the steps taken ahead and put back.
    check: raise diloco.RunError when the run gives no result to trust (a learner failed or
        diverged, an invariant broke, bad input); False returns the result dict anyway
        (failed_learners and violations say what happened).
    options: every other option of `diloco simulate --help`, with underscores for dashes:
        eval_every=100 (default here 0: the final model only), run_dir="runs/a", compare="dp,diloco", tape="run.tape",
        resume="snaps", snapshot_dir="snaps", snapshot_every=100, save_model="m.safetensors",
        failures="2@300+100", seed=7, metrics_port=9464, ...

    Returns the main run's dict: eval_loss, trace_hash, seed, events, tokens,
    bytes_per_token, goodput, failed_learners [(learner, step, what)], learners [...],
    violations [...], entropy_rate (None unless the data's is known), blas (the kernels
    torch's matrix products ran: they decide the last bits), model (the final global model:
    {name: torch.Tensor}, the state_dict of the learner's module's parameters, for
    module.load_state_dict), and, with compare=..., baselines {system: dict}. The same config
    and seed give the same trace_hash.
    """
    from ._threads import pinned
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a whole number of at least 1, not {threads!r}")
    args = []
    if cluster is not None:
        args += ["--cluster", _cluster(cluster)]
    for key, value in _sets(set):
        args += ["--set", f"{key}={value}"]
    if threads is not None:
        args += ["--threads", str(threads)]
    # The final model's evaluation only, unless asked: ten along the run (the command line's
    # default) cost a PyTorch run several evaluations of the global model.
    options.setdefault("eval_every", 0)
    args += _flag_args(options)
    with pinned(torch_threads):
        drew = _learner.AHEAD["drew"]
        if progress:
            _blas.tell_once(sys.stderr)
            rc, systems, error, ahead = _diloco.simulate_command(args, learner)
        else:
            with _quiet():
                rc, systems, error, ahead = _diloco.simulate_command(args, learner)
        ahead["drew"] = _learner.AHEAD["drew"] - drew
    if not systems:
        if rc == 0:  # stopped after a snapshot as asked (stop_after_snapshot)
            return {"interrupted": True, "steps_ahead": ahead, "blas": _blas.describe()}
        raise RunError(error or f"diloco simulate failed (exit {rc})", rc)
    main = systems[0]
    main["steps_ahead"] = ahead
    main["blas"] = _blas.describe()
    main["threads"] = threads if threads is not None else (os.cpu_count() or 1)
    main["model"] = _as_torch(main["model"])
    main["baselines"] = {r["system"]: r for r in systems[1:]}
    for r in systems[1:]:
        r["model"] = _as_torch(r["model"])
    if check and rc != 0:
        problems = [f"learner {l} failed at step {step}: {what}"
                    for l, step, what in main["failed_learners"]]
        problems += [f"invariant violated: {v}" for v in main["violations"]]
        if error:
            problems.append(error)
        raise RunError("; ".join(problems) or f"diloco simulate failed (exit {rc})", rc, main)
    return main


def load_model(path, like=None):
    """A model file written by --save-model / simulate(save_model=...) (safetensors), as
    {name: torch.Tensor} in the module's own shapes: module.load_state_dict(diloco.load_model(
    path), strict=False) (strict=True too when the module has no buffers).

    like: a module whose parameter shapes the tensors take (a deployed run's leader, which
    knows the layout but not the module, saves them as rows x columns); its parameters must
    all be in the file, each with as many values."""
    import collections
    import json
    import struct
    import numpy as np
    import torch
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its header)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} does not fit the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    body = memoryview(data)[8 + n:]
    out = collections.OrderedDict()
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    for name, v in entries:
        if v.get("dtype") != "F32":
            raise ValueError(f"{path}: tensor {name} is {v.get('dtype')}, not F32")
        begin, end = v["data_offsets"]
        count = 1
        for d in v["shape"]:
            count *= d
        if not (0 <= begin <= end <= len(body)) or end - begin != 4 * count:
            raise ValueError(f"{path}: tensor {name}: data_offsets {v['data_offsets']} do not "
                             f"hold its shape {v['shape']}")
        a = np.frombuffer(body[begin:end], dtype="<f4").reshape(v["shape"]).copy()
        out[name] = torch.from_numpy(a)
    if like is not None:
        for name, p in like.named_parameters():
            if name not in out:
                raise ValueError(f"{path}: no tensor {name} (the module's parameter)")
            if out[name].numel() != p.numel():
                raise ValueError(f"{path}: tensor {name} has {out[name].numel()} values, the "
                                 f"module's parameter {list(p.shape)} has {p.numel()}")
            out[name] = out[name].reshape(p.shape)
    return out


def versions():
    """What this process runs: Python, torch, numpy, the BLAS under torch, and what the
    extension was built with (pybind11 and its internals ABI, the compiler). The lines to put
    in a crash report."""
    import platform
    import numpy
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "blas": _blas.describe(), **_diloco.build_info()}


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
    the runtime's buffer). Syncs of a CPU module copy nothing. The device mirror's: d2h and h2d
    (ranges of the parameters copied device-to-host and back; d2h_bytes, h2d_bytes their bytes),
    grads_d2h and grads_h2d (data parallel: the gradient buffer each way per step)."""
    return {**_diloco.copy_counts(), **_learner.COPIES}


def main(argv=None):
    """`python3 -m diloco`: the diloco command line, with --learner MODULE:FUNCTION."""
    from ._cli import main as cli_main
    return cli_main(argv)
