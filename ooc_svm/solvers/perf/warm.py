"""perf's warm start from a trained model (``train --init MODEL``): its w, the points of its
last cutting planes and its aggregated plane (see :mod:`ooc_svm.solvers.warm`), and what a
perf model keeps of them for the next start."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import SolverError
from ..warm import (
    check_model,
    init_model,
    init_name,
    refuse_changed_rows,
    rows_status,
    trained_rows,
)

if TYPE_CHECKING:
    from ...model.model import Model
    from ...store.format import StoreMeta

log = logging.getLogger(__name__)

#: perf re-evaluates the planes of at most this many of the model's points (those of the
#: largest α) in its first pass: each costs about what a pass's arithmetic at one point
#: costs, and the planes beyond them added little (13 passes with 33 points, 14 with 8,
#: 15 with none, 21 cold, on a 10 % append to a 20,000-row store)
WARM_POINTS_USED = 8


def check_perf_model(model: Model, where: str, loss: str | None = None) -> None:
    """Refuse a model (checked by :func:`~ooc_svm.solvers.warm.check_model`) that cannot
    start perf: a kernel model, or one trained with another ``loss`` (perf's resolved one)."""
    m_solver = str(model.info.get("solver", ""))
    if model.kind != "linear":
        raise SolverError(
            f"{where}: a {model.kernel} kernel model cannot start perf (linear); train "
            f"with --solver {m_solver or 'smo'} --init, or drop --init"
        )
    m_loss = model.info.get("loss", "error")
    if loss is not None and m_loss != loss:
        raise SolverError(
            f"{where}: the model was trained with --loss {m_loss}, this training uses "
            f"--loss {loss}; give --loss {m_loss}, or drop --init"
        )


@dataclass
class PerfStart:
    """perf's start: ``w`` over the store's columns plus the bias entry (length d + 1), and
    the model's aggregated plane ``cut`` (same length) with its offset ``r``, both as
    averages over the model's ``count`` rows (or pairs), or ``cut`` None."""

    w: np.ndarray
    cut: np.ndarray | None
    r: float
    count: int
    n_rows: int
    #: the points of the model's last planes (each over the columns + bias entry), whose
    #: cuts the first pass re-evaluates over every row
    points: list[np.ndarray]


def perf_start(
    init: Any,
    meta: StoreMeta,
    classes: list[float] | None,
    loss: str,
    bias: float,
    *,
    weights: tuple[float, float] = (1.0, 1.0),
) -> PerfStart:
    """perf's starting point from ``init`` (checked by :func:`check_perf_model`).

    The model's plane is used only when the store's first shards are the model's rows and
    its rows were weighted alike (``weights``: the relative class costs C_k / C of this
    training; ``balanced`` ones move with the counts); else the start is w alone.
    """
    where = init_name(init)
    model = init_model(init)
    check_model(model, meta, where, classes=classes)
    check_perf_model(model, where, loss)
    status = rows_status(model, meta)
    if status == "changed":
        refuse_changed_rows(model, meta, where)
    if status == "unknown" and (trained_rows(model) or 0) > meta.n_rows:
        refuse_changed_rows(model, meta, where)
    d = int(meta.n_features)
    w = np.zeros(d + 1)
    coef = np.asarray(model.coef_, dtype=np.float64).ravel()
    w[: coef.shape[0]] = coef
    m_bias = float(model.info.get("bias", 1.0 if model.intercept_ else 0.0) or 0.0)
    if bias != 0.0 and m_bias != 0.0:
        w[d] = float(model.intercept_) / bias
    cut, r, count = None, 0.0, 0
    wc = getattr(model, "warm_cut_", None)
    spec = model.info.get("warm_cut")
    if status == "prefix" and wc is not None and isinstance(spec, dict):
        same = np.allclose(spec.get("weights", [1.0, 1.0]), weights, rtol=1e-12, atol=0.0)
        if same and float(spec.get("bias", bias)) == bias and int(spec.get("count", 0)) > 0:
            src = np.asarray(wc, dtype=np.float64)
            cut = np.zeros(d + 1)
            cut[: src.shape[0] - 1] = src[:-1]
            cut[d] = src[-1]
            r, count = float(spec["r"]), int(spec["count"])
    points = []
    wp = getattr(model, "warm_points_", None)
    if wp is not None:
        src = np.asarray(wp, dtype=np.float64)[:WARM_POINTS_USED]
        for row in src:
            p = np.zeros(d + 1)
            p[: src.shape[1] - 1] = row[:-1]
            p[d] = row[-1] if bias != 0.0 else 0.0
            points.append(p)
    n_old = trained_rows(model) or 0
    if cut is None:  # no appended-rows split without the plane: any boundary will do
        n_old = int(meta.n_rows)
    log.debug(
        "perf: warm start from %s (%s rows; %d plane points%s)",
        where,
        trained_rows(model) or "?",
        len(points),
        ", its aggregated plane" if cut is not None else "",
    )
    return PerfStart(w, cut, r, count, n_old, points)


def aggregate_cut(ws: Any, full: Any = None) -> tuple[np.ndarray, float] | None:
    """The α-weighted mean plane ``(ḡ, r̄)`` of a perf working set after its last QP
    (``full`` maps a vector over the working columns to the store's), or None when α = 0.
    ``w = (Σα)·ḡ``; with the model, a later training on the grown store starts from it."""
    alpha = np.asarray(ws.alpha, dtype=np.float64)
    A = float(alpha.sum()) if alpha.size else 0.0
    if not (A > 0.0) or len(ws) != alpha.shape[0]:
        return None
    g = ws.combine(alpha) / A
    if full is not None:
        g = full(g)
    r = float(np.dot(alpha, np.asarray(ws.r, dtype=np.float64)) / A)
    if not (np.all(np.isfinite(g)) and math.isfinite(r)):
        return None
    return g, r


def attach_cut(
    model: Model,
    cut: tuple[np.ndarray, float] | None,
    count: int,
    bias: float,
    weights: tuple[float, float] | None = None,
) -> None:
    """Keep the aggregated plane in the model (``warm_cut_`` and ``info["warm_cut"]``):
    over the features and the bias entry, an average over ``count`` rows (or pairs), built
    with relative class costs ``weights`` (None: 1, 1)."""
    if cut is None:
        return
    g = np.asarray(cut[0], dtype=np.float64)
    if g.shape[0] == model.n_features:  # the ranking losses have no bias entry
        g = np.append(g, 0.0)
    model.warm_cut_ = g
    model.info["warm_cut"] = {
        "r": float(cut[1]),
        "count": int(count),
        "bias": float(bias),
        "weights": [float(v) for v in (weights or (1.0, 1.0))],
    }


def attach_points(model: Model, points: list[np.ndarray], full: Any = None) -> None:
    """Keep the points of the active planes in the model (``warm_points_``, float32; at
    most :data:`~ooc_svm.model.model_files.WARM_POINTS_MAX`)."""
    from ...model.model_files import WARM_POINTS_MAX

    rows = []
    for p in points[:WARM_POINTS_MAX]:
        v = np.asarray(full(np.asarray(p, dtype=np.float64)) if full is not None else p)
        if v.shape[0] == model.n_features:
            v = np.append(v, 0.0)
        if v.shape[0] == model.n_features + 1 and np.all(np.isfinite(v)):
            rows.append(v.astype(np.float32))
    if rows:
        model.warm_points_ = np.stack(rows)
