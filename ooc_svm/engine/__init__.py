"""Streamed passes over stores: ``make_engine(scheduler)`` returns a local or Dask engine."""

from __future__ import annotations

import os

from .._util import parse_cache_mb
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

#: options of one engine that the other ignores (see make_engine)
_DASK_ONLY = frozenset(
    {
        "n_workers",
        "threads_per_worker",
        "connect_timeout",
        "state_replicas",
        "max_attempts",
        "memory_limit",
    }
)
_LOCAL_ONLY = frozenset({"io_threads", "local_reads", "readahead", "inline_nnz"})


def make_engine(scheduler: str | None = None, **kwargs) -> Engine:
    """Engine for a ``--scheduler`` value.

    ``local`` (default; also from ``$OOC_SVM_SCHEDULER``): threads in this process, no Dask.
    ``threads``, ``processes`` (a ``distributed.LocalCluster``), a scheduler address
    (``tcp://host:port``) or a scheduler file (``*.json``): the Dask engine.

    Keyword arguments go to :class:`LocalEngine` or :class:`~.dask_engine.DaskEngine`;
    options only the other engine knows (e.g. ``n_workers`` for a local run) are ignored, so
    callers can pass one set of options (``cache_mb``, ``prefetch``, ``n_threads``, ...)
    whatever the scheduler. ``cache_mb`` (decoded-shard cache, per process: MiB, ``"auto"``
    or ``"auto:SHARE"``, see :class:`LocalEngine`) defaults to ``$OOC_SVM_SHARD_CACHE_MB``,
    else ``"auto"``; 0 turns the cache off.
    """
    import inspect

    scheduler = scheduler or os.environ.get("OOC_SVM_SCHEDULER") or "local"
    if kwargs.get("cache_mb") is None:
        env = os.environ.get("OOC_SVM_SHARD_CACHE_MB", "").strip()
        try:
            kwargs["cache_mb"] = parse_cache_mb(env) if env else "auto"
        except ValueError as e:
            raise EngineError(f"$OOC_SVM_SHARD_CACHE_MB: {e}") from None
    else:
        try:
            kwargs["cache_mb"] = parse_cache_mb(kwargs["cache_mb"])
        except ValueError as e:
            raise EngineError(f"--shard-cache-mb: {e}") from None
    cls: type[Engine]
    if scheduler == "local":
        cls = LocalEngine
    else:
        from .dask_engine import DaskEngine

        cls = DaskEngine
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    other_only = _DASK_ONLY if cls is LocalEngine else _LOCAL_ONLY
    unknown = [k for k in kwargs if k not in params and k not in other_only and not takes_any]
    if unknown:
        raise TypeError(f"make_engine: unknown option(s) {', '.join(sorted(unknown))}")
    kw = {k: v for k, v in kwargs.items() if k in params or (takes_any and k not in other_only)}
    if cls is LocalEngine:
        return LocalEngine(**kw)
    return DaskEngine(scheduler, **kw)


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
