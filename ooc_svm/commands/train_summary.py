"""What ``ooc-svm train`` reports: the ``--json`` summary of one training, and a sweep over
several values of C (``--C 0.01,0.1,1``: run, JSON document, table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._util import json_text

if TYPE_CHECKING:
    import argparse

    from ..api import SolverParams, SweepOutcome
    from ..store.base import Store

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


def json_summary(
    result: Any, solver: str, typed: Any, store: Store, output: str, store_path: str
) -> dict:
    """The ``train --json`` object: :data:`COMMON_JSON_KEYS` first, then the solver's extras."""
    from ..api import get_solver

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
        "tolerance": getattr(typed, get_solver(solver).tolerance, None),
        "converged": bool(result.converged),
        "stop_reason": None if result.converged else result.stop_reason,
        "n_sv": n_sv,
        "intercept": intercept,
    }
    for k in COMMON_JSON_KEYS:
        extra.pop(k, None)
    return {**common, **extra}


#: columns of the sweep table, in order (the metric's column follows C)
SWEEP_COLUMNS = ("objective", "passes", "seconds", "iterations", "converged", "warm_start")


def run_sweep(args: argparse.Namespace, typed: SolverParams) -> int:
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
        scheduler_timeout=args.scheduler_timeout,
        params=typed,
    )
    out.result.model.save(args.output)
    doc = sweep_document(out, args)
    if args.sweep_table:
        write_sweep_table(out, args.sweep_table, doc)
    if args.plot:
        from ..evaluation.reports import plot_sweep

        plot_sweep(doc, args.plot)
    if args.json:
        store = open_store(args.store)
        best = typed.replace(C=out.best_C)
        name = getattr(args, "store_name", None) or args.store  # the text of `train TEXT`
        summary = json_summary(out.result, args.solver, best, store, args.output, name)
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


def sweep_document(out: SweepOutcome, args: argparse.Namespace) -> dict:
    """The table as one JSON document (what ``--sweep-table FILE.json`` holds)."""
    return {
        "sweep": True,
        "solver": args.solver,
        "store": getattr(args, "store_name", None) or args.store,
        **out.summary(),
    }


def format_sweep_table(out: SweepOutcome) -> str:
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


def write_sweep_table(out: SweepOutcome, path: str, doc: dict) -> None:
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
