"""IRWLS-SVC on one working set, in memory (Pérez-Cruz et al. 2000, section 2 and Table 1)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...kernels.parallel import thread_share
from ..dual import check_interrupt
from ._numba import _NUMBA_CHOL_MAX, _assemble, _schur_solve, _schur_solve_par, _smo_finish

log = logging.getLogger(__name__)


#: relative slack when deciding that a solved S₁ multiplier lies inside [0, C]
_BOX_EPS = 1e-12
#: relative rounding of yᵀβ = λ (against Σ C) at which a vertex counts as meeting it
_EQ_EPS = 1e-12


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


def _kkt_violation(u: np.ndarray, beta: np.ndarray, C) -> float:
    """Largest violation of conditions (9)–(11) given uᵢ = yᵢeᵢ (``C``: one bound or each
    sample's C_{y_i})."""
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


def _best_bias(v: np.ndarray, y: np.ndarray, C, lam: float) -> float:
    """argmin_b Σ Cᵢ max(0, vᵢ − yᵢb) + λb (β fixed): a weighted median of the breakpoints.

    ``C`` is one cost or each sample's C_{y_i}.
    """
    if np.ndim(C) == 0:
        bp = np.sort(v * y)
        n_pos = int(np.count_nonzero(y > 0))
        # slope(b) = λ − C·n_pos + C·#{breakpoints ≤ b}; the minimiser is the k-th breakpoint
        k = int(math.ceil(n_pos - lam / C - 1e-12))
        k = min(max(k, 1), bp.size)
        return float(bp[k - 1])
    # slope(b) = λ − Σ_{yᵢ>0} Cᵢ + Σ_{breakpoints ≤ b} Cᵢ: the first breakpoint where it is ≥ 0
    order = np.argsort(v * y, kind="stable")
    bp = (v * y)[order]
    need = float(C[y > 0].sum()) - lam
    k = int(np.searchsorted(np.cumsum(C[order]), need - 1e-12 * max(1.0, abs(need))))
    return float(bp[min(max(k, 0), bp.size - 1)])


def _line_search(A: float, B: float, u0: np.ndarray, du: np.ndarray, C) -> float:
    """Minimiser over [0, 1] of ½Aη² + Bη + Σ Cᵢ max(0, u0ᵢ + η duᵢ) (convex, piecewise);
    ``C`` is one cost or an array of each sample's."""
    active = (u0 > 0) | ((u0 == 0) & (du > 0))
    if np.ndim(C) == 0:
        s0 = B + C * float(du[active].sum())
    else:
        s0 = B + float((C[active] * du[active]).sum())
    if s0 >= 0.0:
        return 0.0
    nz = du != 0
    t = np.full(u0.shape, np.inf)
    t[nz] = -u0[nz] / du[nz]
    inside = (t > 0) & (t < 1) & nz
    order = np.argsort(t[inside], kind="stable")
    tk = t[inside][order]
    inc = (C if np.ndim(C) == 0 else C[inside][order]) * np.abs(du[inside][order])
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


def _solve_free(M, y1, r, c):
    """Solve [[M, y₁], [y₁ᵀ, 0]] [β₁; b] = [r; c] with M = H₁₁ + D_a⁻¹ (its lower triangle).

    Cholesky of M and the Schur complement for b (numba: serial up to ``_NUMBA_CHOL_MAX``
    rows, on all threads above; LAPACK's own threads spin, and a threaded factor may depend
    on their number); LU of the whole (|S₁|+1) system when the Cholesky factorisation fails.
    """
    import scipy.linalg as sla

    n = y1.size
    if n <= _NUMBA_CHOL_MAX:
        ok, beta, b = _schur_solve(M, y1, r, float(c), np.zeros((n, n)))
        if ok:
            return beta, float(b)
    else:
        ok, beta, b = _schur_solve_par(M, y1, r, float(c))
        if ok:
            return beta, float(b)
    F = np.zeros((n + 1, n + 1))
    F[:n, :n] = np.tril(M) + np.tril(M, -1).T  # (M's lower triangle: see _assemble)
    F[:n, n] = y1
    F[n, :n] = y1
    sol = sla.lu_solve(
        sla.lu_factor(F, check_finite=False), np.concatenate((r, [c])), check_finite=False
    )
    return sol[:n], float(sol[n])


class _Problem:
    """The dual restricted to a working set (Table 1): its data, the closed-form pieces of one
    IRWLS iteration and the feasibility tests. ``C`` is one cost or each sample's C_{y_i}."""

    def __init__(self, K, y, g_out, C, lam: float, inner_tol: float, u_floor: float):
        self.K, self.y, self.g_out, self.lam = K, y, g_out, lam
        self.scalar = np.ndim(C) == 0
        #: ``C`` as given (one float, or each sample's bound) and as one bound per sample
        self.C: Any = float(C) if self.scalar else np.asarray(C, dtype=np.float64)
        self.Cv: np.ndarray = (
            np.full(y.size, float(C)) if self.scalar else np.asarray(C, dtype=np.float64)
        )
        self.box: np.ndarray = _BOX_EPS * self.Cv
        self.inner_tol, self.u_floor = inner_tol, u_floor
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def kby(self, by: np.ndarray) -> np.ndarray:
        """K·(β∘y) for ``by`` = β∘y; the last product is kept, so that an iterate's errors, its
        primal and its dual (three uses of the same vector) cost one product."""
        last = self._last
        if last is not None and np.array_equal(last[0], by):
            return last[1]
        kv = self.K @ by
        self._last = (by, kv)
        return kv

    def u(self, bt: np.ndarray, bb: float) -> np.ndarray:
        """uᵢ = yᵢeᵢ = 1 − yᵢ f(xᵢ)."""
        return 1.0 - self.y * (self.g_out + self.kby(bt * self.y) + bb)

    def primal(self, bt: np.ndarray, bb: float, u: np.ndarray) -> float:
        by = bt * self.y
        hinge = np.maximum(u, 0.0)
        loss = self.C * float(hinge.sum()) if self.scalar else float((self.Cv * hinge).sum())
        return float(0.5 * float(by @ self.kby(by)) + loss + self.lam * bb)

    def dual(self, bt: np.ndarray) -> float:
        by = bt * self.y
        return 0.5 * float(by @ self.kby(by)) + float(bt @ (self.y * self.g_out - 1.0))

    def violation(self, u: np.ndarray, bt: np.ndarray) -> float:
        return _kkt_violation(u, bt, self.C)

    def solve_sets(self, sets: np.ndarray, inv_a: np.ndarray):
        """Table 1 step 1: β_s with S₂ = 0, S₃ = C and (3) solved on S₁; (β_s, b, S₁)."""
        K, y = self.K, self.y
        bs = np.where(sets == 3, self.Cv, 0.0)
        with thread_share():
            i1, M, y1, r, c = _assemble(K, y, self.g_out, sets, inv_a, self.Cv, self.lam)
        if i1.size:
            bs[i1], b_new = _solve_free(M, y1, r, c)
        else:  # no free sample: b minimises P with β fixed
            b_new = _best_bias(1.0 - y * (self.g_out + K @ (bs * y)), y, self.C, self.lam)
        return bs, float(b_new), i1

    def corrected(self, sets: np.ndarray, u: np.ndarray, attempts: int):
        """Step 1 with up to ``attempts`` set corrections (sets updated); (β_s, b_s, S₁, u_s)."""
        inv_a = np.maximum(u, self.u_floor) / self.Cv  # step 3: weights (eq. 8)
        removed = np.zeros(u.size, dtype=bool)
        for k in range(attempts + 1):
            beta_s, b_s, i1 = self.solve_sets(sets, inv_a)
            u_s = self.u(beta_s, b_s)
            if k == attempts:
                break
            # the solution contradicts the sets: S₁ multipliers outside [0, C] leave S₁;
            # then samples the step would carry across the margin join S₁
            low = (sets == 1) & (beta_s < -self.box)
            high = (sets == 1) & (beta_s > self.Cv + self.box)
            if low.any() or high.any():
                sets[low] = 2
                sets[high] = 3
                removed |= low | high
                continue
            add = (((sets == 2) & (u_s > 0.0)) | ((sets == 3) & (u_s < 0.0))) & ~removed
            if not add.any():
                break
            sets[add] = 1
            inv_a[add] = self.u_floor / self.Cv[add]
        return beta_s, b_s, i1, u_s

    def step(self, sets, beta, b, u, n_corr: int, p_ref: float):
        """Step 2: a step that cannot increase P beyond ``p_ref`` (else the exact line search),
        with corrections first and without them if that fails.

        Returns (η, β_s, b_s, u_s, S₁, P(β_s, b_s), line searches made).
        """
        sets0 = sets.copy()
        eta, searches = 0.0, 0
        for attempts in (n_corr, 0) if n_corr else (0,):
            sets[:] = sets0
            beta_s, b_s, i1, u_s = self.corrected(sets, u, attempts)
            p1 = self.primal(beta_s, b_s, u_s)
            if p1 <= p_ref + 1e-13 * max(1.0, abs(p_ref)):
                eta = 1.0
            else:
                searches += 1
                dy = (beta_s - beta) * self.y
                Kdy = self.K @ dy
                A, B = float(dy @ Kdy), float((beta * self.y) @ Kdy) + self.lam * (b_s - b)
                eta = _line_search(A, B, u, u_s - u, self.C)
            if eta > 0.0:
                break
        return eta, beta_s, b_s, u_s, i1, p1, searches

    def feasible(self, beta: np.ndarray, i1: np.ndarray) -> bool:
        """The S₁ values lie in [0, C] (to rounding): β is a dual-feasible point. Without S₁
        the point is the vertex S₂ = 0, S₃ = C, which meets yᵀβ = λ only by chance (the
        system (3) that keeps it has no unknown left): feasible only when it does."""
        if i1.size == 0:
            return abs(float(self.y @ beta) - self.lam) <= _EQ_EPS * float(self.Cv.sum())
        bi = beta[i1]
        return bool(np.all(bi >= -self.box[i1]) and np.all(bi <= self.Cv[i1] + self.box[i1]))

    def reorder(self, sets: np.ndarray, u: np.ndarray) -> None:
        """Table 1 step 4: sets reordering from the current errors."""
        released = (sets == 3) & (u < 0.0)  # S₃ sample inside the margin: released to S₁
        sets[released] = 1
        sets[(sets == 1) & (u <= -self.inner_tol) & ~released] = 2  # aᵢ = 0
        sets[(sets == 2) & (u > 0.0)] = 1  # aᵢ ≠ 0

    def rule_b(self, sets: np.ndarray, beta: np.ndarray, u: np.ndarray, to_upper: float) -> None:
        """Rule b (relaxed, see ``to_upper``) and S₁ multipliers that fell below 0."""
        Cv = self.Cv
        up = (beta >= Cv) | ((beta >= (1.0 - to_upper) * Cv) & (u > self.inner_tol))
        sets[(sets == 1) & up] = 3
        sets[(sets == 1) & (beta <= 0.0)] = 2

    def polish(self, best, it: int, line_searches: int) -> SubproblemResult:
        """SMO finish from the best feasible point (IRWLS did not reach the tolerance: seen on
        rank-deficient kernels, where the null-space part of β keeps S₁ outside [0, C])."""
        K, y = self.K, self.y
        bp = best[0].copy()
        F = y - (self.g_out + K @ (bp * y))
        n_smo, b_p = _smo_finish(K, y, bp, F, self.Cv, self.inner_tol, 200 * y.size + 10_000)
        u = self.u(bp, b_p)
        viol = self.violation(u, bp)
        return SubproblemResult(
            bp, float(b_p), it, viol <= self.inner_tol, viol, line_searches, n_smo
        )


def irwls_working_set(
    K: np.ndarray,
    y: np.ndarray,
    beta: np.ndarray,
    b: float,
    g_out: np.ndarray,
    C: float | np.ndarray,
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

    Minimises ½βᵀH_WWβ + Σ_{i∈W} βᵢ(yᵢ g_outᵢ − 1) over 0 ≤ βᵢ ≤ Cᵢ, yᵀβ = λ with λ = yᵀβ⁰
    (the multipliers outside W are fixed; their contribution to every f(xᵢ), i ∈ W, is
    ``g_out``, the paper's G_in, and to the equality constraint λ, the paper's G_bin).

    Parameters: ``K`` (q, q) kernel matrix of W; ``y`` labels ±1; ``beta`` the current
    (feasible) multipliers, the warm start; ``b`` the current bias; ``g_out`` Σ_{j∉W}
    βⱼyⱼK(xⱼ, xᵢ) for every i ∈ W; ``C`` one cost or each sample's C_{y_i} (class weights);
    ``inner_tol`` the KKT tolerance on W at which the problem counts as solved;
    ``max_inner`` the limit on IRWLS iterations. ``to_upper``: sets reordering, rule b — an
    S₁ sample moves to S₃ when its new βᵢ ≥ (1 − to_upper)·Cᵢ while it still violates the
    margin (uᵢ > inner_tol); the paper's rule is βᵢ ≥ Cᵢ (``to_upper=0``), which S₁ samples
    with a positive error approach only geometrically. ``u_floor``: aᵢ = Cᵢ / max(uᵢ,
    u_floor) (default ``1e-3 * inner_tol``). ``corrections``: re-solves per iteration while
    the solution contradicts the sets (0: none); ``switch_after``: iterations after which
    they are switched off; ``nonmonotone``: the full step is taken when P does not exceed the
    largest of its last ``nonmonotone`` values (1: monotone), else the exact line search;
    ``polish``: finish by SMO when IRWLS stops short of ``inner_tol``.
    """
    y = np.asarray(y, dtype=np.float64)
    C = C if np.ndim(C) == 0 else np.asarray(C, dtype=np.float64)
    beta = np.clip(np.asarray(beta, dtype=np.float64), 0.0, C)
    u_floor = 1e-3 * inner_tol if u_floor is None else float(u_floor)
    pb = _Problem(
        np.asarray(K, dtype=np.float64), y, np.asarray(g_out, dtype=np.float64), C,
        float(y @ beta), inner_tol, u_floor,
    )  # fmt: skip
    u = pb.u(beta, b)
    best = (beta.copy(), float(b), pb.dual(beta), pb.violation(u, beta))
    if best[3] <= inner_tol:
        return SubproblemResult(beta, float(b), 0, True, best[3])
    opts = (to_upper, corrections, switch_after, nonmonotone)
    solved, best, it, line_searches = _irwls_iterations(pb, beta, b, u, best, max_inner, opts)
    if solved is not None:
        return solved
    if best[3] <= inner_tol or not polish:
        return SubproblemResult(best[0], best[1], it, best[3] <= inner_tol, best[3], line_searches)
    return pb.polish(best, it, line_searches)


def _irwls_iterations(pb: _Problem, beta: np.ndarray, b: float, u: np.ndarray, best: tuple,
                      max_inner: int, opts: tuple) -> tuple:  # fmt: skip
    """The IRWLS iterations of :func:`irwls_working_set` from the feasible (β, b): returns
    (a solved :class:`SubproblemResult` or None, the best dual-feasible point, iterations,
    line searches)."""
    to_upper, corrections, switch_after, nonmonotone = opts
    inner_tol = pb.inner_tol
    # 1 = S₁ (solved for), 2 = S₂ (β = 0), 3 = S₃ (β = C)
    sets = np.where(beta <= 0.0, 2, np.where(beta >= pb.Cv, 3, 1))
    p_hist = [pb.primal(beta, b, u)]
    plain_only = False
    line_searches = it = 0
    for it in range(1, max_inner + 1):
        check_interrupt()
        pb.reorder(sets, u)
        n_corr = 0 if (plain_only or it > switch_after) else corrections
        eta, beta_s, b_s, u_s, i1, p1, searches = pb.step(
            sets, beta, b, u, n_corr, max(p_hist[-nonmonotone:])
        )
        line_searches += searches
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
            u = pb.u(beta, b)
            p_hist.append(pb.primal(beta, b, u))
        pb.rule_b(sets, beta, u, to_upper)
        # a dual-feasible point: keep the best, stop when the KKT conditions hold
        if eta >= 1.0 and pb.feasible(beta, i1):
            bf = np.clip(beta, 0.0, pb.Cv)
            viol = pb.violation(u, bf)
            dv = pb.dual(bf)
            if dv <= best[2] + 1e-12 * abs(best[2]):  # (rounding: flat duals of singular K)
                best = (bf, float(b), dv, viol)
                if viol <= inner_tol:
                    done = SubproblemResult(bf, float(b), it, True, viol, line_searches)
                    return done, best, it, line_searches
            elif viol <= inner_tol:
                break  # solved, but an earlier point was lower: finish from that one
    return None, best, it, line_searches
