"""In-process engine: a thread pool reads/decodes the next shards while others compute.

Numba kernels run with ``nogil=True``, so ``n_threads`` shards are processed truly in
parallel; at most ``n_threads + prefetch`` decoded shards are in memory at once. Partials are
folded in shard order as they become available (out-of-order results wait in a small buffer),
so the result is independent of thread timing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from .base import Engine, ShardState, add_partials

log = logging.getLogger("ooc_svm")


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


class LocalEngine(Engine):
    """Streamed passes in this process.

    Parameters
    ----------
    n_threads : int or None
        Worker threads (default: the CPUs this process may use).
    prefetch : int
        Shards read ahead beyond the ones being computed.
    """

    def __init__(self, n_threads: int | None = None, prefetch: int = 2):
        self.n_threads = n_threads or _default_threads()
        self.prefetch = max(0, int(prefetch))
        self.passes = 0
        self._pool = ThreadPoolExecutor(max_workers=self.n_threads, thread_name_prefix="ooc-svm")

    def map_reduce(
        self,
        store,
        fn: Callable,
        broadcast: Any = None,
        reduce: Callable[[Any, Any], Any] | None = None,
        state: ShardState | None = None,
        shards: list[int] | None = None,
    ) -> Any:
        reduce = reduce or add_partials
        ids = list(range(store.n_shards)) if shards is None else list(shards)
        window = self.n_threads + self.prefetch
        pos = {sid: k for k, sid in enumerate(ids)}
        if state is not None:
            state_index = {sid: k for k, sid in enumerate(range(state.n_shards))}

        def task(sid: int):
            shard = store.read_shard(sid)
            if state is None:
                return fn(shard, broadcast)
            part, new = fn(shard, broadcast, state.items[state_index[sid]])
            state.items[state_index[sid]] = new
            return part

        acc = None
        have_acc = False
        pending: dict[int, Any] = {}
        next_k = 0
        it = iter(ids)
        running = {}
        try:
            for sid in it:
                running[self._pool.submit(task, sid)] = sid
                if len(running) >= window:
                    break
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    sid = running.pop(fut)
                    pending[pos[sid]] = fut.result()
                    nxt = next(it, None)
                    if nxt is not None:
                        running[self._pool.submit(task, nxt)] = nxt
                while next_k in pending:
                    part = pending.pop(next_k)
                    acc = part if not have_acc else reduce(acc, part)
                    have_acc = True
                    next_k += 1
        except BaseException:
            for fut in running:
                fut.cancel()
            raise
        self.passes += 1
        return acc

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
