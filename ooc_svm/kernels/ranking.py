"""Pairwise ranking over scores: the hinge loss over the pairs P = {(i, j): same group,
rᵢ > rⱼ} and the number of pairs, in O(n log n + n log R) with a Fenwick tree over rank
indices, never enumerating pairs (Joachims 2006, Algorithm 2). Shared by the ranking metrics
and perf's ordinal / ROC losses (its ``rank_cut`` keeps c⁺ and c⁻).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _fen_add(tree, i, v):
    i += 1
    n = tree.shape[0]
    while i < n:
        tree[i] += v
        i += i & (-i)


@njit(cache=True, nogil=True)
def _fen_prefix(tree, i):
    """Sum of entries 0..i-1."""
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    return s


@njit(cache=True, nogil=True)
def rank_sweep(order, s, r, starts, n_ranks, cplus, cminus, write):
    """The two Fenwick-tree sweeps of perf's ``rank_cut`` (``write``: store c⁺ and c⁻) and of
    :func:`rank_loss` (not stored)."""
    tree = np.zeros(n_ranks + 1, dtype=np.int64)
    n_groups = starts.shape[0] - 1
    viol = 0
    loss = 0.0
    for gi in range(n_groups):
        a = starts[gi]
        b = starts[gi + 1]
        if b - a < 2:
            if write:
                for t in range(a, b):
                    cplus[order[t]] = 0
                    cminus[order[t]] = 0
            continue
        # c⁺: sweep by decreasing score; items with s > sᵢ − 1 have been added
        tree[:] = 0
        p = a
        for t in range(a, b):
            i = order[t]
            thr = s[i] - 1.0
            while p < b and s[order[p]] > thr:
                _fen_add(tree, r[order[p]], 1)
                p += 1
            c = _fen_prefix(tree, r[i])
            if write:
                cplus[i] = c
            viol += c
            loss += c * (1.0 - s[i])
        # c⁻: sweep by increasing score; items with s − 1 < sⱼ have been added (the same
        # floating-point predicate as above, so Σc⁺ = Σc⁻ exactly)
        tree[:] = 0
        p = b - 1
        added = 0
        for t in range(b - 1, a - 1, -1):
            j = order[t]
            while p >= a and s[order[p]] - 1.0 < s[j]:
                _fen_add(tree, r[order[p]], 1)
                added += 1
                p -= 1
            c = added - _fen_prefix(tree, r[j] + 1)
            if write:
                cminus[j] = c
            loss += c * s[j]
    return viol, loss


@njit(cache=True, nogil=True)
def rank_loss(order, s, r, starts, n_ranks):
    """Σ_{(i,j)∈P} max(0, 1 − sᵢ + sⱼ) and the number of violated pairs (see perf's
    ``rank_cut``)."""
    none = np.zeros(0, dtype=np.int64)
    return rank_sweep(order, s, r, starts, n_ranks, none, none, False)


@njit(cache=True, nogil=True)
def count_pairs(order, r, starts, n_ranks):
    """m = |{(i, j) : same group, rᵢ > rⱼ}| (``order`` only needs to be grouped)."""
    counts = np.zeros(n_ranks, dtype=np.int64)
    m = 0
    for gi in range(starts.shape[0] - 1):
        counts[:] = 0
        for t in range(starts[gi], starts[gi + 1]):
            counts[r[order[t]]] += 1
        below = 0
        for q in range(n_ranks):
            m += counts[q] * below
            below += counts[q]
    return m
