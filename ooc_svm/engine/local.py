"""In-process engine: reader threads decode the next shards while compute threads run kernels.

Pipeline of one pass (``map_reduce``):

- ``io_threads`` reader threads read / decompress shards ahead (the Zarr fast path of
  :mod:`ooc_svm.engine.reader`: memory-mapped for uncompressed stores, GIL-free decoding
  otherwise), at most ``n_threads + prefetch`` shards being read or computed at a time;
- for a local store, one helper thread hands the files of the next ``readahead`` shards to
  the kernel's read-ahead (``posix_fadvise(WILLNEED)``), so a store that is not in the page
  cache is read from disk while earlier shards are decoded and computed, rather than
  between them;
- ``n_threads`` compute threads run ``fn`` (numba kernels release the GIL, so the shards are
  processed truly in parallel);
- partials are folded in the order of the shard list by a streaming version of the fixed
  binary tree of :func:`~ooc_svm.engine.base.tree_reduce` — the same tree the Dask engine
  uses — so the result is independent of thread timing and identical across engines.

Memory: at most ``n_threads + prefetch`` decoded shards, plus the optional byte-bounded shard
cache (``cache_mb``), plus O(log n_shards) partials in the fold and a bounded number of
partials of shards finished out of order, plus the free read buffers the store's reader keeps
for the next shards (a compressed Zarr store: at most two largest shards, decoded and
compressed, see :class:`~ooc_svm.store.base.BufferPool`; a shard still referenced — by the
cache or by a pass function that keeps it — keeps its buffers out of the pool).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from .._util import auto_cache_bytes, cpu_count, parse_cache_mb
from ..sizes import sizes_of
from .base import Engine, StreamingTreeReduce, add_partials, shard_stub
from .blocks import Blocked
from .reader import ShardCache, read_ahead, shard_files, shard_reader, store_token

log = logging.getLogger(__name__)


#: the share of the memory budget left (beyond the shard cache) the page cache of the shards
#: read ahead may take, for a store that streams
READAHEAD_SHARE = 0.25


class LocalEngine(Engine):
    """Streamed passes in this process.

    Parameters
    ----------
    n_threads : int or None
        Compute threads (default: the CPUs this process may use).
    prefetch : int
        Shards read ahead beyond the ones being computed.
    cache_mb : float or str
        Budget of the decoded-shard cache in MiB (0 = no cache). A store that fits is read
        and decoded once; repeated passes then touch no file. ``"auto"`` (the default of
        :func:`~ooc_svm.engine.make_engine`; ``"auto:SHARE"``): at most SHARE (0.5) of the
        memory available when the engine is made (``MemAvailable``), at most
        :data:`~ooc_svm._util.AUTO_CACHE_CAP_MB`, and a shard is cached when it is read for
        the second time (a single pass, e.g. ``predict`` or ``evaluate``, which score a store
        in batches of shards, caches nothing).
    io_threads : int or None
        Reader threads (default ``max(1, min(prefetch, 4))``). For a store on the local
        file system at most ``local_reads`` of them read and decode at a time; remote stores
        (``s3://`` ...) use all of them.
    local_reads : int
        Concurrent shard reads (and decodes) from a local store. Default 2: decoding an lz4
        or zstd shard costs several times the kernel's pass over it, so one decoder would
        leave the other core idle; with the read-ahead below the disk still sees one
        sequential stream. (Each concurrent decoder keeps its own malloc arena: measured
        +140 MB peak RSS with 2 instead of 1 on the 1M-row bench store; 1 restores that.)
    fast_read : bool
        Use the direct Zarr chunk reader (see :mod:`ooc_svm.engine.reader`).
    readahead : int or None
        Shards of a local store whose files are handed to the kernel's read-ahead
        (``posix_fadvise(WILLNEED)``, from one helper thread) beyond the shard being read,
        so the disk reads the next shards while the current ones are decoded and computed
        (default ``n_threads + prefetch``; 0: off).
    inline_nnz : int
        A pass over a single shard, or over shards with at most this many non-zeros in all,
        runs in the calling thread: for small stores the hand-off to reader and compute
        threads costs more than it saves (0: always use the threads).
    """

    def __init__(
        self,
        n_threads: int | None = None,
        prefetch: int = 2,
        cache_mb: float = 0.0,
        io_threads: int | None = None,
        fast_read: bool = True,
        local_reads: int = 2,
        inline_nnz: int = 1_000_000,
        readahead: int | None = None,
    ) -> None:
        self.n_threads = int(n_threads or cpu_count())
        self.prefetch = max(0, int(prefetch))
        self.io_threads = int(io_threads or max(1, min(self.prefetch, 4)))
        self.local_reads = max(1, int(local_reads))
        self.fast_read = bool(fast_read)
        self.inline_nnz = max(0, int(inline_nnz))
        window = self.n_threads + self.prefetch
        self.readahead = max(0, int(window if readahead is None else readahead))
        spec = parse_cache_mb(cache_mb if cache_mb is not None else 0)
        self.auto_cache = isinstance(spec, str)
        #: an automatic cache sizes itself on the first pass that reads (``_size_cache``),
        #: once the run has claimed from the memory budget what it cannot do without
        self._auto_spec = spec if isinstance(spec, str) else None
        self.cache = ShardCache(0 if isinstance(spec, str) else int(spec * 2**20))
        #: stores whose pages are dropped from the page cache once read (``_streams``)
        self._stream: dict[str, bool] = {}
        self._seen: dict[str, set[int]] = {}  # shards read once per store (auto caches from then)
        self.passes = 0
        self.partial_passes = 0
        self.shards_read = 0
        self._pool = ThreadPoolExecutor(self.n_threads, thread_name_prefix="ooc-svm")
        self._io = ThreadPoolExecutor(self.io_threads, thread_name_prefix="ooc-svm-io")
        self._ra = ThreadPoolExecutor(1, thread_name_prefix="ooc-svm-readahead")
        self._readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _reader(self, store) -> Callable:
        try:
            return self._readers[store]
        except (KeyError, TypeError):
            pass
        rd = shard_reader(store, fast=self.fast_read)
        try:
            self._readers[store] = rd
        except TypeError:
            pass
        return rd

    def _run(self, store, fn, broadcast, reduce, state, shards, read: bool) -> Any:
        reduce = reduce or add_partials
        full = shards is None
        ids = list(range(store.n_shards)) if full else [int(s) for s in shards]
        if state is not None:
            state.check(ids)
        token = store_token(store) if read else ""  # the cache is used only when read
        reader = self._reader(store) if read else None
        if reader is not None:
            self._size_cache()
            if self._streams(store, token):
                reader = _dropping(reader, store)
        fill = self._fill_set(token, ids, read)
        run = self._run_threaded
        if len(ids) <= 1 or sum(int(store.meta.shards[s].nnz) for s in ids) <= self.inline_nnz:
            run = self._run_inline
        result = run(store, fn, broadcast, reduce, state, ids, read, token, reader, fill)
        if full:
            self.passes += 1
        else:
            self.partial_passes += 1
        return result

    def memory_need(self, store) -> int:
        """The decoded shards of a pass: ``n_threads + prefetch`` in flight (at most every
        shard) plus the two the store's reader keeps as free buffers, each counted at the
        largest shard's size."""
        if not store.n_shards:
            return 0
        largest = max(_decoded_bytes(store, s) for s in range(store.n_shards))
        return (min(self.n_threads + self.prefetch, store.n_shards) + 2) * largest

    def _size_cache(self) -> None:
        """Size an automatic cache (once): its share of the memory budget not claimed."""
        if self._auto_spec is not None:
            self.cache.resize(auto_cache_bytes(self._auto_spec, sizes_of(self).free))
            log.debug("shard cache: %.0f MiB (auto)", self.cache.budget / 2**20)
            self._auto_spec = None

    def _streams(self, store, token: str) -> bool:
        """Whether the files of this store's shards are dropped from the page cache once
        read: when the part of the store the shard cache cannot hold is larger than the
        memory budget left. Under a cgroup v1 limit the page cache counts, and cached pages
        of a store that cannot stay cached anyway would push the process's own memory out
        before the kernel reclaims them."""
        hit = self._stream.get(token)
        if hit is None:
            on_disk = sum(
                os.path.getsize(f)
                for s in range(store.n_shards)
                for f in shard_files(store, s)
                if os.path.isfile(f)
            )
            left = sizes_of(self).free - self.cache.budget
            hit = bool(on_disk) and on_disk * (1.0 - self._cached_share(store)) > left
            self._stream[token] = hit
            if hit:
                log.debug(
                    "streaming %s: %.0f MiB on disk, its pages dropped once read", token,
                    on_disk / 2**20,
                )  # fmt: skip
        return hit

    def _readahead_for(self, store, token: str) -> int:
        """Shards whose files are read ahead: ``readahead``, fewer for a store that streams
        (:meth:`_streams`) when their page cache, which a cgroup v1 limit counts, would take
        more than :data:`READAHEAD_SHARE` of the memory budget left (at least one)."""
        if not self._stream.get(token):
            return self.readahead
        largest = max(
            (sum(os.path.getsize(f) for f in shard_files(store, s) if os.path.isfile(f))
             for s in range(store.n_shards)),
            default=0,
        )  # fmt: skip
        room = READAHEAD_SHARE * max(0, sizes_of(self).free - self.cache.budget)
        fit = int(room // largest) if largest else self.readahead
        return max(1, min(self.readahead, fit)) if self.readahead else 0

    def _cached_share(self, store) -> float:
        """The share of the store's decoded bytes the shard cache can hold."""
        total = sum(_decoded_bytes(store, s) for s in range(store.n_shards))
        return min(1.0, self.cache.budget / total) if total else 0.0

    def _max_reads(self, store, read: bool) -> int:
        """Shards read at a time: ``io_threads``, at most ``local_reads`` for a local store."""
        if not read:
            return self.io_threads
        from ..store.paths import is_local

        base = getattr(store, "base", store)
        if is_local(str(getattr(base, "path", ""))):
            return min(self.io_threads, self.local_reads)
        return self.io_threads

    def _fill_set(self, token: str, ids: list[int], read: bool) -> set[int]:
        """The shards of this pass to offer to the cache: all of them with an explicit
        budget; with ``auto`` only those this engine has read before (full or partial
        passes alike), so one pass over a store caches nothing."""
        if not read or not self.cache.budget:
            return set()
        if not self.auto_cache:
            return set(ids)
        seen = self._seen.setdefault(token, set())
        fill = seen.intersection(ids)
        seen.update(ids)
        return fill

    def _run_threaded(
        self, store, fn, broadcast, reduce, state, ids, read, token, reader, fill
    ) -> Any:
        """The pass of :meth:`_run` on the reader and compute threads.

        At most ``n_threads + prefetch`` shards are being read or computed at a time (at most
        :meth:`_max_reads` of them read); partials are folded in shard order.
        """
        job = _ThreadedPass(self, store, fn, broadcast, reduce, state, ids, read, token)
        return job.run(reader, fill)

    def _run_inline(
        self, store, fn, broadcast, reduce, state, ids, read, token, reader, fill
    ) -> Any:
        """The pass of :meth:`_run` in the calling thread (same fold, same result)."""
        fold = StreamingTreeReduce(reduce)
        new_states = []
        for sid in ids:
            shard: Any
            if read:
                shard = self.cache.get(token, sid)
                if shard is None:
                    shard = reader(sid)
                    self.shards_read += 1
                    if sid in fill:
                        shard = self.cache.put(token, sid, shard)
            else:
                shard = shard_stub(store, sid)
            if state is None:
                fold.push(fn(shard, broadcast))
            else:
                part, st = fn(shard, broadcast, state.get(sid))
                fold.push(part)
                new_states.append(st)
        if state is not None:
            for sid, st in zip(ids, new_states, strict=True):
                state.set(sid, st)
        return fold.result()

    def release_buffers(self) -> None:
        for rd in list(self._readers.values()):
            pool = getattr(rd, "pool", None)
            if pool is not None:
                pool.clear()

    def close(self) -> None:
        c = self.cache
        if c.budget:
            log.debug(
                "shard cache: %.0f MiB used of %.0f MiB (%s), %d hits, %d misses, %d reads",
                c.used / 2**20,
                c.budget / 2**20,
                "auto" if self.auto_cache else "--shard-cache-mb",
                c.hits,
                c.misses,
                self.shards_read,
            )
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._io.shutdown(wait=True, cancel_futures=True)
        self._ra.shutdown(wait=True, cancel_futures=True)
        self.cache.clear()


def _decoded_bytes(store, sid: int) -> int:
    """Bytes of shard ``sid`` decoded: int32 columns and float32 values a non-zero, int64
    row pointers, float64 labels (and int64 query ids)."""
    meta = store.meta
    sh = meta.shards[sid]
    per_row = 16 if getattr(meta, "has_qid", False) else 8
    return int(sh.nnz) * 8 + (int(sh.n_rows) + 1) * 8 + int(sh.n_rows) * per_row


def _dropping(reader: Callable, store) -> Callable:
    """``reader`` that drops a shard's files from the page cache once it is read."""
    from ..memory_budget import drop_cache_of

    def read(sid: int):
        shard = reader(sid)
        for f in shard_files(store, sid):
            drop_cache_of(f)
        return shard

    return read


class _ThreadedPass:
    """One pass of :meth:`LocalEngine._run_threaded`: shards read on the reader threads (or
    taken from the cache), computed on the compute threads, folded in shard order."""

    def __init__(self, engine: LocalEngine, store, fn, broadcast, reduce, state, ids, read, token):
        self.engine, self.store, self.fn, self.broadcast = engine, store, fn, broadcast
        self.state, self.ids, self.read, self.token = state, ids, read, token
        self.n = len(ids)
        self.cache = engine.cache
        self.window = engine.n_threads + engine.prefetch
        self.max_reads = engine._max_reads(store, read)
        self.max_ahead = 2 * self.window + 2  # bound on partials waiting for an earlier shard
        self.hinted = 0  # shards [0, hinted) had their files read ahead
        self.ahead = (
            engine._readahead_for(store, token) if read and shard_files(store, ids[0]) else 0
        )
        # a Blocked pass function: the row blocks of a shard run as separate tasks on all
        # compute threads and are reduced in the function's own fixed tree (same bits as
        # calling it on the whole shard)
        self.blocked = fn if isinstance(fn, Blocked) and state is None else None
        self.block_parts: dict[int, list] = {}
        self.block_left: dict[int, int] = {}
        self.fold = StreamingTreeReduce(reduce)
        self.pending: dict[int, Any] = {}
        self.new_states: dict[int, Any] = {}
        self.reads: dict[Future, int] = {}
        self.computes: dict[Future, tuple[int, int]] = {}
        self.next_submit = self.next_fold = 0

    def load(self, k: int, reader, fill):
        # only called after a cache miss in this pass
        sid = self.ids[k]
        shard = reader(sid)
        self.engine.shards_read += 1
        return self.cache.put(self.token, sid, shard) if sid in fill else shard

    def hint(self, upto: int) -> None:
        upto = min(self.n, upto)
        for j in range(self.hinted, upto):
            if not self.cache.contains(self.token, self.ids[j]):
                self.engine._ra.submit(read_ahead, shard_files(self.store, self.ids[j]))
        self.hinted = max(self.hinted, upto)

    def compute(self, k: int, shard):
        if self.state is None:
            return self.fn(shard, self.broadcast), None
        return self.fn(shard, self.broadcast, self.state.get(self.ids[k]))

    def combine(self, k: int):
        parts = self.block_parts.pop(k)
        return self.blocked.combine(parts), None  # type: ignore[union-attr]

    def start(self, k: int, shard) -> None:
        pool = self.engine._pool
        if self.blocked is not None:
            blocks = self.blocked.blocks(shard)
            if len(blocks) > 1:
                self.block_parts[k] = [None] * len(blocks)
                self.block_left[k] = len(blocks)
                for j, b in enumerate(blocks):
                    self.computes[pool.submit(self.blocked.fn, b, self.broadcast)] = (k, j)
                return
        self.computes[pool.submit(self.compute, k, shard)] = (k, -1)

    def in_flight(self) -> int:
        # shards being read or computed (a shard's blocks count once)
        return len(self.reads) + len({k for k, _ in self.computes.values()})

    def submit_more(self, reader, fill) -> None:
        """Start reading or computing the next shards while the window has room."""
        while (
            self.next_submit < self.n
            and self.in_flight() < self.window
            and self.next_submit - self.next_fold < self.max_ahead
        ):
            k = self.next_submit
            store, ids = self.store, self.ids
            hit = self.cache.get(self.token, ids[k]) if self.read else shard_stub(store, ids[k])
            if hit is not None:
                self.start(k, hit)
            elif len(self.reads) < self.max_reads:
                if self.ahead:
                    self.hint(k + 1 + self.ahead)
                self.reads[self.engine._io.submit(self.load, k, reader, fill)] = k
            else:
                break
            self.next_submit += 1

    def finished(self, fut: Future) -> None:
        """Take the result of a read (start its compute) or of a compute (keep its partial)."""
        if fut in self.reads:
            k = self.reads.pop(fut)
            self.start(k, fut.result())
            return
        k, j = self.computes.pop(fut)
        if j < 0:
            self.pending[k], self.new_states[k] = fut.result()
            return
        self.block_parts[k][j] = fut.result()
        self.block_left[k] -= 1
        if self.block_left[k] == 0:
            del self.block_left[k]
            self.computes[self.engine._pool.submit(self.combine, k)] = (k, -1)

    def run(self, reader, fill) -> Any:
        try:
            while self.next_fold < self.n:
                self.submit_more(reader, fill)
                running = list(self.reads) + list(self.computes)
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self.finished(fut)
                while self.next_fold in self.pending:
                    self.fold.push(self.pending.pop(self.next_fold))
                    self.next_fold += 1
        except BaseException:
            running = list(self.reads) + list(self.computes)
            for fut in running:
                fut.cancel()
            wait(running)
            raise
        if self.state is not None:
            for k, st in self.new_states.items():
                self.state.set(self.ids[k], st)
        return self.fold.result()
