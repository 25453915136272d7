"""``ooc-svm train``: fit an SVM on a store with one of the four solvers."""

from __future__ import annotations

import argparse
import re
import time
from typing import TYPE_CHECKING

from .._util import json_text

if TYPE_CHECKING:
    from ..api import SolverParams


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v)) if abs(v) >= 1 or v == 0 else str(v)
    return "none" if v is None else str(v)


#: what "no value" means for parameters whose help text does not say it
_NONE_MEANS = {
    "c_perf": "unset: --C is used",
    "init": "unset: a cold start, alpha = 0",
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
                type=base if base in (int, float) else str,
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


DESCRIPTION = """\
Train a linear or kernel SVM on a store (made by `ooc-svm ingest` or `ooc-svm synth`) and
write the model directory MODEL. C is LIBLINEAR's and LIBSVM's: minimise
1/2 |w|^2 + C * sum_i xi_i.

which solver when:
  perf        linear SVMs: the fastest here on large sparse data, one streamed pass per
              iteration; also ranking (--loss ordinal) and ROC area (--loss roc).
              Stops on the duality gap (--eps).
  active-set  kernel SVMs (rbf, poly, sigmoid) with few free support vectors; the fastest
              kernel solver on a9a-like data (0.34x LIBSVM's time). Stops on --tol (KKT).
  smo         kernel SVMs, LIBSVM's algorithm (WSS2, shrinking); at its best when the
              support vectors fit in --working-mb (0.5x LIBSVM on a9a). Stops on --tol.
  irwls       kernel SVMs with many bounded support vectors (noisy data, small C); one
              pass per working set of --working-set rows. Stops on --tol.
  Stores with more than two classes are trained one-vs-rest, with any solver.

examples:
  ooc-svm train --solver perf train.zarr -o model --C 1 --eps 0.001
  ooc-svm train --solver perf ranks.zarr -o ranker --loss ordinal
  ooc-svm train --solver active-set a9a.zarr -o m1 --kernel rbf --gamma 0.05
  ooc-svm train --solver smo small.zarr -o m2 --kernel rbf --gamma 0.5 --C 10
  ooc-svm train --solver irwls a9a.zarr -o m3 --kernel rbf --working-set 150
  ooc-svm train --solver perf sector.zarr -o m4   # one-vs-rest, 105 classes
  ooc-svm train --solver perf train.zarr -o m5 --config perf  # conf/perf.toml"""

EPILOG = """\
Output: progress on stderr (a bar with the stopping target on a terminal; one plain line
per iteration or every 5 s in scripts, batch jobs and with -v; nothing with -q); then one
summary line on stdout (none with -q) or, with --json, one JSON object (printed even with
-q, since it was asked for; its keys are listed in docs/CLI.md)."""


def add_parser(sub) -> None:
    # the solver packages' parameters only: no numba, no solver algorithm (``train --help``)
    from ..api import solver_catalogue, solver_names
    from . import HelpFormatter

    catalogue = solver_catalogue()
    classes = {name: cls for name, (cls, _) in catalogue.items()}
    p = sub.add_parser(
        "train",
        help="train an SVM on a store",
        formatter_class=HelpFormatter,
        usage="%(prog)s STORE -o MODEL [--solver NAME] [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument("store", help="store made by `ooc-svm ingest` or `ooc-svm synth`")
    p.add_argument(
        "-o", "--output", required=True, metavar="MODEL", help="model directory to write"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing MODEL (without it, train refuses before it starts)",
    )
    p.add_argument(
        "--solver",
        choices=solver_names(),
        default="perf",
        help="which solver (see above; default perf)",
    )
    _add_run_flags(p)
    _add_output_flags(p)
    _add_sweep_flags(p)
    add_solver_flags(p, classes)
    for action in p._actions:  # --C also takes a list of values: a C sweep
        if action.dest == "C":
            action.type = _c_values
            action.help = (action.help or "") + "; a comma list (0.01,0.1,1) sweeps C"
    p.set_defaults(func=run, _param_names=sorted({n for c in classes.values() for n in c.names()}))


def _c_values(value: str):
    """``--C``: a number, or a comma-separated list of them (a C sweep). A bad value is
    argparse's usual one line, "invalid float value: 'x'" (hence the ``__name__``)."""
    vals = [float(v) for v in value.split(",") if v.strip()]  # ValueError: argparse's message
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
        "--shard-cache-mb",
        type=_cache_mb,
        default=None,
        dest="shard_cache_mb",
        metavar="MB|auto",
        help="keep up to this many MiB of decoded shards in memory between passes (per "
        "process; 0: off). Default $OOC_SVM_SHARD_CACHE_MB, else auto: at most half the "
        "available memory (auto:SHARE for another share), at most 8 GiB, filled from the "
        "second pass on, so a store that fits is read and decoded twice, not every pass. "
        "The process's peak memory grows with the store up to that cap (decoded CSR: ~8 "
        "bytes a non-zero); with 0 it stays flat as rows grow",
    )
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
        type=int,
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
        type=int,
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


def load_config(path: str, solver: str) -> dict:
    """Parameters from a TOML file: top-level keys, overridden by a ``[solver]`` table."""
    import tomllib

    path = config_file(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise OSError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise OSError(f"{path}: invalid TOML ({e})") from None
    out = {k.replace("-", "_"): v for k, v in doc.items() if not isinstance(v, dict)}
    table = doc.get(solver) or doc.get(solver.replace("-", "_")) or {}
    out.update({k.replace("-", "_"): v for k, v in table.items()})
    return out


def solver_params_from_args(args):
    """The solver's validated ``Params``: ``--config`` values, overridden by the flags given
    on the command line. Raises SolverError (one line) on an unknown or invalid value."""
    from ..api import SolverError, flag_name, solver_catalogue

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


#: keys of ``train --json`` for every solver (null where a solver has no such quantity);
#: solver-specific extras follow them (docs/CLI.md lists both)
COMMON_JSON_KEYS = (
    "solver",
    "model",
    "store",
    "n_rows",
    "n_features",
    "n_classes",
    "C",
    "kernel",
    "gamma",
    "objective",
    "dual_objective",
    "iterations",
    "passes",
    "seconds",
    "stop_value",
    "tolerance",
    "converged",
    "stop_reason",
    "n_sv",
    "intercept",
)
#: one name per idea: solver summary keys renamed in the JSON output
_RENAMED = {"kkt_violators": "kkt_n_violators", "tol": "tolerance"}


def _plain(v):
    """JSON-ready value (numpy scalars and arrays to Python)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return v
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def json_summary(result, solver: str, typed, store, output: str, store_path: str) -> dict:
    """The ``train --json`` object: :data:`COMMON_JSON_KEYS` first, then the solver's extras."""
    extra = {_RENAMED.get(k, k): _plain(v) for k, v in result.to_json_dict(solver).items()}
    meta = store.meta
    model = result.model
    classes = getattr(model, "classes", None)
    n_sv = extra.get("n_sv")
    if n_sv is None and getattr(model, "support_vectors_", None) is not None:
        n_sv = int(model.support_vectors_.shape[0])
    intercept = _plain(getattr(model, "intercept_", None))
    kernel = extra.get("kernel", getattr(typed, "kernel", "linear"))
    common = {
        "solver": solver,
        "model": output,
        "store": store_path,
        "n_rows": int(meta.n_rows),
        "n_features": int(meta.n_features),
        "n_classes": len(classes) if classes is not None else len(meta.labels or []) or None,
        "C": extra.get("C", typed.C),
        "kernel": kernel,
        "gamma": None if kernel == "linear" else extra.get("gamma", getattr(model, "gamma", None)),
        "objective": extra.get("objective"),
        "dual_objective": extra.get("dual_objective"),
        "iterations": extra.get("iterations"),
        "passes": extra.get("passes"),
        "seconds": extra.get("seconds"),
        "stop_value": extra.get("stop_value"),
        "tolerance": getattr(typed, "eps", None) if solver == "perf" else typed.tol,
        "converged": bool(result.converged),
        "stop_reason": None if result.converged else result.stop_reason,
        "n_sv": n_sv,
        "intercept": intercept,
    }
    for k in COMMON_JSON_KEYS:
        extra.pop(k, None)
    return {**common, **extra}


def run(args) -> int:
    from ..api import SolverError, get_solver, train
    from ..progress import TrainProgress, progress_mode, stop_target
    from ..store import open_store
    from ._startup import init_numba_target

    typed, params = solver_params_from_args(args)
    check_output(args.output, args.overwrite)
    init_numba_target()
    if getattr(args, "c_values", None) is not None or args.validation or args.folds is not None:
        return run_sweep(args, typed)
    for flag in ("sweep_table", "plot", "sweep_metric"):
        if getattr(args, flag) is not None:
            raise SolverError(
                f"--{flag.replace('_', '-')} belongs to a C sweep: give --C values with "
                "--validation STORE or --folds K"
            )
    store = open_store(args.store)
    kind = store.meta.label_kind
    ovr = args.multiclass == "ovr" or (args.multiclass is None and kind == "multiclass")
    progress = TrainProgress(
        args.solver,
        stop_target(args.solver, typed),
        progress_mode(args),
        n_classes=len(store.meta.labels or []) if ovr else None,
        fused=hasattr(get_solver(args.solver), "solve_ovr"),
    )

    history = None
    if args.history:
        from ..reports import HistoryWriter

        history = HistoryWriter(
            args.history, header={"solver": args.solver, "store": args.store, "params": params}
        )

    def callback(rec: dict) -> None:
        progress(rec)
        if history is not None:
            history(rec)

    t0 = time.perf_counter()
    try:
        result = train(
            store,
            args.solver,
            scheduler=args.scheduler,
            callback=callback,
            multiclass=args.multiclass,
            checkpoint=args.checkpoint,
            resume=args.resume,
            shard_cache_mb=args.shard_cache_mb,
            probability=args.probability,
            probability_folds=args.probability_folds,
            params=typed,
        )
    finally:
        progress.close()
        if history is not None:
            history.close()
    result.seconds = result.seconds or (time.perf_counter() - t0)
    if args.probability:  # the K cross-validation trainings belong to the run's time
        result.seconds = time.perf_counter() - t0
    result.model.save(args.output)
    summary = json_summary(result, args.solver, typed, store, args.output, args.store)
    if args.json:  # asked for: printed even with -q
        print(json_text(summary))
    elif not getattr(args, "quiet", False):
        obj = summary.get("objective")
        status = ""
        if not result.converged:
            if result.stop_reason == "max_iter":
                status = f", not converged (max-iter {typed.max_iter} reached)"
            else:
                status = f", not converged ({result.stop_reason or 'stopped early'})"
        pr = result.model.info.get("probability") if args.probability else None
        cv = f" (+ {pr['folds']} probability folds, {pr['passes']} passes)" if pr else ""
        print(
            f"{args.solver}: objective {obj if obj is None else f'{obj:.8g}'}, "
            f"{summary['iterations']} iterations, {summary['passes']} passes{cv}, "
            f"{summary['seconds']:.2f}s{status} -> {args.output}"
        )
    return 0


def check_output(path: str, overwrite: bool) -> None:
    """Refuse, before training, an output that exists (a model, maybe hours of work) unless
    ``--overwrite``, and one that can never be a model directory (a file)."""
    import os

    from ..model import ModelError

    if not os.path.lexists(path):
        parent = os.path.dirname(path)
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):  # found now, not after the training
            from .._util import OutputError

            raise OutputError(
                f"{path}: {parent} is a file, not a directory; give an output path in a directory"
            )
        return
    if not os.path.isdir(path):
        raise ModelError(
            f"-o {path}: exists and is not a model directory; give another -o or remove it"
        )
    if not overwrite:
        raise ModelError(f"-o {path}: exists; pass --overwrite to replace it (or give another -o)")


#: columns of the sweep table, in order (the metric's column follows C)
SWEEP_COLUMNS = ("objective", "passes", "seconds", "iterations", "converged", "warm_start")


def run_sweep(args, typed) -> int:
    """``train --C 0.01,0.1,1,10 --validation STORE`` (or ``--folds K``)."""
    from ..api import SolverError, train_sweep
    from ..store import open_store

    for flag in ("checkpoint", "history", "multiclass"):
        if getattr(args, flag):
            raise SolverError(f"--{flag} is not supported with a C sweep")
    if args.resume or args.probability:
        raise SolverError("--resume and --probability are not supported with a C sweep")
    Cs = getattr(args, "c_values", None) or [typed.C]
    out = train_sweep(
        args.store,
        args.solver,
        Cs,
        validation=args.validation,
        folds=args.folds,
        metric=args.sweep_metric,
        scheduler=args.scheduler,
        shard_cache_mb=args.shard_cache_mb,
        params=typed,
    )
    out.result.model.save(args.output)
    doc = sweep_document(out, args)
    if args.sweep_table:
        write_sweep_table(out, args.sweep_table, doc)
    if args.plot:
        from ..reports import plot_sweep

        plot_sweep(doc, args.plot)
    if args.json:
        store = open_store(args.store)
        best = typed.replace(C=out.best_C)
        summary = json_summary(out.result, args.solver, best, store, args.output, args.store)
        summary["sweep"] = out.summary()
        print(json_text(summary))
    elif not getattr(args, "quiet", False):
        if not args.sweep_table:  # the table went to --sweep-table instead
            print(format_sweep_table(out))
        how = {"shared": "shared passes", "warm": "warm starts"}.get(out.mode, "independent")
        print(
            f"{args.solver}: best C {out.best_C:g} ({out.metric} "
            f"{_fmt_metric(out.rows, out.best_C, out.metric)}), {len(out.rows)} C values, "
            f"{out.passes} training passes ({how}), {out.seconds:.2f}s -> {args.output}"
        )
    return 0


def _fmt_metric(rows, C, key) -> str:
    v = next(r[key] for r in rows if r["C"] == C)
    return "n/a" if v is None else f"{v:.4f}"


def sweep_document(out, args) -> dict:
    """The table as one JSON document (what ``--sweep-table FILE.json`` holds)."""
    return {
        "sweep": True,
        "solver": args.solver,
        "store": args.store,
        **out.summary(),
    }


def format_sweep_table(out) -> str:
    """The table as aligned text columns."""
    cols = ["C", out.metric, *SWEEP_COLUMNS]
    lines = [cols]
    for r in out.rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, float):
                cells.append(f"{v:.6g}" if c != "objective" else f"{v:.8g}")
            else:
                cells.append("n/a" if v is None else str(v))
        if r["C"] == out.best_C:
            cells[0] += " *"
        lines.append(cells)
    w = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    return "\n".join("  ".join(x.rjust(w[i]) for i, x in enumerate(line)) for line in lines)


def write_sweep_table(out, path: str, doc: dict) -> None:
    """``--sweep-table``: CSV when the name ends in ``.csv``, else one JSON document."""
    import csv

    from .._util import open_output

    with open_output(path) as f:
        if path.lower().endswith(".csv"):
            cols = ["C", out.metric, *SWEEP_COLUMNS]
            wr = csv.writer(f)
            wr.writerow(cols)
            for r in out.rows:
                wr.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
        else:
            f.write(json_text(doc) + "\n")
