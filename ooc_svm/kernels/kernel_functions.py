"""Kernel functions on sparse CSR rows (numba), shared by the dual solvers and kernel models.

Kernels (LIBSVM's definitions and integer codes)::

    linear  (0): K(x, z) = x·z
    poly    (1): K(x, z) = (gamma x·z + coef0) ** degree
    rbf     (2): K(x, z) = exp(-gamma |x - z|²)      (default gamma = 1 / n_features)
    sigmoid (3): K(x, z) = tanh(gamma x·z + coef0)

Conventions (stable API, the active-set and irwls solvers import these):

- Every numba function takes raw CSR arrays ``indptr`` (int64), ``indices`` (the stored int32
  viewed as **uint32**, see :func:`ooc_svm.kernels.csr.u32`), ``data`` (float32 or float64)
  and precomputed squared row norms ``sq`` (float64, from :func:`row_sq_norms`).
- Dot products use *scatter / gather*: one row is scattered into a dense float64 workspace
  ``work`` of length >= n_features (all zeros on entry, restored to zeros on exit), then each
  other row is a gather over its own non-zeros — O(nnz(row)) per kernel value.
- Kernel parameters are passed as ``(code, gamma, degree, coef0)``; :class:`KernelParams`
  bundles them and resolves the default gamma.

Python entry points: :func:`kernel_matrix` (dense K(X, Y) for scipy CSR, used by
``Model.decision_function``) and :class:`KernelParams`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

if TYPE_CHECKING:  # imported where used: the linear paths never need scipy
    import scipy.sparse as sp

#: Integer code of each kernel (LIBSVM's numbering).
LINEAR, POLY, RBF, SIGMOID = 0, 1, 2, 3
KERNEL_CODES = {"linear": LINEAR, "poly": POLY, "rbf": RBF, "sigmoid": SIGMOID}


def kernel_code(kernel: str) -> int:
    """Integer code of a kernel name; raises ValueError for unknown names."""
    try:
        return KERNEL_CODES[kernel]
    except KeyError:
        raise ValueError(
            f"unknown kernel {kernel!r}; choose one of {', '.join(KERNEL_CODES)}"
        ) from None


def resolve_gamma(gamma: float | None, n_features: int) -> float:
    """``gamma`` or, when None / non-positive, LIBSVM's default 1 / n_features."""
    if gamma is None or gamma <= 0:
        return 1.0 / max(int(n_features), 1)
    return float(gamma)


@dataclass(frozen=True)
class KernelParams:
    """Resolved kernel parameters (picklable; broadcast them to shard functions).

    Attributes
    ----------
    kernel : str
        ``linear``, ``poly``, ``rbf`` or ``sigmoid``.
    gamma : float
        Resolved (never None).
    degree : int
    coef0 : float
    """

    kernel: str
    gamma: float
    degree: int = 3
    coef0: float = 0.0

    @property
    def code(self) -> int:
        return kernel_code(self.kernel)

    def args(self) -> tuple[int, float, int, float]:
        """``(code, gamma, degree, coef0)`` as the numba functions take them."""
        return self.code, float(self.gamma), int(self.degree), float(self.coef0)

    @classmethod
    def from_params(cls, params: dict, n_features: int) -> KernelParams:
        """Build from a solver parameter dict (keys kernel, gamma, degree, coef0)."""
        kernel = str(params.get("kernel") or "rbf")
        kernel_code(kernel)
        degree = int(params.get("degree", 3) if params.get("degree") is not None else 3)
        coef0 = float(params.get("coef0", 0.0) if params.get("coef0") is not None else 0.0)
        return cls(kernel, resolve_gamma(params.get("gamma"), n_features), degree, coef0)


# --------------------------------------------------------------------------------------------
# scalar helpers
# --------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def kernel_from_dot(code, dot, sq_a, sq_b, gamma, degree, coef0):
    """K(a, b) from the dot product a·b and the squared norms |a|², |b|²."""
    if code == 0:
        return dot
    if code == 2:
        d2 = sq_a + sq_b - 2.0 * dot
        if d2 < 0.0:
            d2 = 0.0
        return math.exp(-gamma * d2)
    if code == 1:
        base = gamma * dot + coef0
        r = 1.0
        for _ in range(degree):
            r *= base
        return r
    return math.tanh(gamma * dot + coef0)


@njit(cache=True, nogil=True)
def row_sq_norms(indptr, indices, data, out):
    """out[i] = |x_i|² for every row of a CSR block; returns ``out``."""
    n = indptr.shape[0] - 1
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = float(data[k])
            s += v * v
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def sparse_dot(a_indptr, a_indices, a_data, i, b_indptr, b_indices, b_data, j):
    """x_i·z_j by merging two sorted sparse rows (no workspace needed)."""
    p, pe, q, qe = a_indptr[i], a_indptr[i + 1], b_indptr[j], b_indptr[j + 1]
    return sparse_sparse_dot(a_indices[p:pe], a_data[p:pe], b_indices[q:qe], b_data[q:qe])


@njit(cache=True, nogil=True)
def scatter_row(indptr, indices, data, i, work):
    """work[indices of row i] = row i's values (work must be zero there)."""
    for k in range(indptr[i], indptr[i + 1]):
        work[indices[k]] = data[k]


@njit(cache=True, nogil=True)
def clear_row(indptr, indices, i, work):
    """Undo :func:`scatter_row`."""
    for k in range(indptr[i], indptr[i + 1]):
        work[indices[k]] = 0.0


@njit(cache=True, nogil=True)
def gather_dot(indptr, indices, data, j, work):
    """z_j·work (work holds a scattered row)."""
    s = 0.0
    for k in range(indptr[j], indptr[j + 1]):
        s += float(data[k]) * work[indices[k]]
    return s


@njit(cache=True, nogil=True)
def sparse_sparse_dot(ia, va, ib, vb):
    """Σ a_j b_j of two sparse vectors with sorted indices (a merge, no dense scratch)."""
    p = 0
    q = 0
    na = ia.shape[0]
    nb = ib.shape[0]
    s = 0.0
    while p < na and q < nb:
        x = ia[p]
        z = ib[q]
        if x == z:
            s += float(va[p]) * float(vb[q])
            p += 1
            q += 1
        elif x < z:
            p += 1
        else:
            q += 1
    return s


# --------------------------------------------------------------------------------------------
# rows / blocks
# --------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def kernel_row(
    a_indptr,
    a_indices,
    a_data,
    a_sq,
    i,
    b_indptr,
    b_indices,
    b_data,
    b_sq,
    code,
    gamma,
    degree,
    coef0,
    work,
    out,
):
    """out[j] = K(a_i, b_j) for every row j of block b; returns ``out``."""
    scatter_row(a_indptr, a_indices, a_data, i, work)
    sqi = a_sq[i]
    nb = b_indptr.shape[0] - 1
    for j in range(nb):
        d = gather_dot(b_indptr, b_indices, b_data, j, work)
        out[j] = kernel_from_dot(code, d, sqi, b_sq[j], gamma, degree, coef0)
    clear_row(a_indptr, a_indices, i, work)
    return out


@njit(cache=True, nogil=True)
def kernel_row_subset(indptr, indices, data, sq, i, rows, n, code, gamma, degree, coef0, work, out):
    """Within one block: out[rows[k]] = K(x_i, x_rows[k]) for k < n (other entries untouched).

    This is the column a decomposition solver needs for its active rows only.
    """
    scatter_row(indptr, indices, data, i, work)
    sqi = sq[i]
    for t in range(n):
        r = rows[t]
        d = gather_dot(indptr, indices, data, r, work)
        out[r] = kernel_from_dot(code, d, sqi, sq[r], gamma, degree, coef0)
    clear_row(indptr, indices, i, work)
    return out


@njit(cache=True, nogil=True)
def kernel_block(
    a_indptr,
    a_indices,
    a_data,
    a_sq,
    b_indptr,
    b_indices,
    b_data,
    b_sq,
    code,
    gamma,
    degree,
    coef0,
    work,
    out,
):
    """out[i, j] = K(a_i, b_j) (dense, shape (n_a, n_b)); returns ``out``."""
    for i in range(a_indptr.shape[0] - 1):
        kernel_row(
            a_indptr, a_indices, a_data, a_sq, i, b_indptr, b_indices, b_data, b_sq,
            code, gamma, degree, coef0, work, out[i],
        )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def kernel_scores(
    a_indptr,
    a_indices,
    a_data,
    a_sq,
    sv_indptr,
    sv_indices,
    sv_data,
    sv_sq,
    coef,
    code,
    gamma,
    degree,
    coef0,
    work,
    out,
):
    """out[i] = Σ_j coef[j] K(a_i, sv_j) (the kernel expansion, no intercept); returns ``out``.

    ``work`` must be a zero dense float64 vector of length >= n_features.
    """
    na = a_indptr.shape[0] - 1
    nsv = sv_indptr.shape[0] - 1
    for i in range(na):
        scatter_row(a_indptr, a_indices, a_data, i, work)
        sqi = a_sq[i]
        s = 0.0
        for j in range(nsv):
            c = coef[j]
            if c != 0.0:
                d = gather_dot(sv_indptr, sv_indices, sv_data, j, work)
                s += c * kernel_from_dot(code, d, sqi, sv_sq[j], gamma, degree, coef0)
        out[i] = s
        clear_row(a_indptr, a_indices, i, work)
    return out


@njit(cache=True, nogil=True)
def kernel_scores_csc(
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
    out,
):
    """Same as :func:`kernel_scores` with the SVs given transposed (CSC: for every feature,
    the SVs that have it), which is never more dot-product work and much less on sparse data.

    ``svt_indptr`` has n_features_sv + 1 entries (features beyond it have no SV entries);
    ``acc`` is a float64 scratch vector of length n_sv.
    """
    kernel_scores_csc_rows(
        a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
        code, gamma, degree, coef0, 0, a_indptr.shape[0] - 1, acc, out,
    )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def kernel_scores_csc_rows(
    a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
    code, gamma, degree, coef0, r0, r1, acc, out,
):  # fmt: skip
    """:func:`kernel_scores_csc` for the rows ``r0 .. r1 - 1`` of ``a`` (``acc``: scratch of
    length n_sv); the serial kernel and every chunk of the parallel one."""
    nsv = sv_sq.shape[0]
    nft = svt_indptr.shape[0] - 1
    for i in range(r0, r1):
        for j in range(nsv):
            acc[j] = 0.0
        for k in range(a_indptr[i], a_indptr[i + 1]):
            f = a_indices[k]
            if f < nft:
                v = float(a_data[k])
                for q in range(svt_indptr[f], svt_indptr[f + 1]):
                    acc[svt_indices[q]] += v * svt_data[q]
        sqi = a_sq[i]
        s = 0.0
        for j in range(nsv):
            s += coef[j] * kernel_from_dot(code, acc[j], sqi, sv_sq[j], gamma, degree, coef0)
        out[i] = s


@njit(cache=True, nogil=True)
def linear_scores(indptr, indices, data, w, out):
    """out[i] = x_i·w (dense w)."""
    n = indptr.shape[0] - 1
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += float(data[k]) * w[indices[k]]
        out[i] = s
    return out


# --------------------------------------------------------------------------------------------
# Python convenience
# --------------------------------------------------------------------------------------------
def csr_parts(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr int64, indices uint32 view, data) of a CSR matrix with sorted indices."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    if not X.has_sorted_indices:
        X = X.sorted_indices()
    indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(X.indices, dtype=np.int32).view(np.uint32)
    data = np.ascontiguousarray(X.data)
    if data.dtype not in (np.float32, np.float64):
        data = data.astype(np.float64)
    return indptr, indices, data


def sq_norms(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Squared row norms of a CSR block (float64)."""
    return row_sq_norms(indptr, indices, data, np.empty(indptr.shape[0] - 1, dtype=np.float64))


def kernel_matrix(
    X: Any,
    Y: Any,
    kernel: str = "rbf",
    gamma: float | None = None,
    degree: int = 3,
    coef0: float = 0.0,
) -> np.ndarray:
    """Dense kernel matrix K(X, Y), shape (n_X, n_Y), for scipy sparse (or dense) X, Y.

    ``gamma=None`` means 1 / n_features (n_features = the wider of X, Y).
    """
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    Y = sp.csr_matrix(Y)
    nf = max(X.shape[1], Y.shape[1])
    kp = KernelParams(kernel, resolve_gamma(gamma, nf), int(degree), float(coef0))
    ap = csr_parts(X)
    bp = csr_parts(Y)
    out = np.empty((X.shape[0], Y.shape[0]), dtype=np.float64)
    work = np.zeros(max(nf, 1), dtype=np.float64)
    return kernel_block(*ap, sq_norms(*ap), *bp, sq_norms(*bp), *kp.args(), work, out)


__all__ = [
    "KERNEL_CODES",
    "LINEAR",
    "POLY",
    "RBF",
    "SIGMOID",
    "KernelParams",
    "clear_row",
    "csr_parts",
    "gather_dot",
    "kernel_block",
    "kernel_code",
    "kernel_from_dot",
    "kernel_matrix",
    "kernel_row",
    "kernel_row_subset",
    "kernel_scores",
    "kernel_scores_csc",
    "linear_scores",
    "resolve_gamma",
    "row_sq_norms",
    "scatter_row",
    "sparse_dot",
    "sq_norms",
]
