"""The smo driver: the shared set-up (α state, class costs), the dispatch to Platt's loop
or wss2 (in memory, or the out-of-core decomposition), and the independent KKT pass that
certifies the result and builds the model."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import Callback, Result, SolverError, binary_classes
from ..dual import (
    WorkingRows,
    apply_alpha_updates,
    dual_objective,
    fetch_rows,
    finish_dual,
    init_alpha_state,
)
from ..dual.kkt import maintained_kkt_rows
from ..params import as_params
from ._numba.wss2 import _rho_and_gap
from .common import _budget_rows, _class_costs, _kernel_params
from .decomposition import _solve_wss2_decomposition
from .params import Params
from .platt import _solve_platt
from .working_set import _run_wss2

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store

log = logging.getLogger(__name__)


def _solve(store, engine, params, callback, checkpoint, keep_dual=True) -> Result:
    t0 = time.perf_counter()
    p = as_params(Params, params)
    p.validate(store.meta)
    C, tol = p.C, p.tol
    kp = _kernel_params(store, p)
    neg, pos = binary_classes(store.meta)
    if store.meta.n_rows < 2:
        raise SolverError("smo needs at least two rows")
    passes0 = engine.passes
    state = init_alpha_state(engine, store)
    history: list[dict] = []

    def report(rec):
        rec["seconds"] = time.perf_counter() - t0
        rec.setdefault("passes", engine.passes - passes0)
        history.append(rec)
        if callback is not None:
            callback(rec)

    costs = None
    if p.selection != "platt" and p.class_weight is not None:
        costs = _class_costs(store, engine, p, neg, pos)
        log.info("smo: class costs C_neg = %.6g, C_pos = %.6g", *costs)
    resuming = checkpoint is not None and checkpoint.resume
    init = None
    if p.init is not None and not resuming:  # a warm start (warm.Start)
        from ..warm import dual_init

        init = dual_init(p, store, engine, "smo", costs)
    if p.selection == "platt":
        if checkpoint is not None:
            raise SolverError("smo: --checkpoint is supported with --selection wss2 only")
        if p.class_weight is not None:
            raise SolverError("smo: --class-weight is supported with --selection wss2 only")
        if init is not None:
            log.info("smo: --selection platt does not use the warm start: alpha = 0")
        out = _solve_platt(store, engine, state, p, C, tol, kp, pos, report)
    else:
        out = _solve_wss2(
            store, engine, state, p, C, tol, kp, pos, report, checkpoint, costs, init=init
        )
    sv_rows, intercept, iters, extra, dual = out
    state = extra.pop("state", state)  # a resumed decomposition restores the shard α
    model, kkt, objs = _finish(store, engine, state, p, kp, (neg, pos), out, costs, keep_dual)
    summary = _summary(p, kp, kkt, intercept, extra)
    if costs is not None:
        summary["class_costs"] = [float(costs[0]), float(costs[1])]
    seconds = time.perf_counter() - t0
    return Result(
        model=model,
        objective=objs["primal"],
        dual_objective=float(objs["dual"]),
        iterations=int(iters),
        passes=int(extra.get("passes", engine.passes - passes0)),
        seconds=seconds,
        stop_value=float(extra.get("stop_value", 0.0)),
        history=history,
        summary=summary,
    )


def _finish(store, engine, state, p: Params, kp, classes, out, costs=None, keep_dual=False):
    """The independent KKT check on every row and the model (:func:`finish_dual`); returns
    (model, kkt, {"dual", "primal"}). ``costs``: (C_neg, C_pos) of class weights."""
    sv_rows, intercept, _, extra, dual = out
    C, tol = (p.C if costs is None else costs), p.tol
    w = extra.get("w")
    objs: dict[str, float] = {}

    def info(kkt: dict | None) -> dict:
        assert kkt is not None  # finish_dual runs the KKT pass (check=True)
        d = dual
        if d is None:
            if w is not None:
                d = 0.5 * float(w @ w) - kkt["sum_alpha"]
            else:
                d = dual_objective(sv_rows, kp, store.meta.n_features)
        # ½‖w‖² = ½αᵀQα = dual + Σα
        objs["dual"] = d
        cost = kkt["cost_hinge"] if costs is not None else C * kkt["hinge"]
        objs["primal"] = float(d + kkt["sum_alpha"] + cost)
        return {
            "solver": "smo",
            "C": p.C,
            "tol": tol,
            "selection": p.selection,
            "dual_objective": d,
            "objective": objs["primal"],
        }

    fin = finish_dual(
        store,
        engine,
        sv_rows,
        intercept,
        kp,
        C,
        tol,
        classes,
        info,
        state=state,
        w=None if w is None else np.asarray(w, dtype=np.float64),
        kkt=extra.pop("kkt", None),
        keep_dual=keep_dual,
        maintained=extra.pop("maintained", None),
    )
    kkt = fin.kkt
    assert kkt is not None  # check=True: the pass was made
    if extra.get("in_memory") and kkt.get("source") == "maintained":
        extra["passes"] = 1  # reading every row; the check needed no pass
    if not kkt["ok"]:
        log.warning(
            "smo: KKT check found a violation of %.3g (> tol %.3g) on %d rows",
            kkt["max_violation"],
            tol,
            kkt["n_violators"],
        )
    return fin.model, kkt, objs


def _summary(p: Params, kp, kkt: dict, intercept: float, extra: dict) -> dict:
    summary = {
        "kernel": kp.kernel,
        "gamma": kp.gamma,
        "C": p.C,
        "tol": p.tol,
        "selection": p.selection,
        "shrinking": bool(p.shrinking),
        "n_sv": int(kkt["n_sv"]),
        "n_bound_sv": int(kkt["n_bound_sv"]),
        "intercept": float(intercept),
        "kkt_max_violation": kkt["max_violation"],
        "kkt_violators": kkt["n_violators"],
        "kkt_gap": kkt["gap"],
        "kkt_ok": kkt["ok"],
        "kkt_source": kkt.get("source", "exact"),
        "kkt_drift": kkt.get("drift"),
    }
    summary.update({k: v for k, v in extra.items() if k not in ("w", "passes")})
    summary["converged"] = extra.get("status") != "max_iter"
    return summary


def _warm_alpha(W: WorkingRows, init, C: float, Cv: np.ndarray) -> None:
    """α of ``W`` (all rows, by global row) from ``init`` (:func:`~..warm.dual_start`'s
    model: α at C) clipped to the box [0, Cv]."""
    from ..dual import start_point

    gids, coef, _, _ = start_point(init, C, W.n)
    rows = np.searchsorted(W.gids, gids)
    W.alpha[rows] = np.minimum(np.abs(coef), Cv[rows])
    log.debug("smo: warm start from %d support vectors", gids.size)


def _solve_wss2(
    store, engine, state, p, C, tol, kp, pos, report, checkpoint=None, costs=None, init=None
):
    """wss2 in memory when the rows fit the budget, else the decomposition. ``costs``:
    (C_neg, C_pos) of class weights (in memory only), or None. ``init``: a model to start
    from (:func:`ooc_svm.solvers.warm.dual_start`'s; :func:`ooc_svm.solvers.dual.start_point`)."""
    n = store.meta.n_rows
    nf = store.meta.n_features
    budget = _budget_rows(store, p)
    max_iter = int(p.max_iter)
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    if n <= budget:
        t1 = time.perf_counter()
        W = fetch_rows(store, engine, np.arange(n), pos)
        p_lin = -np.ones(W.n)
        Cv = np.full(W.n, float(C)) if costs is None else np.where(W.y > 0, costs[1], costs[0])
        if init is not None and not (checkpoint is not None and checkpoint.resume):
            _warm_alpha(W, init, float(C), Cv)
        it, G, cs, status = _run_wss2(
            W,
            p_lin,
            kp,
            Cv,
            tol,
            p.cache_mb,
            max_iter,
            p.shrinking,
            nf,
            every=int(p.checkpoint_every),
            checkpoint=checkpoint,
            report=report,
            checkpoint_seconds=float(p.checkpoint_seconds),
            progress=lambda rec: report(
                {"iteration": rec["chunk"], "working_set": W.n, "passes": 1, **rec}
            ),
        )
        rho, m_up, m_low = _rho_and_gap(W.y, W.alpha, G, Cv)
        dual = float(0.5 * np.dot(W.alpha, G + p_lin))
        sv = np.flatnonzero(W.alpha > 0)
        apply_alpha_updates(store, engine, state, W.gids[sv], W.alpha[sv])
        report(
            {
                "iteration": 1,
                "violation": float(m_up - m_low),
                "working_set": W.n,
                "smo_iterations": it,
                "cache_hit_rate": cs["hits"] / max(1, cs["hits"] + cs["misses"]),
                "objective": dual,
                "pass_seconds": time.perf_counter() - t1,
                "passes": 1,
            }
        )
        for k in cache_stats:
            cache_stats[k] += cs[k]
        extra: dict[str, Any] = {
            "working_rows": W.n,
            "outer_iterations": 1,
            "stop_value": float(m_up - m_low),
            "passes": 2,  # reading every row + the independent KKT pass (if it is needed)
            "cache_hits": cache_stats["hits"],
            "cache_misses": cache_stats["misses"],
            "cache_evictions": cache_stats["evictions"],
            "in_memory": True,
            "status": "optimal" if status == 0 else "max_iter",
        }
        if status != 0:
            log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, m_up - m_low)
        # the KKT check from the maintained gradient: f − intercept = yᵢ(Gᵢ + 1) (p = −1)
        g_kept = W.y * (G + 1.0)
        intercept = -float(rho)
        extra["maintained"] = lambda exp: maintained_kkt_rows(W, g_kept, exp, intercept, Cv, tol)
        return W.take(sv), intercept, it, extra, dual
    if costs is not None:
        raise SolverError(
            f"smo: --class-weight needs the problem in memory ({n} rows > the working budget "
            f"of {budget}; raise --working-mb or --working-rows)"
        )
    return _solve_wss2_decomposition(
        store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint, init
    )


def solve(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train with SMO; see the package docstring for the problem and the stopping rules.

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), wss2 saves its state
    every ``checkpoint_every`` SMO steps and every ``checkpoint_seconds`` (in memory) or
    after every outer iteration (out of core) and, when resuming, starts from the latest
    checkpoint; a resumed run ends with exactly the model of an uninterrupted one.
    """
    return _solve(store, engine, params, callback, checkpoint)


def solve_warm(
    store: Store, engine: Engine, params: Params, init: Any, *, callback: Callback | None = None
) -> Result:
    """:func:`solve` started from ``init`` (a C sweep's next value): a binary model of this
    store with its dual coefficients (trained at ``init.info["C"]``). wss2 in memory starts
    from its α scaled into the box (α·C/C_old, yᵀα = 0 kept) and computes the gradient from
    it; the other paths start from α = 0. The model returned keeps its dual coefficients
    (linear kernel included), so it can start the next value. ``init`` (a model or its
    :class:`~..warm.Start`) is passed as ``init=``, as ``--init`` is (:func:`~..warm.dual_init`)."""
    from ..warm import start_from

    p = as_params(Params, params)
    if init is not None:
        p = p.replace(init=start_from(init, store.meta))
    return _solve(store, engine, p, callback, None, keep_dual=True)
