"""``--solver smo``: Sequential Minimal Optimization, out of core (Platt 1998; Fan et al. 2005).

Problem (C-SVC dual, LIBSVM's sign convention)::

    min_α  ½ αᵀQα − eᵀα   s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,   Q_ij = y_i y_j K(x_i, x_j)

with f(x) = Σ_j y_j α_j K(x_j, x) + intercept, kernels linear / rbf / poly / sigmoid on sparse
rows (:mod:`ooc_svm.kernels.kernel_functions`). The model's ``intercept_`` is −b (Platt's
u = w·x − b) or −ρ (LIBSVM).

Two selection rules (``--selection``):

``platt`` — Platt 1998, section 2 as written (pseudo-code of section 2.5): analytic
    two-variable step with clipping (eqs. 13–18), η ≤ 0 by the objective at both ends
    (eq. 19), threshold update (eqs. 20–21), first choice alternating one pass over all
    examples with passes over the non-bound ones, second choice max |E₁−E₂| over the non-bound
    error cache, then the non-bound set and then "all examples" from seeded random starts,
    explicit w for the linear kernel (eq. 22). Out of core: a pass over all examples is a
    streamed pass, one shard at a time, brought to this process; in memory are the non-bound
    rows with their error cache, every support vector (kernel; linear: only w) and the kernel
    cache. E for a shard row is computed when its shard arrives (from the SV expansion, or w)
    and kept exact by the same incremental updates as the error cache.
    Deviation (documented): "all examples from a random start" loops over the rows in memory
    (non-bound rows, support vectors, and the current shard during an all-examples pass), not
    the whole store.
    Stopping rule: an examine-all pass changes nothing (Platt) — then an independent streamed
    KKT pass must confirm |violation| ≤ tol on every row, else examine-all passes continue.

``wss2`` (default) — Fan, Chen & Lin 2005 second-order working-set selection with the
    gradient maintained, shrinking (``--shrinking``) and gradient reconstruction as in
    LIBSVM, in numba, on an in-memory working set W. When the store fits the working budget
    (``--working-mb`` / ``--working-rows``) W is the whole problem (LIBSVM on it). Otherwise a
    decomposition: solve the subproblem on W (rows outside fixed), a streamed pass computes
    the gradient of every other row from the SV expansion (or w), stops when the maximal
    violating pair over ALL rows satisfies m(α) − M(α) ≤ tol, else brings the most violating
    rows into W (evicting α = 0 rows that are not violating; bound SVs are folded into w or a
    fixed in-memory expansion).
    Stopping rule: m(α) − M(α) ≤ tol over all rows (LIBSVM's), confirmed by the independent
    KKT pass.

Memory: α lives in per-shard engine state; the driver holds W (or Platt's non-bound rows),
the support vectors (kernel models need them), O(n_features) vectors and the kernel cache
(``--cache-mb``). It does not grow with the number of rows beyond α.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from numba import njit

from ..engine.base import concat_partials
from ..kernels.kernel_functions import (
    KernelParams,
    clear_row,
    gather_dot,
    kernel_from_dot,
    scatter_row,
    sparse_dot,
)
from . import Callback, Result, SolverError, binary_classes
from .dual_common import (
    Expansion,
    WorkingRows,
    apply_alpha_updates,
    dual_objective,
    fetch_rows,
    finish_dual,
    init_alpha_state,
    kkt_violation_pass,
    make_expansion,
    shard_rows,
)
from .kernel_cache import MB, SlotCache, slot_acquire_prefix
from .params import KernelSolverParams, as_params, at_least, param, positive

if TYPE_CHECKING:
    from ..checkpoint import Checkpointer

log = logging.getLogger("ooc_svm")


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver smo`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "smo"

    tol: float = param(1e-3, "KKT tolerance (LIBSVM -e, Platt's tol)")
    max_iter: int = param(10_000_000, "SMO steps; reaching it is reported as not converged")
    seed: int = param(0, "Platt's random starting points; the decomposition's first sample")
    cache_mb: float = param(256.0, "kernel column cache budget in MiB")
    selection: str = param(
        "wss2",
        "working-set selection: wss2 = Fan et al. 2005 second order (LIBSVM), platt = Platt "
        "1998 as written",
        choices=("wss2", "platt"),
    )
    shrinking: bool = param(True, "LIBSVM shrinking (wss2 only)", cli="bool")
    working_mb: float = param(256.0, "memory budget of the in-memory working set (MiB)")
    working_rows: int = param(0, "cap on in-memory working rows (0: from --working-mb)")
    checkpoint_every: int = param(
        100_000, "wss2 in memory: SMO steps per chunk (--checkpoint saves after each)"
    )

    def rules(self) -> None:
        super().rules()
        at_least(self, "working_rows", 0)
        positive(self, "working_mb")
        at_least(self, "checkpoint_every", 0)


DEFAULTS = Params.defaults()

#: ``--checkpoint`` works for wss2: in memory (state saved between chunks and every
#: ``--checkpoint-seconds``) and out of core (saved after every outer iteration).
SUPPORTS_CHECKPOINT = True

STOPPING_RULE = (
    "wss2: maximal violating pair m(a)-M(a) <= tol over all rows (LIBSVM); platt: an "
    "examine-all pass changes nothing; both confirmed by an independent KKT pass"
)

TAU = 1e-12
#: Platt's eps in takeStep (minimum relative step, objective comparison at the ends).
PLATT_EPS = 1e-10
#: Platt: how many times a failed final KKT check restarts the examine-all passes.
MAX_PLATT_CHECKS = 20


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
        scatter_row(indptr, indices, data, i, work)
        sqi = sq[i]
        if with_y:
            yi = y[i]
            for t in range(have, need):
                k = order[t]
                d = gather_dot(indptr, indices, data, k, work)
                col[k] = yi * y[k] * kernel_from_dot(code, d, sqi, sq[k], gamma, degree, coef0)
        else:
            for t in range(have, need):
                k = order[t]
                d = gather_dot(indptr, indices, data, k, work)
                col[k] = kernel_from_dot(code, d, sqi, sq[k], gamma, degree, coef0)
        clear_row(indptr, indices, i, work)
        slot_len[s] = need
    return col


# ============================================================================================
# numba: WSS2 (Fan, Chen & Lin 2005 / LIBSVM Solver) on an in-memory set
# ============================================================================================
@njit(cache=True, nogil=True)
def _select_wss2(active, n_active, X, kp, cache, work, alpha, G, QD, C):
    """WSS2: i = argmax_{I_up} −y G; j minimises the second-order decrease. Returns
    (i, j, m − M) with j = −1 when no pair is found."""
    y = X[4]
    gmax = -np.inf
    gmax2 = -np.inf
    imax = -1
    for t in range(n_active):
        k = active[t]
        if y[k] > 0:
            if alpha[k] < C and -G[k] >= gmax:
                gmax = -G[k]
                imax = k
        else:
            if alpha[k] > 0 and G[k] >= gmax:
                gmax = G[k]
                imax = k
    if imax < 0:
        return -1, -1, 0.0
    i = imax
    qi = _column(i, n_active, active, X, kp, cache, work, True)
    jmin = -1
    obj_min = np.inf
    yi = y[i]
    for t in range(n_active):
        k = active[t]
        if y[k] > 0:
            if alpha[k] > 0:
                gd = gmax + G[k]
                if G[k] >= gmax2:
                    gmax2 = G[k]
                if gd > 0:
                    qc = QD[i] + QD[k] - 2.0 * yi * qi[k]
                    od = -(gd * gd) / (qc if qc > 0 else TAU)
                    if od <= obj_min:
                        jmin = k
                        obj_min = od
        else:
            if alpha[k] < C:
                gd = gmax - G[k]
                if -G[k] >= gmax2:
                    gmax2 = -G[k]
                if gd > 0:
                    qc = QD[i] + QD[k] + 2.0 * yi * qi[k]
                    od = -(gd * gd) / (qc if qc > 0 else TAU)
                    if od <= obj_min:
                        jmin = k
                        obj_min = od
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
        if 0 < alpha[j] < C:
            nr_free += 1
    if nr_free * m > 2 * n_active * (m - n_active):
        for t in range(n_active, m):
            i = active[t]
            qi = _column(i, n_active, active, X, kp, cache, work, True)
            s = 0.0
            for u in range(n_active):
                j = active[u]
                if 0 < alpha[j] < C:
                    s += alpha[j] * qi[j]
            G[i] += s
    else:
        for u in range(n_active):
            i = active[u]
            if 0 < alpha[i] < C:
                qi = _column(i, m, active, X, kp, cache, work, True)
                a = alpha[i]
                for t in range(n_active, m):
                    j = active[t]
                    G[j] += a * qi[j]


@njit(cache=True, nogil=True)
def _be_shrunk(k, y, alpha, G, C, gmax1, gmax2):
    if alpha[k] >= C:
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
            if alpha[k] < C:
                gmax1 = max(gmax1, -G[k])
            if alpha[k] > 0:
                gmax2 = max(gmax2, G[k])
        else:
            if alpha[k] < C:
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
            if alpha[i] >= C:
                for k in range(m):
                    G_bar[k] += C * qi[k]


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
            if diff > 0:  # C_i - C_j == 0
                if ai > C:
                    ai = C
                    aj = C - diff
            else:
                if aj > C:
                    aj = C
                    ai = C + diff
        else:
            qc = QD[i] + QD[j] - 2.0 * qi[j]
            if qc <= 0:
                qc = TAU
            delta = (G[i] - G[j]) / qc
            s = ai + aj
            ai -= delta
            aj += delta
            if s > C:
                if ai > C:
                    ai = C
                    aj = s - C
            else:
                if aj < 0:
                    aj = 0.0
                    ai = s
            if s > C:
                if aj > C:
                    aj = C
                    ai = s - C
            else:
                if ai < 0:
                    ai = 0.0
                    aj = s
        alpha[i] = ai
        alpha[j] = aj
        dai = ai - ai_old
        daj = aj - aj_old
        for t in range(n_active):
            k = active[t]
            G[k] += qi[k] * dai + qj[k] * daj
        ui = ai_old >= C
        uj = aj_old >= C
        if ui != (ai >= C):
            qf = _column(i, m, active, X, kp, cache, work, True)
            sgn = -C if ui else C
            for k in range(m):
                G_bar[k] += sgn * qf[k]
        if uj != (aj >= C):
            qf = _column(j, m, active, X, kp, cache, work, True)
            sgn = -C if uj else C
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
        if alpha[k] >= C:
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
        if (y[k] > 0 and alpha[k] < C) or (y[k] < 0 and alpha[k] > 0):
            m_up = max(m_up, myg)
        if (y[k] < 0 and alpha[k] < C) or (y[k] > 0 and alpha[k] > 0):
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
def _platt_nonbound_loop(
    X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
):
    """Passes over the non-bound rows until one changes nothing (Platt's inner loop).

    Returns (total changes, number of passes)."""
    m = alpha.shape[0]
    total = 0
    passes = 0
    while True:
        changed = 0
        for k in range(m):
            if ist[2] >= ist[3]:
                break
            if 0 < alpha[k] < C:
                changed += _examine(
                    k, X, kp, cache, work, alpha, E, tracked, tlist, fs, ist, w, linear, C, tol, rs
                )
        passes += 1
        total += changed
        if changed == 0 or ist[2] >= ist[3]:
            break
    return total, passes


# ============================================================================================
# shard functions (module level: they run inside the engine, possibly in other processes)
# ============================================================================================
def _apply(shard, st, gids, vals):
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    if hi > lo:
        st = np.array(st, copy=True)
        st[gids[lo:hi] - shard.row_start] = vals[lo:hi]
    return st


def _fetch_shard_fn(shard, bc, st):
    """Apply pending α updates to this shard's state and return all its rows (Platt)."""
    gids, vals, positive = bc
    st = _apply(shard, st, gids, vals)
    rows = shard_rows(shard, np.arange(shard.n_rows), positive, st)
    return [rows], st


def _scan_fn(shard, bc, st):
    """wss2 decomposition pass: apply α updates, compute −yᵢGᵢ of every row outside W from
    the expansion, return (m_up, m_low, n_candidates, top-K violators with their rows)."""
    exp, gids, vals, w_gids, m_w, big_m_w, positive, C, top_k = bc
    st = _apply(shard, st, gids, vals)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    g = exp.scores(ip, shard.indices.view(np.uint32), shard.data)
    y = np.where(shard.y == positive, 1.0, -1.0)
    a = np.asarray(st)
    myg = y - g
    at0 = a <= 0
    atC = a >= C
    up = (~atC & (y > 0)) | (~at0 & (y < 0))
    low = (~atC & (y < 0)) | (~at0 & (y > 0))
    rid = np.arange(shard.row_start, shard.row_start + shard.n_rows)
    out = ~np.isin(rid, w_gids, assume_unique=True)
    upo = up & out
    lowo = low & out
    m_up = float(myg[upo].max()) if upo.any() else -np.inf
    m_low = float(myg[lowo].min()) if lowo.any() else np.inf
    v = np.full(a.size, -np.inf)
    v[upo] = myg[upo] - big_m_w
    v[lowo] = np.maximum(v[lowo], m_w - myg[lowo])
    cand = np.flatnonzero(v > 0)
    n_cand = int(cand.size)
    if cand.size > top_k:
        sel = np.argsort(-v[cand], kind="stable")[:top_k]
        cand = np.sort(cand[sel])
    part = None
    if cand.size:
        part = (v[cand], shard_rows(shard, cand, positive, st))
    return (m_up, m_low, n_cand, part, top_k), st


def _scan_reduce(p, q):
    if p is None:
        return q
    if q is None:
        return p
    parts = [x for x in (p[3], q[3]) if x is not None]
    top_k = p[4]
    if len(parts) == 2:
        v = np.concatenate([parts[0][0], parts[1][0]])
        rows = WorkingRows.concat([parts[0][1], parts[1][1]])
        if v.size > top_k:
            sel = np.sort(np.argsort(-v, kind="stable")[:top_k])
            v, rows = v[sel], rows.take(sel)
        merged = (v, rows)
    else:
        merged = parts[0] if parts else None
    return (max(p[0], q[0]), min(p[1], q[1]), p[2] + q[2], merged, top_k)


# ============================================================================================
# driver helpers
# ============================================================================================
def _kernel_tuple(kp: KernelParams):
    return (np.int64(kp.code), float(kp.gamma), np.int64(kp.degree), float(kp.coef0))


def _x_tuple(rows: WorkingRows):
    return (
        rows.indptr,
        rows.u32,
        rows.data.astype(np.float32, copy=False),
        rows.sq_norms(),
        rows.y,
    )


def _cache_for(cache_mb: float, m: int) -> SlotCache:
    return SlotCache(int(cache_mb * MB), max(m, 1), max(m, 1))


def _kernel_params(store, p: Params) -> KernelParams:
    try:
        return KernelParams.from_params(p.kernel_dict(), store.meta.n_features)
    except ValueError as e:
        raise SolverError(str(e)) from None


def _budget_rows(store, p) -> int:
    if int(p.working_rows) > 0:
        return max(2, int(p.working_rows))
    meta = store.meta
    per_row = 8.0 * (meta.nnz / max(meta.n_rows, 1)) + 10 * 8.0
    return max(2, int(float(p.working_mb) * MB / per_row))


# ============================================================================================
# solve
# ============================================================================================
def solve(
    store,
    engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train with SMO; see the module docstring for the problem and the stopping rules.

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), the in-memory wss2
    solver saves α, G and Ḡ every ``checkpoint_every`` SMO steps and, when resuming, starts
    from the latest checkpoint; the run is split into the same chunks either way, so a
    resumed run ends with exactly the model of an uninterrupted one.
    """
    t0 = time.perf_counter()
    p = as_params(Params, params)
    p.validate(store.meta)
    C, tol = p.C, p.tol
    kp = _kernel_params(store, p)
    neg, pos = binary_classes(store.meta)
    if store.meta.n_rows < 2:
        raise SolverError("smo needs at least two rows")
    passes0 = engine.passes
    state = init_alpha_state(engine, store)
    history: list[dict] = []

    def report(rec):
        rec["seconds"] = time.perf_counter() - t0
        rec.setdefault("passes", engine.passes - passes0)
        history.append(rec)
        if callback is not None:
            callback(rec)

    if p.selection == "platt":
        if checkpoint is not None:
            raise SolverError("smo: --checkpoint is supported with --selection wss2 only")
        out = _solve_platt(store, engine, state, p, C, tol, kp, pos, report)
    else:
        out = _solve_wss2(store, engine, state, p, C, tol, kp, pos, report, checkpoint)
    sv_rows, intercept, iters, extra, dual = out
    state = extra.pop("state", state)  # a resumed decomposition restores the shard α

    # independent KKT check on every row, the model
    w = extra.get("w")
    objs: dict[str, float] = {}

    def info(kkt: dict | None) -> dict:
        d = dual
        if d is None:
            if w is not None:
                d = 0.5 * float(w @ w) - kkt["sum_alpha"]
            else:
                d = dual_objective(sv_rows, kp, store.meta.n_features)
        # ½‖w‖² = ½αᵀQα = dual + Σα
        objs["dual"] = d
        objs["primal"] = float(d + kkt["sum_alpha"] + C * kkt["hinge"])
        return {
            "solver": "smo",
            "C": C,
            "tol": tol,
            "selection": p.selection,
            "dual_objective": d,
            "objective": objs["primal"],
        }

    fin = finish_dual(
        store,
        engine,
        sv_rows,
        intercept,
        kp,
        C,
        tol,
        (neg, pos),
        info,
        state=state,
        w=None if w is None else np.asarray(w, dtype=np.float64),
        kkt=extra.pop("kkt", None),
    )
    kkt, model = fin.kkt, fin.model
    if not kkt["ok"]:
        log.warning(
            "smo: KKT check found a violation of %.3g (> tol %.3g) on %d rows",
            kkt["max_violation"],
            tol,
            kkt["n_violators"],
        )
    summary = {
        "kernel": kp.kernel,
        "gamma": kp.gamma,
        "C": C,
        "tol": tol,
        "selection": p.selection,
        "shrinking": bool(p.shrinking),
        "n_sv": int(kkt["n_sv"]),
        "n_bound_sv": int(kkt["n_bound_sv"]),
        "intercept": float(intercept),
        "kkt_max_violation": kkt["max_violation"],
        "kkt_violators": kkt["n_violators"],
        "kkt_gap": kkt["gap"],
        "kkt_ok": kkt["ok"],
    }
    summary.update({k: v for k, v in extra.items() if k not in ("w", "passes")})
    summary["converged"] = extra.get("status") != "max_iter"
    seconds = time.perf_counter() - t0
    return Result(
        model=model,
        objective=objs["primal"],
        dual_objective=float(objs["dual"]),
        iterations=int(iters),
        passes=int(extra.get("passes", engine.passes - passes0)),
        seconds=seconds,
        stop_value=float(extra.get("stop_value", 0.0)),
        history=history,
        summary=summary,
    )


# --------------------------------------------------------------------------------------------
# wss2
# --------------------------------------------------------------------------------------------
#: target seconds of one numba call of the wss2 loop (Ctrl-C and time checkpoints between)
SLICE_SECONDS = 0.05


class _Slicer:
    """Step budgets for numba calls so each takes about ``SLICE_SECONDS``: the process returns
    to Python (where Ctrl-C is raised and checkpoints are timed) many times a second. The
    budget follows the measured time per step (at most doubling per call, as steps get
    dearer when the kernel cache misses)."""

    def __init__(self, budget: int = 16):
        self.budget = budget
        self.t = time.perf_counter()

    def adapt(self) -> None:
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        want = self.budget * SLICE_SECONDS / max(dt, 1e-6)
        self.budget = int(max(1, min(2 * self.budget, want, 1 << 40)))


def _init_grad_sliced(X, kt, sc, work, alpha, G, G_bar, p_lin, C) -> None:
    m = alpha.shape[0]
    sl = _Slicer(64)
    lo = 0
    while True:
        hi = min(m, lo + sl.budget)
        _wss2_init_grad(X, kt, sc.arrays(), work, alpha, G, G_bar, p_lin, C, lo, hi)
        sl.adapt()
        lo = hi
        if lo >= m:
            break


def _run_wss2(
    W: WorkingRows,
    p_lin,
    kp,
    C,
    tol,
    cache_mb,
    max_iter,
    shrinking,
    n_features,
    every: int = 0,
    checkpoint=None,
    report=None,
    checkpoint_seconds: float = 60.0,
):
    """LIBSVM's solver on the rows of ``W`` (α updated in place).

    With ``every`` > 0 the solver runs in chunks of at most ``every`` SMO steps (the gradient
    is reconstructed and shrinking restarts between chunks — still LIBSVM's algorithm, and
    the same chunks with or without checkpoints); after each chunk α, G and Ḡ go to
    ``checkpoint`` and a progress record to ``report``. Within a chunk the numba loop runs in
    slices of ~0.1 s (Ctrl-C is seen between them) and its whole state (α, G, Ḡ, the
    shrinking order and counters) is checkpointed when ``checkpoint_seconds`` have passed
    since the last save; pausing does not change a step, so a resumed run ends with the
    model of an uninterrupted one.
    """
    X = _x_tuple(W)
    kt = _kernel_tuple(kp)
    work = np.zeros(max(n_features, int(W.indices.max()) + 1 if W.indices.size else 1))
    G = np.empty(W.n)
    G_bar = np.empty(W.n)
    QD = _diag(X, kt)
    total, chunk, seq, init = 0, 0, 0, True
    active, ist, fst = _wss2_fresh_state(W.n)
    stats = {"hits": 0, "misses": 0, "evictions": 0}
    if checkpoint is not None and checkpoint.resume:
        data = checkpoint.load()
        if data is not None:
            arr = data.arrays
            if "alpha" not in arr:
                raise SolverError(
                    f"{checkpoint.directory}: checkpoint of the out-of-core decomposition; the "
                    "in-memory solver cannot resume from it (same --working-mb / --working-rows?)"
                )
            if arr["alpha"].shape != W.alpha.shape:
                raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
            W.alpha[:], G[:], G_bar[:] = arr["alpha"], arr["G"], arr["G_bar"]
            total, seq, init = int(data.scalars["iterations"]), data.iteration, False
            chunk = int(data.scalars.get("chunk", data.iteration))
            if "active" in arr:
                active, ist, fst = arr["active"].copy(), arr["ist"].copy(), arr["fst"].copy()
            log.info("smo: resuming after %d SMO steps", total + int(ist[IST_IT]))
    last_save = time.perf_counter()

    def save() -> None:
        nonlocal seq, last_save
        seq += 1
        checkpoint.save(
            seq,
            scalars={"iterations": total, "chunk": chunk},
            arrays={
                "alpha": W.alpha,
                "G": G,
                "G_bar": G_bar,
                "active": active,
                "ist": ist,
                "fst": fst,
            },
        )
        last_save = time.perf_counter()

    step = int(every) if every and every > 0 else int(max_iter)
    sl = _Slicer()
    while True:
        sc = _cache_for(cache_mb, W.n)  # a fresh cache: shrinking restarts in every chunk
        if init:
            _init_grad_sliced(X, kt, sc, work, W.alpha, G, G_bar, p_lin, C)
            init = False
        limit = max(1, min(step, int(max_iter) - total))
        while not ist[IST_DONE]:
            _wss2_steps(
                X,
                kt,
                sc.arrays(),
                work,
                W.alpha,
                G,
                G_bar,
                p_lin,
                QD,
                C,
                tol,
                limit,
                bool(shrinking),
                active,
                ist,
                fst,
                sl.budget,
            )
            sl.adapt()
            if (
                checkpoint is not None
                and not ist[IST_DONE]
                and time.perf_counter() - last_save >= checkpoint_seconds
            ):
                save()
        status, gap = int(ist[IST_STATUS]), float(fst[0])
        total += int(ist[IST_IT])
        chunk += 1
        for k, v in sc.stats_dict().items():
            stats[k] = stats.get(k, 0) + v
        if status == 0 or total >= max_iter:
            break
        if report is not None:
            report(
                {
                    "iteration": chunk,
                    "violation": gap,
                    "working_set": W.n,
                    "smo_iterations": total,
                    "objective": float(0.5 * np.dot(W.alpha, G + p_lin)),
                    "passes": 1,
                }
            )
        active, ist, fst = _wss2_fresh_state(W.n)
        if checkpoint is not None:
            save()
    return total, G, stats, status


def _solve_wss2(store, engine, state, p, C, tol, kp, pos, report, checkpoint=None):
    n = store.meta.n_rows
    nf = store.meta.n_features
    budget = _budget_rows(store, p)
    max_iter = int(p.max_iter)
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    if n <= budget:
        t1 = time.perf_counter()
        W = fetch_rows(store, engine, np.arange(n), pos)
        p_lin = -np.ones(W.n)
        it, G, cs, status = _run_wss2(
            W,
            p_lin,
            kp,
            C,
            tol,
            p.cache_mb,
            max_iter,
            p.shrinking,
            nf,
            every=int(p.checkpoint_every),
            checkpoint=checkpoint,
            report=report,
            checkpoint_seconds=float(p.checkpoint_seconds),
        )
        rho, m_up, m_low = _rho_and_gap(W.y, W.alpha, G, C)
        dual = float(0.5 * np.dot(W.alpha, G + p_lin))
        sv = np.flatnonzero(W.alpha > 0)
        apply_alpha_updates(store, engine, state, W.gids[sv], W.alpha[sv])
        report(
            {
                "iteration": 1,
                "violation": float(m_up - m_low),
                "working_set": W.n,
                "smo_iterations": it,
                "objective": dual,
                "pass_seconds": time.perf_counter() - t1,
                "passes": 1,
            }
        )
        for k in cache_stats:
            cache_stats[k] += cs[k]
        extra = {
            "working_rows": W.n,
            "outer_iterations": 1,
            "stop_value": float(m_up - m_low),
            "passes": 2,  # reading every row + the independent KKT pass
            "cache_hits": cache_stats["hits"],
            "cache_misses": cache_stats["misses"],
            "cache_evictions": cache_stats["evictions"],
            "in_memory": True,
            "status": "optimal" if status == 0 else "max_iter",
        }
        if status != 0:
            log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, m_up - m_low)
        return W.take(sv), -float(rho), it, extra, dual
    return _solve_wss2_decomposition(
        store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint
    )


def _fetch_in_order(store, engine, pos, gids: np.ndarray, alpha: np.ndarray) -> WorkingRows:
    """The rows ``gids`` (in this order) with the given α."""
    if gids.size == 0:
        return WorkingRows.empty()
    rows = fetch_rows(store, engine, gids, pos)
    rows = rows.take(np.searchsorted(rows.gids, gids))
    rows.alpha[:] = alpha
    return rows


def _decomposition_save(checkpoint, engine, state, outer, W, G, F, w_fixed, ev, scalars):
    """Checkpoint of the decomposition between two outer iterations: W, its G, the fixed
    part (F or w), the evictions not yet applied, every shard's α."""
    ev_g = np.concatenate([np.zeros(0, dtype=np.int64)] + ev[0])
    ev_a = np.concatenate([np.zeros(0)] + ev[1])
    checkpoint.save(
        outer,
        scalars=scalars,
        arrays={
            "W_gids": W.gids,
            "W_alpha": W.alpha,
            "G": G,
            "F_gids": F.gids,
            "F_alpha": F.alpha,
            "w_fixed": w_fixed,
            "ev_g": ev_g,
            "ev_a": ev_a,
        },
        shard_states=[{"alpha": np.asarray(a)} for a in engine.gather_state(state)],
    )


def _decomposition_load(checkpoint, store, engine, pos):
    """(state, scalars, W, G, F, w_fixed, evicted) from the latest checkpoint, or None."""
    data = checkpoint.load()
    if data is None:
        return None
    a = data.arrays
    if "W_gids" not in a or data.shard_states is None:
        raise SolverError(
            f"{checkpoint.directory}: checkpoint of the in-memory smo solver; the out-of-core "
            "decomposition cannot resume from it (same --working-mb / --working-rows?)"
        )
    state = engine.set_state(store, [st["alpha"] for st in data.shard_states])
    W = _fetch_in_order(store, engine, pos, a["W_gids"], a["W_alpha"])
    F = _fetch_in_order(store, engine, pos, a["F_gids"], a["F_alpha"])
    ev = ([a["ev_g"]], [a["ev_a"]]) if a["ev_g"].size else ([], [])
    log.info("smo: resuming the decomposition after outer iteration %d", data.iteration)
    return state, data.scalars, W, a["G"].copy(), F, a["w_fixed"].copy(), ev


def _solve_wss2_decomposition(
    store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint=None
):
    n = store.meta.n_rows
    nf = store.meta.n_features
    linear = kp.kernel == "linear"
    rng = np.random.default_rng(int(p.seed))
    max_iter = int(p.max_iter)
    top_k = max(1, budget // 4)
    first = np.sort(rng.choice(n, size=min(n, max(2, budget // 2)), replace=False))
    W = fetch_rows(store, engine, first, pos, state)
    # bound SVs outside W: kernel -> rows kept in memory (F); linear -> folded into w_fixed
    F = WorkingRows.empty()
    w_fixed = np.zeros(nf)
    evicted_g: list[np.ndarray] = []
    evicted_a: list[np.ndarray] = []
    total_it = 0
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    outer = 0
    gap = np.inf
    G = np.zeros(W.n)
    rho = 0.0
    status = 0
    loaded = None
    if checkpoint is not None and checkpoint.resume:
        loaded = _decomposition_load(checkpoint, store, engine, pos)
    if loaded is not None:
        state, sc, W, G, F, w_fixed, (evicted_g, evicted_a) = loaded
        outer, total_it = int(sc["outer"]), int(sc["total_it"])
        cache_stats = {k: int(sc["cache_" + k]) for k in cache_stats}
    while True:
        outer += 1
        t1 = time.perf_counter()
        if linear:
            fixed = Expansion(kp, nf, w=w_fixed)
        else:
            fixed = make_expansion(kp, nf, F, F.y * F.alpha)
        p_lin = -1.0 + W.y * fixed.scores(*W.csr())
        it, G, cs, status = _run_wss2(
            W, p_lin, kp, C, tol, p.cache_mb, max(1, max_iter - total_it), p.shrinking, nf
        )
        total_it += it
        for k in cache_stats:
            cache_stats[k] += cs[k]
        rho, m_w, big_m_w = _rho_and_gap(W.y, W.alpha, G, C)
        # full expansion: W's SVs + the fixed part
        svw = W.take(np.flatnonzero(W.alpha > 0))
        if linear:
            from .dual_common import primal_w

            exp = Expansion(kp, nf, w=w_fixed + primal_w(svw, svw.y * svw.alpha, nf))
        else:
            allsv = WorkingRows.concat([svw, F])
            exp = make_expansion(kp, nf, allsv, allsv.y * allsv.alpha)
        upd_g = np.concatenate([W.gids] + evicted_g)
        upd_a = np.concatenate([W.alpha] + evicted_a)
        order = np.argsort(upd_g, kind="stable")
        upd_g, upd_a = upd_g[order], upd_a[order]
        evicted_g, evicted_a = [], []
        w_sorted = np.sort(W.gids)
        bc = (exp, upd_g, upd_a, w_sorted, float(m_w), float(big_m_w), float(pos), C, top_k)
        r = engine.map_reduce(store, _scan_fn, bc, reduce=_scan_reduce, state=state)
        m_up_o, m_low_o, n_cand, part, _ = r
        gap = max(m_w, m_up_o) - min(big_m_w, m_low_o)
        report(
            {
                "iteration": outer,
                "violation": float(gap),
                "working_set": W.n,
                "smo_iterations": it,
                "candidates": int(n_cand),
                "pass_seconds": time.perf_counter() - t1,
            }
        )
        if gap <= tol or part is None or status != 0 or total_it >= max_iter:
            break
        cand = part[1]
        # candidates that were bound SVs held outside W leave the fixed part
        if linear:
            back = np.flatnonzero(cand.alpha > 0)
            if back.size:
                from .dual_common import primal_w

                bk = cand.take(back)
                w_fixed = w_fixed - primal_w(bk, bk.y * bk.alpha, nf)
        elif F.n:
            keepF = ~np.isin(F.gids, cand.gids)
            F = F.take(np.flatnonzero(keepF))
        Gc = -1.0 + cand.y * exp.scores(*cand.csr())
        W = WorkingRows.concat([W, cand])
        G = np.concatenate([G, Gc])
        if W.n > budget:
            W, F, w_fixed, ev_g, ev_a = _evict(W, G, rho, F, w_fixed, C, budget, linear, nf)
            evicted_g.append(ev_g)
            evicted_a.append(ev_a)
        if checkpoint is not None:
            scalars = {"outer": outer, "total_it": total_it}
            scalars.update({"cache_" + k: v for k, v in cache_stats.items()})
            _decomposition_save(
                checkpoint, engine, state, outer, W, G, F, w_fixed, (evicted_g, evicted_a), scalars
            )
    if status != 0 or total_it >= max_iter:
        log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, gap)
    # final flush of W's α (already applied by the last scan) and the model's SVs
    svw = W.take(np.flatnonzero(W.alpha > 0))
    extra = {
        "working_rows": int(W.n),
        "outer_iterations": outer,
        "stop_value": float(gap),
        "cache_hits": cache_stats["hits"],
        "cache_misses": cache_stats["misses"],
        "cache_evictions": cache_stats["evictions"],
        "in_memory": False,
        "status": "optimal" if gap <= tol else "max_iter",
    }
    if linear:
        from .dual_common import primal_w

        extra["w"] = w_fixed + primal_w(svw, svw.y * svw.alpha, nf)
        extra["state"] = state
        # the model is built from w; bound SVs folded into w_fixed are not kept as rows
        return svw, -float(rho), total_it, extra, None
    extra["state"] = state
    allsv = WorkingRows.concat([svw, F])
    return allsv, -float(rho), total_it, extra, None


def _evict(W, G, rho, F, w_fixed, C, budget, linear, nf):
    """Shrink W to ~3/4 of the budget: drop α = 0 rows farthest inside the margin, then move
    α = C rows to the fixed part (w or F). With yᵢf(xᵢ) − 1 = Gᵢ − yᵢρ, the KKT condition is
    Gᵢ − yᵢρ ≥ 0 for α = 0 and ≤ 0 for α = C."""
    target = max(2, (3 * budget) // 4)
    excess = W.n - target
    ev = np.zeros(W.n, dtype=bool)
    margin = G - W.y * rho
    zero = np.flatnonzero(W.alpha <= 0)
    if excess > 0 and zero.size:
        order = zero[np.argsort(-margin[zero], kind="stable")]
        take = order[:excess]
        take = take[margin[take] > 0]
        ev[take] = True
        excess -= take.size
    bound = np.flatnonzero(W.alpha >= C)
    if excess > 0 and bound.size:
        order = bound[np.argsort(margin[bound], kind="stable")]
        take = order[:excess]
        take = take[margin[take] < 0]
        ev[take] = True
        moved = W.take(take)
        if linear:
            from .dual_common import primal_w

            w_fixed = w_fixed + primal_w(moved, moved.y * moved.alpha, nf)
        else:
            F = WorkingRows.concat([F, moved])
    keep = np.flatnonzero(~ev)
    gone = np.flatnonzero(ev)
    return W.take(keep), F, w_fixed, W.gids[gone].copy(), W.alpha[gone].copy()


# --------------------------------------------------------------------------------------------
# platt
# --------------------------------------------------------------------------------------------
class _PlattMemory:
    """The rows Platt's SMO keeps in memory between shards: the pool (non-bound rows; for
    kernels every SV), its error cache and which α values the shard state already has."""

    def __init__(self, nf: int, linear: bool):
        self.rows = WorkingRows.empty()
        self.E = np.zeros(0)
        self.tracked = np.zeros(0, dtype=bool)
        self.a_state = np.zeros(0)
        self.linear = linear
        self.w = np.zeros(max(nf, 1))
        self.pending: dict[int, float] = {}


def _solve_platt(store, engine, state, p, C, tol, kp, pos, report):
    nf = store.meta.n_features
    linear = kp.kernel == "linear"
    mem = _PlattMemory(nf, linear)
    kt = _kernel_tuple(kp)
    fs = np.zeros(1)  # b
    rs = np.array([np.uint64(int(p.seed) & 0xFFFFFFFFFFFFFFFF)], dtype=np.uint64)
    max_iter = int(p.max_iter)
    steps = 0
    starts = np.array([s.row_start for s in store.meta.shards] + [store.meta.n_rows])
    examine_all = True
    num_changed = 0
    outer = 0
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    kkt = None
    checks = 0
    full_passes = 0
    last_gap = np.inf
    while (num_changed > 0 or examine_all) and steps < max_iter:
        outer += 1
        t1 = time.perf_counter()
        num_changed = 0
        if examine_all:
            full_passes += 1
            for sid in range(store.n_shards):
                if steps >= max_iter:
                    break
                lo, hi = starts[sid], starts[sid + 1]
                pend = {g: a for g, a in mem.pending.items() if lo <= g < hi}
                for g in pend:
                    del mem.pending[g]
                pg = np.array(sorted(pend), dtype=np.int64)
                pv = np.array([pend[g] for g in pg], dtype=np.float64)
                parts = engine.map_reduce(
                    store,
                    _fetch_shard_fn,
                    (pg, pv, float(pos)),
                    reduce=concat_partials,
                    state=state,
                    shards=[sid],
                )
                shard = WorkingRows.concat(parts or [])
                nc, st, cs = _platt_shard(
                    mem, shard, kt, kp, fs, rs, C, tol, p, max_iter - steps, nf
                )
                num_changed += nc
                steps += st
                for k in cache_stats:
                    cache_stats[k] += cs[k]
        else:
            nc, st, cs = _platt_shard(mem, None, kt, kp, fs, rs, C, tol, p, max_iter - steps, nf)
            num_changed += nc
            steps += st
            for k in cache_stats:
                cache_stats[k] += cs[k]
        was_all = examine_all
        if examine_all:
            examine_all = False
        elif num_changed == 0:
            examine_all = True
        n_nb = int(((mem.rows.alpha > 0) & (mem.rows.alpha < C)).sum())
        report(
            {
                "iteration": outer,
                "examine_all": was_all,
                "changed": int(num_changed),
                "smo_iterations": steps,
                "working_set": n_nb,
                "pass_seconds": time.perf_counter() - t1,
                "passes": full_passes,
            }
        )
        if not (num_changed > 0 or examine_all):
            # Platt's loop has ended: confirm with an independent pass before stopping
            _platt_flush(store, engine, state, mem)
            exp = _platt_expansion(mem, kp, nf)
            kkt = kkt_violation_pass(store, engine, state, exp, -fs[0], C, pos, tol)
            full_passes += 1
            last_gap = kkt["max_violation"]
            if not kkt["ok"] and checks < MAX_PLATT_CHECKS:
                checks += 1
                log.info(
                    "smo/platt: KKT check found violation %.3g; more examine-all passes",
                    kkt["max_violation"],
                )
                examine_all = True
    if steps >= max_iter:
        log.warning("smo: iteration limit %d reached", max_iter)
    _platt_flush(store, engine, state, mem)
    extra = {
        "outer_iterations": outer,
        "stop_value": float(last_gap),
        "working_rows": int(mem.rows.n),
        "cache_hits": cache_stats["hits"],
        "cache_misses": cache_stats["misses"],
        "cache_evictions": cache_stats["evictions"],
        "in_memory": False,
        "status": "optimal" if steps < max_iter else "max_iter",
        "passes": full_passes,
        "examine_all_checks": checks,
    }
    if kkt is not None and steps < max_iter:
        extra["kkt"] = kkt
    if linear:
        extra["w"] = mem.w[:nf].copy()
        sv = mem.rows.take(np.flatnonzero(mem.rows.alpha > 0))
        return sv, -float(fs[0]), steps, extra, None
    sv = mem.rows.take(np.flatnonzero(mem.rows.alpha > 0))
    return sv, -float(fs[0]), steps, extra, None


def _platt_expansion(mem: _PlattMemory, kp, nf) -> Expansion:
    if mem.linear:
        return Expansion(kp, nf, w=mem.w[:nf].copy())
    sv = mem.rows.take(np.flatnonzero(mem.rows.alpha > 0))
    return make_expansion(kp, nf, sv, sv.y * sv.alpha)


def _platt_flush(store, engine, state, mem: _PlattMemory) -> None:
    """Write every α the shard state does not have yet (pending + rows in memory)."""
    g = list(mem.pending)
    a = [mem.pending[k] for k in g]
    mem.pending.clear()
    ch = np.flatnonzero(mem.rows.alpha != mem.a_state)
    g_all = np.concatenate([np.asarray(g, dtype=np.int64), mem.rows.gids[ch]])
    a_all = np.concatenate([np.asarray(a, dtype=np.float64), mem.rows.alpha[ch]])
    apply_alpha_updates(store, engine, state, g_all, a_all)
    mem.a_state = mem.rows.alpha.copy()


def _platt_shard(
    mem: _PlattMemory, shard: WorkingRows | None, kt, kp, fs, rs, C, tol, p, step_budget, nf
):
    """Examine the rows of one shard (examine-all pass) or the non-bound rows (shard None)
    with the rows in memory; update the pool. Returns (changed, steps, cache stats)."""
    pool = mem.rows
    if shard is not None:
        in_pool = np.isin(shard.gids, pool.gids)
        new = shard.take(np.flatnonzero(~in_pool))
        rows = WorkingRows.concat([pool, new])
        pos_of = {int(g): k for k, g in enumerate(rows.gids)}
        order = np.array([pos_of[int(g)] for g in shard.gids], dtype=np.int64)
        # E for every row of the shard from the current expansion (or w); they join the
        # error cache for the time the shard is in memory
        exp = _platt_expansion(mem, kp, nf)
        E = np.concatenate([mem.E, np.zeros(new.n)])
        E[order] = exp.scores(*shard.csr()) - fs[0] - shard.y
        tracked = np.concatenate([(pool.alpha > 0) & (pool.alpha < C), np.zeros(new.n, dtype=bool)])
        tracked[order] = True
        a_state = np.concatenate([mem.a_state, new.alpha])
    else:
        rows = pool
        E = mem.E.copy()
        tracked = (pool.alpha > 0) & (pool.alpha < C)
        a_state = mem.a_state
        order = None
    m = rows.n
    if m == 0:
        return 0, 0, {"hits": 0, "misses": 0, "evictions": 0}
    # E of untracked rows is not maintained: mark it unknown
    E = np.where(tracked, E, 0.0)
    tlist = np.zeros(m, dtype=np.int64)
    nt = int(tracked.sum())
    tlist[:nt] = np.flatnonzero(tracked)
    ist = np.array([nt, 0, 0, max(0, int(step_budget))], dtype=np.int64)
    X = _x_tuple(rows)
    sc = _cache_for(float(p.cache_mb), m)
    work = np.zeros(max(nf, int(rows.indices.max()) + 1 if rows.indices.size else 1))
    w = mem.w if mem.linear else np.zeros(1)
    if mem.linear and w.shape[0] < work.shape[0]:
        w = np.concatenate([w, np.zeros(work.shape[0] - w.shape[0])])
    alpha = rows.alpha  # updated in place
    if order is not None:
        changed = _platt_examine_list(
            order,
            X,
            kt,
            sc.arrays(),
            work,
            alpha,
            E,
            tracked,
            tlist,
            fs,
            ist,
            w,
            mem.linear,
            C,
            tol,
            rs,
        )
    else:
        changed, _ = _platt_nonbound_loop(
            X, kt, sc.arrays(), work, alpha, E, tracked, tlist, fs, ist, w, mem.linear, C, tol, rs
        )
    mem.w = w
    # new pool: non-bound rows, plus (kernel) every SV
    if mem.linear:
        keep = (alpha > 0) & (alpha < C)
    else:
        keep = alpha > 0
    leave = np.flatnonzero(~keep & (alpha != a_state))
    for g, a in zip(rows.gids[leave].tolist(), alpha[leave].tolist(), strict=True):
        mem.pending[g] = a
    k_idx = np.flatnonzero(keep)
    mem.rows = rows.take(k_idx)
    mem.E = E[k_idx]
    mem.a_state = a_state[k_idx]
    return int(changed), int(ist[2]), sc.stats_dict()
