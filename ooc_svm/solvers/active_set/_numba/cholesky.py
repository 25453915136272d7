"""The numba kernels of the active-set factor (:mod:`..cholesky`): substitutions, Givens
rotations that delete a row, appends, the direction of system (5), on ``R = Lᵀ`` (row-major)
and its companion arrays."""

from __future__ import annotations

import numpy as np
from numba import njit

#: |a_j| ≤ A_TOL · (1 + |l_jᵀ r1|) means y_s is orthogonal to the null direction of j.
A_TOL = 1e-9


# ------------------------------------------------------------------------------------------
# numba kernels on R (upper triangular, R = Lᵀ, row-major) and companion arrays
# ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def forward_solve(R, nb, b, out):
    """Solve Rᵀ x = b (i.e. L x = b) for the leading nb × nb block; returns ``out``.

    Row-oriented (axpy with row k of R), so the inner loop is contiguous and vectorises.
    """
    for k in range(nb):
        out[k] = b[k]
    for k in range(nb):
        xk = out[k] / R[k, k]
        out[k] = xk
        if xk != 0.0:
            row = R[k]
            for j in range(k + 1, nb):
                out[j] -= row[j] * xk
    return out


@njit(cache=True, nogil=True)
def back_solve(R, nb, z, out):
    """Solve R x = z (i.e. Lᵀ x = z) for the leading nb × nb block; returns ``out``.

    Each step is a dot product of a contiguous piece of row k with the solved tail (BLAS).
    """
    for k in range(nb - 1, -1, -1):
        s = np.dot(R[k, k + 1 : nb], out[k + 1 : nb]) if k + 1 < nb else 0.0
        out[k] = (z[k] - s) / R[k, k]
    return out


@njit(cache=True, nogil=True)
def delete_basis_row(R, nb, p, Lam, nd, T, nt):
    """Remove basis position p: delete column p of R and re-triangularise with Givens.

    Deleting row p of L = Rᵀ leaves R (nb × nb−1) upper Hessenberg below row p; rotations
    of rows (k, k+1), k = p … nb−2, zero the sub-diagonal (the paper's right-multiplication
    of L by Givens matrices). The same rotations are applied to the rows of ``Lam`` and of
    ``T`` (the first ``nt`` columns; both hold L⁻¹·v vectors), whose last entries become the
    components outside the new basis. On return the leading (nb−1) × (nb−1) block of R is
    the new factor and row nb−1 of R is zero. Returns the number of rotations applied.
    """
    # shift columns p+1.. one to the left (row i has entries from column i on)
    for i in range(nb):
        j0 = p if p > i - 1 else i - 1
        ri = R[i]
        for j in range(j0, nb - 1):
            ri[j] = ri[j + 1]
        ri[nb - 1] = 0.0
    nrot = 0
    for k in range(p, nb - 1):
        a = R[k, k]
        b = R[k + 1, k]
        if b == 0.0:
            if a < 0.0:  # keep the diagonal positive
                for j in range(k, nb - 1):
                    R[k, j] = -R[k, j]
                for c in range(nd):
                    Lam[k, c] = -Lam[k, c]
                for c in range(nt):
                    T[k, c] = -T[k, c]
            continue
        r = np.hypot(a, b)
        c_ = a / r
        s_ = b / r
        R[k, k] = r
        R[k + 1, k] = 0.0
        rk = R[k]
        rk1 = R[k + 1]
        for j in range(k + 1, nb - 1):
            t1 = rk[j]
            t2 = rk1[j]
            rk[j] = c_ * t1 + s_ * t2
            rk1[j] = -s_ * t1 + c_ * t2
        for c in range(nd):
            t1 = Lam[k, c]
            t2 = Lam[k + 1, c]
            Lam[k, c] = c_ * t1 + s_ * t2
            Lam[k + 1, c] = -s_ * t1 + c_ * t2
        for c in range(nt):
            t1 = T[k, c]
            t2 = T[k + 1, c]
            T[k, c] = c_ * t1 + s_ * t2
            T[k + 1, c] = -s_ * t1 + c_ * t2
        nrot += 1
    for j in range(nb):
        R[nb - 1, j] = 0.0
    return nrot


@njit(cache=True, nogil=True)
def factor_matvec(R, nb, Lam, nd, vb, vd, outb, outd):
    """(F Fᵀ) v with F = [Rᵀ; Lamᵀ]: u = R v_B + Lam v_D, out = [Rᵀ u; Lamᵀ u]."""
    u = np.zeros(nb)
    for i in range(nb):
        s = 0.0
        for j in range(i, nb):
            s += R[i, j] * vb[j]
        for c in range(nd):
            s += Lam[i, c] * vd[c]
        u[i] = s
    for j in range(nb):
        s = 0.0
        for i in range(j + 1):
            s += R[i, j] * u[i]
        outb[j] = s
    for c in range(nd):
        s = 0.0
        for i in range(nb):
            s += Lam[i, c] * u[i]
        outd[c] = s


#: layout of the factor's integer scalars as the numba kernels take them (``fs``)
FS_NB, FS_ND, FS_UPDATES, FS_R2, FS_PROMOTIONS = range(5)


@njit(cache=True, nogil=True)
def factor_append(F, fs, dep_tol, key, y, col, g, has_g):
    """:meth:`ActiveFactor.append` on the raw arrays ``F = (R, Lam, T, bkeys, by, dkeys, dy,
    ddiag)`` and scalars ``fs``. Returns 1 (joined the basis), 0 (dependent), −1 (R is full:
    grow the basis, call again) or −2 (Lam is full: grow the dependent part, call again)."""
    R, Lam, T, bkeys, by, dkeys, dy, ddiag = F
    nb = fs[FS_NB]
    nd = fs[FS_ND]
    qkk = col[key]
    qb = np.empty(nb)
    for i in range(nb):
        qb[i] = col[bkeys[i]]
    lvec = forward_solve(R, nb, qb, np.empty(nb))
    d2 = qkk - (np.dot(lvec, lvec) if nb > 0 else 0.0)
    if qkk > 0.0 and d2 > dep_tol * qkk:
        if nb + 1 > R.shape[0]:
            return -1
        fs[FS_UPDATES] += 1
        delta = np.sqrt(d2)
        for i in range(nb):
            R[i, nb] = lvec[i]
        R[nb, nb] = delta
        s0 = 0.0
        s1 = 0.0
        for i in range(nb):
            s0 += lvec[i] * T[i, 0]
            s1 += lvec[i] * T[i, 1]
        T[nb, 0] = (y - s0) / delta
        if has_g:
            T[nb, 1] = (g - s1) / delta
        else:
            fs[FS_R2] = 0
        for c in range(nd):
            s = 0.0
            for i in range(nb):
                s += lvec[i] * Lam[i, c]
            Lam[nb, c] = (col[dkeys[c]] - s) / delta
        bkeys[nb] = key
        by[nb] = y
        fs[FS_NB] = nb + 1
        return 1
    if nd + 1 > Lam.shape[1]:
        return -2
    fs[FS_UPDATES] += 1
    for i in range(nb):
        Lam[i, nd] = lvec[i]
    dkeys[nd] = key
    dy[nd] = y
    ddiag[nd] = qkk
    fs[FS_ND] = nd + 1
    return 0


@njit(cache=True, nogil=True)
def factor_delete(F, fs, key):
    """Remove member ``key`` (no promotions: see :func:`factor_promotable`). Returns 0 (a
    dependent member), 1 (a basis member) or −1 (not a member)."""
    R, Lam, T, bkeys, by, dkeys, dy, ddiag = F
    nb = fs[FS_NB]
    nd = fs[FS_ND]
    fs[FS_UPDATES] += 1
    for c in range(nd):
        if dkeys[c] == key:
            last = nd - 1
            for c2 in range(c, last):
                for i in range(Lam.shape[0]):
                    Lam[i, c2] = Lam[i, c2 + 1]
                dkeys[c2] = dkeys[c2 + 1]
                dy[c2] = dy[c2 + 1]
                ddiag[c2] = ddiag[c2 + 1]
            for i in range(Lam.shape[0]):
                Lam[i, last] = 0.0
            fs[FS_ND] = last
            return 0
    p = -1
    for i in range(nb):
        if bkeys[i] == key:
            p = i
            break
    if p < 0:
        fs[FS_UPDATES] -= 1
        return -1
    delete_basis_row(R, nb, p, Lam, nd, T, 2)
    for i in range(p, nb - 1):
        bkeys[i] = bkeys[i + 1]
        by[i] = by[i + 1]
    fs[FS_NB] = nb - 1
    T[nb - 1, 0] = 0.0
    T[nb - 1, 1] = 0.0
    for c in range(nd):
        Lam[nb - 1, c] = 0.0
    return 1


@njit(cache=True, nogil=True)
def factor_promotable(F, fs, dep_tol, out):
    """Positions (ascending, in ``out``) of the dependent members whose residual pivot on the
    current basis exceeds the dependence threshold; returns their number."""
    Lam = F[1]
    ddiag = F[7]
    nb = fs[FS_NB]
    nd = fs[FS_ND]
    m = 0
    for c in range(nd):
        s = 0.0
        for i in range(nb):
            s += Lam[i, c] * Lam[i, c]
        resid = ddiag[c] - s
        if resid > dep_tol * max(ddiag[c], 1e-300):
            out[m] = c
            m += 1
    return m


@njit(cache=True, nogil=True)
def factor_set_gradient(F, fs, g):
    """r2 = L⁻¹ g_B from the gradient ``g`` (indexed by key)."""
    R, T, bkeys = F[0], F[2], F[3]
    nb = fs[FS_NB]
    gb = np.empty(nb)
    for i in range(nb):
        gb[i] = g[bkeys[i]]
    forward_solve(R, nb, gb, T[:nb, 1])
    fs[FS_R2] = 1


@njit(cache=True, nogil=True)
def factor_advance(T, nb, t, beta):
    """r2 ← (1 − t) r2 + tβ r1 (a finite step of length t)."""
    a = 1.0 - t
    b = t * beta
    for i in range(nb):
        T[i, 1] = T[i, 1] * a + b * T[i, 0]


@njit(cache=True, nogil=True)
def factor_direction(F, fs, g, d):
    """:meth:`ActiveFactor.direction` into ``d`` (factor order, length ≥ n); returns
    ``(finite, beta)``."""
    R, Lam, T, bkeys, by, dkeys, dy, ddiag = F
    if fs[FS_R2] == 0:
        factor_set_gradient(F, fs, g)
    nb = fs[FS_NB]
    nd = fs[FS_ND]
    u = np.empty(nb)
    if nd == 0:
        s12 = 0.0
        s11 = 0.0
        for i in range(nb):
            s12 += T[i, 0] * T[i, 1]
            s11 += T[i, 0] * T[i, 0]
        beta = s12 / s11
        for i in range(nb):
            u[i] = beta * T[i, 0] - T[i, 1]
        back_solve(R, nb, u, d[:nb])
        return True, beta
    a = np.empty(nd)
    lr1 = np.empty(nd)
    for c in range(nd):
        s = 0.0
        for i in range(nb):
            s += Lam[i, c] * T[i, 0]
        lr1[c] = s
        a[c] = dy[c] - s
    v = np.zeros(nd)
    pick = -1
    for c in range(nd):
        if abs(a[c]) <= A_TOL * (1.0 + abs(lr1[c])):
            pick = c
            break
    if pick >= 0:
        v[pick] = 1.0
    elif nd >= 2:
        m = max(abs(a[0]), abs(a[1]))
        v[0] = a[1] / m
        v[1] = -a[0] / m
    else:
        # Case 1(a): one dependent index, y_s not in the range -> unique solution
        s = 0.0
        for i in range(nb):
            s += Lam[i, 0] * T[i, 1]
        beta = (g[dkeys[0]] - s) / a[0]
        s = 0.0
        for i in range(nb):
            u[i] = beta * T[i, 0] - T[i, 1]
            s += T[i, 0] * u[i]
        dd = -s / a[0]
        for i in range(nb):
            u[i] = u[i] - Lam[i, 0] * dd
        back_solve(R, nb, u, d[:nb])
        d[nb] = dd
        return True, beta
    for i in range(nb):
        s = 0.0
        for c in range(nd):
            s += Lam[i, c] * v[c]
        u[i] = s
    back_solve(R, nb, u, d[:nb])
    gd = 0.0
    for i in range(nb):
        d[i] = -d[i]
        gd += g[bkeys[i]] * d[i]
    for c in range(nd):
        gd += g[dkeys[c]] * v[c]
    if gd > 0.0:
        for i in range(nb):
            d[i] = -d[i]
        for c in range(nd):
            v[c] = -v[c]
    for c in range(nd):
        d[nb + c] = v[c]
    return False, np.nan
