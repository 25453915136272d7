"""Kernel work on every core: numba ``prange`` versions of the kernel-block, kernel-column and
expansion kernels of :mod:`.kernel_functions`.

Results do not depend on the number of threads: every output entry is computed by one thread,
with the same operations in the same order as the serial kernels (no reduction is split
between threads), so a model is bit-identical whatever ``numba.get_num_threads()`` is.

Rows are split into chunks (a few per thread); each chunk scatters into its own dense
workspace when the feature width is at most :data:`WORK_MAX`, otherwise it merges the two
sorted sparse rows (:func:`merge_dot`, the same sum in the same order:
the rows' indices are sorted), so no workspace grows with the store's width.

Waiting threads sleep (``OMP_WAIT_POLICY=passive`` unless set: numba's OpenMP layer reads it
when its first parallel region starts). GNU OpenMP's default is to spin between regions: on
a loaded machine (a9a's smo on 2 cores, load 17) that made the 2-thread run cost 8× the CPU
time and 3× the wall time of the 1-thread one; passive threads cost nothing between regions.

Threads: a parallel kernel runs on ``numba.get_num_threads()`` threads of the calling thread.
:func:`thread_share` sets it for the calling thread from the CPUs this process may use,
divided among the threads that run kernel work at the same time (the engine's compute
threads running shards side by side), so shard-level and row-level parallelism do not
oversubscribe the cores. ``$OOC_SVM_KERNEL_THREADS`` caps it (1: the serial behaviour).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
from numba import njit, prange

from .csr import merge_dot as merge_span_dot
from .kernel_functions import (
    clear_row,
    gather_dot,
    kernel_from_dot,
    kernel_scores_csc_rows,
    scatter_row,
)

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

#: widths (features) up to this use a dense per-chunk workspace; wider rows are merged
WORK_MAX = 1 << 17
#: a parallel region is used when the work (non-zeros touched) is at least this
PAR_MIN_WORK = 30_000


# --------------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------------
_lock = threading.Lock()
_active = 0


#: a cap on the kernel threads of this process set by its host (a Dask worker: its own threads)
_CAP: list[int] = []


def cap_threads(n: int | None) -> None:
    """Cap the threads kernel work may use in this process (None: no cap); a Dask worker
    caps it at its own threads, so that workers sharing a host do not oversubscribe it."""
    _CAP[:] = [] if n is None else [max(1, int(n))]


def max_threads() -> int:
    """Threads kernel work may use in this process: numba's (the CPUs of the affinity mask at
    import), capped by ``$OOC_SVM_KERNEL_THREADS`` and by :func:`cap_threads`."""
    n = int(getattr(numba.config, "NUMBA_NUM_THREADS", 1))
    if _CAP:
        n = min(n, _CAP[0])
    env = os.environ.get("OOC_SVM_KERNEL_THREADS", "").strip()
    if env:
        try:
            n = min(n, max(1, int(env)))
        except ValueError:
            pass
    return max(1, n)


@contextmanager
def thread_share() -> Iterator[int]:
    """Set this thread's numba threads to its share of :func:`max_threads` (the CPUs divided
    among the threads inside ``thread_share`` at the same time); yields the number.

    Only speed depends on it: the parallel kernels give the same results for any number.
    """
    global _active
    with _lock:
        _active += 1
        k = _active
    n = max(1, max_threads() // k)
    prev = numba.get_num_threads()
    try:
        numba.set_num_threads(n)
        yield n
    finally:
        numba.set_num_threads(prev)
        with _lock:
            _active -= 1


#: chunks of a parallel region (numba's static schedule deals them out to the threads); fixed,
#: so the work split does not depend on the number of threads (nor does any result)
N_CHUNKS = 64


@njit(cache=True, nogil=True, inline="always")
def merge_dot(a_indptr, a_indices, a_data, i, b_indptr, b_indices, b_data, j):
    """a_i·b_j by merging two sorted sparse rows, in float64 and in b's order: the value of
    :func:`~.kernel_functions.gather_dot` of b_j against a scattered a_i, bit for bit (a
    product of two float32 values is exact in float64; the terms gather adds beyond the
    common features are zeros)."""
    # (a product of two numbers is the same in either order: csr.merge_dot's a·b is b·a)
    return merge_span_dot(
        a_indices, a_data, a_indptr[i], a_indptr[i + 1],
        b_indices, b_data, b_indptr[j], b_indptr[j + 1],
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _n_chunks(n, work):
    """Chunks for ``n`` items costing ``work`` in all: one (serial) when small."""
    if n <= 1 or work < PAR_MIN_WORK:
        return 1
    return min(n, N_CHUNKS)


# --------------------------------------------------------------------------------------------
# blocks and columns
# --------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _block_chunk(
    a_indptr, a_indices, a_data, a_sq, b_indptr, b_indices, b_data, b_sq,
    code, gamma, degree, coef0, width, j0, j1, out,
):  # fmt: skip
    na = a_indptr.shape[0] - 1
    if width <= WORK_MAX:
        work = np.zeros(max(width, 1))
        for i in range(na):
            scatter_row(a_indptr, a_indices, a_data, i, work)
            sqi = a_sq[i]
            j = j0
            while j + 4 <= j1:
                d0, d1, d2, d3 = gather_dot4(
                    b_indptr, b_indices, b_data, j, j + 1, j + 2, j + 3, work
                )
                out[i, j] = kernel_from_dot(code, d0, sqi, b_sq[j], gamma, degree, coef0)
                out[i, j + 1] = kernel_from_dot(code, d1, sqi, b_sq[j + 1], gamma, degree, coef0)
                out[i, j + 2] = kernel_from_dot(code, d2, sqi, b_sq[j + 2], gamma, degree, coef0)
                out[i, j + 3] = kernel_from_dot(code, d3, sqi, b_sq[j + 3], gamma, degree, coef0)
                j += 4
            for r in range(j, j1):
                d = gather_dot(b_indptr, b_indices, b_data, r, work)
                out[i, r] = kernel_from_dot(code, d, sqi, b_sq[r], gamma, degree, coef0)
            clear_row(a_indptr, a_indices, i, work)
    else:
        for i in range(na):
            sqi = a_sq[i]
            for j in range(j0, j1):
                d = merge_dot(a_indptr, a_indices, a_data, i, b_indptr, b_indices, b_data, j)
                out[i, j] = kernel_from_dot(code, d, sqi, b_sq[j], gamma, degree, coef0)


@njit(parallel=True, cache=True, nogil=True)
def kernel_block_par(
    a_indptr, a_indices, a_data, a_sq, b_indptr, b_indices, b_data, b_sq,
    code, gamma, degree, coef0, width, out,
):  # fmt: skip
    """out[i, j] = K(a_i, b_j) (shape (n_a, n_b)) on all threads; returns ``out``.

    ``width`` must exceed every column index of a and b. Same values as
    :func:`~.kernel_functions.kernel_block` (bit for bit).
    """
    nb = b_indptr.shape[0] - 1
    na = a_indptr.shape[0] - 1
    nnz_b = b_indptr[nb] - b_indptr[0]
    nc = _n_chunks(nb, na * (nnz_b + nb))
    if nc == 1:
        _block_chunk(
            a_indptr, a_indices, a_data, a_sq, b_indptr, b_indices, b_data, b_sq,
            code, gamma, degree, coef0, width, 0, nb, out,
        )  # fmt: skip
        return out
    for c in prange(nc):
        _block_chunk(
            a_indptr, a_indices, a_data, a_sq, b_indptr, b_indices, b_data, b_sq,
            code, gamma, degree, coef0, width, c * nb // nc, (c + 1) * nb // nc, out,
        )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def gather_dot4(indptr, indices, data, k0, k1, k2, k3, work):
    """:func:`~.kernel_functions.gather_dot` of four rows at once: each row's sum in its own
    order (the same values bit for bit), the four dependency chains interleaved so the
    additions' latency overlaps (about twice the throughput of four separate calls)."""
    a0, a1, a2, a3 = indptr[k0], indptr[k1], indptr[k2], indptr[k3]
    l0, l1 = indptr[k0 + 1] - a0, indptr[k1 + 1] - a1
    l2, l3 = indptr[k2 + 1] - a2, indptr[k3 + 1] - a3
    m = min(min(l0, l1), min(l2, l3))
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for j in range(m):
        s0 += float(data[a0 + j]) * work[indices[a0 + j]]
        s1 += float(data[a1 + j]) * work[indices[a1 + j]]
        s2 += float(data[a2 + j]) * work[indices[a2 + j]]
        s3 += float(data[a3 + j]) * work[indices[a3 + j]]
    for j in range(m, l0):
        s0 += float(data[a0 + j]) * work[indices[a0 + j]]
    for j in range(m, l1):
        s1 += float(data[a1 + j]) * work[indices[a1 + j]]
    for j in range(m, l2):
        s2 += float(data[a2 + j]) * work[indices[a2 + j]]
    for j in range(m, l3):
        s3 += float(data[a3 + j]) * work[indices[a3 + j]]
    return s0, s1, s2, s3


@njit(cache=True, nogil=True)
def _column_chunk(i, t0, t1, order, X, kp, col, with_y, width):
    indptr, indices, data, sq, y = X
    code, gamma, degree, coef0 = kp
    sqi = sq[i]
    yi = y[i]
    if width <= WORK_MAX:
        work = np.zeros(max(width, 1))
        scatter_row(indptr, indices, data, i, work)
        t = t0
        while t + 4 <= t1:
            k0, k1, k2, k3 = order[t], order[t + 1], order[t + 2], order[t + 3]
            d0, d1, d2, d3 = gather_dot4(indptr, indices, data, k0, k1, k2, k3, work)
            v0 = kernel_from_dot(code, d0, sqi, sq[k0], gamma, degree, coef0)
            v1 = kernel_from_dot(code, d1, sqi, sq[k1], gamma, degree, coef0)
            v2 = kernel_from_dot(code, d2, sqi, sq[k2], gamma, degree, coef0)
            v3 = kernel_from_dot(code, d3, sqi, sq[k3], gamma, degree, coef0)
            col[k0] = yi * y[k0] * v0 if with_y else v0
            col[k1] = yi * y[k1] * v1 if with_y else v1
            col[k2] = yi * y[k2] * v2 if with_y else v2
            col[k3] = yi * y[k3] * v3 if with_y else v3
            t += 4
        for r in range(t, t1):
            k = order[r]
            d = gather_dot(indptr, indices, data, k, work)
            v = kernel_from_dot(code, d, sqi, sq[k], gamma, degree, coef0)
            col[k] = yi * y[k] * v if with_y else v
    else:
        for t in range(t0, t1):
            k = order[t]
            d = merge_dot(indptr, indices, data, i, indptr, indices, data, k)
            v = kernel_from_dot(code, d, sqi, sq[k], gamma, degree, coef0)
            col[k] = yi * y[k] * v if with_y else v


@njit(parallel=True, cache=True, nogil=True)
def column_par(i, have, need, order, X, kp, col, with_y, width):
    """col[k] = (y_i y_k) K(x_i, x_k) (or K) for k in order[have:need], on all threads.

    ``X`` = (indptr, indices, data, sq, y) of in-memory rows; ``width`` exceeds their column
    indices. Each entry is computed as the serial column of :mod:`ooc_svm.solvers.smo`.
    """
    n = need - have
    indptr = X[0]
    m = indptr.shape[0] - 1
    avg = (indptr[m] - indptr[0]) // max(m, 1) + 1
    nc = _n_chunks(n, n * avg)
    if nc == 1:
        _column_chunk(i, have, need, order, X, kp, col, with_y, width)
        return col
    for c in prange(nc):
        _column_chunk(
            i, have + c * n // nc, have + (c + 1) * n // nc, order, X, kp, col, with_y, width
        )
    return col


# --------------------------------------------------------------------------------------------
# expansions: Σ_j coef_j K(x_i, sv_j) for many rows
# --------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _scores_csc_chunk(
    a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
    code, gamma, degree, coef0, r0, r1, out,
):  # fmt: skip
    kernel_scores_csc_rows(
        a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
        code, gamma, degree, coef0, r0, r1, np.empty(sv_sq.shape[0]), out,
    )  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def kernel_scores_csc_par(
    a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
    code, gamma, degree, coef0, out,
):  # fmt: skip
    """:func:`~.kernel_functions.kernel_scores_csc` on all threads (the same values)."""
    na = a_indptr.shape[0] - 1
    nsv = sv_sq.shape[0]
    nnz = a_indptr[na] - a_indptr[0]
    nc = _n_chunks(na, nnz * 4 + na * nsv)
    if nc == 1:
        _scores_csc_chunk(
            a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
            code, gamma, degree, coef0, 0, na, out,
        )  # fmt: skip
        return out
    for c in prange(nc):
        _scores_csc_chunk(
            a_indptr, a_indices, a_data, a_sq, svt_indptr, svt_indices, svt_data, sv_sq, coef,
            code, gamma, degree, coef0, c * na // nc, (c + 1) * na // nc, out,
        )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def dense_row_dots(indptr, indices, data, i, Dt, buf):
    """buf[:] = x_i · Dt (row i of CSR rows, Dt dense, n_features × m)."""
    m = Dt.shape[1]
    for j in range(m):
        buf[j] = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        v = float(data[k])
        row = Dt[indices[k]]
        for j in range(m):
            buf[j] += v * row[j]


@njit(cache=True, nogil=True)
def _dense_exp_chunk(indptr, indices, data, sq, Dt, dsq, coef, code, gamma, degree, coef0, r0, r1,
                     out):  # fmt: skip
    m = Dt.shape[1]
    buf = np.empty(m)
    for i in range(r0, r1):
        dense_row_dots(indptr, indices, data, i, Dt, buf)
        sqi = sq[i]
        s = 0.0
        for j in range(m):
            s += coef[j] * kernel_from_dot(code, buf[j], sqi, dsq[j], gamma, degree, coef0)
        out[i] += s


@njit(parallel=True, cache=True, nogil=True)
def dense_expansion_add_par(indptr, indices, data, sq, Dt, dsq, coef, code, gamma, degree, coef0,
                            out):  # fmt: skip
    """out[i] += Σ_j coef_j K(x_i, d_j) for CSR rows x and dense expansion rows Dt
    (n_features, m), on all threads (each row summed in j order by one thread)."""
    n = indptr.shape[0] - 1
    m = Dt.shape[1]
    nnz = indptr[n] - indptr[0]
    nc = _n_chunks(n, (nnz + n) * m)
    if nc == 1:
        _dense_exp_chunk(indptr, indices, data, sq, Dt, dsq, coef, code, gamma, degree, coef0,
                         0, n, out)  # fmt: skip
        return out
    for c in prange(nc):
        _dense_exp_chunk(indptr, indices, data, sq, Dt, dsq, coef, code, gamma, degree, coef0,
                         c * n // nc, (c + 1) * n // nc, out)  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def gradient_rows_range(Qt, rows, p, delta, Gbase, G, t0, t1):
    """G[r] = Gbase[r] + Qt[r, :p]·delta for r in rows[t0:t1], on this thread (the operations
    of :func:`gradient_rows_par` for each row)."""
    d = delta[:p]
    for t in range(t0, t1):
        r = rows[t]
        G[r] = Gbase[r] + (np.dot(Qt[r, :p], d) if p > 0 else 0.0)


@njit(parallel=True, cache=True, nogil=True)
def gradient_rows_par(Qt, rows, p, delta, Gbase, G):
    """G[r] = Gbase[r] + Qt[r, :p]·delta for the listed rows, on all threads (one thread per
    row: the same dot products as the serial loop)."""
    n = rows.shape[0]
    nc = _n_chunks(n, n * p)
    if nc == 1:
        gradient_rows_range(Qt, rows, p, delta, Gbase, G, 0, n)
        return G
    for c in prange(nc):
        gradient_rows_range(Qt, rows, p, delta, Gbase, G, c * n // nc, (c + 1) * n // nc)
    return G


__all__ = [
    "N_CHUNKS",
    "PAR_MIN_WORK",
    "WORK_MAX",
    "column_par",
    "dense_expansion_add_par",
    "gradient_rows_par",
    "gradient_rows_range",
    "kernel_block_par",
    "kernel_scores_csc_par",
    "max_threads",
    "thread_share",
]
