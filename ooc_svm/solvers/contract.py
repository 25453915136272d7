"""The solver contract: what a solver package declares, and the registry of solvers.

Every solver package exports ``SPEC``, a :class:`SolverSpec`: its ``--solver`` name, its
typed parameters, its stopping rule and how progress and histories label it, what it can do
(checkpoints, one-vs-rest checkpoints, warm starts, a shared C sweep) and its entry points.
The rest of the package reads a solver through its spec only: no solver name is compared
outside the solver's own package and no capability is probed by attribute.

The registry is the list of specs (:func:`solver_specs`): the built-in packages of
:data:`SOLVER_PACKAGES`, imported when first asked for (their ``__init__`` is light: reading
``Params`` loads no numba), then the specs added with :func:`register`. A package that fails
to import is not a solver; :func:`unavailable_solvers` says why.

The entry points (``solve``, ``solve_warm``, ``solve_ovr``, ``solve_sweep``) are
:class:`Entry` objects: a module and a function name, imported on the first call, so a spec
costs no import of the algorithm.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import Result, SolverError
from .params import KernelSolverParams, SolverParams

if TYPE_CHECKING:
    from ..store.format import StoreMeta

log = logging.getLogger(__name__)

#: the built-in solver packages, in the order of ``--solver``'s choices; each exports SPEC
SOLVER_PACKAGES = (
    "ooc_svm.solvers.perf",
    "ooc_svm.solvers.smo",
    "ooc_svm.solvers.active_set",
    "ooc_svm.solvers.irwls",
)

#: the problems a solver may solve: LIBSVM's C-SVC dual (min ½αᵀQα − eᵀα, yᵀα = 0,
#: 0 ≤ α ≤ C, an unregularised intercept) or LIBLINEAR's L1-loss primal with the bias a
#: constant feature regularised like the weights (``-B``)
PROBLEMS = ("libsvm", "liblinear")

#: how :func:`ooc_svm.solvers.sweep.solve_sweep` trains several values of C: every value's
#: iteration fused into one pass per round, each value started from the previous one's
#: model, or each value on its own
SWEEP_MODES = ("shared", "warm", "independent")


@dataclass(frozen=True)
class Entry:
    """A function of a solver's algorithm, named by module and attribute and imported on the
    first call (so that a spec imports no numba). ``inspect.signature`` shows the function's
    own signature."""

    module: str
    name: str

    def resolve(self) -> Callable[..., Any]:
        """The function itself (imports its module)."""
        fn: Callable[..., Any] = getattr(importlib.import_module(self.module), self.name)
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.resolve())

    def __repr__(self) -> str:
        return f"<entry {self.module}.{self.name}>"


def _no_sweep_mode(spec: SolverSpec, params: Any, meta: StoreMeta) -> str:
    """The default C sweep: warm starts where the solver has them (binary stores), else
    every value on its own."""
    if meta.label_kind != "multiclass" and spec.solve_warm is not None:
        return "warm"
    return "independent"


@dataclass(frozen=True)
class SolverSpec:
    """What a solver declares (see the module docstring).

    Attributes
    ----------
    name : str
        The ``--solver`` name.
    Params : type of SolverParams
        The frozen parameter dataclass (flags, ``--help``, TOML and keywords come from it).
    stopping_rule : str
        One line describing the stopping rule (``train --help``).
    problem : str
        The optimisation problem, one of :data:`PROBLEMS` (what its reference optimum is).
    tolerance : str
        The field of ``Params`` that holds the stopping tolerance (``eps``, ``tol``).
    progress_label : str or callable
        The name of the stopping quantity in progress lines (``"KKT"``), or a function of the
        parameters giving it (perf: ``"viol"`` or ``"gap"`` by variant).
    record_labels : mapping
        Labels of record keys that mean something else for this solver than for most
        (smo records its dual value under ``objective``).
    violation_label : str
        The history plot's name of the recorded violation.
    primal_objective : bool
        The ``objective`` of the records is a primal value (else it may be the dual one).
    few_records_hint : str
        Why a history of this solver may hold a single iteration, and what to do.
    solve : callable
        ``solve(store, engine, params, *, callback=None, checkpoint=None) -> Result``.
    solve_warm : callable or None
        ``solve_warm(store, engine, params, init, *, callback=None) -> Result``: started from
        ``init``, the model of this store at another C or its :class:`~.warm.Start` (None:
        cold), passed on as ``params.init`` (the one warm-start route); the model returned
        keeps what starts the next C. None: no warm start.
    solve_ovr : callable or None
        ``solve_ovr(store, engine, params, classes, *, callback=None, checkpoint=None)``: all
        classes of a multiclass store at once (shared passes); None: one class after the
        other.
    ovr_fused : callable or None
        ``ovr_fused(params) -> bool``: whether ``solve_ovr`` takes the classes with these
        parameters (perf's ``dcd`` trains one class after the other); None: always.
    solve_sweep : callable or None
        ``solve_sweep(store, engine, params, Cs, callback) -> list[Result]``: every C in
        shared passes (for the parameters where ``sweep_mode`` says ``"shared"``).
    checkpoint : bool
        ``--checkpoint`` / ``--resume`` are supported.
    ovr_checkpoint : bool
        ... also for one-vs-rest training.
    checkpoint_often : mapping
        Parameters with which even a short run saves a checkpoint at every safe point.
    sweep_mode : callable
        ``sweep_mode(spec, params, meta) -> str``, one of :data:`SWEEP_MODES`.
    algorithm : str or None
        The field of ``Params`` whose choices pick the algorithm (perf's ``variant``, smo's
        ``selection``): the conformance suite runs its checks for every choice
        (:attr:`algorithms`). None: one algorithm.
    """

    name: str
    Params: type[SolverParams]
    stopping_rule: str
    solve: Callable[..., Result]
    problem: str = "libsvm"
    tolerance: str = "tol"
    progress_label: str | Callable[[Any], str] = "KKT"
    record_labels: Mapping[str, str] = field(default_factory=dict)
    violation_label: str = "KKT violation"
    primal_objective: bool = False
    few_records_hint: str = ""
    solve_warm: Callable[..., Result] | None = None
    solve_ovr: Callable[..., Result] | None = None
    solve_sweep: Callable[..., list[Result]] | None = None
    ovr_fused: Callable[[Any], bool] | None = None
    checkpoint: bool = False
    ovr_checkpoint: bool = False
    checkpoint_often: Mapping[str, Any] = field(default_factory=dict)
    sweep_mode: Callable[[SolverSpec, Any, StoreMeta], str] = _no_sweep_mode
    algorithm: str | None = None

    def __post_init__(self) -> None:
        if self.problem not in PROBLEMS:
            raise SolverError(f"solver {self.name!r}: problem {self.problem!r} not in {PROBLEMS}")
        if self.tolerance not in self.Params.names():
            raise SolverError(f"solver {self.name!r}: no parameter {self.tolerance!r}")
        if self.ovr_checkpoint and not self.checkpoint:
            raise SolverError(f"solver {self.name!r}: one-vs-rest checkpoints need checkpoints")
        if self.algorithm is not None and not self.algorithms:
            raise SolverError(
                f"solver {self.name!r}: algorithm {self.algorithm!r} is no parameter with choices"
            )

    @property
    def algorithms(self) -> tuple[Any, ...]:
        """The choices of the :attr:`algorithm` field, in its order (empty: none declared)."""
        if self.algorithm is None:
            return ()
        for f in self.Params.fields():
            if f.name == self.algorithm:
                return tuple(f.metadata.get("choices") or ())
        return ()

    @property
    def kernels(self) -> bool:
        """The solver trains kernel models (its parameters have a kernel)."""
        return issubclass(self.Params, KernelSolverParams)

    @property
    def DEFAULTS(self) -> dict[str, Any]:
        """Parameter names and defaults."""
        return self.Params.defaults()

    def stop_target(self, params: Any) -> tuple[str, float | None]:
        """``(name, value)`` of the stopping target, for progress lines."""
        label = self.progress_label
        name = label if isinstance(label, str) else label(params)
        value = getattr(params, self.tolerance, None)
        return name, None if value is None else float(value)

    def mode(self, params: Any, meta: StoreMeta) -> str:
        """How a C sweep trains this solver with ``params`` on a store with ``meta``."""
        mode = self.sweep_mode(self, params, meta)
        if mode not in SWEEP_MODES or (mode == "shared" and self.solve_sweep is None):
            raise SolverError(f"solver {self.name!r}: bad C sweep mode {mode!r}")
        return mode


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------

_BUILTIN: list[SolverSpec] | None = None
_FAILED: dict[str, str] = {}
_ADDED: list[SolverSpec] = []


def _builtin() -> list[SolverSpec]:
    global _BUILTIN
    if _BUILTIN is None:
        specs = []
        for package in SOLVER_PACKAGES:
            try:
                mod = importlib.import_module(package)
            except ImportError as e:  # a solver left out of this build, or broken
                _FAILED[package] = f"{type(e).__name__}: {e}"
                log.debug("solver package %s not available: %s", package, e)
                continue
            spec = vars(mod).get("SPEC")
            if not isinstance(spec, SolverSpec):
                _FAILED[package] = "it exports no SPEC (a SolverSpec)"
                continue
            specs.append(spec)
        _BUILTIN = specs
    return _BUILTIN


def solver_specs() -> list[SolverSpec]:
    """Every solver: the built-in ones that imported, then the registered ones."""
    return [*_builtin(), *_ADDED]


def solver_names() -> list[str]:
    """Every ``--solver`` name, in the registry's order."""
    return [s.name for s in solver_specs()]


def unavailable_solvers() -> dict[str, str]:
    """Built-in solver packages that failed to import: ``{package: reason}``."""
    _builtin()
    return dict(_FAILED)


def get_spec(name: str) -> SolverSpec:
    """The spec of ``--solver name``.

    Raises
    ------
    SolverError
        No solver has that name (the message lists them, and the packages that failed).
    """
    for spec in solver_specs():
        if spec.name == name:
            return spec
    failed = "".join(f"; {p} is not available ({why})" for p, why in _FAILED.items())
    raise SolverError(f"unknown solver {name!r}; choose one of {', '.join(solver_names())}{failed}")


def register(spec: SolverSpec) -> None:
    """Add a solver to the registry (after the built-in ones); its name must be new."""
    if spec.name in solver_names():
        raise SolverError(f"a solver named {spec.name!r} is already registered")
    _ADDED.append(spec)


def unregister(name: str) -> None:
    """Remove a solver added with :func:`register`."""
    _ADDED[:] = [s for s in _ADDED if s.name != name]
