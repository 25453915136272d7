"""smo wss2 out of core: decomposition over a working set W within the memory budget.

Solve the subproblem on W (rows outside fixed, :func:`.working_set._run_wss2`); a streamed pass
computes the gradient of every other row from the SV expansion (or w) and stops when the
maximal violating pair over ALL rows satisfies m(α) − M(α) ≤ tol, else brings the most
violating rows into W (evicting α = 0 rows that are not violating; bound SVs are folded into
w or a fixed in-memory expansion). A checkpoint after every outer step holds W, G, the fixed
part and every shard's α.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import SolverError
from ..dual import (
    Expansion,
    WorkingRows,
    apply_alpha_updates,
    fetch_rows,
    make_expansion,
    primal_w,
)
from ._numba.wss2 import _rho_and_gap
from .passes import _scan_fn, _scan_reduce
from .working_set import _run_wss2

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


@dataclass
class _Decomposition:
    """What the decomposition carries from one outer iteration to the next."""

    state: Any  # the engine's per-shard α
    W: WorkingRows  # the working set
    G: np.ndarray  # its gradient
    F: WorkingRows  # kernel: bound SVs kept outside W (linear: folded into w_fixed)
    w_fixed: np.ndarray
    evicted_g: list[np.ndarray] = field(default_factory=list)  # not yet in the shard state
    evicted_a: list[np.ndarray] = field(default_factory=list)
    outer: int = 0
    total_it: int = 0
    cache_stats: dict = field(default_factory=lambda: {"hits": 0, "misses": 0, "evictions": 0})
    gap: float = np.inf
    rho: float = 0.0
    status: int = 0


def _solve_wss2_decomposition(
    store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint=None, init=None
):
    nf = store.meta.n_features
    linear = kp.kernel == "linear"
    max_iter = int(p.max_iter)
    top_k = max(1, budget // 4)
    d = _decomposition_start(store, engine, state, p, pos, budget, checkpoint, init, C)
    while True:
        d.outer += 1
        t1 = time.perf_counter()
        if linear:
            fixed = Expansion(kp, nf, w=d.w_fixed)
        else:
            fixed = make_expansion(kp, nf, d.F, d.F.y * d.F.alpha)
        p_lin = -1.0 + d.W.y * fixed.scores(*d.W.csr())
        outer, n_w = d.outer, d.W.n
        it, d.G, cs, d.status = _run_wss2(
            d.W,
            p_lin,
            kp,
            C,
            tol,
            p.cache_mb,
            max(1, max_iter - d.total_it),
            p.shrinking,
            nf,
            progress=lambda rec, o=outer, w=n_w: report({"iteration": o, "working_set": w, **rec}),
        )
        d.total_it += it
        for k in d.cache_stats:
            d.cache_stats[k] += cs[k]
        d.rho, m_w, big_m_w = _rho_and_gap(d.W.y, d.W.alpha, d.G, np.full(d.W.n, float(C)))
        exp = _full_expansion(d.W, d.F, d.w_fixed, kp, nf, linear)
        n_cand, part = _decomposition_scan(store, engine, d, exp, m_w, big_m_w, pos, C, top_k)
        report(
            {
                "iteration": d.outer,
                "violation": float(d.gap),
                "working_set": d.W.n,
                "smo_iterations": it,
                "candidates": int(n_cand),
                "pass_seconds": time.perf_counter() - t1,
            }
        )
        if d.gap <= tol or part is None or d.status != 0 or d.total_it >= max_iter:
            break
        d.W, d.G, d.F, d.w_fixed = _add_candidates(
            d.W, d.G, d.F, d.w_fixed, part[1], exp, nf, linear
        )
        if d.W.n > budget:
            d.W, d.F, d.w_fixed, ev_g, ev_a = _evict(
                d.W, d.G, d.rho, d.F, d.w_fixed, C, budget, linear, nf
            )
            d.evicted_g.append(ev_g)
            d.evicted_a.append(ev_a)
        if checkpoint is not None:
            _decomposition_checkpoint(checkpoint, engine, d)
    if d.status != 0 or d.total_it >= max_iter:
        log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, d.gap)
    return _decomposition_result(
        d.W, d.F, d.w_fixed, d.rho, d.gap, tol, d.total_it, d.outer, d.cache_stats, d.state,
        nf, linear,
    )  # fmt: skip


def _decomposition_start(
    store, engine, state, p, pos, budget, checkpoint, init=None, C=None
) -> _Decomposition:
    """A random first working set of ~budget/2 rows, or the state of the latest checkpoint
    (``checkpoint.resume``). ``init`` (a warm start, :func:`~..warm.dual_start`): α of its
    support vectors goes into the shard state, its free SVs (then random rows) make the
    first working set and the other SVs the fixed part (linear: folded into w)."""
    n = store.meta.n_rows
    rng = np.random.default_rng(int(p.seed))
    k = min(n, max(2, budget // 2))
    linear = p.kernel == "linear"  # only the linear kernel keeps a dense w over the features
    w0 = np.zeros(store.meta.n_features if linear else 0)
    F = WorkingRows.empty()
    resuming = checkpoint is not None and checkpoint.resume
    if init is not None and not resuming and np.asarray(init.support_).size:
        from ..dual.warm import start_point

        gids, coef, _, _ = start_point(init, float(C), n)  # α at C (warm.dual_start), in the box
        a = np.minimum(np.abs(coef), float(C))
        apply_alpha_updates(store, engine, state, gids, a)
        free = gids[(a > 0) & (a < float(C))]
        first = free[:k]
        if first.size < k:  # fill with random rows that are not support vectors
            pool = np.setdiff1d(np.arange(n), gids, assume_unique=True)
            extra = rng.choice(pool, size=min(pool.size, k - first.size), replace=False)
            first = np.concatenate([first, extra])
        first = np.sort(first)
        fixed = np.setdiff1d(gids[a > 0], first, assume_unique=True)
        F = fetch_rows(store, engine, fixed, pos, state)
        if linear and F.n:
            w0 = primal_w(F, F.y * F.alpha, store.meta.n_features)
            F = WorkingRows.empty()
        log.debug("smo: decomposition warm start: %d rows in W, %d fixed", first.size, fixed.size)
    else:
        first = np.sort(rng.choice(n, size=k, replace=False))
    W = fetch_rows(store, engine, first, pos, state)
    d = _Decomposition(state, W, np.zeros(W.n), F, w0)
    loaded = None
    if resuming:
        loaded = _decomposition_load(checkpoint, store, engine, pos)
    if loaded is not None:
        d.state, sc, d.W, d.G, d.F, d.w_fixed, (d.evicted_g, d.evicted_a) = loaded
        d.outer, d.total_it = int(sc["outer"]), int(sc["total_it"])
        d.cache_stats = {k: int(sc["cache_" + k]) for k in d.cache_stats}
    return d


def _decomposition_scan(store, engine, d: _Decomposition, exp, m_w, big_m_w, pos, C, top_k):
    """The streamed pass: every shard's α brought up to date (W and the evicted rows), the
    maximal violating pair over all rows (sets ``d.gap``) and the most violating rows
    outside W. Returns (number of candidates, partial result with the candidates or None)."""
    upd_g = np.concatenate([d.W.gids] + d.evicted_g)
    upd_a = np.concatenate([d.W.alpha] + d.evicted_a)
    order = np.argsort(upd_g, kind="stable")
    upd_g, upd_a = upd_g[order], upd_a[order]
    d.evicted_g, d.evicted_a = [], []
    w_sorted = np.sort(d.W.gids)
    bc = (exp, upd_g, upd_a, w_sorted, float(m_w), float(big_m_w), float(pos), C, top_k)
    r = engine.map_reduce(store, _scan_fn, bc, reduce=_scan_reduce, state=d.state)
    m_up_o, m_low_o, n_cand, part, _ = r
    d.gap = max(m_w, m_up_o) - min(big_m_w, m_low_o)
    return n_cand, part


def _decomposition_checkpoint(checkpoint, engine, d: _Decomposition) -> None:
    scalars = {"outer": d.outer, "total_it": d.total_it}
    scalars.update({"cache_" + k: v for k, v in d.cache_stats.items()})
    _decomposition_save(
        checkpoint, engine, d.state, d.outer, d.W, d.G, d.F, d.w_fixed,
        (d.evicted_g, d.evicted_a), scalars,
    )  # fmt: skip


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
