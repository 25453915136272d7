"""``ooc-svm train``: fit an SVM on a store with one of the four solvers."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING

from .._util import json_text
from .train_flags import (
    _add_follow_flags,
    _add_output_flags,
    _add_run_flags,
    _add_sweep_flags,
    _c_values,
    add_solver_flags,
    solver_params_from_args,
)
from .train_summary import (
    json_summary,
    run_sweep,
)

if TYPE_CHECKING:
    import argparse

log = logging.getLogger(__name__)

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
  ooc-svm train --solver perf train.zarr -o m5 --config perf  # conf/perf.toml
  ooc-svm train train.zarr -o m6 --init m5   # warm, after `ingest --append`
  ooc-svm train train.zarr -o m7 --follow    # refit after every append"""

EPILOG = """\
Output: progress on stderr (a bar with the stopping target on a terminal; one plain line
per iteration or every 5 s in scripts, batch jobs and with -v; nothing with -q); then one
summary line on stdout (none with -q) or, with --json, one JSON object (printed even with
-q, since it was asked for; its keys are listed in docs/CLI.md)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument(
        "store",
        help="store made by `ooc-svm ingest` or `ooc-svm synth`, or SVMlight/LIBSVM text "
        "(- for stdin), ingested into a temporary store first",
    )
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
        default=None,
        help="which solver (see above; default perf, or smo when --kernel is not linear)",
    )
    _add_run_flags(p)
    _add_follow_flags(p)
    _add_output_flags(p)
    _add_sweep_flags(p)
    add_solver_flags(p, classes)
    for action in p._actions:  # --C also takes a list of values: a C sweep
        if action.dest == "C":
            action.type = _c_values
            action.help = (action.help or "") + "; a comma list (0.01,0.1,1) sweeps C"
    p.set_defaults(func=run, _param_names=sorted({n for c in classes.values() for n in c.names()}))


def run(args: argparse.Namespace) -> int:
    if not _is_text(args.store):
        return _run(args)
    check_output(args.output, args.overwrite)
    if args.follow:
        from ..api import SolverError

        raise SolverError(
            f"--follow watches a store for appends; {args.store} is text: ingest it first "
            f"(ooc-svm ingest {args.store} STORE), then train STORE --follow"
        )
    return _run_on_text(args)


def _is_text(path: str) -> bool:
    """``train`` was given SVMlight text (a file, or ``-`` for standard input), not a store
    (a directory, or a URL)."""
    import os

    return path == "-" or ("://" not in path and os.path.isfile(path))


def _run_on_text(args: argparse.Namespace) -> int:
    """``train TEXT`` (LIBLINEAR's ``train file``): the text is ingested, with ingest's
    defaults, into a temporary store beside the model (removed when the training ends, by
    an error or a signal too), then trained as a store is."""
    import logging
    import os
    import shutil
    import tempfile

    from ..memory_budget import current
    from ..store.ingest import budget_sizes, ingest_with_stats
    from ._common import apply_memory

    apply_memory(args)
    out = os.path.abspath(args.output)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.text-", dir=os.path.dirname(out))
    try:
        name = "standard input" if args.store == "-" else args.store
        logging.getLogger(__name__).info(
            "train: reading %s into a temporary store (`ooc-svm ingest` it once to train "
            "it again without reading the text)",
            name,
        )
        shard_mb, block_mb = budget_sizes(current(), None, None, None)
        store = os.path.join(tmp, "train.zarr")
        ingest_with_stats([args.store], store, shard_mb=shard_mb, block_mb=block_mb)
        args.store_name, args.store = args.store, store
        return _run(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    from ..api import SolverError, get_solver, train
    from ..progress import TrainProgress, progress_mode, stop_target
    from ..store import open_store
    from ._common import apply_memory
    from ._startup import init_numba_target

    typed, params = solver_params_from_args(args)
    check_output(args.output, args.overwrite)
    apply_memory(args)
    check_follow(args)
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
    spec = get_solver(args.solver)
    progress = TrainProgress(
        args.solver,
        stop_target(spec, typed),
        progress_mode(args),
        n_classes=len(store.meta.labels or []) if ovr else None,
        fused=spec.solve_ovr is not None,
        record_labels=spec.record_labels,
    )

    history = None
    if args.history:
        from ..evaluation.reports import HistoryWriter

        history = HistoryWriter(
            args.history,
            header={"solver": args.solver, "store": store_name(args), "params": params},
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
            scheduler_timeout=args.scheduler_timeout,
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
    summary = json_summary(result, args.solver, typed, store, args.output, store_name(args))
    _report(args, typed, result, summary)
    if args.follow:
        sys.stdout.flush()
        return run_follow(args, typed, result.model)
    return 0


def _report(args: argparse.Namespace, typed, result, summary: dict) -> None:
    """The run's summary on stdout: ``--json``'s object (even with ``-q``) or one line; with
    ``-v`` first the variant ``auto`` ran and why, on stderr."""
    if getattr(args, "verbose", 0) and summary.get("auto"):
        log.info("variant %s", summary["auto"])
    if args.json:
        print(json_text(summary))
    elif not getattr(args, "quiet", False):
        print(_summary_line(args, typed, result, summary))


def store_name(args: argparse.Namespace) -> str:
    """The store as the user named it (the text file of ``train TEXT``)."""
    return str(getattr(args, "store_name", None) or args.store)


def check_follow(args: argparse.Namespace) -> None:
    """``--follow`` trains one model again and again: refuse what does not fit it."""
    from ..api import SolverError

    if not args.follow:
        for flag in ("follow_seconds", "max_refits"):
            if getattr(args, flag) is not None:
                raise SolverError(f"--{flag.replace('_', '-')} belongs to --follow")
        return
    clash = [
        flag
        for flag, on in (
            ("--C with several values", isinstance(getattr(args, "C", None), list)),
            ("--validation", args.validation is not None),
            ("--folds", args.folds is not None),
            ("--probability", args.probability),
            ("--checkpoint", args.checkpoint is not None),
            ("--resume", args.resume),
        )
        if on
    ]
    if clash:
        raise SolverError(
            f"--follow refits one model after every append; drop {', '.join(clash)} (train "
            "once with them, then follow with --init MODEL)"
        )
    if args.follow_seconds is not None and not args.follow_seconds > 0:
        raise SolverError(f"--follow-seconds must be positive (got {args.follow_seconds})")
    if args.max_refits is not None and args.max_refits < 0:
        raise SolverError(f"--max-refits must be >= 0 (got {args.max_refits})")


def run_follow(args: argparse.Namespace, typed, model) -> int:
    """After the first fit: refit warm after every append (:func:`ooc_svm.follow.follow`),
    one line per refit on stderr (``--json``: one JSON object per refit on stdout)."""
    from ..api import get_solver
    from ..follow import follow
    from ..progress import stop_target

    name, target = stop_target(get_solver(args.solver), typed)
    quiet = getattr(args, "quiet", False)
    if not quiet:
        print(
            f"follow: watching {args.store} every {args.follow_seconds or 5.0:g}s "
            f"(Ctrl-C stops; {args.output} is always a complete model)",
            file=sys.stderr,
            flush=True,
        )

    def on_refit(r) -> None:
        if args.json:
            print(
                json_text(
                    {
                        "refit": r.index,
                        "rows_added": r.rows_added,
                        "rows_dropped": r.rows_dropped,
                        "n_rows": r.n_rows,
                        "passes": r.passes,
                        "seconds": r.seconds,
                        "stop": {"name": name, "value": r.stop_value, "target": target},
                        "converged": r.converged,
                        "objective": r.result.objective,
                        "model": args.output,
                    }
                ),
                flush=True,
            )
        elif not quiet:
            ok = "<=" if r.converged else "> (not converged)"
            print(
                f"follow: refit {r.index}: +{r.rows_added} rows"
                + (f", -{r.rows_dropped} dropped" if r.rows_dropped else "")
                + f" ({r.n_rows} in all), "
                f"{r.passes} passes, {r.seconds:.2f}s, {name} {r.stop_value:.3g} {ok} "
                f"{target:g} -> {args.output}",
                file=sys.stderr,
                flush=True,
            )

    try:
        follow(
            args.store, args.output, args.solver, typed, model,
            scheduler=args.scheduler, shard_cache_mb=args.shard_cache_mb,
            multiclass=args.multiclass,
            poll_seconds=args.follow_seconds if args.follow_seconds is not None else 5.0,
            max_refits=args.max_refits, on_refit=on_refit,
        )  # fmt: skip
    except KeyboardInterrupt:
        if not quiet:
            print(f"follow: stopped; {args.output} is the last complete model", file=sys.stderr)
        raise
    return 0


def _summary_line(args, typed, result, summary: dict) -> str:
    """The one line a training prints: objective, iterations, passes, seconds, output."""
    obj = summary.get("objective")
    status = ""
    if not result.converged:
        if result.stop_reason == "max_iter":
            status = f", not converged (max-iter {typed.max_iter} reached)"
        else:
            status = f", not converged ({result.stop_reason or 'stopped early'})"
    pr = result.model.info.get("probability") if args.probability else None
    cv = f" (+ {pr['folds']} probability folds, {pr['passes']} passes)" if pr else ""
    if typed.init is not None:
        cv += f" (warm start from {typed.init})"
    return (
        f"{args.solver}: objective {obj if obj is None else f'{obj:.8g}'}, "
        f"{summary['iterations']} iterations, {summary['passes']} passes{cv}, "
        f"{summary['seconds']:.2f}s{status} -> {args.output}"
    )


def check_output(path: str, overwrite: bool) -> None:
    """Refuse, before training, an output that exists (a model, maybe hours of work) unless
    ``--overwrite``, and one that can never be a model directory (a file)."""
    import os

    from ..model.model import ModelError

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
