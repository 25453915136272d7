"""The numba kernels of ``--variant svmperf`` (:mod:`..svmperf`): the full and the partial
rounds over a shard's rows, with SVMperf 3.00's per-row slack statistics."""

from __future__ import annotations

import math

from numba import njit


@njit(cache=True, nogil=True)
def _stats(mean, var, conf, i, d):
    var[i] = 0.5 * var[i] + 0.5 * (mean[i] - d) * (mean[i] - d)
    mean[i] = 0.5 * mean[i] + 0.5 * d
    conf[i] = abs(mean[i]) - math.sqrt(var[i])


@njit(cache=True, nogil=True)
def full_round(indptr, indices, gidx, data, y, pos, w, tb, bias, g, bias_slot, inv_n, st, out):
    """Full round on one shard: scores every row, accumulates the most violated cut
    Σ_{mᵢ<1} yᵢx̃ᵢ into ``g`` and updates the statistics ``st`` = (mean, var) rows.

    ``out`` (2, n) receives conf and cᵢ. Returns (count, hinge).
    """
    n = indptr.shape[0] - 1
    count = 0
    hinge = 0.0
    mean = st[0]
    var = st[1]
    conf = out[0]
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * w[indices[k]]
        yi = 1.0 if y[i] == pos else -1.0
        m = yi * (s + tb)
        out[1, i] = 0.0
        if m < 1.0:
            out[1, i] = 1.0
            count += 1
            hinge += 1.0 - m
            for k in range(indptr[i], indptr[i + 1]):
                g[gidx[k]] += yi * data[k]
            g[bias_slot] += yi * bias
        _stats(mean, var, conf, i, (1.0 - m) * inv_n)
    return count, hinge


@njit(cache=True, nogil=True)
def partial_round(indptr, indices, data, ys, w, tb, bias, inv_n, c, mean, var, conf, dg):
    """Partial round over the rows of S with conf < 0: flipped rows add (c_new − c_old)·yᵢx̃ᵢ
    to ``dg`` (bias at ``dg[-1]``). Returns (change of Σcᵢ, rows scored)."""
    dc = 0
    checked = 0
    last = dg.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        if conf[i] >= 0.0:
            continue
        checked += 1
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * w[indices[k]]
        m = ys[i] * (s + tb)
        new = 1.0 if m < 1.0 else 0.0
        if new != c[i]:
            f = (new - c[i]) * ys[i]
            for k in range(indptr[i], indptr[i + 1]):
                dg[indices[k]] += f * data[k]
            dg[last] += f * bias
            dc += 1 if new > c[i] else -1
            c[i] = new
        _stats(mean, var, conf, i, (1.0 - m) * inv_n)
    return dc, checked


# ------------------------------------------------------------------------------------------
# the set S of rows kept in memory (bounded, deterministic)
# ------------------------------------------------------------------------------------------
