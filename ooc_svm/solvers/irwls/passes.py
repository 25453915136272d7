"""The streamed pass of IRWLS chunking: apply the last change, check (9)-(11), select (§3)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ...engine.base import WorkerScratch
from ...kernels.kernel_functions import KernelParams, linear_scores, row_sq_norms
from ...kernels.parallel import kernel_block_par, thread_share
from ..dual import Expansion, WorkingRows, check_interrupt, row_costs, shard_rows
from ..kernel_cache import KernelCache
from ..reduce import none_is_identity
from ._numba import _axpy

log = logging.getLogger(__name__)


# ============================================================================================
# chunking: the streamed pass
# ============================================================================================
#: order of the statistics vector a pass returns
(
    _S_MAXV,
    _S_NVIOL,
    _S_SUMB,
    _S_BYG,
    _S_HINGE,
    _S_NSV,
    _S_NBSV,
    _S_SUMYB,
    _S_NCAND,
    _S_MUP,
    _S_MLOW,
    _S_HITS,
    _S_MISSES,
    _S_CHINGE,  # Σ C_{y_i} max(0, uᵢ) (class weights only)
) = range(14)
_N_STATS = 14


@dataclass
class _Pool:
    """Up to ``k`` rows with the smallest (key, global row) — with their data and state."""

    rows: WorkingRows
    key: np.ndarray
    g: np.ndarray

    @property
    def n(self) -> int:
        return self.rows.n


def _pool_from(shard, local, key, beta, g, positive) -> _Pool | None:
    if local.size == 0:
        return None
    rows = shard_rows(shard, local, positive, beta)
    return _Pool(rows, np.asarray(key, dtype=np.float64), np.asarray(g, dtype=np.float64))


def _pool_bottom(shard, mask, key, k, beta, g, positive) -> _Pool | None:
    """The ``k`` rows of ``mask`` with the smallest key (ties: lower row first)."""
    idx = np.flatnonzero(mask)
    if idx.size == 0 or k <= 0:
        return None
    if idx.size > k:
        kk = key[idx]
        part = np.argpartition(kk, k - 1)[:k]
        idx = np.sort(idx[part])
        # exact ties at the k-th key: keep the lowest rows (deterministic)
        kth = key[idx].max()
        tie = np.flatnonzero(mask & (key == kth))
        if tie.size:
            below = idx[key[idx] < kth]
            idx = np.sort(np.concatenate((below, tie[: k - below.size])))
    order = np.lexsort((idx, key[idx]))
    idx = idx[order]
    return _pool_from(shard, idx, key[idx], beta, g[idx], positive)


def _merge_pool(a: _Pool | None, b: _Pool | None, k: int) -> _Pool | None:
    if a is None:
        return b
    if b is None:
        return a
    rows = WorkingRows.concat([a.rows, b.rows])
    key = np.concatenate((a.key, b.key))
    g = np.concatenate((a.g, b.g))
    order = np.lexsort((rows.gids, key))[:k]
    return _Pool(rows.take(order), key[order], g[order])


@dataclass
class _PassBroadcast:
    """What one pass ships to the shards (picklable)."""

    iteration: int
    seed: int
    strategy: str
    q: int
    tol: float
    C: float
    b: float
    positive: float
    upd_gids: np.ndarray  # sorted global rows whose β changed
    upd_beta: np.ndarray  # their new β
    w: np.ndarray | None = None  # linear kernel: the full w
    delta: Expansion | None = None  # kernel, no cache: Σ Δβⱼyⱼ K(xⱼ, ·) over the changed rows
    select: bool = True  # draw the next working set
    kp: KernelParams | None = None  # kernel: parameters (for the column cache)
    delta_rows: WorkingRows | None = None  # kernel: the changed rows (column cache keys)
    delta_coef: np.ndarray | None = None  # their Δβⱼyⱼ
    cache_bytes: int = 0  # column-cache budget of one shard (0: no cache)
    scratch: WorkerScratch | None = None  # this run's column caches (per process)
    n_features: int = 0
    costs: tuple | None = None  # class weights: (C_neg, C_pos), sample i's bound C_{y_i}


@dataclass
class _PassPartial:
    """Reduced result of a pass: statistics and the selection pools."""

    stats: np.ndarray
    q: int = 0
    main: _Pool | None = None
    fill: _Pool | None = None
    special: list | None = None  # 6 pools of one row: (class −1, +1) × condition (9)–(11)
    pair: list | None = None  # LIBSVM's maximal violating pair: argmax_up F, argmin_low F


# --------------------------------------------------------------------------------------------
# kernel column cache: K(shard rows, xⱼ) for rows j whose β changes again and again
# --------------------------------------------------------------------------------------------
#: the column caches of a run live in a :class:`~ooc_svm.engine.base.WorkerScratch` (one
#: :class:`KernelCache` per shard, keyed by its first row): a pure performance aid (every
#: column is recomputable from the data), kept out of the per-shard state the engines
#: replicate; on a Dask worker it lives as long as the run (the engine places a shard on the
#: same worker in every pass), like the engine's shard cache.
def _shard_cache(scratch: WorkerScratch, row_start: int, max_bytes: int) -> KernelCache:
    return scratch.get(row_start, lambda: KernelCache(max_bytes))


def _drop_caches_fn(stub, scratch: WorkerScratch, st=None):
    scratch.clear()
    return None if st is None else (None, st)


#: the missing kernel columns of one shard are computed in blocks of at most this many bytes
_BLOCK_BYTES = 64 << 20


def _cached_delta(shard, ip, ix, bc: _PassBroadcast, hm: list) -> np.ndarray:
    """Σⱼ Δβⱼyⱼ K(xᵢ, xⱼ) for the shard's rows, with the columns from the shard's cache."""
    rows = bc.delta_rows
    assert rows is not None and bc.scratch is not None  # a kernel change, cache on
    cache = _shard_cache(bc.scratch, int(shard.row_start), bc.cache_bytes)
    sq = row_sq_norms(ip, ix, shard.data, np.empty(shard.n_rows, dtype=np.float64))
    rix = rows.u32
    rsq = rows.sq_norms()
    pos = {int(gid): k for k, gid in enumerate(rows.gids)}
    # the rows' own width (not the store's: no workspace grows with n_features)
    width = max(int(ix.max()) + 1 if ix.size else 1, int(rix.max()) + 1 if rix.size else 1)

    assert bc.kp is not None  # a column cache is made for kernels only
    kargs = bc.kp.args()

    def compute(missing):
        sel = np.array([pos[int(gg)] for gg in missing], dtype=np.int64)
        sub = rows.take(sel)
        out = np.empty((sel.size, shard.n_rows), dtype=np.float64)
        with thread_share():
            kernel_block_par(
                sub.indptr, sub.u32, sub.data, rsq[sel], ip, ix, shard.data, sq,
                *kargs, width, out,
            )  # fmt: skip
        return out

    h0, m0 = cache.hits, cache.misses
    # the cached columns are summed where they lie (no stacked copy of all of them); the
    # missing ones are computed in parallel blocks of at most _BLOCK_BYTES, in the order of
    # the changed rows, each block dropped once summed: memory does not grow with q × rows
    found: list = [cache.get(int(g)) for g in rows.gids]
    missing = [k for k, c in enumerate(found) if c is None]
    hm[0] += cache.hits - h0
    hm[1] += cache.misses - m0
    per_block = max(1, _BLOCK_BYTES // max(1, 8 * shard.n_rows))
    keep = 8 * shard.n_rows <= cache.max_bytes
    block: dict = {}
    nxt = 0  # next entry of ``missing`` to compute
    out = np.zeros(shard.n_rows)
    assert bc.delta_coef is not None  # sent with delta_rows
    for k, c in enumerate(bc.delta_coef):
        col = found[k]
        if col is None:
            if k not in block:  # the next block of missing columns (k is its first)
                ks = missing[nxt : nxt + per_block]
                nxt += len(ks)
                vals = compute([rows.gids[j] for j in ks])
                block = {j: vals[t] for t, j in enumerate(ks)}
                if keep:
                    for j in ks:
                        cache.put(int(rows.gids[j]), block[j].copy())
            col = block[k]
        if c != 0.0:  # column by column, in the order of the changed rows
            _axpy(float(c), col, out)
    return out


def _init_state(linear: bool, info, _i):
    n = int(info.n_rows)
    return (np.zeros(n), None if linear else np.zeros(n))


def _pass_fn(shard, bc: _PassBroadcast, st):
    """Apply the last working-set change, compute eᵢ, check (9)–(11), draw candidates."""
    check_interrupt()
    beta, g = st
    hm = [0, 0]
    lo = np.searchsorted(bc.upd_gids, shard.row_start)
    hi = np.searchsorted(bc.upd_gids, shard.row_start + shard.n_rows)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    if hi > lo:
        beta = beta.copy()
        beta[bc.upd_gids[lo:hi] - shard.row_start] = bc.upd_beta[lo:hi]
    if bc.w is not None:
        g = linear_scores(ip, ix, shard.data, bc.w, np.empty(shard.n_rows, dtype=np.float64))
    elif bc.delta_rows is not None:
        if bc.cache_bytes > 0:
            g = g + _cached_delta(shard, ip, ix, bc, hm)
        else:
            assert bc.delta is not None  # sent with delta_rows when the cache is off
            g = g + bc.delta.scores(ip, ix, shard.data)
    y = np.where(shard.y == bc.positive, 1.0, -1.0)
    u = 1.0 - y * (g + bc.b)
    C, tol = (bc.C if bc.costs is None else row_costs(y, bc.C, bc.costs)), bc.tol
    at0 = beta <= 0.0
    atC = beta >= C
    free = ~(at0 | atC)
    v9 = at0 & (u > tol)
    v10 = atC & (u < -tol)
    v11 = free & (np.abs(u) > tol)
    viol = np.zeros(u.size)
    viol[at0] = u[at0]
    viol[atC] = -u[atC]
    viol[free] = np.abs(u[free])
    stats = np.zeros(_N_STATS)
    stats[_S_MAXV] = max(0.0, float(viol.max())) if viol.size else 0.0
    stats[_S_NVIOL] = np.count_nonzero(v9 | v10 | v11)
    stats[_S_SUMB] = beta.sum()
    stats[_S_BYG] = float(np.dot(beta * y, g))
    stats[_S_HINGE] = float(np.maximum(u, 0.0).sum())
    if bc.costs is not None:
        stats[_S_CHINGE] = float((C * np.maximum(u, 0.0)).sum())
    stats[_S_NSV] = np.count_nonzero(~at0)
    stats[_S_NBSV] = np.count_nonzero(atC)
    stats[_S_SUMYB] = float(np.dot(beta, y))
    # LIBSVM's m(β), M(β) over F = y − g (independent of b): the b-reset of the driver
    F = y - g
    up = np.where(y > 0, beta < C, beta > 0)
    low = np.where(y > 0, beta > 0, beta < C)
    stats[_S_MUP] = float(F[up].max()) if up.any() else -np.inf
    stats[_S_MLOW] = float(F[low].min()) if low.any() else np.inf
    stats[_S_HITS], stats[_S_MISSES] = hm
    part = _PassPartial(stats, int(bc.q))
    if bc.select:
        absu = np.abs(u)
        if bc.strategy == "random":
            cand = v9 | v10 | free
            key = np.random.default_rng([bc.seed, bc.iteration, shard.row_start]).random(u.size)
        else:
            cand = v9 | v10 | v11
            key = -absu if bc.strategy == "largest" else absu
        stats[_S_NCAND] = np.count_nonzero(cand)
        part.main = _pool_bottom(shard, cand, key, bc.q, beta, g, bc.positive)
        part.fill = _pool_bottom(shard, ~cand, absu, bc.q, beta, g, bc.positive)
        part.special = [
            _pool_bottom(shard, cond & (y == cls), key, 1, beta, g, bc.positive)
            for cls in (-1.0, 1.0)
            for cond in (v9, v10, v11)
        ]
        part.pair = [
            _pool_bottom(shard, up, -F, 1, beta, g, bc.positive),
            _pool_bottom(shard, low, F, 1, beta, g, bc.positive),
        ]
    return part, (beta, g)


@none_is_identity
def _pass_reduce(a: _PassPartial, b: _PassPartial) -> _PassPartial:
    st = a.stats + b.stats
    st[_S_MAXV] = max(a.stats[_S_MAXV], b.stats[_S_MAXV])
    st[_S_MUP] = max(a.stats[_S_MUP], b.stats[_S_MUP])
    st[_S_MLOW] = min(a.stats[_S_MLOW], b.stats[_S_MLOW])
    out = _PassPartial(st, max(a.q, b.q))
    if a.special is not None or b.special is not None:
        out.main = _merge_pool(a.main, b.main, out.q)
        out.fill = _merge_pool(a.fill, b.fill, out.q)
        sa = a.special or [None] * 6
        sb = b.special or [None] * 6
        out.special = [_merge_pool(x, y, 1) for x, y in zip(sa, sb, strict=True)]
        pa = a.pair or [None] * 2
        pb = b.pair or [None] * 2
        out.pair = [_merge_pool(x, y, 1) for x, y in zip(pa, pb, strict=True)]
    return out
