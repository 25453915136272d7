"""perf's warm start from a trained model (``train --init MODEL``): its w, the points of its
last cutting planes and its aggregated plane (see :mod:`ooc_svm.solvers.warm`), and what a
perf model keeps of them for the next start."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import SolverError
from ..warm import (
    check_model,
    refuse_changed_rows,
    start_from,
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
    the model's aggregated plane ``cut`` with its offset ``r``, both as averages over the
    model's ``count`` rows (or pairs), or ``cut`` None. ``cut`` and ``points`` are over the
    columns ``cols`` (sorted, of the d + 1: d is the bias entry), those the model's planes
    touch: a wide store's model keeps them sparse (:func:`attach_warm`)."""

    w: np.ndarray
    cut: np.ndarray | None
    r: float
    count: int
    n_rows: int
    #: the points of the model's last planes (over ``cols``), whose cuts the first pass
    #: re-evaluates over every row
    points: list[np.ndarray]
    cols: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def dense(self, v: np.ndarray) -> np.ndarray:
        """``v`` (over :attr:`cols`) as a dense vector over the d + 1 entries."""
        out = np.zeros(self.w.shape[0])
        out[self.cols] = v
        return out


def _store_cols(model: Model, d: int) -> np.ndarray:
    """The model's warm columns as the store's (its bias entry, ``n_features``, moves to
    the store's ``d``: a store grown by ``ingest --append`` may be wider)."""
    nf = int(model.n_features)
    wc = getattr(model, "warm_cols_", None)
    cols = np.arange(nf + 1, dtype=np.int64) if wc is None else np.asarray(wc, dtype=np.int64)
    cols = cols.copy()
    cols[cols == nf] = d
    return cols


def perf_start(
    init: Any,
    meta: StoreMeta,
    classes: list[float] | None,
    loss: str,
    bias: float,
    *,
    weights: tuple[float, float] = (1.0, 1.0),
) -> PerfStart:
    """perf's starting point from ``init`` (a :class:`~ooc_svm.solvers.warm.Start`, or what
    :func:`~ooc_svm.solvers.warm.start_from` takes; checked by :func:`check_perf_model`).

    The model's plane is used only when the store's first shards are the model's rows and
    its rows were weighted alike (``weights``: the relative class costs C_k / C of this
    training; ``balanced`` ones move with the counts); else the start is w alone.
    """
    start = start_from(init, meta)
    assert start is not None
    where, model = start.where, start.model
    check_model(model, meta, where, classes=classes)
    check_perf_model(model, where, loss)
    status = start.status
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
    cols = _store_cols(model, d)
    cut, r, count = None, 0.0, 0
    wc = getattr(model, "warm_cut_", None)
    spec = model.info.get("warm_cut")
    if status == "prefix" and wc is not None and isinstance(spec, dict):
        same = np.allclose(spec.get("weights", [1.0, 1.0]), weights, rtol=1e-12, atol=0.0)
        if same and float(spec.get("bias", bias)) == bias and int(spec.get("count", 0)) > 0:
            cut = np.asarray(wc, dtype=np.float64).copy()
            r, count = float(spec["r"]), int(spec["count"])
    points = []
    wp = getattr(model, "warm_points_", None)
    if wp is not None:
        for row in np.asarray(wp, dtype=np.float64)[:WARM_POINTS_USED]:
            p = row.copy()
            if bias == 0.0:
                p[cols == d] = 0.0
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
    return PerfStart(w, cut, r, count, n_old, points, cols)


def aggregate_cut(ws: Any) -> tuple[np.ndarray, float] | None:
    """The α-weighted mean plane ``(ḡ, r̄)`` of a perf working set after its last QP (over
    the working set's columns), or None when α = 0. ``w = (Σα)·ḡ``; with the model, a later
    training on the grown store starts from it."""
    alpha = np.asarray(ws.alpha, dtype=np.float64)
    A = float(alpha.sum()) if alpha.size else 0.0
    if not (A > 0.0) or len(ws) != alpha.shape[0]:
        return None
    g = ws.combine(alpha) / A
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
    """:func:`attach_warm` with the plane alone (the ranking losses: over the features,
    no bias entry)."""
    attach_warm(model, cut, [], count, bias, weights)


def attach_warm(
    model: Model,
    cut: tuple[np.ndarray, float] | None,
    points: list[np.ndarray],
    count: int,
    bias: float,
    weights: tuple[float, float] | None = None,
    cols: np.ndarray | None = None,
) -> None:
    """Keep the warm-start state in the model, over the columns it touches only
    (``warm_cols_``): the aggregated plane (``warm_cut_``, ``info["warm_cut"]``: an average
    over ``count`` rows or pairs, built with relative class costs ``weights``, None: 1, 1)
    and the points of the active planes (``warm_points_``, float32, the first
    :data:`WARM_POINTS_USED`: all a warm start reads).

    The vectors are over the working columns: ``cols`` maps them to the store's (the
    remapped columns of a wide store; the last entry of a vector is the bias entry), None:
    they are over the model's columns already (with or without the bias entry).
    """
    nf = int(model.n_features)
    points = [np.asarray(p) for p in points[:WARM_POINTS_USED]]
    vecs = ([np.asarray(cut[0], dtype=np.float64)] if cut is not None else []) + points
    if not vecs:
        return
    used = np.zeros(vecs[0].shape[0], dtype=bool)  # the working columns any vector holds
    for v in vecs:
        used |= v != 0.0
    idx = np.flatnonzero(used)
    if cols is None:  # over the model's nf columns, or nf + 1 with the bias entry nf
        store = idx.astype(np.int64)
    else:
        full = np.append(np.asarray(cols, dtype=np.int64), nf)
        store = full[idx]
    order = np.argsort(store, kind="stable")
    store, idx = store[order], idx[order]
    if cut is not None and np.all(np.isfinite(vecs[0][idx])):
        model.warm_cut_ = vecs[0][idx].copy()
        model.info["warm_cut"] = {
            "r": float(cut[1]),
            "count": int(count),
            "bias": float(bias),
            "weights": [float(v) for v in (weights or (1.0, 1.0))],
        }
    rows = [p[idx].astype(np.float32) for p in points if np.all(np.isfinite(p))]
    if rows:
        model.warm_points_ = np.stack(rows)
    if model.warm_cut_ is not None or model.warm_points_ is not None:
        model.warm_cols_ = store
