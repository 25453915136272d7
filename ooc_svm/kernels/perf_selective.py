"""Numba kernels of the selective cutting-plane variant (``--solver perf --variant selective``).

- :func:`cut_single_margins` — :func:`ooc_svm.kernels.perf.cut_single` (margins, most violated
  constraint, its size and the hinge sum in one sweep) that also writes every row's margin
  yᵢ(w·x̃ᵢ), from which the pass selects the rows kept in memory.
- :func:`cut_segment_margins` — the accelerated pass (:func:`ooc_svm.kernels.perf.cut_segment`)
  that also writes every row's margins at both ends of the segment; :func:`violated_at`
  reproduces its violation rule for given rows.
- :func:`select_prefix` — how many rows of a list sorted by closeness to the margin fit a
  byte budget.
- :func:`signed_margins` — yᵢ(w·x̃ᵢ) over the in-memory rows (the inner iterations' oracle).

Conventions as in :mod:`ooc_svm.kernels.perf`: ``indices`` is the uint32 view of the stored
int32 column indices, ``gidx`` the accumulation positions, the bias an extra constant feature
of value ``bias`` accumulated at ``bias_slot``.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def cut_single_margins(indptr, indices, gidx, data, y, pos, w, w_bias, bias, g, bias_slot, m):
    """One-point pass of Algorithm 1 that also keeps the margins.

    For every row: ``m[i] = ±1 · (xᵢ·w + w_bias·bias)`` (+1 where ``y == pos``); rows with
    ``m[i] < 1`` add ``±xᵢ`` to ``g`` (at ``gidx``) and ``±bias`` to ``g[bias_slot]``.

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
        mi = yi * (s + tb)
        m[i] = mi
        if mi < 1.0:
            count += 1
            hinge += 1.0 - mi
            for k in range(indptr[i], indptr[i + 1]):
                g[gidx[k]] += yi * data[k]
            g[bias_slot] += yi * bias
    return count, hinge


@njit(cache=True, nogil=True)
def select_prefix(indptr, order, per_row, per_nz, budget):
    """Length of the longest prefix of ``order`` whose rows take at most ``budget`` bytes
    (a row takes ``per_row + per_nz · nnz`` bytes)."""
    used = 0
    for t in range(order.shape[0]):
        i = order[t]
        b = per_row + per_nz * (indptr[i + 1] - indptr[i])
        if used + b > budget:
            return t
        used += b
    return order.shape[0]


@njit(cache=True, nogil=True)
def signed_margins(indptr, indices, data, ys, w, tb, out):
    """out[i] = ysᵢ · (xᵢ·w + tb) (``ys`` = ±1)."""
    n = indptr.shape[0] - 1
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * w[indices[k]]
        out[i] = ys[i] * (s + tb)
    return out


@njit(cache=True, nogil=True)
def _count_less(a, t):
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
    """Grid points [lo, hi) of ``kg`` at which a row with margins mb + k·d is violated
    (the rule of :func:`ooc_svm.kernels.perf.cut_segment`)."""
    ng = kg.shape[0]
    if d > 0.0:
        return 0, _count_less(kg, (1.0 - mb) / d)
    if d < 0.0:
        return _count_less_eq(kg, (1.0 - mb) / d), ng
    if mb < 1.0:
        return 0, ng
    return 0, 0


@njit(cache=True, nogil=True)
def violated_at(mb, mc, kg, q, out):
    """out[i] = 1.0 where row i (margins ``mb``, ``mc`` at the ends of the segment) is
    violated at grid point ``kg[q]`` by exactly the rule of :func:`cut_segment_margins`."""
    for i in range(mb.shape[0]):
        lo, hi = _violated_range(mb[i], mc[i] - mb[i], kg)
        out[i] = 1.0 if lo <= q < hi else 0.0
    return out


@njit(cache=True, nogil=True)
def cut_segment_margins(
    indptr, indices, gidx, data, y, pos, w2, tb, tc, kg, hv, D, cnt, bias, bias_slot, mb_out, mc_out
):
    """:func:`ooc_svm.kernels.perf.cut_segment` with the hinge grid equal to the cut grid
    ``kg`` (increasing, may start at 0), also writing every row's margins at both ends.

    Row i has margins mᵢ(k) = (1 − k)·mbᵢ + k·mcᵢ on the segment w_b + k(w_c − w_b);
    ``hv[q] += max(0, 1 − mᵢ(kg[q]))``; the row is added to ``D[lo]`` / ``cnt[lo]`` and
    subtracted from ``D[hi]`` / ``cnt[hi]`` where [lo, hi) are the grid points at which it
    is violated, so that the cutting plane at ``kg[p]`` is ``cumsum(D, axis=0)[p]``.
    """
    n = indptr.shape[0] - 1
    ng = kg.shape[0]
    for i in range(n):
        sb = 0.0
        sc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            v = data[k]
            sb += v * w2[j, 0]
            sc += v * w2[j, 1]
        yi = 1.0 if y[i] == pos else -1.0
        mb = yi * (sb + tb)
        mc = yi * (sc + tc)
        mb_out[i] = mb
        mc_out[i] = mc
        d = mc - mb
        for q in range(ng):
            m = mb + kg[q] * d
            if m < 1.0:
                hv[q] += 1.0 - m
        lo, hi = _violated_range(mb, d, kg)
        if lo >= hi:
            continue
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
def hinge_line(mb, dm, k):
    """Σᵢ max(0, 1 − mbᵢ − k·dmᵢ): the hinge sum at step k of a segment."""
    s = 0.0
    for i in range(mb.shape[0]):
        v = 1.0 - mb[i] - k * dm[i]
        if v > 0.0:
            s += v
    return s


@njit(cache=True, nogil=True)
def copy_rows(indptr, indices, data, rows, out_indptr, out_pos, out_indices, out_data):
    """Copy rows ``rows`` of a CSR into rows ``out_pos`` of an output CSR whose ``out_indptr``
    is already filled (a gather from several sources without concatenating them)."""
    for t in range(rows.shape[0]):
        i = rows[t]
        p = out_indptr[out_pos[t]]
        for k in range(indptr[i], indptr[i + 1]):
            out_indices[p] = indices[k]
            out_data[p] = data[k]
            p += 1
