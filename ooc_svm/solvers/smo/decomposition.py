"""smo wss2 out of core: decomposition over a working set W within the memory budget.

Solve the subproblem on W (rows outside fixed, :func:`.wss2._run_wss2`); a streamed pass
computes the gradient of every other row from the SV expansion (or w) and stops when the
maximal violating pair over ALL rows satisfies m(α) − M(α) ≤ tol, else brings the most
violating rows into W (evicting α = 0 rows that are not violating; bound SVs are folded into
w or a fixed in-memory expansion). A checkpoint after every outer step holds W, G, the fixed
part and every shard's α.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from .. import SolverError
from ..dual_common import Expansion, WorkingRows, fetch_rows, make_expansion, primal_w
from .common import _scan_fn, _scan_reduce
from .kernels import _rho_and_gap
from .wss2 import _run_wss2

log = logging.getLogger(__name__)


def _fetch_in_order(store, engine, pos, gids: np.ndarray, alpha: np.ndarray) -> WorkingRows:
    """The rows ``gids`` (in this order) with the given α."""
    if gids.size == 0:
        return WorkingRows.empty()
    rows = fetch_rows(store, engine, gids, pos)
    rows = rows.take(np.searchsorted(rows.gids, gids))
    rows.alpha[:] = alpha
    return rows


def _decomposition_save(checkpoint, engine, state, outer, W, G, F, w_fixed, ev, scalars):
    """Checkpoint of the decomposition between two outer iterations: W, its G, the fixed
    part (F or w), the evictions not yet applied, every shard's α."""
    ev_g = np.concatenate([np.zeros(0, dtype=np.int64)] + ev[0])
    ev_a = np.concatenate([np.zeros(0)] + ev[1])
    checkpoint.save(
        outer,
        scalars=scalars,
        arrays={
            "W_gids": W.gids,
            "W_alpha": W.alpha,
            "G": G,
            "F_gids": F.gids,
            "F_alpha": F.alpha,
            "w_fixed": w_fixed,
            "ev_g": ev_g,
            "ev_a": ev_a,
        },
        shard_states=[{"alpha": np.asarray(a)} for a in engine.gather_state(state)],
    )


def _decomposition_load(checkpoint, store, engine, pos):
    """(state, scalars, W, G, F, w_fixed, evicted) from the latest checkpoint, or None."""
    data = checkpoint.load()
    if data is None:
        return None
    a = data.arrays
    if "W_gids" not in a or data.shard_states is None:
        raise SolverError(
            f"{checkpoint.directory}: checkpoint of the in-memory smo solver; the out-of-core "
            "decomposition cannot resume from it (same --working-mb / --working-rows?)"
        )
    state = engine.set_state(store, [st["alpha"] for st in data.shard_states])
    W = _fetch_in_order(store, engine, pos, a["W_gids"], a["W_alpha"])
    F = _fetch_in_order(store, engine, pos, a["F_gids"], a["F_alpha"])
    ev = ([a["ev_g"]], [a["ev_a"]]) if a["ev_g"].size else ([], [])
    log.info("smo: resuming the decomposition after outer iteration %d", data.iteration)
    return state, data.scalars, W, a["G"].copy(), F, a["w_fixed"].copy(), ev


def _solve_wss2_decomposition(
    store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint=None
):
    n = store.meta.n_rows
    nf = store.meta.n_features
    linear = kp.kernel == "linear"
    rng = np.random.default_rng(int(p.seed))
    max_iter = int(p.max_iter)
    top_k = max(1, budget // 4)
    first = np.sort(rng.choice(n, size=min(n, max(2, budget // 2)), replace=False))
    W = fetch_rows(store, engine, first, pos, state)
    # bound SVs outside W: kernel -> rows kept in memory (F); linear -> folded into w_fixed
    F = WorkingRows.empty()
    w_fixed = np.zeros(nf)
    evicted_g: list[np.ndarray] = []
    evicted_a: list[np.ndarray] = []
    total_it = 0
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    outer = 0
    gap = np.inf
    G = np.zeros(W.n)
    rho = 0.0
    status = 0
    loaded = None
    if checkpoint is not None and checkpoint.resume:
        loaded = _decomposition_load(checkpoint, store, engine, pos)
    if loaded is not None:
        state, sc, W, G, F, w_fixed, (evicted_g, evicted_a) = loaded
        outer, total_it = int(sc["outer"]), int(sc["total_it"])
        cache_stats = {k: int(sc["cache_" + k]) for k in cache_stats}
    while True:
        outer += 1
        t1 = time.perf_counter()
        if linear:
            fixed = Expansion(kp, nf, w=w_fixed)
        else:
            fixed = make_expansion(kp, nf, F, F.y * F.alpha)
        p_lin = -1.0 + W.y * fixed.scores(*W.csr())
        it, G, cs, status = _run_wss2(
            W, p_lin, kp, C, tol, p.cache_mb, max(1, max_iter - total_it), p.shrinking, nf
        )
        total_it += it
        for k in cache_stats:
            cache_stats[k] += cs[k]
        rho, m_w, big_m_w = _rho_and_gap(W.y, W.alpha, G, np.full(W.n, float(C)))
        exp = _full_expansion(W, F, w_fixed, kp, nf, linear)
        upd_g = np.concatenate([W.gids] + evicted_g)
        upd_a = np.concatenate([W.alpha] + evicted_a)
        order = np.argsort(upd_g, kind="stable")
        upd_g, upd_a = upd_g[order], upd_a[order]
        evicted_g, evicted_a = [], []
        w_sorted = np.sort(W.gids)
        bc = (exp, upd_g, upd_a, w_sorted, float(m_w), float(big_m_w), float(pos), C, top_k)
        r = engine.map_reduce(store, _scan_fn, bc, reduce=_scan_reduce, state=state)
        m_up_o, m_low_o, n_cand, part, _ = r
        gap = max(m_w, m_up_o) - min(big_m_w, m_low_o)
        report(
            {
                "iteration": outer,
                "violation": float(gap),
                "working_set": W.n,
                "smo_iterations": it,
                "candidates": int(n_cand),
                "pass_seconds": time.perf_counter() - t1,
            }
        )
        if gap <= tol or part is None or status != 0 or total_it >= max_iter:
            break
        W, G, F, w_fixed = _add_candidates(W, G, F, w_fixed, part[1], exp, nf, linear)
        if W.n > budget:
            W, F, w_fixed, ev_g, ev_a = _evict(W, G, rho, F, w_fixed, C, budget, linear, nf)
            evicted_g.append(ev_g)
            evicted_a.append(ev_a)
        if checkpoint is not None:
            scalars = {"outer": outer, "total_it": total_it}
            scalars.update({"cache_" + k: v for k, v in cache_stats.items()})
            _decomposition_save(
                checkpoint, engine, state, outer, W, G, F, w_fixed, (evicted_g, evicted_a), scalars
            )
    if status != 0 or total_it >= max_iter:
        log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, gap)
    return _decomposition_result(
        W, F, w_fixed, rho, gap, tol, total_it, outer, cache_stats, state, nf, linear
    )


def _decomposition_result(
    W, F, w_fixed, rho, gap, tol, total_it, outer, cache_stats, state, nf, linear
):
    """(SV rows, intercept, iterations, extra, None) of the decomposition."""
    svw = W.take(np.flatnonzero(W.alpha > 0))
    extra = {
        "working_rows": int(W.n),
        "outer_iterations": outer,
        "stop_value": float(gap),
        "cache_hits": cache_stats["hits"],
        "cache_misses": cache_stats["misses"],
        "cache_evictions": cache_stats["evictions"],
        "in_memory": False,
        "status": "optimal" if gap <= tol else "max_iter",
        "state": state,
    }
    if linear:
        extra["w"] = w_fixed + primal_w(svw, svw.y * svw.alpha, nf)
        # the model is built from w; bound SVs folded into w_fixed are not kept as rows
        return svw, -float(rho), total_it, extra, None
    allsv = WorkingRows.concat([svw, F])
    return allsv, -float(rho), total_it, extra, None


def _full_expansion(W, F, w_fixed, kp, nf, linear) -> Expansion:
    """The expansion of W's SVs plus the fixed part (F, or w_fixed for the linear kernel)."""
    svw = W.take(np.flatnonzero(W.alpha > 0))
    if linear:
        return Expansion(kp, nf, w=w_fixed + primal_w(svw, svw.y * svw.alpha, nf))
    allsv = WorkingRows.concat([svw, F])
    return make_expansion(kp, nf, allsv, allsv.y * allsv.alpha)


def _add_candidates(W, G, F, w_fixed, cand, exp, nf, linear):
    """W and G with the violating rows ``cand``; those that were bound SVs held outside W
    leave the fixed part."""
    if linear:
        back = np.flatnonzero(cand.alpha > 0)
        if back.size:
            bk = cand.take(back)
            w_fixed = w_fixed - primal_w(bk, bk.y * bk.alpha, nf)
    elif F.n:
        keepF = ~np.isin(F.gids, cand.gids)
        F = F.take(np.flatnonzero(keepF))
    Gc = -1.0 + cand.y * exp.scores(*cand.csr())
    return WorkingRows.concat([W, cand]), np.concatenate([G, Gc]), F, w_fixed


def _evict(W, G, rho, F, w_fixed, C, budget, linear, nf):
    """Shrink W to ~3/4 of the budget: drop α = 0 rows farthest inside the margin, then move
    α = C rows to the fixed part (w or F). With yᵢf(xᵢ) − 1 = Gᵢ − yᵢρ, the KKT condition is
    Gᵢ − yᵢρ ≥ 0 for α = 0 and ≤ 0 for α = C."""
    target = max(2, (3 * budget) // 4)
    excess = W.n - target
    ev = np.zeros(W.n, dtype=bool)
    margin = G - W.y * rho
    zero = np.flatnonzero(W.alpha <= 0)
    if excess > 0 and zero.size:
        order = zero[np.argsort(-margin[zero], kind="stable")]
        take = order[:excess]
        take = take[margin[take] > 0]
        ev[take] = True
        excess -= take.size
    bound = np.flatnonzero(W.alpha >= C)
    if excess > 0 and bound.size:
        order = bound[np.argsort(margin[bound], kind="stable")]
        take = order[:excess]
        take = take[margin[take] < 0]
        ev[take] = True
        moved = W.take(take)
        if linear:
            w_fixed = w_fixed + primal_w(moved, moved.y * moved.alpha, nf)
        else:
            F = WorkingRows.concat([F, moved])
    keep = np.flatnonzero(~ev)
    gone = np.flatnonzero(ev)
    return W.take(keep), F, w_fixed, W.gids[gone].copy(), W.alpha[gone].copy()
