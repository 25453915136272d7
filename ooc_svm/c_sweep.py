"""Choosing C: the validation metrics of a C sweep, the best value, the sweep's table.

:func:`ooc_svm.api.train_sweep` sets up the run (parameters, engine, memory budget) and
hands over to :func:`run_sweep`: every C's model measured on a validation store, or by a
cross-validation over folds of shards (rows within the shards when there are fewer shards
than folds) with the best C retrained on all the data.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from .solvers import Result, SolverError
from .store import open_store

log = logging.getLogger(__name__)

__all__ = ["SWEEP_METRICS", "SweepOutcome", "record_sweep", "run_sweep", "sweep_metric"]

#: ``metric=`` names → the key of :func:`ooc_svm.evaluation.evaluation.evaluate_model`'s result
SWEEP_METRICS = {
    "accuracy": "accuracy",
    "auc": "auc",
    "ndcg": "ndcg@10",
    "pairwise": "pairwise_accuracy",
}


@dataclass
class SweepOutcome:
    """What :func:`train_sweep` returns.

    Attributes
    ----------
    result : Result
        The model at the best C (with ``validation``: that C's model of the sweep; with
        ``folds``: retrained on all the data at the best C).
    best_C : float
    metric : str
        The metric's name (``accuracy``, ``auc``, ``ndcg@10``, ``pairwise_accuracy``).
    rows : list of dict
        One per C: ``C``, the metric, ``objective`` (primal, LIBLINEAR units), ``passes``,
        ``seconds``, ``iterations``, ``converged``, ``warm_start``.
    mode : str
        ``shared`` (perf: fused passes), ``warm`` or ``independent``.
    passes : int
        Streamed training passes of the whole sweep (all folds, and the final training).
    """

    result: Result
    best_C: float
    metric: str
    rows: list[dict]
    mode: str
    passes: int
    seconds: float
    folds: int | None = None
    validation: str | None = None
    sweep_passes: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (what ``train --json`` prints under ``"sweep"``)."""
        return {
            "metric": self.metric,
            "best_C": self.best_C,
            "mode": self.mode,
            "passes": self.passes,
            "sweep_passes": self.sweep_passes,
            "folds": self.folds,
            "validation": self.validation,
            "seconds": round(self.seconds, 3),
            "table": self.rows,
        }


def sweep_metric(kind: str, has_qid: bool, metric: str | None) -> str:
    """The evaluation key of ``metric`` (default: accuracy for classes, NDCG@10 for ranks
    with query ids, pairwise accuracy for ranks without)."""
    if metric is None:
        if kind == "ordinal":
            return "ndcg@10" if has_qid else "pairwise_accuracy"
        return "accuracy"
    if metric not in SWEEP_METRICS:
        raise SolverError(f"unknown --sweep-metric {metric!r}; use {', '.join(SWEEP_METRICS)}")
    if metric == "auc" and kind != "binary":
        raise SolverError(f"--sweep-metric auc needs binary labels, the store's are {kind}")
    if metric == "ndcg" and not has_qid:
        raise SolverError("--sweep-metric ndcg needs query ids (qid:) in the store")
    return SWEEP_METRICS[metric]


def run_sweep(
    store, spec, typed, Cs, validation, folds, key, engine, callback, warm_start
) -> SweepOutcome:
    """The sweep over ``Cs`` measured on ``validation`` or, with ``folds`` (not None), by
    cross-validation (:func:`ooc_svm.api.train_sweep`)."""
    if folds is not None:
        return _sweep_folds(store, spec, typed, Cs, int(folds), key, engine, callback, warm_start)
    return _sweep_validation(store, spec, typed, Cs, validation, key, engine, callback, warm_start)


def record_sweep(out: SweepOutcome) -> None:
    """The sweep's choice and table in the best model's ``info["c_sweep"]``."""
    info = {k: out.summary()[k] for k in ("metric", "best_C", "mode", "folds", "validation")}
    info["table"] = [{k: r[k] for k in ("C", out.metric, "objective", "passes")} for r in out.rows]
    out.result.model.info["c_sweep"] = info


def _sweep_row(C: float, res: Result, key: str, value, warm: bool) -> dict[str, Any]:
    return {
        "C": C,
        key: value,
        "objective": res.objective,
        "dual_objective": res.dual_objective,
        "passes": int(res.passes),
        "seconds": round(float(res.seconds), 4),
        "iterations": int(res.iterations),
        "converged": bool(res.converged),
        "warm_start": bool(warm),
    }


def _best(rows: list[dict], key: str) -> int:
    """Index of the row with the largest metric (ties and NaN: the smaller C)."""
    vals = [r[key] if r[key] is not None and r[key] == r[key] else -math.inf for r in rows]
    return max(range(len(rows)), key=lambda i: (vals[i], -i))


def _metric(model, store, engine, key: str):
    from .evaluation.evaluation import evaluate_model

    return evaluate_model(model, store, engine).get(key)


def _sweep_validation(
    store, spec, typed, Cs, validation, key, engine, callback, warm_start
) -> SweepOutcome:
    from .solvers.sweep import solve_sweep

    vstore = open_store(validation) if isinstance(validation, str) else validation
    sw = solve_sweep(store, engine, spec, typed, Cs, callback=callback, warm_start=warm_start)
    rows = [
        _sweep_row(c, r, key, _metric(r.model, vstore, engine, key), w)
        for c, r, w in zip(Cs, sw.results, sw.warm_started, strict=True)
    ]
    b = _best(rows, key)
    return SweepOutcome(
        sw.results[b], Cs[b], key, rows, sw.mode, sw.passes, 0.0,
        validation=str(vstore.path), sweep_passes=[sw.passes],
    )  # fmt: skip


def _sweep_folds(store, spec, typed, Cs, k, key, engine, callback, warm_start) -> SweepOutcome:
    """Shard-fold cross-validation of the sweep (row folds within the shards when the store
    has fewer shards than folds); the best C retrained on all the data."""
    import numpy as np

    from .evaluation.cross_validation import _row_fold_nnz, _shard_folds
    from .solvers.sweep import solve_sweep
    from .store.views import RowFoldView, ShardSubsetView

    if k < 2:
        raise SolverError(f"--folds must be >= 2, got {k}")
    seed = int(typed.seed)
    # fewer shards than folds (a store ingested with defaults is one shard): folds of rows
    # within the shards, seeded, as --probability makes them
    by_rows = len(store.meta.shards) < k
    try:
        fold = _shard_folds(store.meta, k, seed, by_rows)
    except ValueError as e:
        raise SolverError(f"{store.path}: --folds: {e}") from None
    fold_nnz = _row_fold_nnz(store, k, seed) if by_rows else None
    if by_rows:
        log.info("C sweep: %d shard(s) < %d folds: folds of rows within the shards", len(fold), k)
    per_c: list[list] = [[] for _ in Cs]
    rows: list[dict] = []
    passes: list[int] = []
    mode = ""
    for f in range(k):
        train_view: RowFoldView | ShardSubsetView
        held: RowFoldView | ShardSubsetView
        if fold_nnz is not None:
            train_view = RowFoldView(store, k, seed, f, fold_nnz[:, f])
            held = RowFoldView(store, k, seed, f, fold_nnz[:, f], held=True)
        else:
            train_view = ShardSubsetView(store, np.flatnonzero(fold != f))
            held = ShardSubsetView(store, np.flatnonzero(fold == f))
        sw = solve_sweep(train_view, engine, spec, typed, Cs, callback=None, warm_start=warm_start)
        mode = sw.mode
        passes.append(sw.passes)
        for i, r in enumerate(sw.results):
            per_c[i].append((r, _metric(r.model, held, engine, key), sw.warm_started[i]))
        log.info("C sweep: fold %d/%d: %d passes", f + 1, k, sw.passes)
    for i, c in enumerate(Cs):
        vals = [m for _, m, _ in per_c[i]]
        ok = [float(v) for v in vals if v is not None]
        row = _sweep_row(c, per_c[i][0][0], key, float(np.mean(ok)) if ok else None, False)
        objs = [r.objective for r, _, _ in per_c[i] if r.objective is not None]
        row.update(
            objective=float(np.mean(objs)) if objs else None,
            dual_objective=None,
            passes=int(sum(r.passes for r, _, _ in per_c[i])),
            seconds=round(float(sum(r.seconds for r, _, _ in per_c[i])), 4),
            iterations=int(sum(r.iterations for r, _, _ in per_c[i])),
            converged=all(r.converged for r, _, _ in per_c[i]),
            warm_start=any(w for _, _, w in per_c[i]),
            folds=[None if v is None else float(v) for v in vals],
        )
        rows.append(row)
    b = _best(rows, key)
    final = spec.solve(store, engine, typed.replace(C=Cs[b]), callback=callback)
    passes.append(int(final.passes))
    return SweepOutcome(
        final, Cs[b], key, rows, mode, int(sum(passes)), 0.0, folds=k, sweep_passes=passes
    )
