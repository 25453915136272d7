"""The working set W = I_s ∪ I₀′ ∪ I_c′ and the active-set (minor) iterations on it (§2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...kernels.parallel import thread_share
from ..dual import WorkingRows, check_interrupt, row_costs
from ._numba import sprint as sp
from ._numba.sprint import ratio_test, take_step
from .cholesky import ActiveFactor
from .columns import KernelColumns
from .params import CHECK_EVERY, FULL_FLUSH_EVERY, REFACTOR_TOL

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# the reduced problem over the working set (minor iterations)
# ------------------------------------------------------------------------------------------
S_ZERO, S_FREE, S_UPPER, S_OUT = 0, 1, 2, -1


@dataclass
class Counters:
    iterations: int = 0
    entered: int = 0
    left: int = 0
    infinite_steps: int = 0
    degenerate_steps: int = 0
    pricings: int = 0
    full_flushes: int = 0
    refactorisations: int = 0
    probe_checks: int = 0
    shrunk: int = 0
    max_dependent: int = 0
    memory_stops: int = 0
    peak_bytes: int = 0
    extra: dict = field(default_factory=dict)


class WorkingSet:
    """Rows W = I_s ∪ I₀′ ∪ I_c′ in memory and the active-set iterations on them (§2).

    Parameters
    ----------
    rows : WorkingRows
        The rows (with α, which this object updates in place).
    G : ndarray
        Gradient (Qα − e) of every working row at the current α.
    status : ndarray of int8
        S_ZERO / S_FREE / S_UPPER per row (S_FREE rows are the factor's members).
    columns : KernelColumns or LinearColumns
    factor : ActiveFactor
        Factor of Q_ss for the free rows (keys = positions in ``rows``).
    C, tol : float
    beta : float
        Current multiplier (used when I_s is empty at the first pricing).
    counters : Counters
    shrink_after : int or None
        Drop a row from pricing after this many consecutive non-negative reduced costs.
    seed : int
        Seed of the probe vectors.
    costs : (C_neg, C_pos), optional
        Class weights: row i's upper bound is C_{y_i} instead of ``C``.
    """

    def __init__(
        self,
        rows: WorkingRows,
        G: np.ndarray,
        status: np.ndarray,
        columns: Any,
        factor: ActiveFactor,
        C: float,
        tol: float,
        beta: float,
        counters: Counters,
        shrink_after: int | None = None,
        seed: int = 0,
        costs: tuple[float, float] | None = None,
    ) -> None:
        self.rows = rows
        self.y = rows.y
        self.alpha = rows.alpha
        self.Gbase = np.array(G, dtype=np.float64)
        self.G = self.Gbase.copy()
        self.status = status
        self.cols = columns
        self.factor = factor
        self.C = float(C) if costs is None else max(float(costs[0]), float(costs[1]))
        self.costs = costs
        self.Cv = row_costs(self.y, float(C), costs)  # each working row's upper bound
        self.tol = float(tol)
        self.beta = float(beta)
        self.c = counters
        self.shrink_after = shrink_after
        self.nonneg = np.zeros(rows.n, dtype=np.int32) if shrink_after else None
        self.seed = seed
        self.last_violation = np.inf
        self.alpha0 = self.alpha.copy()
        self._dropped: list[tuple[WorkingRows, np.ndarray]] = []
        self._since_full = 0
        self._entered = -1
        self._last_move = counters.iterations
        self.cycling = False
        self.memory_full = False
        self.max_bytes = 0

    # -- helpers ----------------------------------------------------------------------------
    def _col_fn(self, key: int) -> np.ndarray:
        """Q column of ``key``, at least over the factor's members and ``key`` itself."""
        return self.cols.col(key, np.append(self.factor.keys(), key))

    def refactor(self) -> None:
        """Rebuild the factor of Q_ss from the stored columns (§2.2 accuracy safeguard)."""
        keys = self.factor.keys()
        self.factor.refactor(keys, self.y[keys], self.cols.qss(keys), g=self.G)
        self.c.refactorisations += 1

    def _probe(self) -> float:
        self.c.probe_checks += 1
        return self.factor.probe_error(self.cols.qss_matvec, seed=self.seed + self.c.probe_checks)

    def _bound_rows(self) -> np.ndarray:
        st = self.status
        return np.flatnonzero((st == S_ZERO) | (st == S_UPPER))

    def flush_full(self) -> None:
        """Exact gradient of every working row; r2 of the factor recomputed from it."""
        self.cols.full(self.alpha, self.Gbase)
        self.G[:] = self.Gbase
        if self.factor.n:
            self.factor.set_gradient(self.G)
        self._since_full = 0
        self.c.full_flushes += 1

    def flush_partial(self) -> None:
        """Exact gradient of the bound working rows (the ones priced)."""
        self.cols.partial(self._bound_rows(), self.alpha, self.Gbase, self.G)

    # -- Step 1 -----------------------------------------------------------------------------
    def step1(self) -> int:
        """Steps along d until the reduced optimum is reached; returns the bounds hit."""
        hits = 0
        C = self.C
        f = self.factor
        while f.n > 0:
            if f.nd > self.c.max_dependent:
                self.c.max_dependent = f.nd
            finite, db, dd, beta_new = f.direction(self.G)
            keys = np.concatenate([f.bkeys[: f.nb], f.dkeys[: f.nd]])
            d = np.concatenate([db, dd])
            a = self.alpha[keys]
            dmax = float(np.abs(d).max()) if d.size else 0.0
            if not finite and self._entered >= 0:
                # a flat infinite direction (gᵀd = 0) may be taken either way: move the
                # variable that just entered inwards, or it would leave at once and cycle
                gd = float(self.G[keys] @ d)
                if abs(gd) <= 1e-12 * dmax * (1.0 + float(np.abs(self.G[keys]).max())):
                    pos = np.flatnonzero(keys == self._entered)
                    if pos.size:
                        e = self._entered
                        inward = 1.0 if self.alpha[e] < 0.5 * self.Cv[e] else -1.0
                        if d[pos[0]] * inward < 0:
                            d = -d
            # components below rounding level (relative to the step and to C) do not block
            t_max, j = ratio_test(d, a, self.Cv[keys], max(1e-13 * dmax, 1e-14 * C))
            if finite:
                if t_max >= 1.0:
                    t = 1.0
                    j = -1
                else:
                    t = t_max
            else:
                self.c.infinite_steps += 1
                if not np.isfinite(t_max):
                    # numerically zero direction: nothing moves; drop a dependent index
                    t = 0.0
                    j = f.nb if f.nd else int(np.argmax(np.abs(d)))
                else:
                    t = t_max
            if t > 0.0:
                self._last_move = self.c.iterations
                # α_s += t d; finite step: exact gradient change Q_ss d = β y_s − g_s
                take_step(keys, d, t, self.Cv, finite, beta_new, self.alpha, self.G, self.y)
                if finite:
                    f.advance(t, beta_new)
            else:
                self.c.degenerate_steps += 1
            if finite:
                self.beta = beta_new
            self._entered = -1
            if j < 0:
                return hits
            kj = int(keys[j])
            to_upper = d[j] > 0
            self.alpha[kj] = self.Cv[kj] if to_upper else 0.0
            self._leave(kj, S_UPPER if to_upper else S_ZERO)
            hits += 1
        return hits

    def _leave(self, key: int, status: int) -> None:
        self.factor.remove(key, self._col_fn, g=self.G)
        self.cols.release(key)
        self.status[key] = status
        self.c.left += 1
        self.c.iterations += 1

    def nbytes(self) -> int:
        """Memory of the working set: rows, gradients, Q columns and the factor."""
        dt = getattr(self.cols, "Dt", None)
        return int(
            self.rows.nbytes
            + 3 * self.G.nbytes
            + self.cols.nbytes()
            + (0 if dt is None else dt.nbytes)
            + self.factor.nbytes()
        )

    def _enter(self, key: int) -> None:
        self.cols.add(key, float(self.alpha[key]))
        self.factor.append(key, float(self.y[key]), self._col_fn(key), g=float(self.G[key]))
        self.status[key] = S_FREE
        self._entered = key
        self.c.entered += 1
        self.c.iterations += 1

    # -- Step 2 -----------------------------------------------------------------------------
    def _beta_interval(self) -> float:
        G, y, st = self.G, self.y, self.status
        at0 = st == S_ZERO
        atC = st == S_UPPER
        lo_c = np.concatenate([-G[at0 & (y < 0)], G[atC & (y > 0)]])
        hi_c = np.concatenate([G[at0 & (y > 0)], -G[atC & (y < 0)]])
        lo = float(lo_c.max()) if lo_c.size else -np.inf
        hi = float(hi_c.min()) if hi_c.size else np.inf
        if np.isfinite(lo) and np.isfinite(hi):
            return 0.5 * (lo + hi)
        if np.isfinite(lo):
            return lo
        if np.isfinite(hi):
            return hi
        return self.beta

    def price(self) -> tuple[int, float]:
        """Reduced costs of the bound working rows; (most negative row, its value)."""
        self.c.pricings += 1
        if self.factor.n == 0:
            self.beta = self._beta_interval()
        rho = self.G - self.beta * self.y
        st = self.status
        rc = np.where(st == S_ZERO, rho, np.where(st == S_UPPER, -rho, np.inf))
        if self.nonneg is not None:
            assert self.shrink_after is not None  # nonneg is kept only with shrinking
            bound = (st == S_ZERO) | (st == S_UPPER)
            ok = bound & (rc >= 0)
            self.nonneg[ok] += 1
            self.nonneg[bound & ~ok] = 0
            drop = ok & (self.nonneg >= self.shrink_after)
            if drop.any():
                st[drop] = S_OUT
                rc[drop] = np.inf
                self.c.shrunk += int(drop.sum())
        i = int(np.argmin(rc))
        return i, float(rc[i])

    def residual(self) -> float:
        """max |Gᵢ − βyᵢ| over I_s (zero at the reduced optimum)."""
        keys = self.factor.keys()
        if keys.size == 0:
            return 0.0
        return float(np.abs(self.G[keys] - self.beta * self.y[keys]).max())

    # -- the minor loop ---------------------------------------------------------------------
    def run(self, max_iter: int, tol_enter: float) -> bool:
        """Active-set iterations until no working row has reduced cost < −tol_enter.

        Returns True when the reduced problem over W is optimal, False at ``max_iter``.
        Kernel columns with sprint pricing run the compiled loop (:mod:`._numba.sprint`); the
        same iterations.
        """
        if isinstance(self.cols, KernelColumns) and self.nonneg is None:
            return self._run_compiled(max_iter, tol_enter)
        start = self.c.iterations
        start_bytes = self.nbytes()
        if self.factor.n:
            self.factor.set_gradient(self.G)
        repaired = False
        while self.c.iterations - start < max_iter:
            check_interrupt()
            self.step1()
            self._since_full += 1
            if self._since_full >= FULL_FLUSH_EVERY or self.cols.n_released() > max(
                16, self.cols.p // 4
            ):
                self.flush_full()
                res = self.residual()
                lost = res > max(1e-9, 1e-4 * self.tol) * (1.0 + float(np.abs(self.G).max()))
                if not lost and self.factor.updates >= CHECK_EVERY:
                    lost = self._probe() > REFACTOR_TOL
                if lost and not repaired:
                    # the updated factor has lost accuracy: rebuild it and re-solve (4)
                    log.debug("active-set: refactorising (residual %.3g)", res)
                    self.refactor()
                    repaired = True
                    continue
            else:
                self.flush_partial()
            repaired = False
            i, v = self.price()
            if self.nonneg is not None:
                n_out = int((self.status == S_OUT).sum())
                if n_out > max(256, self.rows.n // 3):
                    self.compact()
                    i, v = self._argmin_rc()
            self.last_violation = max(0.0, -v)
            if v >= -tol_enter:
                if self._since_full > 0:
                    # confirm optimality with exact gradients before handing back
                    self.flush_full()
                    if self.residual() > 1e-6 * (1.0 + float(np.abs(self.G).max())):
                        if not repaired:
                            # Step 1 cannot reach the reduced optimum with a factor that
                            # lost accuracy (it would loop here): rebuild it first
                            self.refactor()
                            repaired = True
                        continue
                    i, v = self._argmin_rc()
                    if v < -tol_enter:
                        self._enter(i)
                        continue
                return True
            if (
                self.max_bytes
                and self.c.iterations - start > 0
                and self.nbytes() > max(self.max_bytes, 1.5 * start_bytes)
            ):
                # §4.2: the working set outgrew --cache-mb (I_s grew); end this major
                # iteration, the next one takes fewer candidate rows. (A budget too small
                # for even the smallest working set is exceeded by at most half per major.)
                self.memory_full = True
                self.c.memory_stops += 1
                return True
            if self.c.iterations - self._last_move > 2 * self.rows.n + 100:
                # only zero-length (degenerate) steps for too long: stop this major iteration
                log.warning(
                    "active-set: %d degenerate steps in a row; leaving the minor loop",
                    self.c.iterations - self._last_move,
                )
                self.cycling = True
                return True
            self._enter(i)
        return False

    # -- the compiled minor loop (kernel columns, sprint pricing) ---------------------------
    def _run_compiled(self, max_iter: int, tol_enter: float) -> bool:
        """:meth:`run` with the iterations in :func:`._numba.sprint.sprint_loop`; Python handles
        the full flushes (probe, refactorisation), the final confirmation, array growth and
        interrupts, as :meth:`run` does."""
        start = self.c.iterations
        start_bytes = self.nbytes()
        if self.factor.n:
            self.factor.set_gradient(self.G)
        st = np.zeros(10, dtype=np.int64)
        st[sp.ST_START], st[sp.ST_MAX_ITER] = start, max_iter
        st[sp.ST_MEM_CHECK] = int(bool(self.max_bytes))
        fl = np.zeros(7)
        fl[sp.FL_C], fl[sp.FL_TOL_ENTER] = self.C, tol_enter
        fl[sp.FL_DEP_TOL] = self.factor.dep_tol
        fl[sp.FL_MEM_LIMIT] = max(self.max_bytes, 1.5 * start_bytes)
        phase = sp.PH_TOP
        while True:
            check_interrupt()
            code = self._sprint(phase, st, fl)
            phase = sp.PH_TOP
            if code == sp.R_POLL:
                continue
            if code == sp.R_MAXITER:
                return False
            if code == sp.R_FLUSH:
                self.flush_full()
                res = self.residual()
                lost = res > max(1e-9, 1e-4 * self.tol) * (1.0 + float(np.abs(self.G).max()))
                if not lost and self.factor.updates >= CHECK_EVERY:
                    lost = self._probe() > REFACTOR_TOL
                if lost and not st[sp.ST_REPAIRED]:
                    # the updated factor has lost accuracy: rebuild it and re-solve (4)
                    log.debug("active-set: refactorising (residual %.3g)", res)
                    self.refactor()
                    st[sp.ST_REPAIRED] = 1
                    continue
                st[sp.ST_REPAIRED] = 0
                phase = sp.PH_PRICE
                continue
            if code == sp.R_CONFIRM:
                # confirm optimality with exact gradients before handing back
                self.flush_full()
                if self.residual() > 1e-6 * (1.0 + float(np.abs(self.G).max())):
                    if not st[sp.ST_REPAIRED]:
                        self.refactor()  # a factor that lost accuracy (see run)
                        st[sp.ST_REPAIRED] = 1
                    continue
                i, v = self._argmin_rc()
                if v < -tol_enter:
                    self._enter(i)
                    continue
                return True
            if code == sp.R_OPTIMAL:
                return True
            if code == sp.R_MEMORY:
                # §4.2: the working set outgrew --cache-mb (see run)
                self.memory_full = True
                self.c.memory_stops += 1
                return True
            if code == sp.R_CYCLING:
                log.warning(
                    "active-set: %d degenerate steps in a row; leaving the minor loop",
                    self.c.iterations - self._last_move,
                )
                self.cycling = True
                return True
            if code == sp.R_GROW:
                self._grow_for(int(st[sp.ST_PENDING]))
                self._enter(int(st[sp.ST_PENDING]))
                continue
            raise AssertionError(f"sprint_loop returned {code}")

    def _grow_for(self, key: int) -> None:
        """Room for ``key`` to enter: a Q column slot, a factor row for every member."""
        f, cols = self.factor, self.cols
        while f.n + 1 > f.R.shape[0]:
            f._grow_basis()
        if f.nd + 1 > f.Lam.shape[1]:
            f._grow_dependent()
        if cols.slot[key] < 0 and cols.p == cols.Qt.shape[1]:
            cols._grow(cols.p + 1)

    def _sprint(self, phase: int, st: np.ndarray, fl: np.ndarray) -> int:
        """One call of :func:`._numba.sprint.sprint_loop` with this object's state packed into and
        unpacked from the arrays it takes."""
        f, cols, c = self.factor, self.cols, self.c
        st[sp.ST_SINCE_FULL], st[sp.ST_ENTERED] = self._since_full, self._entered
        st[sp.ST_LAST_MOVE], st[sp.ST_P], st[sp.ST_EVALS] = self._last_move, cols.p, 0
        fl[sp.FL_BETA], fl[sp.FL_NBYTES] = self.beta, self.nbytes()
        cnt = np.array([getattr(c, k) for k in sp.COUNTER_FIELDS], dtype=np.int64)
        fs = f.scalars()
        n, cap, dcap, qcap = self.rows.n, f.R.shape[0], f.Lam.shape[1], cols.Qt.shape[1]
        work = (
            np.empty(cap), np.empty(cap, dtype=np.int64), np.empty(cap), np.empty(cap),
            np.empty(dcap, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(qcap),
            cols.tmp,
        )  # fmt: skip
        has_dt = cols.Dt is not None
        X = (
            cols.ip, cols.ix, cols.data, cols.sq,
            cols.Dt if has_dt else np.zeros((1, 1)), has_dt, cols.work,
        )  # fmt: skip
        K = (cols.Qt, cols.slot, cols.key, cols.aflush, cols.released)
        S = (self.alpha, self.G, self.Gbase, self.y, self.Cv, self.status)
        # the partial flushes' threads: this thread's share (``$OOC_SVM_KERNEL_THREADS`` caps it)
        with thread_share():
            code = sp.sprint_loop(
                phase, f.arrays(), fs, K, X, cols.kp.args(), S, st, cnt, fl, work
            )  # fmt: skip
        f.set_scalars(fs)
        for k, v in zip(sp.COUNTER_FIELDS, cnt.tolist(), strict=True):
            setattr(c, k, v)
        self._since_full, self._entered = int(st[sp.ST_SINCE_FULL]), int(st[sp.ST_ENTERED])
        self._last_move, cols.p = int(st[sp.ST_LAST_MOVE]), int(st[sp.ST_P])
        cols.kernel_evals += int(st[sp.ST_EVALS])
        self.beta, self.last_violation = float(fl[sp.FL_BETA]), float(fl[sp.FL_LAST_VIOLATION])
        return int(code)

    def _argmin_rc(self) -> tuple[int, float]:
        st = self.status
        rho = self.G - self.beta * self.y
        rc = np.where(st == S_ZERO, rho, np.where(st == S_UPPER, -rho, np.inf))
        i = int(np.argmin(rc))
        return i, float(rc[i])

    def compact(self) -> None:
        """Drop the shrunk rows from memory (their α changes are remembered)."""
        keep = self.status != S_OUT
        out = np.flatnonzero(~keep)
        if out.size == 0:
            return
        moved = out[self.alpha[out] != self.alpha0[out]]
        if moved.size:
            self._dropped.append((self.rows.take(moved), self.alpha0[moved].copy()))
        self.flush_full()
        kept = np.flatnonzero(keep)
        mapping = np.full(self.rows.n, -1, dtype=np.int64)
        mapping[kept] = np.arange(kept.size)
        self.rows = self.rows.take(kept)
        self.y = self.rows.y
        self.alpha = self.rows.alpha
        self.Cv = self.Cv[kept]
        self.alpha0 = self.alpha0[kept]
        self.Gbase = self.Gbase[kept]
        self.G = self.G[kept]
        self.status = self.status[kept]
        if self.nonneg is not None:
            self.nonneg = self.nonneg[kept]
        self.factor.remap(mapping)
        self.cols = self.cols.compacted(self.rows, kept, mapping)

    def changes(self) -> tuple[WorkingRows, np.ndarray]:
        """Rows whose α changed during this major iteration (new α) and their old α."""
        ch = np.flatnonzero(self.alpha != self.alpha0)
        parts = [r for r, _ in self._dropped] + [self.rows.take(ch)]
        old = np.concatenate([a for _, a in self._dropped] + [self.alpha0[ch]])
        return WorkingRows.concat(parts), old
