"""Structural validation of one CSR shard before any other kernel touches it.

Kernels index dense vectors with ``indices`` and walk rows with ``indptr`` without bounds
checks, so a shard read from disk is checked once here: ``indptr`` starts at 0, never
decreases and ends at ``nnz``; every index is in ``[0, n_features)``; every value and label
is finite. One pass over the arrays, no allocation, GIL released.

:func:`check_csr` hands the kernel read-only views of the arrays, so one compiled (and
cached) version serves every store: numba types a read-only array apart from a writable one,
and shards arrive both ways (lz4 and zstd Zarr chunks decode into writable arrays,
uncompressed Zarr chunks and Parquet columns are read-only), which compiled the check once
per combination, seconds each on the first read of a new kind of store.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: result codes of :func:`check_csr` (0 = valid)
OK = 0
BAD_INDPTR_START = 1
BAD_INDPTR_ORDER = 2
BAD_INDPTR_END = 3
BAD_INDEX = 4
BAD_VALUE = 5
BAD_LABEL = 6
BAD_QID = 7

MESSAGES = {
    BAD_INDPTR_START: "indptr does not start at 0",
    BAD_INDPTR_ORDER: "indptr decreases or runs past nnz at row {pos}",
    BAD_INDPTR_END: "indptr does not end at nnz",
    BAD_INDEX: "feature index out of range at entry {pos}",
    BAD_VALUE: "non-finite feature value at entry {pos}",
    BAD_LABEL: "non-finite label at row {pos}",
}


def check_csr(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, y: np.ndarray, n_features: int
) -> tuple[int, int]:
    """Check a CSR shard; return ``(code, position)`` with code 0 when it is valid.

    Parameters
    ----------
    indptr : ndarray of int64, shape (n_rows + 1,)
    indices : ndarray of int32, shape (nnz,)
    data : ndarray of float32, shape (nnz,)
    y : ndarray of float64, shape (n_rows,)
    n_features : int
        Every index must be in ``[0, n_features)``.

    Returns
    -------
    code : int
        One of the ``BAD_*`` constants, or 0.
    position : int
        Row or entry where the first problem was found.
    """
    code, pos = _check_csr(
        _readonly(indptr), _readonly(indices), _readonly(data), _readonly(y), int(n_features)
    )
    return int(code), int(pos)


def check_labels(y: np.ndarray, labels: np.ndarray) -> int:
    """Row of the first label not in ``labels`` (sorted, float64), or -1 when all are.

    The store metadata's ``labels`` decide the classes a solver trains (binary +1/-1, the
    classes of one-vs-rest); a shard whose ``y`` holds other values means the metadata was
    edited or does not belong to these shards.
    """
    return int(_check_labels(_readonly(y), _readonly(np.asarray(labels, dtype=np.float64))))


@njit(cache=True, nogil=True)
def _check_labels(y, labels):
    """:func:`check_labels` on read-only C-contiguous arrays (binary search per row)."""
    k = labels.shape[0]
    for r in range(y.shape[0]):
        v = y[r]
        lo = 0
        hi = k
        while lo < hi:
            mid = (lo + hi) >> 1
            if labels[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        if lo == k or labels[lo] != v:
            return r
    return -1


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only, C-contiguous view of ``a`` (a copy only if ``a`` is not contiguous)."""
    v = np.ascontiguousarray(a).view()
    v.flags.writeable = False
    return v


@njit(cache=True, nogil=True)
def _check_csr(indptr, indices, data, y, n_features):
    """:func:`check_csr` on read-only C-contiguous arrays (one signature for every store)."""
    n = indptr.shape[0] - 1
    nnz = indices.shape[0]
    if n < 0 or indptr[0] != 0:
        return 1, 0
    prev = 0
    for r in range(n):
        b = indptr[r + 1]
        if b < prev or b > nnz:
            return 2, r
        prev = b
    if indptr[n] != nnz or data.shape[0] != nnz:
        return 3, n
    # branch-free first pass (vectorises): an index as uint32 is >= n_features when it is out
    # of range or negative; a float32 is NaN or infinite when its exponent bits are all ones
    ui = indices.view(np.uint32)
    bits = data.view(np.uint32)
    nf = np.uint32(min(n_features, 0xFFFFFFFF))
    bad = 0
    for k in range(nnz):
        bad |= (ui[k] >= nf) | ((bits[k] & np.uint32(0x7F800000)) == np.uint32(0x7F800000))
    if bad:
        for k in range(nnz):
            j = indices[k]
            if j < 0 or j >= n_features:
                return 4, k
            if not np.isfinite(data[k]):
                return 5, k
    for r in range(y.shape[0]):
        if not np.isfinite(y[r]):
            return 6, r
    return 0, 0
