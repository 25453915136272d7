"""Streamed passes over stores: ``make_engine(scheduler)`` returns a local or Dask engine."""

from __future__ import annotations

import os

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


def make_engine(scheduler: str | None = None, **kwargs) -> Engine:
    """Engine for a ``--scheduler`` value.

    ``local`` (default; also from ``$OOC_SVM_SCHEDULER``): threads in this process, no Dask.
    ``threads``, ``processes`` (a ``distributed.LocalCluster``), a scheduler address
    (``tcp://host:port``) or a scheduler file (``*.json``): the Dask engine.
    """
    scheduler = scheduler or os.environ.get("OOC_SVM_SCHEDULER") or "local"
    if scheduler == "local":
        return LocalEngine(**kwargs)
    from .dask_engine import DaskEngine

    return DaskEngine(scheduler, **kwargs)


__all__ = [
    "Engine",
    "EngineError",
    "ShardStub",
    "StreamingTreeReduce",
    "LocalEngine",
    "ShardState",
    "add_partials",
    "concat_partials",
    "make_engine",
    "tree_reduce",
]
