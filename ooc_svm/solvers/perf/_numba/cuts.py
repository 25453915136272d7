"""Numba kernels of the cutting-plane solver (``--solver perf``, Joachims 2006).

All kernels take raw CSR arrays of one shard; ``indices`` is the uint32 view of the stored
int32 column indices (used to read ``w``), ``gidx`` says where a row's entries are
*accumulated* — the same array for a dense accumulator, or local positions into a compact
accumulator that only covers the shard's distinct columns (stores with very many features).
The bias is an extra constant feature of value ``bias`` whose accumulator slot is
``bias_slot``.

Classification (OP2):

- :func:`cut_single` — Algorithm 1 lines 5–7 fused with the loss: margins yᵢ(w·xᵢ), the
  most violated constraint Σ_{yᵢw·xᵢ<1} yᵢxᵢ, its size and the hinge sum, in one sweep.
- :func:`cut_segment` — the accelerated (OCAS-style) pass: margins at two points w_b and w_c
  at once, the hinge sum at every point of a grid on the segment w_b + k(w_c − w_b), and the
  cutting planes at a few grid points, accumulated as difference arrays so that every row
  touches at most two accumulators whatever the number of grid points.

Ordinal regression / ROC area (OP5):

- :func:`rank_cut` — c⁺ᵢ, c⁻ᵢ of the most violated constraint (Algorithm 2) from scores sorted
  within groups (queries), with a Fenwick tree over rank indices: O(n log n + n log R), never
  enumerating pairs; also the pairwise hinge loss Σ_{(i,j)∈P} max(0, 1 − (sᵢ − sⱼ)).
- the same loss alone (line searches) and m = |P|: :mod:`ooc_svm.kernels.ranking`
  (:func:`~ooc_svm.kernels.ranking.rank_loss`, :func:`~ooc_svm.kernels.ranking.count_pairs`),
  shared with the ranking metrics.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ....kernels.ranking import rank_sweep

# ------------------------------------------------------------------------------------------
# classification
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def row_dot2(indptr, indices, data, w2, i):
    """(xᵢ·w2[:, 0], xᵢ·w2[:, 1]) in one sweep of row i, summed in the row's stored order
    (inlined into its callers by numba: the margins at the two ends of a segment)."""
    sb = 0.0
    sc = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        j = indices[k]
        v = data[k]
        sb += v * w2[j, 0]
        sc += v * w2[j, 1]
    return sb, sc


@njit(cache=True, nogil=True)
def cut_single(indptr, indices, gidx, data, y, pos, w, w_bias, bias, g, bias_slot):
    """One-point pass of Algorithm 1.

    For every row: ``mᵢ = ±1 · (xᵢ·w[:d] + w_bias·bias)`` (+1 where ``y == pos``); rows with
    ``mᵢ < 1`` add ``±xᵢ`` to ``g`` (at ``gidx``) and ``±bias`` to ``g[bias_slot]``.

    Returns
    -------
    (count, hinge) : number of violated rows and Σ max(0, 1 − mᵢ).
    """
    n = indptr.shape[0] - 1
    count = 0
    hinge = 0.0
    tb = w_bias * bias
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * w[indices[k]]
        yi = 1.0 if y[i] == pos else -1.0
        m = yi * (s + tb)
        if m < 1.0:
            count += 1
            hinge += 1.0 - m
            for k in range(indptr[i], indptr[i + 1]):
                g[gidx[k]] += yi * data[k]
            g[bias_slot] += yi * bias
    return count, hinge


@njit(cache=True, nogil=True)
def _count_less(a, t):
    """Number of entries of the sorted array ``a`` below t (searchsorted left)."""
    lo = 0
    hi = a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _count_less_eq(a, t):
    """Number of entries of the sorted array ``a`` at most t (searchsorted right)."""
    lo = 0
    hi = a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _violated_range(mb, d, kg):
    """Grid points [lo, hi) of the increasing grid ``kg`` at which a row with margins
    mb + k·d is violated (margin < 1): a prefix or a suffix, mb + k·d being affine in k."""
    ng = kg.shape[0]
    if d > 0.0:
        return 0, _count_less(kg, (1.0 - mb) / d)
    if d < 0.0:
        return _count_less_eq(kg, (1.0 - mb) / d), ng
    if mb < 1.0:
        return 0, ng
    return 0, 0


@njit(cache=True, nogil=True, inline="always")
def _add_violated_row(indptr, gidx, data, i, yi, bias, bias_slot, lo, hi, ng, D, cnt):
    """Row i (label ``yi``), violated on the grid points ``[lo, hi)``, into the difference
    arrays of the cutting planes: added to ``D[lo]`` / ``cnt[lo]``, subtracted at ``hi``."""
    cnt[lo] += 1
    for k in range(indptr[i], indptr[i + 1]):
        D[lo, gidx[k]] += yi * data[k]
    D[lo, bias_slot] += yi * bias
    if hi < ng:
        cnt[hi] -= 1
        for k in range(indptr[i], indptr[i + 1]):
            D[hi, gidx[k]] -= yi * data[k]
        D[hi, bias_slot] -= yi * bias


@njit(cache=True, nogil=True)
def cut_segment(
    indptr, indices, gidx, data, y, pos, w2, tb, tc, kv, kg, hv, D, cnt, bias, bias_slot
):
    """Accelerated pass: hinge values along a segment and cutting planes at grid points.

    Parameters
    ----------
    w2 : float64 (d, 2)
        Column 0 is w_b (best point so far), column 1 w_c (cutting-plane solution), feature
        part only; ``tb``, ``tc`` are their bias terms (bias weight × bias value).
    kv : float64 (Kv,)
        Grid of step lengths at which the hinge sum is wanted; ``hv[q] += Σᵢ max(0, 1 − mᵢ(kv[q]))``
        with mᵢ(k) = (1 − k)·mᵢᵇ + k·mᵢᶜ.
    kg : float64 (Kg,), increasing
        Grid of step lengths at which cutting planes are wanted. Row i is violated at k iff
        mᵢ(k) < 1, a prefix or a suffix of ``kg`` (mᵢ is affine in k); the row is added to
        ``D[lo]`` and subtracted from ``D[hi]`` (difference arrays), likewise ``cnt``. The
        cutting plane at ``kg[p]`` is then ``cumsum(D, axis=0)[p]`` and its size ``cumsum(cnt)[p]``.
    """
    n = indptr.shape[0] - 1
    nv = kv.shape[0]
    ng = kg.shape[0]
    for i in range(n):
        sb, sc = row_dot2(indptr, indices, data, w2, i)
        yi = 1.0 if y[i] == pos else -1.0
        mb = yi * (sb + tb)
        mc = yi * (sc + tc)
        d = mc - mb
        for q in range(nv):
            m = mb + kv[q] * d
            if m < 1.0:
                hv[q] += 1.0 - m
        lo, hi = _violated_range(mb, d, kg)
        if lo < hi:
            _add_violated_row(indptr, gidx, data, i, yi, bias, bias_slot, lo, hi, ng, D, cnt)


@njit(cache=True, nogil=True)
def scores_two(indptr, indices, data, w2, tb, tc, out_b, out_c):
    """out_b[i] = xᵢ·w2[:, 0] + tb and out_c[i] = xᵢ·w2[:, 1] + tc in one sweep."""
    n = indptr.shape[0] - 1
    for i in range(n):
        sb, sc = row_dot2(indptr, indices, data, w2, i)
        out_b[i] = sb + tb
        out_c[i] = sc + tc


@njit(cache=True, nogil=True)
def accumulate_rows(indptr, gidx, data, coef, g):
    """g[gidx] += Σᵢ coefᵢ xᵢ over rows with a non-zero coefficient; returns Σ coefᵢ."""
    n = indptr.shape[0] - 1
    tot = 0.0
    for i in range(n):
        c = coef[i]
        if c != 0.0:
            tot += c
            for k in range(indptr[i], indptr[i + 1]):
                g[gidx[k]] += c * data[k]
    return tot


# ------------------------------------------------------------------------------------------
# ordinal regression / ROC area
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def rank_cut(order, s, r, starts, n_ranks, cplus, cminus):
    """Most violated constraint of OP5 (Joachims 2006, Algorithm 2) for given scores.

    Parameters
    ----------
    order : int64 (n,)
        Row indices sorted by group, and within a group by *decreasing* score.
    s : float64 (n,)
        Scores w·xᵢ.
    r : int64 (n,)
        Rank index of every row (0 = lowest).
    starts : int64 (G + 1,)
        Group boundaries in ``order`` (one group = one query; a single group without qids).
    n_ranks : int
    cplus, cminus : int64 (n,)
        Output: c⁺ᵢ = |{j : rⱼ < rᵢ, sᵢ − sⱼ < 1}|, c⁻ᵢ = |{j : rⱼ > rᵢ, sⱼ − sᵢ < 1}| (same group).

    Returns
    -------
    (violated_pairs, loss) : Σ c⁺ᵢ and Σ_{(i,j)∈P} max(0, 1 − sᵢ + sⱼ).
    """
    return rank_sweep(order, s, r, starts, n_ranks, cplus, cminus, True)


# ------------------------------------------------------------------------------------------
# small dense helpers (no BLAS: its thread pool competes with the engine's threads)
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def vdot(a, b):
    """Σ aᵢbᵢ in float64."""
    s = 0.0
    for i in range(a.shape[0]):
        s += float(a[i]) * b[i]
    return s


@njit(cache=True, nogil=True)
def sparse_vdot(idx, vals, b):
    """Σₖ vals[k]·b[idx[k]] in float64."""
    s = 0.0
    for k in range(idx.shape[0]):
        s += float(vals[k]) * b[idx[k]]
    return s


@njit(cache=True, nogil=True)
def matvec(A, x):
    """A @ x for a small dense float64 matrix."""
    n, m = A.shape
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for j in range(m):
            s += A[i, j] * x[j]
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def merge_sparse_rows(ca, va, cb, vb):
    """Sum of two sparse row blocks with sorted unique columns: (cols, vals (K, len))."""
    na = ca.shape[0]
    nb = cb.shape[0]
    K = va.shape[0]
    # count the union
    i = 0
    j = 0
    n = 0
    while i < na or j < nb:
        if j >= nb or (i < na and ca[i] < cb[j]):
            i += 1
        elif i >= na or cb[j] < ca[i]:
            j += 1
        else:
            i += 1
            j += 1
        n += 1
    cols = np.empty(n, dtype=np.int64)
    vals = np.zeros((K, n))
    i = 0
    j = 0
    t = 0
    while i < na or j < nb:
        if j >= nb or (i < na and ca[i] < cb[j]):
            cols[t] = ca[i]
            for k in range(K):
                vals[k, t] = va[k, i]
            i += 1
        elif i >= na or cb[j] < ca[i]:
            cols[t] = cb[j]
            for k in range(K):
                vals[k, t] = vb[k, j]
            j += 1
        else:
            cols[t] = ca[i]
            for k in range(K):
                vals[k, t] = va[k, i] + vb[k, j]
            i += 1
            j += 1
        t += 1
    return cols, vals


# ------------------------------------------------------------------------------------------
# class-weighted classification (OP2 with per-row costs s_i = C_{y_i} / C)
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def cut_single_weighted(
    indptr, indices, gidx, data, y, pos, w, w_bias, bias, g, bias_slot, s_neg, s_pos
):
    """:func:`cut_single` with per-class relative costs (``--class-weight``).

    A row of class ``pos`` weighs ``s_pos``, any other ``s_neg``: violated rows add
    ``sᵢ·yᵢ·x̃ᵢ`` to ``g``, and the returned size and hinge sum are weighted,
    ``Σ_{mᵢ<1} sᵢ`` and ``Σ sᵢ max(0, 1 − mᵢ)`` (the weighted 1-slack cut).

    Returns
    -------
    (weighted count, weighted hinge, number of violated rows)
    """
    n = indptr.shape[0] - 1
    count = 0
    wcount = 0.0
    hinge = 0.0
    tb = w_bias * bias
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * w[indices[k]]
        if y[i] == pos:
            yi = 1.0
            si = s_pos
        else:
            yi = -1.0
            si = s_neg
        m = yi * (s + tb)
        if m < 1.0:
            count += 1
            wcount += si
            hinge += si * (1.0 - m)
            sy = si * yi
            for k in range(indptr[i], indptr[i + 1]):
                g[gidx[k]] += sy * data[k]
            g[bias_slot] += sy * bias
    return wcount, hinge, count


@njit(cache=True, nogil=True)
def cut_segment_weighted(
    indptr, indices, gidx, data, y, pos, w2, tb, tc, kv, kg, hv, D, cnt, bias, bias_slot,
    s_neg, s_pos,
):  # fmt: skip
    """:func:`cut_segment` with per-class relative costs (``--class-weight``).

    Row i of class ``pos`` weighs ``s_pos``, any other ``s_neg``: ``hv`` sums ``sᵢ·max(0,
    1 − mᵢ(k))``, the difference arrays ``D`` take ``±sᵢ·yᵢ·x̃ᵢ`` and ``cnt`` (float64) ``±sᵢ``.
    """
    n = indptr.shape[0] - 1
    nv = kv.shape[0]
    ng = kg.shape[0]
    for i in range(n):
        sb, sc = row_dot2(indptr, indices, data, w2, i)
        if y[i] == pos:
            yi = 1.0
            si = s_pos
        else:
            yi = -1.0
            si = s_neg
        mb = yi * (sb + tb)
        mc = yi * (sc + tc)
        d = mc - mb
        for q in range(nv):
            m = mb + kv[q] * d
            if m < 1.0:
                hv[q] += si * (1.0 - m)
        if d > 0.0:
            lo = 0
            hi = _count_less(kg, (1.0 - mb) / d)
        elif d < 0.0:
            lo = _count_less_eq(kg, (1.0 - mb) / d)
            hi = ng
        elif mb < 1.0:
            lo = 0
            hi = ng
        else:
            lo = 0
            hi = 0
        if lo >= hi:
            continue
        sy = si * yi
        cnt[lo] += si
        for k in range(indptr[i], indptr[i + 1]):
            D[lo, gidx[k]] += sy * data[k]
        D[lo, bias_slot] += sy * bias
        if hi < ng:
            cnt[hi] -= si
            for k in range(indptr[i], indptr[i + 1]):
                D[hi, gidx[k]] -= sy * data[k]
            D[hi, bias_slot] -= sy * bias


@njit(cache=True, nogil=True)
def cut_points(
    indptr, indices, gidx, data, y, pos, P, pb, bias, g, cnt, hinge, bias_slot, s_neg, s_pos
):
    """Cutting planes at K points at once (a warm start re-evaluating a model's planes).

    ``P`` is (features, K), C-ordered: column j is point j over the features and ``pb[j]``
    its bias entry; for every row and point j with margin mᵢⱼ = yᵢ(xᵢ·P[:, j] + bias·pb[j])
    below 1, row j of ``g`` gains ``sᵢ·yᵢ·x̃ᵢ``, ``cnt[j]`` gains ``sᵢ`` and ``hinge[j]``
    gains ``sᵢ(1 − mᵢⱼ)`` (``sᵢ``: ``s_pos`` for class ``pos``, else ``s_neg``; 1, 1
    without class weights), as :func:`cut_single_weighted` at each point.
    """
    n = indptr.shape[0] - 1
    K = P.shape[1]
    s = np.empty(K)
    for i in range(n):
        for j in range(K):
            s[j] = bias * pb[j]
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            c = indices[k]
            for j in range(K):
                s[j] += v * P[c, j]
        if y[i] == pos:
            yi = 1.0
            si = s_pos
        else:
            yi = -1.0
            si = s_neg
        sy = si * yi
        for j in range(K):
            m = yi * s[j]
            if m < 1.0:
                cnt[j] += si
                hinge[j] += si * (1.0 - m)
                for k in range(indptr[i], indptr[i + 1]):
                    g[j, gidx[k]] += sy * data[k]
                g[j, bias_slot] += sy * bias
