"""Which rows selective keeps in memory: the rows nearest the margin of the current (w_b, w_c)
segment, chosen per shard in one streamed pass under a byte budget (per-shard quotas, a
histogram threshold, deterministic tie-breaking)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.csr import csr_take_rows, u32
from ._numba.selective import (
    cut_segment_margins,
    select_prefix,
    threshold_rows,
)
from .passes import _finish_accumulator, _new_accumulator, reduce_cut

if TYPE_CHECKING:
    from ...store.format import Shard

#: step lengths on the segment w_b + k(w_c − w_b) at which a pass measures P and a plane
GRID = np.array([0.0, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0])

#: bytes a selected row takes besides its non-zeros: 2 keys, tie, row, indptr, label, margins
ROW_BYTES = 64

#: bytes per selected non-zero: int32 column + float32 value
NZ_BYTES = 8

#: a shard returns up to this many times its share of the selection budget
SHARE = 1.25

_HASH = np.uint64(0x9E3779B97F4A7C15)

#: bucket edges (10 a decade) of the per-pass histogram of the rows' bytes by closeness to
#: the margin (:func:`~ooc_svm.solvers.perf._numba.selective.threshold_rows`)
EDGES = np.geomspace(1e-6, 1e3, 91)


def _tie(rows: np.ndarray) -> np.ndarray:
    """A bijective hash of global row numbers: spreads ties (e.g. w = 0) over the store."""
    h = rows.astype(np.uint64) * _HASH
    return h ^ (h >> np.uint64(29))


def _empty_selection(budget: int) -> dict:
    return {
        "budget": int(budget),
        "key": np.zeros(0),
        "key2": np.zeros(0),
        "tie": np.zeros(0, dtype=np.uint64),
        "row": np.zeros(0, dtype=np.int64),
        "indptr": np.zeros(1, dtype=np.int64),
        "indices": np.zeros(0, dtype=np.int32),
        "data": np.zeros(0, dtype=np.float32),
        "ys": np.zeros(0),
        "mb": np.zeros(0),
        "mc": np.zeros(0),
    }


def segment_keys(mb: np.ndarray, mc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closeness to the margin of rows with margins ``mb`` at w_b and ``mc`` at w_c: the
    distance of 1 from [min(mb, mc), max(mb, mc)] (0 for rows that change sides along the
    segment), then |1 − mc|."""
    lo = np.minimum(mb, mc)
    hi = np.maximum(mb, mc)
    key = np.maximum(0.0, np.maximum(lo - 1.0, 1.0 - hi))
    return key, np.abs(1.0 - mc)


def closest_rows(
    indptr: np.ndarray,
    mb: np.ndarray,
    mc: np.ndarray,
    cand: np.ndarray,
    row_start: int,
    budget: int,
) -> np.ndarray:
    """The rows of ``cand`` with the smallest (``key``, ``key2``, :func:`_tie`) that fit
    ``budget`` bytes, in that order."""
    cand = np.ascontiguousarray(cand, dtype=np.int64)
    key, key2 = segment_keys(mb[cand], mc[cand])
    order = np.lexsort((_tie(cand + int(row_start)), key2, key))
    chosen = cand[order]
    return chosen[: int(select_prefix(indptr, chosen, ROW_BYTES, NZ_BYTES, budget))]


def select_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    ys: np.ndarray,
    mb: np.ndarray,
    mc: np.ndarray,
    row_start: int,
    budget: int,
) -> dict:
    """The rows with the smallest (``key``, ``key2``, :func:`_tie`) that fit ``budget``
    bytes, as a selection dict (CSR slices in that order, labels ±1, keys)."""
    n = mb.shape[0]
    if n == 0 or budget < ROW_BYTES:
        return _empty_selection(budget)
    rows = closest_rows(indptr, mb, mc, np.arange(n), row_start, budget)
    return take_rows(indptr, indices, data, ys, 1.0, mb, mc, row_start, rows, budget)


def selection_bytes(sel: dict) -> int:
    """Bytes of a selection as the budget counts them."""
    return ROW_BYTES * sel["key"].shape[0] + NZ_BYTES * sel["indices"].shape[0]


def pass_select(shard: Shard, bc: Any) -> dict[str, Any]:
    """One streamed pass on the segment w_b + k(w_c − w_b): hinge sums and cutting planes at
    the grid ``kg`` (as the accelerated pass), plus the shard's candidate rows for the
    selection and a histogram of its bytes by segment key (:func:`segment_keys`).

    Candidates: the rows with key ≤ ``tau`` (the threshold the previous pass's histogram
    gives, :func:`threshold_from_hist`), copied in shard order without sorting, when they fit
    the shard's quota (:func:`shard_quota`); otherwise (first pass, ``tau`` = ∞, or a shard
    with more rows near the margin than its share) its closest rows within the quota."""
    w2, tb, tc, bias, pos, dim, kg, budget, store_bytes, tau = bc
    K = kg.shape[0]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, K, True)
    hv = np.zeros(K)
    cnt = np.zeros(K, dtype=np.int64)
    mb = np.empty(shard.n_rows)
    mc = np.empty(shard.n_rows)
    cut_segment_margins(
        shard.indptr,
        u32(shard.indices),
        gidx,
        shard.data,
        shard.y,
        pos,
        w2,
        tb,
        tc,
        kg,
        hv,
        acc,
        cnt,
        bias,
        bias_slot,
        mb,
        mc,
    )
    indptr = np.ascontiguousarray(shard.indptr, dtype=np.int64)
    hist = np.zeros((3, EDGES.shape[0] + 1), dtype=np.int64)
    rows = np.empty(shard.n_rows, dtype=np.int64)
    k, used = threshold_rows(indptr, mb, mc, float(tau), ROW_BYTES, NZ_BYTES, EDGES, hist, rows)
    quota = shard_quota(shard.n_rows, shard.nnz, budget, store_bytes)
    rows = rows[:k]
    if used > quota:
        rows = closest_rows(indptr, mb, mc, rows, shard.row_start, quota)
    sel = take_rows(indptr, shard.indices, shard.data, np.asarray(shard.y), pos, mb, mc,
                    shard.row_start, rows, budget)  # fmt: skip
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": cnt.astype(np.float64),
        "hinge": hv,
        "hist": hist,
        "sel": [sel],
    }


def take_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    y: np.ndarray,
    pos: float,
    mb: np.ndarray,
    mc: np.ndarray,
    row_start: int,
    rows: np.ndarray,
    budget: int,
) -> dict:
    """The listed rows of a shard as an (unsorted) selection dict."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    key, key2 = segment_keys(mb[rows], mc[rows])
    glob = rows + int(row_start)
    if rows.shape[0] == mb.shape[0] and np.array_equal(rows, np.arange(rows.shape[0])):
        # every row, in order: the shard's own arrays, no copy
        a, b = int(indptr[0]), int(indptr[-1])
        ip, ix, dt = indptr - a, indices[a:b], data[a:b]
    else:
        ip, ix, dt = csr_take_rows(indptr, indices, data, rows)
    return {
        "budget": int(budget), "key": key, "key2": key2, "tie": _tie(glob), "row": glob,
        "ys": np.where(y[rows] == pos, 1.0, -1.0), "mb": mb[rows], "mc": mc[rows],
        "indptr": ip, "indices": ix, "data": dt,
    }  # fmt: skip


def threshold_from_hist(hist: np.ndarray, budget: int, q: int) -> float:
    """The next pass's threshold on the segment key: the smallest bucket edge of
    :data:`EDGES` within which the rows' distance |1 − m| at the new best point (grid point
    ``q``: ``hist[0]`` for k = 0, ``hist[1]`` for k = 1, else ``hist[2]``, an upper bound)
    takes at least ``budget`` bytes; ∞ when the whole store fits.

    The next segment starts at that point, so a row's key there is at most that distance:
    the rows inside the threshold take at least ``budget`` bytes (up to the quotas)."""
    h = hist[0] if q == 0 else hist[1] if q == GRID.shape[0] - 1 else hist[2]
    b = int(np.searchsorted(np.cumsum(h), budget, side="left"))
    return float(EDGES[b]) if b < EDGES.shape[0] else math.inf


def shard_quota(n_rows: int, nnz: int, budget: int, store_bytes: int) -> int:
    """Bytes of its closest rows a shard returns: ``SHARE`` times its share of the budget
    (its share of the store's bytes), at most the budget. A function of the shard alone, so
    the candidates — and the selection — do not depend on the engine."""
    own = ROW_BYTES * int(n_rows) + NZ_BYTES * int(nnz)
    return int(min(budget, math.floor(SHARE * budget * own / max(1, store_bytes))))


def reduce_select(a: Any, b: Any) -> Any:
    """Reduce of :func:`pass_select` partials: planes and histograms summed, the shards'
    candidate lists concatenated (in shard order; merged once, by the driver). Every shard
    returns at most its quota, so all partials alive at once hold at most ``SHARE`` times
    the budget (plus a byte per shard of rounding), whatever the reduction tree."""
    if a is None:
        return b
    if b is None:
        return a
    out = reduce_cut(
        {k: v for k, v in a.items() if k != "sel"}, {k: v for k, v in b.items() if k != "sel"}
    )
    out["sel"] = list(a["sel"]) + list(b["sel"])
    return out
