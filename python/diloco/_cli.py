"""`python3 -m diloco COMMAND ... [--learner MODULE:FUNCTION]`: the diloco command line (the
same commands and options as the `diloco` executable), with the learners running the user's
PyTorch factory instead of the built-in MLP."""

import importlib
import os
import sys


def load_factory(spec):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"diloco: --learner {spec}: expected MODULE:FUNCTION "
                         "(e.g. mypkg.model:make_learner)")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"diloco: --learner {spec}: cannot import {module_name}: {e}")
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise SystemExit(f"diloco: --learner {spec}: {module_name} has no {attr}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise SystemExit(f"diloco: --learner {spec}: {attr} is not callable")
    return factory


USAGE_EXPORT = """usage: python3 -m diloco export-model --learner MODULE:FUNCTION -o FILE
                                   [--cluster FILE] [--set KEY=VALUE]...
Writes the learner's layout (tensor names, shapes, kinds) and the run's initial model to FILE.
A deployed run names it as model.file in its cluster file: the leader and syncer nodes, which
do not run PyTorch, take the fragments, codecs and initial global model from it."""


def export_model(argv, factory, spec):
    cluster, sets, out = "", [], None
    i = 0
    while i < len(argv):
        a = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("-h", "--help"):
            print(USAGE_EXPORT)
            return 0
        if a in ("-o", "--output", "--cluster", "--set") and value is None:
            print(f"diloco export-model: {a} needs a value\n{USAGE_EXPORT}", file=sys.stderr)
            return 2
        if a in ("-o", "--output"):
            out = value
        elif a == "--cluster":
            cluster = value
        elif a == "--set":
            key, sep, val = value.partition("=")
            if not sep or not key:
                print(f"diloco export-model: --set {value}: expected KEY=VALUE", file=sys.stderr)
                return 2
            sets.append((key, val))
        else:
            print(f"diloco export-model: unknown option {a}\n{USAGE_EXPORT}", file=sys.stderr)
            return 2
        i += 2
    if factory is None or out is None:
        print(f"diloco export-model: needs --learner and -o\n{USAGE_EXPORT}", file=sys.stderr)
        return 2
    from . import _diloco
    try:
        what = _diloco.export_model(cluster, sets, factory, out)
    except (RuntimeError, ValueError) as e:
        print(f"diloco export-model: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {what} ({spec})")
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    factory = None
    spec = None
    rest = []
    threads = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--learner" or a.startswith("--learner="):
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in a else 2
            spec = value
            factory = load_factory(value)
            continue
        if a == "--torch-threads" or a.startswith("--torch-threads="):
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in a else 2
            try:
                threads = int(value)
            except ValueError:
                raise SystemExit(f"diloco: --torch-threads {value}: not a number")
            continue
        rest.append(a)
        i += 1
    if rest and rest[0] == "export-model":
        return export_model(rest[1:], factory, spec)
    from . import _diloco
    if factory is None:
        return _diloco.main(["python3 -m diloco"] + rest, None)
    import torch
    from . import _island
    from ._blas import describe
    from ._threads import pinned
    island = _island.from_env()
    if island is not None and (not rest or rest[0] != "node"):
        raise SystemExit(f"diloco: WORLD_SIZE is {island.world}: an island (a learner of "
                         "several processes) runs `diloco node`; other commands run as one "
                         "process")
    where = ""
    if island is not None:
        where = f", island rank {island.rank} of {island.world}"
    if island is None or island.leader:
        print(f"learner: {spec} (PyTorch {torch.__version__}, {threads or 1} torch thread"
              f"{'' if (threads or 1) == 1 else 's'}{where}; {describe()})", flush=True)
    if rest and rest[0] == "replay":
        for learner, process, world, ddp in _island.load_replayed(
                [a for a in rest[1:] if not a.startswith("-")]):
            exact = "the same bits" if world <= 2 else (
                "not bit for bit: the island summed over its ranks in gloo's order")
            print(f"learner {learner} process {process} ran as an island of {world} ranks"
                  f"{' (DDP)' if ddp else ''}: replay computes its ranks' steps one after "
                  f"another ({exact})", flush=True)
    with pinned(threads if threads is not None else 1):
        if island is None:
            return _diloco.main(["python3 -m diloco"] + rest, factory, spec)
        island.tape_dir = _island.record_dir(rest)
        island.start()
        if not island.leader:
            return island.follow(factory)
        # The other ranks stop when the node has reported (its actor system's shutdown may end
        # the process without returning here).
        _diloco.on_node_reported(island.stop)
        code = 1
        try:
            code = _diloco.main(["python3 -m diloco"] + rest, factory, spec)
        finally:
            _diloco.on_node_reported(None)
            island.stop(code)
        return code
