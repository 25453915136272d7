"""``--solver smo``: Sequential Minimal Optimization, out of core (Platt 1998; Fan et al. 2005).

Problem (C-SVC dual, LIBSVM's sign convention)::

    min_α  ½ αᵀQα − eᵀα   s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,   Q_ij = y_i y_j K(x_i, x_j)

f(x) = Σ_j y_j α_j K(x_j, x) + intercept (linear / rbf / poly / sigmoid kernels on sparse rows);
``intercept_`` is −b (Platt's u = w·x − b) or −ρ (LIBSVM).

``--selection wss2`` (default; :mod:`.wss2`, :mod:`.decomposition`) — Fan, Chen & Lin 2005,
    JMLR 6, section 3 (WSS 2, second order) with LIBSVM's gradient maintenance, shrinking and
    gradient reconstruction, in numba, on an in-memory working set W: the whole problem
    when it fits ``--working-mb`` / ``--working-rows``, else a decomposition with streamed
    passes for the gradient of every row outside W.
    Stopping rule: m(α) − M(α) ≤ tol over ALL rows (LIBSVM's), confirmed by an independent
    streamed KKT pass.

``--selection platt`` (:mod:`.platt`) — Platt 1998, section 2 as written (pseudo-code of
    section 2.5: eqs. 13–22, first choice alternating examine-all / non-bound passes, second
    choice max |E₁−E₂|), one shard at a time.
    Stopping rule: an examine-all pass changes nothing, then the independent KKT pass must
    confirm |violation| ≤ tol on every row, else examine-all passes continue.

Layout: ``__init__`` (Params, solve, the epilogue), ``wss2`` (LIBSVM on W, in ~0.05 s
slices so Ctrl-C and ``--checkpoint-seconds`` act between any two steps without changing
them), ``decomposition`` (out of core, checkpointed after every outer step), ``platt``,
``kernels`` (numba), ``common`` (shard functions and tuples).

Memory: α lives in per-shard engine state; the driver holds W (or Platt's non-bound rows),
the support vectors (kernel models need them), O(n_features) vectors and the kernel cache
(``--cache-mb``). It does not grow with the number of rows beyond α.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .. import Callback, Result, SolverError, binary_classes
from ..params import KernelSolverParams, as_params, at_least, param, positive

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver smo`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "smo"
    SUPPORTS_CLASS_WEIGHT: ClassVar[bool] = True

    tol: float = param(1e-3, "KKT tolerance (LIBSVM -e, Platt's tol)")
    max_iter: int = param(10_000_000, "SMO steps; reaching it is reported as not converged")
    seed: int = param(0, "Platt's random starting points; the decomposition's first sample")
    cache_mb: float = param(256.0, "kernel column cache budget in MiB")
    selection: str = param(
        "wss2",
        "working-set selection: wss2 = Fan et al. 2005 second order (LIBSVM), platt = Platt "
        "1998 as written",
        choices=("wss2", "platt"),
    )
    shrinking: bool = param(True, "LIBSVM shrinking (wss2 only)", cli="bool")
    working_mb: float = param(256.0, "memory budget of the in-memory working set (MiB)")
    working_rows: int = param(0, "cap on in-memory working rows (0: from --working-mb)")
    checkpoint_every: int = param(
        100_000, "wss2 in memory: SMO steps per chunk (--checkpoint saves after each)"
    )

    def rules(self) -> None:
        super().rules()
        at_least(self, "working_rows", 0)
        positive(self, "working_mb")
        at_least(self, "checkpoint_every", 0)


DEFAULTS = Params.defaults()

#: ``--checkpoint`` works for wss2: in memory (state saved between chunks and every
#: ``--checkpoint-seconds``) and out of core (saved after every outer iteration).
SUPPORTS_CHECKPOINT = True

STOPPING_RULE = (
    "wss2: maximal violating pair m(a)-M(a) <= tol over all rows (LIBSVM); platt: an "
    "examine-all pass changes nothing; both confirmed by an independent KKT pass"
)


def solve(
    store,
    engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train with SMO; see the module docstring for the problem and the stopping rules.

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), wss2 saves its state
    every ``checkpoint_every`` SMO steps and every ``checkpoint_seconds`` (in memory) or
    after every outer iteration (out of core) and, when resuming, starts from the latest
    checkpoint; a resumed run ends with exactly the model of an uninterrupted one.
    """
    return _solve(store, engine, params, callback, checkpoint)


def solve_warm(store, engine, params: Params, init, *, callback: Callback | None = None) -> Result:
    """:func:`solve` started from ``init`` (a C sweep's next value): a binary model of this
    store with its dual coefficients (trained at ``init.info["C"]``). wss2 in memory starts
    from its α scaled into the box (α·C/C_old, yᵀα = 0 kept) and computes the gradient from
    it; the other paths start from α = 0. The model returned keeps its dual coefficients
    (linear kernel included), so it can start the next value."""
    return _solve(store, engine, params, callback, None, init=init, keep_dual=True)


def _solve(store, engine, params, callback, checkpoint, init=None, keep_dual=False) -> Result:
    # the algorithm (numba kernels) is imported when it runs: the package stays light
    from ..dual_common import init_alpha_state
    from .common import _class_costs, _kernel_params
    from .platt import _solve_platt
    from .wss2 import _solve_wss2

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
    if p.selection == "platt":
        if checkpoint is not None:
            raise SolverError("smo: --checkpoint is supported with --selection wss2 only")
        if p.class_weight is not None:
            raise SolverError("smo: --class-weight is supported with --selection wss2 only")
        if init is not None:
            log.info("smo: --selection platt does not use the warm start: alpha = 0")
        out = _solve_platt(store, engine, state, p, C, tol, kp, pos, report)
    else:
        if p.class_weight is not None:
            costs = _class_costs(store, engine, p, neg, pos)
            log.info("smo: class costs C_neg = %.6g, C_pos = %.6g", *costs)
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
    import numpy as np

    from ..dual_common import dual_objective, finish_dual

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
    )
    kkt = fin.kkt
    assert kkt is not None  # check=True: the pass was made
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
    }
    summary.update({k: v for k, v in extra.items() if k not in ("w", "passes")})
    summary["converged"] = extra.get("status") != "max_iter"
    return summary
