"""Objectives and evaluation metrics.

Objectives (LIBLINEAR units, the bias weight regularised as with LIBLINEAR ``-B bias``):

- :func:`primal_objective` — ½‖w‖² + ½w_b² + C Σᵢ max(0, 1 − yᵢ(w·xᵢ + b)) with b = w_b·bias;
- :func:`pairwise_objective` — ½‖w‖² + C Σ_{(i,j)∈P} max(0, 1 − w·(xᵢ − xⱼ)) over the pairs
  P = {(i, j): yᵢ > yⱼ} (of the same query when ``qid`` is given), OP4 of Joachims 2006;
- :func:`duality_gap` — primal minus dual, with the dual in LIBSVM's sign convention.

Binary metrics take true labels and scores (or predicted labels) and the positive label:
:func:`accuracy`, :func:`precision`, :func:`recall`, :func:`f1`, :func:`prbep`
(precision/recall break-even point: precision among the ``n_pos`` highest scores),
:func:`roc_auc` (Mann–Whitney, ties count ½ — equal to ``sklearn.metrics.roc_auc_score``).

Ranking metrics take graded labels and scores, optionally query ids:
:func:`pairwise_accuracy` (fraction of pairs yᵢ > yⱼ with sᵢ > sⱼ, ties ½; within queries),
:func:`kendall_tau` (τ-b; with qids the mean over queries where it is defined),
:func:`ndcg_at_k` (gain 2^rel − 1, log₂ discount, tied scores share their gain as in
``sklearn.metrics.ndcg_score``; a query without relevant documents scores 0, as in sklearn;
the mean over queries).

All O(n log n) or better, from sorted scores; no pair is enumerated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels.ranking import count_pairs, rank_loss

# ------------------------------------------------------------------------------------------
# objectives
# ------------------------------------------------------------------------------------------


def primal_objective(
    X: Any,
    y: np.ndarray,
    coef: np.ndarray,
    intercept: float,
    C: float,
    bias: float = 1.0,
    positive: float | None = None,
) -> float:
    """½‖w‖² + ½w_b² + C Σ max(0, 1 − yᵢ(w·xᵢ + b)), b = intercept = w_b·bias.

    ``y`` holds ±1 labels, or any two values with ``positive`` naming the positive one.
    With ``bias = 0`` the intercept must be 0 and is not regularised.
    """
    import scipy.sparse as sp  # here: scoring a store (``evaluate``) never needs it

    X = sp.csr_matrix(X)
    w = np.asarray(coef, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64)
    ys = np.where(y == (1.0 if positive is None else positive), 1.0, -1.0)
    m = ys * (X @ w[: X.shape[1]] + intercept)
    wb = intercept / bias if bias else 0.0
    return float(0.5 * (w @ w + wb * wb) + C * np.maximum(0.0, 1.0 - m).sum())


def _groups(qid, n: int):
    if qid is None:
        return None
    _, gid = np.unique(np.asarray(qid), return_inverse=True)
    return gid.astype(np.int64)


def _rank_setup(y, s, qid):
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    levels, r = np.unique(y, return_inverse=True)
    r = r.astype(np.int64)
    gid = _groups(qid, y.shape[0])
    if gid is None:
        order = np.argsort(-s, kind="stable").astype(np.int64)
        starts = np.array([0, y.shape[0]], dtype=np.int64)
    else:
        order = np.lexsort((-s, gid)).astype(np.int64)
        g = gid[order]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(g)) + 1, [y.shape[0]]]).astype(
            np.int64
        )
    return r, levels.shape[0], order, starts


def pairwise_objective(
    X: Any, y: np.ndarray, coef: np.ndarray, C: float, qid: np.ndarray | None = None
) -> tuple[float, int]:
    """OP4: ½‖w‖² + C Σ_{(i,j)∈P} max(0, 1 − w·(xᵢ − xⱼ)); returns (objective, m = |P|)."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    w = np.asarray(coef, dtype=np.float64).ravel()
    s = np.asarray(X @ w[: X.shape[1]], dtype=np.float64)
    r, R, order, starts = _rank_setup(y, s, qid)
    _, loss = rank_loss(order, s, r, starts, R)
    m = int(count_pairs(order, r, starts, R))
    return float(0.5 * (w @ w) + C * loss), m


def duality_gap(primal: float, dual_objective: float) -> float:
    """P − D with ``dual_objective`` in LIBSVM's convention (min ½αᵀQα − eᵀα = −D)."""
    return float(primal + dual_objective)


# ------------------------------------------------------------------------------------------
# binary classification
# ------------------------------------------------------------------------------------------


def confusion(
    y_true: np.ndarray, y_pred: np.ndarray, positive: float = 1.0
) -> tuple[int, int, int, int]:
    """(tp, fp, tn, fn) with ``positive`` the positive label."""
    t = np.asarray(y_true) == positive
    p = np.asarray(y_pred) == positive
    tp = int(np.count_nonzero(t & p))
    fp = int(np.count_nonzero(~t & p))
    fn = int(np.count_nonzero(t & ~p))
    tn = int(t.shape[0] - tp - fp - fn)
    return tp, fp, tn, fn


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of equal labels."""
    y_true = np.asarray(y_true)
    return float(np.mean(y_true == np.asarray(y_pred))) if y_true.size else float("nan")


def _div(a: float, b: float) -> float:
    return float(a / b) if b else 0.0


def precision(y_true: np.ndarray, y_pred: np.ndarray, positive: float = 1.0) -> float:
    """tp / (tp + fp) (0 when nothing is predicted positive, like sklearn's zero_division=0)."""
    tp, fp, _, _ = confusion(y_true, y_pred, positive)
    return _div(tp, tp + fp)


def recall(y_true: np.ndarray, y_pred: np.ndarray, positive: float = 1.0) -> float:
    """tp / (tp + fn)."""
    tp, _, _, fn = confusion(y_true, y_pred, positive)
    return _div(tp, tp + fn)


def f1(y_true: np.ndarray, y_pred: np.ndarray, positive: float = 1.0) -> float:
    """2 tp / (2 tp + fp + fn)."""
    tp, fp, _, fn = confusion(y_true, y_pred, positive)
    return _div(2 * tp, 2 * tp + fp + fn)


def counts_metrics(tp: int, fp: int, tn: int, fn: int) -> dict:
    """accuracy, precision, recall, f1 from confusion counts."""
    n = tp + fp + tn + fn
    return {
        "accuracy": _div(tp + tn, n) if n else float("nan"),
        "precision": _div(tp, tp + fp),
        "recall": _div(tp, tp + fn),
        "f1": _div(2 * tp, 2 * tp + fp + fn),
    }


def roc_auc(y_true: np.ndarray, scores: np.ndarray, positive: float = 1.0) -> float:
    """Area under the ROC curve (ties ½); NaN when one class is absent."""
    t = np.asarray(y_true) == positive
    s = np.asarray(scores, dtype=np.float64)
    n_pos = int(np.count_nonzero(t))
    n_neg = t.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    # average ranks of the positives (ties get their mean rank)
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    first = np.concatenate([[True], ss[1:] != ss[:-1]])
    idx = np.flatnonzero(first)
    ends = np.concatenate([idx[1:], [ss.shape[0]]])
    avg = (idx + ends + 1) / 2.0  # mean 1-based rank of each tie block
    ranks = np.empty(ss.shape[0])
    ranks[order] = np.repeat(avg, ends - idx)
    u = ranks[t].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def prbep(y_true: np.ndarray, scores: np.ndarray, positive: float = 1.0) -> float:
    """Precision/recall break-even point: precision (= recall) among the ``n_pos`` best scores.

    Ties at the cut are resolved in favour of neither class: the tied block contributes its
    positive fraction proportionally.
    """
    t = np.asarray(y_true) == positive
    s = np.asarray(scores, dtype=np.float64)
    k = int(np.count_nonzero(t))
    if k == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    st = s[order]
    tt = t[order]
    thr = st[k - 1]
    above = st > thr
    tied = st == thr
    n_above = int(np.count_nonzero(above))
    hits = float(np.count_nonzero(tt & above))
    n_tied = int(np.count_nonzero(tied))
    if n_tied:
        hits += (k - n_above) * np.count_nonzero(tt & tied) / n_tied
    return float(hits / k)


# ------------------------------------------------------------------------------------------
# ranking
# ------------------------------------------------------------------------------------------


def pairwise_accuracy(y: np.ndarray, scores: np.ndarray, qid: np.ndarray | None = None) -> float:
    """Fraction of pairs (yᵢ > yⱼ, same query) ordered correctly (sᵢ > sⱼ), ties ½."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    gid = _groups(qid, y.shape[0])
    if gid is None:
        gid = np.zeros(y.shape[0], dtype=np.int64)
    good = 0.0
    total = 0
    order = np.lexsort((y, gid))
    gs = gid[order]
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(gs)) + 1, [y.shape[0]]])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        idx = order[a:b]
        g_good, g_total = _pairs_correct(y[idx], s[idx])
        good += g_good
        total += g_total
    return float(good / total) if total else float("nan")


def _pairs_correct(y: np.ndarray, s: np.ndarray) -> tuple[float, int]:
    """(Σ over pairs yᵢ>yⱼ of [sᵢ>sⱼ] + ½[sᵢ=sⱼ], number of such pairs) in O(n log n)."""
    if y.shape[0] < 2:
        return 0.0, 0
    levels = np.unique(y)
    good = 0.0
    total = 0
    # process labels from the lowest: keep the sorted scores of all lower-labelled items
    lower = np.zeros(0)
    for lv in levels:
        cur = s[y == lv]
        if lower.size:
            less = np.searchsorted(lower, cur, side="left")
            leq = np.searchsorted(lower, cur, side="right")
            good += float(less.sum()) + 0.5 * float((leq - less).sum())
            total += cur.size * lower.size
        lower = np.sort(np.concatenate([lower, cur]))
    return good, total


def kendall_tau(y: np.ndarray, scores: np.ndarray, qid: np.ndarray | None = None) -> float:
    """Kendall's τ-b between labels and scores (with qids: mean over queries where defined)."""
    from scipy.stats import kendalltau

    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    gid = _groups(qid, y.shape[0])
    if gid is None:
        t = kendalltau(y, s).statistic
        return float(t)
    vals = []
    order = np.argsort(gid, kind="stable")
    gs = gid[order]
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(gs)) + 1, [y.shape[0]]])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        idx = order[a:b]
        if idx.size < 2 or np.all(y[idx] == y[idx[0]]) or np.all(s[idx] == s[idx[0]]):
            continue
        t = kendalltau(y[idx], s[idx]).statistic
        if np.isfinite(t):
            vals.append(float(t))
    return float(np.mean(vals)) if vals else float("nan")


def _dcg_ties(gains: np.ndarray, s: np.ndarray, k: int) -> float:
    """DCG@k where tied scores share the mean gain of their block (sklearn's tie handling)."""
    order = np.argsort(-s, kind="mergesort")
    ss = s[order]
    gg = gains[order]
    disc = 1.0 / np.log2(np.arange(ss.shape[0]) + 2.0)
    disc[k:] = 0.0
    first = np.concatenate([[True], ss[1:] != ss[:-1]])
    starts = np.flatnonzero(first)
    ends = np.concatenate([starts[1:], [ss.shape[0]]])
    total = 0.0
    for a, b in zip(starts, ends, strict=True):
        total += gg[a:b].mean() * disc[a:b].sum()
    return float(total)


def ndcg_at_k(
    y: np.ndarray, scores: np.ndarray, qid: np.ndarray | None = None, k: int = 10
) -> float:
    """Mean NDCG@k over queries (one query when ``qid`` is None); gains 2^y − 1."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    gid = _groups(qid, y.shape[0])
    if gid is None:
        gid = np.zeros(y.shape[0], dtype=np.int64)
    order = np.argsort(gid, kind="stable")
    gs = gid[order]
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(gs)) + 1, [y.shape[0]]])
    vals = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        idx = order[a:b]
        gains = np.power(2.0, y[idx]) - 1.0
        ideal = np.sort(gains)[::-1]
        disc = 1.0 / np.log2(np.arange(ideal.shape[0]) + 2.0)
        idcg = float((ideal[:k] * disc[:k]).sum())
        vals.append(0.0 if idcg == 0 else _dcg_ties(gains, s[idx], k) / idcg)
    return float(np.mean(vals)) if vals else float("nan")


def binary_metrics(
    y_true: np.ndarray, scores: np.ndarray, positive: float, negative: float
) -> dict:
    """All binary metrics from labels and decision values (prediction: score > 0)."""
    y_true = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    pred = np.where(s > 0, positive, negative)
    tp, fp, tn, fn = confusion(y_true, pred, positive)
    out: dict[str, float] = {"n": int(y_true.shape[0])}
    out.update(counts_metrics(tp, fp, tn, fn))
    out["prbep"] = prbep(y_true, s, positive)
    out["auc"] = roc_auc(y_true, s, positive)
    return out


def ranking_metrics(
    y: np.ndarray, scores: np.ndarray, qid: np.ndarray | None = None, k: int = 10
) -> dict:
    """pairwise_accuracy, kendall_tau and (with qids) ndcg@k."""
    out = {
        "n": int(np.asarray(y).shape[0]),
        "pairwise_accuracy": pairwise_accuracy(y, scores, qid),
        "kendall_tau": kendall_tau(y, scores, qid),
    }
    if qid is not None:
        out[f"ndcg@{k}"] = ndcg_at_k(y, scores, qid, k)
    return out


def json_safe(d: dict) -> dict:
    """NaN values replaced by None (JSON has no NaN)."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}
