"""Training at several values of C in one go (``ooc-svm train --C 0.01,0.1,1,10``).

Each solver says how (its spec's ``sweep_mode``, :mod:`ooc_svm.solvers.contract`):

- ``"shared"`` — every C value runs its own iteration and each round the passes all
  unfinished values need are fused into **one** streamed pass, the way one-vs-rest shares
  passes between classes (the spec's ``solve_sweep``; perf with the error loss,
  :func:`ooc_svm.solvers.perf.ovr.solve_sweep`). The sweep's passes are the slowest C
  value's, not the sum.
- ``"warm"`` — one C after the other from the smallest, each started from the previous
  solution through the spec's ``solve_warm`` (the dual solvers: α scaled into the new box,
  α·C_new/C_old, which keeps yᵀα = 0 and 0 ≤ α ≤ C, by the warm start every route takes,
  :class:`ooc_svm.solvers.warm.Start`;
  active-set through its incremental mode, Scheinberg 2006 §4.3–4.4). Each C's passes are
  its own; the total is their sum.
- ``"independent"`` — one training per C (passes add up): perf's other losses and variants,
  the dual solvers on classes.

Stores with more than two classes are trained one-vs-rest at every C: in a shared sweep every
(class, C) problem shares the same fused passes.

Every per-C model is the one the solver would reach alone at that C, to its tolerance
(perf: objective within ε·C·n; dual solvers: the same stopping rule on every row).
Validation metrics and the choice of the best C are :func:`ooc_svm.api.train_sweep`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..sizes import sizes_of
from . import Callback, Result, SolverError, tagged
from .params import SolverParams
from .warm import rows_record, start_from

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..store.base import Store
    from ..store.format import StoreMeta
    from .contract import SolverSpec

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


def sweep_mode(spec: SolverSpec, params: Any, meta: StoreMeta) -> str:
    """How :func:`solve_sweep` trains the C values of ``spec`` on a store with ``meta``
    (the solver's own choice: :meth:`~ooc_svm.solvers.contract.SolverSpec.mode`)."""
    return spec.mode(params, meta)


def solve_sweep(
    store: Store,
    engine: Engine,
    spec: SolverSpec,
    params: SolverParams,
    Cs: Sequence[float],
    *,
    callback: Callback | None = None,
    warm_start: bool = True,
) -> SweepResult:
    """Train solver ``spec`` at every C of ``Cs`` (see the module docstring).

    Parameters
    ----------
    store, engine
        As for a solver's ``solve``.
    spec : SolverSpec
        The solver (``ooc_svm.solvers.get_solver(name)``).
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
        # what the parameters choose from the budget (perf's auto), by the sizes handed down
        run = params
        if params.chooses_by_budget():
            run = params.for_sizes(meta, sizes_of(engine, params.OWN_CLAIMS))
        run.validate(meta)
    mode = spec.mode(params, meta)
    if mode == "warm" and not warm_start:
        mode = "independent"
    t0 = time.perf_counter()
    p0 = engine.passes + getattr(engine, "partial_passes", 0)
    if mode == "shared":
        assert spec.solve_sweep is not None  # SolverSpec.mode checks it
        results = spec.solve_sweep(store, engine, params, Cs, callback)
        warm = [False] * len(Cs)
    elif mode == "warm":
        results, warm = _dual_warm(store, engine, spec, params, Cs, callback)
    else:
        results = [
            _independent(store, engine, spec, params.replace(C=c), tagged(callback, C=c, C_index=k))
            for k, c in enumerate(Cs)
        ]
        warm = [False] * len(Cs)
    passes = engine.passes + getattr(engine, "partial_passes", 0) - p0
    log.info("C sweep (%s): %d values, %d passes", mode, len(Cs), passes)
    return SweepResult(Cs, results, int(passes), mode, time.perf_counter() - t0, warm)


def _independent(store, engine, spec: SolverSpec, params, callback) -> Result:
    """One C value trained alone (one-vs-rest for classes)."""
    if store.meta.label_kind == "multiclass":
        from .ovr import train_ovr

        return train_ovr(store, spec, engine, params, callback=callback)
    return spec.solve(store, engine, params, callback=callback)


def _dual_warm(
    store, engine, spec: SolverSpec, params, Cs: list[float], callback
) -> tuple[list[Result], list[bool]]:
    """Dual solvers: ascending C, each started from the previous model (its
    :class:`~.warm.Start`, as ``--init`` passes one; the first one cold, through
    ``solve_warm`` too: smo's linear models keep their dual coefficients only when trained
    this way)."""
    assert spec.solve_warm is not None  # SolverSpec.mode says "warm" only then
    results: list[Result] = []
    warm: list[bool] = []
    prev = None
    for k, c in enumerate(Cs):
        cb = tagged(callback, C=c, C_index=k)
        start = start_from(prev, store.meta)
        res = spec.solve_warm(store, engine, params.replace(C=c), start, callback=cb)
        warm.append(prev is not None)
        results.append(res)
        prev = res.model
        # the next value starts from it by global row index (no fingerprint pass)
        prev.info.setdefault("rows", rows_record(store.meta))
        log.info("C sweep: C=%g: %d passes, %s", c, res.passes, "warm" if warm[-1] else "cold")
    return results, warm


__all__ = [
    "MAX_C_VALUES",
    "SweepResult",
    "parse_c_values",
    "solve_sweep",
    "sweep_mode",
]
