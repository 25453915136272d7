"""The worker side of the Dask engine (:mod:`ooc_svm.engine.dask_engine`): functions that
run in the Dask workers, at module level so that they are pickled by reference.

A worker opens a store from its path once (cached per process, keyed by path and a token of
its shard table, so a store rewritten on disk is never confused with the old one), keeps its
decoded shards in a byte-bounded cache, and runs one task per run of consecutive shards
(:func:`_block_task`): ``fn`` over the shards on all its threads, reduced into the complete
subtrees of the pass's fixed tree; neighbouring runs are joined by :func:`_join_task`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._util import auto_cache_bytes
from .base import (
    EngineError,
    StreamingTreeReduce,
)
from .dask_tree import _node_value, tree_nodes
from .reader import ShardCache, readonly, shard_content_key, shard_reader

if TYPE_CHECKING:
    from ..store.base import Store

# ------------------------------------------------------------------------------------------
# worker side (module level: pickled by reference)
# ------------------------------------------------------------------------------------------

_W_LOCK = threading.Lock()
_W_STORES: dict[tuple[str, str], tuple[Any, Callable]] = {}
_W_CACHE = ShardCache(0)


def store_identity(store: Store) -> str:
    """Identity of a store's contents, independent of the path it was opened by.

    The shard table (names, sizes, checksums) and shape; the client sends it with every task
    and a worker compares it with the store it opened from the (absolute) path.
    """
    import hashlib

    h = hashlib.blake2b(digest_size=12)
    meta = store.meta
    h.update(f"{meta.n_rows}|{meta.nnz}|{meta.n_features}|".encode())
    for s in meta.shards:
        h.update(f"{s.name}:{s.n_rows}:{s.nnz}:{s.checksum};".encode())
    return h.hexdigest()


def _worker_store(path: str, token: str, fast: bool) -> tuple[Any, Callable]:
    """``(store, reader)`` of the store at ``path`` whose identity is ``token``: opened once
    per worker process and kept between trainings (a long-lived cluster's workers)."""
    key = (path, token)
    entry = _W_STORES.get(key)
    if entry is None:
        from ..store import open_store

        with _W_LOCK:
            entry = _W_STORES.get(key)
            if entry is None:
                try:
                    store = open_store(path)
                except Exception as e:
                    raise EngineError(
                        f"a Dask worker cannot open the store {path} ({e}); is the path on a "
                        "file system the workers share? relative paths are resolved against "
                        "the client's working directory"
                    ) from None
                if store_identity(store) != token.split("|", 1)[0]:
                    raise EngineError(
                        f"workers see a different store at {path} than this client: is the "
                        "path on a shared file system? relative paths are resolved against "
                        "the client's working directory (or the store was rewritten while "
                        "training)"
                    )
                for k in [k for k in _W_STORES if k[0] == path]:
                    del _W_STORES[k]
                entry = (store, shard_reader(store, fast=fast))
                _W_STORES[key] = entry
    return entry


_W_AUTO: dict[float, int] = {}


def _worker_auto_budget(share: float) -> int:
    """Automatic cache budget of this worker process: SHARE of its memory budget
    (:func:`ooc_svm.sizes.measure`, measured in the worker: its container's limit and
    its Dask memory limit among the others), at most the cap and at most a quarter of the
    worker's Dask memory limit (so the cache never pushes a worker towards Dask's spill /
    pause thresholds). Computed once per process."""
    if share not in _W_AUTO:
        limit = None
        try:
            from distributed import get_worker

            limit = int(get_worker().memory_manager.memory_limit or 0) // 4 or None
        except (ImportError, ValueError, AttributeError):
            pass
        from ..sizes import measure  # the worker process's own budget: no command runs here

        _W_AUTO[share] = auto_cache_bytes(f"auto:{share}", measure().free, limit)
    return _W_AUTO[share]


def _worker_shard(spec: tuple, sid: int):
    """Shard ``sid`` of the pass's store, through this worker's cache of decoded shards.

    The cache outlives a training: it is keyed by each shard's contents
    (:func:`~.reader.shard_content_key`), so the next training of the same store — or of the
    store after an ``ingest --append`` — on a long-lived cluster reads no unchanged shard
    again, and a rewritten store never gets an old shard. ``fill`` (false on the first pass
    of an automatic cache) says whether a shard read now is offered to the cache; cached
    shards are used either way.
    """
    path, token, cache_bytes, fast, transform, fill = spec
    budget = _worker_auto_budget(-cache_bytes) if cache_bytes < 0 else int(cache_bytes)
    if budget != _W_CACHE.budget:
        _W_CACHE.resize(budget)
    store, read = _worker_store(path, token, fast)
    key = shard_content_key(store.meta.shards[sid])
    shard = _W_CACHE.get(token, sid, key=key)
    if shard is None:
        shard = read(sid)
        if fill:
            shard = _W_CACHE.put(token, sid, shard, key=key)
    # a store view (e.g. one-vs-rest labels) transforms the cached base shard
    return shard if transform is None else readonly(transform(shard))


_W_POOL: list = []  # [ThreadPoolExecutor] of this worker process, sized to its threads


def _worker_threads() -> int:
    """Threads of the Dask worker running the current task (1 outside a worker)."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        return 1


def _cap_kernel_threads(nthreads: int) -> None:
    """Kernel work of this worker (numba's parallel regions) uses the worker's own threads,
    not every core of the host: 2 workers of 1 thread on 2 cores run 2 kernel threads, not 4
    (a lower ``$OOC_SVM_KERNEL_THREADS`` in the worker's environment still applies)."""
    from ..kernels.parallel import cap_threads

    cap_threads(nthreads)


def _worker_pool(nthreads: int):
    from concurrent.futures import ThreadPoolExecutor

    with _W_LOCK:
        if not _W_POOL or _W_POOL[0]._max_workers != nthreads:
            if _W_POOL:
                _W_POOL.pop().shutdown(wait=False)
            _W_POOL.append(ThreadPoolExecutor(nthreads, thread_name_prefix="ooc-svm-block"))
        return _W_POOL[0]


def _checked(fn, out):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise EngineError(
            f"{getattr(fn, '__name__', fn)} must return (partial, new_state) when called with state"
        )
    return out


def _block_task(fn, read, src, sids, start, n, bc, reduce, states):
    """One worker's share of a pass: ``fn`` over the shards ``sids`` (positions ``start`` ...
    of the pass's ``n`` shards) on all the worker's threads, in order, reduced locally into
    the complete subtrees of the pass's fixed reduction tree that lie inside the run
    (:func:`tree_nodes`); each is folded with :class:`StreamingTreeReduce`, which builds
    exactly that subtree.

    ``src`` is the store spec (``read``: shards are read through the worker's shard cache)
    or a list of :class:`ShardStub` (``map_state``). Returns the subtrees as a list of
    ``((start, stop), partial)``, with the new per-shard states: ``(subtrees, new_states)``.
    """

    def one(k: int):
        shard = _worker_shard(src, sids[k]) if read else src[k]
        if states is None:
            return fn(shard, bc), None
        return _checked(fn, fn(shard, bc, states[k]))

    m = len(sids)
    _cap_kernel_threads(_worker_threads())
    nthreads = min(_worker_threads(), m)
    if nthreads <= 1:
        results = (one(k) for k in range(m))
    else:
        # the pool threads run fn in a copy of this task's context: distributed.get_worker()
        # (a context variable; WorkerScratch uses it) works there as in the task itself
        import contextvars

        ctx = contextvars.copy_context()
        results = _ordered(
            _worker_pool(nthreads), lambda k: ctx.copy().run(one, k), m, 2 * nthreads
        )
    out = []
    new_states: list | None = [] if states is not None else None
    for s, e in tree_nodes(start, start + m, n):
        fold = StreamingTreeReduce(reduce)
        for _ in range(s, e):
            part, st = next(results)
            fold.push(part)
            if new_states is not None:
                new_states.append(st)
        out.append(((s, e), fold.result()))
    return out if states is None else (out, new_states)


def _join_task(reduce, n, left, right):
    """Join the subtrees of two neighbouring runs (lists from :func:`_block_task` or this
    function) into the largest subtrees inside their union (the same fixed tree)."""
    have = dict(left)
    have.update(right)
    a, b = left[0][0][0], right[-1][0][1]
    return [((s, e), _node_value(have, s, e, n, reduce)) for s, e in tree_nodes(a, b, n)]


def _ordered(pool, one, n: int, window: int):
    """``one(0) ... one(n-1)`` on ``pool``, yielded in order, at most ``window`` at a time."""
    from collections import deque

    futs: deque = deque()
    nxt = 0
    try:
        while nxt < n or futs:
            while nxt < n and len(futs) < window:
                futs.append(pool.submit(one, nxt))
                nxt += 1
            yield futs.popleft().result()
    finally:
        for f in futs:
            f.cancel()


def _pick(x, i, j=None):
    """Part ``i`` (then ``j``) of a block's result (a task, so each part gets its own key)."""
    return x[i] if j is None else x[i][j]


def _call_init(init, info, i):
    return init(info, i)


def _worker_cache_stats() -> dict[str, int]:
    c = _W_CACHE
    return {"budget": c.budget, "used": c.used, "hits": c.hits, "misses": c.misses}


def _worker_rss_kb() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
