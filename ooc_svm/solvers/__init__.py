"""The solvers behind one interface: :class:`Result`, :class:`SolverError` and the registry.

Each solver package (``perf``, ``smo``, ``active_set``, ``irwls``) exports ``SPEC``, its
:class:`~ooc_svm.solvers.contract.SolverSpec`: name, ``Params`` (the frozen dataclass of its
parameters, :mod:`ooc_svm.solvers.params`: type, default and help of each; ``train``
generates its flags and ``--help`` from it), stopping rule, progress labels, capabilities and
``solve(store, engine, params, *, callback=None, checkpoint=None) -> Result`` (``params`` may
also be a dict, converted by ``Params.from_mapping``). :func:`get_solver` gives a solver's
spec; the registry is :mod:`ooc_svm.solvers.contract`.

One-vs-rest training of multiclass stores is :mod:`ooc_svm.solvers.ovr`; several values of
C, :mod:`ooc_svm.solvers.sweep`.

Solvers do no I/O, printing or progress drawing: they report each iteration through
``callback(record: dict)`` and the ``ooc_svm`` logger.

Importing a solver package is cheap: its ``__init__`` holds the card, ``Params`` and the
spec, whose entry points import the algorithm (numba kernels included) when first called;
its other names are imported on first use (:func:`lazy_exports`). ``ooc-svm train`` builds
its flags and ``--help`` from the specs without loading any solver's algorithm.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model.model import Model
    from ..store.format import StoreMeta
    from .contract import SolverSpec


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


def get_solver(name: str) -> SolverSpec:
    """The spec of ``--solver name`` (:func:`ooc_svm.solvers.contract.get_spec`)."""
    from .contract import get_spec

    return get_spec(name)


def available_solvers() -> list[str]:
    """The names of the solvers in the registry (a package that failed to import is left
    out: :func:`ooc_svm.solvers.contract.unavailable_solvers` says why)."""
    from .contract import solver_names

    return solver_names()


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


def tagged(callback: Callback | None, **fields: Any) -> Callback | None:
    """``callback`` with ``fields`` added to every record (a C sweep's ``C``, a class's
    ``class``); None stays None."""
    if callback is None:
        return None

    def cb(rec: dict) -> None:
        callback({**rec, **fields})

    return cb
