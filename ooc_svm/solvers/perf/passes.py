"""Per-shard pass functions of perf and their reductions.

They stay at module level: the Dask engine pickles them by name. Accumulators of cutting
planes are dense ``(K, dim)`` arrays, or compact ``("s", columns, (K, len) values, dim)``
tuples over a shard's own columns when the store has many more columns than the shard has
non-zeros.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.blocks import Blocked
from ...kernels.csr import csr_matvec, u32
from ._numba.cuts import (
    accumulate_rows,
    cut_points,
    cut_segment,
    cut_segment_weighted,
    cut_single,
    cut_single_weighted,
    merge_sparse_rows,
    scores_two,
)
from .params import REMAP_MIN_DIM as _REMAP_MIN_DIM

if TYPE_CHECKING:
    from ...store.format import Shard

#: stores with more columns than this (and than 2 × a shard's non-zeros) accumulate cutting
#: planes per shard over the shard's distinct columns only
COMPACT_MIN_DIM = 1 << 16

#: two compact partials are merged into a dense ``(K, dim)`` array only when it is at most
#: this big (else the merge stays sparse: at most (K + 1) / K times the dense size)
DENSE_MERGE_BYTES = 64 << 20


def _compact_min_dim() -> int:
    """``COMPACT_MIN_DIM`` as ``ooc_svm.solvers.perf`` exports it (the one knob; tests lower it)."""
    return getattr(sys.modules.get(__package__), "COMPACT_MIN_DIM", COMPACT_MIN_DIM)


#: stores with at least this many columns train in the remapped column space
#: (:func:`column_remap`): the columns the store holds, most frequent first
REMAP_MIN_DIM = _REMAP_MIN_DIM


def shard_columns(shard: Any, ix: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the shard's distinct columns, sorted; each entry's position among them): built once
    per shard object and kept with it (``shard._perf_colmap``), so that a shard the engine
    caches between passes is not sorted again every pass. ``ix``: the shard's columns in
    the remapped space (:func:`remapped_indices`) instead of ``shard.indices`` (kept as
    ``shard._perf_colmap_r``)."""
    attr = "_perf_colmap" if ix is None else "_perf_colmap_r"
    cached = getattr(shard, attr, None)
    if cached is not None:
        return cached
    if ix is None:
        ix = shard.indices
    order = np.argsort(ix, kind="stable")
    srt = ix[order]
    new = np.empty(srt.shape[0], dtype=bool)
    if srt.shape[0]:
        new[0] = True
        np.not_equal(srt[1:], srt[:-1], out=new[1:])
    cols = srt[new].astype(np.int64)
    gidx = np.empty(ix.shape[0], dtype=np.uint32)
    gidx[order] = (np.cumsum(new) - 1).astype(np.uint32)
    del order, srt, new
    try:
        setattr(shard, attr, (cols, gidx))
    except AttributeError:  # a shard type with slots: computed again next pass
        pass
    return cols, gidx


def pass_column_counts(shard: Shard, bc: Any) -> dict[str, Any]:
    """Non-zeros per column of a shard, as a compact accumulator ``("s", columns, (1, len)
    counts, dim)`` (``bc = (dim,)``): the counting pass of :func:`column_remap`."""
    (dim,) = bc
    cols, counts = np.unique(shard.indices, return_counts=True)
    return {"g": ("s", cols.astype(np.int64), counts[None, :].astype(np.float64), int(dim))}


def column_remap(acc: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The remapped column space of a wide store from its column counts (the reduced
    :func:`pass_column_counts`): ``(gmap, cols)`` where ``gmap[j]`` (int32, length ``dim``)
    is column j's new id (-1: a column no row holds) and ``cols[k]`` the column of new id k.

    New ids go to the columns the store holds, most frequent first (ties: by column): the
    dense vectors, the cutting planes and the QP live over these columns only, and the
    frequent columns, which most non-zeros hit, lie together (Zipf-like text data: a few
    thousand columns take most of the non-zeros) so that the margins w·xᵢ mostly read w
    from the cache."""
    if isinstance(acc, np.ndarray):
        counts = acc[0]
        held = np.flatnonzero(counts)
        c = counts[held]
    else:
        _, held, vals, _ = acc
        c = vals[0]
        keep = c > 0
        held, c = held[keep], c[keep]
    order = np.argsort(-c, kind="stable")
    cols = np.asarray(held, dtype=np.int64)[order]
    gmap = np.full(int(dim), -1, dtype=np.int32)
    gmap[cols] = np.arange(cols.shape[0], dtype=np.int32)
    return gmap, cols


def remapped_indices(shard: Any, gmap: np.ndarray) -> np.ndarray:
    """The shard's column ids in the remapped space (uint32), computed once per shard object
    and kept with it (``shard._perf_remap``, keyed by the map's length and size)."""
    key = (gmap.shape[0], _map_key(gmap))
    cached = getattr(shard, "_perf_remap", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    ix = gmap[shard.indices].view(np.uint32)
    try:
        shard._perf_remap = (key, ix)
    except AttributeError:
        pass
    return ix


def _map_key(gmap: np.ndarray) -> int:
    """A cheap fingerprint of a column map (64 of its entries)."""
    step = max(1, gmap.shape[0] // 64)
    return int(gmap[::step].astype(np.int64).sum())


def _new_accumulator(shard, dim: int, K: int, with_bias: bool, ix: np.ndarray | None = None):
    """(acc, gidx, bias_slot, columns or None) for one shard (``ix``: its remapped
    columns, :func:`remapped_indices`: compact when the shard's distinct columns are fewer
    than half the remapped columns, as they are for all but the hot head of a Zipf-like
    store)."""
    if ix is not None and dim > _compact_min_dim():
        compact = 2 * shard_columns(shard, ix)[0].shape[0] < dim
    else:
        compact = dim > max(_compact_min_dim(), 2 * shard.nnz)
    if compact:
        cols, gidx = shard_columns(shard, ix)
        if with_bias:
            cols = np.append(cols, dim - 1)
        acc = np.zeros((K, cols.shape[0] + (0 if with_bias else 1)))
        bias_slot = cols.shape[0] - 1 if with_bias else acc.shape[1] - 1
        return acc, gidx, bias_slot, cols
    acc = np.zeros((K, dim + (0 if with_bias else 1)))
    bias_slot = dim - 1 if with_bias else dim
    return acc, (u32(shard.indices) if ix is None else ix), bias_slot, None


def _finish_accumulator(acc, cols, dim: int, with_bias: bool):
    if cols is None:
        return acc if with_bias else acc[:, :dim]
    vals = acc if with_bias else acc[:, : cols.shape[0]]
    return ("s", cols, vals, dim)


def merge_acc(a: Any, b: Any) -> Any:
    """Sum of two accumulators (dense arrays or compact tuples); densifies when it pays."""
    if a is None:
        return b
    if b is None:
        return a
    a_dense = isinstance(a, np.ndarray)
    b_dense = isinstance(b, np.ndarray)
    if a_dense and b_dense:
        return a + b
    if a_dense or b_dense:
        dense, sparse = (a, b) if a_dense else (b, a)
        out = dense.copy()
        out[:, sparse[1]] += sparse[2]
        return out
    _, ca, va, dim = a
    _, cb, vb, _ = b
    K = va.shape[0]
    if (ca.shape[0] + cb.shape[0]) * 4 > dim and K * dim * 8 <= DENSE_MERGE_BYTES:
        out = np.zeros((K, dim))
        out[:, ca] += va
        out[:, cb] += vb
        return out
    cols, vals = merge_sparse_rows(ca, np.ascontiguousarray(va), cb, np.ascontiguousarray(vb))
    if cols.shape[0] * (K + 1) > K * dim and K * dim * 8 <= DENSE_MERGE_BYTES:
        out = np.zeros((K, dim))
        out[:, cols] = vals
        return out
    return ("s", cols, vals, dim)


def acc_cut(acc: Any, p: int, upto: bool = False, n: float = 1.0) -> Any:
    """Row ``p`` (``upto``: rows 0..p summed) of an accumulator divided by ``n``, for
    :meth:`~.working_set.WorkingSet.add`: a dense float64 vector, or for a compact
    accumulator a sparse ``(columns, values)`` pair (its non-zeros only), never densified."""
    if isinstance(acc, np.ndarray):
        return acc_row(acc, p, upto) / n
    _, cols, vals, _dim = acc
    v = vals[: p + 1].sum(axis=0) if upto else vals[p].copy()
    v /= n
    keep = v != 0.0
    return cols[keep], v[keep]


def acc_row(acc: Any, p: int, upto: bool = False) -> np.ndarray:
    """Dense float64 row ``p`` of an accumulator (``upto``: sum of rows 0..p, a prefix sum)."""
    if isinstance(acc, np.ndarray):
        return acc[: p + 1].sum(axis=0) if upto else acc[p].copy()
    _, cols, vals, dim = acc
    out = np.zeros(dim)
    out[cols] = vals[: p + 1].sum(axis=0) if upto else vals[p]
    return out


def reduce_cut(a: Any, b: Any) -> Any:
    """Reduce for the pass partials: dicts whose ``"g"`` entry is an accumulator."""
    if a is None:
        return b
    if b is None:
        return a
    out = {}
    for k, v in a.items():
        out[k] = merge_acc(v, b[k]) if k in _ACC_KEYS else v + b[k]
    return out


#: the partials' entries that are accumulators (merged by :func:`merge_acc`; may be None)
_ACC_KEYS = ("g", "g_new")


def reduce_cut_consuming(a: Any, b: Any) -> Any:
    """:func:`reduce_cut` for a fold that owns its partials (``a`` is not used again):
    two dense accumulators of one shape are added into ``a``'s, element by element as
    ``a + b`` (same bits) without a new array. The engines use it only where the partials
    are their own (:class:`~ooc_svm.engine.base.StreamingTreeReduce`), never on results a
    task graph may hand to a retried task."""
    if a is None:
        return b
    if b is None:
        return a
    out = {}
    for k, v in a.items():
        u = b[k]
        if (k == "g" and isinstance(v, np.ndarray) and isinstance(u, np.ndarray)
                and v.shape == u.shape and v.dtype == u.dtype and v.flags.writeable):  # fmt: skip
            out[k] = np.add(v, u, out=v)
        else:
            out[k] = merge_acc(v, u) if k in _ACC_KEYS else v + u
    return out


#: what a fold that owns its partials may call instead (``StreamingTreeReduce``)
reduce_cut.consuming = reduce_cut_consuming  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------
# pass functions (module level: the Dask engine pickles them)
# ------------------------------------------------------------------------------------------


def pass_single(shard: Shard, bc: Any) -> dict[str, Any]:
    """Algorithm 1 lines 5–7 at one point w: count, hinge sum and Σ_{violated} yᵢx̃ᵢ.

    ``bc = (w, w_bias, bias, pos, dim[, (s_neg, s_pos)[, gmap]])``: with the optional
    per-class relative costs (``--class-weight``; None: none) the cut, its size and the
    hinge are weighted (:func:`~ooc_svm.solvers.perf._numba.cuts.cut_single_weighted`); with
    ``gmap`` (:func:`column_remap`) w and the cut are over the remapped columns.
    """
    w, w_bias, bias, pos, dim = bc[:5]
    sw = bc[5] if len(bc) > 5 else None
    ix = remapped_indices(shard, bc[6]) if len(bc) > 6 else None
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, 1, True, ix)
    wix = u32(shard.indices) if ix is None else ix
    args = (shard.indptr, wix, gidx, shard.data, shard.y, pos, w, w_bias, bias)
    if sw is None:
        cnt, hinge = cut_single(*args, acc[0], bias_slot)
    else:
        cnt, hinge, _ = cut_single_weighted(*args, acc[0], bias_slot, sw[0], sw[1])
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": np.array([float(cnt)]),
        "hinge": np.array([hinge]),
    }


def pass_segment(shard: Shard, bc: Any) -> dict[str, Any]:
    """Accelerated pass: hinge sums along w_b + k(w_c − w_b) and cuts at grid points.

    ``bc = (w2, tb, tc, bias, pos, dim, kv, kg[, (s_neg, s_pos)[, gmap]])``: the optional
    per-class relative costs (None: none) weight the hinge sums, the cuts and their sizes;
    with ``gmap`` (:func:`column_remap`) w2 and the cuts are over the remapped columns.
    """
    w2, tb, tc, bias, pos, dim, kv, kg = bc[:8]
    sw = bc[8] if len(bc) > 8 else None
    ix = remapped_indices(shard, bc[9]) if len(bc) > 9 else None
    K = kg.shape[0]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, K, True, ix)
    hv = np.zeros(kv.shape[0])
    wix = u32(shard.indices) if ix is None else ix
    args = (shard.indptr, wix, gidx, shard.data, shard.y, pos, w2, tb, tc, kv, kg)
    if sw is None:
        cnt = np.zeros(K, dtype=np.int64)
        cut_segment(*args, hv, acc, cnt, bias, bias_slot)
    else:
        cnt = np.zeros(K)
        cut_segment_weighted(*args, hv, acc, cnt, bias, bias_slot, sw[0], sw[1])
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": cnt.astype(np.float64),
        "hinge": hv,
    }


#: what the drivers run: :func:`pass_single` / :func:`pass_segment` over a shard's row blocks
#: (:mod:`ooc_svm.engine.blocks`: all compute threads on every shard, same bits for any
#: number of threads and either engine)
single_blocks = Blocked(pass_single, reduce_cut)
segment_blocks = Blocked(pass_segment, reduce_cut)


def pass_points(shard: Shard, bc: Any) -> dict[str, Any]:
    """Cuts, sizes and hinge sums at K points at once (:func:`~._numba.cuts.cut_points`).

    ``bc = (P, pb, bias, pos, dim, (s_neg, s_pos)[, gmap])``: ``P`` (features, K) the
    points over the (working) columns, ``pb`` their bias entries.
    """
    P, pb, bias, pos, dim, sw = bc[:6]
    ix = remapped_indices(shard, bc[6]) if len(bc) > 6 else None
    K = P.shape[1]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, K, True, ix)
    wix = u32(shard.indices) if ix is None else ix
    cnt = np.zeros(K)
    hinge = np.zeros(K)
    cut_points(
        shard.indptr, wix, gidx, shard.data, shard.y, pos, P, pb, bias, acc, cnt, hinge,
        bias_slot, sw[0], sw[1],
    )  # fmt: skip
    return {"g": _finish_accumulator(acc, cols, dim, True), "cnt": cnt, "hinge": hinge}


def pass_warm(shard: Shard, bc: Any) -> dict[str, Any]:
    """The first pass of a warm start: :func:`pass_points` at the model's w (point 0) and
    the points of its planes over every row, and the cut at point 0 over the rows appended
    since the model apart (``g_new``, ``cnt_new``: the rows from global row ``n_old`` on, a
    shard boundary; None / 0 elsewhere).

    ``bc = (points broadcast, n_old)``.
    """
    points_bc, n_old = bc
    part = pass_points(shard, points_bc)
    g = part["g"]
    if int(shard.row_start) >= int(n_old):
        part["g_new"] = (
            g[:1].copy() if isinstance(g, np.ndarray) else ("s", g[1], g[2][:1].copy(), g[3])
        )
        part["cnt_new"] = part["cnt"][:1].copy()
    else:
        part["g_new"] = None
        part["cnt_new"] = np.zeros(1)
    return part


warm_blocks = Blocked(pass_warm, reduce_cut)


def pass_count_pos(shard: Shard, bc: Any) -> dict[str, Any]:
    """Rows of the positive class ``bc = (pos,)`` in a shard (``--class-weight balanced``)."""
    (pos,) = bc
    return {"n_pos": np.array([float(np.count_nonzero(np.asarray(shard.y) == pos))])}


def pass_labels(shard: Shard, bc: Any) -> list[tuple[np.ndarray, ...]]:
    """Labels (and qids) of a shard, for the ranking losses."""
    q = shard.qid if shard.qid is not None else np.zeros(0, dtype=np.int64)
    return [(np.asarray(shard.y, dtype=np.float64).copy(), np.asarray(q, dtype=np.int64).copy())]


def pass_scores(shard: Shard, bc: Any) -> list[tuple[np.ndarray, ...]]:
    """w·xᵢ for every row (one point) or (w_b·xᵢ, w_c·xᵢ) (two points)."""
    w2, two = bc
    n = shard.n_rows
    if not two:
        out = np.empty(n)
        csr_matvec(shard.indptr, u32(shard.indices), shard.data, w2, 0.0, out)
        return [(out,)]
    ob = np.empty(n)
    oc = np.empty(n)
    scores_two(shard.indptr, u32(shard.indices), shard.data, w2, 0.0, 0.0, ob, oc)
    return [(ob, oc)]


def pass_accumulate(shard: Shard, bc: Any, st: Any) -> tuple[dict, Any]:
    """Σᵢ coefᵢ xᵢ with the per-row coefficients kept as per-shard state."""
    (dim,) = bc
    acc, gidx, _, cols = _new_accumulator(shard, dim, 1, False)
    accumulate_rows(shard.indptr, gidx, shard.data, st, acc[0])
    return {"g": _finish_accumulator(acc, cols, dim, False)}, st


def pass_many(shard: Shard, bc: Any) -> list:
    """Several problems' passes over one shard read once: ``bc`` is a list of
    ``(pass function, broadcast)``; returns the list of their partials."""
    return [fn(shard, b) for fn, b in bc]


def reduce_many(a: Any, b: Any) -> Any:
    """Reduce of :func:`pass_many` partials, problem by problem."""
    if a is None:
        return b
    if b is None:
        return a
    return [reduce_cut(x, y) for x, y in zip(a, b, strict=True)]
