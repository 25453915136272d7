"""Updatable Cholesky factor of the free-variable block Q_ss (Scheinberg 2006, §2.1–2.2).

The active-set solver keeps the free set I_s and needs, at every step, the solution of the
equality-constrained reduced problem (4) through the Cholesky factor of Q_ss and the Schur
complement for the multiplier β (system (5)). I_s changes by one index per step, so the factor
is *updated*, never recomputed:

- **append** a row / column in O(n_s²): one forward substitution ``l = L⁻¹ q``, new pivot
  ``δ² = q_kk − ‖l‖²`` (§2.2, "Increasing I_s");
- **delete** a row / column in O(n_s²) by Givens rotations that restore the triangular shape
  (§2.2, "Decreasing I_s").

Q_ss may be singular (two identical points with opposite labels, a linear kernel with more
free variables than features, a warm start). The factor therefore splits I_s into a *basis*
B, whose block Q_BB = L Lᵀ is positive definite, and a few *dependent* indices D whose pivot
was (numerically) zero; for each j ∈ D it keeps ``l_j = L⁻¹ Q_Bj`` so that
Q_ss = F Fᵀ with F = [L; Λᵀ] (the "permute the dependent rows to the end" form of §2.1).
:meth:`ActiveFactor.direction` then solves system (5) when it has a unique solution (D = ∅,
or |D| = 1 with y not in the range, Case 1(a)) and otherwise returns an *infinite descent
direction* with Q_ss d = 0 and y_sᵀd = 0 (Cases 1(b), 2(a), 2(b) and, with more dependent
indices as after a warm start, Case 3 using the first two of them).

Deleting a basis index can make a dependent index independent again; that index is then
re-appended to the basis (its residual pivot is tracked exactly by the rotations).

The rotations and substitutions are numba kernels on the raw arrays
(:mod:`._numba.cholesky`). ``R = Lᵀ`` is stored row-major so every inner loop walks
contiguous memory. Accuracy is monitored with a probe
vector (:meth:`ActiveFactor.probe_error`: ‖F Fᵀ v − Q_ss v‖ / (‖v‖ max diag Q_ss)) and the
factor is rebuilt from Q_ss with LAPACK's pivoted Cholesky (``dpstrf``) when the updates
have lost accuracy (:meth:`ActiveFactor.refactor`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._numba.cholesky import (
    FS_NB,
    FS_ND,
    FS_PROMOTIONS,
    FS_R2,
    FS_UPDATES,
    factor_advance,
    factor_append,
    factor_delete,
    factor_direction,
    factor_matvec,
    factor_promotable,
    factor_set_gradient,
    forward_solve,
)

#: Pivot δ² ≤ DEP_TOL · q_kk marks a column as linearly dependent on the basis.
DEP_TOL = 1e-10


# ------------------------------------------------------------------------------------------
class ActiveFactor:
    """Cholesky factor of Q_ss for a changing free set, with singular (dependent) columns.

    Members are identified by integer *keys* chosen by the caller (e.g. positions in its
    working set); vectors passed in (columns of Q, gradients) are indexed by key.

    Besides L it keeps r1 = L⁻¹y_B and r2 = L⁻¹g_B (the paper's r₁, r₂ of §2.1, updated
    with the factor as Frangioni's Remark 1 suggests), so a step of the reduced problem
    costs one back substitution. r2 follows the gradient g only through :meth:`append` /
    :meth:`remove` with ``g`` given, :meth:`advance` (the exact gradient change of a Newton
    step) and :meth:`set_gradient`; any other change marks it stale and
    :meth:`direction` recomputes it.

    Parameters
    ----------
    capacity : int
        Initial number of basis rows allocated (grows by half when full).
    dep_tol : float
        Relative pivot below which an appended column counts as dependent.
    """

    def __init__(self, capacity: int = 64, dep_tol: float = DEP_TOL) -> None:
        cap = max(4, int(capacity))
        self.dep_tol = float(dep_tol)
        self.R = np.zeros((cap, cap))
        self.Lam = np.zeros((cap, 4))
        self.T = np.zeros((cap, 2))  # columns: r1 = L⁻¹y_B, r2 = L⁻¹g_B
        self.r2_valid = True
        self.bkeys = np.zeros(cap, dtype=np.int64)
        self.by = np.zeros(cap)
        self.dkeys = np.zeros(4, dtype=np.int64)
        self.dy = np.zeros(4)
        self.ddiag = np.zeros(4)
        self.nb = 0
        self.nd = 0
        self.updates = 0  # appends + deletions since the last accuracy check
        self.refactorisations = 0
        self.promotions = 0

    # -- bookkeeping ------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.nb + self.nd

    @property
    def r1(self) -> np.ndarray:
        return self.T[:, 0]

    def keys(self) -> np.ndarray:
        """Member keys in factor order: basis first, then dependent."""
        return np.concatenate([self.bkeys[: self.nb], self.dkeys[: self.nd]])

    def basis_keys(self) -> np.ndarray:
        return self.bkeys[: self.nb].copy()

    def nbytes(self) -> int:
        return self.R.nbytes + self.Lam.nbytes + self.T.nbytes

    def _grow_basis(self, need: int | None = None) -> None:
        cap = self.R.shape[0]
        new = cap + max(cap // 2, 4)
        if need is not None:
            new = max(new, need)
        R = np.zeros((new, new))
        R[: self.nb, : self.nb] = self.R[: self.nb, : self.nb]
        self.R = R
        Lam = np.zeros((new, self.Lam.shape[1]))
        Lam[: self.nb, : self.nd] = self.Lam[: self.nb, : self.nd]
        self.Lam = Lam
        T = np.zeros((new, 2))
        T[: self.nb] = self.T[: self.nb]
        self.T = T
        b = np.zeros(new)
        b[: self.nb] = self.by[: self.nb]
        self.by = b
        k = np.zeros(new, dtype=np.int64)
        k[: self.nb] = self.bkeys[: self.nb]
        self.bkeys = k

    def _grow_dependent(self, need: int | None = None) -> None:
        cap = self.Lam.shape[1]
        new = cap * 2
        if need is not None:
            new = max(new, need)
        Lam = np.zeros((self.Lam.shape[0], new))
        Lam[:, :cap] = self.Lam
        self.Lam = Lam
        for name in ("dy", "ddiag"):
            a = getattr(self, name)
            b = np.zeros(new)
            b[:cap] = a
            setattr(self, name, b)
        k = np.zeros(new, dtype=np.int64)
        k[:cap] = self.dkeys
        self.dkeys = k

    def remap(self, mapping: np.ndarray) -> None:
        """Rename keys: key k becomes ``mapping[k]`` (when the caller's index space changes)."""
        self.bkeys[: self.nb] = mapping[self.bkeys[: self.nb]]
        self.dkeys[: self.nd] = mapping[self.dkeys[: self.nd]]

    # -- the raw arrays and scalars the numba kernels take ------------------------------------
    def arrays(self) -> tuple:
        """``(R, Lam, T, bkeys, by, dkeys, dy, ddiag)`` (valid until the next growth)."""
        return (self.R, self.Lam, self.T, self.bkeys, self.by, self.dkeys, self.dy, self.ddiag)

    def scalars(self) -> np.ndarray:
        """The integer scalars as an ``fs`` array (see :data:`FS_NB` …)."""
        fs = np.zeros(5, dtype=np.int64)
        fs[FS_NB], fs[FS_ND], fs[FS_UPDATES] = self.nb, self.nd, self.updates
        fs[FS_R2], fs[FS_PROMOTIONS] = int(bool(self.r2_valid)), self.promotions
        return fs

    def set_scalars(self, fs: np.ndarray) -> None:
        """Take the scalars back from an ``fs`` array the numba kernels updated."""
        self.nb, self.nd, self.updates = int(fs[FS_NB]), int(fs[FS_ND]), int(fs[FS_UPDATES])
        self.r2_valid, self.promotions = bool(fs[FS_R2]), int(fs[FS_PROMOTIONS])

    # -- updates ----------------------------------------------------------------------------
    def append(self, key: int, y: float, col: np.ndarray, g: float | None = None) -> bool:
        """Add member ``key`` with label ``y``, Q column ``col`` (indexed by key), gradient g.

        ``col[key]`` is the diagonal entry. Returns True if it joined the basis, False if
        its column is (numerically) dependent on the basis. O(n_s²).
        """
        col = np.asarray(col, dtype=np.float64)
        fs = self.scalars()
        while True:
            r = factor_append(
                self.arrays(), fs, self.dep_tol, int(key), float(y), col,
                0.0 if g is None else float(g), g is not None,
            )  # fmt: skip
            if r == -1:
                self._grow_basis()
            elif r == -2:
                self._grow_dependent()
            else:
                break
        self.set_scalars(fs)
        return r == 1

    def remove(
        self, key: int, col_fn: Callable[[int], np.ndarray], g: np.ndarray | None = None
    ) -> None:
        """Remove member ``key``. O(n_s²) Givens rotations when it is a basis member.

        ``col_fn(k)`` returns the Q column of member k (indexed by key); it is called only
        when a dependent member becomes independent and is re-appended to the basis (then
        ``g[k]``, the gradient indexed by key, keeps r2 current).
        """
        fs = self.scalars()
        r = factor_delete(self.arrays(), fs, int(key))
        self.set_scalars(fs)
        if r < 0:
            raise KeyError(f"key {key} is not in the factor")
        # a dependent column may have become independent of the smaller basis
        if r == 1 and self.nd:
            promote = np.empty(self.nd, dtype=np.int64)
            m = factor_promotable(self.arrays(), fs, self.dep_tol, promote)
            for c in promote[:m][::-1]:
                k = int(self.dkeys[c])
                y = float(self.dy[c])
                self.remove(k, col_fn)
                self.updates -= 1
                if self.append(k, y, col_fn(k), None if g is None else float(g[k])):
                    self.promotions += 1
                self.updates -= 1

    def set_gradient(self, g: np.ndarray) -> None:
        """Recompute r2 = L⁻¹ g_B from the gradient ``g`` (indexed by key). O(n_s²)."""
        fs = self.scalars()
        factor_set_gradient(self.arrays(), fs, np.asarray(g, dtype=np.float64))
        self.set_scalars(fs)

    def advance(self, t: float, beta: float) -> None:
        """g ← g + t(βy − g) (a finite step of length t) applied to r2. O(n_s)."""
        factor_advance(self.T, self.nb, float(t), float(beta))

    # -- the reduced problem ----------------------------------------------------------------
    def direction(self, g: np.ndarray) -> tuple[bool, np.ndarray, np.ndarray, float]:
        """Step of the reduced problem (4) from gradient ``g`` (indexed by key).

        Returns ``(finite, d_B, d_D, beta)`` in factor order (:meth:`keys`). When system (5)
        has a unique solution, ``finite`` is True, ``d`` is the Newton step to the reduced
        optimum (Q_ss d − β y_s = −g_s, y_sᵀd = 0) and ``beta`` its multiplier. Otherwise
        ``finite`` is False and ``d`` is an infinite direction (Q_ss d = 0, y_sᵀd = 0)
        oriented so that gᵀd ≤ 0; ``beta`` is NaN.
        """
        fs = self.scalars()
        d = np.empty(self.nb + self.nd)
        finite, beta = factor_direction(self.arrays(), fs, np.asarray(g, dtype=np.float64), d)
        self.set_scalars(fs)
        return bool(finite), d[: self.nb], d[self.nb :], float(beta)

    # -- accuracy ---------------------------------------------------------------------------
    def matvec(self, v: np.ndarray) -> np.ndarray:
        """(F Fᵀ) v in factor order (the factor's idea of Q_ss v)."""
        nb, nd = self.nb, self.nd
        outb = np.empty(nb)
        outd = np.empty(nd)
        factor_matvec(
            self.R,
            nb,
            self.Lam,
            nd,
            np.ascontiguousarray(v[:nb]),
            np.ascontiguousarray(v[nb:]),
            outb,
            outd,
        )
        return np.concatenate([outb, outd])

    def probe_error(
        self, qss_matvec: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int = 0
    ) -> float:
        """Relative backward error of the factor on a random probe vector.

        ``qss_matvec(keys, v)`` must return Q_ss v for members ``keys`` (factor order). The
        value is ‖F Fᵀ v − Q_ss v‖ / (‖v‖ · max diag Q_ss); O(n_s²).
        """
        self.updates = 0
        n = self.n
        if n == 0:
            return 0.0
        rng = np.random.default_rng(seed)
        v = rng.standard_normal(n)
        keys = self.keys()
        exact = qss_matvec(keys, v)
        approx = self.matvec(v)
        diag = np.concatenate(
            [
                np.einsum("ij,ij->j", self.R[: self.nb, : self.nb], self.R[: self.nb, : self.nb]),
                self.ddiag[: self.nd],
            ]
        )
        scale = max(float(diag.max()), 1e-300) * float(np.linalg.norm(v))
        return float(np.linalg.norm(approx - exact)) / scale

    def refactor(
        self, keys: np.ndarray, ys: np.ndarray, Q: np.ndarray, g: np.ndarray | None = None
    ) -> None:
        """Rebuild the factor from scratch for members ``keys`` with Q_ss = ``Q``.

        Uses LAPACK's pivoted Cholesky (``dpstrf``): the first ``rank`` pivots form the basis,
        the rest are dependent. ``g`` (indexed by key) refreshes r2. O(n_s³).
        """
        from scipy.linalg import lapack

        keys = np.asarray(keys, dtype=np.int64)
        ys = np.asarray(ys, dtype=np.float64)
        n = keys.size
        self.refactorisations += 1
        self.updates = 0
        self.nb = 0
        self.nd = 0
        self.r2_valid = False
        if n == 0:
            return
        Q = np.array(Q, dtype=np.float64, order="F", copy=True)
        dmax = float(np.max(np.diag(Q)))
        if dmax <= 0.0:
            rank = 0
            piv = np.arange(n)
            U = np.zeros((n, n))
        else:
            U, piv, rank, info = lapack.dpstrf(Q, tol=self.dep_tol * dmax, lower=0)
            if info < 0:
                raise RuntimeError(f"dpstrf failed (info={info})")
            piv = piv - 1
            U = np.triu(U)
        if rank > self.R.shape[0]:
            self._grow_basis(need=rank)
        self.R[:] = 0.0
        self.T[:] = 0.0
        nd = n - rank
        if nd > self.Lam.shape[1]:
            self._grow_dependent(need=nd)
        self.Lam[:] = 0.0
        self.R[:rank, :rank] = U[:rank, :rank]
        self.Lam[:rank, :nd] = U[:rank, rank:n]
        self.bkeys[:rank] = keys[piv[:rank]]
        self.by[:rank] = ys[piv[:rank]]
        self.dkeys[:nd] = keys[piv[rank:]]
        self.dy[:nd] = ys[piv[rank:]]
        self.ddiag[:nd] = np.diag(Q)[piv[rank:]] if nd else 0.0
        self.nb = rank
        self.nd = nd
        forward_solve(self.R, rank, np.ascontiguousarray(self.by[:rank]), self.T[:rank, 0])
        if g is not None:
            self.set_gradient(g)

    def dense_factor(self) -> np.ndarray:
        """F = [L; Λᵀ] as a dense (n_s × n_b) array in factor order (for tests)."""
        nb, nd = self.nb, self.nd
        return np.vstack([self.R[:nb, :nb].T, self.Lam[:nb, :nd].T])
