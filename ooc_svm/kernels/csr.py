"""CSR kernels for streamed passes: X·w, Xᵀ·v, fused hinge passes, row norms, row·row dots.

All kernels are ``@njit(cache=True, nogil=True)`` functions on raw arrays, so the engines
run them on several shards at once without the GIL. Conventions:

- ``indptr`` is int64, ``data`` float32 (or float64), dense vectors are float64;
- ``indices`` are passed as a **uint32 view** of the stored int32 (:func:`u32`), which lets
  numba drop the negative-index wrap-around check in the inner loop (about 2x faster,
  measured);
- outputs are written into caller-provided arrays (``out``, ``g``, ...) and also returned;
- accumulation is always in float64 and in row order, so a kernel gives bit-identical
  results for the same rows whatever engine or thread runs it.

Shard arrays handed out by the engines are read-only; kernels only read them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .kernel_functions import kernel_from_dot

# ------------------------------------------------------------------------------------------
# X·w and friends
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def row_dot(indptr, indices, data, w, i):
    """x_i · w, summed in the row's stored order (every X·w kernel here sums this way, so
    their results agree to the bit)."""
    s = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        s += data[k] * w[indices[k]]
    return s


@njit(cache=True, nogil=True)
def csr_matvec(indptr, indices, data, w, bias, out):
    """out[i] = x_i · w + bias for every row i."""
    n = indptr.shape[0] - 1
    for i in range(n):
        out[i] = row_dot(indptr, indices, data, w, i) + bias
    return out


@njit(cache=True, nogil=True)
def csr_matvec_rows(indptr, indices, data, rows, w, bias, out):
    """out[r] = x_{rows[r]} · w + bias for the listed rows (local row numbers)."""
    for r in range(rows.shape[0]):
        out[r] = row_dot(indptr, indices, data, w, rows[r]) + bias
    return out


# ------------------------------------------------------------------------------------------
# Xᵀ·v and masked / weighted variants
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def csr_rmatvec_add(indptr, indices, data, v, out):
    """out += Xᵀ v (out is a dense vector of length n_features)."""
    n = indptr.shape[0] - 1
    for i in range(n):
        vi = v[i]
        if vi != 0.0:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += vi * data[k]
    return out


@njit(cache=True, nogil=True)
def csr_rmatvec_rows_add(indptr, indices, data, rows, v, out):
    """out += Σ_r v[r] · x_{rows[r]} (``v`` has one weight per listed row)."""
    for r in range(rows.shape[0]):
        i = rows[r]
        vr = v[r]
        if vr != 0.0:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += vr * data[k]
    return out


# ------------------------------------------------------------------------------------------
# Fused hinge passes (cutting-plane oracle)
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def hinge_violated(indptr, indices, data, y, w, bias_value, w_bias, g, margins):
    """Fused pass for the 1-slack cutting plane (Joachims 2006, Alg. 1 line 5).

    For every row computes m_i = y_i (w·x_i + w_bias*bias_value); rows with m_i < 1 are
    violated (c_i = 1) and contribute y_i x_i to ``g`` (accumulated in place, length
    n_features). Returns (count, hinge_sum, g_bias) where hinge_sum = Σ max(0, 1 - m_i) and
    g_bias = Σ_violated y_i * bias_value. ``margins`` receives m_i (length n_rows).

    The margin of a row is computed exactly as :func:`csr_matvec` computes x_i·w (same
    order), so ``margins[i] == y_i * (csr_matvec(...)[i] + w_bias*bias_value)`` for bias 0.
    """
    n = indptr.shape[0] - 1
    count = 0
    hinge = 0.0
    gb = 0.0
    b = w_bias * bias_value
    for i in range(n):
        lo = indptr[i]
        hi = indptr[i + 1]
        yi = y[i]
        m = yi * (row_dot(indptr, indices, data, w, i) + b)
        margins[i] = m
        if m < 1.0:
            count += 1
            hinge += 1.0 - m
            gb += yi
            for k in range(lo, hi):
                g[indices[k]] += yi * data[k]
    return count, hinge, gb * bias_value


# ------------------------------------------------------------------------------------------
# Row norms, row gathering, sparse·sparse row dots (kernel-row building blocks)
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def csr_take_rows(indptr, indices, data, rows):
    """Gather the listed rows into a new CSR: returns (indptr, indices, data).

    The outputs have the dtypes of the inputs (pass int32 or uint32 ``indices``).
    """
    m = rows.shape[0]
    new_ptr = np.empty(m + 1, dtype=np.int64)
    new_ptr[0] = 0
    for r in range(m):
        i = rows[r]
        new_ptr[r + 1] = new_ptr[r] + (indptr[i + 1] - indptr[i])
    nnz = new_ptr[m]
    new_idx = np.empty(nnz, dtype=indices.dtype)
    new_dat = np.empty(nnz, dtype=data.dtype)
    for r in range(m):
        i = rows[r]
        p = new_ptr[r]
        for k in range(indptr[i], indptr[i + 1]):
            new_idx[p] = indices[k]
            new_dat[p] = data[k]
            p += 1
    return new_ptr, new_idx, new_dat


@njit(cache=True, nogil=True, inline="always")
def merge_dot(a_indices, a_data, p, pe, b_indices, b_data, q, qe):
    """Σ a·b over the columns two sorted sparse vectors share: entries ``[p, pe)`` of
    ``(a_indices, a_data)`` and ``[q, qe)`` of ``(b_indices, b_data)``, merged in column
    order, each product in float64 (inlined into its callers by numba).

    (``kernel_functions.sparse_dot`` is not this: its ``float()`` keeps float32 data in
    float32 for the product.)
    """
    s = 0.0
    while p < pe and q < qe:
        a = a_indices[p]
        b = b_indices[q]
        if a == b:
            s += np.float64(a_data[p]) * np.float64(b_data[q])
            p += 1
            q += 1
        elif a < b:
            p += 1
        else:
            q += 1
    return s


@njit(cache=True, nogil=True)
def csr_rows_dot(indptr_a, indices_a, data_a, rows_a, indptr_b, indices_b, data_b, out, work):
    """out[r, j] = x^A_{rows_a[r]} · x^B_j for every listed row of A and every row of B.

    Parameters
    ----------
    indptr_a, indices_a, data_a : CSR arrays of A (e.g. a shard or a working set)
    rows_a : int64 array of local row numbers in A
    indptr_b, indices_b, data_b : CSR arrays of B (all its rows are used; gather a subset
        with :func:`csr_take_rows`)
    out : float64 array (len(rows_a), n_rows_B)
    work : float64 array
        Either a zero-filled scratch vector of length ≥ n_features (dense scatter: each row
        of A is scattered into ``work``, every row of B gathers from it — O(nnz(B)) per row
        of A; ``work`` is left zero-filled), or an empty array to use a sorted merge of the
        two rows (no O(n_features) memory; O(nnz(a) + nnz(b)) per pair) — use that when
        n_features is huge. See :func:`dot_work`.

    Both strategies add the same products in the order of B's indices, so they give
    identical results.
    """
    nb = indptr_b.shape[0] - 1
    dense = work.shape[0] > 0
    for r in range(rows_a.shape[0]):
        i = rows_a[r]
        lo = indptr_a[i]
        hi = indptr_a[i + 1]
        if dense:
            for k in range(lo, hi):
                work[indices_a[k]] = data_a[k]
            for j in range(nb):
                s = 0.0
                for k in range(indptr_b[j], indptr_b[j + 1]):
                    s += work[indices_b[k]] * np.float64(data_b[k])
                out[r, j] = s
            for k in range(lo, hi):
                work[indices_a[k]] = 0.0
        else:
            for j in range(nb):
                q, qe = indptr_b[j], indptr_b[j + 1]
                out[r, j] = merge_dot(indices_a, data_a, lo, hi, indices_b, data_b, q, qe)
    return out


#: Above this many features :func:`dot_work` chooses the sorted merge (no dense scratch).
DENSE_WORK_MAX_FEATURES = 1 << 24


def dot_work(n_features: int, dense: bool | None = None) -> np.ndarray:
    """Scratch vector for :func:`csr_rows_dot`: zeros(n_features) or an empty array (merge).

    ``dense=None`` picks the dense scatter up to :data:`DENSE_WORK_MAX_FEATURES` features
    (128 MiB of float64). One scratch vector per thread: it is written during the call.
    """
    if dense is None:
        dense = n_features <= DENSE_WORK_MAX_FEATURES
    return np.zeros(n_features if dense else 0, dtype=np.float64)


# ------------------------------------------------------------------------------------------
# kernel-model scoring, several classes at once (one-vs-rest)
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def kernel_scores_csc_multi(
    a_indptr,
    a_indices,
    a_data,
    a_sq,
    svt_indptr,
    svt_indices,
    svt_data,
    sv_sq,
    coef,
    code,
    gamma,
    degree,
    coef0,
    acc,
    kval,
    out,
):
    """out[i, c] = Σ_j coef[c, j] K(sv_j, a_i) for every class c, each kernel value computed
    once (one-vs-rest kernel models share their support vectors).

    The SVs are given transposed (CSC over features, as for
    :func:`ooc_svm.kernels.kernel_functions.kernel_scores_csc`, whose per-class sums this
    reproduces bit for bit); features of ``a`` beyond ``svt_indptr`` are ignored. ``acc`` and
    ``kval`` are float64 scratch vectors of length n_sv; ``out`` is (n_rows, n_classes).
    """
    na = a_indptr.shape[0] - 1
    nsv = sv_sq.shape[0]
    nft = svt_indptr.shape[0] - 1
    nc = coef.shape[0]
    for i in range(na):
        for j in range(nsv):
            acc[j] = 0.0
        for k in range(a_indptr[i], a_indptr[i + 1]):
            f = a_indices[k]
            if f < nft:
                v = float(a_data[k])
                for q in range(svt_indptr[f], svt_indptr[f + 1]):
                    acc[svt_indices[q]] += v * svt_data[q]
        sqi = a_sq[i]
        for j in range(nsv):
            kval[j] = kernel_from_dot(code, acc[j], sqi, sv_sq[j], gamma, degree, coef0)
        for c in range(nc):
            s = 0.0
            for j in range(nsv):
                s += coef[c, j] * kval[j]
            out[i, c] = s
    return out


def u32(indices: np.ndarray) -> np.ndarray:
    """View int32 indices as uint32 for the kernels (no copy)."""
    return indices.view(np.uint32)
