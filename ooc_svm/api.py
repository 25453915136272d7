"""Python functions behind the CLI."""

from __future__ import annotations

import logging
import time
from typing import Any

from .engine import Engine, make_engine
from .solvers import Callback, Result, get_solver
from .store import open_store

log = logging.getLogger("ooc_svm")


def train(
    store,
    solver: str = "perf",
    *,
    engine: Engine | None = None,
    scheduler: str | None = None,
    callback: Callback | None = None,
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
    **params
        Solver parameters (``C``, ``kernel``, ``gamma``, ``eps``, ``tol``, ...); unknown
        names are rejected by the solver. Missing ones take the solver's ``DEFAULTS``.

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
        from .solvers import SolverError

        raise SolverError(
            f"solver {solver!r} does not take {', '.join(sorted(unknown))}; "
            f"its parameters are {', '.join(sorted(full))}"
        )
    full.update({k: v for k, v in params.items() if v is not None})
    own_engine = engine is None
    if own_engine:
        engine = make_engine(scheduler)
    t0 = time.perf_counter()
    try:
        result = mod.solve(store, engine, full, callback=callback)
    finally:
        if own_engine:
            engine.close()
    log.debug("trained with %s in %.3fs", solver, time.perf_counter() - t0)
    return result
