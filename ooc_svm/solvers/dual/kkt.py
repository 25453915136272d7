"""The final KKT check of the dual solvers: every row's KKT condition against α, the expansion
and the intercept (largest violation, LIBSVM's m(α) − M(α)).

Two ways, one result:

- :func:`kkt_violation_pass`, the independent streamed pass: f recomputed for every row from
  the support vectors (n_rows × n_SV kernel values);
- :func:`maintained_kkt_pass` / :func:`maintained_kkt_rows`: the same statistics from the
  f (gradient) the solver maintained during its run, certified by recomputing f exactly on a
  sample of rows (the :data:`SAMPLE_WORST` most violating rows of each shard, the rows holding
  m(α) and M(α), and about :data:`SAMPLE_RANDOM` rows drawn by a hash of their global index).
  When the sample's largest drift |f_exact − f_maintained| exceeds
  ``DRIFT_FRACTION · tol``, or is large enough to flip the verdict (|max violation − tol| ≤
  drift), the caller falls back to the independent pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ...engine.base import Engine, ShardState
from ...model.expansion import (
    Expansion,
)
from ..reduce import none_is_identity
from .rows import WorkingRows, shard_rows

if TYPE_CHECKING:
    from ...store.base import Store

log = logging.getLogger(__name__)

#: rows drawn at random (by a hash of the global row index) for the exact check of a maintained f
SAMPLE_RANDOM = 1024
#: most violating rows of each shard (and of the in-memory rows) checked exactly as well
SAMPLE_WORST = 64
#: largest accepted drift of the maintained f, as a fraction of ``tol``
DRIFT_FRACTION = 0.1
#: seed of the hash that draws the random sample (fixed: the check is reproducible)
SAMPLE_SEED = 0x5EED

_KEYS = (
    "max_violation",
    "n_violators",
    "m_up",
    "m_low",
    "hinge",
    "n_sv",
    "n_bound_sv",
    "sum_alpha",
    "sum_y_alpha",
    "cost_hinge",
)


def _violations(y, a, g, intercept, C):
    """(viol, −yG, up, low, ξ, at0, atC, eps) of rows with labels ±1, α, f − intercept = g."""
    yf = y * (g + intercept)
    eps = 1e-12 * C
    at0 = a <= eps
    atC = a >= C - eps
    free = ~(at0 | atC)
    viol = np.zeros(a.size)
    viol[at0] = np.maximum(0.0, 1.0 - yf[at0])
    viol[atC] = np.maximum(0.0, yf[atC] - 1.0)
    viol[free] = np.abs(yf[free] - 1.0)
    # LIBSVM's criterion on G = y g − 1: −yG = y − g
    myg = y - g
    up = (~atC & (y > 0)) | (~at0 & (y < 0))
    low = (~atC & (y < 0)) | (~at0 & (y > 0))
    xi = np.maximum(0.0, 1.0 - yf)
    return viol, myg, up, low, xi, at0, atC, eps


def kkt_part(
    y: np.ndarray,
    a: np.ndarray,
    g: np.ndarray,
    intercept: float,
    C: float | tuple[float, float] | np.ndarray,
    tol: float,
) -> tuple:
    """The KKT statistics of some rows (reduced over shards by :func:`_kkt_reduce`).

    Parameters
    ----------
    y : ndarray
        Labels ±1.
    a : ndarray
        α of the rows.
    g : ndarray
        f(x) without the intercept, Σⱼ yⱼαⱼK(xⱼ, x), of the rows.
    intercept : float
        Added to ``g``.
    C : float, (C_neg, C_pos) or ndarray
        The upper bound (per class, or per row).
    tol : float
        Violations above it are counted.

    Returns
    -------
    tuple
        In the order of the keys of :func:`kkt_violation_pass`'s result.
    """
    if isinstance(C, tuple):  # class weights: (C_neg, C_pos), each row's bound C_{y_i}
        C = np.where(y > 0, C[1], C[0])
    viol, myg, up, low, xi, _, atC, eps = _violations(y, a, g, intercept, C)
    m_up = float(myg[up].max()) if up.any() else -np.inf
    m_low = float(myg[low].min()) if low.any() else np.inf
    return (
        float(viol.max()) if viol.size else 0.0,
        int((viol > tol).sum()),
        m_up,
        m_low,
        float(xi.sum()),
        int((a > eps).sum()),
        int(atC.sum()),
        float(a.sum()),
        float((y * a).sum()),
        float((C * xi).sum()),
    )


def _kkt_fn(shard, bc, st):
    exp, intercept, C, positive, tol = bc
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    g = exp.scores(ip, ix, shard.data)
    y = np.where(shard.y == positive, 1.0, -1.0)
    return kkt_part(y, np.asarray(st), g, intercept, C, tol), st


@none_is_identity
def _kkt_reduce(p, q):
    return (
        max(p[0], q[0]),
        p[1] + q[1],
        max(p[2], q[2]),
        min(p[3], q[3]),
        p[4] + q[4],
        p[5] + q[5],
        p[6] + q[6],
        p[7] + q[7],
        p[8] + q[8],
        p[9] + q[9],
    )


def _bound(C):
    """``C`` for a KKT pass: one float, or ``(C_neg, C_pos)`` with class weights."""
    if isinstance(C, (tuple, list)):
        return (float(C[0]), float(C[1]))
    return float(C)


def _as_dict(r: tuple, tol: float) -> dict:
    d = dict(zip(_KEYS, r, strict=True))
    d["gap"] = d["m_up"] - d["m_low"]
    d["ok"] = bool(d["max_violation"] <= tol)
    return d


def kkt_violation_pass(
    store: Store,
    engine: Engine,
    state: ShardState,
    expansion: Expansion,
    intercept: float,
    C: float | tuple[float, float],
    positive: float,
    tol: float,
) -> dict:
    """Independent streamed check of every row's KKT condition.

    With f(x) = expansion(x) + intercept and αᵢ from ``state``: αᵢ = 0 needs yᵢf(xᵢ) ≥ 1,
    αᵢ = C needs yᵢf(xᵢ) ≤ 1, 0 < αᵢ < C needs yᵢf(xᵢ) = 1.

    Returns
    -------
    dict
        ``max_violation`` (largest violation of those conditions), ``n_violators`` (rows
        violating by more than ``tol``), ``gap`` (LIBSVM's m(α) − M(α), which does not depend
        on the intercept), ``hinge`` (Σ max(0, 1 − yᵢf(xᵢ))), ``n_sv``, ``n_bound_sv``,
        ``sum_alpha``, ``sum_y_alpha``, ``cost_hinge`` (Σ C_{y_i} max(0, 1 − yᵢf(xᵢ))), ``ok``
        (max_violation ≤ tol), ``source`` (``"exact"``). ``C`` may be ``(C_neg, C_pos)``
        (class weights: each row's upper bound is its class's C).
    """
    r = engine.map_reduce(
        store,
        _kkt_fn,
        (expansion, float(intercept), _bound(C), float(positive), float(tol)),
        reduce=_kkt_reduce,
        state=state,
    )
    d = _as_dict(r, tol)
    d["source"] = "exact"
    return d


# ------------------------------------------------------------------------------------------
# the check from a maintained f
# ------------------------------------------------------------------------------------------
def _hash_unit(gids: np.ndarray, seed: int) -> np.ndarray:
    """A reproducible pseudo-random number in [0, 1) per global row (splitmix64 finaliser)."""
    h = gids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed & 0xFFFFFFFF)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def sample_for_check(
    gids: np.ndarray,
    y: np.ndarray,
    a: np.ndarray,
    g: np.ndarray,
    intercept: float,
    C: float | tuple[float, float] | np.ndarray,
    rate: float,
) -> np.ndarray:
    """Local indices of the rows whose f is recomputed exactly: the :data:`SAMPLE_WORST` most
    violating, the rows holding m(α) and M(α), and those whose hash of the global row is below
    ``rate`` (sorted, unique)."""
    if isinstance(C, tuple):
        C = np.where(y > 0, C[1], C[0])
    viol, myg, up, low, *_ = _violations(y, a, g, intercept, C)
    parts = [np.flatnonzero(_hash_unit(gids, SAMPLE_SEED) < rate)]
    if viol.size > SAMPLE_WORST:
        parts.append(np.argpartition(viol, viol.size - SAMPLE_WORST)[-SAMPLE_WORST:])
    else:
        parts.append(np.arange(viol.size))
    for mask, pick in ((up, np.argmax), (low, np.argmin)):
        idx = np.flatnonzero(mask)
        if idx.size:
            parts.append(idx[[int(pick(myg[idx]))]])
    return np.unique(np.concatenate(parts).astype(np.int64))


def _maintained_fn(shard, bc, st):
    intercept, C, positive, tol, rate = bc
    a, g = np.asarray(st[0]), np.asarray(st[1])
    y = np.where(shard.y == positive, 1.0, -1.0)
    gids = np.arange(shard.row_start, shard.row_start + shard.n_rows, dtype=np.int64)
    part = kkt_part(y, a, g, intercept, C, tol)
    idx = sample_for_check(gids, y, a, g, intercept, C, rate)
    return (part, [shard_rows(shard, idx, positive, a)], [g[idx]]), st


@none_is_identity
def _maintained_reduce(p, q):
    return (_kkt_reduce(p[0], q[0]), p[1] + q[1], p[2] + q[2])


def _certify(r: tuple, rows: WorkingRows, g_kept: np.ndarray, exp: Expansion, tol: float):
    """The KKT result of statistics ``r`` from a maintained f when the exact f of ``rows``
    agrees with ``g_kept`` (see the module's docstring), else None."""
    d = _as_dict(r, tol)
    drift = 0.0
    if rows.n:
        ip, ix, data = rows.csr()
        exact = exp.scores(ip, ix, data)
        drift = float(np.max(np.abs(exact - g_kept)))
    d.update(source="maintained", drift=drift, n_checked=int(rows.n))
    if not (drift <= DRIFT_FRACTION * tol and abs(d["max_violation"] - tol) > drift):
        log.info(
            "KKT check: the maintained f drifted by %.3g on %d sampled rows (max violation "
            "%.3g, tol %.3g): checking every row exactly",
            drift,
            rows.n,
            d["max_violation"],
            tol,
        )
        return None
    return d


def maintained_kkt_pass(
    store: Store,
    engine: Engine,
    state: ShardState,
    expansion: Expansion,
    intercept: float,
    C: float | tuple[float, float],
    positive: float,
    tol: float,
) -> dict | None:
    """The KKT result of :func:`kkt_violation_pass` from the f a solver maintained, or None.

    ``state`` is each shard's ``(α, f − intercept)``; one streamed pass without kernel work
    computes the statistics and gathers the sample, whose f is recomputed from ``expansion``
    (sample rows × SVs kernel values). Returns None when the sample shows a drift too large
    to trust (then make the independent pass). The result also has ``source``
    (``"maintained"``), ``drift`` (largest |f_exact − f| on the sample) and ``n_checked``.
    """
    rate = min(1.0, SAMPLE_RANDOM / max(1, int(store.meta.n_rows)))
    r = engine.map_reduce(
        store,
        _maintained_fn,
        (float(intercept), _bound(C), float(positive), float(tol), rate),
        reduce=_maintained_reduce,
        state=state,
    )
    rows = WorkingRows.concat(r[1])
    return _certify(r[0], rows, np.concatenate(r[2]), expansion, tol)


def maintained_kkt_rows(
    rows: WorkingRows,
    g: np.ndarray,
    expansion: Expansion,
    intercept: float,
    C: float | tuple[float, float] | np.ndarray,
    tol: float,
) -> dict | None:
    """:func:`maintained_kkt_pass` of rows in memory (every row of the problem, with α in
    ``rows.alpha`` and the maintained f − intercept in ``g``)."""
    rate = min(1.0, SAMPLE_RANDOM / max(1, rows.n))
    C = _bound(C) if not isinstance(C, np.ndarray) else C
    part = kkt_part(rows.y, rows.alpha, g, intercept, C, tol)
    idx = sample_for_check(rows.gids, rows.y, rows.alpha, g, intercept, C, rate)
    return _certify(part, rows.take(idx), g[idx], expansion, tol)


#: a solver's check from its maintained f, given the final expansion (None: not trusted)
MaintainedCheck = Callable[[Expansion], "dict | None"]
