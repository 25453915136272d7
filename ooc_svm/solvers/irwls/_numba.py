"""The numba kernels of irwls: the working-set problem's linear systems (Cholesky of
H₁₁ + D⁻¹ and the Schur complement for b, serial or on all threads), system (3)'s assembly,
the SMO finish, and the column update of the streamed pass."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...kernels.parallel import PAR_MIN_WORK, thread_share


@njit(cache=True, nogil=True)
def _smo_finish(K, y, beta, F, C, tol, max_steps):
    """Second-order SMO (Fan, Chen & Lin 2005) on a dense working-set problem, in place.

    ``F`` holds yᵢ − gᵢ (gᵢ = f(xᵢ) without bias) and is kept up to date; ``C`` holds each
    sample's upper bound. Stops when LIBSVM's m(β) − M(β) ≤ tol; returns (steps, b) with b
    the mean of F over free samples, else (m + M) / 2.
    """
    q = y.shape[0]
    steps = 0
    m = 0.0
    M = 0.0
    while True:
        i = -1
        m = -np.inf
        M = np.inf
        for t in range(q):
            up = (y[t] > 0 and beta[t] < C[t]) or (y[t] < 0 and beta[t] > 0)
            low = (y[t] > 0 and beta[t] > 0) or (y[t] < 0 and beta[t] < C[t])
            if up and F[t] > m:
                m = F[t]
                i = t
            if low and F[t] < M:
                M = F[t]
        if i < 0 or m - M <= tol or steps >= max_steps:
            break
        j = -1
        best = 0.0
        for t in range(q):
            low = (y[t] > 0 and beta[t] > 0) or (y[t] < 0 and beta[t] < C[t])
            if low and F[t] < m:
                bb = m - F[t]
                a = K[i, i] + K[t, t] - 2.0 * K[i, t]
                if a <= 0.0:
                    a = 1e-12
                gain = bb * bb / a
                if gain > best:
                    best = gain
                    j = t
        if j < 0:
            break
        eta = K[i, i] + K[j, j] - 2.0 * K[i, j]
        if eta <= 0.0:
            eta = 1e-12
        step = (F[i] - F[j]) / eta
        lim_i = C[i] - beta[i] if y[i] > 0 else beta[i]
        lim_j = beta[j] if y[j] > 0 else C[j] - beta[j]
        step = min(step, lim_i, lim_j)
        if step <= 0.0:
            break
        beta[i] = min(C[i], max(0.0, beta[i] + y[i] * step))
        beta[j] = min(C[j], max(0.0, beta[j] - y[j] * step))
        for t in range(q):
            F[t] -= step * (K[t, i] - K[t, j])
        steps += 1
    s = 0.0
    n = 0
    for t in range(q):
        if 0.0 < beta[t] < C[t]:
            s += F[t]
            n += 1
    return steps, (s / n if n else 0.5 * (m + M))


#: below this size the system (3) is factored by the numba Cholesky (LAPACK with its own
#: threads was 70x slower at 150 rows on a busy 2-core machine; 0.18 ms here vs 3.8 ms)
_NUMBA_CHOL_MAX = 256
#: numba's fast-math flags of the Schur solves (reordered sums; no inf/nan assumptions)
_FM = {"reassoc", "contract", "nsz", "arcp"}


@njit(cache=True, nogil=True, fastmath=_FM)
def _bias_and_beta(zr, zy, y1, c, beta):
    """The end of both Schur solves: from zr = M⁻¹r and zy = M⁻¹y₁, the bias
    b = (y₁ᵀzr − c) / y₁ᵀzy and β₁ = zr − b·zy written into ``beta``: (ok, β₁, b)."""
    n = zr.shape[0]
    den = 0.0
    num = 0.0
    for i in range(n):
        den += y1[i] * zy[i]
        num += y1[i] * zr[i]
    if not (den > 0.0):
        return False, beta, 0.0
    b = (num - c) / den
    for i in range(n):
        beta[i] = zr[i] - b * zy[i]
        if not np.isfinite(beta[i]):
            return False, beta, 0.0
    return True, beta, b


@njit(cache=True, nogil=True, fastmath=_FM)
def _schur_solve(M, y1, r, c, L):
    """Solve [[M, y₁], [y₁ᵀ, 0]] [β₁; b] = [r; c] with M = L Lᵀ (M positive definite).

    Returns (ok, β₁, b); ok is False when M is not numerically positive definite.
    """
    n = M.shape[0]
    beta = np.zeros(n)
    for i in range(n):
        for j in range(i + 1):
            s = M[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not (s > 1e-300):
                    return False, beta, 0.0
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    zr = np.empty(n)
    zy = np.empty(n)
    # forward: L w = v
    for i in range(n):
        sr = r[i]
        sy = y1[i]
        for k in range(i):
            sr -= L[i, k] * zr[k]
            sy -= L[i, k] * zy[k]
        zr[i] = sr / L[i, i]
        zy[i] = sy / L[i, i]
    # backward: Lᵀ z = w
    for i in range(n - 1, -1, -1):
        sr = zr[i]
        sy = zy[i]
        for k in range(i + 1, n):
            sr -= L[k, i] * zr[k]
            sy -= L[k, i] * zy[k]
        zr[i] = sr / L[i, i]
        zy[i] = sy / L[i, i]
    return _bias_and_beta(zr, zy, y1, c, beta)


#: rows of a block of the parallel Cholesky (its rows are factored side by side)
_CHOL_BLOCK = 32


@njit(cache=True, nogil=True, fastmath=_FM)
def _chol_row(M, L, i, j0, j1):
    """L[i, j] for j in [j0, j1) (j < i): rows j and L[i, :j0] are done."""
    for j in range(j0, j1):
        s = M[i, j]
        for k in range(j):
            s -= L[i, k] * L[j, k]
        L[i, j] = s / L[j, j]


@njit(cache=True, nogil=True, fastmath=_FM)
def _chol_diag(M, L, i):
    s = M[i, i]
    for k in range(i):
        s -= L[i, k] * L[i, k]
    if not (s > 1e-300):
        return False
    L[i, i] = np.sqrt(s)
    return True


@njit(parallel=True, cache=True, nogil=True)
def _cholesky_par(M, L):
    """M = L Lᵀ (lower L) on all threads; False when M is not numerically positive definite.

    Blocks of ``_CHOL_BLOCK`` rows: the part of a block's rows left of the block depends on
    earlier blocks only, so those rows are factored side by side (``prange``); then the
    block's triangle, row by row. Every entry is one thread's sum in a fixed order: the
    factor does not depend on the number of threads.
    """
    n = M.shape[0]
    for r0 in range(0, n, _CHOL_BLOCK):
        r1 = min(n, r0 + _CHOL_BLOCK)
        if r0 > 0:
            for t in prange(r1 - r0):
                _chol_row(M, L, r0 + t, 0, r0)
        for i in range(r0, r1):
            _chol_row(M, L, i, r0, i)
            if not _chol_diag(M, L, i):
                return False
    return True


@njit(cache=True, nogil=True, fastmath=_FM)
def _schur_subst(L, y1, r, c):
    """The solve of :func:`_schur_solve` from its Cholesky factor L: (ok, β₁, b)."""
    n = L.shape[0]
    beta = np.zeros(n)
    zr = np.empty(n)
    zy = np.empty(n)
    for i in range(n):
        sr = r[i]
        sy = y1[i]
        for k in range(i):
            sr -= L[i, k] * zr[k]
            sy -= L[i, k] * zy[k]
        zr[i] = sr / L[i, i]
        zy[i] = sy / L[i, i]
    # backward, by columns of Lᵀ (rows of L: contiguous)
    for i in range(n - 1, -1, -1):
        zr[i] /= L[i, i]
        zy[i] /= L[i, i]
        a = zr[i]
        b_ = zy[i]
        for k in range(i):
            zr[k] -= L[i, k] * a
            zy[k] -= L[i, k] * b_
    return _bias_and_beta(zr, zy, y1, c, beta)


def _schur_solve_par(M, y1, r, c):
    """:func:`_schur_solve` for large systems: the Cholesky factor on all threads."""
    n = M.shape[0]
    L = np.zeros((n, n))
    with thread_share():
        ok = _cholesky_par(M, L)
    if not ok:
        return False, np.zeros(n), 0.0
    return _schur_subst(L, y1, r, c)


@njit(cache=True, nogil=True)
def _assemble_row(K, y, g_out, idx, idx3, n3, inv_a, C, a, M, r, y1):
    """Row ``a`` of system (3): M[a, :a+1] (y_i y_j K_ij; the factorisations read the lower
    triangle only), y₁[a] and r[a] (the S₃ sum in increasing sample order)."""
    i = idx[a]
    y1[a] = y[i]
    s = g_out[i]
    for u in range(n3):
        t = idx3[u]
        s += C[t] * K[i, t] * y[t]
    r[a] = 1.0 - y[i] * s
    for bb in range(a + 1):
        j = idx[bb]
        M[a, bb] = y[i] * y[j] * K[i, j]
    M[a, a] += inv_a[i]


@njit(parallel=True, cache=True, nogil=True)
def _assemble(K, y, g_out, sets, inv_a, C, lam):
    """System (3) on S₁ with S₃ at C (Table 1 step 1): (S₁ indices, H₁₁ + D⁻¹, y₁, r, c).

    Only the lower triangle of M = H₁₁ + D⁻¹ is written (the Cholesky factorisations read
    nothing else; the LU fallback mirrors it). r = 1 − y₁ ∘ (G_in + K₁₃ (C y)₃) and
    c = λ − Σ_{S₃} Cᵢyᵢ (the paper's G₁₃, G_b3); ``C`` holds each sample's upper bound. Each
    row (and its r) is computed by one thread in the serial order, on the kernel threads from
    ``PAR_MIN_WORK`` entries: the same bits for any number of threads.
    """
    q = y.shape[0]
    idx = np.empty(q, dtype=np.int64)
    idx3 = np.empty(q, dtype=np.int64)
    n1 = 0
    n3 = 0
    c = lam
    for t in range(q):
        if sets[t] == 1:
            idx[n1] = t
            n1 += 1
        elif sets[t] == 3:
            c -= C[t] * y[t]
            idx3[n3] = t
            n3 += 1
    M = np.empty((n1, n1))
    r = np.empty(n1)
    y1 = np.empty(n1)
    if n1 * (n1 // 2 + n3) < PAR_MIN_WORK:
        for a in range(n1):
            _assemble_row(K, y, g_out, idx, idx3, n3, inv_a, C, a, M, r, y1)
    else:
        for a in prange(n1):
            _assemble_row(K, y, g_out, idx, idx3, n3, inv_a, C, a, M, r, y1)
    return idx[:n1], M, y1, r, c


@njit(cache=True, nogil=True)
def _axpy(c, x, out):
    for i in range(out.shape[0]):
        out[i] += c * x[i]
