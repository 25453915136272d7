"""Streamed passes over stores: ``make_engine(scheduler)`` returns a local or Dask engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import (
    Engine,
    EngineError,
    ShardState,
    ShardStub,
    StreamingTreeReduce,
    add_partials,
    concat_partials,
    tree_reduce,
)
from .local import LocalEngine
from .options import DASK, LOCAL, EngineOptions

if TYPE_CHECKING:
    from ..sizes import Sizes


def make_engine(
    scheduler: str | None = None,
    options: EngineOptions | None = None,
    *,
    measure: Callable[[], Sizes] | None = None,
    **kwargs: Any,
) -> Engine:
    """Engine for a ``--scheduler`` value.

    ``local`` (default; also from ``$OOC_SVM_SCHEDULER``): threads in this process, no Dask.
    ``threads``, ``processes`` (a ``distributed.LocalCluster``), a scheduler address
    (``tcp://host:port``) or a scheduler file (``*.json``): the Dask engine.

    ``options`` (an :class:`~.options.EngineOptions`) or keyword arguments (its field names:
    ``cache_mb``, ``prefetch``, ``n_threads``, ``n_workers``, ...) configure it; options only
    the other engine takes are ignored, so callers pass one set whatever the scheduler.
    ``cache_mb`` (decoded-shard cache, per process: MiB, ``"auto"`` or ``"auto:SHARE"``)
    defaults to ``$OOC_SVM_SHARD_CACHE_MB``, else ``"auto"``; 0 turns the cache off.
    ``measure``: how the command making it measures the memory budget (returns
    :class:`ooc_svm.sizes.Sizes`), called when a local Dask cluster starts, whose workers
    share the budget; without it, measured there (a call no command made).
    """
    scheduler = scheduler or os.environ.get("OOC_SVM_SCHEDULER") or "local"
    kind = LOCAL if scheduler == "local" else DASK
    opts = options if options is not None else EngineOptions.from_kwargs(kind, **kwargs)
    if kind == LOCAL:
        return LocalEngine(**opts.for_engine(LOCAL))
    from .dask_engine import DaskEngine

    return DaskEngine(scheduler, measure=measure, **opts.for_engine(DASK))


__all__ = [
    "Engine",
    "EngineError",
    "EngineOptions",
    "ShardStub",
    "StreamingTreeReduce",
    "LocalEngine",
    "ShardState",
    "add_partials",
    "concat_partials",
    "make_engine",
    "tree_reduce",
]
