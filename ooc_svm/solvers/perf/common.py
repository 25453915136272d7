"""Driver helpers shared by the error, rank and one-vs-rest drivers of perf."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ...model.model import Model
from .. import Callback, Result
from .params import Params

log = logging.getLogger(__name__)


def _resolve_C(params: Params, count: int) -> float:
    if params.c_perf is not None:
        return 100.0 * float(params.c_perf) / count
    return float(params.C)


def _line_grid(points: int) -> np.ndarray:
    points = max(1, int(points))
    return np.concatenate([np.arange(1, points + 1) / points, [1.25, 1.5, 2.0, 3.0]])


def _cut_grid(points: int, mu: float) -> np.ndarray:
    """Step lengths of the candidate cuts: from μ (k* = 0) to 1 (k* = 1), denser near μ."""
    points = max(1, int(points))
    if points == 1:
        return np.array([1.0])
    t = np.arange(points) / (points - 1)
    return mu + (1.0 - mu) * t**1.5


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


class _Progress:
    def __init__(self, engine, callback: Callback | None):
        self.engine = engine
        self.callback = callback
        self.history: list[dict] = []
        self.t0 = time.perf_counter()
        #: the run stopped because its working-set QP stalled (stop_reason "stalled")
        self.stalled = False
        self.p0 = engine.passes + getattr(engine, "partial_passes", 0)

    def passes(self) -> int:
        return self.engine.passes + getattr(self.engine, "partial_passes", 0) - self.p0

    def emit(self, rec: dict) -> None:
        rec["passes"] = self.passes()
        rec["seconds"] = time.perf_counter() - self.t0
        self.history.append(rec)
        log.debug(
            "perf it %d: obj %.10g xi %.6g viol %s |W| %d pass %.3fs",
            rec["iteration"],
            rec["objective"],
            rec["xi"],
            rec["violation"],
            rec["working_set"],
            rec["pass_seconds"],
        )
        if self.callback is not None:
            self.callback(dict(rec))


def perf_result(
    prog: _Progress,
    ws: Any,
    model: Model,
    objective: float,
    iterations: int,
    stop: float,
    xi: float,
    summary: dict,
) -> Result:
    """The :class:`Result` of a perf run: ``summary`` after the working set's figures."""
    stalled = bool(getattr(prog, "stalled", False))
    return Result(
        model=model,
        objective=objective,
        dual_objective=None,
        converged=bool(summary.get("converged", True)) and not stalled,
        stop_reason="stalled" if stalled else None,
        iterations=iterations,
        passes=prog.passes(),
        seconds=time.perf_counter() - prog.t0,
        stop_value=float(stop),
        history=prog.history,
        summary={
            "xi": xi,
            "peak_working_set": ws.peak,
            "working_set": len(ws),
            "working_set_mb": ws.peak_bytes / 2**20,
            **summary,
        },
    )


def binary_result(
    run: Any,
    w: np.ndarray,
    variant: str,
    objective: float,
    iterations: int,
    converged: bool,
    stop: float,
    xi: float,
    dual: float,
    costs: list[float] | None = None,
    extra: dict | None = None,
) -> Result:
    """The binary linear model of an error-loss run and its :class:`Result`.

    ``run`` has ``C``, ``Cp``, ``eps``, ``bias``, ``d``, ``neg``, ``pos``, ``ws`` and ``prog``;
    ``w`` is ``[coef, intercept / bias]``; ``costs`` (``[C_neg, C_pos]``) goes to the info and
    the summary, ``extra`` to the end of the summary.
    """
    info = {
        "solver": "perf",
        "loss": "error",
        "variant": variant,
        "C": run.C,
        "C_perf": run.Cp,
        "c_perf_svmperf": run.Cp / 100.0,
        "eps": run.eps,
        "bias": run.bias,
        "objective": objective,
        "iterations": iterations,
        "converged": converged,
        "float32_planes": run.ws.float32,
    }
    if costs is not None:
        info["class_costs"] = costs
    model = Model(
        kind="linear",
        n_features=run.d,
        classes=[run.neg, run.pos],
        coef_=w[: run.d].copy(),
        intercept_=float(w[run.d] * run.bias),
        info=info,
    )
    summary = {
        "variant": variant,
        "loss": "error",
        "lower_bound": _finite(dual),
        "C": run.C,
        "converged": converged,
        **({} if costs is None else {"class_costs": list(costs)}),
        **(extra or {}),
    }
    return perf_result(run.prog, run.ws, model, objective, iterations, stop, xi, summary)


def save_run(run: Any, scalars: dict, arrays: dict) -> None:
    """Checkpoint a perf run (``run.checkpoint``, if any) after iteration ``run.it``: its
    working set, the pass count and the dual value with ``scalars`` and ``arrays``."""
    if run.checkpoint is None:
        return
    wsc, wsa = run.ws.state()
    scalars = {**scalars, **wsc, "it": run.it, "passes": run.prog.passes()}
    scalars["dual"] = _finite(run.dual)
    run.checkpoint.save(run.it, scalars=scalars, arrays={**arrays, **wsa})


def emit_start(run: Any, objective: float, xi: float, **extra: Any) -> None:
    """The history record of iteration 0 (the first pass, at w = 0)."""
    rec = {
        "iteration": 0,
        "objective": objective,
        "xi": xi,
        "violation": None,
        "working_set": 0,
        "pass_seconds": run.pt,
        "lower_bound": None,
    }
    run.prog.emit({**rec, **extra})


def iteration_done(
    run: Any, objective: float, xi: float, lower_bound: float | None, **extra: Any
) -> bool:
    """The history record of iteration ``run.it``; True when the run stops there: converged
    (``run.stop <= run.eps``, which sets ``run.converged``) or at ``max_iter``."""
    rec = {
        "iteration": run.it,
        "objective": objective,
        "xi": xi,
        "violation": run.stop,
        "working_set": len(run.ws),
        "pass_seconds": run.pt,
        "lower_bound": lower_bound,
    }
    run.prog.emit({**rec, **extra})
    _check_finite_iteration(run, objective, xi)
    if run.stop <= run.eps:
        run.converged = True
        return True
    if getattr(run, "stalled", False) or _no_progress(run, objective, lower_bound):
        run.prog.stalled = True  # the Result says why (stop_reason "stalled")
        return True
    return run.it >= run.max_iter


#: the run stops (not converged, best point kept) when its certified gap, best objective
#: minus best lower bound, has not shrunk by ``NO_PROGRESS_FACTOR`` over this many
#: iterations: a count, so the same run stops at the same iteration on any machine
NO_PROGRESS_ITERATIONS = 200
NO_PROGRESS_FACTOR = 0.99


def _no_progress(run: Any, objective: float, lower_bound: float | None) -> bool:
    """Whether the certified gap has not shrunk for ``NO_PROGRESS_ITERATIONS`` iterations
    (warns once, naming the gap)."""
    best = min(getattr(run, "_best_obj", math.inf), float(objective))
    run._best_obj = best
    if lower_bound is None or not math.isfinite(lower_bound):
        return False
    gap = best - float(lower_bound)
    ref = getattr(run, "_gap_ref", None)
    if ref is None or gap < NO_PROGRESS_FACTOR * ref[0]:
        run._gap_ref = (gap, run.it)
        return False
    if run.it - ref[1] < NO_PROGRESS_ITERATIONS:
        return False
    log.warning(
        "perf: no progress: the certified gap (best objective - lower bound) stayed at %.6g "
        "(%.3g relative) for %d iterations; stopping with the best point so far, not "
        "converged; use a smaller --C or a larger --eps, or --solver active-set",
        gap, gap / max(abs(best), 1e-300), NO_PROGRESS_ITERATIONS,
    )  # fmt: skip
    return True


def _check_finite_iteration(run: Any, objective: float, xi: float) -> None:
    """A non-finite objective, slack or stopping value ends the run with its cause."""
    from .. import SolverError

    for name, v in (("objective", objective), ("slack", xi), ("gap", run.stop)):
        if not math.isfinite(float(v)):
            raise SolverError(
                f"perf: the {name} is {float(v)} at iteration {run.it}: the arithmetic "
                f"overflowed (C x rows = {float(getattr(run, 'Cp', math.nan)):.3g}; feature "
                "values up to the float32 limit 3.4e38?); scale the features (e.g. to "
                "[-1, 1]) or use a smaller --C; no model written"
            )
