"""``ooc-svm evaluate MODEL STORE [--json]``: prediction quality of a model on a store.

The store is scored in one streamed pass through the engine. What is kept in memory:

- binary labels: confusion counts (exact, from float64 decision values, summed per shard)
  plus, for ROC AUC and PRBEP, which need the order of all scores, the decision values as
  **float32 and one byte per label: 5 bytes per row** (50 MB for 10 million rows);
- rank labels: float32 scores and labels (8 bytes per row, plus 8 for the qid when the store
  has query ids) for pairwise accuracy, Kendall τ and NDCG@10;
- multiclass (one-vs-rest models): counts only.

Metrics: binary — n, accuracy, precision, recall, f1 (prediction: f(x) > 0), prbep, auc
(plus ndcg@10 and pairwise_accuracy when the store has qids); ranks — n, pairwise_accuracy,
kendall_tau (per query and averaged when there are qids), ndcg@10 (with qids); multiclass —
n, accuracy. See :mod:`ooc_svm.metrics` for the definitions.
"""

from __future__ import annotations

import argparse
import json
import logging
import math

import numpy as np

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="accuracy, precision/recall/F1, PRBEP, ROC AUC (binary) or pairwise accuracy, "
        "Kendall tau, NDCG@10 (ranks) of a model on a store",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="model directory written by `ooc-svm train`")
    p.add_argument("store", help="store, or SVMlight/LIBSVM text file (.gz .bz2 .xz, - for stdin)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--k", type=int, default=10, help="cut-off of NDCG (default 10)")
    p.add_argument(
        "--scheduler",
        default=None,
        help="local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
        "scheduler address tcp://HOST:PORT / scheduler-file.json",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="binary labels: draw the ROC and precision-recall curves (matplotlib)",
    )
    p.set_defaults(func=run)


def _eval_fn(shard, bc):
    """Per-shard partial: exact counts plus compact per-row data for order-based metrics."""
    from .predict import score_shard

    sbc, mode, classes, with_qid = bc
    s = score_shard(shard, sbc)
    y = np.asarray(shard.y, dtype=np.float64)
    out = {}
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
        pred = (
            np.asarray(classes, dtype=np.float64)[np.argmax(s, axis=1)]
            if s.ndim == 2
            else np.where(s > 0, classes[-1], classes[0])
        )
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


def evaluate_model(model, store, engine, k: int = 10, plot: str | None = None) -> dict:
    """Stream ``store`` against ``model`` and return the metrics (see the module docstring)."""
    from .. import metrics as M
    from ..solvers import SolverError
    from .predict import is_ranking_model, scoring_broadcast

    meta = store.meta
    kind = meta.label_kind
    if kind == "real":
        raise SolverError(f"{store.path}: real-valued labels; evaluate needs classes or ranks")
    if kind == "binary" and np.ndim(model.intercept_) == 0:
        mode = "binary"
        classes = (float(model.classes[0]), float(model.classes[-1]))
        if is_ranking_model(model) and model.info.get("loss") == "ordinal":
            mode = "rank"
    elif kind in ("ordinal",) and (is_ranking_model(model) or np.ndim(model.intercept_) == 0):
        mode = "rank"
        classes = tuple(float(c) for c in model.classes)
    else:
        mode = "multiclass"
        classes = tuple(float(c) for c in model.classes)
    if plot and mode != "binary":  # the metrics are still computed and printed
        log.warning("evaluate: --plot skipped: ROC curves need binary labels (store: %s)", kind)
        plot = None
    bc = (scoring_broadcast(model, meta.n_features), mode, classes, bool(meta.has_qid))
    part = engine.map_reduce(store, _eval_fn, bc, reduce=_eval_reduce)
    if part is None:
        return {"n": 0}
    qid = np.concatenate(part["qid"]) if "qid" in part else None
    if mode == "binary":
        tp, fp, tn, fn = (int(v) for v in part["counts"])
        out = {"n": tp + fp + tn + fn}
        out.update(M.counts_metrics(tp, fp, tn, fn))
        s = np.concatenate(part["scores"])
        t = np.concatenate(part["pos"])
        out["prbep"] = M.prbep(t, s, True)
        out["auc"] = M.roc_auc(t, s, True)
        if plot:
            from ..reports import plot_roc_pr

            plot_roc_pr(s, t, plot, model.info.get("path"), store.path)
        if qid is not None:
            out["pairwise_accuracy"] = M.pairwise_accuracy(t.astype(np.float64), s, qid)
            out[f"ndcg@{k}"] = M.ndcg_at_k(t.astype(np.float64), s, qid, k)
    elif mode == "rank":
        s = np.concatenate(part["scores"])
        y = np.concatenate(part["y"])
        out = M.ranking_metrics(y, s, qid, k)
    else:
        correct, n = (int(v) for v in part["counts"])
        out = {"n": n, "accuracy": correct / n if n else math.nan}
    out["label_kind"] = kind
    return M.json_safe(out)


def run(args) -> int:
    from ..engine import make_engine
    from ..model import load_model
    from ..store.text_view import open_input

    model = load_model(args.model)
    model.info.setdefault("path", args.model)  # named in the --plot title
    store = open_input(args.store, model.n_features)  # a store, or SVMlight text
    with make_engine(args.scheduler) as engine:
        res = evaluate_model(model, store, engine, args.k, plot=args.plot)
    if args.json:
        print(json.dumps(res))
    else:
        for key, v in res.items():
            print(f"{key:18s} {v:.6f}" if isinstance(v, float) else f"{key:18s} {v}")
    return 0
