"""Training at several values of C in one go (``ooc-svm train --C 0.01,0.1,1,10``).

- ``perf`` (error loss, ``paper`` or ``accelerated``): every C value runs its own cutting-plane
  iteration (:func:`ooc_svm.solvers.perf.error._error_steps`, the same labels, a different C
  per problem) and each round the passes all unfinished C values need are fused into **one**
  streamed pass (:func:`~ooc_svm.solvers.perf.passes.pass_many`), the way one-vs-rest perf
  shares passes between classes. The sweep's passes are the slowest C value's, not the sum.
- ``smo``, ``active-set``, ``irwls``: one C after the other from the smallest, each started
  from the previous solution (α scaled into the new box, α·C_new/C_old, which keeps yᵀα = 0
  and 0 ≤ α ≤ C; the solver recomputes its gradient / scores from it in its first pass):
  active-set through its incremental mode (Scheinberg 2006 §4.3–4.4, ``init``), smo
  (in-memory wss2) and irwls through their ``solve_warm``. Each C's passes are its own;
  the total is their sum.
- anything else (perf ``--loss roc|ordinal`` or ``--variant selective``; dual solvers on
  classes): one independent training per C (passes add up).

Stores with more than two classes are trained one-vs-rest at every C: with perf every
(class, C) problem shares the same fused passes.

Every per-C model is the one the solver would reach alone at that C, to its tolerance
(perf: objective within ε·C·n; dual solvers: the same stopping rule on every row).
Validation metrics and the choice of the best C are :func:`ooc_svm.api.train_sweep`'s.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import Callback, Result, SolverError, binary_classes
from .params import SolverParams

if TYPE_CHECKING:
    from types import ModuleType

    from ..engine.base import Engine
    from ..store.base import Store
    from ..store.format import StoreMeta

log = logging.getLogger(__name__)

#: at most this many C values in one sweep (each perf problem holds its own working set)
MAX_C_VALUES = 64


@dataclass
class SweepResult:
    """What :func:`solve_sweep` returns.

    Attributes
    ----------
    Cs : list of float
        The C values, ascending.
    results : list of Result
        One per C value, in the order of ``Cs``; ``passes`` of each is the passes made
        while that C value was training (shared passes count once per C value).
    passes : int
        Streamed passes of the whole sweep over the training store.
    mode : str
        ``"shared"`` (perf: fused passes), ``"warm"`` (dual solvers: warm starts) or
        ``"independent"``.
    seconds : float
    """

    Cs: list[float]
    results: list[Result]
    passes: int
    mode: str
    seconds: float
    warm_started: list[bool] = field(default_factory=list)


def parse_c_values(values: str | float | Sequence[float]) -> list[float]:
    """Sorted distinct C values from ``"0.01,0.1,1"``, a number or a sequence.

    Raises
    ------
    SolverError
        An entry is not a positive finite number, or there are more than
        :data:`MAX_C_VALUES`.
    """
    if isinstance(values, str):
        items: list[Any] = [v.strip() for v in values.split(",") if v.strip()]
    elif isinstance(values, int | float):
        items = [values]
    else:
        items = list(values)
    out = set()
    for v in items:
        try:
            c = float(v)
        except (TypeError, ValueError):
            raise SolverError(f"--C: {v!r} is not a number (give e.g. --C 0.01,0.1,1,10)") from None
        if not (c > 0 and c < float("inf")):
            raise SolverError(f"--C: every value must be a positive number, got {v!r}")
        out.add(c)
    if not out:
        raise SolverError("--C: no value given (e.g. --C 0.01,0.1,1,10)")
    if len(out) > MAX_C_VALUES:
        raise SolverError(f"--C: at most {MAX_C_VALUES} values, got {len(out)}")
    return sorted(out)


def sweep_mode(mod: ModuleType, params: Any, meta: StoreMeta) -> str:
    """How :func:`solve_sweep` trains the C values of ``mod`` on a store with ``meta``."""
    name = getattr(params, "SOLVER", "")
    if meta.label_kind == "multiclass":  # one-vs-rest per C (perf: all fused)
        shared = (
            name == "perf"
            and params.variant not in ("selective", "dcd")
            and params.loss in (None, "error")
        )
        return "shared" if shared else "independent"
    if name == "perf":
        if params.variant not in ("selective", "dcd") and params.resolve_loss(meta) == "error":
            return "shared"
        return "independent"
    if name == "active-set" or hasattr(mod, "solve_warm"):
        return "warm"
    return "independent"


def solve_sweep(
    store: Store,
    engine: Engine,
    mod: ModuleType,
    params: SolverParams,
    Cs: Sequence[float],
    *,
    callback: Callback | None = None,
    warm_start: bool = True,
) -> SweepResult:
    """Train solver module ``mod`` at every C of ``Cs`` (see the module docstring).

    Parameters
    ----------
    store, engine
        As for a solver's ``solve``.
    mod : module
        The solver module (``ooc_svm.solvers.get_solver(name)``).
    params : SolverParams
        The solver's parameters; ``C`` (and perf's ``c_perf``) are replaced per value.
    Cs : sequence of float
        C values (sorted and made distinct here).
    callback : callable, optional
        Receives every iteration record with ``"C"`` and ``"C_index"`` added.
    warm_start : bool
        Dual solvers: start each C from the previous solution (False: every C cold, for
        comparison).
    """
    Cs = parse_c_values(list(Cs))
    meta = store.meta
    if getattr(params, "c_perf", None) is not None:
        raise SolverError("a C sweep takes --C values, not --c-perf")
    if meta.label_kind != "multiclass":
        params.validate(meta)
    mode = sweep_mode(mod, params, meta)
    if mode == "warm" and not warm_start:
        mode = "independent"
    t0 = time.perf_counter()
    p0 = engine.passes + getattr(engine, "partial_passes", 0)
    if mode == "shared":
        results = _perf_shared(store, engine, params, Cs, callback)
        warm = [False] * len(Cs)
    elif mode == "warm":
        results, warm = _dual_warm(store, engine, mod, params, Cs, callback)
    else:
        results = [_independent(store, engine, mod, params.replace(C=c), _tagged(callback, k, c))
                   for k, c in enumerate(Cs)]  # fmt: skip
        warm = [False] * len(Cs)
    passes = engine.passes + getattr(engine, "partial_passes", 0) - p0
    log.info("C sweep (%s): %d values, %d passes", mode, len(Cs), passes)
    return SweepResult(Cs, results, int(passes), mode, time.perf_counter() - t0, warm)


def _independent(store, engine, mod, params, callback) -> Result:
    """One C value trained alone (one-vs-rest for classes)."""
    if store.meta.label_kind == "multiclass":
        from .ovr import train_ovr

        return train_ovr(store, mod, engine, params, callback=callback)
    return mod.solve(store, engine, params, callback=callback)


def _tagged(callback: Callback | None, k: int, c: float) -> Callback | None:
    if callback is None:
        return None

    def cb(rec: dict) -> None:
        callback({**rec, "C": c, "C_index": k})

    return cb


def _perf_shared(store, engine, params, Cs: list[float], callback) -> list[Result]:
    """perf, error loss: every C's (and, for classes, every class's) iteration as a
    generator; one fused pass per round (:func:`~.perf.ovr.run_fused`)."""
    from .perf.error import _error_steps
    from .perf.ovr import _ovr_result, run_fused

    meta = store.meta
    multi = meta.label_kind == "multiclass"
    if multi:
        classes = [float(c) for c in (meta.labels or [])]
        pos_list = [(math.nan, c) for c in classes]  # "class c vs the rest"
    else:
        pos_list = [binary_classes(meta)]
    share = len(Cs) * len(pos_list)
    params.check_dense(meta, copies=share)
    t0 = time.perf_counter()
    steps = []
    for k, c in enumerate(Cs):
        p = params.replace(C=c, c_perf=None)
        for j, (neg, pos) in enumerate(pos_list):
            cb = _tagged(callback, k, c)
            if multi and cb is not None:
                cb = _tagged_class(cb, j, pos)
            steps.append(_error_steps(meta, neg, pos, engine, p, p.variant, cb, None, share=share))
    res = run_fused(store, engine, steps, "perf C sweep", "problems", logging.DEBUG)
    if not multi:
        return res
    m = len(pos_list)
    return [
        _ovr_result(res[k * m : (k + 1) * m], classes, params.variant, t0) for k in range(len(Cs))
    ]


def _tagged_class(cb: Callback, j: int, c: float) -> Callback:
    def out(rec: dict) -> None:
        cb({**rec, "class": c, "class_index": j})

    return out


def _dual_warm(
    store, engine, mod, params, Cs: list[float], callback
) -> tuple[list[Result], list[bool]]:
    """Dual solvers: ascending C, each started from the previous model."""
    results: list[Result] = []
    warm: list[bool] = []
    prev = None
    name = getattr(params, "SOLVER", "")
    with tempfile.TemporaryDirectory(prefix="ooc-svm-sweep-") as tmp:
        for k, c in enumerate(Cs):
            cb = _tagged(callback, k, c)
            p = params.replace(C=c)
            res = _solve_warm(mod, name, store, engine, p, cb, prev, tmp, k)
            warm.append(prev is not None)
            results.append(res)
            prev = res.model
            log.info("C sweep: C=%g: %d passes, %s", c, res.passes, "warm" if warm[-1] else "cold")
    return results, warm


def _solve_warm(mod, name: str, store, engine, p, cb, prev, tmp: str, k: int) -> Result:
    """One C value: cold (``prev`` None) or started from the previous C's model."""
    warm_fn = getattr(mod, "solve_warm", None)
    if name == "active-set":
        if prev is None:
            return mod.solve(store, engine, p, callback=cb)
        # Scheinberg's incremental mode reads the model it starts from (§4.3-4.4)
        path = os.path.join(tmp, f"C{k - 1}")
        prev.save(path)
        return mod.solve(store, engine, p.replace(init=path), callback=cb)
    if warm_fn is None:
        return mod.solve(store, engine, p, callback=cb)
    # also the first (cold, init None) value: smo's linear models keep their dual
    # coefficients only when trained this way
    return warm_fn(store, engine, p, prev, callback=cb)


__all__ = [
    "MAX_C_VALUES",
    "SweepResult",
    "parse_c_values",
    "solve_sweep",
    "sweep_mode",
]
