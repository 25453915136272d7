"""numba kernels of smo: cached kernel columns, LIBSVM's WSS2 solver loop (resumable in
slices), Platt's takeStep / examineExample."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ....kernels.kernel_functions import (
    kernel_from_dot,
)
from ....kernels.parallel import _n_chunks, column_par
from ...kernel_cache import slot_acquire_prefix

TAU = 1e-12
#: work weights of a row in the selection scans and the gradient update, against a kernel
#: entry's non-zeros (:func:`~ooc_svm.kernels.parallel._n_chunks` runs a scan in parallel
#: chunks from ``PAR_MIN_WORK``: a few thousand active rows)
SELECT_WORK = 2
UPDATE_WORK = 1


# ============================================================================================
# numba: small helpers
# ============================================================================================
@njit(cache=True, nogil=True)
def _rand(rs):
    """splitmix64 on a one-element uint64 state array; returns a non-negative int64."""
    rs[0] += np.uint64(0x9E3779B97F4A7C15)
    z = rs[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z >> np.uint64(1))


@njit(cache=True, nogil=True)
def _self_kernel(code, sqi, gamma, degree, coef0):
    return kernel_from_dot(code, sqi, sqi, sqi, gamma, degree, coef0)


@njit(cache=True, nogil=True)
def _column(i, need, order, X, kp, cache, work, with_y):
    """Cached column i over the rows order[:need]: (y_i y_k) K(x_i, x_k) (or K without y).

    The cache keeps how many leading positions of ``order`` a column covers and only the
    missing ones are computed (LIBSVM's semantics; see ``slot_acquire_prefix``).
    """
    indptr, indices, data, sq, y = X
    code, gamma, degree, coef0 = kp
    buf, slot_key, slot_of, slot_len, last_used, stats = cache
    s, have = slot_acquire_prefix(slot_key, slot_of, slot_len, last_used, stats, i, need)
    col = buf[s]
    if have < need:
        column_par(i, have, need, order, X, kp, col, with_y, work.shape[0])
        slot_len[s] = need
    return col


# ============================================================================================
# numba: WSS2 (Fan, Chen & Lin 2005 / LIBSVM Solver) on an in-memory set
# ============================================================================================
@njit(cache=True, nogil=True)
def _up_chunk(active, t0, t1, y, alpha, G, C):
    """(gmax, imax) of WSS2's first choice over active[t0:t1]: the last row with the largest
    −y G in I_up (imax = −1 when there is none).

    Written without a branch on the label or the bound (random labels made those branches
    mispredict on most rows): −y G is −G or G exactly (y = ±1), so the values and the row
    chosen are those of LIBSVM's two-branch loop."""
    gmax = -np.inf
    imax = -1
    for t in range(t0, t1):
        k = active[t]
        yk = y[k]
        a = alpha[k]
        v = -(yk * G[k])
        up = ((yk > 0) & (a < C[k])) | ((yk <= 0) & (a > 0))
        if up & (v >= gmax):
            gmax = v
            imax = k
    return gmax, imax


@njit(cache=True, nogil=True)
def _low_chunk(active, t0, t1, y, alpha, G, QD, C, i, qi, gmax):
    """(jmin, obj_min, gmax2) of WSS2's second choice over active[t0:t1] (jmin = −1 when no
    row qualifies): the last row with the smallest second-order decrease.

    Branch-free in the label and the bound as :func:`_up_chunk`: for y = +1 the values are
    G, gmax + G and QD_i + QD_k − 2 y_i Q_ik, for y = −1 −G, gmax − G and
    QD_i + QD_k + 2 y_i Q_ik, each computed exactly as LIBSVM's two branches do."""
    gmax2 = -np.inf
    jmin = -1
    obj_min = np.inf
    yi = y[i]
    qdi = QD[i]
    for t in range(t0, t1):
        k = active[t]
        yk = y[k]
        a = alpha[k]
        v = yk * G[k]
        low = ((yk > 0) & (a > 0)) | ((yk <= 0) & (a < C[k]))
        if low & (v >= gmax2):
            gmax2 = v
        gd = gmax + v
        qc = (qdi + QD[k]) - yk * (2.0 * yi * qi[k])
        od = -(gd * gd) / (qc if qc > 0 else TAU)
        if low & (gd > 0) & (od <= obj_min):
            jmin = k
            obj_min = od
    return jmin, obj_min, gmax2


@njit(parallel=True, cache=True, nogil=True)
def _up_par(active, n_active, y, alpha, G, C):
    """:func:`_up_chunk` over active[:n_active] on all threads: each chunk's (max, last row)
    folded in chunk order with the serial loop's ``>=`` gives the serial loop's row and
    value (the last row holding the largest value), for any number of threads."""
    nc = _n_chunks(n_active, SELECT_WORK * n_active)
    if nc == 1:
        return _up_chunk(active, 0, n_active, y, alpha, G, C)
    gm = np.empty(nc)
    im = np.empty(nc, dtype=np.int64)
    for c in prange(nc):
        gm[c], im[c] = _up_chunk(
            active, c * n_active // nc, (c + 1) * n_active // nc, y, alpha, G, C
        )
    gmax = -np.inf
    imax = -1
    for c in range(nc):
        if im[c] >= 0 and gm[c] >= gmax:
            gmax = gm[c]
            imax = im[c]
    return gmax, imax


@njit(parallel=True, cache=True, nogil=True)
def _low_par(active, n_active, y, alpha, G, QD, C, i, qi, gmax):
    """:func:`_low_chunk` over active[:n_active] on all threads, folded in chunk order as
    the serial loop (``<=`` for the decrease, ``>=`` for gmax2): the serial result."""
    nc = _n_chunks(n_active, SELECT_WORK * n_active)
    if nc == 1:
        return _low_chunk(active, 0, n_active, y, alpha, G, QD, C, i, qi, gmax)
    jm = np.empty(nc, dtype=np.int64)
    om = np.empty(nc)
    g2 = np.empty(nc)
    for c in prange(nc):
        jm[c], om[c], g2[c] = _low_chunk(
            active, c * n_active // nc, (c + 1) * n_active // nc, y, alpha, G, QD, C, i, qi,
            gmax,
        )  # fmt: skip
    jmin = -1
    obj_min = np.inf
    gmax2 = -np.inf
    for c in range(nc):
        if g2[c] >= gmax2:
            gmax2 = g2[c]
        if jm[c] >= 0 and om[c] <= obj_min:
            jmin = jm[c]
            obj_min = om[c]
    return jmin, obj_min, gmax2


@njit(cache=True, nogil=True)
def _update_chunk(active, t0, t1, G, qi, qj, dai, daj):
    for t in range(t0, t1):
        k = active[t]
        G[k] += qi[k] * dai + qj[k] * daj


@njit(parallel=True, cache=True, nogil=True)
def _update_par(active, n_active, G, qi, qj, dai, daj):
    """G[k] += qi[k] dai + qj[k] daj over active[:n_active] on all threads (each entry by one
    thread, as in the serial loop)."""
    nc = _n_chunks(n_active, UPDATE_WORK * n_active)
    if nc == 1:
        _update_chunk(active, 0, n_active, G, qi, qj, dai, daj)
        return
    for c in prange(nc):
        _update_chunk(active, c * n_active // nc, (c + 1) * n_active // nc, G, qi, qj, dai, daj)


@njit(cache=True, nogil=True)
def _select_wss2(active, n_active, X, kp, cache, work, alpha, G, QD, C):
    """WSS2: i = argmax_{I_up} −y G; j minimises the second-order decrease. Returns
    (i, j, m − M) with j = −1 when no pair is found. ``C``: each row's upper bound.

    Both scans run on all threads (:func:`_up_par`, :func:`_low_par`) with the serial
    loop's result for any number of threads."""
    y = X[4]
    gmax, imax = _up_par(active, n_active, y, alpha, G, C)
    if imax < 0:
        return -1, -1, 0.0
    i = imax
    qi = _column(i, n_active, active, X, kp, cache, work, True)
    jmin, obj_min, gmax2 = _low_par(active, n_active, y, alpha, G, QD, C, i, qi, gmax)
    return i, jmin, gmax + gmax2


@njit(cache=True, nogil=True)
def _reconstruct(active, n_active, X, kp, cache, work, alpha, G, G_bar, p, C):
    """LIBSVM's reconstruct_gradient: exact G for the shrunk rows active[n_active:]."""
    m = alpha.shape[0]
    if n_active == m:
        return
    for t in range(n_active, m):
        j = active[t]
        G[j] = G_bar[j] + p[j]
    nr_free = 0
    for t in range(n_active):
        j = active[t]
        if 0 < alpha[j] < C[j]:
            nr_free += 1
    if nr_free * m > 2 * n_active * (m - n_active):
        for t in range(n_active, m):
            i = active[t]
            qi = _column(i, n_active, active, X, kp, cache, work, True)
            s = 0.0
            for u in range(n_active):
                j = active[u]
                if 0 < alpha[j] < C[j]:
                    s += alpha[j] * qi[j]
            G[i] += s
    else:
        for u in range(n_active):
            i = active[u]
            if 0 < alpha[i] < C[i]:
                qi = _column(i, m, active, X, kp, cache, work, True)
                a = alpha[i]
                for t in range(n_active, m):
                    j = active[t]
                    G[j] += a * qi[j]


@njit(cache=True, nogil=True)
def _be_shrunk(k, y, alpha, G, C, gmax1, gmax2):
    if alpha[k] >= C[k]:
        if y[k] > 0:
            return -G[k] > gmax1
        return -G[k] > gmax2
    if alpha[k] <= 0:
        if y[k] > 0:
            return G[k] > gmax2
        return G[k] > gmax1
    return False


@njit(cache=True, nogil=True)
def _drop_short_columns(cache, n_active):
    """Before shrinking permutes active[:n_active]: a cached column covering a shorter prefix
    would then cover a different row set, so it is dropped (LIBSVM's swap_index gives up on
    such columns too)."""
    buf, slot_key, slot_of, slot_len, last_used, stats = cache
    for t in range(slot_key.shape[0]):
        k = slot_key[t]
        if k >= 0 and slot_len[t] < n_active:
            slot_of[k] = -1
            slot_key[t] = -1
            slot_len[t] = 0
            last_used[t] = 0


@njit(cache=True, nogil=True)
def _shrink(active, n_active, y, alpha, G, C, cache):
    """Move the rows LIBSVM's be_shrunk selects behind the active prefix; returns n_active."""
    _drop_short_columns(cache, n_active)
    gmax1 = -np.inf
    gmax2 = -np.inf
    for t in range(n_active):
        k = active[t]
        if y[k] > 0:
            if alpha[k] < C[k]:
                gmax1 = max(gmax1, -G[k])
            if alpha[k] > 0:
                gmax2 = max(gmax2, G[k])
        else:
            if alpha[k] < C[k]:
                gmax2 = max(gmax2, -G[k])
            if alpha[k] > 0:
                gmax1 = max(gmax1, G[k])
    keep = np.empty(n_active, dtype=np.int64)
    drop = np.empty(n_active, dtype=np.int64)
    nk = 0
    nd = 0
    for t in range(n_active):
        k = active[t]
        if _be_shrunk(k, y, alpha, G, C, gmax1, gmax2):
            drop[nd] = k
            nd += 1
        else:
            keep[nk] = k
            nk += 1
    for t in range(nk):
        active[t] = keep[t]
    for t in range(nd):
        active[nk + t] = drop[t]
    return nk, gmax1 + gmax2


@njit(cache=True, nogil=True)
def _wss2_init_grad(X, kp, cache, work, alpha, G, G_bar, p, C, lo, hi):
    """G = Qα + p and Ḡ = C Σ_{α=C} Q_i, accumulated over the rows lo..hi−1 (lo = 0 resets
    them): the initial gradient of LIBSVM's Solver, in slices (the same sums in the same
    order as one call over all rows)."""
    m = alpha.shape[0]
    active = np.arange(m)
    if lo == 0:
        for k in range(m):
            G[k] = p[k]
            G_bar[k] = 0.0
    for i in range(lo, hi):
        if alpha[i] > 0:
            qi = _column(i, m, active, X, kp, cache, work, True)
            a = alpha[i]
            for k in range(m):
                G[k] += a * qi[k]
            if alpha[i] >= C[i]:
                for k in range(m):
                    G_bar[k] += C[i] * qi[k]


# loop state of _wss2_steps, kept in arrays so a solve can pause and continue (and be
# checkpointed) between any two SMO steps with the same result as one uninterrupted call:
#   ist = [n_active, counter, unshrink, iterations, status, done]; fst = [m − M]
IST_N_ACTIVE, IST_COUNTER, IST_UNSHRINK, IST_IT, IST_STATUS, IST_DONE = range(6)


def _wss2_fresh_state(m: int):
    """(active, ist, fst) at the start of a solve on m rows."""
    ist = np.array([m, min(m, 1000) + 1, 0, 0, 1, 0], dtype=np.int64)
    return np.arange(m, dtype=np.int64), ist, np.array([np.inf])


@njit(cache=True, nogil=True)
def _wss2_steps(
    X,
    kp,
    cache,
    work,
    alpha,
    G,
    G_bar,
    p,
    QD,
    C,
    tol,
    max_iter,
    shrinking,
    active,
    ist,
    fst,
    budget,
):
    """LIBSVM's Solver::Solve for C-SVC on the in-memory rows, at most ``budget`` steps of it.

    ``C`` holds each row's upper bound (C·w_{y_i} with class weights; LIBSVM's get_C).

    ``G`` = Qα + p and ``G_bar`` are given (:func:`_wss2_init_grad`); the loop state is in
    ``active``, ``ist``, ``fst`` (see above). ``ist[IST_DONE]`` becomes 1 when the solve has
    ended: status 0 = optimal within tol, 1 = iteration limit ``max_iter``.
    """
    y = X[4]
    m = y.shape[0]
    n_active = ist[IST_N_ACTIVE]
    counter = ist[IST_COUNTER]
    unshrink = ist[IST_UNSHRINK] != 0
    it = ist[IST_IT]
    status = ist[IST_STATUS]
    gap = fst[0]
    n_steps = 0
    paused = False
    while it < max_iter:
        if n_steps >= budget:
            paused = True
            break
        n_steps += 1
        counter -= 1
        if counter == 0:
            counter = min(m, 1000)
            if shrinking:
                # do_shrinking: unshrink once when close to optimal
                n_new, g12 = _shrink(active, n_active, y, alpha, G, C, cache)
                if not unshrink and g12 <= 10.0 * tol:
                    unshrink = True
                    # restore everything, reconstruct, then shrink again
                    _reconstruct(active, n_active, X, kp, cache, work, alpha, G, G_bar, p, C)
                    n_active = m
                    n_new, g12 = _shrink(active, n_active, y, alpha, G, C, cache)
                n_active = n_new
        i, j, gap = _select_wss2(active, n_active, X, kp, cache, work, alpha, G, QD, C)
        if j < 0 or gap < tol:
            if n_active < m:
                _reconstruct(active, n_active, X, kp, cache, work, alpha, G, G_bar, p, C)
                n_active = m
                i, j, gap = _select_wss2(active, n_active, X, kp, cache, work, alpha, G, QD, C)
                if j < 0 or gap < tol:
                    status = 0
                    break
                counter = 1
            else:
                status = 0
                break
        it += 1
        qi = _column(i, n_active, active, X, kp, cache, work, True)
        qj = _column(j, n_active, active, X, kp, cache, work, True)
        Ci = C[i]
        Cj = C[j]
        ai_old = alpha[i]
        aj_old = alpha[j]
        ai = ai_old
        aj = aj_old
        if y[i] != y[j]:
            qc = QD[i] + QD[j] + 2.0 * qi[j]
            if qc <= 0:
                qc = TAU
            delta = (-G[i] - G[j]) / qc
            diff = ai - aj
            ai += delta
            aj += delta
            if diff > 0:
                if aj < 0:
                    aj = 0.0
                    ai = diff
            else:
                if ai < 0:
                    ai = 0.0
                    aj = -diff
            if diff > Ci - Cj:
                if ai > Ci:
                    ai = Ci
                    aj = Ci - diff
            else:
                if aj > Cj:
                    aj = Cj
                    ai = Cj + diff
        else:
            qc = QD[i] + QD[j] - 2.0 * qi[j]
            if qc <= 0:
                qc = TAU
            delta = (G[i] - G[j]) / qc
            s = ai + aj
            ai -= delta
            aj += delta
            if s > Ci:
                if ai > Ci:
                    ai = Ci
                    aj = s - Ci
            else:
                if aj < 0:
                    aj = 0.0
                    ai = s
            if s > Cj:
                if aj > Cj:
                    aj = Cj
                    ai = s - Cj
            else:
                if ai < 0:
                    ai = 0.0
                    aj = s
        alpha[i] = ai
        alpha[j] = aj
        dai = ai - ai_old
        daj = aj - aj_old
        _update_par(active, n_active, G, qi, qj, dai, daj)
        ui = ai_old >= Ci
        uj = aj_old >= Cj
        if ui != (ai >= Ci):
            qf = _column(i, m, active, X, kp, cache, work, True)
            sgn = -Ci if ui else Ci
            for k in range(m):
                G_bar[k] += sgn * qf[k]
        if uj != (aj >= Cj):
            qf = _column(j, m, active, X, kp, cache, work, True)
            sgn = -Cj if uj else Cj
            for k in range(m):
                G_bar[k] += sgn * qf[k]
    if not paused:
        if n_active < m:
            _reconstruct(active, n_active, X, kp, cache, work, alpha, G, G_bar, p, C)
            n_active = m
        ist[IST_DONE] = 1
    ist[IST_N_ACTIVE] = n_active
    ist[IST_COUNTER] = counter
    ist[IST_UNSHRINK] = 1 if unshrink else 0
    ist[IST_IT] = it
    ist[IST_STATUS] = status
    fst[0] = gap


@njit(cache=True, nogil=True)
def _rho_and_gap(y, alpha, G, C):
    """LIBSVM's calculate_rho and (m, M) over all rows."""
    ub = np.inf
    lb = -np.inf
    nfree = 0
    sfree = 0.0
    m_up = -np.inf
    m_low = np.inf
    for k in range(y.shape[0]):
        yg = y[k] * G[k]
        if alpha[k] >= C[k]:
            if y[k] < 0:
                ub = min(ub, yg)
            else:
                lb = max(lb, yg)
        elif alpha[k] <= 0:
            if y[k] > 0:
                ub = min(ub, yg)
            else:
                lb = max(lb, yg)
        else:
            nfree += 1
            sfree += yg
        myg = -yg
        if (y[k] > 0 and alpha[k] < C[k]) or (y[k] < 0 and alpha[k] > 0):
            m_up = max(m_up, myg)
        if (y[k] < 0 and alpha[k] < C[k]) or (y[k] > 0 and alpha[k] > 0):
            m_low = min(m_low, myg)
    if nfree > 0:
        rho = sfree / nfree
    else:
        rho = (
            0.5 * (ub + lb)
            if (np.isfinite(ub) and np.isfinite(lb))
            else (ub if np.isfinite(ub) else (lb if np.isfinite(lb) else 0.0))
        )
    return rho, m_up, m_low


@njit(cache=True, nogil=True)
def _diag(X, kp):
    indptr, indices, data, sq, y = X
    code, gamma, degree, coef0 = kp
    out = np.empty(y.shape[0])
    for k in range(y.shape[0]):
        out[k] = _self_kernel(code, sq[k], gamma, degree, coef0)
    return out
