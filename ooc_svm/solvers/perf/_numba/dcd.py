"""Numba kernels of the dual coordinate descent of ``--solver perf --variant dcd``.

Problem (LIBLINEAR ``-s 3`` / ``-s 1`` with ``-B bias``; Hsieh, Chang, Lin, Keerthi, Sundararajan,
*A Dual Coordinate Descent Method for Large-scale Linear SVM*, ICML 2008, Algorithm 1 with the
shrinking of Section 3.2), over x̃ᵢ = (xᵢ, bias) and yᵢ ∈ {−1, +1}::

    min_α  ½ αᵀ(Q + D)α − eᵀα   s.t. 0 ≤ αᵢ ≤ Uᵢ,   Qᵢⱼ = yᵢyⱼ x̃ᵢᵀx̃ⱼ

L1-loss (hinge): Uᵢ = Cᵢ, Dᵢᵢ = 0; L2-loss (squared hinge): Uᵢ = ∞, Dᵢᵢ = 1/(2Cᵢ). The
primal w = Σ αᵢyᵢx̃ᵢ is kept up to date: the last entry of ``w`` is the bias weight.

- :func:`dcd_sweep` — one sweep over the active rows of a block in a random order (seeded
  Fisher–Yates, :func:`shuffle`), with LIBLINEAR's shrinking against the previous sweep's
  projected-gradient extremes.
- :func:`line_losses`, :func:`segment_losses`, :func:`move_margins`, :func:`alpha_terms` —
  what the certificate needs: the primal losses along a segment of w's, Σαᵢ and Σ Dᵢᵢαᵢ²,
  in the rows' order.
- :func:`row_norms`, :func:`count_columns`, :func:`remap_columns` — block preparation;
  :func:`add_rows` — w = Σ αᵢyᵢx̃ᵢ of a warm start's α.

All take one block's raw CSR arrays (``indptr`` int64, column ids of any integer type,
``data`` float32) and its per-row ``sign`` (int8, ±1).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _next(state):
    """xorshift64* step on ``state[0]`` (uint64); returns 53 random bits as int64."""
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return np.int64((x * np.uint64(2685821657736338717)) >> np.uint64(11))


@njit(cache=True, nogil=True)
def shuffle(index, n, seed):
    """Permute ``index[:n]`` in place (Fisher–Yates) from a xorshift64* stream of ``seed``:
    the same seed gives the same order on every machine."""
    st = np.empty(1, dtype=np.uint64)
    st[0] = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)
    if st[0] == 0:
        st[0] = np.uint64(1)
    for k in range(n - 1, 0, -1):
        j = _next(st) % (k + 1)
        t = index[k]
        index[k] = index[j]
        index[j] = t


@njit(cache=True, nogil=True)
def row_norms(indptr, data, bias, sign, diag, out):
    """``out[i] = ‖x̃ᵢ‖² + D_ii`` (D: ``diag[0]`` for sign −1, ``diag[1]`` for +1)."""
    b2 = bias * bias
    for i in range(indptr.shape[0] - 1):
        s = b2
        for k in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[k])
            s += v * v
        out[i] = s + diag[1 if sign[i] > 0 else 0]


@njit(cache=True, nogil=True)
def dcd_sweep(
    indptr, indices, data, sign, alpha, qd, index, n_active, w, bias, upper, diag,
    pg_max_old, pg_min_old, seed, shrink,
):  # fmt: skip
    """One sweep of dual coordinate descent over the active rows of a block.

    ``index[:n_active]`` holds the active rows (local ids); it is shuffled with ``seed``,
    then every row i in that order gets the exact minimisation over αᵢ (clipped Newton
    step ``αᵢ ← min(max(αᵢ − Gᵢ/Q̄ᵢᵢ, 0), Uᵢ)``, ``Gᵢ = yᵢ w·x̃ᵢ − 1 + Dᵢᵢαᵢ``) and
    ``w += (αᵢ_new − αᵢ_old) yᵢ x̃ᵢ``. With ``shrink``, a row at a bound whose gradient
    points outwards beyond the previous sweep's extremes (``pg_max_old``, ``pg_min_old``)
    leaves the active set (swapped behind it), as LIBLINEAR's ``solve_l2r_l1l2_svc``.

    ``upper``, ``diag``: Uᵢ and Dᵢᵢ by class (index 0: sign −1, 1: sign +1); ``qd``: Q̄ᵢᵢ.

    Returns
    -------
    n_active : int
        Rows still active after the sweep.
    pg_max, pg_min : float
        Extremes of the projected gradient over the rows visited (±inf when none).
    """
    d = w.shape[0] - 1
    shuffle(index, n_active, seed)
    pg_max = -np.inf
    pg_min = np.inf
    s = 0
    while s < n_active:
        i = index[s]
        yi = np.float64(sign[i])
        c = 1 if sign[i] > 0 else 0
        a = alpha[i]
        u = upper[c]
        lo, hi = indptr[i], indptr[i + 1]
        m = bias * w[d]
        for k in range(lo, hi):
            m += np.float64(data[k]) * w[indices[k]]
        g = yi * m - 1.0 + diag[c] * a
        pg = 0.0
        if a == 0.0:
            if shrink and g > pg_max_old:
                n_active -= 1
                index[s] = index[n_active]
                index[n_active] = i
                continue
            if g < 0.0:
                pg = g
        elif a == u:
            if shrink and g < pg_min_old:
                n_active -= 1
                index[s] = index[n_active]
                index[n_active] = i
                continue
            if g > 0.0:
                pg = g
        else:
            pg = g
        if pg > pg_max:
            pg_max = pg
        if pg < pg_min:
            pg_min = pg
        if abs(pg) > 1e-12:
            na = a - g / qd[i]
            if na < 0.0:
                na = 0.0
            elif na > u:
                na = u
            alpha[i] = na
            delta = (na - a) * yi
            if delta != 0.0:
                for k in range(lo, hi):
                    w[indices[k]] += delta * np.float64(data[k])
                w[d] += delta * bias
        s += 1
    return n_active, pg_max, pg_min


@njit(cache=True, nogil=True)
def add_rows(indptr, indices, data, sign, alpha, bias, w):
    """``w += Σᵢ αᵢyᵢx̃ᵢ`` over a block's rows, in row order (the last entry of ``w`` is the
    bias weight): the primal point of a warm start's α."""
    d = w.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        a = alpha[i] * np.float64(sign[i])
        if a == 0.0:
            continue
        for k in range(indptr[i], indptr[i + 1]):
            w[indices[k]] += a * np.float64(data[k])
        w[d] += a * bias


@njit(cache=True, nogil=True)
def alpha_terms(sign, alpha, diag):
    """(Σαᵢ, Σ Dᵢᵢαᵢ²) of a block, in row order (``diag`` by class)."""
    asum = 0.0
    asq = 0.0
    for i in range(alpha.shape[0]):
        a = alpha[i]
        asum += a
        asq += diag[1 if sign[i] > 0 else 0] * a * a
    return asum, asq


@njit(cache=True, nogil=True)
def count_columns(indices, counts):
    """``counts[j] += 1`` for every entry of column j (``counts``: int32 over the width)."""
    for k in range(indices.shape[0]):
        counts[indices[k]] += 1


@njit(cache=True, nogil=True)
def remap_columns(indices, gmap, out):
    """``out[k] = gmap[indices[k]]``: a block's columns in the remapped space."""
    for k in range(indices.shape[0]):
        out[k] = gmap[indices[k]]


@njit(cache=True, nogil=True)
def _segment_row(base, diff, c, ts, squared, out):
    """``out[k] += c·ℓ(1 − (base + ts[k]·diff))`` for every k (ℓ the hinge, squared with
    ``squared``)."""
    for k in range(ts.shape[0]):
        xi = 1.0 - (base + ts[k] * diff)
        if xi > 0.0:
            out[k] += c * (xi * xi if squared else xi)


@njit(cache=True, nogil=True)
def line_losses(indptr, indices, data, sign, w, bias, mb, mc, ts, cost, squared, out):
    """The primal losses of a block along the segment from the best point to ``w``.

    ``mc[i] = yᵢ w·x̃ᵢ`` (the margins at ``w``, stored) and, for every ``ts[k]``,
    ``out[k] += Σᵢ Cᵢ ℓ(1 − (mbᵢ + ts[k]·(mcᵢ − mbᵢ)))`` with ``mb`` the margins at the best
    point (ℓ the hinge, squared with ``squared``; Cᵢ is ``cost`` by class).
    """
    d = w.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        m = bias * w[d]
        for k in range(indptr[i], indptr[i + 1]):
            m += np.float64(data[k]) * w[indices[k]]
        m *= np.float64(sign[i])
        mc[i] = m
        _segment_row(mb[i], m - mb[i], cost[1 if sign[i] > 0 else 0], ts, squared, out)


@njit(cache=True, nogil=True)
def segment_losses(sign, mb, mc, ts, cost, squared, out):
    """As :func:`line_losses` from stored margins only (no rows): ``out[k] += Σᵢ Cᵢ
    ℓ(1 − (mbᵢ + ts[k]·(mcᵢ − mbᵢ)))``."""
    for i in range(mb.shape[0]):
        _segment_row(mb[i], mc[i] - mb[i], cost[1 if sign[i] > 0 else 0], ts, squared, out)


@njit(cache=True, nogil=True)
def move_margins(mb, mc, t):
    """``mb ← mb + t·(mc − mb)``: the margins at the new best point."""
    for i in range(mb.shape[0]):
        mb[i] = mb[i] + t * (mc[i] - mb[i])
