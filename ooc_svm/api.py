"""Python functions behind the CLI: ``train`` (with one-vs-rest multiclass and checkpoints)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import memory_budget
from .solvers import (
    Callback,
    Result,
    SolverError,
    available_solvers,
    check_finite,
    get_solver,
)
from .solvers.contract import SolverSpec, solver_specs
from .solvers.params import KernelSolverParams, SolverParams, flag_name

if TYPE_CHECKING:
    from .c_sweep import SWEEP_METRICS, SweepOutcome, sweep_metric
    from .checkpoint import Checkpointer
    from .engine import Engine
    from .evaluation.reports import HistoryLabels
    from .model.model import Model
    from .solvers.ovr import combine_ovr_models
    from .store.base import Store

#: names of this module imported on first use (:func:`__getattr__`): the store, the engine,
#: one-vs-rest and the C sweep import numpy, which ``train --help`` (the solvers' ``Params``
#: only) never needs
_LAZY = {
    "SWEEP_METRICS": "c_sweep",
    "SweepOutcome": "c_sweep",
    "sweep_metric": "c_sweep",
    "combine_ovr_models": "solvers.ovr",
    "make_engine": "engine",
    "open_store": "store",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


log = logging.getLogger(__name__)

__all__ = [
    "KernelSolverParams",
    "SolverError",
    "SolverParams",
    "SWEEP_METRICS",
    "combine_ovr_models",
    "flag_name",
    "get_solver",
    "history_labels",
    "solver_catalogue",
    "solver_names",
    "solver_params",
    "sweep_metric",
    "train",
    "train_sweep",
    "SweepOutcome",
]


def solver_names() -> list[str]:
    """Every ``--solver`` name."""
    return available_solvers()


def solver_catalogue() -> dict[str, tuple[type[SolverParams], str]]:
    """``{solver: (Params class, stopping rule)}`` of the available solvers."""
    out = {}
    for name in available_solvers():
        spec = get_solver(name)
        out[name] = (spec.Params, spec.stopping_rule)
    return out


def history_labels(solver: str) -> HistoryLabels | None:
    """How a history of ``solver`` reads (for :mod:`ooc_svm.evaluation.reports`); None for a
    name no solver has (a history from another build)."""
    from .evaluation.reports import HistoryLabels

    try:
        spec = get_solver(solver)
    except SolverError:
        return None
    return HistoryLabels(
        tolerance=spec.tolerance,
        tolerance_default=spec.DEFAULTS.get(spec.tolerance),
        violation=spec.violation_label,
        primal_objective=spec.primal_objective,
        few_records_hint=spec.few_records_hint,
    )


def solver_params(solver: str, params: dict[str, Any] | None = None) -> SolverParams:
    """The validated ``Params`` of ``solver`` from keyword values (None = default); unknown
    names are refused with the list of valid ones."""
    return get_solver(solver).Params.from_mapping(params or {})


def train(
    store: Store | str,
    solver: str = "perf",
    *,
    engine: Engine | None = None,
    scheduler: str | None = None,
    callback: Callback | None = None,
    multiclass: str | None = None,
    checkpoint: str | None = None,
    resume: bool = False,
    shard_cache_mb: float | None = None,
    scheduler_timeout: float | None = None,
    probability: bool = False,
    probability_folds: int = 5,
    **params: Any,
) -> Result:
    """Train an SVM on a store.

    Parameters
    ----------
    store : str or Store
        Path of a store made by ``ooc-svm ingest`` / ``ooc-svm synth``, or an opened store.
    solver : {"perf", "smo", "active-set", "irwls"}
    engine : Engine, optional
        Engine to run passes on; default made from ``scheduler``.
    scheduler : str, optional
        ``local`` (default), ``threads``, ``processes`` or a Dask scheduler address.
    callback : callable, optional
        Receives one dict per iteration.
    multiclass : {"ovr", None}
        One-vs-rest for stores with more than two classes (default for ``multiclass`` stores).
    checkpoint : str, optional
        Directory for per-iteration checkpoints (solvers that support them).
    resume : bool
        Continue from the latest checkpoint in ``checkpoint``.
    shard_cache_mb : float or str, optional
        Budget (MiB, per process; ``"auto"``, ``"auto:SHARE"``) of the engine's cache of
        decoded shards, when the engine is made here (default ``$OOC_SVM_SHARD_CACHE_MB``,
        else ``"auto"``; 0: every pass reads; see :func:`ooc_svm.engine.make_engine`).
    scheduler_timeout : float, optional
        Seconds an existing Dask scheduler may go without answering (connecting, and while
        passes run) before the run stops with an error (default
        ``$OOC_SVM_SCHEDULER_TIMEOUT``, else 60).
    **params
        Solver parameters: the fields of the solver's ``Params`` (``C``, ``kernel``,
        ``gamma``, ``eps``, ``tol``, ...); unknown names are rejected. Missing ones (or None)
        take the defaults. ``params=<Params instance>`` passes a ready one.

    Returns
    -------
    Result
    """
    from .solvers.ovr import train_ovr
    from .store import open_store

    if isinstance(store, str):
        store = open_store(store)
    spec = get_solver(solver)
    typed = _with_start(_typed_params(spec, params), store.meta)
    multiclass = _multiclass_mode(store, multiclass)
    if probability:
        _check_probability(store, multiclass, probability_folds)
    ckpt, class_ckpt = _checkpointers(spec, solver, store, typed, multiclass, checkpoint, resume)
    with _run_scope(engine, scheduler, shard_cache_mb, scheduler_timeout) as (engine, budget):
        t0 = time.perf_counter()
        typed = claim_memory(budget, store, engine, typed)
        if multiclass == "ovr":
            result = train_ovr(store, spec, engine, typed, callback=callback, checkpoint=class_ckpt)
        else:
            result = spec.solve(store, engine, typed, callback=callback, checkpoint=ckpt)
        check_finite(result, solver, f"{store.path}: ")
        if probability:
            fit_probability(
                result.model, store, probability_folds, solver, engine, typed, multiclass
            )
        result.summary["memory_budget"] = budget.as_dict()
    log.debug("trained with %s in %.3fs", solver, time.perf_counter() - t0)
    remember_hashing(result.model, store.meta)
    remember_rows(result.model, store.meta)
    return result


def claim_memory(
    budget: memory_budget.MemoryBudget, store: Store, engine: Engine, typed: SolverParams
) -> SolverParams:
    """Claim from the process's memory budget what a training on ``store`` cannot do without
    (the engine's decoded shards in flight, the solver's needs), before any work: a budget
    below that is refused in one line naming the minimum. Resolves the run's automatic sizes
    once (:class:`~ooc_svm.sizes.Sizes`: the room perf's ``--variant auto`` chooses by, the
    budget the later shares and claims draw from) and hands them to the engine, whose
    solver reads them there (:func:`~ooc_svm.sizes.sizes_of`). Returns the solver's
    parameters with their automatic sizes within the budget
    (:meth:`SolverParams.fit_memory`); the shard cache, sized on the first pass, takes its
    share of what is left."""
    from .sizes import Sizes

    meta = store.meta
    code, shards = memory_budget.code_need(budget), engine.memory_need(store)
    fix = "re-ingest with smaller shards (--shard-mb)" if shards > 64 * 2**20 else ""
    base = {"ooc-svm's code and libraries": code, "decoded shards in flight": shards}
    # the least the whole run claims, checked before the first claim: a refusal names a
    # limit that every later claim fits too (one hint, not a chain of them); the solver's
    # floor is read as if the claims above were made, as fit_memory reads it (perf's auto
    # picks its variant from the room they leave, resolved here once)
    made = dict(budget.claims)
    budget.claims = {**made, **base}
    try:
        sizes = Sizes.of(budget, typed.OWN_CLAIMS)
        run = typed.for_sizes(meta, sizes)  # what will run (perf: auto resolved)
        floor = run.memory_floor(meta)
    finally:
        budget.claims = made
    budget.check({**base, **floor}, f"--solver {typed.SOLVER} on this store", fix)
    budget.require("ooc-svm's code and libraries", code)
    budget.require("decoded shards in flight", shards, "a pass over this store", fix)
    fitted = run.fit_memory(meta, budget)
    if run is not typed:  # the sizes fitted, on the parameters as given (auto stays auto)
        fitted = typed.replace(**{k: getattr(fitted, k) for k in typed.BUDGET_SHARES})
    engine.use_sizes(sizes)
    log.debug("%s; claimed %s", budget.describe(), budget.as_dict()["claims_mib"])
    return fitted


def remember_rows(model: Model, meta: Any) -> None:
    """A model records the rows it was trained on (``info["rows"]``), so that a later
    ``--init`` on the store grown by ``ingest --append`` knows which rows it knew and
    refuses a store that no longer holds them (:mod:`ooc_svm.solvers.warm`)."""
    from .solvers.warm import rows_record

    model.info["rows"] = rows_record(meta)


def remember_hashing(model: Model, meta: Any) -> None:
    """A model trained on a hashed store records the hashing (``info["hashing"]``), so that
    ``predict``/``evaluate`` hash text input alike and refuse a store hashed otherwise."""
    if getattr(meta, "hashing", None):
        model.info["hashing"] = {k: meta.hashing[k] for k in ("bits", "hash", "key")}


@contextmanager
def _run_scope(
    engine: Engine | None, scheduler: str | None, shard_cache_mb, scheduler_timeout
) -> Iterator[tuple[Engine, memory_budget.MemoryBudget]]:
    """``(engine, budget)`` of one run: the given engine or one made here (closed at the
    end), and the process's memory budget, whose claims made during the run are released
    when it ends."""
    own_engine = engine is None
    if engine is None:
        engine = _make_engine(scheduler, shard_cache_mb, scheduler_timeout)
    budget = memory_budget.current()
    claims, sizes = dict(budget.claims), engine.sizes
    try:
        yield engine, budget
    finally:
        budget.claims = claims
        engine.use_sizes(sizes)  # this run's sizes end with it (a fold's, inside a sweep's)
        if own_engine:
            engine.close()


def _with_start(typed: SolverParams, meta: Any) -> SolverParams:
    """``typed`` with its ``init`` (a model directory or a Model) as the one warm-start
    object every solver takes (:func:`ooc_svm.solvers.warm.start_from`; the model is read
    when the solver first needs it)."""
    if typed.init is None:
        return typed
    from .solvers.warm import start_from

    return typed.replace(init=start_from(typed.init, meta))


def _typed_params(spec: SolverSpec, params: dict[str, Any]) -> SolverParams:
    """The solver's ``Params`` from keywords, or the ready ``params=<Params>``."""
    ready = params.pop("params", None)
    if isinstance(ready, SolverParams) and not params:
        return ready
    if ready is not None:
        raise SolverError("give params=<Params> or keyword parameters, not both")
    return spec.Params.from_mapping(params)


def _multiclass_mode(store, multiclass: str | None) -> str | None:
    if multiclass is None and store.meta.label_kind == "multiclass":
        multiclass = "ovr"
    if multiclass not in (None, "ovr"):
        raise SolverError(f"unknown multiclass mode {multiclass!r}; use ovr")
    meta = store.meta
    if multiclass == "ovr" and meta.has_qid and meta.label_kind == "ordinal":
        # predict and evaluate refuse a one-vs-rest model on this store (scoring.check_store)
        raise SolverError(
            f"{store.path}: --multiclass ovr trains classes, but the store is a ranking store "
            "(ordinal ranks within each qid); drop --multiclass to train a ranking model, or "
            "re-ingest with --label-kind multiclass to train classes"
        )
    return multiclass


def _make_engine(scheduler: str | None, shard_cache_mb, scheduler_timeout=None) -> Engine:
    from .engine import EngineError, EngineOptions, make_engine
    from .sizes import Sizes

    try:
        options = EngineOptions(cache_mb=shard_cache_mb, scheduler_timeout=scheduler_timeout)
    except EngineError as e:  # a parameter of train, reported as one
        raise SolverError(str(e)) from None

    def measure() -> Sizes:  # a local Dask cluster's workers share the budget, split when it starts
        return Sizes.of(memory_budget.current())

    return make_engine(scheduler, options, measure=measure)


def _checkpointers(
    spec: SolverSpec, solver: str, store, typed: SolverParams, multiclass, checkpoint, resume: bool
) -> tuple[Checkpointer | None, Callable[[int, float], Checkpointer] | None]:
    """``(checkpointer, per-class factory for one-vs-rest)``; both None without checkpoints."""
    if checkpoint is None and not resume:
        return None, None
    if checkpoint is None:
        raise SolverError("--resume needs the checkpoint directory")
    if not spec.checkpoint:
        raise SolverError(f"solver {solver!r} does not support checkpoints")
    from .checkpoint import Checkpointer

    full = typed.to_dict()
    if multiclass != "ovr":
        return Checkpointer(checkpoint, solver, full, resume=resume, store=store), None
    if not spec.ovr_checkpoint:
        able = [s.name for s in solver_specs() if s.ovr_checkpoint]
        raise SolverError(
            f"checkpoints of one-vs-rest training are supported for {', '.join(able)} only, "
            f"not {solver!r}"
        )
    classes = [float(c) for c in (store.meta.labels or [])]

    def per_class(k: int, c: float) -> Checkpointer:
        # one directory per class; the class list is checked on resume
        return Checkpointer(
            os.path.join(checkpoint, f"class-{k:04d}"),
            solver,
            {**full, "ovr_class": c, "ovr_classes": classes},
            resume=resume,
            store=store,
        )

    return None, per_class


def _check_probability(store, multiclass: str | None, folds: int) -> None:
    """Refuse ``probability=True`` before any training when it cannot work."""
    meta = store.meta
    if not (meta.label_kind in ("binary", "multiclass") or multiclass == "ovr"):
        raise SolverError(
            f"{store.path}: probability outputs need binary or class labels, the store's are "
            f"{meta.label_kind}; drop --probability (or train classes with --multiclass ovr)"
        )
    n_shards = len(meta.shards)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise SolverError(f"--probability-folds must be an integer >= 2, got {folds!r}")
    if n_shards < folds and meta.n_rows < 2 * folds:
        # fewer shards than folds: folds of rows within the shards (probability.py)
        raise SolverError(
            f"{store.path}: --probability-folds {folds} needs at least {2 * folds} rows, the "
            f"store has {meta.n_rows}; use fewer folds"
        )


def fit_probability(
    model: Model,
    store: Store,
    folds: int,
    solver: str,
    engine: Engine,
    params: SolverParams,
    multiclass: str | None = None,
) -> None:
    """Fit Platt's sigmoid(s) of ``model`` on shard-fold cross-validated decision values.

    :func:`ooc_svm.evaluation.cross_validation.cross_val_decision_values` trains ``folds``
    models with the same solver and parameters on the other folds' shards, and scores each
    fold's shards with the model that did not see them;
    :func:`ooc_svm.evaluation.cross_validation.fit_platt` fits one sigmoid (binary) or one per
    class (one-vs-rest, normalised at prediction). The result is set on
    ``model`` (``probA_``, ``probB_``, ``probability_method``, ``info["probability"]``).
    """
    from .evaluation.cross_validation import cross_val_decision_values, fit_platt

    t0 = time.perf_counter()
    cv = cross_val_decision_values(
        store,
        folds,
        params.seed,
        train=train,
        solver=solver,
        engine=engine,
        multiclass=multiclass,
        params=params,
    )
    A, B = fit_platt(cv)
    model.set_probability(A, B)
    model.info["probability"] = {
        "folds": int(folds),
        "seed": int(params.seed),
        "passes": int(sum(r.passes or 0 for r in cv.results)),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    log.debug("probability: sigmoid fitted on %d shard folds: A=%s B=%s", folds, A, B)


def train_sweep(
    store: Store | str,
    solver: str = "perf",
    C: str | float | Sequence[float] = (0.01, 0.1, 1.0, 10.0),
    *,
    validation: Store | str | None = None,
    folds: int | None = None,
    metric: str | None = None,
    engine: Engine | None = None,
    scheduler: str | None = None,
    callback: Callback | None = None,
    shard_cache_mb: float | None = None,
    scheduler_timeout: float | None = None,
    warm_start: bool = True,
    **params: Any,
) -> SweepOutcome:
    """Train at every value of ``C`` in one sweep and keep the best by a validation metric.

    perf (error loss) trains every C together, sharing every streamed pass (passes = the
    slowest C's, not the sum); the dual solvers train from the smallest C up, each value
    warm-started from the previous solution (:mod:`ooc_svm.solvers.sweep`). The metric
    of every C's model is measured on ``validation`` (a store, one streamed pass per C) or,
    with ``folds`` = K, by a cross-validation whose folds are groups of whole shards
    (:func:`ooc_svm.evaluation.cross_validation.fold_assignment`, seeded by ``seed``): the
    metric is the mean over folds and the returned model is retrained on all the data at the
    best C. Ties go to the smaller C.

    Parameters
    ----------
    store : str or Store
    solver : str
    C : str, float or sequence of float
        ``"0.01,0.1,1,10"`` or a list.
    validation : str or Store, optional
    folds : int, optional
        Give exactly one of ``validation`` and ``folds``.
    metric : {"accuracy", "auc", "ndcg", "pairwise"}, optional
        See :func:`sweep_metric` for the default.
    warm_start : bool
        Dual solvers: warm-start each C from the previous one (False: cold starts).
    **params
        Solver parameters as for :func:`train` (except ``C``).

    Returns
    -------
    SweepOutcome
    """
    from .c_sweep import record_sweep, run_sweep, sweep_metric
    from .solvers.sweep import parse_c_values
    from .store import open_store

    if isinstance(store, str):
        store = open_store(store)
    spec = get_solver(solver)
    Cs = parse_c_values(C)
    params.pop("C", None)
    typed = _with_start(_typed_params(spec, params).replace(C=Cs[0]), store.meta)
    meta = store.meta
    if (validation is None) == (folds is None):
        raise SolverError("a C sweep needs --validation STORE or --folds K (one of them)")
    key = sweep_metric(meta.label_kind, bool(meta.has_qid), metric)
    with _run_scope(engine, scheduler, shard_cache_mb, scheduler_timeout) as (engine, budget):
        t0 = time.perf_counter()
        typed = claim_memory(budget, store, engine, typed)
        out = run_sweep(
            store, spec, typed, Cs, validation, folds, key, engine, callback, warm_start
        )
    out.seconds = time.perf_counter() - t0
    check_finite(out.result, solver, f"{store.path}: ")
    record_sweep(out)
    remember_hashing(out.result.model, meta)
    return out
