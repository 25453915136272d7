"""Per-shard state of the Dask engine: kept on the workers, each state twice.

:class:`DaskStates` (a base of :class:`~ooc_svm.engine.dask_engine.DaskEngine`) gives every
shard a *home* worker (:meth:`DaskStates._placement`), makes per-shard state there
(``init_state``, ``set_state``), brings it back (``gather_state``) and keeps a backup copy of
every state on a second worker under its own key (:meth:`DaskStates._protect`), so that a
worker that dies mid-pass loses no state (see :mod:`ooc_svm.engine.dask_engine`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from .base import EngineError, ShardState
from .dask_cluster import DaskConnection
from .dask_worker import _call_init

if TYPE_CHECKING:
    from ..store.base import Store
    from .base import Engine

log = logging.getLogger(__name__)


class _StateRef:
    """A per-shard state on the cluster: a primary future and (usually) a backup copy."""

    __slots__ = ("primary", "backup")

    def __init__(self, primary, backup=None):
        self.primary = primary
        self.backup = backup

    def alive(self):
        for f in (self.primary, self.backup):
            if f is not None and f.status in ("finished", "pending"):
                return f
        return None


def _same(x):
    """The backup copy of a per-shard state (a task, so the copy gets its own key)."""
    return x


class DaskStates(DaskConnection):
    """Home workers of the shards and per-shard state on them, kept twice."""

    state_replicas: int
    _npass: int
    _slots: tuple[float, list[str]] | None

    def _placement(self, n_shards: int, refresh: bool = False) -> dict[int, str]:
        """Home worker of every shard of a store: contiguous blocks of the shard ids, sized
        by the workers' threads, the same in every pass while the workers stay (so decoded
        shards and per-shard state stay where they are).

        The worker list is cached for a few seconds (a stale entry is harmless: restrictions
        are loose, a task whose worker is gone runs elsewhere).
        """
        now = time.monotonic()
        if refresh or self._slots is None or now - self._slots[0] > 5.0:
            nt = self._connected().nthreads()
            slots = [w for w in sorted(nt) for _ in range(max(1, int(nt[w] or 1)))]
            self._slots = (now, slots)
        slots = self._slots[1]
        if not slots:
            return {}
        return {sid: slots[(sid * len(slots)) // n_shards] for sid in range(n_shards)}

    def _protect(self, futs: list) -> list:
        """Copy every state future to a second worker under its own key; returns the backups.

        Copies go round-robin to a worker that does not hold the state; the copy tasks may
        run elsewhere if that worker leaves (never a wait on a dead worker). ``None`` backups
        when ``state_replicas`` is 1 or the cluster has a single worker.
        """
        if self.state_replicas < 2 or not futs:
            return [None] * len(futs)
        from distributed import wait

        client = self._connected()
        wait(futs)
        workers = sorted(client.nthreads())
        if len(workers) < 2:
            return [None] * len(futs)
        who = client.who_has(futs)
        backups = []
        for k, f in enumerate(futs):
            holders = set(who.get(f.key, ()))
            others = [w for w in workers if w not in holders] or workers
            backups.append(
                client.submit(
                    _same,
                    f,
                    key=f"{f.key}-backup",
                    workers=[others[k % len(others)]],
                    allow_other_workers=True,
                    pure=False,
                )
            )
        wait(backups)
        if any(b.status != "finished" for b in backups):
            raise _Lost()
        return backups

    @staticmethod
    def _state_src(state: ShardState, sid: int):
        src = state.get(sid).alive()
        if src is None:
            raise EngineError(
                f"the per-shard state of shard {sid} was lost with the workers "
                "holding its copies; restart from a checkpoint"
            )
        return src

    def _settle_states(self, tag: str, news: list) -> list:
        """Wait for the new per-shard states and copy each to a second worker; raises
        :class:`_Lost` when one of them was lost meanwhile. Returns the backups."""
        from distributed import wait

        wait(news)
        if any(f.status != "finished" for f in news):
            raise _Lost()
        try:
            backups = self._protect(news)
        except Exception as e:
            log.info("pass %s: replicating states failed (%r); retrying", tag, e)
            raise _Lost() from e
        if any(f.status != "finished" for f in news):
            raise _Lost()
        return backups

    # -- state ----------------------------------------------------------------------------
    def init_state(
        self, store: Store, init: Callable[[Any, int], Any], shards: Iterable[int] | None = None
    ) -> ShardState:
        """Per-shard state computed on the workers by ``init(shard_info, shard_index)``.

        The state futures have their ``init`` call as lineage, so Dask recomputes them if a
        worker dies before the first pass.
        """
        return self._guarded(self._init_state, store, init, shards)

    def _init_state(self, store, init: Callable[[Any, int], Any], shards=None) -> ShardState:
        ids = list(range(store.n_shards)) if shards is None else [int(i) for i in shards]
        place = self._placement(store.n_shards) if ids else {}
        self._npass += 1
        items = []
        for sid in ids:
            where = {"workers": [place[sid]], "allow_other_workers": True} if sid in place else {}
            f = self._connected().submit(
                _call_init,
                init,
                store.meta.shards[sid],
                sid,
                key=f"ooc-init{self._npass}-{os.getpid()}-s{sid}",
                pure=False,
                **where,
            )
            items.append(_StateRef(f))
        return ShardState(cast("Engine", self), store.n_shards, items, ids)

    def set_state(
        self, store: Store, items: list[Any], shards: Iterable[int] | None = None
    ) -> ShardState:
        """Per-shard state from values on the client (e.g. a checkpoint), sent to workers."""
        return self._guarded(self._set_state, store, items, shards)

    def _set_state(self, store, items: list[Any], shards=None) -> ShardState:
        items = list(items)
        ids = list(range(len(items))) if shards is None else [int(i) for i in shards]
        if len(ids) != len(items):
            raise ValueError("set_state: one item per shard is needed")
        if not items:
            return ShardState(cast("Engine", self), store.n_shards, [], [])
        place = self._placement(store.n_shards)
        futs = []
        for sid, v in zip(ids, items, strict=True):
            w = [place[sid]] if sid in place else None
            [f] = self._connected().scatter([v], workers=w, hash=False)
            futs.append(f)
        try:
            backups = self._protect(futs)
        except _Lost:
            raise EngineError(
                "a Dask worker left while per-shard state was being sent to the cluster; run again"
            ) from None
        refs = [_StateRef(f, b) for f, b in zip(futs, backups, strict=True)]
        return ShardState(cast("Engine", self), store.n_shards, refs, ids)

    def gather_state(self, state: ShardState) -> list[Any]:
        """Bring the per-shard states to the client, in the order of ``state.ids``."""
        return self._guarded(self._gather_state, state)

    def _gather_state(self, state: ShardState) -> list[Any]:
        futs = []
        for sid, ref in zip(state.ids, state.items, strict=True):
            f = ref.alive()
            if f is None:
                raise EngineError(f"the per-shard state of shard {sid} was lost with its workers")
            futs.append(f)
        return self._connected().gather(futs)


def _alive(fut) -> bool:
    """A task's future that still holds (or will hold) its result."""
    return fut is not None and fut.status in ("finished", "pending")


class _Lost(Exception):
    """Some results of a pass were lost with a worker."""
