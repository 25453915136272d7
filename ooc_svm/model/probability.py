"""Probability outputs for SVM decision values (Platt scaling) and calibration measures.

Binary models
    Platt (1999), *Probabilistic outputs for support vector machines and comparisons to
    regularized likelihood methods*, fits ``P(y=1 | f) = 1 / (1 + exp(A·f + B))`` to decision
    values ``f`` by maximum likelihood against the prior-corrected targets
    ``hi = (N₊ + 1) / (N₊ + 2)`` for positive and ``lo = 1 / (N₋ + 2)`` for negative rows.
    :func:`sigmoid_train` is the numerically stable Newton method with backtracking line search
    of Lin, Lin & Weng (2007), *A note on Platt's probabilistic outputs for support vector
    machines* (Algorithm 1) — exactly LIBSVM's ``sigmoid_train`` (``max_iter`` 100,
    ``min_step`` 1e-10, ``sigma`` 1e-12, ``eps`` 1e-5), summing in the same order so that it
    agrees with LIBSVM to rounding. :func:`sigmoid_predict` is LIBSVM's ``sigmoid_predict``
    (never evaluates ``exp`` of a positive number).

    The decision values must come from models that did not see the rows (Platt §2.2): they
    are cross-validated by :mod:`ooc_svm.evaluation.cross_validation` (folds of shards, or of
    rows).

Multiclass models — which coupling is used when
    * **One-vs-rest models** (what ``ooc_svm.train`` makes for multiclass stores): one sigmoid
      per class, fitted on that class's cross-validated "class k against the rest" decision
      values; at prediction the K probabilities are divided by their sum
      (:func:`ovr_probability`, "normalised OvR"; Zadrozny & Elkan 2002 use the same
      normalisation).
    * **One-vs-one models** (LIBSVM's multiclass): one sigmoid per pair, and the pairwise
      probabilities ``r_ij`` are coupled by Wu, Lin & Weng (2004), *Probability estimates for
      multi-class classification by pairwise coupling*, method 2 — exactly LIBSVM's
      ``multiclass_probability`` (:func:`multiclass_probability`, :func:`ovo_probability`).

Calibration
    :func:`calibration` gives the Brier score and a reliability table (equal-width bins of the
    predicted probability: rows, mean prediction, observed positive fraction).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

log = logging.getLogger(__name__)

#: LIBSVM's constants in ``sigmoid_train`` (svm.cpp) and ``svm_predict_probability``.
MAX_ITER = 100
MIN_STEP = 1e-10
SIGMA = 1e-12
EPS = 1e-5
MIN_PROB = 1e-7


# ---------------------------------------------------------------------------------------------
# binary: Platt's sigmoid, Lin-Lin-Weng's Newton method
# ---------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _fval(f, pos, A, B, hi, lo):
    # sum_i t_i (A f_i + B) + log(1 + exp(-(A f_i + B))), written so that exp never overflows
    s = 0.0
    for i in range(f.shape[0]):
        t = hi if pos[i] else lo
        fApB = f[i] * A + B
        if fApB >= 0:
            s += t * fApB + math.log(1 + math.exp(-fApB))
        else:
            s += (t - 1) * fApB + math.log(1 + math.exp(fApB))
    return s


@njit(cache=True, nogil=True)
def _sigmoid_train(f, pos, prior1, prior0, max_iter, min_step, sigma, eps):
    hi = (prior1 + 1.0) / (prior1 + 2.0)
    lo = 1 / (prior0 + 2.0)
    A = 0.0
    B = math.log((prior0 + 1.0) / (prior1 + 1.0))
    fval = _fval(f, pos, A, B, hi, lo)
    status = 0  # 0 converged, 1 line search failed, 2 max_iter reached
    it = 0
    while it < max_iter:
        h11 = sigma
        h22 = sigma
        h21 = 0.0
        g1 = 0.0
        g2 = 0.0
        for i in range(f.shape[0]):
            fApB = f[i] * A + B
            if fApB >= 0:
                p = math.exp(-fApB) / (1.0 + math.exp(-fApB))
                q = 1.0 / (1.0 + math.exp(-fApB))
            else:
                p = 1.0 / (1.0 + math.exp(fApB))
                q = math.exp(fApB) / (1.0 + math.exp(fApB))
            d2 = p * q
            h11 += f[i] * f[i] * d2
            h22 += d2
            h21 += f[i] * d2
            d1 = (hi if pos[i] else lo) - p
            g1 += f[i] * d1
            g2 += d1
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        stepsize = 1.0
        while stepsize >= min_step:
            newA = A + stepsize * dA
            newB = B + stepsize * dB
            newf = _fval(f, pos, newA, newB, hi, lo)
            if newf < fval + 0.0001 * stepsize * gd:
                A = newA
                B = newB
                fval = newf
                break
            stepsize = stepsize / 2.0
        if stepsize < min_step:
            status = 1
            break
        it += 1
    if it >= max_iter:
        status = 2
    return A, B, it, status, fval


def _as_decision_values(dec_values) -> np.ndarray:
    f = np.ascontiguousarray(dec_values, dtype=np.float64)
    if f.ndim != 1:
        raise ValueError(f"decision values must be one-dimensional, got shape {f.shape}")
    if not np.all(np.isfinite(f)):
        raise ValueError("decision values contain NaN or infinity; check the model and the data")
    return f


def sigmoid_train(dec_values: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Fit Platt's sigmoid ``P(y=1|f) = 1 / (1 + exp(A·f + B))`` (LIBSVM's ``sigmoid_train``).

    Parameters
    ----------
    dec_values : array_like of float, shape (n,)
        Held-out decision values (positive means the positive class).
    labels : array_like, shape (n,)
        Row ``i`` is positive where ``labels[i] > 0`` (LIBSVM's rule: ±1, 0/1 or bool labels).

    Returns
    -------
    A, B : float
        The sigmoid's parameters (``A < 0`` for a useful classifier). The result depends on the
        multiset of (decision value, label) pairs only, not on the row order, up to rounding.

    Notes
    -----
    Newton's method on ``H + σI`` with backtracking (Armijo constant 1e-4), stopping when both
    gradient components are below 1e-5 — Lin, Lin & Weng (2007), Algorithm 1. A failed line
    search or the iteration limit is logged (LIBSVM prints the same two messages) and the last
    iterate is returned.
    """
    f = _as_decision_values(dec_values)
    y = np.asarray(labels)
    if y.shape != f.shape:
        raise ValueError(f"{f.shape[0]} decision values but labels of shape {y.shape}")
    pos = np.ascontiguousarray(y > 0)
    prior1 = float(np.count_nonzero(pos))
    prior0 = float(pos.size) - prior1
    A, B, it, status, fval = _sigmoid_train(f, pos, prior1, prior0, MAX_ITER, MIN_STEP, SIGMA, EPS)
    if status == 1:
        log.info("Line search fails in two-class probability estimates")
    elif status == 2:
        log.info("Reaching maximal iterations in two-class probability estimates")
    log.debug("sigmoid_train: A=%.6g B=%.6g after %d Newton steps (f=%.6g)", A, B, it, fval)
    return float(A), float(B)


def sigmoid_predict(
    dec_values: np.ndarray, A: float | np.ndarray, B: float | np.ndarray
) -> np.ndarray:
    """``P(y=1|f) = 1 / (1 + exp(A·f + B))`` evaluated without overflow (LIBSVM's form).

    Parameters
    ----------
    dec_values : array_like of float
        Decision values, any shape.
    A, B : float or array_like
        From :func:`sigmoid_train` (arrays broadcast against ``dec_values``, e.g. one sigmoid
        per column).

    Returns
    -------
    ndarray of float64, same shape as ``dec_values``.
    """
    f = np.asarray(dec_values, dtype=np.float64)
    fApB = f * np.asarray(A, dtype=np.float64) + np.asarray(B, dtype=np.float64)
    # exp(-|z|) never overflows: z >= 0 -> e/(1+e) with e = exp(-z); z < 0 -> 1/(1+exp(z))
    e = np.exp(-np.abs(fApB))
    return np.where(fApB >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


# ---------------------------------------------------------------------------------------------
# multiclass
# ---------------------------------------------------------------------------------------------
def multiclass_probability(r: np.ndarray) -> np.ndarray:
    """Couple pairwise probabilities into class probabilities (Wu, Lin & Weng 2004, method 2).

    A transcription of LIBSVM's ``multiclass_probability``: minimise
    ``Σ_i Σ_{j≠i} (r_ji p_i − r_ij p_j)²`` subject to ``Σ p = 1`` by the fixed-point iteration
    of the paper, stopping when ``max_t |(Qp)_t − pᵀQp| < 0.005 / k`` (at most
    ``max(100, k)`` sweeps).

    Parameters
    ----------
    r : array_like, shape (k, k)
        ``r[i, j]`` ≈ P(y = i | y ∈ {i, j}, x); ``r[j, i] = 1 − r[i, j]``; the diagonal is ignored.

    Returns
    -------
    ndarray, shape (k,)
        Class probabilities (non-negative, summing to 1).
    """
    r = np.asarray(r, dtype=np.float64)
    k = r.shape[0]
    if r.shape != (k, k):
        raise ValueError(f"pairwise probabilities must be a square matrix, got {r.shape}")
    max_iter = max(100, k)
    eps = 0.005 / k
    p = np.full(k, 1.0 / k)
    Q = np.zeros((k, k))
    for t in range(k):
        for j in range(t):
            Q[t, t] += r[j, t] * r[j, t]
            Q[t, j] = Q[j, t]
        for j in range(t + 1, k):
            Q[t, t] += r[j, t] * r[j, t]
            Q[t, j] = -r[j, t] * r[t, j]
    Qp = np.zeros(k)
    it = 0
    while it < max_iter:
        pQp = 0.0
        for t in range(k):
            Qp[t] = 0.0
            for j in range(k):
                Qp[t] += Q[t, j] * p[j]
            pQp += p[t] * Qp[t]
        if float(np.max(np.abs(Qp - pQp))) < eps:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t, t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t, t] + 2 * Qp[t])) / (1 + diff) / (1 + diff)
            for j in range(k):
                Qp[j] = (Qp[j] + diff * Q[t, j]) / (1 + diff)
                p[j] /= 1 + diff
        it += 1
    if it >= max_iter:
        log.info("Exceeds max_iter in multiclass_prob")
    return p


def ovo_probability(dec_values: np.ndarray, probA: np.ndarray, probB: np.ndarray) -> np.ndarray:
    """Class probabilities of one-vs-one models, exactly as LIBSVM's ``svm_predict_probability``.

    Parameters
    ----------
    dec_values : array_like, shape (n, k(k-1)/2)
        Pairwise decision values in LIBSVM's order (0v1, 0v2, …, 0v(k-1), 1v2, …); positive
        means the first class of the pair.
    probA, probB : array_like, shape (k(k-1)/2,)
        One sigmoid per pair.

    Returns
    -------
    ndarray, shape (n, k)
        Pairwise probabilities clipped to ``[1e-7, 1 − 1e-7]``, then taken as they are for
        ``k = 2`` or coupled by :func:`multiclass_probability` for ``k > 2``.
    """
    d = np.atleast_2d(np.asarray(dec_values, dtype=np.float64))
    m = d.shape[1]
    k = int(round((1 + math.sqrt(1 + 8 * m)) / 2))
    if k * (k - 1) // 2 != m or np.size(probA) != m or np.size(probB) != m:
        raise ValueError(f"{m} pairwise decision values do not match {np.size(probA)} sigmoids")
    pr = np.clip(sigmoid_predict(d, np.asarray(probA), np.asarray(probB)), MIN_PROB, 1 - MIN_PROB)
    out = np.empty((d.shape[0], k))
    iu = np.triu_indices(k, 1)  # row-major pairs: LIBSVM's order
    for n in range(d.shape[0]):
        r = np.zeros((k, k))
        r[iu] = pr[n]
        r[iu[1], iu[0]] = 1 - pr[n]
        out[n] = [r[0, 1], r[1, 0]] if k == 2 else multiclass_probability(r)
    return out


def ovr_probability(dec_values: np.ndarray, probA: np.ndarray, probB: np.ndarray) -> np.ndarray:
    """Class probabilities of one-vs-rest models: per-class sigmoids, normalised to sum 1.

    Parameters
    ----------
    dec_values : array_like, shape (n, k)
        Column ``c`` is the score of "class c against the rest".
    probA, probB : array_like, shape (k,)
        The sigmoid of every class, fitted on that class's held-out scores.

    Returns
    -------
    ndarray, shape (n, k)
        ``P_c / Σ_c' P_c'``; rows where every ``P_c`` underflows to 0 get ``1/k``.
    """
    d = np.atleast_2d(np.asarray(dec_values, dtype=np.float64))
    k = d.shape[1]
    if np.size(probA) != k or np.size(probB) != k:
        raise ValueError(f"{k} classes but {np.size(probA)} sigmoids")
    P = sigmoid_predict(d, np.asarray(probA), np.asarray(probB))
    s = P.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, P / np.where(s > 0, s, 1.0), 1.0 / k)


# ---------------------------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------------------------
@dataclass
class Calibration:
    """Brier score and reliability table of binary probability forecasts.

    Attributes
    ----------
    brier : float
        ``mean((p − y)²)`` with ``y ∈ {0, 1}``.
    log_loss : float
        ``−mean(y log p + (1 − y) log(1 − p))``, ``p`` clipped to ``[1e-15, 1 − 1e-15]``.
    edges : ndarray, shape (bins + 1,)
        Bin edges on [0, 1]; bin ``b`` is ``[edges[b], edges[b+1])``, the last one closed.
    count, mean_predicted, fraction_positive : ndarray, shape (bins,)
        Rows, mean ``p`` and observed positive fraction per bin (NaN for empty bins).
    """

    brier: float
    log_loss: float
    edges: np.ndarray
    count: np.ndarray
    mean_predicted: np.ndarray
    fraction_positive: np.ndarray

    @property
    def ece(self) -> float:
        """Expected calibration error: Σ_b (n_b / n) |mean p_b − fraction_b|."""
        ok = self.count > 0
        n = self.count.sum()
        d = np.abs(self.mean_predicted[ok] - self.fraction_positive[ok])
        return float(np.sum(self.count[ok] * d) / n) if n else float("nan")

    def table(self) -> str:
        """The reliability table as aligned text."""
        lines = [f"{'bin':>13} {'rows':>8} {'mean p':>8} {'observed':>8}"]
        for b in range(self.count.size):
            lines.append(
                f"[{self.edges[b]:.2f}, {self.edges[b + 1]:.2f}) {self.count[b]:8d} "
                f"{self.mean_predicted[b]:8.4f} {self.fraction_positive[b]:8.4f}"
            )
        return "\n".join(lines)


def calibration(y: np.ndarray, p: np.ndarray, bins: int = 10) -> Calibration:
    """Brier score, log loss and a reliability curve with ``bins`` equal-width bins.

    Parameters
    ----------
    y : array_like, shape (n,)
        Outcomes: positive where ``y > 0`` (bool, 0/1 or ±1).
    p : array_like, shape (n,)
        Predicted P(y = 1), in [0, 1].
    bins : int

    Returns
    -------
    Calibration
    """
    y = np.asarray(y)
    p = np.asarray(p, dtype=np.float64)
    if y.shape != p.shape or p.ndim != 1:
        raise ValueError(f"labels {y.shape} and probabilities {p.shape} must be equal 1-D shapes")
    if p.size and not (np.all(p >= 0) and np.all(p <= 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    if int(bins) < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    bins = int(bins)
    t = (y > 0).astype(np.float64)
    brier = float(np.mean((p - t) ** 2)) if p.size else float("nan")
    pc = np.clip(p, 1e-15, 1 - 1e-15)
    ll = float(-np.mean(t * np.log(pc) + (1 - t) * np.log1p(-pc))) if p.size else float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    b = np.minimum((p * bins).astype(np.int64), bins - 1)
    count = np.bincount(b, minlength=bins)
    sp = np.bincount(b, weights=p, minlength=bins)
    sy = np.bincount(b, weights=t, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(count > 0, sp / np.maximum(count, 1), np.nan)
        frac = np.where(count > 0, sy / np.maximum(count, 1), np.nan)
    return Calibration(brier, ll, edges, count, mean_p, frac)
