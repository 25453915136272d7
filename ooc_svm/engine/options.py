"""The engines' options, typed once (like the solvers' ``Params``).

:class:`EngineOptions` lists every option of :class:`~ooc_svm.engine.local.LocalEngine` and
of the Dask engine with its type, its help and which engines take it; ``make_engine`` builds
one from its keyword arguments, validates it once (``cache_mb``: MiB >= 0, ``auto`` or
``auto:SHARE``; ``$OOC_SVM_SHARD_CACHE_MB`` when not given) and hands each engine its own
options. An option only the other engine takes (``n_workers`` for a local run) is ignored, so
callers pass one set whatever the scheduler; a name no engine knows is refused (local) or
goes to ``distributed.LocalCluster`` (Dask: ``dashboard_address``, ...).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .._util import parse_cache_mb
from .base import EngineError

LOCAL = "local"
DASK = "dask"
BOTH = (LOCAL, DASK)


#: seconds a Dask scheduler may go without answering before a run gives up
DEFAULT_SCHEDULER_TIMEOUT = 60.0


def scheduler_timeout(value: Any) -> float | None:
    """A checked ``--scheduler-timeout`` (seconds > 0), else ``$OOC_SVM_SCHEDULER_TIMEOUT``,
    else None (the engine's default, ``DEFAULT_SCHEDULER_TIMEOUT``)."""
    where = "--scheduler-timeout"
    if value is None:
        value = os.environ.get("OOC_SVM_SCHEDULER_TIMEOUT", "").strip() or None
        where = "$OOC_SVM_SCHEDULER_TIMEOUT"
        if value is None:
            return None
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = float("nan")
    if not (t > 0 and t < float("inf")):
        raise EngineError(f"{where} must be a number of seconds > 0 (got {value!r})")
    return t


def option(help: str, engines: tuple[str, ...] = BOTH) -> Any:
    """An engine option (default None: the engine's own default) with its help text and the
    engines that take it."""
    return field(default=None, metadata={"help": help, "engines": engines})


@dataclass(frozen=True)
class EngineOptions:
    """Options of the streamed-pass engines (None: the engine's default)."""

    cache_mb: float | str | None = option(
        "decoded-shard cache per process: MiB >= 0, 'auto' or 'auto:SHARE' (of the available "
        "memory); default $OOC_SVM_SHARD_CACHE_MB, else auto; 0 turns it off"
    )
    n_threads: int | None = option("compute threads (Dask: per worker when it starts one)")
    prefetch: int | None = option("shards read ahead of the compute threads")
    fast_read: bool | None = option("read shards through the fast path (no copies)")
    io_threads: int | None = option("reader threads", (LOCAL,))
    local_reads: int | None = option("concurrent reads of local files", (LOCAL,))
    inline_nnz: int | None = option("shards below this many non-zeros run inline", (LOCAL,))
    readahead: int | None = option("shards decoded ahead (default threads + prefetch)", (LOCAL,))
    n_workers: int | None = option("workers of a local cluster", (DASK,))
    threads_per_worker: int | None = option("threads of each worker", (DASK,))
    connect_timeout: float | None = option("seconds to reach a scheduler", (DASK,))
    scheduler_timeout: float | None = option(
        "seconds a Dask scheduler may leave a request unanswered (connecting, and checked "
        "every few seconds while passes run) before the run stops with an error; default "
        "$OOC_SVM_SCHEDULER_TIMEOUT, else 60",
        (DASK,),
    )
    state_replicas: int | None = option("copies of each shard's solver state (1 or 2)", (DASK,))
    max_attempts: int | None = option("tries of a task whose worker was lost", (DASK,))
    memory_limit: str | float | None = option("memory limit of each local worker", (DASK,))
    cluster: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "other distributed.LocalCluster arguments", "engines": (DASK,)},
    )

    def __post_init__(self) -> None:
        if self.cache_mb is None:
            env = os.environ.get("OOC_SVM_SHARD_CACHE_MB", "").strip()
            try:
                spec = parse_cache_mb(env) if env else "auto"
            except ValueError as e:
                raise EngineError(f"$OOC_SVM_SHARD_CACHE_MB: {e}") from None
        else:
            try:
                spec = parse_cache_mb(self.cache_mb)
            except ValueError as e:
                raise EngineError(f"--shard-cache-mb: {e}") from None
        object.__setattr__(self, "cache_mb", spec)
        object.__setattr__(self, "scheduler_timeout", scheduler_timeout(self.scheduler_timeout))

    @classmethod
    def from_kwargs(cls, kind: str, **kwargs: Any) -> EngineOptions:
        """Options from ``make_engine``'s keyword arguments for an engine of ``kind``
        (``"local"`` or ``"dask"``): unknown names are refused for a local engine and go to
        ``LocalCluster`` for Dask."""
        names = {f.name for f in dataclasses.fields(cls)} - {"cluster"}
        unknown = {k: v for k, v in kwargs.items() if k not in names}
        if unknown and kind == LOCAL:
            raise TypeError(f"make_engine: unknown option(s) {', '.join(sorted(unknown))}")
        known = {k: v for k, v in kwargs.items() if k in names}
        return cls(**known, cluster=unknown)

    def for_engine(self, kind: str) -> dict[str, Any]:
        """The keyword arguments of the ``kind`` engine: its options that were given."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "cluster" or kind not in f.metadata["engines"] or v is None:
                continue
            out[f.name] = v
        if kind == DASK:
            out.update(self.cluster)
        return out
