"""The independent KKT pass: every row's KKT condition checked against α, the expansion and the
intercept in one streamed pass (largest violation, LIBSVM's m(α) − M(α))."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...engine.base import Engine, ShardState
from ...model.expansion import (
    Expansion,
)
from ..reduce import none_is_identity

if TYPE_CHECKING:
    from ...store.base import Store


def _kkt_fn(shard, bc, st):
    exp, intercept, C, positive, tol = bc
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    g = exp.scores(ip, ix, shard.data)
    y = np.where(shard.y == positive, 1.0, -1.0)
    a = np.asarray(st)
    yf = y * (g + intercept)
    if isinstance(C, tuple):  # class weights: (C_neg, C_pos), each row's bound C_{y_i}
        C = np.where(y > 0, C[1], C[0])
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
    m_up = float(myg[up].max()) if up.any() else -np.inf
    m_low = float(myg[low].min()) if low.any() else np.inf
    xi = np.maximum(0.0, 1.0 - yf)
    hinge = float(xi.sum())
    part = (
        float(viol.max()) if viol.size else 0.0,
        int((viol > tol).sum()),
        m_up,
        m_low,
        hinge,
        int((a > eps).sum()),
        int(atC.sum()),
        float(a.sum()),
        float((y * a).sum()),
        float((C * xi).sum()),
    )
    return part, st


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
        (max_violation ≤ tol). ``C`` may be ``(C_neg, C_pos)`` (class weights: each row's
        upper bound is its class's C).
    """
    r = engine.map_reduce(
        store,
        _kkt_fn,
        (expansion, float(intercept), _bound(C), float(positive), float(tol)),
        reduce=_kkt_reduce,
        state=state,
    )
    keys = (
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
    d = dict(zip(keys, r, strict=True))
    d["gap"] = d["m_up"] - d["m_low"]
    d["ok"] = bool(d["max_violation"] <= tol)
    return d
