"""Numba kernels of the selective cutting-plane variant (``--solver perf --variant selective``).

- :func:`cut_segment_margins` — the accelerated pass
  (:func:`ooc_svm.solvers.perf._numba.cuts.cut_segment`) that also writes every row's margins
  at both ends of the segment; :func:`violated_at` reproduces its violation rule for given
  rows.
- :func:`select_prefix` — how many rows of a list sorted by closeness to the margin fit a
  byte budget.
- :func:`signed_margins` — yᵢ(w·x̃ᵢ) over the in-memory rows (the inner iterations' oracle).
- :func:`segment_min` — the minimiser of the inner loop's objective F = max(P̃, M) on a
  segment, by bisection on its right derivative (one sweep of the rows per evaluation);
  :func:`segment_bins` / :func:`bins_eval` — the same F and F'(k⁺) at every point of a grid
  from one sweep (the threaded line search,
  :func:`~ooc_svm.solvers.perf.selective_inner.segment_min_threaded`); :func:`step_flip` — the
  inner loop's cut coefficients and margin update in one sweep.

Conventions as in :mod:`ooc_svm.solvers.perf._numba.cuts`: ``indices`` is the uint32 view of
the stored int32 column indices, ``gidx`` the accumulation positions, the bias an extra
constant feature of value ``bias`` accumulated at ``bias_slot``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .cuts import _add_violated_row, _count_less_eq, _violated_range, row_dot2


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
def flip_cut(m, c, ys, coef):
    """One sweep of the inner cut update: for every row, coefᵢ = ysᵢ where it becomes
    violated (mᵢ < 1 and not ``c[i]``), −ysᵢ where it stops being, else 0; ``c`` is set to
    [mᵢ < 1]. Returns (rows that flipped, rows violated)."""
    nf = 0
    nv = 0
    for i in range(m.shape[0]):
        v = m[i] < 1.0
        if v:
            nv += 1
        if v != c[i]:
            coef[i] = ys[i] if v else -ys[i]
            c[i] = v
            nf += 1
        else:
            coef[i] = 0.0
    return nf, nv


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
    """:func:`ooc_svm.solvers.perf._numba.cuts.cut_segment` with the hinge grid equal to the
    cut grid ``kg`` (increasing, may start at 0), also writing every row's margins at both
    ends.

    Row i has margins mᵢ(k) = (1 − k)·mbᵢ + k·mcᵢ on the segment w_b + k(w_c − w_b);
    ``hv[q] += max(0, 1 − mᵢ(kg[q]))``; the row is added to ``D[lo]`` / ``cnt[lo]`` and
    subtracted from ``D[hi]`` / ``cnt[hi]`` where [lo, hi) are the grid points at which it
    is violated, so that the cutting plane at ``kg[p]`` is ``cumsum(D, axis=0)[p]``.
    """
    n = indptr.shape[0] - 1
    ng = kg.shape[0]
    for i in range(n):
        sb, sc = row_dot2(indptr, indices, data, w2, i)
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
        if lo < hi:
            _add_violated_row(indptr, gidx, data, i, yi, bias, bias_slot, lo, hi, ng, D, cnt)


@njit(cache=True, nogil=True)
def _hinge_slope(mb, dm, k):
    """(Σᵢ max(0, 1 − mbᵢ − k·dmᵢ), its right derivative in k)."""
    s = 0.0
    g = 0.0
    for i in range(mb.shape[0]):
        v = 1.0 - mb[i] - k * dm[i]
        if v > 0.0:
            s += v
            g -= dm[i]
        elif v == 0.0 and dm[i] < 0.0:
            g -= dm[i]
    return s, g


@njit(cache=True, nogil=True)
def _segment_eval(k, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v, h0=0.0, h1=0.0):
    """F(k) and its right derivative F'(k⁺) (see :func:`segment_min`); the hinge rows
    ``mb``, ``dm`` plus a linear part h0 − k·h1 of rows known to be active at k."""
    h, hs = _hinge_slope(mb, dm, k)
    h += h0 - k * h1
    hs -= h1
    return segment_eval_sums(k, a0, a1, a2, L0, L1, C, Cp, h, hs, u, v)


@njit(cache=True, nogil=True)
def narrow(mb, dm, lo, hi):
    """:func:`_narrow` of a chunk of rows from h0 = h1 = 0 (the threaded line search)."""
    return _narrow(mb, dm, lo, hi, 0.0, 0.0)


@njit(cache=True, nogil=True)
def segment_eval_sums(k, a0, a1, a2, L0, L1, C, Cp, h, hs, u, v):
    """F(k) and F'(k⁺) of :func:`segment_min` from the hinge sum ``h`` of the rows at k and
    its right slope ``hs``."""
    lt = C * (L0 - k * L1 + h)
    st = C * (hs - L1)
    lm = 0.0
    sm = 0.0
    for j in range(u.shape[0]):
        t = u[j] - k * v[j]
        if t > lm or (t == lm and -v[j] > sm):
            lm = t
            sm = -v[j]
    lm *= Cp
    sm *= Cp
    if lm > lt:
        lt = lm
        st = sm
    elif lm == lt and sm > st:
        st = sm
    return 0.5 * (a0 + 2.0 * k * a1 + k * k * a2) + lt, a1 + k * a2 + st


@njit(cache=True, nogil=True)
def _narrow(mb, dm, lo, hi, h0, h1):
    """The rows whose hinge 1 − mb − k·dm may change sign within [lo, hi] (compact copies),
    and h0, h1 increased by the rows active on all of it (hinge h0 − k·h1 there); rows
    inactive on all of it contribute nothing."""
    n = mb.shape[0]
    keep = np.empty(n, dtype=np.bool_)
    m = 0
    for i in range(n):
        vl = 1.0 - mb[i] - lo * dm[i]
        vh = 1.0 - mb[i] - hi * dm[i]
        if vl > 0.0 and vh > 0.0:
            h0 += 1.0 - mb[i]
            h1 += dm[i]
            keep[i] = False
        elif vl < 0.0 and vh < 0.0:
            keep[i] = False
        else:
            keep[i] = True
            m += 1
    cmb = np.empty(m)
    cdm = np.empty(m)
    j = 0
    for i in range(n):
        if keep[i]:
            cmb[j] = mb[i]
            cdm[j] = dm[i]
            j += 1
    return cmb, cdm, h0, h1


@njit(cache=True, nogil=True)
def segment_min(a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v, steps):
    """Minimiser k ≥ 0 of the convex F(k) = ½(a0 + 2k·a1 + k²·a2) + max(P̃ part, M part) with
    P̃ part C(L0 − k·L1 + Σᵢ max(0, 1 − mbᵢ − k·dmᵢ)) and M part Cp·max(0, maxⱼ uⱼ − k·vⱼ).

    Bisection on the right derivative (non-decreasing): the bracket [lo, hi] with F'(lo⁺) < 0
    ≤ F'(hi⁺) is found by doubling from 1, then halved ``steps`` times; returns (k, F(k)) of
    the better end. k = 0 when F'(0⁺) ≥ 0. Every few halvings the rows whose hinge keeps
    its sign on the bracket are folded into a linear term (:func:`_narrow`), so the late
    steps sweep only the rows whose hinge changes sign near the minimiser.
    """
    f0, s0 = _segment_eval(0.0, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
    if s0 >= 0.0:
        return 0.0, f0
    lo = 0.0
    hi = 1.0
    fh, sh = _segment_eval(hi, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
    grow = 0
    while sh < 0.0 and grow < 60:
        lo = hi
        hi *= 2.0
        fh, sh = _segment_eval(hi, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
        grow += 1
    fl, sl = _segment_eval(lo, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
    cmb, cdm, h0, h1 = _narrow(mb, dm, lo, hi, 0.0, 0.0)
    return segment_bisect(lo, hi, fl, fh, a0, a1, a2, L0, L1, C, Cp, cmb, cdm, u, v, h0, h1,
                          steps)  # fmt: skip


@njit(cache=True, nogil=True)
def segment_bisect(lo, hi, fl, fh, a0, a1, a2, L0, L1, C, Cp, cmb, cdm, u, v, h0, h1, steps):
    """The halvings of :func:`segment_min` on the bracket [lo, hi] (F(lo) = ``fl``, F(hi) =
    ``fh``) from the rows already narrowed to it (``cmb``, ``cdm``, ``h0``, ``h1``)."""
    for t in range(steps):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if t > 0 and t % 3 == 0:
            cmb, cdm, h0, h1 = _narrow(cmb, cdm, lo, hi, h0, h1)
        fm, sm = _segment_eval(mid, a0, a1, a2, L0, L1, C, Cp, cmb, cdm, u, v, h0, h1)
        if sm < 0.0:
            lo, fl = mid, fm
        else:
            hi, fh = mid, fm
    if fl <= fh:
        return lo, fl
    return hi, fh


@njit(cache=True, nogil=True, inline="always")
def _segment_key(mb, mc):
    """Distance of 1 from [min(mb, mc), max(mb, mc)] (0 when the row changes sides)."""
    lo = mb if mb < mc else mc
    hi = mc if mb < mc else mb
    k = lo - 1.0
    if 1.0 - hi > k:
        k = 1.0 - hi
    return k if k > 0.0 else 0.0


@njit(cache=True, nogil=True, inline="always")
def _bucket(edges, x):
    """Number of ``edges`` (increasing) at or below ``x``."""
    return _count_less_eq(edges, x)


@njit(cache=True, nogil=True)
def threshold_rows(indptr, mb, mc, tau, per_row, per_nz, edges, hist, out_rows):
    """The rows whose segment key (:func:`_segment_key`) is at most ``tau``, in shard order,
    written to ``out_rows``; returns (their count, their bytes at ``per_row + per_nz · nnz``
    each).

    Every row's bytes are also added to three histograms over the buckets of ``edges``
    (bucket b: ``b`` edges at or below the value): ``hist[0]`` by |1 − mb|, ``hist[1]`` by
    |1 − mc|, ``hist[2]`` by max(|1 − mb|, |1 − mc|), which bounds |1 − m| anywhere on the
    segment (the next pass's threshold, :func:`~ooc_svm.solvers.perf.selective.
    threshold_from_hist`)."""
    n = mb.shape[0]
    k = 0
    used = 0
    for i in range(n):
        b = per_row + per_nz * (indptr[i + 1] - indptr[i])
        db = abs(1.0 - mb[i])
        dc = abs(1.0 - mc[i])
        hist[0, _bucket(edges, db)] += b
        hist[1, _bucket(edges, dc)] += b
        hist[2, _bucket(edges, db if db > dc else dc)] += b
        if _segment_key(mb[i], mc[i]) <= tau:
            out_rows[k] = i
            k += 1
            used += b
    return k, used


@njit(cache=True, nogil=True, inline="always")
def _first_at(c, d, grid, nu, g0, step, t, pos):
    """The first j with c − grid[j]·d ≤ 0 (``pos``: d > 0) or ≥ 0 (d < 0), len(grid) if
    none: guessed from the sign change t = c/d (``grid[:nu + 1]`` equal steps of ``step``
    from ``g0``, then doublings), then moved to the exact rule's answer (the rule is
    monotone in j, so the result is exact whatever the guess)."""
    G = grid.shape[0]
    if not t > g0:
        j = 0
    elif t <= grid[nu]:
        j = int(math.ceil((t - g0) / step))
        j = min(max(j, 0), nu)
    else:
        j = nu
        while j < G and grid[j] < t:
            j += 1
    if pos:
        while j > 0 and c - grid[j - 1] * d <= 0.0:
            j -= 1
        while j < G and not c - grid[j] * d <= 0.0:
            j += 1
    else:
        while j > 0 and c - grid[j - 1] * d >= 0.0:
            j -= 1
        while j < G and not c - grid[j] * d >= 0.0:
            j += 1
    return j


@njit(cache=True, nogil=True)
def segment_bins(mb, mc, dm, grid, nu, bins):
    """One sweep of the threaded line search over a chunk of rows: ``dm`` = ``mc`` − ``mb``
    (when ``mc`` is empty: ``dm`` is given), and every row's hinge 1 − mbᵢ − k·dmᵢ binned
    by where on the increasing ``grid`` (G points: ``nu`` equal steps, then any points) it
    changes sign.

    ``bins`` (5, G + 1), added to: for a row with dmᵢ > 0, active (hinge > 0) at the grid
    points before J = the first point where it is ≤ 0, ``bins[0, J] += 1 − mbᵢ``,
    ``bins[1, J] += dmᵢ``; for dmᵢ ≤ 0, active from J = the first point where it is ≥ 0
    (> 0 when dmᵢ = 0; the right derivative's rule of :func:`_hinge_slope`), ``bins[2, J]``
    and ``bins[3, J]`` likewise; ``bins[4, J] += 1`` for the rows whose sign changes in
    (grid[J − 1], grid[J]]. :func:`bins_eval` turns the summed bins into F and F'(k⁺) at
    every grid point."""
    n = mb.shape[0]
    g0 = grid[0]
    step = (grid[nu] - g0) / nu
    if mc.shape[0] == n:
        for i in range(n):
            dm[i] = mc[i] - mb[i]
    for i in range(n):
        c = 1.0 - mb[i]
        d = dm[i]
        if d > 0.0:
            j = _first_at(c, d, grid, nu, g0, step, c / d, True)
            bins[0, j] += c
            bins[1, j] += d
            bins[4, j] += 1.0
        elif d < 0.0:
            j = _first_at(c, d, grid, nu, g0, step, c / d, False)
            bins[2, j] += c
            bins[3, j] += d
            bins[4, j] += 1.0
        elif c > 0.0:
            bins[2, 0] += c


@njit(cache=True, nogil=True)
def bins_eval(grid, bins, h0, h1, a0, a1, a2, L0, L1, C, Cp, u, v, F, S):
    """F(k) and F'(k⁺) of :func:`segment_min` at every ``grid`` point from the summed
    :func:`segment_bins` and the linear part h0 − k·h1 of rows active on the whole grid."""
    G = grid.shape[0]
    # suffix sums (dm > 0 rows active at j: J > j) and prefix sums (dm <= 0 rows: J <= j),
    # each of terms of one sign for the slope: no cancellation
    sc = np.zeros(G + 1)
    sd = np.zeros(G + 1)
    for j in range(G - 1, -1, -1):
        sc[j] = sc[j + 1] + bins[0, j + 1]
        sd[j] = sd[j + 1] + bins[1, j + 1]
    nc = 0.0
    nd = 0.0
    for j in range(G):
        nc += bins[2, j]
        nd += bins[3, j]
        pc = sc[j]
        pd = sd[j]
        k = grid[j]
        h = (pc + nc) - k * (pd + nd) + (h0 - k * h1)
        hs = -(pd + nd) - h1
        F[j], S[j] = segment_eval_sums(k, a0, a1, a2, L0, L1, C, Cp, h, hs, u, v)


@njit(cache=True, nogil=True)
def step_flip(mb, dm, k, t, move, c, ys, coef):
    """The inner loop's update after a line search, on a chunk of rows: the cut point's
    margins m = mb + t·dm give the cut by :func:`flip_cut`'s rule (``coef``, ``c``), and
    when ``move`` the best point moves: mb += k·dm (in place). Returns (flips, violated)."""
    nf = 0
    nv = 0
    for i in range(mb.shape[0]):
        m = mb[i] + t * dm[i]
        vi = m < 1.0
        if vi:
            nv += 1
        if vi != c[i]:
            coef[i] = ys[i] if vi else -ys[i]
            c[i] = vi
            nf += 1
        else:
            coef[i] = 0.0
        if move:
            mb[i] = mb[i] + k * dm[i]
    return nf, nv


@njit(cache=True, nogil=True)
def segment_bin_sums(mb, mc, dm, grid, nu):
    """:func:`segment_bins` of a chunk of rows into new bins (a task of the threaded line
    search; the chunks' bins are summed in chunk order)."""
    bins = np.zeros((5, grid.shape[0] + 1))
    segment_bins(mb, mc, dm, grid, nu, bins)
    return bins
