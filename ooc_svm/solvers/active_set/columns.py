"""Q columns of I_s over the working rows (§4.2): kernel and linear variants."""

from __future__ import annotations

import logging

import numpy as np

from ...kernels.csr import csr_matvec_rows, csr_rmatvec_rows_add, csr_take_rows
from ...kernels.kernel_functions import KernelParams, kernel_row, kernel_row_subset, linear_scores
from ...kernels.parallel import gradient_rows_par, thread_share
from ..dual import WorkingRows
from ._numba.blocks import (
    DENSE_BLOCK_MAX,
    _dense_transposed,
    dense_kernel_block,
    dense_kernel_col,
    gather_matvec,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# Q columns over the working set
# ------------------------------------------------------------------------------------------
class KernelColumns:
    """Q[W, j] for the members j of I_s (and those that left since the last full flush), §4.2.

    Stored row-major as Qt (|W| × capacity): Qt[i, slot(j)] = Q_ij, so the gradient of any
    subset of working rows is a set of contiguous dot products. ``Gbase`` (held by the
    caller) is the exact gradient at the α of the last *full* flush (``aflush``); a partial
    flush recomputes G = Gbase + Qt (α − aflush) for the bound rows only.
    """

    def __init__(
        self, rows: WorkingRows, y: np.ndarray, kp: KernelParams, n_features: int, capacity: int
    ) -> None:
        self.ip, ix, self.data = rows.csr()
        self.sq = rows.sq_norms()
        self.y = y
        self.kp = kp
        self.n = rows.n
        # the rows' own width, not the store's (no workspace grows with n_features); columns
        # spread over a wide (e.g. hashed, 2^31) space are renumbered 0 .. k-1 over those the
        # rows use, in increasing order: every kernel value is unchanged
        self.feats, self.ix, width = _compact_columns(ix)
        self.width = width
        self.work = np.zeros(width)
        self.tmp = np.empty(self.n)
        # dense copy of the working rows (n_features × |W|) when small: a column is then a
        # few contiguous axpys instead of |W| sparse dot products
        self.Dt = (
            _dense_transposed(self.ip, self.ix, self.data, width)
            if width * self.n <= DENSE_BLOCK_MAX
            else None
        )
        cap = max(8, int(capacity))
        self.Qt = np.empty((self.n, cap))
        self.slot = np.full(self.n, -1, dtype=np.int64)
        self.key = np.zeros(cap, dtype=np.int64)
        self.aflush = np.zeros(cap)
        self.released = np.zeros(cap, dtype=bool)
        self.p = 0
        self.kernel_evals = 0

    def nbytes(self) -> int:
        return int(self.Qt.nbytes)

    def _grow(self, need: int) -> None:
        cap = self.Qt.shape[1]
        new = max(need, cap + max(cap // 2, 8))
        Qt = np.empty((self.n, new))
        Qt[:, : self.p] = self.Qt[:, : self.p]
        self.Qt = Qt
        for name in ("key", "aflush", "released"):
            a = getattr(self, name)
            b = np.zeros(new, dtype=a.dtype)
            b[: self.p] = a[: self.p]
            setattr(self, name, b)

    def add(self, key: int, alpha_key: float) -> None:
        s = self.slot[key]
        if s >= 0:
            self.released[s] = False
            return
        if self.p == self.Qt.shape[1]:
            self._grow(self.p + 1)
        s = self.p
        out = self.tmp
        if self.Dt is not None:
            a, b = self.ip[key], self.ip[key + 1]
            dense_kernel_col(
                self.Dt, self.sq, self.ix[a:b], self.data[a:b], self.sq[key], *self.kp.args(), out
            )
        else:
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.sq,
                key,
                self.ip,
                self.ix,
                self.data,
                self.sq,
                *self.kp.args(),
                self.work,
                out,
            )
        out *= self.y
        out *= self.y[key]
        self.Qt[:, s] = out
        self.kernel_evals += self.n
        self.key[s] = key
        self.slot[key] = s
        self.aflush[s] = alpha_key
        self.released[s] = False
        self.p += 1

    def fill(self, keys: np.ndarray, alphas: np.ndarray, block: np.ndarray | None = None) -> None:
        """Add several members at once (block = K(W, keys) when already computed)."""
        keys = np.asarray(keys, dtype=np.int64)
        if keys.size == 0:
            return
        if self.p + keys.size > self.Qt.shape[1]:
            self._grow(self.p + keys.size)
        if block is None:
            block = self.kernel_block(keys)
        s0 = self.p
        sl = slice(s0, s0 + keys.size)
        self.Qt[:, sl] = block
        self.Qt[:, sl] *= self.y[:, None]
        self.Qt[:, sl] *= self.y[keys][None, :]
        self.key[sl] = keys
        self.slot[keys] = np.arange(s0, s0 + keys.size)
        self.aflush[sl] = alphas
        self.released[sl] = False
        self.p += keys.size

    def kernel_block(self, keys: np.ndarray) -> np.ndarray:
        """K(W, W[keys]) as an (|W|, len(keys)) array."""
        keys = np.asarray(keys, dtype=np.int64)
        sub_ip, sub_ix, sub_data = csr_take_rows(self.ip, self.ix, self.data, keys)
        out = np.empty((self.n, keys.size))
        self.kernel_evals += self.n * keys.size
        if self.Dt is not None and keys.size > 0:
            out = np.empty((keys.size, self.n))
            for t, k in enumerate(keys):
                a, b = self.ip[k], self.ip[k + 1]
                dense_kernel_col(
                    self.Dt,
                    self.sq,
                    self.ix[a:b],
                    self.data[a:b],
                    self.sq[k],
                    *self.kp.args(),
                    out[t],
                )
            return out.T
        if self.width * keys.size <= DENSE_BLOCK_MAX:
            Dt = _dense_transposed(sub_ip, sub_ix, sub_data, self.width)
            return dense_kernel_block(
                self.ip, self.ix, self.data, self.sq, Dt, self.sq[keys], *self.kp.args(), out
            )
        for t, k in enumerate(keys):
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.sq,
                k,
                self.ip,
                self.ix,
                self.data,
                self.sq,
                *self.kp.args(),
                self.work,
                self.tmp,
            )
            out[:, t] = self.tmp
        return out

    def col(self, key: int, rows: np.ndarray | None = None) -> np.ndarray:
        return self.Qt[:, self.slot[key]]

    def release(self, key: int) -> None:
        self.released[self.slot[key]] = True

    def n_released(self) -> int:
        return int(self.released[: self.p].sum())

    def partial(
        self, rows: np.ndarray, alpha: np.ndarray, Gbase: np.ndarray, G: np.ndarray
    ) -> None:
        """G[rows] = Gbase[rows] + Q[rows, ·](α − α_flush): O(|rows| · n_columns)."""
        p = self.p
        delta = alpha[self.key[:p]] - self.aflush[:p]
        with thread_share():
            gradient_rows_par(self.Qt, rows, p, delta, Gbase, G)

    def full(self, alpha: np.ndarray, Gbase: np.ndarray) -> None:
        """Gbase += Q(α − α_flush) for every working row; forget the released columns."""
        p = self.p
        if p == 0:
            return
        keys = self.key[:p]
        a = alpha[keys]
        delta = a - self.aflush[:p]
        if np.any(delta != 0.0):
            with thread_share():
                gradient_rows_par(self.Qt, np.arange(self.n), p, delta, Gbase, Gbase)
        self.aflush[:p] = a
        gone = np.flatnonzero(self.released[:p])
        for s in gone[::-1]:
            self._drop(int(s))

    def _drop(self, s: int) -> None:
        last = self.p - 1
        k = self.key[s]
        self.slot[k] = -1
        if s != last:
            self.Qt[:, s] = self.Qt[:, last]
            self.key[s] = self.key[last]
            self.aflush[s] = self.aflush[last]
            self.released[s] = self.released[last]
            self.slot[self.key[s]] = s
        self.p = last

    def qss(self, keys: np.ndarray) -> np.ndarray:
        return self.Qt[keys][:, self.slot[keys]]

    def qss_matvec(self, keys: np.ndarray, v: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        return gather_matvec(
            self.Qt, keys, self.slot[keys], np.ascontiguousarray(v, np.float64), np.empty(keys.size)
        )

    def compacted(self, rows: WorkingRows, kept: np.ndarray, mapping: np.ndarray) -> KernelColumns:
        """The same columns restricted to the rows ``kept`` (keys renamed by ``mapping``)."""
        new = KernelColumns.__new__(KernelColumns)
        new.ip, new.ix, new.data = rows.csr()
        new.feats = self.feats
        if self.feats is not None:  # the kept rows' columns, in the same numbering
            new.ix = np.searchsorted(self.feats, new.ix).astype(np.uint32)
        new.sq = self.sq[kept]
        new.y = rows.y
        new.kp = self.kp
        new.n = rows.n
        new.width = self.width
        new.work = self.work
        new.tmp = np.empty(new.n)
        new.Dt = None if self.Dt is None else np.ascontiguousarray(self.Dt[:, kept])
        new.Qt = np.ascontiguousarray(self.Qt[kept])
        new.slot = self.slot[kept].copy()
        new.key = self.key.copy()
        new.key[: self.p] = mapping[self.key[: self.p]]
        new.aflush = self.aflush.copy()
        new.released = self.released.copy()
        new.p = self.p
        new.kernel_evals = self.kernel_evals
        return new


def _compact_columns(ix: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, int]:
    """``(features, indices, width)``: ``ix`` itself and its width when it is dense enough,
    else the sorted distinct columns and ``ix`` renumbered over them (uint32)."""
    if ix.size == 0:
        return None, ix, 1
    hi = int(ix.max()) + 1
    if hi <= max(4 * ix.size, 1 << 16):
        return None, ix, hi
    feats, inv = np.unique(ix, return_inverse=True)
    return feats, inv.astype(np.uint32).reshape(ix.shape), int(feats.size)


class LinearColumns:
    """Linear kernel: no stored columns; the gradient of working rows comes from w (§4.2).

    ``w`` is Σ αⱼyⱼxⱼ over the whole store, kept current with the α changes of the working
    rows (``aflush`` is the α at which w was last brought up to date).
    """

    def __init__(
        self, rows: WorkingRows, y: np.ndarray, w: np.ndarray, alpha: np.ndarray, n_features: int
    ) -> None:
        self.ip, self.ix, self.data = rows.csr()
        self.y = y
        self.n = rows.n
        width = max(n_features, int(self.ix.max()) + 1 if self.ix.size else 0, 1)
        self.w = np.zeros(width)
        self.w[: min(width, w.shape[0])] = w[:width]
        self.aflush = alpha.copy()
        self.work = np.zeros(width)
        self.zeros = np.zeros(self.n)
        self.tmp = np.empty(self.n)
        self.kernel_evals = 0
        self.p = 0

    def nbytes(self) -> int:
        return int(self.w.nbytes * 2 + self.aflush.nbytes)

    def add(self, key: int, alpha_key: float) -> None:
        pass

    def fill(self, keys: np.ndarray, alphas: np.ndarray, block: np.ndarray | None = None) -> None:
        pass

    def col(self, key: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Q[·, key]; with ``rows`` only those entries are computed (the others are 0)."""
        if rows is None:
            out = np.empty(self.n)
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                key,
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                0,
                0.0,
                1,
                0.0,
                self.work,
                out,
            )
            out *= self.y
            self.kernel_evals += self.n
        else:
            rows = np.asarray(rows, dtype=np.int64)
            out = np.zeros(self.n)
            kernel_row_subset(
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                key,
                rows,
                rows.size,
                0,
                0.0,
                1,
                0.0,
                self.work,
                out,
            )
            out[rows] *= self.y[rows]
            self.kernel_evals += rows.size
        out *= self.y[key]
        return out

    def release(self, key: int) -> None:
        pass

    def n_released(self) -> int:
        return 0

    def _sync_w(self, alpha: np.ndarray) -> None:
        changed = np.flatnonzero(alpha != self.aflush)
        if changed.size:
            coef = (alpha[changed] - self.aflush[changed]) * self.y[changed]
            csr_rmatvec_rows_add(self.ip, self.ix, self.data, changed, coef, self.w)
            self.aflush[changed] = alpha[changed]

    def partial(
        self, rows: np.ndarray, alpha: np.ndarray, Gbase: np.ndarray, G: np.ndarray
    ) -> None:
        self._sync_w(alpha)
        out = csr_matvec_rows(self.ip, self.ix, self.data, rows, self.w, 0.0, np.empty(rows.size))
        G[rows] = self.y[rows] * out - 1.0
        Gbase[rows] = G[rows]

    def full(self, alpha: np.ndarray, Gbase: np.ndarray) -> None:
        self._sync_w(alpha)
        linear_scores(self.ip, self.ix, self.data, self.w, Gbase)
        Gbase *= self.y
        Gbase -= 1.0

    def _sub(self, keys):
        import scipy.sparse as sp

        ip, ix, data = csr_take_rows(self.ip, self.ix, self.data, np.asarray(keys, np.int64))
        return sp.csr_matrix(
            (data.astype(np.float64), ix.view(np.int32), ip), shape=(len(keys), self.w.shape[0])
        )

    def qss(self, keys: np.ndarray) -> np.ndarray:
        X = self._sub(keys)
        yk = self.y[keys]
        return (X @ X.T).toarray() * yk[:, None] * yk[None, :]

    def qss_matvec(self, keys: np.ndarray, v: np.ndarray) -> np.ndarray:
        X = self._sub(keys)
        yk = self.y[keys]
        return yk * (X @ (X.T @ (yk * v)))

    def compacted(self, rows: WorkingRows, kept: np.ndarray, mapping: np.ndarray) -> LinearColumns:
        new = LinearColumns.__new__(LinearColumns)
        new.ip, new.ix, new.data = rows.csr()
        new.y = rows.y
        new.n = rows.n
        new.w = self.w
        new.aflush = self.aflush[kept].copy()
        new.work = self.work
        new.zeros = np.zeros(new.n)
        new.tmp = np.empty(new.n)
        new.kernel_evals = self.kernel_evals
        new.p = 0
        return new
