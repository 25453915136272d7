"""Numba kernels of Platt's SMO as written (Platt 1998, Section 2.2 and the pseudo-code of
its appendix): takeStep, examineExample, and the examine loops over a list and over the
non-bound rows."""

from __future__ import annotations

from numba import njit

from ....kernels.kernel_functions import (
    clear_row,
    gather_dot,
    kernel_from_dot,
    scatter_row,
    sparse_dot,
)
from .wss2 import _column, _rand, _self_kernel

#: Platt's eps in takeStep (minimum relative step, objective comparison at the ends).
PLATT_EPS = 1e-10


# ============================================================================================
# numba: Platt's SMO (section 2.5) on the rows in memory
# ============================================================================================
# scalars kept in arrays so numba functions can update them:
#   fs[0] = b (threshold, u = Σ y α K − b)
#   ist[0] = number of tracked rows (tlist only grows: cached columns cover a prefix of it),
#   ist[1] = unused, ist[2] = successful steps,
#   ist[3] = step limit
@njit(cache=True, nogil=True)
def _fresh_error(k, X, kp, work, alpha, fs, w, linear):
    """E_k = u(x_k) − y_k from the SV expansion over the rows in memory (or from w)."""
    indptr, indices, data, sq, y = X
    code, gamma, degree, coef0 = kp
    if linear:
        s = 0.0
        for q in range(indptr[k], indptr[k + 1]):
            s += float(data[q]) * w[indices[q]]
        return s - fs[0] - y[k]
    scatter_row(indptr, indices, data, k, work)
    s = 0.0
    for j in range(y.shape[0]):
        if alpha[j] > 0:
            d = gather_dot(indptr, indices, data, j, work)
            s += y[j] * alpha[j] * kernel_from_dot(code, d, sq[k], sq[j], gamma, degree, coef0)
    clear_row(indptr, indices, k, work)
    return s - fs[0] - y[k]


@njit(cache=True, nogil=True)
def _take_step(i1, i2, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C):
    """Platt's takeStep(i1, i2) (eqs. 13–22). Returns 1 on a step, 0 otherwise."""
    if i1 == i2:
        return 0
    indptr, indices, data, sq, y = X
    code, gamma, degree, coef0 = kp
    alph1 = alpha[i1]
    alph2 = alpha[i2]
    y1 = y[i1]
    y2 = y[i2]
    s = y1 * y2
    if y1 != y2:  # eq. 13
        L = max(0.0, alph2 - alph1)
        H = min(C, C + alph2 - alph1)
    else:  # eq. 14
        L = max(0.0, alph1 + alph2 - C)
        H = min(C, alph1 + alph2)
    if L == H:
        return 0
    # (E is looked up after the cheap L == H test: for rows outside the error cache it
    # costs a pass over the SV expansion)
    E1 = E[i1] if tracked[i1] else _fresh_error(i1, X, kp, work, alpha, fs, w, linear)
    E2 = E[i2] if tracked[i2] else _fresh_error(i2, X, kp, work, alpha, fs, w, linear)
    k11 = _self_kernel(code, sq[i1], gamma, degree, coef0)
    k22 = _self_kernel(code, sq[i2], gamma, degree, coef0)
    k12 = kernel_from_dot(
        code,
        sparse_dot(indptr, indices, data, i1, indptr, indices, data, i2),
        sq[i1],
        sq[i2],
        gamma,
        degree,
        coef0,
    )
    eta = k11 + k22 - 2.0 * k12  # eq. 15
    b = fs[0]
    if eta > 0:
        a2 = alph2 + y2 * (E1 - E2) / eta  # eq. 16
        if a2 < L:  # eq. 17
            a2 = L
        elif a2 > H:
            a2 = H
    else:  # eq. 19
        f1 = y1 * (E1 + b) - alph1 * k11 - s * alph2 * k12
        f2 = y2 * (E2 + b) - s * alph1 * k12 - alph2 * k22
        L1 = alph1 + s * (alph2 - L)
        H1 = alph1 + s * (alph2 - H)
        Lobj = L1 * f1 + L * f2 + 0.5 * L1 * L1 * k11 + 0.5 * L * L * k22 + s * L * L1 * k12
        Hobj = H1 * f1 + H * f2 + 0.5 * H1 * H1 * k11 + 0.5 * H * H * k22 + s * H * H1 * k12
        if Lobj < Hobj - PLATT_EPS:
            a2 = L
        elif Lobj > Hobj + PLATT_EPS:
            a2 = H
        else:
            a2 = alph2
    # snap round-off to the bounds
    if a2 < 1e-12 * C:
        a2 = 0.0
    elif a2 > C * (1.0 - 1e-12):
        a2 = C
    if abs(a2 - alph2) < PLATT_EPS * (a2 + alph2 + PLATT_EPS):
        return 0
    a1 = alph1 + s * (alph2 - a2)  # eq. 18
    if a1 < 1e-12 * C:
        a1 = 0.0
    elif a1 > C * (1.0 - 1e-12):
        a1 = C
    t1 = y1 * (a1 - alph1)
    t2 = y2 * (a2 - alph2)
    # threshold, eqs. 20-21
    b1 = E1 + t1 * k11 + t2 * k12 + b
    b2 = E2 + t1 * k12 + t2 * k22 + b
    if 0 < a1 < C:
        bnew = b1
    elif 0 < a2 < C:
        bnew = b2
    else:
        bnew = 0.5 * (b1 + b2)
    db = bnew - b
    fs[0] = bnew
    if linear:  # eq. 22
        for q in range(indptr[i1], indptr[i1 + 1]):
            w[indices[q]] += t1 * data[q]
        for q in range(indptr[i2], indptr[i2 + 1]):
            w[indices[q]] += t2 * data[q]
    # rows entering the error cache
    if not tracked[i1]:
        tracked[i1] = True
        E[i1] = E1
        tlist[ist[0]] = i1
        ist[0] += 1
        ist[1] += 1  # columns over the tracked rows are stale
    if not tracked[i2]:
        tracked[i2] = True
        E[i2] = E2
        tlist[ist[0]] = i2
        ist[0] += 1
    n_t = ist[0]
    c1 = _column(i1, n_t, tlist, X, kp, cache, work, False)
    c2 = _column(i2, n_t, tlist, X, kp, cache, work, False)
    for t in range(n_t):
        k = tlist[t]
        E[k] += t1 * c1[k] + t2 * c2[k] - db
    alpha[i1] = a1
    alpha[i2] = a2
    ist[2] += 1
    return 1


@njit(cache=True, nogil=True)
def _examine(i2, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs):
    """Platt's examineExample(i2)."""
    y = X[4]
    y2 = y[i2]
    alph2 = alpha[i2]
    if tracked[i2]:
        E2 = E[i2]
    else:
        E2 = _fresh_error(i2, X, kp, work, alpha, fs, w, linear)
    r2 = E2 * y2
    if not ((r2 < -tol and alph2 < C) or (r2 > tol and alph2 > 0)):
        return 0
    # second choice heuristic: max |E1 - E2| over the non-bound error cache
    n_t = ist[0]
    n_nb = 0
    best = -1
    bv = -1.0
    for t in range(n_t):
        k = tlist[t]
        if 0 < alpha[k] < C:
            n_nb += 1
            v = abs(E[k] - E2)
            if v > bv:
                bv = v
                best = k
    if n_nb > 1 and best >= 0:
        if _take_step(
            best, i2, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C
        ):
            return 1
    # the non-bound rows, from a random start
    if n_t > 0:
        start = _rand(rs) % n_t
        for u in range(n_t):
            k = tlist[(start + u) % n_t]
            if 0 < alpha[k] < C:
                if _take_step(
                    k, i2, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C
                ):
                    return 1
    # all rows in memory, from a random start (deviation: not the whole store)
    m = y.shape[0]
    start = _rand(rs) % m
    for u in range(m):
        k = (start + u) % m
        if _take_step(k, i2, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C):
            return 1
    return 0


@njit(cache=True, nogil=True)
def _platt_examine_list(
    order, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
):
    """examineExample over the given rows (a pass over all examples of one shard)."""
    changed = 0
    for t in range(order.shape[0]):
        if ist[2] >= ist[3]:
            break
        changed += _examine(
            order[t], X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
        )
    return changed


@njit(cache=True, nogil=True)
def _platt_nonbound_range(
    lo, hi, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
):
    """examineExample over the non-bound rows among lo..hi−1 (a slice of one pass of
    Platt's inner loop). Returns the number of changes."""
    changed = 0
    for k in range(lo, hi):
        if ist[2] >= ist[3]:
            break
        if 0 < alpha[k] < C:
            changed += _examine(
                k, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
            )
    return changed
