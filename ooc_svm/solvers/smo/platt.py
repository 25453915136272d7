"""smo ``--selection platt``: Platt 1998, section 2 as written (pseudo-code of section 2.5).

Analytic two-variable step with clipping (eqs. 13–18), η ≤ 0 by the objective at both ends
(eq. 19), threshold update (eqs. 20–21), first choice alternating one pass over all examples
with passes over the non-bound ones, second choice max |E₁−E₂| over the non-bound error cache,
then the non-bound set and then "all examples" from seeded random starts, explicit w for the
linear kernel (eq. 22). Out of core: a pass over all examples is a streamed pass, one shard at
a time, brought to this process; in memory are the non-bound rows with their error cache,
every support vector (kernel; linear: only w) and the kernel cache. E for a shard row is
computed when its shard arrives (from the SV expansion, or w) and kept exact by the same
incremental updates as the error cache.

Deviation (documented): "all examples from a random start" loops over the rows in memory
(non-bound rows, support vectors, and the current shard during an all-examples pass), not the
whole store. No checkpoints; the numba loops run in ~0.05 s slices (Ctrl-C acts between).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from ...engine.base import concat_partials
from ..dual import (
    Expansion,
    WorkingRows,
    apply_alpha_updates,
    kkt_violation_pass,
    make_expansion,
)
from ._numba.platt import _platt_examine_list, _platt_nonbound_range
from .common import _cache_for, _kernel_tuple, _x_tuple
from .passes import _fetch_shard_fn
from .working_set import _Slicer

log = logging.getLogger(__name__)

#: Platt: how many times a failed final KKT check restarts the examine-all passes.
MAX_PLATT_CHECKS = 20


class _PlattMemory:
    """The rows Platt's SMO keeps in memory between shards: the pool (non-bound rows; for
    kernels every SV), its error cache and which α values the shard state already has."""

    def __init__(self, nf: int, linear: bool):
        self.rows = WorkingRows.empty()
        self.E = np.zeros(0)
        self.tracked = np.zeros(0, dtype=bool)
        self.a_state = np.zeros(0)
        self.linear = linear
        self.w = np.zeros(max(nf, 1))
        self.pending: dict[int, float] = {}


@dataclass
class _PlattLoop:
    """Counters of Platt's outer loop (examine-all / non-bound passes, final KKT checks)."""

    steps: int = 0  # SMO steps so far
    outer: int = 0
    num_changed: int = 0
    examine_all: bool = True
    full_passes: int = 0
    checks: int = 0  # final KKT checks that sent the loop back to examine-all
    kkt: dict | None = None
    last_gap: float = np.inf
    cache_stats: dict = field(default_factory=lambda: {"hits": 0, "misses": 0, "evictions": 0})

    def running(self, max_iter: int) -> bool:
        return (self.num_changed > 0 or self.examine_all) and self.steps < max_iter


def _solve_platt(store, engine, state, p, C, tol, kp, pos, report):
    nf = store.meta.n_features
    mem = _PlattMemory(nf, kp.kernel == "linear")
    fs = np.zeros(1)  # b
    rs = np.array([np.uint64(int(p.seed) & 0xFFFFFFFFFFFFFFFF)], dtype=np.uint64)
    ks = (_kernel_tuple(kp), kp, fs, rs)
    max_iter = int(p.max_iter)
    lp = _PlattLoop()
    while lp.running(max_iter):
        lp.outer += 1
        t1 = time.perf_counter()
        was_all = lp.examine_all
        _platt_outer_pass(store, engine, state, mem, ks, p, C, tol, pos, max_iter, lp)
        n_nb = int(((mem.rows.alpha > 0) & (mem.rows.alpha < C)).sum())
        report(
            {
                "iteration": lp.outer,
                "examine_all": was_all,
                "changed": int(lp.num_changed),
                "smo_iterations": lp.steps,
                "working_set": n_nb,
                "pass_seconds": time.perf_counter() - t1,
                "passes": lp.full_passes,
            }
        )
        if not (lp.num_changed > 0 or lp.examine_all):
            _platt_final_check(store, engine, state, mem, kp, fs, C, pos, tol, lp)
    if lp.steps >= max_iter:
        log.warning("smo: iteration limit %d reached", max_iter)
    _platt_flush(store, engine, state, mem)
    return _platt_result(mem, lp, fs, max_iter, nf)


def _platt_outer_pass(store, engine, state, mem, ks, p, C, tol, pos, max_iter, lp: _PlattLoop):
    """One pass of Platt's outer loop: over all examples (streamed) or over the non-bound
    rows in memory; then alternate as Platt does."""
    kt, kp, fs, rs = ks
    nf = store.meta.n_features
    lp.num_changed = 0
    if lp.examine_all:
        lp.full_passes += 1
        nc, st = _platt_examine_all(
            store, engine, state, mem, ks, p, pos, max_iter - lp.steps, lp.cache_stats
        )
    else:
        nc, st, cs = _platt_shard(mem, None, kt, kp, fs, rs, C, tol, p, max_iter - lp.steps, nf)
        for k in lp.cache_stats:
            lp.cache_stats[k] += cs[k]
    lp.num_changed += nc
    lp.steps += st
    if lp.examine_all:
        lp.examine_all = False
    elif lp.num_changed == 0:
        lp.examine_all = True


def _platt_final_check(store, engine, state, mem, kp, fs, C, pos, tol, lp: _PlattLoop) -> None:
    """Platt's loop has ended: confirm with an independent pass before stopping (a failed
    check sends the loop back to examine-all, at most :data:`MAX_PLATT_CHECKS` times)."""
    _platt_flush(store, engine, state, mem)
    exp = _platt_expansion(mem, kp, store.meta.n_features)
    lp.kkt = kkt = kkt_violation_pass(store, engine, state, exp, -fs[0], C, pos, tol)
    lp.full_passes += 1
    lp.last_gap = kkt["max_violation"]
    if not kkt["ok"] and lp.checks < MAX_PLATT_CHECKS:
        lp.checks += 1
        log.info(
            "smo/platt: KKT check found violation %.3g; more examine-all passes",
            kkt["max_violation"],
        )
        lp.examine_all = True


def _platt_result(mem: _PlattMemory, lp: _PlattLoop, fs, max_iter: int, nf: int):
    """(SV rows, intercept, steps, extra, None) of the finished loop."""
    extra = {
        "outer_iterations": lp.outer,
        "stop_value": float(lp.last_gap),
        "working_rows": int(mem.rows.n),
        "cache_hits": lp.cache_stats["hits"],
        "cache_misses": lp.cache_stats["misses"],
        "cache_evictions": lp.cache_stats["evictions"],
        "in_memory": False,
        "status": "optimal" if lp.steps < max_iter else "max_iter",
        "passes": lp.full_passes,
        "examine_all_checks": lp.checks,
    }
    if lp.kkt is not None and lp.steps < max_iter:
        extra["kkt"] = lp.kkt
    if mem.linear:
        extra["w"] = mem.w[:nf].copy()
    sv = mem.rows.take(np.flatnonzero(mem.rows.alpha > 0))
    return sv, -float(fs[0]), lp.steps, extra, None


def _platt_examine_all(store, engine, state, mem, ks, p, pos, step_budget, cache_stats):
    """One pass over all examples, one shard at a time (pending α updates go to the shard's
    state as it is read). Returns (changed, steps)."""
    kt, kp, fs, rs = ks
    nf = store.meta.n_features
    starts = np.array([s.row_start for s in store.meta.shards] + [store.meta.n_rows])
    changed = steps = 0
    for sid in range(store.n_shards):
        if steps >= step_budget:
            break
        lo, hi = starts[sid], starts[sid + 1]
        pend = {g: a for g, a in mem.pending.items() if lo <= g < hi}
        for g in pend:
            del mem.pending[g]
        pg = np.array(sorted(pend), dtype=np.int64)
        pv = np.array([pend[g] for g in pg], dtype=np.float64)
        parts = engine.map_reduce(
            store,
            _fetch_shard_fn,
            (pg, pv, float(pos)),
            reduce=concat_partials,
            state=state,
            shards=[sid],
        )
        shard = WorkingRows.concat(parts or [])
        nc, st, cs = _platt_shard(
            mem, shard, kt, kp, fs, rs, p.C, p.tol, p, step_budget - steps, nf
        )
        changed += nc
        steps += st
        for k in cache_stats:
            cache_stats[k] += cs[k]
    return changed, steps


def _platt_expansion(mem: _PlattMemory, kp, nf) -> Expansion:
    if mem.linear:
        return Expansion(kp, nf, w=mem.w[:nf].copy())
    sv = mem.rows.take(np.flatnonzero(mem.rows.alpha > 0))
    return make_expansion(kp, nf, sv, sv.y * sv.alpha)


def _platt_flush(store, engine, state, mem: _PlattMemory) -> None:
    """Write every α the shard state does not have yet (pending + rows in memory)."""
    g = list(mem.pending)
    a = [mem.pending[k] for k in g]
    mem.pending.clear()
    ch = np.flatnonzero(mem.rows.alpha != mem.a_state)
    g_all = np.concatenate([np.asarray(g, dtype=np.int64), mem.rows.gids[ch]])
    a_all = np.concatenate([np.asarray(a, dtype=np.float64), mem.rows.alpha[ch]])
    apply_alpha_updates(store, engine, state, g_all, a_all)
    mem.a_state = mem.rows.alpha.copy()


def _platt_shard(
    mem: _PlattMemory, shard: WorkingRows | None, kt, kp, fs, rs, C, tol, p, step_budget, nf
):
    """Examine the rows of one shard (examine-all pass) or the non-bound rows (shard None)
    with the rows in memory; update the pool. Returns (changed, steps, cache stats)."""
    pool = mem.rows
    if shard is not None:
        in_pool = np.isin(shard.gids, pool.gids)
        new = shard.take(np.flatnonzero(~in_pool))
        rows = WorkingRows.concat([pool, new])
        pos_of = {int(g): k for k, g in enumerate(rows.gids)}
        order = np.array([pos_of[int(g)] for g in shard.gids], dtype=np.int64)
        # E for every row of the shard from the current expansion (or w); they join the
        # error cache for the time the shard is in memory
        exp = _platt_expansion(mem, kp, nf)
        E = np.concatenate([mem.E, np.zeros(new.n)])
        E[order] = exp.scores(*shard.csr()) - fs[0] - shard.y
        tracked = np.concatenate([(pool.alpha > 0) & (pool.alpha < C), np.zeros(new.n, dtype=bool)])
        tracked[order] = True
        a_state = np.concatenate([mem.a_state, new.alpha])
    else:
        rows = pool
        E = mem.E.copy()
        tracked = (pool.alpha > 0) & (pool.alpha < C)
        a_state = mem.a_state
        order = None
    m = rows.n
    if m == 0:
        return 0, 0, {"hits": 0, "misses": 0, "evictions": 0}
    # E of untracked rows is not maintained: mark it unknown
    E = np.where(tracked, E, 0.0)
    tlist = np.zeros(m, dtype=np.int64)
    nt = int(tracked.sum())
    tlist[:nt] = np.flatnonzero(tracked)
    ist = np.array([nt, 0, 0, max(0, int(step_budget))], dtype=np.int64)
    X = _x_tuple(rows)
    sc = _cache_for(float(p.cache_mb), m)
    work = np.zeros(max(nf, int(rows.indices.max()) + 1 if rows.indices.size else 1))
    w = mem.w if mem.linear else np.zeros(1)
    if mem.linear and w.shape[0] < work.shape[0]:
        w = np.concatenate([w, np.zeros(work.shape[0] - w.shape[0])])
    alpha = rows.alpha  # updated in place
    if order is not None:
        args = (X, kt, sc.arrays(), work, alpha, E, tracked, tlist, fs, ist, w, mem.linear, C)
        changed = _platt_sliced_examine(order, args + (tol, rs))
    else:
        args = (X, kt, sc.arrays(), work, alpha, E, tracked, tlist, fs, ist, w, mem.linear, C)
        changed = _platt_sliced_nonbound(m, args + (tol, rs))
    mem.w = w
    # new pool: non-bound rows, plus (kernel) every SV
    if mem.linear:
        keep = (alpha > 0) & (alpha < C)
    else:
        keep = alpha > 0
    leave = np.flatnonzero(~keep & (alpha != a_state))
    for g, a in zip(rows.gids[leave].tolist(), alpha[leave].tolist(), strict=True):
        mem.pending[g] = a
    k_idx = np.flatnonzero(keep)
    mem.rows = rows.take(k_idx)
    mem.E = E[k_idx]
    mem.a_state = a_state[k_idx]
    return int(changed), int(ist[2]), sc.stats_dict()


def _platt_sliced_examine(order: np.ndarray, args: tuple) -> int:
    """:func:`_platt_examine_list` over ``order`` in slices of ~0.05 s (Ctrl-C is seen
    between them; the same steps as one call)."""
    sl = _Slicer(8)
    changed, lo = 0, 0
    while lo < order.shape[0]:
        hi = min(order.shape[0], lo + sl.budget)
        changed += _platt_examine_list(order[lo:hi], *args)
        sl.adapt()
        lo = hi
    return changed


def _platt_sliced_nonbound(m: int, args: tuple) -> int:
    """Platt's inner loop (passes over the non-bound rows until one changes nothing) in
    slices of ~0.05 s; the same steps as one call. Returns the number of changes."""
    ist = args[9]
    sl = _Slicer(8)
    total = 0
    while True:
        changed, lo = 0, 0
        while lo < m:
            hi = min(m, lo + sl.budget)
            changed += _platt_nonbound_range(lo, hi, *args)
            sl.adapt()
            lo = hi
        total += changed
        if changed == 0 or ist[2] >= ist[3]:
            return total
