"""The minor iterations of a sprint (§2, Steps 1–2 over the working set) compiled into one loop.

:meth:`..working_set.WorkingSet.run` spent most of its time in Python between small numba
calls (the direction, the ratio test, the step, the factor update, pricing, the partial
gradient flush, one kernel column per entering row): ~100 µs of interpreter work per minor
iteration, on one thread, which capped the gain from a second core. :func:`sprint_loop` runs
those iterations — the same operations in the same order — on the raw arrays of the working
set, its Q columns and its factor, and returns to Python only for what needs it:

- a *full flush* (every ``FULL_FLUSH_EVERY`` steps, or when many columns were released): the
  exact gradient, the residual and probe checks and a refactorisation (LAPACK) when the
  factor lost accuracy;
- the confirmation of optimality with exact gradients at the end of the sprint;
- growing an array (Q columns, the factor) before a row enters;
- every :data:`POLL_EVERY` iterations, so that Ctrl-C (``check_interrupt``) stays prompt;
- the end: optimal, ``max_iter``, the memory budget, degenerate cycling.

Everything the loop needs is in memory (the working rows and their Q columns): no store is
read during minor iterations, in memory, out of core or on Dask alike. The partial gradient
flush runs on the kernel threads (:func:`~ooc_svm.kernels.parallel.gradient_rows_par`, one
thread per row: results do not depend on the number of threads) when it is large enough to
pay for a parallel region (:data:`FLUSH_PAR_MIN`), on this thread otherwise.

The shrinking pricing and the linear kernel keep the Python loop (:meth:`WorkingSet.run`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ....kernels.kernel_functions import kernel_row
from ....kernels.parallel import PAR_MIN_WORK, gradient_rows_par, gradient_rows_range
from ..params import FULL_FLUSH_EVERY
from .blocks import dense_kernel_col
from .cholesky import (
    FS_NB,
    FS_ND,
    factor_advance,
    factor_append,
    factor_delete,
    factor_direction,
    factor_promotable,
)

#: return codes of :func:`sprint_loop`
(R_MAXITER, R_OPTIMAL, R_FLUSH, R_CONFIRM, R_MEMORY, R_CYCLING, R_GROW, R_POLL) = range(8)
#: entry phases: the top of the loop (Step 1 first), or straight to pricing (after a flush)
PH_TOP, PH_PRICE = 0, 1
#: return to Python (``check_interrupt``) after this many minor iterations
POLL_EVERY = 64
#: a partial flush runs on the kernel threads from this many multiply-adds (|bound rows| ×
#: columns); below it the start and join of a parallel region (waking the sleeping threads,
#: ~10 µs and far more when the other cores are busy) costs more than the split saves
FLUSH_PAR_MIN = 4 * PAR_MIN_WORK

# ``st`` (int64 loop state) layout
(ST_SINCE_FULL, ST_ENTERED, ST_LAST_MOVE, ST_REPAIRED, ST_START, ST_MAX_ITER, ST_PENDING,
 ST_P, ST_EVALS, ST_MEM_CHECK) = range(10)  # fmt: skip
# ``cnt`` (int64 counters) layout
(C_ITER, C_ENTERED, C_LEFT, C_INFINITE, C_DEGENERATE, C_PRICINGS, C_MAX_DEP) = range(7)
#: the :class:`~..working_set.Counters` fields in ``cnt`` order
COUNTER_FIELDS = (
    "iterations", "entered", "left", "infinite_steps", "degenerate_steps", "pricings",
    "max_dependent",
)  # fmt: skip
# ``fl`` (float64 loop state) layout
(FL_BETA, FL_LAST_VIOLATION, FL_C, FL_TOL_ENTER, FL_DEP_TOL, FL_NBYTES, FL_MEM_LIMIT) = range(7)

S_ZERO, S_FREE, S_UPPER = 0, 1, 2


@njit(cache=True, nogil=True)
def ratio_test(d, a, C, eps):
    """Largest t ≥ 0 with 0 ≤ a + t d ≤ C and the blocking index (−1: none, t = inf).

    ``C`` holds each component's upper bound (class weights: C_{y_i}).
    """
    t_max = np.inf
    j = -1
    for k in range(d.shape[0]):
        dk = d[k]
        if dk > eps:
            t = (C[k] - a[k]) / dk
        elif dk < -eps:
            t = -a[k] / dk
        else:
            continue
        if t < 0.0:
            t = 0.0
        if t < t_max:
            t_max = t
            j = k
    return t_max, j


@njit(cache=True, nogil=True)
def take_step(keys, d, t, C, finite, beta, alpha, G, y):
    """α[keys] += t d (clipped to [0, C[keys]]); for a finite step G[keys] += t (β y − G).

    ``C`` holds every working row's upper bound (class weights: C_{y_i}).
    """
    for k in range(keys.shape[0]):
        i = keys[k]
        v = alpha[i] + t * d[k]
        if v < 0.0:
            v = 0.0
        elif v > C[i]:
            v = C[i]
        alpha[i] = v
        if finite:
            g = G[i]
            G[i] = g + t * (beta * y[i] - g)


@njit(cache=True, nogil=True)
def _remove(F, fs, dep_tol, key, Qt, slot, G, prom):
    """Factor removal with the promotion of dependent members (their Q columns from Qt)."""
    r = factor_delete(F, fs, key)
    if r != 1 or fs[FS_ND] == 0:
        return
    m = factor_promotable(F, fs, dep_tol, prom)
    dkeys, dy = F[5], F[6]
    for q in range(m - 1, -1, -1):
        c = prom[q]
        k = dkeys[c]
        yk = dy[c]
        factor_delete(F, fs, k)
        fs[2] -= 1
        if factor_append(F, fs, dep_tol, k, yk, Qt[:, slot[k]], G[k], True) == 1:
            fs[4] += 1
        fs[2] -= 1


@njit(cache=True, nogil=True)
def _step1(F, fs, K, S, st, cnt, fl, d, keys, a, cv, prom):
    """Step 1 (:meth:`WorkingSet.step1`): step along d until the reduced optimum is reached."""
    alpha, G, Gbase, y, Cv, status = S
    Qt, slot, ckey, aflush, released = K
    bkeys, dkeys = F[3], F[5]
    C = fl[FL_C]
    dep_tol = fl[FL_DEP_TOL]
    hits = 0
    while fs[FS_NB] + fs[FS_ND] > 0:
        nb = fs[FS_NB]
        nd = fs[FS_ND]
        if nd > cnt[C_MAX_DEP]:
            cnt[C_MAX_DEP] = nd
        finite, beta_new = factor_direction(F, fs, G, d)
        nb = fs[FS_NB]
        nd = fs[FS_ND]
        m = nb + nd
        dmax = 0.0
        for k in range(nb):
            keys[k] = bkeys[k]
        for c in range(nd):
            keys[nb + c] = dkeys[c]
        for k in range(m):
            dmax = max(dmax, abs(d[k]))
        e = st[ST_ENTERED]
        if not finite and e >= 0:
            # a flat infinite direction (gᵀd = 0) may be taken either way: move the
            # variable that just entered inwards, or it would leave at once and cycle
            gd = 0.0
            gmax = 0.0
            for k in range(m):
                gk = G[keys[k]]
                gd += gk * d[k]
                gmax = max(gmax, abs(gk))
            if abs(gd) <= 1e-12 * dmax * (1.0 + gmax):
                for k in range(m):
                    if keys[k] == e:
                        inward = 1.0 if alpha[e] < 0.5 * Cv[e] else -1.0
                        if d[k] * inward < 0:
                            for q in range(m):
                                d[q] = -d[q]
                        break
        for k in range(m):
            a[k] = alpha[keys[k]]
            cv[k] = Cv[keys[k]]
        # components below rounding level (relative to the step and to C) do not block
        t_max, j = ratio_test(d[:m], a[:m], cv[:m], max(1e-13 * dmax, 1e-14 * C))
        if finite:
            if t_max >= 1.0:
                t = 1.0
                j = -1
            else:
                t = t_max
        else:
            cnt[C_INFINITE] += 1
            if not np.isfinite(t_max):
                # numerically zero direction: nothing moves; drop a dependent index
                t = 0.0
                if nd:
                    j = nb
                else:
                    j = 0
                    for k in range(m):
                        if abs(d[k]) > abs(d[j]):
                            j = k
            else:
                t = t_max
        if t > 0.0:
            st[ST_LAST_MOVE] = cnt[C_ITER]
            take_step(keys[:m], d[:m], t, Cv, finite, beta_new, alpha, G, y)
            if finite:
                factor_advance(F[2], nb, t, beta_new)
        else:
            cnt[C_DEGENERATE] += 1
        if finite:
            fl[FL_BETA] = beta_new
        st[ST_ENTERED] = -1
        if j < 0:
            return hits
        kj = keys[j]
        to_upper = d[j] > 0
        alpha[kj] = Cv[kj] if to_upper else 0.0
        # leave: out of the factor, its column released, bound status
        _remove(F, fs, dep_tol, kj, Qt, slot, G, prom)
        released[slot[kj]] = True
        status[kj] = S_UPPER if to_upper else S_ZERO
        cnt[C_LEFT] += 1
        cnt[C_ITER] += 1
        hits += 1
    return hits


@njit(cache=True, nogil=True)
def _price(fs, S, cnt, fl):
    """Step 2: the most negative reduced cost of the bound rows (β from the bound rows when
    I_s is empty); (row, value)."""
    alpha, G, Gbase, y, Cv, status = S
    n = G.shape[0]
    cnt[C_PRICINGS] += 1
    if fs[FS_NB] + fs[FS_ND] == 0:
        lo = -np.inf
        hi = np.inf
        for r in range(n):
            if status[r] == S_ZERO:
                if y[r] < 0:
                    lo = max(lo, -G[r])
                elif y[r] > 0:
                    hi = min(hi, G[r])
            elif status[r] == S_UPPER:
                if y[r] > 0:
                    lo = max(lo, G[r])
                elif y[r] < 0:
                    hi = min(hi, -G[r])
        if np.isfinite(lo) and np.isfinite(hi):
            fl[FL_BETA] = 0.5 * (lo + hi)
        elif np.isfinite(lo):
            fl[FL_BETA] = lo
        elif np.isfinite(hi):
            fl[FL_BETA] = hi
    beta = fl[FL_BETA]
    best = np.inf
    i = 0
    for r in range(n):
        s = status[r]
        if s == S_ZERO:
            v = G[r] - beta * y[r]
        elif s == S_UPPER:
            v = -(G[r] - beta * y[r])
        else:
            continue
        if v < best:
            best = v
            i = r
    return i, best


@njit(cache=True, nogil=True)
def _kernel_column(X, kp, key, out):
    """K(W, x_key) into ``out`` (dense rows ``Dt`` when there are, sparse otherwise)."""
    ip, ix, data, sq, Dt, has_dt, work = X
    code, gamma, degree, coef0 = kp
    if has_dt:
        a, b = ip[key], ip[key + 1]
        dense_kernel_col(Dt, sq, ix[a:b], data[a:b], sq[key], code, gamma, degree, coef0, out)
    else:
        kernel_row(ip, ix, data, sq, key, ip, ix, data, sq, code, gamma, degree, coef0, work, out)


@njit(cache=True, nogil=True)
def enter(F, fs, K, X, kp, S, st, cnt, fl, key, tmp):
    """Row ``key`` enters I_s (:meth:`WorkingSet._enter`): its Q column (computed unless
    kept), the factor update. The arrays must have room (see :func:`has_room`)."""
    alpha, G, Gbase, y, Cv, status = S
    Qt, slot, ckey, aflush, released = K
    s = slot[key]
    if s >= 0:
        released[s] = False
    else:
        s = st[ST_P]
        _kernel_column(X, kp, key, tmp)
        yk = y[key]
        for r in range(tmp.shape[0]):
            Qt[r, s] = (tmp[r] * y[r]) * yk
        st[ST_EVALS] += tmp.shape[0]
        ckey[s] = key
        slot[key] = s
        aflush[s] = alpha[key]
        released[s] = False
        st[ST_P] = s + 1
    factor_append(F, fs, fl[FL_DEP_TOL], key, y[key], Qt[:, s], G[key], True)
    status[key] = S_FREE
    st[ST_ENTERED] = key
    cnt[C_ENTERED] += 1
    cnt[C_ITER] += 1


@njit(cache=True, nogil=True)
def has_room(F, fs, K, st, key):
    """Whether row ``key`` can enter without growing an array (the factor's basis with room
    for every member, so promotions never need to grow it either)."""
    R, Lam = F[0], F[1]
    Qt, slot = K[0], K[1]
    if fs[FS_NB] + fs[FS_ND] + 1 > R.shape[0] or fs[FS_ND] + 1 > Lam.shape[1]:
        return False
    return slot[key] >= 0 or st[ST_P] < Qt.shape[1]


@njit(cache=True, nogil=True)
def sprint_loop(phase, F, fs, K, X, kp, S, st, cnt, fl, work):
    """The minor iterations of :meth:`WorkingSet.run` from ``phase`` until one of the events
    of the module docstring; returns its code (``R_…``). All state is in the arrays:
    ``F``/``fs`` the factor, ``K`` the Q columns (``Qt, slot, key, aflush, released``),
    ``X`` the working rows, ``S = (alpha, G, Gbase, y, Cv, status)``, ``st``/``cnt``/``fl``
    the loop's scalars and counters. ``work`` = (d, keys, a, cv, prom, bound, delta, tmp)."""
    alpha, G, Gbase, y, Cv, status = S
    Qt, slot, ckey, aflush, released = K
    d, keys, a, cv, prom, bound, delta, tmp = work
    n = G.shape[0]
    polls = 0
    while True:
        if phase == PH_TOP:
            if cnt[C_ITER] - st[ST_START] >= st[ST_MAX_ITER]:
                return R_MAXITER
            polls += 1
            if polls > POLL_EVERY:
                return R_POLL
            _step1(F, fs, K, S, st, cnt, fl, d, keys, a, cv, prom)
            st[ST_SINCE_FULL] += 1
            p = st[ST_P]
            nrel = 0
            for s in range(p):
                if released[s]:
                    nrel += 1
            if st[ST_SINCE_FULL] >= FULL_FLUSH_EVERY or nrel > max(16, p // 4):
                return R_FLUSH
            # exact gradient of the bound working rows (the ones priced)
            nbd = 0
            for r in range(n):
                if status[r] == S_ZERO or status[r] == S_UPPER:
                    bound[nbd] = r
                    nbd += 1
            for s in range(p):
                delta[s] = alpha[ckey[s]] - aflush[s]
            if nbd * p >= FLUSH_PAR_MIN:
                gradient_rows_par(Qt, bound[:nbd], p, delta, Gbase, G)
            else:
                gradient_rows_range(Qt, bound, p, delta, Gbase, G, 0, nbd)
            st[ST_REPAIRED] = 0
        phase = PH_TOP
        i, v = _price(fs, S, cnt, fl)
        fl[FL_LAST_VIOLATION] = max(0.0, -v)
        if v >= -fl[FL_TOL_ENTER]:
            if st[ST_SINCE_FULL] > 0:
                return R_CONFIRM
            return R_OPTIMAL
        if st[ST_MEM_CHECK] and cnt[C_ITER] - st[ST_START] > 0 and fl[FL_NBYTES] > fl[FL_MEM_LIMIT]:
            return R_MEMORY
        if cnt[C_ITER] - st[ST_LAST_MOVE] > 2 * n + 100:
            return R_CYCLING
        if not has_room(F, fs, K, st, i):
            st[ST_PENDING] = i
            return R_GROW
        enter(F, fs, K, X, kp, S, st, cnt, fl, i, tmp)
