"""Numba kernels of the active-set solver: dense dots, kernel blocks and columns, expansions."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numba import njit

from ....kernels.kernel_functions import KernelParams, kernel_from_dot
from ....kernels.parallel import dense_expansion_add_par, dense_row_dots, thread_share
from ....model.expansion import Expansion

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# numba helpers
# ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def dense_kernel_block(indptr, indices, data, sq, Dt, dsq, code, gamma, degree, coef0, out):
    """out[i, j] = K(xᵢ, dⱼ) for CSR rows x and dense columns Dt (n_features, m)."""
    n = indptr.shape[0] - 1
    m = Dt.shape[1]
    for i in range(n):
        buf = out[i]
        dense_row_dots(indptr, indices, data, i, Dt, buf)
        sqi = sq[i]
        for j in range(m):
            buf[j] = kernel_from_dot(code, buf[j], sqi, dsq[j], gamma, degree, coef0)
    return out


@njit(cache=True, nogil=True)
def dense_kernel_col(Dt, sq, i_indices, i_data, sq_i, code, gamma, degree, coef0, out):
    """out[r] = K(x, w_r) for every working row r, x given sparse, rows dense: Dt (nf, |W|)."""
    n = Dt.shape[1]
    for r in range(n):
        out[r] = 0.0
    for k in range(i_indices.shape[0]):
        v = float(i_data[k])
        row = Dt[i_indices[k]]
        for r in range(n):
            out[r] += v * row[r]
    for r in range(n):
        out[r] = kernel_from_dot(code, out[r], sq_i, sq[r], gamma, degree, coef0)
    return out


#: dense expansion blocks up to this many float64 entries (n_features × rows) are used
DENSE_BLOCK_MAX = 8_000_000


def _dense_transposed(indptr, indices, data, n_features: int) -> np.ndarray:
    """Dense (n_features, m) transpose of a CSR block."""
    m = indptr.shape[0] - 1
    Dt = np.zeros((max(n_features, 1), m))
    rows = np.repeat(np.arange(m), np.diff(indptr))
    Dt[indices.astype(np.int64), rows] = data
    return Dt


def expansion_add(
    indptr: np.ndarray,
    indices_u32: np.ndarray,
    data: np.ndarray,
    sq: np.ndarray,
    exp_rows: Any,
    kp: KernelParams,
    n_features: int,
    out: np.ndarray,
) -> np.ndarray:
    """out += Σⱼ coefⱼ K(xᵢ, dⱼ) for the CSR rows x against the expansion ``exp_rows``."""
    d_ip, d_ix, d_data, d_sq, coef = exp_rows
    m = d_ip.shape[0] - 1
    if m == 0 or indptr.shape[0] <= 1:
        return out
    # the rows' own width, not the store's (no dense block grows with n_features)
    width = max(
        int(indices_u32.max()) + 1 if indices_u32.size else 1,
        int(d_ix.max()) + 1 if d_ix.size else 1,
    )
    if width * m <= DENSE_BLOCK_MAX:
        Dt = _dense_transposed(d_ip, d_ix, d_data, width)
        with thread_share():
            dense_expansion_add_par(indptr, indices_u32, data, sq, Dt, d_sq, coef, *kp.args(), out)
        return out
    exp = Expansion.from_csr(kp, width, d_ip, d_ix.view(np.int32), d_data, coef)
    tmp = exp.scores(indptr, indices_u32, data)
    out += tmp
    return out


@njit(cache=True, nogil=True)
def gather_matvec(Qt, rows, cols, v, out):
    """out[a] = Σ_b Qt[rows[a], cols[b]] v[b] (Q_ss v from the stored columns)."""
    for a in range(rows.shape[0]):
        r = Qt[rows[a]]
        s = 0.0
        for b in range(cols.shape[0]):
            s += r[cols[b]] * v[b]
        out[a] = s
    return out
