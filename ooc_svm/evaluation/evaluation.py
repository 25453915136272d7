"""Prediction quality of a model on a store, in one streamed pass (``ooc-svm evaluate``).

What is kept in memory:

- binary labels: confusion counts (exact, from float64 decision values, summed per shard)
  plus, for ROC AUC and PRBEP, which need the order of all scores, the decision values as
  **float32 and one byte per label: 5 bytes per row** (50 MB for 10 million rows);
- rank labels: float32 scores and labels (8 bytes per row, plus 8 for the qid when the store
  has query ids) for pairwise accuracy, Kendall τ and NDCG@10;
- multiclass (one-vs-rest models): counts only.

Metrics: binary — n, accuracy, precision, recall, f1 (prediction: f(x) > 0), prbep, auc
(plus ndcg@10 and pairwise_accuracy when the store has qids); ranks — n, pairwise_accuracy,
kendall_tau (per query and averaged when there are qids), ndcg@10 (with qids); multiclass —
n, accuracy. See :mod:`ooc_svm.evaluation.metrics` for the definitions.

Ranking models (perf ``--loss roc|ordinal``) only order rows: their threshold is not trained.
For them the threshold-free metrics come first and ``threshold_trained`` is false.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.model import Model
from ..model.ovo import ovo_labels
from ..model.shard_scores import OvoBroadcast, make_broadcast, score_shard
from . import metrics as M
from .scoring import check_compatible, is_ranking_model

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..store.base import Store

log = logging.getLogger(__name__)


def _eval_fn(shard, bc):
    """Per-shard partial: exact counts plus compact per-row data for order-based metrics."""
    sbc, mode, classes, with_qid = bc
    s = score_shard(shard, sbc)
    y = np.asarray(shard.y, dtype=np.float64)
    out: dict[str, Any] = {}
    if mode == "binary":
        neg, pos = classes
        t = y == pos
        p = s > 0
        tp = int(np.count_nonzero(t & p))
        fp = int(np.count_nonzero(~t & p))
        fn = int(np.count_nonzero(t & ~p))
        out["counts"] = np.array([tp, fp, y.shape[0] - tp - fp - fn, fn], dtype=np.int64)
        out["scores"] = [s.astype(np.float32)]
        out["pos"] = [t]
    elif mode == "multiclass":
        if isinstance(sbc, OvoBroadcast):
            pred = ovo_labels(sbc.model, s)
        elif s.ndim == 2:
            pred = np.asarray(classes, dtype=np.float64)[np.argmax(s, axis=1)]
        else:
            pred = np.where(s > 0, classes[-1], classes[0])
        out["counts"] = np.array([int(np.count_nonzero(pred == y)), y.shape[0]], dtype=np.int64)
    else:
        out["scores"] = [s.astype(np.float32)]
        out["y"] = [y.astype(np.float32)]
    if with_qid and shard.qid is not None:
        out["qid"] = [np.asarray(shard.qid, dtype=np.int64).copy()]
    return out


def _eval_reduce(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return {k: (a[k] + b[k]) for k in a}  # arrays add, lists concatenate


def _mode(model: Model, kind: str) -> tuple[str, tuple]:
    if model.kind == "ovo":
        return "multiclass", tuple(float(c) for c in model.classes)
    if kind == "binary" and np.ndim(model.intercept_) == 0:
        classes = (float(model.classes[0]), float(model.classes[-1]))
        if is_ranking_model(model) and model.info.get("loss") == "ordinal":
            return "rank", classes
        return "binary", classes
    if kind in ("ordinal",) and (is_ranking_model(model) or np.ndim(model.intercept_) == 0):
        return "rank", tuple(float(c) for c in model.classes)
    return "multiclass", tuple(float(c) for c in model.classes)


def evaluate_model(
    model: Model,
    store: Store,
    engine: Engine,
    k: int = 10,
    plot: str | None = None,
    *,
    model_name: str | None = None,
    allow_wider: bool = False,
    allow_narrower: bool = False,
) -> dict:
    """Stream ``store`` against ``model`` and return the metrics (see the module docstring).

    ``allow_wider`` / ``allow_narrower``: score a store with many more / far fewer features
    than the model (see :func:`~ooc_svm.evaluation.scoring.check_width`).

    Raises
    ------
    ooc_svm.scoring.MismatchError
        When the store's task or labels do not fit the model (:func:`check_compatible`).
    """
    from ..solvers import SolverError

    meta = store.meta
    kind = meta.label_kind
    if kind == "real":
        raise SolverError(f"{store.path}: real-valued labels; evaluate needs classes or ranks")
    check_compatible(
        model,
        meta,
        model_name or "the model",
        str(store.path),
        allow_wider=allow_wider,
        allow_narrower=allow_narrower,
    )
    mode, classes = _mode(model, kind)
    if plot and mode != "binary":  # the metrics are still computed and printed
        log.warning("evaluate: --plot skipped: ROC curves need binary labels (store: %s)", kind)
        plot = None
    bc = (make_broadcast(model, meta.n_features), mode, classes, bool(meta.has_qid))
    part = engine.map_reduce(store, _eval_fn, bc, reduce=_eval_reduce)
    if part is None:
        return {"n": 0}
    qid = np.concatenate(part["qid"]) if "qid" in part else None
    if mode == "binary":
        out = _binary_metrics(model, part, qid, k)
    elif mode == "rank":
        s = np.concatenate(part["scores"])
        y = np.concatenate(part["y"])
        out = M.ranking_metrics(y, s, qid, k)
    else:
        correct, n = (int(v) for v in part["counts"])
        out = {"n": n, "accuracy": correct / n if n else math.nan}
    out["label_kind"] = kind
    if is_ranking_model(model):
        out["threshold_trained"] = False
    out = M.json_safe(out)
    if plot and mode == "binary":  # after the metrics: a plot that fails keeps them
        from .reports import plot_roc_pr

        s = np.concatenate(part["scores"])
        t = np.concatenate(part["pos"])
        try:
            plot_roc_pr(s, t, plot, model.info.get("path"), str(store.path))
        except OSError as e:
            raise PlotError(
                f"--plot {plot}: cannot write the figure ({e.strerror or e}); the metrics "
                "above are complete",
                out,
            ) from None
        log.info("wrote %s (ROC and precision-recall curves)", plot)
    return out


class PlotError(OSError):
    """``--plot`` could not be written; ``metrics`` holds the complete metrics."""

    def __init__(self, message: str, metrics: dict) -> None:
        super().__init__(message)
        self.metrics = metrics


def _binary_metrics(model: Model, part: dict, qid, k: int) -> dict:
    tp, fp, tn, fn = (int(v) for v in part["counts"])
    counts = {"n": tp + fp + tn + fn}
    counts.update(M.counts_metrics(tp, fp, tn, fn))
    s = np.concatenate(part["scores"])
    t = np.concatenate(part["pos"])
    free = {"prbep": M.prbep(t, s, True), "auc": M.roc_auc(t, s, True)}
    if qid is not None:
        free["pairwise_accuracy"] = M.pairwise_accuracy(t.astype(np.float64), s, qid)
        free[f"ndcg@{k}"] = M.ndcg_at_k(t.astype(np.float64), s, qid, k)
    if is_ranking_model(model):  # threshold-free metrics first: the threshold is not trained
        n = counts.pop("n")
        return {"n": n, **free, **counts}
    return {**counts, **free}


def evaluate_store(
    model: Model,
    store: Store,
    k: int = 10,
    plot: str | None = None,
    scheduler: str | None = None,
    *,
    model_name: str | None = None,
    allow_wider: bool = False,
    allow_narrower: bool = False,
) -> dict:
    """:func:`evaluate_model` on an engine made for ``scheduler`` (None: local default)."""
    from ..engine import make_engine

    with make_engine(scheduler) as engine:
        return evaluate_model(
            model, store, engine, k, plot, model_name=model_name, allow_wider=allow_wider,
            allow_narrower=allow_narrower,
        )  # fmt: skip


__all__ = ["PlotError", "evaluate_model", "evaluate_store"]
