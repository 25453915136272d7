"""Per-shard functions of smo's streamed passes (module level, picklable for Dask): apply α
updates, fetch rows, scan the rows outside the working set for violators, and its reduce."""

from __future__ import annotations

import numpy as np

from ..dual import WorkingRows, shard_rows
from ..reduce import none_is_identity


# ============================================================================================
# shard functions (module level: they run inside the engine, possibly in other processes)
# ============================================================================================
def _apply(shard, st, gids, vals):
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    if hi > lo:
        st = np.array(st, copy=True)
        st[gids[lo:hi] - shard.row_start] = vals[lo:hi]
    return st


def _fetch_shard_fn(shard, bc, st):
    """Apply pending α updates to this shard's state and return all its rows (Platt)."""
    gids, vals, positive = bc
    st = _apply(shard, st, gids, vals)
    rows = shard_rows(shard, np.arange(shard.n_rows), positive, st)
    return [rows], st


def _scan_fn(shard, bc, st):
    """wss2 decomposition pass: apply α updates, compute −yᵢGᵢ of every row outside W from
    the expansion, return (m_up, m_low, n_candidates, top-K violators with their rows)."""
    exp, gids, vals, w_gids, m_w, big_m_w, positive, C, top_k = bc
    st = _apply(shard, st, gids, vals)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    g = exp.scores(ip, shard.indices.view(np.uint32), shard.data)
    y = np.where(shard.y == positive, 1.0, -1.0)
    a = np.asarray(st)
    myg = y - g
    at0 = a <= 0
    atC = a >= C
    up = (~atC & (y > 0)) | (~at0 & (y < 0))
    low = (~atC & (y < 0)) | (~at0 & (y > 0))
    rid = np.arange(shard.row_start, shard.row_start + shard.n_rows)
    out = ~np.isin(rid, w_gids, assume_unique=True)
    upo = up & out
    lowo = low & out
    m_up = float(myg[upo].max()) if upo.any() else -np.inf
    m_low = float(myg[lowo].min()) if lowo.any() else np.inf
    v = np.full(a.size, -np.inf)
    v[upo] = myg[upo] - big_m_w
    v[lowo] = np.maximum(v[lowo], m_w - myg[lowo])
    cand = np.flatnonzero(v > 0)
    n_cand = int(cand.size)
    if cand.size > top_k:
        sel = np.argsort(-v[cand], kind="stable")[:top_k]
        cand = np.sort(cand[sel])
    part = None
    if cand.size:
        part = (v[cand], shard_rows(shard, cand, positive, st))
    return (m_up, m_low, n_cand, part, top_k), st


@none_is_identity
def _scan_reduce(p, q):
    parts = [x for x in (p[3], q[3]) if x is not None]
    top_k = p[4]
    if len(parts) == 2:
        v = np.concatenate([parts[0][0], parts[1][0]])
        rows = WorkingRows.concat([parts[0][1], parts[1][1]])
        if v.size > top_k:
            sel = np.sort(np.argsort(-v, kind="stable")[:top_k])
            v, rows = v[sel], rows.take(sel)
        merged: tuple[np.ndarray, WorkingRows] | None = (v, rows)
    else:
        merged = parts[0] if parts else None
    return (max(p[0], q[0]), min(p[1], q[1]), p[2] + q[2], merged, top_k)
