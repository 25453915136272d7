"""Small dense QPs shared by the solvers: the simplex-with-slack QP of cutting-plane methods.

Problem solved by :func:`solve_simplex_qp`::

    minimise    f(x) = ½ xᵀ Q x − bᵀ x
    subject to  x ≥ 0,  Σᵢ xᵢ ≤ s            (Q symmetric positive semi-definite, m × m)

This is (the negative of) the Wolfe dual OP3 of Joachims (2006) over a working set of cutting
planes: ``Q`` is the Gram matrix of the constraint vectors, ``b`` their offsets and ``s`` the
regularisation constant. The inequality is turned into an equality with a slack coordinate
(``Q`` row and column of zeros, ``b = 0``), so the feasible set is a simplex.

Method: a primal active-set method (Nocedal & Wright, Numerical Optimization, Alg. 16.3),
warm-started from the previous solution: on the free set the equality-constrained QP is solved
exactly by a dense KKT solve; a singular, inconsistent KKT system (dependent constraint
vectors — the Gram matrix of many cutting planes in few dimensions is singular) yields a
direction of linear descent along which the method steps until a bound blocks. Should the
active set keep changing beyond ``max_steps``, sequential minimal optimisation on the simplex
(pairs chosen with second-order information, Fan, Chen & Lin 2005) finishes. The result is
certified by the Frank–Wolfe gap ``xᵀ∇f(x) − s·min(0, minᵢ ∇ᵢf(x)) ≥ f(x) − f*``.

Stopping rule: on the free set the KKT system is solved exactly; no bound variable has a
gradient below the common free gradient by more than ``tol`` (relative to the scale of ``Q``
and ``b``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from ._numba.cuts import matvec, vdot
from ._numba.qp import _lu_solve, _smo_simplex


@dataclass
class QPResult:
    """Solution of a simplex QP.

    Attributes
    ----------
    x : ndarray (m,)
        Minimiser (without the slack coordinate).
    slack : float
        ``s − Σ x``.
    objective : float
        ``½ xᵀQx − bᵀx``.
    gap : float
        Frank–Wolfe gap, an upper bound on ``objective − optimum``.
    iterations : int
        Active-set changes (plus SMO steps when the fallback ran).
    converged : bool
        Whether the active-set method reached its KKT tolerance (else SMO finished).
    """

    x: np.ndarray
    slack: float
    objective: float
    gap: float
    iterations: int
    converged: bool
    #: the SMO fallback used up its whole step budget without reaching its tolerance
    exhausted: bool = False


def _augment(Q: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = Q.shape[0]
    Qa = np.zeros((m + 1, m + 1))
    Qa[:m, :m] = Q
    ba = np.zeros(m + 1)
    ba[:m] = b
    return Qa, ba


def _fw_gap(xa: np.ndarray, ga: np.ndarray, s: float) -> float:
    return float(vdot(xa, ga) - s * ga.min())


#: one controller per process, made on first use (it looks up the loaded BLAS libraries once)
_BLAS: list[ThreadpoolController] = []


def _one_blas_thread():
    """A context in which BLAS / LAPACK use one thread.

    The SVDs of :func:`_kkt_step` are of (planes + 1)² matrices (tens to a few hundred rows):
    OpenBLAS splits them over its threads anyway, and on a busy 2-core machine a 120 × 120 SVD
    took 40 ms of wall time on two threads against 3.4 ms on one. Entering the context costs
    about 8 µs.
    """
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def _kkt_step(Qa: np.ndarray, F: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, bool]:
    """Newton step of the equality-constrained QP on the free set ``F``.

    Solves ``[Q_FF 1; 1ᵀ 0] [p; ν] = [−g_F; 0]``. When the KKT matrix is singular and the
    system inconsistent, the objective decreases linearly along a null direction of ``Q_FF``
    (``Q_FF p = 0``, ``1ᵀp = 0``, ``g_Fᵀp < 0``): that direction is returned with ``True``
    (the caller steps until a bound blocks, which the compact feasible set guarantees).
    """
    k = F.size
    K = np.empty((k + 1, k + 1))
    K[:k, :k] = Qa[np.ix_(F, F)]
    K[:k, k] = 1.0
    K[k, :k] = 1.0
    K[k, k] = 0.0
    rhs = np.zeros(k + 1)
    rhs[:k] = -g[F]
    rscale = max(1.0, float(np.abs(rhs).max()))
    sol, ok = _lu_solve(K, rhs)
    if ok and np.all(np.isfinite(sol)) and np.abs(matvec(K, sol) - rhs).max() <= 1e-10 * rscale:
        return sol[:k], False
    with _one_blas_thread():
        U, S, Vt = np.linalg.svd(K)
    null = S <= 1e-12 * S[0] * (k + 1)
    if null.any():
        N = Vt[null][:, :k]
        d = -(N.T @ (N @ g[F]))
        if d @ g[F] < -1e-13 * rscale * max(1.0, float(np.abs(d).max())):
            return d, True
    inv = np.where(null, 0.0, 1.0 / np.where(null, 1.0, S))
    sol = Vt.T @ (inv * (U.T @ rhs))
    return sol[:k], False


#: the active-set method hands over to SMO when its objective has not decreased (beyond
#: round-off) for this many steps, or when its KKT solves have cost this many (free set
#: size + 1)³ units in all: its work is bounded by counts, never by seconds (one QP of a9a
#: at C = 1e9 took 350 s of 5000 dense solves before)
ACTIVE_SET_STALL_STEPS = 50
ACTIVE_SET_MAX_WORK = 2e9


def _active_set(Qa, ba, xa, s, atol, max_steps, floor: float = 0.0):
    """Primal active-set method on the simplex {xa ≥ 0, Σ xa = s}; modifies ``xa``.

    Returns (steps, converged). Gives up (not converged) after ``max_steps`` steps,
    after ``ACTIVE_SET_STALL_STEPS`` steps without a decrease of the objective by more than
    ``s·floor``, or once its solves have cost ``ACTIVE_SET_MAX_WORK``.
    """
    m1 = xa.shape[0]
    F = np.flatnonzero(xa > 0.0)
    at_eqp_optimum = False
    best = np.inf
    since_best = 0
    work = 0.0
    for step in range(max_steps):
        g = matvec(Qa, xa) - ba
        f = 0.5 * float(vdot(xa, g)) - 0.5 * float(vdot(ba, xa))
        if f < best - s * floor:
            best, since_best = f, 0
        else:
            since_best += 1
            if since_best > ACTIVE_SET_STALL_STEPS:
                return step, False
        if work > ACTIVE_SET_MAX_WORK:
            return step, False
        work += float(F.size + 1) ** 3
        if not at_eqp_optimum:
            try:
                p, unbounded = _kkt_step(Qa, F, g)
            except np.linalg.LinAlgError:  # (SVD did not converge): SMO finishes
                return step, False
            if unbounded or np.abs(p).max() > 1e-15 * s:
                neg = p < 0.0
                alpha = np.inf if unbounded else 1.0
                blocking = -1
                if neg.any():
                    ratios = -xa[F][neg] / p[neg]
                    a = int(ratios.argmin())
                    if ratios[a] < alpha:
                        alpha = float(ratios[a])
                        blocking = int(F[neg][a])
                if not np.isfinite(alpha):  # pragma: no cover - impossible on a simplex
                    return step, False
                xa[F] += alpha * p
                if blocking >= 0:
                    xa[blocking] = 0.0
                np.maximum(xa, 0.0, out=xa)
                if blocking >= 0:
                    F = np.flatnonzero(xa > 0.0)
                at_eqp_optimum = blocking < 0
                continue
        # optimal on the free set: price the bound variables
        mu = float(g[F].mean()) if F.size else 0.0
        outside = np.ones(m1, dtype=bool)
        outside[F] = False
        if not outside.any():
            return step, True
        go = np.where(outside, g, np.inf)
        j = int(go.argmin())
        if go[j] >= mu - atol:
            return step, True
        F = np.append(F, j)
        at_eqp_optimum = False
    return max_steps, False


#: SMO steps per numba call: Python regains control (Ctrl-C) between calls; a multiple of
#: the 2000-step gradient refresh, so the chunked run takes exactly the unchunked steps
SMO_CHUNK = 100_000


def _smo_chunked(Qa, ba, xa, ga, tol: float, max_iter: int) -> int:
    """:func:`_smo_simplex` in chunks of ``SMO_CHUNK`` steps (interruptible); returns steps."""
    done = 0
    while done < max_iter:
        want = min(SMO_CHUNK, max_iter - done)
        it, _ = _smo_simplex(Qa, ba, xa, ga, tol, want)
        done += int(it)
        if it < want:
            break
    return done


def _objective_aug(Qa: np.ndarray, ba: np.ndarray, xa: np.ndarray) -> float:
    return float(0.5 * vdot(xa, matvec(Qa, xa)) - vdot(ba, xa))


def _no_worse(Qa, ba, xa, f_start: float, s: float, floor: float) -> bool:
    """Whether ``xa`` is finite and not above the warm start's objective (beyond round-off)."""
    if not np.all(np.isfinite(xa)):
        return False
    return _objective_aug(Qa, ba, xa) <= f_start + s * floor


def _warm_start(Q, b, s: float, x0):
    """Checked float64 ``Q``, ``b``, the augmented ``Qa``, ``ba`` and the feasible start ``xa``
    (``x0`` clipped to x ≥ 0 and scaled down to Σx ≤ s; the slack coordinate takes the rest)."""
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    m = b.shape[0]
    if Q.shape != (m, m):
        raise ValueError(f"Q has shape {Q.shape}, expected ({m}, {m})")
    if not s > 0:
        raise ValueError("s must be positive")
    Qa, ba = _augment(Q, b)
    xa = np.zeros(m + 1)
    xa[m] = s
    if x0 is not None and m:
        x0 = np.maximum(np.asarray(x0, dtype=np.float64)[:m], 0.0)
        tot = x0.sum()
        if tot > s:
            x0 = x0 * (s / tot)
            tot = s
        xa[:m] = x0
        xa[m] = s - tot
    return Q, b, Qa, ba, xa


def smo_simplex_qp(
    Q: np.ndarray, b: np.ndarray, s: float, x0: np.ndarray | None, tol: float
) -> np.ndarray:
    """Minimise ``½ xᵀQx − bᵀx`` over ``x ≥ 0, Σx ≤ s`` *loosely*: SMO from the warm start
    ``x0`` until the largest KKT violation (max gradient over the support minus min
    gradient, slack coordinate included) is at most ``tol`` (absolute, gradient units).

    This is SVMperf 3.00's inner QP (SVMlight's decomposition stopped at ``epsilon_crit``):
    early in a cutting-plane run ``tol`` is large and the solution only a few pair steps away
    from the warm start. Returns ``x`` (without the slack coordinate).
    """
    Q, b, Qa, ba, xa = _warm_start(Q, b, s, x0)
    m = b.shape[0]
    if m:
        ga = matvec(Qa, xa) - ba
        _smo_chunked(Qa, ba, xa, ga, float(tol), 10_000_000)
    return xa[:m].copy()


def qp_objective(Q: np.ndarray, b: np.ndarray, x: np.ndarray) -> float:
    """``½ xᵀQx − bᵀx``."""
    return float(0.5 * x @ (Q @ x) - b @ x)


def solve_simplex_qp(
    Q: np.ndarray,
    b: np.ndarray,
    s: float = 1.0,
    x0: np.ndarray | None = None,
    tol: float = 1e-12,
    atol: float | None = None,
    max_steps: int = 5000,
    max_smo_iter: int = 2_000_000,
) -> QPResult:
    """Minimise ``½ xᵀQx − bᵀx`` over ``x ≥ 0, Σx ≤ s``.

    Parameters
    ----------
    Q : ndarray (m, m)
        Symmetric positive semi-definite matrix.
    b : ndarray (m,)
    s : float
        Bound on the sum of ``x`` (> 0).
    x0 : ndarray (m,), optional
        Warm start; clipped to the feasible set (scaled down if its sum exceeds ``s``).
    tol : float
        KKT tolerance relative to ``max(1, max|b|, s·max diag Q)``.
    atol : float, optional
        Absolute KKT (pricing) tolerance in gradient units; overrides ``tol``. On return the
        Frank–Wolfe gap is then about ``s·atol`` or less.
    max_steps : int
        Limit on active-set changes; beyond it SMO finishes the job.
    max_smo_iter : int
        Limit on SMO steps of the fallback.

    Returns
    -------
    QPResult
    """
    Q, b, Qa, ba, xa = _warm_start(Q, b, s, x0)
    m = b.shape[0]
    if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(b)) and np.isfinite(s)):
        raise ValueError(
            "the cutting-plane QP has non-finite entries (overflow: feature values, C or "
            "class weights too large)"
        )
    scale = max(
        1.0,
        float(np.abs(b).max()) if m else 0.0,
        s * float(np.diag(Q).max()) if m else 0.0,
    )
    atol = tol * scale if atol is None else float(atol)
    start = xa.copy()
    f_start = _objective_aug(Qa, ba, start)
    # round-off level of a gradient entry: with a huge ``s`` (extreme C) the gradient
    # Qx − b is a difference of large terms and cannot be resolved below this
    floor = 64.0 * np.finfo(np.float64).eps * (s * (float(np.abs(Q).max()) if m else 0.0) + 1.0)
    steps, ok = _active_set(Qa, ba, xa, s, atol, max_steps, floor)
    if ok and not _no_worse(Qa, ba, xa, f_start, s, floor):
        ok = False  # breakdown: the active-set method left the warm start uphill
    ga = matvec(Qa, xa) - ba
    exhausted = False
    if not ok:
        if not _no_worse(Qa, ba, xa, f_start, s, floor):
            xa = start.copy()
            ga = matvec(Qa, xa) - ba
        smo_steps = _smo_chunked(Qa, ba, xa, ga, max(atol, floor), max_smo_iter)
        steps += smo_steps
        exhausted = smo_steps >= max_smo_iter
        if not _no_worse(Qa, ba, xa, f_start, s, floor):  # pragma: no cover - SMO descends
            xa = start
        ga = matvec(Qa, xa) - ba
    x = xa[:m].copy()
    return QPResult(
        x=x,
        slack=float(max(s - x.sum(), 0.0)),
        objective=qp_objective(Q, b, x),
        gap=max(_fw_gap(xa, ga, s), 0.0),
        iterations=int(steps),
        converged=bool(ok),
        exhausted=bool(exhausted),
    )
