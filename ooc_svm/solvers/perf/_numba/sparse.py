"""Kernels of perf at any width: sparse cutting planes and the segment w_b → w_c without
temporaries of the features' length (``ooc_svm.solvers.perf.working_set``, ``.error``)."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def segment_terms(wb, wc):
    """(‖w_c − w_b‖², w_b·(w_c − w_b)) without forming w_c − w_b."""
    a2 = 0.0
    a1 = 0.0
    for i in range(wb.shape[0]):
        d = wc[i] - wb[i]
        a2 += d * d
        a1 += wb[i] * d
    return a2, a1


@njit(cache=True, nogil=True)
def step_towards(wb, wc, k):
    """w_b ← w_b + k (w_c − w_b), in place (the line search's move of the best point)."""
    for i in range(wb.shape[0]):
        wb[i] = wb[i] + k * (wc[i] - wb[i])


@njit(cache=True, nogil=True)
def scatter_add(out, idx, vals, a):
    """out[idx] += a · vals."""
    for t in range(idx.shape[0]):
        out[idx[t]] += a * vals[t]


@njit(cache=True, nogil=True)
def axpy(out, v, a):
    """out += a · v (no temporary of v's length)."""
    for i in range(out.shape[0]):
        out[i] += a * v[i]


@njit(cache=True, nogil=True)
def sq_norm(v):
    """Σ vᵢ² in float64, in index order (as ``vdot(v, v)``)."""
    s = 0.0
    for i in range(v.shape[0]):
        s += float(v[i]) * v[i]
    return s
