"""IRWLS-SVC with chunking (``--solver irwls``): Pérez-Cruz, Alarcón-Diana, Navia-Vázquez and
Artés-Rodríguez, *Fast training of support vector classifiers* (NIPS 2000).

Problem
-------
The standard soft-margin SVC, linear or kernel, with labels yᵢ ∈ {−1, +1}::

    primal:  min_{w,b}  ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(φ(xᵢ)ᵀw + b))
    dual:    min_β  ½ βᵀHβ − 1ᵀβ   s.t.  0 ≤ βᵢ ≤ C,  yᵀβ = 0,   Hᵢⱼ = yᵢyⱼK(xᵢ, xⱼ)

(LIBSVM's sign convention for the dual objective; β is LIBSVM's α). w = Σᵢ βᵢyᵢφ(xᵢ).

Method (paper section 2 and 2.1)
--------------------------------
With eᵢ = yᵢ − f(xᵢ) the error of sample i (so uᵢ = yᵢeᵢ = 1 − yᵢf(xᵢ) is its hinge argument),
the primal is rewritten as the weighted least-squares problem
½‖w‖² + ½ Σᵢ aᵢeᵢ² with aᵢ = C/(eᵢyᵢ) for eᵢyᵢ ≥ 0 and 0 otherwise (eq. 8). With the aᵢ fixed
its minimum solves the linear system (3) ``[[H + D_a⁻¹, y], [yᵀ, 0]]·[β; b] = [1; 0]``;
IRWLS alternates solving it and recomputing the aᵢ. The samples are split into three sets,
S₁ (0 < βᵢ < C, solved for), S₂ (βᵢ = 0) and S₃ (βᵢ = C), and the system is solved for S₁ only
(size |S₁| + 1, Cholesky of the Schur complement, LU when that fails), with the fixed S₃
multipliers (and, in chunking, every support vector outside the working set) moved to the
right-hand side as G_in / G_bin (Table 1, steps 1 and 5). Sets reordering (Table 1 step 4):
S₃ samples with eᵢyᵢ < 0 go to S₂; S₁ samples with βᵢ ≥ C go to S₃; S₁ samples with aᵢ = 0 go
to S₂; S₂ samples with aᵢ ≠ 0 go to S₁.

This implementation's choices where the paper is silent or garbled (Table 1), each measured
on a9a / mushrooms working sets before being adopted:

* *Step rule with guaranteed descent.* With the sets chosen from the signs of the current
  errors and aᵢ from eq. (8), the weighted problem is tangent to the working-set primal
  objective P(β, b) = ½βᵀH_WWβ + C Σ_{i∈W} max(0, uᵢ) + λb (λ = yᵀβ_W, the term the chunking
  constraint adds), so the segment old → new is a descent direction of P. The full step is
  taken when P does not exceed the largest of its last 10 values (a non-monotone window,
  Grippo, Lampariello & Lucidi 1986); otherwise the exact minimiser of the convex
  piecewise-quadratic P along the segment (breakpoints sorted) is taken. If a corrected step
  (below) finds no decrease, the plain step is used; if that finds none either, the
  working-set problem stops. Independently, only dual-feasible iterates (full steps whose S₁
  values lie in [0, C]) are ever returned, the best of them by the working-set dual objective
  (the starting point included), so the dual objective of the whole problem never
  increases from one outer iteration to the next.
* Weights aᵢ = C / max(uᵢ, 1e-3·inner_tol) keep D_a⁻¹ bounded away from 0.
* Rule a releases an S₃ sample with eᵢyᵢ < 0 to S₁ (where the system places it on the margin)
  instead of dropping it to S₂ (β = 0): measured 158 → 10 IRWLS iterations per working set.
* Rule b, relaxed: an S₁ sample whose new βᵢ ≥ C/2 while it still violates the margin
  (uᵢ > inner_tol) goes to S₃. With the paper's βᵢ ≥ C, such samples approach C only
  geometrically (βᵢ = C·u_new/u_old) and dominate the iteration count.
* Set corrections: when the solution of (3) contradicts the sets (S₁ values outside [0, C];
  then S₂/S₃ samples the step would carry across the margin) the sets are corrected and (3)
  re-solved, up to 5 times, before stepping. On rank-deficient kernels (linear kernel on
  binary data) this can cycle; when no descent is found, or after 50 iterations, the plain
  IRWLS step is used.
* Each working-set problem is warm-started from the current β, b (the paper restarts from
  β = 0, S₁ = W) and solved to ``0.1 * tol``.

Chunking (section 2.1) and working-set selection (section 3)
-----------------------------------------------------------
One streamed pass over the store per outer iteration (``engine.map_reduce``; β and
gᵢ = Σⱼ βⱼyⱼK(xⱼ, xᵢ) live in per-shard state, the linear kernel keeps w explicitly on the
driver, so G_in of a working-set row is gᵢ minus the working set's own contribution) applies
the previous working set's change, computes every eᵢ, checks the stopping conditions and
draws the next working set of ``working_set`` = q rows in the same pass: each shard keeps
bounded pools (at most q rows each, with their CSR data) and the pools are merged
deterministically (smallest (key, row) first), so no row is read at random afterwards.
Strategies (``--strategy``):

* ``random`` (the paper's): candidates = violators of (9), (10) and every free SV; when there
  are at least q candidates, one violator per class and per condition (9)–(11), the rest drawn
  uniformly at random (bottom-q of per-row random keys from an RNG seeded by (seed, iteration,
  shard), so the draw does not depend on the engine or the worker count); otherwise all
  candidates, completed with the non-candidates of smallest |eᵢ|.
* ``largest`` / ``smallest``: the violators of (9)–(11) with the largest / smallest |eᵢ|
  (plus one per class and condition), completed likewise.

Additions to section 3, all measured necessary: every working set also holds LIBSVM's
maximal violating pair (argmax of F = y − g over the rows whose yᵢβᵢ may grow, argmin over
those whose yᵢβᵢ may shrink; F does not depend on b). Without it a working set whose
violators all lie on one side can be solved by moving b alone, and the outer iteration cycles
(seen with ``largest`` at C = 100 and ``smallest`` on small problems). When an outer iteration
does not lower the dual objective anyway, the next pass selects with b = (m(β) + M(β)) / 2.
A working set on which IRWLS has not met ``0.1·tol`` after 150 iterations (rank-deficient
kernels, e.g. the linear kernel on binary features), or whose KKT point has a higher dual
objective than an earlier feasible iterate, is finished from its best dual-feasible point by
second-order SMO on the q × q kernel matrix; ``summary["smo_finishes"]`` counts those working
sets and ``summary["smo_steps"]`` the SMO steps.

Kernel work: the change of gᵢ after a working set is Σⱼ Δβⱼyⱼ K(xᵢ, xⱼ) over the changed
rows. Rows whose β changes again and again (free SVs) reuse their column K(shard rows, xⱼ)
from a per-shard byte-bounded cache (``--cache-mb`` split over the shards; a process-local
performance cache outside the replicated engine state, dropped at the end of the run).

Stopping rule (eqs. 9–11, with e = ``tol``, default 1e-3)::

    yᵢeᵢ < e  for βᵢ = 0,    −yᵢeᵢ < e  for βᵢ = C,    |yᵢeᵢ| < e  for 0 < βᵢ < C

checked on every row in the pass, with the bias b of the last working-set problem (or the
b-reset value), then confirmed by the independent KKT pass of
:func:`~ooc_svm.solvers.dual_common.kkt_violation_pass` (f recomputed from the final SVs).

Memory: per-shard β and g (16 bytes a row) in the engine state; on the driver the working set
(q rows, its q × q kernel matrix), O(n_features) for the linear kernel's w, and at the end the
support vectors of the model.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import scipy.linalg as sla
from numba import njit

from ..engine.base import WorkerScratch
from ..kernels.kernel_functions import KernelParams, kernel_block, linear_scores, row_sq_norms
from . import Callback, Result, SolverError, binary_classes
from .dual_common import (
    CheckpointClock,
    Expansion,
    WorkingRows,
    check_interrupt,
    collect_support_vectors,
    finish_dual,
    interruptible,
    primal_w,
    shard_rows,
)
from .kernel_cache import MB, KernelCache
from .params import KernelSolverParams, as_params, at_least, param

if TYPE_CHECKING:
    from ..checkpoint import Checkpointer

log = logging.getLogger("ooc_svm")

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


# ============================================================================================
# chunking: the streamed pass
# ============================================================================================
#: order of the statistics vector a pass returns
(
    _S_MAXV,
    _S_NVIOL,
    _S_SUMB,
    _S_BYG,
    _S_HINGE,
    _S_NSV,
    _S_NBSV,
    _S_SUMYB,
    _S_NCAND,
    _S_MUP,
    _S_MLOW,
    _S_HITS,
    _S_MISSES,
) = range(13)
_N_STATS = 13

STRATEGIES = ("random", "largest", "smallest")


@dataclass
class _Pool:
    """Up to ``k`` rows with the smallest (key, global row) — with their data and state."""

    rows: WorkingRows
    key: np.ndarray
    g: np.ndarray

    @property
    def n(self) -> int:
        return self.rows.n


def _pool_from(shard, local, key, beta, g, positive) -> _Pool | None:
    if local.size == 0:
        return None
    rows = shard_rows(shard, local, positive, beta)
    return _Pool(rows, np.asarray(key, dtype=np.float64), np.asarray(g, dtype=np.float64))


def _pool_bottom(shard, mask, key, k, beta, g, positive) -> _Pool | None:
    """The ``k`` rows of ``mask`` with the smallest key (ties: lower row first)."""
    idx = np.flatnonzero(mask)
    if idx.size == 0 or k <= 0:
        return None
    if idx.size > k:
        kk = key[idx]
        part = np.argpartition(kk, k - 1)[:k]
        idx = np.sort(idx[part])
        # exact ties at the k-th key: keep the lowest rows (deterministic)
        kth = key[idx].max()
        tie = np.flatnonzero(mask & (key == kth))
        if tie.size:
            below = idx[key[idx] < kth]
            idx = np.sort(np.concatenate((below, tie[: k - below.size])))
    order = np.lexsort((idx, key[idx]))
    idx = idx[order]
    return _pool_from(shard, idx, key[idx], beta, g[idx], positive)


def _merge_pool(a: _Pool | None, b: _Pool | None, k: int) -> _Pool | None:
    if a is None:
        return b
    if b is None:
        return a
    rows = WorkingRows.concat([a.rows, b.rows])
    key = np.concatenate((a.key, b.key))
    g = np.concatenate((a.g, b.g))
    order = np.lexsort((rows.gids, key))[:k]
    return _Pool(rows.take(order), key[order], g[order])


@dataclass
class _PassBroadcast:
    """What one pass ships to the shards (picklable)."""

    iteration: int
    seed: int
    strategy: str
    q: int
    tol: float
    C: float
    b: float
    positive: float
    upd_gids: np.ndarray  # sorted global rows whose β changed
    upd_beta: np.ndarray  # their new β
    w: np.ndarray | None = None  # linear kernel: the full w
    delta: Expansion | None = None  # kernel, no cache: Σ Δβⱼyⱼ K(xⱼ, ·) over the changed rows
    select: bool = True  # draw the next working set
    kp: KernelParams | None = None  # kernel: parameters (for the column cache)
    delta_rows: WorkingRows | None = None  # kernel: the changed rows (column cache keys)
    delta_coef: np.ndarray | None = None  # their Δβⱼyⱼ
    cache_bytes: int = 0  # column-cache budget of one shard (0: no cache)
    scratch: WorkerScratch | None = None  # this run's column caches (per process)
    n_features: int = 0


@dataclass
class _PassPartial:
    """Reduced result of a pass: statistics and the selection pools."""

    stats: np.ndarray
    q: int = 0
    main: _Pool | None = None
    fill: _Pool | None = None
    special: list | None = None  # 6 pools of one row: (class −1, +1) × condition (9)–(11)
    pair: list | None = None  # LIBSVM's maximal violating pair: argmax_up F, argmin_low F


# --------------------------------------------------------------------------------------------
# kernel column cache: K(shard rows, xⱼ) for rows j whose β changes again and again
# --------------------------------------------------------------------------------------------
#: the column caches of a run live in a :class:`~ooc_svm.engine.base.WorkerScratch` (one
#: :class:`KernelCache` per shard, keyed by its first row): a pure performance aid (every
#: column is recomputable from the data), kept out of the per-shard state the engines
#: replicate; on a Dask worker it lives as long as the run (the engine places a shard on the
#: same worker in every pass), like the engine's shard cache.
def _shard_cache(scratch: WorkerScratch, row_start: int, max_bytes: int) -> KernelCache:
    return scratch.get(row_start, lambda: KernelCache(max_bytes))


def _drop_caches_fn(stub, scratch: WorkerScratch, st=None):
    scratch.clear()
    return None if st is None else (None, st)


@njit(cache=True, nogil=True)
def _add_columns(cols, coef, out):
    """out += colsᵀ coef (cols: (m, n))."""
    m, n = cols.shape
    for j in range(m):
        c = coef[j]
        if c != 0.0:
            for i in range(n):
                out[i] += c * cols[j, i]
    return out


def _cached_delta(shard, ip, ix, bc: _PassBroadcast, hm: list) -> np.ndarray:
    """Σⱼ Δβⱼyⱼ K(xᵢ, xⱼ) for the shard's rows, with the columns from the shard's cache."""
    rows = bc.delta_rows
    cache = _shard_cache(bc.scratch, int(shard.row_start), bc.cache_bytes)
    sq = row_sq_norms(ip, ix, shard.data, np.empty(shard.n_rows, dtype=np.float64))
    rix = rows.u32
    rsq = rows.sq_norms()
    pos = {int(gid): k for k, gid in enumerate(rows.gids)}
    width = max(
        int(bc.n_features),
        int(ix.max()) + 1 if ix.size else 1,
        int(rix.max()) + 1 if rix.size else 1,
    )

    def compute(missing):
        sel = np.array([pos[int(gg)] for gg in missing], dtype=np.int64)
        sub = rows.take(sel)
        out = np.empty((sel.size, shard.n_rows), dtype=np.float64)
        kernel_block(
            sub.indptr,
            sub.u32,
            sub.data,
            rsq[sel],
            ip,
            ix,
            shard.data,
            sq,
            *bc.kp.args(),
            np.zeros(width),
            out,
        )
        return out

    h0, m0 = cache.hits, cache.misses
    cols = cache.get_or_compute(rows.gids, compute)
    hm[0] += cache.hits - h0
    hm[1] += cache.misses - m0
    return _add_columns(cols, bc.delta_coef, np.zeros(shard.n_rows))


def _init_state(linear: bool, info, _i):
    n = int(info.n_rows)
    return (np.zeros(n), None if linear else np.zeros(n))


def _pass_fn(shard, bc: _PassBroadcast, st):
    """Apply the last working-set change, compute eᵢ, check (9)–(11), draw candidates."""
    check_interrupt()
    beta, g = st
    hm = [0, 0]
    lo = np.searchsorted(bc.upd_gids, shard.row_start)
    hi = np.searchsorted(bc.upd_gids, shard.row_start + shard.n_rows)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    if hi > lo:
        beta = beta.copy()
        beta[bc.upd_gids[lo:hi] - shard.row_start] = bc.upd_beta[lo:hi]
    if bc.w is not None:
        g = linear_scores(ip, ix, shard.data, bc.w, np.empty(shard.n_rows, dtype=np.float64))
    elif bc.delta_rows is not None:
        if bc.cache_bytes > 0:
            g = g + _cached_delta(shard, ip, ix, bc, hm)
        else:
            g = g + bc.delta.scores(ip, ix, shard.data)
    y = np.where(shard.y == bc.positive, 1.0, -1.0)
    u = 1.0 - y * (g + bc.b)
    C, tol = bc.C, bc.tol
    at0 = beta <= 0.0
    atC = beta >= C
    free = ~(at0 | atC)
    v9 = at0 & (u > tol)
    v10 = atC & (u < -tol)
    v11 = free & (np.abs(u) > tol)
    viol = np.zeros(u.size)
    viol[at0] = u[at0]
    viol[atC] = -u[atC]
    viol[free] = np.abs(u[free])
    stats = np.zeros(_N_STATS)
    stats[_S_MAXV] = max(0.0, float(viol.max())) if viol.size else 0.0
    stats[_S_NVIOL] = np.count_nonzero(v9 | v10 | v11)
    stats[_S_SUMB] = beta.sum()
    stats[_S_BYG] = float(np.dot(beta * y, g))
    stats[_S_HINGE] = float(np.maximum(u, 0.0).sum())
    stats[_S_NSV] = np.count_nonzero(~at0)
    stats[_S_NBSV] = np.count_nonzero(atC)
    stats[_S_SUMYB] = float(np.dot(beta, y))
    # LIBSVM's m(β), M(β) over F = y − g (independent of b): the b-reset of the driver
    F = y - g
    up = np.where(y > 0, beta < C, beta > 0)
    low = np.where(y > 0, beta > 0, beta < C)
    stats[_S_MUP] = float(F[up].max()) if up.any() else -np.inf
    stats[_S_MLOW] = float(F[low].min()) if low.any() else np.inf
    stats[_S_HITS], stats[_S_MISSES] = hm
    part = _PassPartial(stats, int(bc.q))
    if bc.select:
        absu = np.abs(u)
        if bc.strategy == "random":
            cand = v9 | v10 | free
            key = np.random.default_rng([bc.seed, bc.iteration, shard.row_start]).random(u.size)
        else:
            cand = v9 | v10 | v11
            key = -absu if bc.strategy == "largest" else absu
        stats[_S_NCAND] = np.count_nonzero(cand)
        part.main = _pool_bottom(shard, cand, key, bc.q, beta, g, bc.positive)
        part.fill = _pool_bottom(shard, ~cand, absu, bc.q, beta, g, bc.positive)
        part.special = [
            _pool_bottom(shard, cond & (y == cls), key, 1, beta, g, bc.positive)
            for cls in (-1.0, 1.0)
            for cond in (v9, v10, v11)
        ]
        part.pair = [
            _pool_bottom(shard, up, -F, 1, beta, g, bc.positive),
            _pool_bottom(shard, low, F, 1, beta, g, bc.positive),
        ]
    return part, (beta, g)


def _pass_reduce(a: _PassPartial | None, b: _PassPartial | None) -> _PassPartial | None:
    if a is None:
        return b
    if b is None:
        return a
    st = a.stats + b.stats
    st[_S_MAXV] = max(a.stats[_S_MAXV], b.stats[_S_MAXV])
    st[_S_MUP] = max(a.stats[_S_MUP], b.stats[_S_MUP])
    st[_S_MLOW] = min(a.stats[_S_MLOW], b.stats[_S_MLOW])
    out = _PassPartial(st, max(a.q, b.q))
    if a.special is not None or b.special is not None:
        out.main = _merge_pool(a.main, b.main, out.q)
        out.fill = _merge_pool(a.fill, b.fill, out.q)
        sa = a.special or [None] * 6
        sb = b.special or [None] * 6
        out.special = [_merge_pool(x, y, 1) for x, y in zip(sa, sb, strict=True)]
        pa = a.pair or [None] * 2
        pb = b.pair or [None] * 2
        out.pair = [_merge_pool(x, y, 1) for x, y in zip(pa, pb, strict=True)]
    return out


# ============================================================================================
# chunking: the driver
# ============================================================================================
@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver irwls`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "irwls"

    tol: float = param(1e-3, "stopping conditions (9)-(11): |y_i e_i| within tol")
    max_iter: int = param(
        100_000, "outer iterations (working sets); reaching it is reported as not converged"
    )
    seed: int = param(0, "the random selection's draws (seeded per iteration and shard)")
    cache_mb: float = param(
        256.0, "kernel columns K(shard rows, x_j) of rows whose beta keeps changing, MiB"
    )
    working_set: int = param(150, "q, rows per working set (chunk); one streamed pass each")
    strategy: str = param(
        "random",
        "working-set selection of section 3 (random is the paper's)",
        choices=STRATEGIES,
    )

    def rules(self) -> None:
        super().rules()
        at_least(self, "working_set", 2)


DEFAULTS = Params.defaults()

STOPPING_RULE = (
    "Perez-Cruz et al. eqs. (9)-(11) on every row: y_i e_i < tol at beta_i=0, -y_i e_i < tol "
    "at beta_i=C, |y_i e_i| < tol for 0<beta_i<C (e_i = y_i - f(x_i)), confirmed by an "
    "independent KKT pass"
)

#: ``--checkpoint`` / ``--resume``: the state is saved after every outer iteration.
SUPPORTS_CHECKPOINT = True

#: the working-set problem is solved to this fraction of ``tol``
INNER_TOL_FACTOR = 0.1
#: IRWLS iterations allowed per working set
MAX_INNER = 150
#: outer iterations in a row without any change before the run is declared stalled
MAX_STALL = 20


def _select(part: _PassPartial, q: int) -> tuple[WorkingRows, np.ndarray]:
    """The next working set (rows and their gᵢ) from the reduced pools (section 3).

    Always the maximal violating pair first, then: at least q candidates → one violator per
    class and condition, then candidates in pool order; fewer → all candidates, then the
    fill (non-candidates of smallest |eᵢ|).
    """
    n_cand = int(part.stats[_S_NCAND])
    pools: list[_Pool] = [s for s in (part.pair or []) if s is not None]
    if n_cand >= q:
        pools += [s for s in (part.special or []) if s is not None]
        if part.main is not None:
            pools.append(part.main)
    else:
        if part.main is not None:
            pools.append(part.main)
        if part.fill is not None:
            pools.append(part.fill)
    if not pools:
        return WorkingRows.empty(), np.zeros(0)
    rows = WorkingRows.concat([p.rows for p in pools])
    g = np.concatenate([p.g for p in pools])
    _, first = np.unique(rows.gids, return_index=True)
    first = np.sort(first)[:q]  # keep pool order: specials, then candidates, then fill
    return rows.take(first), g[first]


def _working_kernel(rows: WorkingRows, kp: KernelParams, n_features: int) -> np.ndarray:
    ip, ix, data = rows.csr()
    sq = rows.sq_norms()
    out = np.empty((rows.n, rows.n), dtype=np.float64)
    work = np.zeros(max(n_features, int(ix.max()) + 1 if ix.size else 1), dtype=np.float64)
    kernel_block(ip, ix, data, sq, ip, ix, data, sq, *kp.args(), work, out)
    return out


def _collect_fn(shard, positive, st):
    beta = st[0]
    idx = np.flatnonzero(beta > 0.0)
    return ([shard_rows(shard, idx, positive, beta)] if idx.size else None), st


# ============================================================================================
# checkpoints: the state between two outer iterations
# ============================================================================================
_ROW_ARRAYS = ("gids", "indptr", "indices", "data", "y", "alpha")
#: the driver's scalars carried from one outer iteration to the next (and checkpointed)
_LOOP_KEYS = (
    "it",
    "b",
    "prev_dual",
    "just_reset",
    "stall",
    "hits",
    "misses",
    "inner_total",
    "line_total",
    "failures",
    "smo_total",
    "fallbacks",
    "b_resets",
    "passes",
)


def _save_checkpoint(
    checkpoint, engine, state, loop: dict, w, upd_gids, upd_beta, delta_rows, delta_coef, history
) -> None:
    """Write the state after an outer iteration: per-shard (β, g), the pending change of the
    last working set, w (linear) and the driver's scalars; a resumed run repeats the rest of
    the run bit for bit."""
    arrays = {"upd_gids": upd_gids, "upd_beta": upd_beta}
    if w is not None:
        arrays["w"] = w
    if delta_rows is not None:
        arrays.update({f"delta_{k}": getattr(delta_rows, k) for k in _ROW_ARRAYS})
        arrays["delta_coef"] = delta_coef
    scalars = {"loop": loop, "history": history, "delta": delta_rows is not None}
    shards = [
        {"beta": bt} if g is None else {"beta": bt, "g": g} for bt, g in engine.gather_state(state)
    ]
    checkpoint.save(int(loop["it"]), scalars=scalars, arrays=arrays, shard_states=shards)


def _load_checkpoint(checkpoint, store, engine):
    """(state, loop, w, upd_gids, upd_beta, delta_rows, delta_coef, history) saved by
    :func:`_save_checkpoint`, or None when there is no checkpoint to resume."""
    data = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if data is None:
        return None
    shards = data.shard_states or []
    if len(shards) != store.n_shards or any(
        st["beta"].shape != (int(info.n_rows),)
        for st, info in zip(shards, store.meta.shards, strict=True)
    ):
        raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
    a, sc = data.arrays, data.scalars
    state = engine.set_state(store, [(st["beta"], st.get("g")) for st in shards])
    delta_rows = delta_coef = None
    if sc["delta"]:
        delta_rows = WorkingRows(*(a[f"delta_{k}"] for k in _ROW_ARRAYS))
        delta_coef = a["delta_coef"]
    loop = dict(sc["loop"])
    return (
        state,
        loop,
        a.get("w"),
        a["upd_gids"],
        a["upd_beta"],
        delta_rows,
        delta_coef,
        list(sc["history"]),
    )


@interruptible
def solve(
    store,
    engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a C-SVC by IRWLS chunking (see the module docstring).

    Parameters
    ----------
    store
        An opened store with binary labels.
    engine : Engine
        Runs the streamed passes.
    params : Params
        (or a dict of its fields)
    callback : callable, optional
        Receives one dict per outer iteration.
    checkpoint : Checkpointer, optional
        Saves the state after every outer iteration; with ``checkpoint.resume`` the run
        continues from the latest checkpoint and ends with the same model.

    Returns
    -------
    Result
        ``model`` (kernel model; for the linear kernel ``kind="linear"`` with ``coef_`` and the
        support vectors kept), ``dual_objective`` (LIBSVM sign), ``objective`` (primal).
    """
    t0 = time.perf_counter()
    p = as_params(Params, params)
    p.validate(store.meta)
    neg, pos = binary_classes(store.meta)
    nf = int(store.meta.n_features)
    kp = KernelParams.from_params(p.kernel_dict(), nf)
    C, tol, q = float(p.C), float(p.tol), int(p.working_set)
    linear = kp.kernel == "linear"
    inner_tol = INNER_TOL_FACTOR * tol
    passes0 = engine.passes
    state = engine.init_state(store, functools.partial(_init_state, linear))
    w = np.zeros(nf) if linear else None
    b = 0.0
    upd_gids = np.zeros(0, dtype=np.int64)
    upd_beta = np.zeros(0)
    delta = delta_rows = delta_coef = None
    scratch = WorkerScratch("irwls-columns")
    cache_bytes = 0 if linear else int(float(p.cache_mb) * MB / max(1, store.n_shards))
    hits = misses = 0
    history: list[dict] = []
    inner_total = line_total = failures = stall = smo_total = fallbacks = b_resets = 0
    converged = just_reset = False
    prev_dual = 0.0
    it = 0
    part = None
    clock = CheckpointClock(float(getattr(p, "checkpoint_seconds", 60.0)))
    resumed = _load_checkpoint(checkpoint, store, engine)
    if resumed is not None:
        state, loop, w, upd_gids, upd_beta, delta_rows, delta_coef, history = resumed
        it, b, prev_dual, just_reset, stall = (
            int(loop["it"]),
            float(loop["b"]),
            float(loop["prev_dual"]),
            bool(loop["just_reset"]),
            int(loop["stall"]),
        )
        hits, misses, inner_total, line_total = (
            loop["hits"],
            loop["misses"],
            loop["inner_total"],
            loop["line_total"],
        )
        failures, smo_total, fallbacks, b_resets = (
            loop["failures"],
            loop["smo_total"],
            loop["fallbacks"],
            loop["b_resets"],
        )
        passes0 = engine.passes - int(loop["passes"])
        if delta_rows is not None and not cache_bytes:
            delta = Expansion.from_csr(
                kp, nf, delta_rows.indptr, delta_rows.indices, delta_rows.data, delta_coef
            )
        log.info("irwls: resuming after outer iteration %d", it)
    while True:
        check_interrupt()
        tp = time.perf_counter()
        bc = _PassBroadcast(
            it,
            int(p.seed),
            p.strategy,
            q,
            tol,
            C,
            b,
            pos,
            upd_gids,
            upd_beta,
            w,
            delta,
            True,
            kp,
            delta_rows,
            delta_coef,
            cache_bytes,
            scratch,
            nf,
        )
        part = engine.map_reduce(store, _pass_fn, bc, reduce=_pass_reduce, state=state)
        pass_s = time.perf_counter() - tp
        st = part.stats
        hits += int(st[_S_HITS])
        misses += int(st[_S_MISSES])
        viol = float(st[_S_MAXV])
        dual = 0.5 * float(st[_S_BYG]) - float(st[_S_SUMB])
        primal = 0.5 * float(st[_S_BYG]) + C * float(st[_S_HINGE])
        if viol <= tol:
            converged = True
        no_progress = it > 0 and dual >= prev_dual - 1e-13 * max(1.0, abs(prev_dual))
        prev_dual = dual
        if no_progress and not just_reset and not converged:
            # the working set was optimal and only b moved (it can cycle between two values
            # when W holds violators on one side only): select again with the b that
            # balances LIBSVM's m(β), M(β) over all rows
            b = 0.5 * (float(st[_S_MUP]) + float(st[_S_MLOW]))
            upd_gids, upd_beta = np.zeros(0, dtype=np.int64), np.zeros(0)
            delta = delta_rows = delta_coef = None
            just_reset = True
            b_resets += 1
            continue
        just_reset = False
        stall = stall + 1 if no_progress else 0
        if converged or it >= int(p.max_iter) or stall >= MAX_STALL:
            rec = {
                "iteration": it,
                "violation": viol,
                "n_violators": int(st[_S_NVIOL]),
                "objective": primal,
                "dual_objective": dual,
                "pass_seconds": pass_s,
                "seconds": time.perf_counter() - t0,
                "passes": engine.passes - passes0,
            }
            history.append(rec)
            if callback is not None:
                callback(rec)
            break
        it += 1
        # ---- the working set and its IRWLS-SVC problem ------------------------------------
        ts = time.perf_counter()
        rows, g_w = _select(part, q)
        K = _working_kernel(rows, kp, nf)
        yb = rows.y * rows.alpha
        g_out = g_w - K @ yb
        sub = irwls_working_set(K, rows.y, rows.alpha, b, g_out, C, inner_tol, MAX_INNER)
        inner_total += sub.iterations
        line_total += sub.line_searches
        failures += int(not sub.converged)
        smo_total += sub.smo_steps
        fallbacks += int(sub.smo_steps > 0)
        d = sub.beta - rows.alpha
        ch = np.flatnonzero(d != 0.0)
        b = float(sub.b)
        order = np.argsort(rows.gids[ch], kind="stable")
        ch = ch[order]
        upd_gids = rows.gids[ch].copy()
        upd_beta = sub.beta[ch].copy()
        if linear:
            if ch.size:
                w = w + primal_w(rows.take(ch), d[ch] * rows.y[ch], nf)
            delta = None
        else:
            delta = delta_rows = delta_coef = None
            if ch.size:
                delta_rows = rows.take(ch)
                delta_coef = d[ch] * rows.y[ch]
                if not cache_bytes:  # the shards evaluate Σ Δβⱼyⱼ K(xⱼ, ·) directly
                    delta = Expansion.from_csr(
                        kp, nf, delta_rows.indptr, delta_rows.indices, delta_rows.data, delta_coef
                    )
        solve_s = time.perf_counter() - ts
        rec = {
            "iteration": it,
            "violation": viol,
            "n_violators": int(st[_S_NVIOL]),
            "objective": primal,
            "dual_objective": dual,
            "working_set": int(rows.n),
            "changed": int(ch.size),
            "inner_iterations": sub.iterations,
            "inner_converged": sub.converged,
            "b": b,
            "n_sv": int(st[_S_NSV]),
            "n_bound_sv": int(st[_S_NBSV]),
            "pass_seconds": pass_s,
            "solve_seconds": solve_s,
            "seconds": time.perf_counter() - t0,
            "passes": engine.passes - passes0,
        }
        history.append(rec)
        if callback is not None:
            callback(rec)
        log.debug(
            "irwls it %d: viol %.3g dual %.10g |W| %d changed %d inner %d",
            it,
            viol,
            dual,
            rows.n,
            ch.size,
            sub.iterations,
        )
        if checkpoint is not None and clock.due():
            t_save = time.perf_counter()
            loop = dict(
                zip(
                    _LOOP_KEYS,
                    (
                        it,
                        b,
                        prev_dual,
                        just_reset,
                        stall,
                        hits,
                        misses,
                        inner_total,
                        line_total,
                        failures,
                        smo_total,
                        fallbacks,
                        b_resets,
                        engine.passes - passes0,
                    ),
                    strict=True,
                )
            )
            _save_checkpoint(
                checkpoint,
                engine,
                state,
                loop,
                w,
                upd_gids,
                upd_beta,
                delta_rows,
                delta_coef,
                history,
            )
            clock.saved(t_save)

    stop_value = float(part.stats[_S_MAXV])
    if cache_bytes:
        _drop_caches_fn(None, scratch)
        try:
            engine.map_state(store, _drop_caches_fn, scratch)
        except NotImplementedError:  # pragma: no cover - engines without map_state
            pass
    # ---- model, independent KKT check ---------------------------------------------------------
    sv = collect_support_vectors(store, engine, state, pos, _collect_fn)
    st = part.stats
    dual = 0.5 * float(st[_S_BYG]) - float(st[_S_SUMB])
    primal = math.nan

    def info(chk: dict | None) -> dict:
        nonlocal primal
        primal = 0.5 * float(st[_S_BYG]) + C * float(chk["hinge"])
        return {
            "solver": "irwls",
            "C": C,
            "tol": tol,
            "working_set": q,
            "strategy": p.strategy,
            "dual_objective": dual,
            "objective": primal,
            "converged": converged,
        }

    fin = finish_dual(store, engine, sv, b, kp, C, tol, (neg, pos), info, keep_dual=True)
    model, chk = fin.model, fin.kkt
    seconds = time.perf_counter() - t0
    summary = {
        "strategy": p.strategy,
        "working_set": q,
        "outer_iterations": it,
        "inner_iterations": inner_total,
        "line_searches": line_total,
        "inner_unconverged": failures,
        "smo_finishes": fallbacks,
        "smo_steps": smo_total,
        "b_resets": b_resets,
        "cache_hits": hits,
        "cache_misses": misses,
        "n_sv": int(sv.n),
        "n_bound_sv": int(np.count_nonzero(sv.alpha >= C)) if sv.n else 0,
        "intercept": b,
        "converged": converged,
        "stalled": bool(not converged and stall >= MAX_STALL),
        "kkt_max_violation": chk["max_violation"],
        "kkt_n_violators": chk["n_violators"],
        "kkt_ok": chk["ok"],
        "kkt_gap": chk["gap"],
        "sum_y_alpha": chk["sum_y_alpha"],
        "seconds": seconds,
    }
    if not converged:
        log.warning(
            "irwls: stopped after %d iterations without meeting tol=%g (violation %.3g)",
            it,
            tol,
            stop_value,
        )
    return Result(
        model=model,
        objective=primal,
        dual_objective=dual,
        converged=converged,
        stop_reason=None if converged else ("max_iter" if it >= p.max_iter else "stalled"),
        iterations=it,
        passes=engine.passes - passes0,
        seconds=seconds,
        stop_value=stop_value,
        history=history,
        summary=summary,
    )
