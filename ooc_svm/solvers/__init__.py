"""The four solvers behind one interface.

Each solver module (``perf``, ``smo``, ``active_set``, ``irwls``) provides

- ``Params``: the frozen dataclass of its parameters (:mod:`ooc_svm.solvers.params`: type,
  default and help of each; ``train`` generates its flags and ``--help`` from it);
- ``DEFAULTS``: ``Params.defaults()``, the dict of parameter names and defaults;
- ``STOPPING_RULE``: one line describing its stopping rule;
- ``solve(store, engine, params: Params, *, callback=None, checkpoint=None) -> Result``
  (``params`` may also be a dict, converted by ``Params.from_mapping``);
- ``SUPPORTS_CHECKPOINT`` (and ``SUPPORTS_OVR_CHECKPOINT``, ``solve_ovr`` for perf).

One-vs-rest training of multiclass stores is :mod:`ooc_svm.solvers.ovr`.

Solvers do no I/O, printing or progress drawing: they report each iteration through
``callback(record: dict)`` and the ``ooc_svm`` logger.

Importing a solver package is cheap: its ``__init__`` holds ``Params``, ``DEFAULTS``,
``STOPPING_RULE``, ``SUPPORTS_CHECKPOINT`` and a ``solve`` that imports the algorithm (numba
kernels included) when it runs; its other names are imported on first use
(:func:`lazy_exports`). ``ooc-svm train`` builds its flags and ``--help`` from
:func:`ooc_svm.api.solver_catalogue` without loading any solver's algorithm.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from ..model.model import Model
    from ..store.format import StoreMeta

SOLVER_MODULES = {
    "perf": "ooc_svm.solvers.perf",
    "smo": "ooc_svm.solvers.smo",
    "active-set": "ooc_svm.solvers.active_set",
    "irwls": "ooc_svm.solvers.irwls",
}


class SolverError(Exception):
    """A solver cannot run with the given store or parameters; the message says why."""


@dataclass
class Result:
    """What a solver returns.

    Attributes
    ----------
    model : Model
    objective : float or None
        Primal objective in LIBLINEAR units, ½‖w‖² + C Σ ξᵢ (None where not computable).
    dual_objective : float or None
        For dual solvers: the dual objective in LIBSVM's sign convention
        (min ½αᵀQα − eᵀα, so negative), else None.
    iterations, passes : int
    seconds : float
    stop_value : float
        The final value of the solver's stopping criterion.
    history : list of dict
        One record per iteration (what the callback received).
    summary : dict
        Solver-specific extra fields for the ``--json`` summary.
    converged : bool or None
        Whether the stopping rule was met (False: stopped by ``max_iter`` or a stall); None
        takes ``summary["converged"]`` (True when absent).
    stop_reason : str or None
        Why an unconverged run stopped: ``"max_iter"`` or ``"stalled"``.
    """

    model: Model
    objective: float | None
    dual_objective: float | None
    iterations: int
    passes: int
    seconds: float
    stop_value: float
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    converged: bool | None = None
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        if self.converged is None:
            self.converged = bool(self.summary.get("converged", True))
        self.converged = bool(self.converged)
        if not self.converged and self.stop_reason is None:
            self.stop_reason = "max_iter"

    def to_json_dict(self, solver: str) -> dict[str, Any]:
        d = {
            "solver": solver,
            "objective": self.objective,
            "dual_objective": self.dual_objective,
            "iterations": int(self.iterations),
            "passes": int(self.passes),
            "seconds": float(self.seconds),
            "stop_value": float(self.stop_value),
            "converged": bool(self.converged),
        }
        d.update(self.summary)
        d["converged"] = bool(self.converged)
        return d


#: result values that must be finite for a model to be written (None: not computed)
FINITE_VALUES = ("objective", "dual_objective", "kkt_max_violation", "kkt_gap")


def check_finite(result: Result, solver: str, where: str = "") -> None:
    """Refuse a result whose objective, intercept, KKT values or weights are NaN or infinite.

    Such a run has overflowed (feature values near the float32 limit, 3.4e38, square to
    infinity) and its model would be refused by ``predict``; nothing must be written.

    Raises
    ------
    SolverError
        Naming the first non-finite value and what to do.
    """
    import numpy as np

    values: dict[str, Any] = {
        "objective": result.objective,
        "dual_objective": result.dual_objective,
    }
    values.update({k: result.summary.get(k) for k in FINITE_VALUES[2:]})
    if isinstance(result.stop_value, float) and np.isnan(result.stop_value):
        values["stopping value"] = result.stop_value
    m = result.model
    values["intercept"] = m.intercept_
    for name in ("coef_", "dual_coef_"):
        values[name.rstrip("_")] = getattr(m, name, None)
    sv = getattr(m, "support_vectors_", None)
    if sv is not None:
        values["support vector"] = getattr(sv, "data", sv)
    for name, v in values.items():
        if v is None:
            continue
        a = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            bad = a.flat[int(np.flatnonzero(~np.isfinite(a.ravel()))[0])]
            raise SolverError(
                f"{where}{solver}: training failed: {name} is {bad} (the arithmetic "
                "overflowed: feature values near the float32 limit 3.4e38?); scale the "
                "features (e.g. to [-1, 1]) and train again; no model written"
            )


def get_solver(name: str) -> ModuleType:
    """Import and return the solver module for ``--solver name``."""
    if name not in SOLVER_MODULES:
        raise SolverError(f"unknown solver {name!r}; choose one of {', '.join(SOLVER_MODULES)}")
    try:
        return importlib.import_module(SOLVER_MODULES[name])
    except ModuleNotFoundError as e:
        if e.name == SOLVER_MODULES[name]:
            raise SolverError(f"solver {name!r} is not available in this build") from None
        raise


def available_solvers() -> list[str]:
    """Solvers whose module is present and complete (``Params``, ``STOPPING_RULE``, ``solve``)."""
    out = []
    for name, mod in SOLVER_MODULES.items():
        if importlib.util.find_spec(mod) is None:
            continue
        try:
            m = importlib.import_module(mod)
        except Exception:  # a broken solver must not take the CLI down
            logging.getLogger(__name__).debug("solver %s failed to import", name, exc_info=True)
            continue
        # declared, not fetched: a lazily exported ``solve`` stays unimported until it runs
        names = set(vars(m)) | set(getattr(m, "__all__", ()))
        if {"Params", "STOPPING_RULE", "solve"} <= names:
            out.append(name)
    return out


def lazy_exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package``: ``names`` maps an attribute to the
    submodule (relative, e.g. ``".passes"``) it is imported from on first access; the value
    is then stored in the package, so later accesses are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        sub = names.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sub, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def binary_classes(meta: StoreMeta) -> tuple[float, float]:
    """(negative, positive) label values of a binary store: the smaller value is negative."""
    labels = meta.labels or []
    if meta.label_kind == "ordinal":
        raise SolverError(
            "ranking data needs --solver perf (--loss ordinal or roc); this solver trains "
            f"binary classifiers and the store has rank labels {labels[:10]}"
            f"{'…' if len(labels) > 10 else ''}"
            + (" with query ids" if getattr(meta, "has_qid", False) else "")
        )
    if meta.label_kind != "binary" or len(labels) != 2:
        raise SolverError(
            f"this solver needs binary labels; the store has label kind {meta.label_kind!r} "
            f"with values {labels[:10]}{'…' if len(labels) > 10 else ''} "
            "(use --multiclass ovr for more classes)"
        )
    return float(labels[0]), float(labels[1])


Callback = Callable[[dict], None]
