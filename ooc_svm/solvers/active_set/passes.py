"""Per-shard state (α, f) and the streamed major pass (pricing, §4.1) of the active-set solver."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ...kernels.csr import csr_rmatvec_rows_add
from ...kernels.kernel_functions import KernelParams, linear_scores, row_sq_norms
from ..dual import WorkingRows, check_interrupt, row_costs, shard_rows
from ..reduce import none_is_identity
from ._numba.blocks import expansion_add

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# per-shard state and the major pass
# ------------------------------------------------------------------------------------------
def _init_state(linear: bool, info, _i):
    n = int(info.n_rows)
    return (np.zeros(n), None if linear else np.zeros(n))


@dataclass
class MajorBroadcast:
    """What one pricing pass ships to the shards (picklable)."""

    kp: KernelParams
    n_features: int
    C: float
    beta: float
    positive: float
    tol: float
    k: int
    seed: int
    upd_gids: np.ndarray  # sorted global rows whose α changed
    upd_alpha: np.ndarray
    keep_gids: np.ndarray  # sorted global rows of I_s (their f is returned)
    keep_rows: bool = False  # also return the I_s rows' data (warm start)
    max_value: float = np.inf  # candidates must have reduced cost below this
    w: np.ndarray | None = None  # linear kernel: the full w
    delta: tuple | None = None  # kernel: (indptr, indices, data, sq, coef) of α changes
    costs: tuple | None = None  # class weights: (C_neg, C_pos), row i's bound C_{y_i}


@dataclass
class MajorPartial:
    """Partial result of a pricing pass (reduced by :func:`_major_reduce`)."""

    k: int
    stats: np.ndarray
    cand_val: np.ndarray
    cand_tie: np.ndarray
    cand_f: np.ndarray
    cand_rows: WorkingRows
    keep_gids: np.ndarray
    keep_f: np.ndarray
    keep_rows: WorkingRows | None = None
    w: np.ndarray | None = None


# stats vector layout (_S_CHINGE: Σ C_{y_i} ξᵢ, the weighted loss of class weights)
_S_MAXV, _S_NVIOL, _S_SUMA, _S_SUMYA, _S_AQA, _S_HINGE, _S_NSV, _S_NC, _S_FREEV, _S_CHINGE = range(
    10
)
_N_STATS = 10


def _tiebreak(gids: np.ndarray, seed: int) -> np.ndarray:
    """Deterministic pseudo-random key per global row (breaks ties among equal costs)."""
    h = gids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed & 0xFFFFFFFF)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


def _select_smallest(val: np.ndarray, tie: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest (val, tie) pairs, sorted."""
    if val.size <= k:
        return np.lexsort((tie, val))
    thr = np.partition(val, k - 1)[k - 1]
    lt = np.flatnonzero(val < thr)
    eq = np.flatnonzero(val == thr)
    need = k - lt.size
    if need < eq.size:
        eq = eq[np.argsort(tie[eq], kind="stable")[:need]]
    idx = np.concatenate([lt, eq])
    return idx[np.lexsort((tie[idx], val[idx]))]


def _major_fn(shard, bc: MajorBroadcast, st):
    check_interrupt()
    alpha, f = st
    r0 = shard.row_start
    n = shard.n_rows
    # 1. α changes of the last major iteration
    lo, hi = np.searchsorted(bc.upd_gids, [r0, r0 + n])
    if hi > lo:
        alpha = np.array(alpha, copy=True)
        alpha[bc.upd_gids[lo:hi] - r0] = bc.upd_alpha[lo:hi]
    y = np.where(shard.y == bc.positive, 1.0, -1.0)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    data = shard.data
    # 2. scores f(x) without intercept
    w_part = None
    if bc.w is not None:
        w = bc.w
        width = int(ix.max()) + 1 if ix.size else 0
        if w.shape[0] < width:
            w = np.concatenate([w, np.zeros(width - w.shape[0])])
        fc = linear_scores(ip, ix, data, w, np.empty(n))
        nz = np.flatnonzero(alpha)
        w_part = np.zeros(bc.n_features)
        if nz.size:
            csr_rmatvec_rows_add(ip, ix, data, nz, alpha[nz] * y[nz], w_part)
    else:
        if bc.delta is not None and bc.delta[0].shape[0] > 1:
            f = np.array(f, copy=True)
            sq = row_sq_norms(ip, ix, data, np.empty(n))
            expansion_add(ip, ix, data, sq, bc.delta, bc.kp, bc.n_features, f)
        fc = f
    # 3. reduced costs of the bound variables
    C = bc.C if bc.costs is None else row_costs(y, bc.C, bc.costs)
    G = y * fc - 1.0
    rho = G - bc.beta * y
    at0 = alpha <= 0.0
    atC = alpha >= C
    rc = np.full(n, np.inf)
    rc[at0] = rho[at0]
    rc[atC] = -rho[atC]
    gids = np.arange(r0, r0 + n, dtype=np.int64)
    kl, kh = np.searchsorted(bc.keep_gids, [r0, r0 + n])
    keep_local = bc.keep_gids[kl:kh] - r0
    rc[keep_local] = np.inf  # I_s rows of the driver (may sit at a bound value)
    stats = np.zeros(_N_STATS)
    finite = np.isfinite(rc)
    stats[_S_MAXV] = max(0.0, -float(rc[finite].min())) if finite.any() else 0.0
    stats[_S_NVIOL] = float((rc < -bc.tol).sum())
    stats[_S_SUMA] = float(alpha.sum())
    stats[_S_SUMYA] = float((alpha * y).sum())
    stats[_S_AQA] = float((alpha * y * fc).sum())
    xi = np.maximum(0.0, 1.0 - y * (fc - bc.beta))
    stats[_S_HINGE] = float(xi.sum())
    if bc.costs is not None:
        stats[_S_CHINGE] = float((C * xi).sum())
    stats[_S_NSV] = float((alpha > 0).sum())
    stats[_S_NC] = float(atC.sum())
    # free rows (I_s of the driver) must solve the reduced problem: G − βy = 0
    stats[_S_FREEV] = float(np.abs(rho[keep_local]).max()) if keep_local.size else 0.0
    # 4. candidates: the k smallest reduced costs (below max_value)
    cidx = np.flatnonzero(finite & (rc < bc.max_value))
    tie = _tiebreak(gids[cidx], bc.seed)
    sel = cidx[_select_smallest(rc[cidx], tie, bc.k)] if bc.k > 0 else cidx[:0]
    rows = shard_rows(shard, sel, bc.positive, alpha)
    part = MajorPartial(
        k=bc.k,
        stats=stats,
        cand_val=rc[sel],
        cand_tie=_tiebreak(gids[sel], bc.seed),
        cand_f=fc[sel].copy(),
        cand_rows=rows,
        keep_gids=bc.keep_gids[kl:kh].copy(),
        keep_f=fc[keep_local].copy(),
        keep_rows=shard_rows(shard, keep_local, bc.positive, alpha) if bc.keep_rows else None,
        w=w_part,
    )
    return part, (alpha, f)


@none_is_identity
def _major_reduce(a: MajorPartial, b: MajorPartial) -> MajorPartial:
    s = a.stats.copy()
    for i in (_S_NVIOL, _S_SUMA, _S_SUMYA, _S_AQA, _S_HINGE, _S_NSV, _S_NC, _S_CHINGE):
        s[i] = a.stats[i] + b.stats[i]
    s[_S_MAXV] = max(a.stats[_S_MAXV], b.stats[_S_MAXV])
    s[_S_FREEV] = max(a.stats[_S_FREEV], b.stats[_S_FREEV])
    val = np.concatenate([a.cand_val, b.cand_val])
    tie = np.concatenate([a.cand_tie, b.cand_tie])
    rows = WorkingRows.concat([a.cand_rows, b.cand_rows])
    fv = np.concatenate([a.cand_f, b.cand_f])
    sel = _select_smallest(val, tie, a.k)
    if sel.size != val.size or not np.all(sel == np.arange(val.size)):
        rows = rows.take(sel) if rows.n else rows
        val, tie, fv = val[sel], tie[sel], fv[sel]
    keep_rows = None
    if a.keep_rows is not None or b.keep_rows is not None:
        keep_rows = WorkingRows.concat([a.keep_rows, b.keep_rows])
    w = None
    if a.w is not None or b.w is not None:
        w = b.w if a.w is None else (a.w if b.w is None else a.w + b.w)
    return MajorPartial(
        k=a.k,
        stats=s,
        cand_val=val,
        cand_tie=tie,
        cand_f=fv,
        cand_rows=rows,
        keep_gids=np.concatenate([a.keep_gids, b.keep_gids]),
        keep_f=np.concatenate([a.keep_f, b.keep_f]),
        keep_rows=keep_rows,
        w=w,
    )


def _warm_fn(shard, bc, st):
    """Set α of the listed rows from signed dual coefficients yᵢαᵢ; count label mismatches."""
    gids, coef, positive = bc
    alpha, f = st
    r0 = shard.row_start
    lo, hi = np.searchsorted(gids, [r0, r0 + shard.n_rows])
    bad = 0
    if hi > lo:
        alpha = np.array(alpha, copy=True)
        loc = gids[lo:hi] - r0
        y = np.where(shard.y[loc] == positive, 1.0, -1.0)
        a = coef[lo:hi] * y
        bad = int((a < 0).sum())
        alpha[loc] = np.maximum(a, 0.0)
    return bad, (alpha, f)


def _collect_fn(shard, bc, st):
    """Rows with α > 0 (support vectors), with α, in row order."""
    positive = bc
    alpha, _ = st
    idx = np.flatnonzero(alpha > 0)
    return ([shard_rows(shard, idx, positive, alpha)] if idx.size else None), st
