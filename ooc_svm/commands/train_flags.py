"""``ooc-svm train``'s flags: generated from the solvers' typed parameters, config files, and
the typed parameters back from the parsed arguments (:func:`solver_params_from_args`).
"""

from __future__ import annotations

import argparse
import logging
import re
from typing import TYPE_CHECKING, Any

from ._common import FLOAT, INT

if TYPE_CHECKING:
    from ..api import SolverParams

log = logging.getLogger(__name__)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v)) if abs(v) >= 1 or v == 0 else str(v)
    return "none" if v is None else str(v)


#: what "no value" means for parameters whose help text does not say it
_NONE_MEANS = {
    "c_perf": "unset: --C is used",
    "init": "unset: a cold start",
}
_DEFAULT_IN_HELP = re.compile(r"\s*(?:[;,.]\s*|\()[Dd]efault:?\s+(?P<what>[^()]*?)\)?\s*$")
_METAVARS = {"C": "C", "class_weight": "SPEC", "init": "MODEL"}


def _help_and_default(name: str, help_: str, default) -> tuple[str, str]:
    """``(help without its default clause, what the default is)``; a None default is
    explained from the help text ("default: 1/n_features") or :data:`_NONE_MEANS`."""
    if default is not None:
        return help_, _fmt(default)
    m = _DEFAULT_IN_HELP.search(help_)
    if m:
        return help_[: m.start()], m.group("what")
    return help_, _NONE_MEANS.get(name, "unset")


def add_solver_flags(p: argparse.ArgumentParser, classes: dict[str, type[SolverParams]]) -> None:
    """Solver flags generated from the ``Params`` dataclasses: ``--name-with-dashes`` per
    field, help and default(s) from its metadata; a field several solvers share is one flag
    (in the common group, with each solver's default where they differ); the others are
    grouped per solver, under the solver's stopping rule."""
    import typing

    from ..api import KernelSolverParams, SolverParams, flag_name, solver_catalogue

    rules = {name: rule for name, (_, rule) in solver_catalogue().items()}
    hints = {solver: cls.types() for solver, cls in classes.items()}  # evaluated once each
    owners: dict[str, list[tuple[str, typing.Any]]] = {}
    for solver, cls in classes.items():
        for f in cls.fields():
            owners.setdefault(f.name, []).append((solver, f))
    base_help = {f.name: f.metadata["help"] for f in KernelSolverParams.fields()}
    base_help.update({f.name: f.metadata["help"] for f in SolverParams.fields()})
    common = p.add_argument_group(
        "parameters of several solvers", "Default per solver where they differ."
    )
    groups = {
        s: p.add_argument_group(f"{s} options", f"Stops when: {rules.get(s, '?')}.")
        for s in classes
    }
    for name, fields in owners.items():
        solver, f = fields[0]
        shared = len(fields) > 1
        group = common if shared else groups[solver]
        help_ = base_help.get(name, f.metadata["help"]) if shared else f.metadata["help"]
        defaults = {s: fl.default for s, fl in fields}
        help_, shown = _help_and_default(name, help_, f.default)
        if len(set(map(repr, defaults.values()))) > 1:
            shown = ", ".join(f"{s} {_fmt(d)}" for s, d in defaults.items())
        if len(fields) < len(classes) and shared:
            help_ += f" ({', '.join(s for s, _ in fields)})"
        help_ = f"{help_} (default {shown})".replace("%", "%%")
        tp = hints[solver][name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        base = args[0] if args else tp
        cli = f.metadata.get("cli")
        flag = flag_name(name)
        if cli == "bool":
            group.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_
            )
        elif cli == "no":
            group.add_argument(
                flag_name("no_" + name),
                dest=name,
                action="store_const",
                const=False,
                default=None,
                help=help_,
            )
        else:
            choices = None
            for _, fl in fields:
                if fl.metadata.get("choices"):
                    choices = list(dict.fromkeys([*(choices or []), *fl.metadata["choices"]]))
            metavar = _METAVARS.get(name) or (
                None if choices else {int: "N", float: "X"}.get(base, "VALUE")
            )
            group.add_argument(
                flag,
                dest=name,
                type={int: INT, float: FLOAT}.get(base, str),
                choices=choices,
                default=None,
                metavar=metavar,
                help=help_,
            )


def _cache_mb(value: str):
    from .._util import parse_cache_mb

    try:
        return parse_cache_mb(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _c_values(value: str):
    """``--C``: a number, or a comma-separated list of them (a C sweep). A bad value is
    argparse's usual one line, "invalid float value: 'x'" (hence the ``__name__``)."""
    if value != value.strip():
        raise ValueError(value)
    vals = [FLOAT(v.strip()) for v in value.split(",") if v.strip()]  # argparse's message
    if not vals:
        raise ValueError(value)
    return vals if "," in value else vals[0]


_c_values.__name__ = "float"


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """Where and how the training runs: scheduler, caches, config, checkpoints."""
    p.add_argument(
        "--scheduler",
        default=None,
        help="local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
        "scheduler address tcp://HOST:PORT / scheduler-file.json",
    )
    p.add_argument(
        "--scheduler-timeout",
        type=FLOAT,
        default=None,
        metavar="SECONDS",
        help="with a Dask scheduler address: seconds it may go without answering, when "
        "connecting and while passes run (asked every few seconds), before the run stops "
        "with an error (default $OOC_SVM_SCHEDULER_TIMEOUT, else 60)",
    )
    p.add_argument(
        "--shard-cache-mb",
        type=_cache_mb,
        default=None,
        dest="shard_cache_mb",
        metavar="MB|auto",
        help="keep up to this many MiB of decoded shards in memory between passes (per "
        "process; 0: off). Default $OOC_SVM_SHARD_CACHE_MB, else auto: at most half the "
        "memory budget (--memory-mb) the run leaves (auto:SHARE for another share), at "
        "most 8 GiB, filled from the second pass on, so a store that fits is read and "
        "decoded twice, not every pass. "
        "The process's peak memory grows with the store up to that cap (decoded CSR: ~8 "
        "bytes a non-zero); with 0 it stays flat as rows grow",
    )
    from ._common import add_memory

    add_memory(p)
    p.add_argument(
        "--config",
        default=None,
        help="TOML file of solver parameters (e.g. conf/perf.toml), or the name of one shipped "
        "with ooc-svm (perf, smo, active-set, irwls); flags given on the command "
        "line override its values. Keys are parameter names (C, eps, tol, ...), at top level "
        "or in a [SOLVER] table.",
    )
    p.add_argument(
        "--multiclass",
        choices=["ovr"],
        default=None,
        help="one-vs-rest for more than two classes (default for multiclass stores)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="write the solver state to DIR after every iteration (atomically)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in --checkpoint DIR (same parameters)",
    )


def _add_follow_flags(p: argparse.ArgumentParser) -> None:
    """``--follow``: refit warm after every ``ingest --append``."""
    g = p.add_argument_group(
        "following a growing store (--follow)",
        "After the first fit, watch STORE's metadata; each `ingest --append` (by another "
        "process) triggers a warm refit from the last model (as --init) and an atomic "
        "replacement of -o MODEL, with one line per refit (rows added, passes, seconds, "
        "stopping value). Ctrl-C or SIGTERM stops it with the last complete model in place "
        "(exit status 130 / 143); a store overwritten, shrunk or unreadable stops it with a "
        "one-line reason (exit status 1).",
    )
    g.add_argument("--follow", action="store_true", help="keep refitting after appends")
    g.add_argument(
        "--follow-seconds",
        type=FLOAT,
        default=None,
        metavar="S",
        help="seconds between two looks at the store's metadata (default 5)",
    )
    g.add_argument(
        "--max-refits",
        type=INT,
        default=None,
        metavar="N",
        help="stop after N refits (default: until interrupted)",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """What is written besides the model: JSON summary, history, probability outputs."""
    p.add_argument("--json", action="store_true", help="print a one-line JSON summary")
    p.add_argument(
        "--history",
        default=None,
        metavar="FILE.jsonl",
        help="record every iteration (objective, violation, passes, seconds, working set) "
        "as JSON lines; plot with `ooc-svm plot`",
    )
    p.add_argument(
        "--probability",
        action="store_true",
        help="also fit Platt's sigmoid (LIBSVM -b 1) on decision values of a cross-validation "
        "whose folds are whole shards (rows within shards when the store has fewer shards "
        "than folds), and store it in the model for `predict --probability` (costs K more "
        "trainings, shown as fold k/K; seeded by --seed)",
    )
    p.add_argument(
        "--probability-folds",
        type=INT,
        default=5,
        metavar="K",
        help="folds of the --probability cross-validation (K >= 2; default 5)",
    )


def _add_sweep_flags(p: argparse.ArgumentParser) -> None:
    """``--C 0.01,0.1,1,10`` with ``--validation`` or ``--folds``: choosing C."""
    g = p.add_argument_group(
        "choosing C (--C 0.01,0.1,1,10 with --validation STORE or --folds K)",
        "Every C value is trained in one sweep: perf (error loss) trains them together, "
        "sharing every streamed pass (passes = the slowest C's, not the sum); smo, "
        "active-set and irwls go from the smallest C up, each warm-started from the previous "
        "solution. The model with the best "
        "validation metric (ties: the smaller C) is written to -o; the table (C, metric, "
        "objective, passes, seconds) goes to stdout or --sweep-table.",
    )
    g.add_argument(
        "--validation", default=None, metavar="STORE", help="store the metric is measured on"
    )
    g.add_argument(
        "--folds",
        type=INT,
        default=None,
        metavar="K",
        help="instead of --validation: K-fold cross-validation, folds made of whole shards "
        "(seeded by --seed); metric = mean over the folds, and the model written is "
        "retrained on all the data at the best C",
    )
    g.add_argument(
        "--sweep-metric",
        choices=["accuracy", "auc", "ndcg", "pairwise"],
        default=None,
        help="validation metric (default accuracy; ranks: ndcg (NDCG@10) with query ids, "
        "else pairwise accuracy)",
    )
    g.add_argument(
        "--sweep-table",
        default=None,
        metavar="FILE",
        help="write the table as CSV (FILE.csv) or JSON (any other name; - for stdout)",
    )
    g.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="draw the validation metric and the training objective against C (log x)",
    )


def config_file(name: str) -> str:
    """``--config`` value to a file: a path as given, or the name of a parameter file shipped
    with the package (``perf``, ``smo``, ``active-set``, ``irwls``: ``conf/NAME.toml``)."""
    import os

    if os.path.exists(name) or name.endswith(".toml") or "/" in name or os.sep in name:
        return name
    from importlib.resources import files

    shipped = files("ooc_svm") / "conf" / f"{name}.toml"
    return str(shipped) if shipped.is_file() else name


def shipped_configs() -> list[str]:
    """Names of the parameter files shipped with the package (``--config NAME``)."""
    from importlib.resources import files

    conf = files("ooc_svm") / "conf"
    return sorted(p.name[:-5] for p in conf.iterdir() if p.name.endswith(".toml"))


def load_config(path: str, solver: str) -> dict:
    """Parameters from a TOML file: top-level keys, overridden by a ``[solver]`` table."""
    import tomllib

    path = config_file(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise OSError(
            f"{path}: config file not found; give a TOML file or one of the shipped names "
            f"({', '.join(shipped_configs())})"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise OSError(f"{path}: invalid TOML ({e})") from None
    out = {k.replace("-", "_"): v for k, v in doc.items() if not isinstance(v, dict)}
    table = doc.get(solver) or doc.get(solver.replace("-", "_")) or {}
    out.update({k.replace("-", "_"): v for k, v in table.items()})
    return out


def solver_params_from_args(args: argparse.Namespace) -> tuple[SolverParams, dict[str, Any]]:
    """The solver's validated ``Params``: ``--config`` values, overridden by the flags given
    on the command line. Raises SolverError (one line) on an unknown or invalid value."""
    from ..api import SolverError, flag_name, solver_catalogue

    if args.solver is None:  # a kernel asks for a kernel solver (it took a second try)
        kernel = getattr(args, "kernel", None) or "linear"
        if kernel == "linear":
            args.solver = "perf"
        else:
            args.solver = "smo"
            log.info(
                "--kernel %s: training with --solver smo (LIBSVM's method; --solver "
                "active-set scales to larger data)",
                kernel,
            )
    cls = solver_catalogue()[args.solver][0]
    given = {k: getattr(args, k) for k in args._param_names if getattr(args, k, None) is not None}
    if isinstance(given.get("C"), list):  # a C sweep: Params holds the smallest value
        args.c_values = given["C"]
        given["C"] = min(given["C"])
    conf = load_config(args.config, args.solver) if args.config else {}
    try:
        cls.check_names(conf)
    except SolverError as e:
        raise SolverError(f"{args.config}: {e}") from None
    foreign = [k for k in given if k not in cls.names()]
    if foreign:
        hint = cls.misplaced_hint(foreign)
        raise SolverError(
            hint
            or f"--solver {args.solver} does not take " + ", ".join(flag_name(k) for k in foreign)
        )
    # a flag overrides the config's value of the same quantity (--C vs --c-perf included)
    if "C" in given:
        conf.pop("c_perf", None)
    if "c_perf" in given:
        conf.pop("C", None)
    params = {**conf, **given}
    return cls.from_mapping(params), params
