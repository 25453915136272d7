"""Python functions behind the CLI: ``train`` (with one-vs-rest multiclass and checkpoints)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .engine import Engine, make_engine
from .model import Model
from .solvers import Callback, Result, SolverError, get_solver
from .store import open_store
from .store.views import BinaryView

log = logging.getLogger("ooc_svm")


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
    shard_cache_mb : float, optional
        Byte budget (MiB, per process) of the engine's cache of decoded shards, when the
        engine is made here (default ``$OOC_SVM_SHARD_CACHE_MB`` or 0: every pass reads).
    **params
        Solver parameters (``C``, ``kernel``, ``gamma``, ``eps``, ``tol``, ...); unknown
        names are rejected. Missing ones take the solver's ``DEFAULTS``.

    Returns
    -------
    Result
    """
    if isinstance(store, str):
        store = open_store(store)
    mod = get_solver(solver)
    full = dict(mod.DEFAULTS)
    unknown = set(params) - set(full)
    if unknown:
        raise SolverError(
            f"solver {solver!r} does not take {', '.join(sorted(unknown))}; "
            f"its parameters are {', '.join(sorted(full))}"
        )
    full.update({k: v for k, v in params.items() if v is not None})
    kind = store.meta.label_kind
    if multiclass is None and kind == "multiclass":
        multiclass = "ovr"
    if multiclass not in (None, "ovr"):
        raise SolverError(f"unknown multiclass mode {multiclass!r}; use ovr")
    ckpt = None
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

            def ckpt(k: int, c: float) -> Checkpointer:
                # one directory per class; the class list is checked on resume
                return Checkpointer(
                    os.path.join(checkpoint, f"class-{k:04d}"),
                    solver,
                    {**full, "ovr_class": c, "ovr_classes": classes},
                    resume=resume,
                )
        else:
            ckpt = Checkpointer(checkpoint, solver, full, resume=resume)
    own_engine = engine is None
    if own_engine:
        if shard_cache_mb is not None and not shard_cache_mb >= 0:
            raise SolverError("--shard-cache-mb must be >= 0")
        engine = make_engine(scheduler, cache_mb=shard_cache_mb)
    t0 = time.perf_counter()
    try:
        if multiclass == "ovr":
            result = _train_ovr(store, mod, engine, full, callback, ckpt)
        elif ckpt is not None:
            result = mod.solve(store, engine, full, callback=callback, checkpoint=ckpt)
        else:
            result = mod.solve(store, engine, full, callback=callback)
    finally:
        if own_engine:
            engine.close()
    log.debug("trained with %s in %.3fs", solver, time.perf_counter() - t0)
    return result


def _train_ovr(store, mod, engine: Engine, params: dict, callback, checkpoint=None) -> Result:
    """One-vs-rest: one binary problem per class (shared passes when the solver has
    ``solve_ovr``, else one binary training after the other)."""
    classes = [float(c) for c in (store.meta.labels or [])]
    if len(classes) < 2:
        raise SolverError(f"{store.path}: one-vs-rest needs at least two classes")
    if hasattr(mod, "solve_ovr"):
        return mod.solve_ovr(
            store, engine, params, classes, callback=callback, checkpoint=checkpoint
        )
    t0 = time.perf_counter()
    results = []
    for k, c in enumerate(classes):

        def cb(rec, k=k, c=c):
            if callback is not None:
                callback({**rec, "class": c, "class_index": k})

        results.append(mod.solve(BinaryView(store, c), engine, dict(params), callback=cb))
    model = combine_ovr_models([r.model for r in results], classes)
    objs = [r.objective for r in results]
    duals = [r.dual_objective for r in results]
    return Result(
        model=model,
        objective=None if any(o is None for o in objs) else float(sum(objs)),
        dual_objective=None if any(d is None for d in duals) else float(sum(duals)),
        iterations=sum(r.iterations for r in results),
        passes=sum(r.passes for r in results),
        seconds=time.perf_counter() - t0,
        stop_value=max(r.stop_value for r in results),
        history=[h for r in results for h in r.history],
        summary={
            "multiclass": "ovr",
            "n_classes": len(classes),
            "per_class_objective": objs,
            "per_class_iterations": [r.iterations for r in results],
        },
    )


def combine_ovr_models(models: list[Model], classes: list[float]) -> Model:
    """Stack binary models (positive class = ``classes[k]``) into one OvR model."""
    first = models[0]
    info = dict(first.info)
    info["multiclass"] = "ovr"
    if all(m.kind == "linear" for m in models):
        return Model(
            kind="linear",
            n_features=first.n_features,
            classes=classes,
            coef_=np.vstack([np.asarray(m.coef_, dtype=np.float64) for m in models]),
            intercept_=np.array([float(m.intercept_) for m in models]),
            kernel=first.kernel,
            info=info,
        )
    # kernel models: union of support vectors (by global row index), one coefficient row each
    index: dict[int, int] = {}
    rows = []
    for m in models:
        sv = sp.csr_matrix(m.support_vectors_)
        for j, g in enumerate(np.asarray(m.support_, dtype=np.int64)):
            if int(g) not in index:
                index[int(g)] = len(rows)
                rows.append(sv[j])
    coef = np.zeros((len(models), len(rows)))
    for k, m in enumerate(models):
        for j, g in enumerate(np.asarray(m.support_, dtype=np.int64)):
            coef[k, index[int(g)]] = np.ravel(m.dual_coef_)[j]
    return Model(
        kind="kernel",
        n_features=first.n_features,
        classes=classes,
        intercept_=np.array([float(m.intercept_) for m in models]),
        support_vectors_=sp.vstack(rows).tocsr() if rows else None,
        dual_coef_=coef,
        support_=np.array(sorted(index, key=index.get), dtype=np.int64),
        kernel=first.kernel,
        gamma=first.gamma,
        degree=first.degree,
        coef0=first.coef0,
        info=info,
    )
