"""The ``ooc-svm`` command. Each sub-command lives in ``ooc_svm/commands/<name>.py`` and
provides ``add_parser(subparsers)`` and ``run(args) -> int``; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

#: sub-commands in the order ``--help`` lists them
COMMANDS = [
    "ingest",
    "info",
    "verify",
    "synth",
    "train",
    "predict",
    "evaluate",
    "plot",
    "export",
    "import",
    "bench",
]
#: command name -> module name where they differ (``import`` is a Python keyword)
_MODULES = {"import": "import_model"}

log = logging.getLogger("ooc_svm")


def _load_commands():
    mods = []
    for name in COMMANDS:
        modname = f"ooc_svm.commands.{_MODULES.get(name, name)}"
        try:
            mods.append(importlib.import_module(modname))
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
    return mods


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ooc-svm",
        description=(
            "Out-of-core SVM training on sparse data larger than memory: ingest SVMlight "
            "files into sharded Zarr/Parquet stores once, then train linear or kernel SVMs "
            "(perf, smo, active-set, irwls) in bounded memory, locally or on a Dask cluster."
        ),
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _load_commands():
        mod.add_parser(sub)
    return p


def _known_errors():
    from .checkpoint import CheckpointError
    from .engine.base import EngineError
    from .model import ModelError
    from .solvers import SolverError
    from .store.format import StoreError

    errs = [StoreError, SolverError, ModelError, CheckpointError, EngineError]
    try:
        from .store.ingest import IngestError

        errs.append(IngestError)
    except ImportError:
        pass
    return tuple(errs)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.ERROR if args.quiet else (logging.DEBUG if args.verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    logging.getLogger("distributed").setLevel(logging.WARNING if args.verbose else logging.ERROR)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("ooc-svm: interrupted", file=sys.stderr)
        return 130
    except _known_errors() as e:
        print(f"ooc-svm: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"ooc-svm: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
