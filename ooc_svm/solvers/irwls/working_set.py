"""IRWLS-SVC on one working set, in memory (Pérez-Cruz et al. 2000, section 2 and Table 1)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from ..dual_common import (
    check_interrupt,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


#: relative slack when deciding that a solved S₁ multiplier lies inside [0, C]
_BOX_EPS = 1e-12


# ============================================================================================
# IRWLS-SVC on one working set (in memory)
# ============================================================================================
@dataclass
class SubproblemResult:
    """Outcome of :func:`irwls_working_set`.

    Attributes
    ----------
    beta : ndarray (q,)
        Dual-feasible multipliers of the working set (in [0, C], yᵀβ = λ).
    b : float
        Bias of the working-set problem.
    iterations : int
        IRWLS iterations (linear systems solved).
    converged : bool
        KKT conditions on the working set hold to ``inner_tol``.
    violation : float
        Largest KKT violation on the working set at ``beta``, ``b``.
    line_searches : int
        Iterations where the full step would have increased P and a shorter one was taken.
    smo_steps : int
        Steps of the SMO finish (0 when IRWLS reached the tolerance by itself).
    """

    beta: np.ndarray
    b: float
    iterations: int
    converged: bool
    violation: float
    line_searches: int = 0
    smo_steps: int = 0


def _kkt_violation(u: np.ndarray, beta: np.ndarray, C: float) -> float:
    """Largest violation of conditions (9)–(11) given uᵢ = yᵢeᵢ."""
    if u.size == 0:
        return 0.0
    at0 = beta <= 0.0
    atC = beta >= C
    free = ~(at0 | atC)
    v = np.zeros_like(u)
    v[at0] = u[at0]
    v[atC] = -u[atC]
    v[free] = np.abs(u[free])
    return float(max(0.0, v.max()))


def _best_bias(v: np.ndarray, y: np.ndarray, C: float, lam: float) -> float:
    """argmin_b C Σ max(0, vᵢ − yᵢb) + λb (β fixed): a weighted median of the breakpoints."""
    bp = np.sort(v * y)
    n_pos = int(np.count_nonzero(y > 0))
    # slope(b) = λ − C·n_pos + C·#{breakpoints ≤ b}; the minimiser is the k-th breakpoint
    k = int(math.ceil(n_pos - lam / C - 1e-12))
    k = min(max(k, 1), bp.size)
    return float(bp[k - 1])


def _line_search(A: float, B: float, u0: np.ndarray, du: np.ndarray, C: float) -> float:
    """Minimiser over [0, 1] of ½Aη² + Bη + C Σ max(0, u0ᵢ + η duᵢ) (convex, piecewise)."""
    active = (u0 > 0) | ((u0 == 0) & (du > 0))
    s0 = B + C * float(du[active].sum())
    if s0 >= 0.0:
        return 0.0
    nz = du != 0
    t = np.full(u0.shape, np.inf)
    t[nz] = -u0[nz] / du[nz]
    inside = (t > 0) & (t < 1) & nz
    order = np.argsort(t[inside], kind="stable")
    tk = t[inside][order]
    inc = C * np.abs(du[inside][order])
    starts = np.concatenate(([0.0], tk))
    ends = np.concatenate((tk, [1.0]))
    slopes = s0 + np.concatenate(([0.0], np.cumsum(inc)))
    ok = A * ends + slopes >= 0.0
    if not ok.any():
        return 1.0
    k = int(np.argmax(ok))
    if A > 0.0:
        return float(min(ends[k], max(starts[k], -slopes[k] / A)))
    return float(starts[k])


@njit(cache=True, nogil=True)
def _smo_finish(K, y, beta, F, C, tol, max_steps):
    """Second-order SMO (Fan, Chen & Lin 2005) on a dense working-set problem, in place.

    ``F`` holds yᵢ − gᵢ (gᵢ = f(xᵢ) without bias) and is kept up to date. Stops when LIBSVM's
    m(β) − M(β) ≤ tol; returns (steps, b) with b the mean of F over free samples, else
    (m + M) / 2.
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
            up = (y[t] > 0 and beta[t] < C) or (y[t] < 0 and beta[t] > 0)
            low = (y[t] > 0 and beta[t] > 0) or (y[t] < 0 and beta[t] < C)
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
            low = (y[t] > 0 and beta[t] > 0) or (y[t] < 0 and beta[t] < C)
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
        lim_i = C - beta[i] if y[i] > 0 else beta[i]
        lim_j = beta[j] if y[j] > 0 else C - beta[j]
        step = min(step, lim_i, lim_j)
        if step <= 0.0:
            break
        beta[i] = min(C, max(0.0, beta[i] + y[i] * step))
        beta[j] = min(C, max(0.0, beta[j] - y[j] * step))
        for t in range(q):
            F[t] -= step * (K[t, i] - K[t, j])
        steps += 1
    s = 0.0
    n = 0
    for t in range(q):
        if 0.0 < beta[t] < C:
            s += F[t]
            n += 1
    return steps, (s / n if n else 0.5 * (m + M))


#: below this size the system (3) is factored by the numba Cholesky (LAPACK with its own
#: threads was 70x slower at 150 rows on a busy 2-core machine; 0.18 ms here vs 3.8 ms)
_NUMBA_CHOL_MAX = 256


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
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


@njit(cache=True, nogil=True)
def _assemble(K, y, g_out, sets, inv_a, C, lam):
    """System (3) on S₁ with S₃ at C (Table 1 step 1): (S₁ indices, H₁₁ + D⁻¹, y₁, r, c).

    r = 1 − y₁ ∘ (G_in + C K₁₃ y₃) and c = λ − C Σ_{S₃} yᵢ (the paper's G₁₃, G_b3).
    """
    q = y.shape[0]
    idx = np.empty(q, dtype=np.int64)
    n1 = 0
    c = lam
    for t in range(q):
        if sets[t] == 1:
            idx[n1] = t
            n1 += 1
        elif sets[t] == 3:
            c -= C * y[t]
    M = np.empty((n1, n1))
    r = np.empty(n1)
    y1 = np.empty(n1)
    for a in range(n1):
        i = idx[a]
        y1[a] = y[i]
        s = g_out[i]
        for t in range(q):
            if sets[t] == 3:
                s += C * K[i, t] * y[t]
        r[a] = 1.0 - y[i] * s
        for bb in range(a + 1):
            j = idx[bb]
            v = y[i] * y[j] * K[i, j]
            M[a, bb] = v
            M[bb, a] = v
        M[a, a] += inv_a[i]
    return idx[:n1], M, y1, r, c


def _solve_free(M, y1, r, c):
    """Solve [[M, y₁], [y₁ᵀ, 0]] [β₁; b] = [r; c] with M = H₁₁ + D_a⁻¹.

    Cholesky of M and the Schur complement for b (numba up to ``_NUMBA_CHOL_MAX`` rows,
    LAPACK above); LU of the whole (|S₁|+1) system when the Cholesky factorisation fails.
    """
    import scipy.linalg as sla

    n = y1.size
    if n <= _NUMBA_CHOL_MAX:
        ok, beta, b = _schur_solve(M, y1, r, float(c), np.zeros((n, n)))
        if ok:
            return beta, float(b)
    else:
        try:
            cf = sla.cho_factor(M, lower=True, check_finite=False)
            z_r = sla.cho_solve(cf, r, check_finite=False)
            z_y = sla.cho_solve(cf, y1, check_finite=False)
            den = float(y1 @ z_y)
            if den > 0.0 and np.all(np.isfinite(z_r)):
                b = (float(y1 @ z_r) - c) / den
                return z_r - b * z_y, b
        except (np.linalg.LinAlgError, ValueError):
            pass
    F = np.zeros((n + 1, n + 1))
    F[:n, :n] = M
    F[:n, n] = y1
    F[n, :n] = y1
    sol = sla.lu_solve(
        sla.lu_factor(F, check_finite=False), np.concatenate((r, [c])), check_finite=False
    )
    return sol[:n], float(sol[n])


def irwls_working_set(
    K: np.ndarray,
    y: np.ndarray,
    beta: np.ndarray,
    b: float,
    g_out: np.ndarray,
    C: float,
    inner_tol: float = 1e-4,
    max_inner: int = 500,
    *,
    to_upper: float = 0.5,
    u_floor: float | None = None,
    corrections: int = 5,
    switch_after: int = 50,
    nonmonotone: int = 10,
    polish: bool = True,
) -> SubproblemResult:
    """Solve the SVC dual restricted to a working set W by IRWLS (paper, Table 1).

    Minimises ½βᵀH_WWβ + Σ_{i∈W} βᵢ(yᵢ g_outᵢ − 1) over 0 ≤ β ≤ C, yᵀβ = λ with λ = yᵀβ⁰ (the
    multipliers outside W are fixed; their contribution to every f(xᵢ), i ∈ W, is ``g_out``,
    the paper's G_in, and to the equality constraint λ, the paper's G_bin).

    Parameters
    ----------
    K : ndarray (q, q)
        Kernel matrix of the working set.
    y : ndarray (q,)
        Labels ±1.
    beta : ndarray (q,)
        Current (feasible) multipliers; the warm start.
    b : float
        Current bias.
    g_out : ndarray (q,)
        Σ_{j∉W} βⱼyⱼK(xⱼ, xᵢ) for every i ∈ W.
    C : float
    inner_tol : float
        KKT tolerance on W at which the working-set problem counts as solved.
    max_inner : int
        Limit on IRWLS iterations.
    to_upper : float
        Sets reordering, rule b: an S₁ sample moves to S₃ when its new βᵢ ≥ (1 − to_upper)·C
        while it still violates the margin (uᵢ > inner_tol); the paper's rule is βᵢ ≥ C
        (``to_upper=0``), which S₁ samples with a positive error approach only geometrically.
    u_floor : float, optional
        aᵢ = C / max(uᵢ, u_floor) (default ``1e-3 * inner_tol``).
    corrections : int
        Re-solves per iteration while the solution contradicts the sets (0: none).
    switch_after : int
        Iterations after which corrections are switched off (plain IRWLS steps only).
    nonmonotone : int
        The full step is taken when P does not exceed the largest of its last
        ``nonmonotone`` values (1: monotone); otherwise the exact line search.

    Returns
    -------
    SubproblemResult
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    q = y.size
    beta = np.clip(np.asarray(beta, dtype=np.float64), 0.0, C)
    g_out = np.asarray(g_out, dtype=np.float64)
    lam = float(y @ beta)
    u_floor = 1e-3 * inner_tol if u_floor is None else float(u_floor)
    box = _BOX_EPS * C

    def hinge_args(bt, bb):
        return 1.0 - y * (g_out + K @ (bt * y) + bb)

    def primal(bt, bb, u):
        by = bt * y
        return 0.5 * float(by @ (K @ by)) + C * float(np.maximum(u, 0.0).sum()) + lam * bb

    def dual(bt):
        by = bt * y
        return 0.5 * float(by @ (K @ by)) + float(bt @ (y * g_out - 1.0))

    def solve_sets(sets, inv_a):
        """Table 1 step 1: β_s with S₂ = 0, S₃ = C and (3) solved on S₁."""
        bs = np.where(sets == 3, C, 0.0)
        i1, M, y1, r, c = _assemble(K, y, g_out, sets, inv_a, C, lam)
        if i1.size:
            bs[i1], b_new = _solve_free(M, y1, r, c)
        else:  # no free sample: b minimises P with β fixed
            b_new = _best_bias(1.0 - y * (g_out + K @ (bs * y)), y, C, lam)
        return bs, float(b_new), i1

    u = hinge_args(beta, b)
    best = (beta.copy(), float(b), dual(beta), _kkt_violation(u, beta, C))
    if best[3] <= inner_tol:
        return SubproblemResult(beta, float(b), 0, True, best[3])

    # 1 = S₁ (solved for), 2 = S₂ (β = 0), 3 = S₃ (β = C)
    sets = np.where(beta <= 0.0, 2, np.where(beta >= C, 3, 1))
    p_hist = [primal(beta, b, u)]
    plain_only = False
    line_searches = 0
    it = 0
    for it in range(1, max_inner + 1):
        check_interrupt()
        # --- step 4: sets reordering from the current errors -----------------------------
        released = (sets == 3) & (u < 0.0)  # S₃ sample inside the margin: released to S₁
        sets[released] = 1
        sets[(sets == 1) & (u <= -inner_tol) & ~released] = 2  # aᵢ = 0
        sets[(sets == 2) & (u > 0.0)] = 1  # aᵢ ≠ 0
        sets0 = sets.copy()
        n_corr = 0 if (plain_only or it > switch_after) else corrections
        eta = 0.0
        for attempt in (n_corr, 0) if n_corr else (0,):
            sets[:] = sets0
            # --- step 3: weights (eq. 8) -------------------------------------------------
            inv_a = np.maximum(u, u_floor) / C
            removed = np.zeros(q, dtype=bool)
            for k in range(attempt + 1):
                beta_s, b_s, i1 = solve_sets(sets, inv_a)
                u_s = hinge_args(beta_s, b_s)
                if k == attempt:
                    break
                # the solution contradicts the sets: S₁ multipliers outside [0, C] leave
                # S₁; then samples the step would carry across the margin join S₁
                low = (sets == 1) & (beta_s < -box)
                high = (sets == 1) & (beta_s > C + box)
                if low.any() or high.any():
                    sets[low] = 2
                    sets[high] = 3
                    removed |= low | high
                    continue
                add = (((sets == 2) & (u_s > 0.0)) | ((sets == 3) & (u_s < 0.0))) & ~removed
                if not add.any():
                    break
                sets[add] = 1
                inv_a[add] = u_floor / C
            # --- step 2: a step that cannot increase P (beyond the non-monotone window) ----
            p1 = primal(beta_s, b_s, u_s)
            p_ref = max(p_hist[-nonmonotone:])
            if p1 <= p_ref + 1e-13 * max(1.0, abs(p_ref)):
                eta = 1.0
            else:
                line_searches += 1
                dy = (beta_s - beta) * y
                Kdy = K @ dy
                eta = _line_search(
                    float(dy @ Kdy), float((beta * y) @ Kdy) + lam * (b_s - b), u, u_s - u, C
                )
            if eta > 0.0:
                break
        if eta <= 0.0:
            if n_corr:
                plain_only = True
                continue
            log.debug("irwls: no descent along the IRWLS direction at iteration %d", it)
            break
        if eta >= 1.0:
            beta, b, u = beta_s, b_s, u_s
            p_hist.append(p1)
        else:
            beta = beta + eta * (beta_s - beta)
            b = b + eta * (b_s - b)
            u = hinge_args(beta, b)
            p_hist.append(primal(beta, b, u))
        # --- rule b (relaxed, see ``to_upper``) and S₁ multipliers that fell below 0 ------
        sets[(sets == 1) & ((beta >= C) | ((beta >= (1.0 - to_upper) * C) & (u > inner_tol)))] = 3
        sets[(sets == 1) & (beta <= 0.0)] = 2
        # --- a dual-feasible point: keep the best, stop when the KKT conditions hold ------
        if eta >= 1.0 and (i1.size == 0 or (beta[i1].min() >= -box and beta[i1].max() <= C + box)):
            bf = np.clip(beta, 0.0, C)
            viol = _kkt_violation(u, bf, C)
            dv = dual(bf)
            if dv <= best[2] + 1e-12 * abs(best[2]):  # (rounding: flat duals of singular K)
                best = (bf, float(b), dv, viol)
                if viol <= inner_tol:
                    return SubproblemResult(bf, float(b), it, True, viol, line_searches)
            elif viol <= inner_tol:
                break  # solved, but an earlier point was lower: finish from that one
    if best[3] <= inner_tol or not polish:
        return SubproblemResult(best[0], best[1], it, best[3] <= inner_tol, best[3], line_searches)
    # IRWLS did not reach the tolerance (seen on rank-deficient kernels, where the null-space
    # part of β keeps the S₁ values outside [0, C]): finish from the best feasible point
    bp = best[0].copy()
    F = y - (g_out + K @ (bp * y))
    n_smo, b_p = _smo_finish(K, y, bp, F, C, inner_tol, 200 * q + 10_000)
    u = hinge_args(bp, b_p)
    viol = _kkt_violation(u, bp, C)
    return SubproblemResult(bp, float(b_p), it, viol <= inner_tol, viol, line_searches, n_smo)
