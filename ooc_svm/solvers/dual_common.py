"""Shared pieces of the dual solvers (smo, active-set, irwls) and of kernel-model scoring.

All dual solvers solve LIBSVM's C-SVC dual

    min_α  ½ αᵀQα − eᵀα    s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,     Q_ij = y_i y_j K(x_i, x_j)

with decision function f(x) = Σ_j y_j α_j K(x_j, x) + intercept (``intercept = −b`` in Platt's
notation u = w·x − b, ``−ρ`` in LIBSVM's).

Conventions (stable API):

- **Per-shard α.** The engine's per-shard state of a dual solver is one float64 array of
  αᵢ per shard row (:func:`init_alpha_state`); fns that take the state return it unchanged or
  updated (:func:`apply_alpha_updates`).
- **Working rows.** Rows brought into memory are a :class:`WorkingRows` (CSR + global row ids
  + ±1 labels + α), built by :func:`fetch_rows` (one streamed pass over only the shards that
  hold the rows) or :func:`build_working_rows` from fetched parts.
- **Expansions.** f(x) without intercept is an :class:`Expansion`: the SV rows and
  coefficients yᵢαᵢ (kernel) or a dense w (linear kernel). It is picklable: broadcast it.
  It lives in :mod:`ooc_svm.expansion` (shared with scoring) and is re-exported here.
- **KKT check.** :func:`kkt_violation_pass` is an independent streamed pass that, given α
  (shard state), the expansion and the intercept, checks every row's KKT condition and returns
  the largest violation (and LIBSVM's m(α) − M(α)).
- **Models.** :func:`make_model` builds the :class:`~ooc_svm.model.Model` from the SVs
  (``kind="linear"`` with ``coef_ = Σ yᵢαᵢxᵢ``, Platt eq. 22, for the linear kernel).
- **Class weights.** ``--class-weight`` gives per-class costs ``(C_neg, C_pos)``
  (:func:`dual_class_costs`): row i's box is ``0 ≤ αᵢ ≤ C_{y_i}`` (:func:`row_costs`), the
  KKT tests use ``α < C_{y_i}`` and the primal sums ``C_{y_i} ξᵢ``.
- **Scoring.** :func:`kernel_scores_pass` streams a store against a kernel (or linear) model in
  memory bounded by the model plus one shard per engine thread (used by predict / evaluate).
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.base import Engine, ShardState, concat_partials
from ..expansion import (  # re-exported: the expansion lives in ooc_svm.expansion
    Expansion,
    ScoringBroadcast,
    kernel_scores_pass,
    make_expansion,
    primal_w,
    score_shard,
    scoring_broadcast,
)
from ..kernels.kernel_functions import (
    KernelParams,
    row_sq_norms,
)
from ..model import Model
from .reduce import none_is_identity

if TYPE_CHECKING:  # imported where used: linear models never need scipy
    import scipy.sparse as sp

# --------------------------------------------------------------------------------------------
# per-shard α
# --------------------------------------------------------------------------------------------


def _zeros_for(info, _i):
    return np.zeros(int(info.n_rows), dtype=np.float64)


def init_alpha_state(engine: Engine, store) -> ShardState:
    """Per-shard state: a zero float64 α array per shard."""
    return engine.init_state(store, _zeros_for)


def _apply_updates_fn(shard, bc, st):
    gids, vals = bc
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    if hi > lo:
        st = np.array(st, copy=True)
        st[gids[lo:hi] - shard.row_start] = vals[lo:hi]
    return None, st


def split_updates_by_shard(store, gids: np.ndarray) -> list[int]:
    """Shard ids that hold any of the (sorted) global rows ``gids``."""
    if len(gids) == 0:
        return []
    starts = np.array([s.row_start for s in store.meta.shards], dtype=np.int64)
    sids = np.searchsorted(starts, gids, side="right") - 1
    return sorted(set(int(s) for s in np.unique(sids)))


def apply_alpha_updates(store, engine: Engine, state: ShardState, gids, values) -> None:
    """Set α[gid] = value in the per-shard state (visits only the shards concerned)."""
    gids = np.asarray(gids, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if gids.size == 0:
        return
    order = np.argsort(gids, kind="stable")
    gids, values = gids[order], values[order]
    shards = split_updates_by_shard(store, gids)
    engine.map_reduce(store, _apply_updates_fn, (gids, values), state=state, shards=shards)


# --------------------------------------------------------------------------------------------
# working rows
# --------------------------------------------------------------------------------------------
@dataclass
class WorkingRows:
    """Rows held in memory by a dual solver.

    Attributes
    ----------
    gids : int64 (m,)        global row indices
    indptr : int64 (m+1,)
    indices : int32 (nnz,)
    data : float32 (nnz,)
    y : float64 (m,)         ±1
    alpha : float64 (m,)
    """

    gids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray
    alpha: np.ndarray

    @property
    def n(self) -> int:
        return int(self.gids.shape[0])

    @property
    def nbytes(self) -> int:
        return int(
            sum(
                a.nbytes
                for a in (self.gids, self.indptr, self.indices, self.data, self.y, self.alpha)
            )
        )

    @property
    def u32(self) -> np.ndarray:
        """``indices`` viewed as uint32 for the kernels."""
        return self.indices.view(np.uint32)

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices as uint32, data) for the numba kernels."""
        return self.indptr, self.u32, self.data

    def sq_norms(self) -> np.ndarray:
        return row_sq_norms(self.indptr, self.u32, self.data, np.empty(self.n, dtype=np.float64))

    def to_scipy(self, n_features: int) -> sp.csr_matrix:
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n, n_features))

    @classmethod
    def empty(cls) -> WorkingRows:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(1, np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.float32),
            np.zeros(0),
            np.zeros(0),
        )

    def take(self, idx) -> WorkingRows:
        """The rows at local positions ``idx`` (a new, compact CSR)."""
        idx = np.asarray(idx)
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64, copy=False)
        starts = self.indptr[idx]
        lens = self.indptr[idx + 1] - starts
        indptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        sel = np.arange(int(indptr[-1]), dtype=np.int64) + np.repeat(starts - indptr[:-1], lens)
        return WorkingRows(
            self.gids[idx].copy(),
            indptr,
            self.indices[sel],
            self.data[sel],
            self.y[idx].copy(),
            self.alpha[idx].copy(),
        )

    @classmethod
    def concat(cls, items: Sequence[WorkingRows | None]) -> WorkingRows:
        parts = [p for p in items if p is not None and p.n]  # None: no rows
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        offs = np.cumsum([0] + [int(p.indptr[-1]) for p in parts])
        indptr = np.concatenate(
            [parts[0].indptr[:1]]
            + [p.indptr[1:] - p.indptr[0] + o for p, o in zip(parts, offs[:-1], strict=True)]
        )
        return cls(
            np.concatenate([p.gids for p in parts]),
            indptr.astype(np.int64),
            np.concatenate([p.indices[p.indptr[0] : p.indptr[-1]] for p in parts]),
            np.concatenate([p.data[p.indptr[0] : p.indptr[-1]] for p in parts]),
            np.concatenate([p.y for p in parts]),
            np.concatenate([p.alpha for p in parts]),
        )


def shard_rows(shard, local_idx, positive: float, alpha=None) -> WorkingRows:
    """Rows ``local_idx`` of a shard as :class:`WorkingRows` (labels mapped to ±1)."""
    local_idx = np.asarray(local_idx, dtype=np.int64)
    y = np.where(shard.y[local_idx] == positive, 1.0, -1.0)
    a = np.zeros(local_idx.size) if alpha is None else np.asarray(alpha)[local_idx].copy()
    full = WorkingRows(
        np.arange(shard.row_start, shard.row_start + shard.n_rows, dtype=np.int64),
        np.asarray(shard.indptr, dtype=np.int64),
        shard.indices,
        shard.data,
        np.zeros(shard.n_rows),
        np.zeros(shard.n_rows),
    )
    out = full.take(local_idx)
    out.y = y
    out.alpha = a
    return out


def _fetch_fn(shard, bc, st=None):
    gids, positive = bc
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    local = gids[lo:hi] - shard.row_start
    part = [shard_rows(shard, local, positive, st)] if hi > lo else None
    return part if st is None else (part, st)


def fetch_rows(
    store, engine: Engine, gids, positive: float, state: ShardState | None = None
) -> WorkingRows:
    """Bring the global rows ``gids`` into memory (α from ``state`` when given, else 0).

    Visits only the shards that hold them; rows come back sorted by global index.
    """
    gids = np.unique(np.asarray(gids, dtype=np.int64))
    if gids.size == 0:
        return WorkingRows.empty()
    shards = split_updates_by_shard(store, gids)
    parts = engine.map_reduce(
        store,
        _fetch_fn,
        (gids, float(positive)),
        reduce=concat_partials,
        state=state,
        shards=shards,
    )
    return build_working_rows(parts or [])


def build_working_rows(parts: list[WorkingRows]) -> WorkingRows:
    """One :class:`WorkingRows` from fetched parts (e.g. the reduce result of a pass)."""
    return WorkingRows.concat(list(parts))


# --------------------------------------------------------------------------------------------
# expansions, objectives
# --------------------------------------------------------------------------------------------
def dual_objective(rows: WorkingRows, kp: KernelParams, n_features: int) -> float:
    """½αᵀQα − eᵀα over the rows with α > 0 (LIBSVM sign; the rest contribute nothing).

    O(n_SV · nnz(SV)) kernel work: the SV expansion evaluated at the SVs.
    """
    nz = np.flatnonzero(rows.alpha > 0)
    if nz.size == 0:
        return 0.0
    sv = rows.take(nz)
    coef = sv.y * sv.alpha
    f = make_expansion(kp, n_features, sv, coef).scores(*sv.csr())
    return float(0.5 * np.dot(coef, f) - sv.alpha.sum())


# --------------------------------------------------------------------------------------------
# class weights: per-class box bounds
# --------------------------------------------------------------------------------------------
def _label_counts_fn(shard, bc):
    vals, counts = np.unique(np.asarray(shard.y, dtype=np.float64), return_counts=True)
    return {float(v): int(c) for v, c in zip(vals, counts, strict=True)}


@none_is_identity
def _label_counts_reduce(p, q):
    out = dict(p)
    for k, v in q.items():
        out[k] = out.get(k, 0) + v
    return out


def dual_class_costs(
    store, engine: Engine, params, neg: float, pos: float
) -> tuple[float, float] | None:
    """``(C_neg, C_pos)`` of ``--class-weight`` (None without): C times each class's weight
    (LIBSVM ``-wi``); ``balanced`` counts the labels in one streamed pass."""
    if params.class_weight is None:
        return None
    counts = None
    if str(params.class_weight).strip() == "balanced":
        counts = engine.map_reduce(store, _label_counts_fn, None, reduce=_label_counts_reduce)
    costs = params.class_costs(neg, pos, counts)
    return float(costs[0]), float(costs[1])


def row_costs(y: np.ndarray, C: float, costs: tuple[float, float] | None) -> np.ndarray:
    """Each row's upper bound ``C_{y_i}`` for ±1 labels ``y`` (``C`` for all without
    ``costs``)."""
    if costs is None:
        return np.full(np.shape(y), float(C))
    return np.where(np.asarray(y) > 0, float(costs[1]), float(costs[0]))


# --------------------------------------------------------------------------------------------
# KKT check pass
# --------------------------------------------------------------------------------------------
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
    store,
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


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------
def make_model(
    sv_rows: WorkingRows,
    intercept: float,
    kp: KernelParams,
    n_features: int,
    classes: tuple[float, float],
    info: dict | None = None,
) -> Model:
    """Model from support vectors (rows with α > 0; coefficient yᵢαᵢ) and the intercept.

    ``intercept`` is added to Σ yᵢαᵢK(xᵢ, x): pass ``−b`` (Platt) or ``−ρ`` (LIBSVM). The linear
    kernel gives ``kind="linear"`` with ``coef_ = Σ yᵢαᵢxᵢ`` (Platt eq. 22) and keeps no SVs.
    """
    import scipy.sparse as sp

    nz = np.flatnonzero(sv_rows.alpha > 0)
    sv = sv_rows.take(nz) if nz.size != sv_rows.n else sv_rows
    order = np.argsort(sv.gids, kind="stable")
    sv = sv.take(order)
    coef = sv.y * sv.alpha
    info = dict(info or {})
    info.setdefault("n_sv", int(sv.n))
    class_list = [float(classes[0]), float(classes[1])]
    if kp.kernel == "linear":
        return Model(
            kind="linear",
            n_features=n_features,
            classes=class_list,
            coef_=primal_w(sv, coef, n_features),
            intercept_=float(intercept),
            kernel="linear",
            gamma=kp.gamma,
            degree=kp.degree,
            coef0=kp.coef0,
            info=info,
        )
    X = sp.csr_matrix((sv.data.astype(np.float64), sv.indices, sv.indptr), shape=(sv.n, n_features))
    return Model(
        kind="kernel",
        n_features=n_features,
        classes=class_list,
        intercept_=float(intercept),
        support_vectors_=X,
        dual_coef_=coef,
        support_=sv.gids.copy(),
        kernel=kp.kernel,
        gamma=kp.gamma,
        degree=kp.degree,
        coef0=kp.coef0,
        info=info,
    )


# --------------------------------------------------------------------------------------------
# the dual solvers' common epilogue
# --------------------------------------------------------------------------------------------
def _collect_fn(shard, positive, st):
    a = np.asarray(st)
    idx = np.flatnonzero(a > 0.0)
    return ([shard_rows(shard, idx, positive, a)] if idx.size else None), st


def collect_support_vectors(
    store, engine: Engine, state: ShardState, positive: float, fn: Callable | None = None
) -> WorkingRows:
    """The rows with α > 0 (with α) from the per-shard state, in one streamed pass.

    ``fn(shard, positive, st)`` returns ``([WorkingRows] or None, st)``; the default reads
    an α-array state (:func:`init_alpha_state`).
    """
    parts = engine.map_reduce(
        store, fn or _collect_fn, positive, reduce=concat_partials, state=state
    )
    return WorkingRows.concat(parts or [])


@dataclass
class DualFinish:
    """What :func:`finish_dual` returns: the model and the KKT check (None when skipped)."""

    model: Model
    kkt: dict | None


def finish_dual(
    store,
    engine: Engine,
    sv: WorkingRows,
    intercept: float,
    kp: KernelParams,
    C: float | tuple[float, float],
    tol: float,
    classes: tuple[float, float],
    info: dict | Callable[[dict | None], dict],
    *,
    check: bool = True,
    state: ShardState | None = None,
    w: np.ndarray | None = None,
    keep_dual: bool = False,
    kkt: dict | None = None,
) -> DualFinish:
    """The dual solvers' epilogue: independent KKT pass, then the model.

    Parameters
    ----------
    sv : WorkingRows
        Support vectors with their α.
    intercept : float
        Added to Σ yᵢαᵢK(xᵢ, x) (``−b`` / ``−ρ``).
    info : dict or callable
        The model's ``info``, or a function of the KKT result (None when skipped) giving it
        (the primal objective needs the KKT pass's hinge sum).
    check : bool
        Run :func:`kkt_violation_pass` (skipped when ``kkt`` is given: a solver that already
        made the pass).
    state : ShardState, optional
        α of every row for the check; default: built from ``sv`` (one update pass).
    w : ndarray, optional
        Linear kernel: the explicit w (bound SVs folded in, Platt eq. 22); it becomes the
        expansion of the check and the model's ``coef_``.
    keep_dual : bool
        Linear models keep their SVs, dual coefficients and global row indices (so they can
        warm-start a later run).
    """
    nf = int(store.meta.n_features)
    pos = float(classes[1])
    if kkt is None and check:
        if state is None:
            state = init_alpha_state(engine, store)
            apply_alpha_updates(store, engine, state, sv.gids, sv.alpha)
        exp = (
            make_expansion(kp, nf, sv, sv.y * sv.alpha)
            if w is None
            else make_expansion(kp, nf, w=w)
        )
        kkt = kkt_violation_pass(store, engine, state, exp, intercept, C, pos, tol)
    model_info = info(kkt) if callable(info) else info
    model = make_model(sv, intercept, kp, nf, classes, info=model_info)
    if w is not None:
        model.coef_ = np.asarray(w, dtype=np.float64)
    if keep_dual and model.kind == "linear" and sv.n:
        order = np.argsort(sv.gids, kind="stable")
        svo = sv.take(order)
        import scipy.sparse as sp

        model.support_vectors_ = sp.csr_matrix(
            (svo.data.astype(np.float64), svo.indices, svo.indptr), shape=(svo.n, nf)
        )
        model.dual_coef_ = svo.y * svo.alpha
        model.support_ = svo.gids.copy()
    return DualFinish(model=model, kkt=kkt)


__all__ = [
    "Expansion",
    "ScoringBroadcast",
    "WorkingRows",
    "apply_alpha_updates",
    "build_working_rows",
    "dual_class_costs",
    "dual_objective",
    "fetch_rows",
    "finish_dual",
    "init_alpha_state",
    "kernel_scores_pass",
    "kkt_violation_pass",
    "make_expansion",
    "make_model",
    "primal_w",
    "row_costs",
    "score_shard",
    "scoring_broadcast",
    "shard_rows",
]


# --------------------------------------------------------------------------------------------
# checkpoints: the pieces active-set and irwls share
# --------------------------------------------------------------------------------------------
#: the arrays of a :class:`WorkingRows`, in constructor order (how checkpoints store them)
ROW_ARRAYS = ("gids", "indptr", "indices", "data", "y", "alpha")


def finish_run(run, sv: WorkingRows, intercept: float, info, check: bool = True) -> DualFinish:
    """:func:`finish_dual` of an active-set or irwls run (``run`` has ``store``, ``engine``,
    ``kp``, ``C``, ``costs``, ``tol``, ``neg`` and ``pos``), keeping the dual coefficients
    (a C sweep starts its next value from them)."""
    C = run.C if run.costs is None else run.costs
    classes = (run.neg, run.pos)
    return finish_dual(
        run.store, run.engine, sv, intercept, run.kp, C, run.tol, classes, info, check=check,
        keep_dual=True,
    )  # fmt: skip


def dual_result(
    run,
    model: Model,
    primal: float,
    dual: float,
    iterations: int,
    seconds: float,
    stop_value: float,
    summary: dict,
    hit_max_iter: bool,
):
    """The :class:`~ooc_svm.solvers.Result` of an active-set or irwls run (``run`` has
    ``converged``, ``engine``, ``passes0`` and ``history``); an unconverged run stopped at
    ``max_iter`` when ``hit_max_iter``, else it stalled."""
    from . import Result

    stop_reason = None
    if not run.converged:
        stop_reason = "max_iter" if hit_max_iter else "stalled"
    return Result(
        model=model,
        objective=primal,
        dual_objective=dual,
        converged=run.converged,
        stop_reason=stop_reason,
        iterations=iterations,
        passes=run.engine.passes - run.passes0,
        seconds=seconds,
        stop_value=stop_value,
        history=run.history,
        summary=summary,
    )


def rows_to_arrays(rows: WorkingRows, prefix: str) -> dict[str, np.ndarray]:
    """``{prefix + name: array}`` of ``rows`` for a checkpoint (:func:`rows_from_arrays`)."""
    return {f"{prefix}{k}": getattr(rows, k) for k in ROW_ARRAYS}


def rows_from_arrays(arrays, prefix: str) -> WorkingRows:
    """The :class:`WorkingRows` that :func:`rows_to_arrays` saved under ``prefix``."""
    return WorkingRows(*(arrays[f"{prefix}{k}"] for k in ROW_ARRAYS))


def shard_states_to_save(engine: Engine, state: ShardState, names: tuple[str, str]) -> list:
    """Per-shard ``(a, b)`` state (``b`` None for the linear kernel) as the dicts a
    checkpoint stores: ``{names[0]: a}`` or ``{names[0]: a, names[1]: b}``."""
    n0, n1 = names
    return [{n0: a} if b is None else {n0: a, n1: b} for a, b in engine.gather_state(state)]


def resume_shard_states(checkpoint, store, engine: Engine, names: tuple[str, str]):
    """``(data, state)`` of the checkpoint to resume from, or None without one: the saved
    per-shard ``(names[0], names[1])`` states, checked against the store's shards (one
    ``names[0]`` value per row) and handed to the engine."""
    from . import SolverError

    data = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if data is None:
        return None
    shards = data.shard_states or []
    n0, n1 = names
    if len(shards) != store.n_shards or any(
        st[n0].shape != (int(info.n_rows),)
        for st, info in zip(shards, store.meta.shards, strict=True)
    ):
        raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
    return data, engine.set_state(store, [(st[n0], st.get(n1)) for st in shards])


class CheckpointClock:
    """When a solver that can checkpoint after any iteration should save.

    A save is due when ``seconds`` (``--checkpoint-seconds``) have passed since the last one,
    or earlier when saving is cheap: once ten times the duration of the last save has passed
    (so checkpoints cost at most about a tenth of the run). Saving never changes the solver's
    state, so a resumed run is the same whichever iterations were saved.
    """

    def __init__(self, seconds: float = 60.0, ratio: float = 10.0):
        self.seconds = float(seconds)
        self.ratio = float(ratio)
        self.last = time.perf_counter()
        self.cost = 0.0

    def due(self) -> bool:
        return time.perf_counter() - self.last >= min(self.seconds, self.ratio * self.cost)

    def maybe_save(self, checkpoint, write: Callable[[], None]) -> None:
        """Call ``write()`` when there is a ``checkpoint`` and a save is due; time it."""
        if checkpoint is None or not self.due():
            return
        started = time.perf_counter()
        write()
        self.saved(started)

    def saved(self, started: float) -> None:
        """Record a save that began at ``started`` (``time.perf_counter()``)."""
        self.last = time.perf_counter()
        self.cost = self.last - started


#: set by the deferred SIGINT handler of :func:`interruptible`; read by :func:`check_interrupt`
#: in the driver loops and in the shard functions (threads of this process)
_INTERRUPT = threading.Event()


def check_interrupt() -> None:
    """Raise :class:`KeyboardInterrupt` when Ctrl-C was pressed during an
    :func:`interruptible` solve (call it at points where stopping is safe and often enough:
    every minor / inner iteration and at the start of every shard function)."""
    if _INTERRUPT.is_set():
        raise KeyboardInterrupt


def _deferred_sigint(signum, frame) -> None:
    if _INTERRUPT.is_set():  # a second Ctrl-C: stop wherever we are
        raise KeyboardInterrupt
    _INTERRUPT.set()


def interruptible(solve: Callable) -> Callable:
    """Ctrl-C during ``solve`` stops it at the next :func:`check_interrupt`, as a plain
    :class:`KeyboardInterrupt`.

    Python's own SIGINT handler raises at any bytecode, also inside numba's dispatcher and
    llvmlite's callbacks while a kernel is loaded from the cache: the interrupt then surfaced
    as ``SystemError: ... returned a result with an exception set``, or was swallowed ("Exception
    ignored on calling ctypes callback") and the run went on. While ``solve`` runs in the main
    thread with the default handler, SIGINT only sets a flag (a second Ctrl-C raises at once);
    any remaining ``SystemError`` caused by a KeyboardInterrupt is re-raised as one.
    """

    @functools.wraps(solve)
    def wrapper(*args, **kwargs):
        install = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        if install:
            _INTERRUPT.clear()
            signal.signal(signal.SIGINT, _deferred_sigint)
        try:
            result = solve(*args, **kwargs)
        except SystemError as e:
            if isinstance(e.__cause__, KeyboardInterrupt) or isinstance(
                e.__context__, KeyboardInterrupt
            ):
                raise KeyboardInterrupt from None
            raise
        finally:
            interrupted = _INTERRUPT.is_set()
            if install:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                _INTERRUPT.clear()
        if interrupted:  # Ctrl-C after the last check: the run still stops
            raise KeyboardInterrupt
        return result

    return wrapper
