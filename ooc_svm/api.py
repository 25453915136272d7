"""Python functions behind the CLI: ``train`` (with one-vs-rest multiclass and checkpoints)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .engine import Engine, make_engine
from .solvers import SOLVER_MODULES, Callback, Result, SolverError, available_solvers, get_solver
from .solvers.ovr import combine_ovr_models, train_ovr
from .solvers.params import KernelSolverParams, SolverParams, flag_name
from .store import open_store

if TYPE_CHECKING:
    from .checkpoint import Checkpointer

log = logging.getLogger(__name__)

__all__ = [
    "KernelSolverParams",
    "SolverError",
    "SolverParams",
    "combine_ovr_models",
    "flag_name",
    "solver_catalogue",
    "solver_names",
    "solver_params",
    "train",
]


def solver_names() -> list[str]:
    """Every ``--solver`` name."""
    return list(SOLVER_MODULES)


def solver_catalogue() -> dict[str, tuple[type[SolverParams], str]]:
    """``{solver: (Params class, stopping rule)}`` of the available solvers."""
    out = {}
    for name in available_solvers():
        mod = get_solver(name)
        out[name] = (mod.Params, mod.STOPPING_RULE)
    return out


def solver_params(solver: str, params: dict[str, Any] | None = None) -> SolverParams:
    """The validated ``Params`` of ``solver`` from keyword values (None = default); unknown
    names are refused with the list of valid ones."""
    return get_solver(solver).Params.from_mapping(params or {})


def train(
    store,
    solver: str = "perf",
    *,
    engine: Engine | None = None,
    scheduler: str | None = None,
    callback: Callback | None = None,
    multiclass: str | None = None,
    checkpoint: str | None = None,
    resume: bool = False,
    shard_cache_mb: float | None = None,
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
    **params
        Solver parameters: the fields of the solver's ``Params`` (``C``, ``kernel``,
        ``gamma``, ``eps``, ``tol``, ...); unknown names are rejected. Missing ones (or None)
        take the defaults. ``params=<Params instance>`` passes a ready one.

    Returns
    -------
    Result
    """
    if isinstance(store, str):
        store = open_store(store)
    mod = get_solver(solver)
    ready = params.pop("params", None)
    if isinstance(ready, SolverParams) and not params:
        typed = ready
    elif ready is not None:
        raise SolverError("give params=<Params> or keyword parameters, not both")
    else:
        typed = mod.Params.from_mapping(params)
    full = typed.to_dict()
    kind = store.meta.label_kind
    if multiclass is None and kind == "multiclass":
        multiclass = "ovr"
    if multiclass not in (None, "ovr"):
        raise SolverError(f"unknown multiclass mode {multiclass!r}; use ovr")
    if probability:
        _check_probability(store, multiclass, probability_folds)
    ckpt: Checkpointer | None = None
    class_ckpt: Callable[[int, float], Checkpointer] | None = None  # one-vs-rest
    if checkpoint is not None or resume:
        if checkpoint is None:
            raise SolverError("--resume needs the checkpoint directory")
        if not getattr(mod, "SUPPORTS_CHECKPOINT", False):
            raise SolverError(f"solver {solver!r} does not support checkpoints")
        from .checkpoint import Checkpointer

        if multiclass == "ovr":
            if not getattr(mod, "SUPPORTS_OVR_CHECKPOINT", False):
                raise SolverError(
                    f"checkpoints of one-vs-rest training are supported for perf only, not "
                    f"{solver!r}"
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

            class_ckpt = per_class
        else:
            ckpt = Checkpointer(checkpoint, solver, full, resume=resume, store=store)
    own_engine = engine is None
    if engine is None:
        if isinstance(shard_cache_mb, int | float) and not shard_cache_mb >= 0:
            raise SolverError("--shard-cache-mb must be >= 0")
        engine = make_engine(scheduler, cache_mb=shard_cache_mb)
    t0 = time.perf_counter()
    try:
        if multiclass == "ovr":
            result = train_ovr(store, mod, engine, typed, callback=callback, checkpoint=class_ckpt)
        else:
            result = mod.solve(store, engine, typed, callback=callback, checkpoint=ckpt)
        if probability:
            fit_probability(
                result.model, store, probability_folds, solver, engine, typed, multiclass
            )
    finally:
        if own_engine:
            engine.close()
    log.debug("trained with %s in %.3fs", solver, time.perf_counter() - t0)
    return result


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
    if n_shards < folds:
        raise SolverError(
            f"{store.path}: --probability-folds {folds} needs at least {folds} shards, the "
            f"store has {n_shards}; use fewer folds or re-ingest with a smaller --shard-rows"
        )


def fit_probability(
    model,
    store,
    folds: int,
    solver: str,
    engine: Engine,
    params: SolverParams,
    multiclass: str | None = None,
) -> None:
    """Fit Platt's sigmoid(s) of ``model`` on shard-fold cross-validated decision values.

    :func:`ooc_svm.probability.cross_val_decision_values` trains ``folds`` models with the same
    solver and parameters on the other folds' shards, and scores each fold's shards with the
    model that did not see them; :func:`ooc_svm.probability.fit_platt` fits one sigmoid
    (binary) or one per class (one-vs-rest, normalised at prediction). The result is set on
    ``model`` (``probA_``, ``probB_``, ``probability_method``, ``info["probability"]``).
    """
    from .probability import cross_val_decision_values, fit_platt

    t0 = time.perf_counter()
    cv = cross_val_decision_values(
        store,
        folds,
        params.seed,
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
