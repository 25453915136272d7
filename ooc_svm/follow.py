"""``train --follow``: keep a model up to date with a store that grows by ``ingest --append``.

After the first fit, :func:`follow` polls the store's metadata every ``poll_seconds``; when
another process has appended rows or dropped the oldest shards (``ooc-svm drop``: a sliding
window), it refits warm from the last model (``init``, see
:mod:`ooc_svm.solvers.warm`) and replaces the model directory atomically
(:meth:`~ooc_svm.model.model.Model.save`), so that a reader always finds a complete model. It
ends after ``max_refits`` refits, on Ctrl-C / SIGTERM (the last complete model stays in
place; the exception propagates, so the command's exit status is the signal's), or with a
one-line :class:`FollowError` when the store no longer begins with the model's rows (or
with those a drop left: overwritten, other shards removed) or cannot be read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .solvers import SolverError
from .store import StoreError, open_store

if TYPE_CHECKING:
    from .model.model import Model
    from .solvers import Result
    from .solvers.params import SolverParams
    from .solvers.warm import Start

log = logging.getLogger(__name__)


class FollowError(SolverError):
    """The followed store was overwritten, lost rows or cannot be read: following stops."""


@dataclass
class Refit:
    """One warm refit of :func:`follow`."""

    #: 1, 2, ...
    index: int
    rows_added: int
    n_rows: int
    passes: int
    seconds: float
    #: the solver's stopping value (perf: gap or violation; dual solvers: KKT) and target
    stop_value: float
    converged: bool
    result: Result
    #: the model's oldest rows that ``ooc-svm drop`` removed since the last fit
    rows_dropped: int = 0


def _meta(path: str, output: str, refits: int) -> Any:
    try:
        return open_store(path).meta
    except (StoreError, OSError) as e:
        raise FollowError(
            f"follow: {path} cannot be read ({e}); stopped after {refits} refit(s), "
            f"{output} is the last complete model"
        ) from None


def follow(
    store: str,
    output: str,
    solver: str,
    params: SolverParams,
    model: Model,
    *,
    scheduler: str | None = None,
    shard_cache_mb: Any = None,
    multiclass: str | None = None,
    poll_seconds: float = 5.0,
    max_refits: int | None = None,
    on_refit: Callable[[Refit], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Refit warm and replace ``output`` after every append to ``store``; returns the number
    of refits (when ``max_refits`` is reached).

    Parameters
    ----------
    store : str
        Path of the store (reopened at every poll).
    output : str
        Model directory, replaced atomically after each refit.
    solver, params
        As for :func:`ooc_svm.train` (``params.init`` is replaced by the last model).
    model : Model
        The model of the first fit (it records the rows it was trained on).
    poll_seconds : float
        Seconds between two looks at the store's metadata.
    max_refits : int, optional
        Stop after this many refits (None: until interrupted).
    on_refit : callable, optional
        Receives a :class:`Refit` after each refit (the model is already in place).
    """
    from .api import _make_engine
    from .solvers.warm import start_from, trained_rows

    if poll_seconds <= 0:
        raise SolverError(f"--follow-seconds must be positive (got {poll_seconds})")
    if max_refits is not None and max_refits < 0:
        raise SolverError(f"--max-refits must be >= 0 (got {max_refits})")
    engine = _make_engine(scheduler, shard_cache_mb)
    refits = 0
    try:
        while max_refits is None or refits < max_refits:
            meta = _meta(store, output, refits)
            start = start_from(model, meta)  # the refit's init= (warm.Start)
            assert start is not None
            status = start.status
            n_old = trained_rows(model) or 0
            gone = 0
            if status == "dropped":  # `ooc-svm drop`: the model's rows left in the store
                gone = start.dropped
                n_old -= gone
            elif status != "prefix":
                raise FollowError(
                    f"follow: {store} no longer begins with the {n_old} rows of the model "
                    f"(overwritten or other shards removed); stopped after {refits} refit(s), "
                    f"{output} is the last complete model"
                )
            elif meta.n_rows <= n_old:
                sleep(poll_seconds)
                continue
            rec = _refit(store, output, solver, params, start, engine, multiclass, refits, n_old)
            rec.rows_dropped = gone
            model = rec.result.model
            refits = rec.index
            log.debug("follow: refit %d done in %.3fs", refits, rec.seconds)
            if on_refit is not None:
                on_refit(rec)
    finally:
        engine.close()
    return refits


def _refit(
    store: str,
    output: str,
    solver: str,
    params: SolverParams,
    start: Start,
    engine: Any,
    multiclass: str | None,
    refits: int,
    n_old: int,
) -> Refit:
    """Refit number ``refits + 1``: train on the grown store warm from ``start`` (the last
    model, trained on its first ``n_old`` rows) and replace ``output`` with the new model."""
    from .api import train

    t0 = time.perf_counter()
    try:
        opened = open_store(store)
        res = train(
            opened, solver, engine=engine, multiclass=multiclass,
            params=params.replace(init=start),
        )  # fmt: skip
    except StoreError as e:
        raise FollowError(
            f"follow: {store}: {e}; stopped after {refits} refit(s), {output} is the "
            "last complete model"
        ) from None
    res.model.save(output)
    seconds = time.perf_counter() - t0
    return Refit(
        refits + 1, int(opened.meta.n_rows) - n_old, int(opened.meta.n_rows),
        int(res.passes), seconds, float(res.stop_value), bool(res.converged), res,
    )  # fmt: skip


__all__ = ["FollowError", "Refit", "follow"]
