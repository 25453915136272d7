"""The numba kernels of perf's small dense QPs (:mod:`..qp`): SMO on the simplex and a
dense LU solve with partial pivoting, without BLAS (its thread pool competes with the
engine's threads)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _smo_simplex(Q, b, x, g, tol, max_iter):
    """SMO on {x ≥ 0, Σx = const}: min ½xᵀQx − bᵀx; ``g`` = Qx − b is kept up to date.

    ``Q`` already contains the slack coordinate. Returns (steps, final violation).
    """
    m = x.shape[0]
    tau = 1e-14
    viol = np.inf
    it = 0
    refresh = 0
    while it < max_iter:
        # j: the coordinate to increase (smallest gradient); gmax over the support
        j = -1
        gmin = np.inf
        gmax = -np.inf
        for t in range(m):
            if g[t] < gmin:
                gmin = g[t]
                j = t
            if x[t] > 0.0 and g[t] > gmax:
                gmax = g[t]
        viol = gmax - gmin
        if viol <= tol:
            break
        # i: the coordinate to decrease, second-order choice among the support
        i = -1
        best = -1.0
        qjj = Q[j, j]
        for t in range(m):
            if x[t] > 0.0 and g[t] > gmin:
                a = Q[t, t] + qjj - 2.0 * Q[t, j]
                if a < tau:
                    a = tau
                d = g[t] - gmin
                v = d * d / a
                if v > best:
                    best = v
                    i = t
        if i < 0 or i == j:
            break
        a = Q[i, i] + qjj - 2.0 * Q[i, j]
        d = g[i] - gmin
        if a <= tau:
            delta = x[i]
        else:
            delta = d / a
        if delta >= x[i]:
            delta = x[i]
            x[i] = 0.0
        else:
            x[i] -= delta
        if delta <= 0.0:
            break
        x[j] += delta
        for t in range(m):
            g[t] += delta * (Q[t, j] - Q[t, i])
        it += 1
        refresh += 1
        if refresh >= 2000:
            # recompute the gradient to stop round-off drift
            refresh = 0
            for t in range(m):
                s = -b[t]
                for u in range(m):
                    if x[u] != 0.0:
                        s += Q[t, u] * x[u]
                g[t] = s
    return it, viol


@njit(cache=True, nogil=True)
def _lu_solve(K, rhs):
    """Solve K x = rhs by Gaussian elimination with partial pivoting (no BLAS threads).

    Returns (x, ok); ok is False when a pivot is negligible (singular to working precision).
    """
    n = K.shape[0]
    A = K.copy()
    x = rhs.copy()
    scale = 0.0
    for i in range(n):
        for j in range(n):
            v = abs(A[i, j])
            if v > scale:
                scale = v
    tiny = 1e-13 * max(scale, 1e-300)
    for c in range(n):
        p = c
        best = abs(A[c, c])
        for r in range(c + 1, n):
            v = abs(A[r, c])
            if v > best:
                best = v
                p = r
        if best <= tiny:
            return x, False
        if p != c:
            for j in range(c, n):
                t = A[c, j]
                A[c, j] = A[p, j]
                A[p, j] = t
            t = x[c]
            x[c] = x[p]
            x[p] = t
        inv = 1.0 / A[c, c]
        for r in range(c + 1, n):
            f = A[r, c] * inv
            if f != 0.0:
                for j in range(c + 1, n):
                    A[r, j] -= f * A[c, j]
                x[r] -= f * x[c]
    for c in range(n - 1, -1, -1):
        s = x[c]
        for j in range(c + 1, n):
            s -= A[c, j] * x[j]
        x[c] = s / A[c, c]
    return x, True
