"""Ingest's shards: rows cut into shards of a bounded size, handed to writer threads.

:class:`_ShardBuilder` collects the parsed rows of :mod:`ooc_svm.store.ingest` into shards of
``shard_mb`` MB of decoded CSR; :class:`_ShardWriters` compresses and writes them through
:class:`~ooc_svm.store.writer.StoreWriter` on background threads, in shard order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import numpy as np

from .format import Shard, StoreError
from .writer import StoreWriter


# ------------------------------------------------------------------------------------------
# Shards
# ------------------------------------------------------------------------------------------
class _ShardBuffer:
    """Arrays one shard is assembled in (reused for later shards once written)."""

    def __init__(self, rows: int, nnz: int, has_qid: bool):
        self.indptr = np.empty(rows + 1, np.int64)
        self.indptr[0] = 0
        self.indices = np.empty(nnz, np.int32)
        self.data = np.empty(nnz, np.float32)
        self.y = np.empty(rows, np.float64)
        self.qid = np.empty(rows, np.int64) if has_qid else None

    def reserve(self, rows: int, nnz: int) -> None:
        """Grow (doubling, keeping the content) to hold ``rows`` rows and ``nnz`` entries."""
        if rows > self.y.shape[0]:
            cap = max(rows, 2 * self.y.shape[0])
            self.indptr = _grow(self.indptr, cap + 1)
            self.y = _grow(self.y, cap)
            if self.qid is not None:
                self.qid = _grow(self.qid, cap)
        if nnz > self.indices.shape[0]:
            cap = max(nnz, 2 * self.indices.shape[0])
            self.indices = _grow(self.indices, cap)
            self.data = _grow(self.data, cap)


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    b = np.empty(n, a.dtype)
    b[: a.shape[0]] = a
    return b


class _ShardBuilder:
    """Copies parsed rows into shard buffers, cut at shard_rows / shard_bytes.

    Shard buffers come from a small pool and return to it once the writer thread has
    written them, so steady state copies into warm memory (no page faults, no zeroing).
    """

    def __init__(self, shard_rows: int | None, shard_bytes: int | None, has_qid: bool):
        self.shard_rows = shard_rows
        self.shard_bytes = shard_bytes
        self.row_bytes = 16 + (8 if has_qid else 0)  # indptr + label (+ qid) per row
        self.has_qid = has_qid
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        rows_cap = shard_rows if shard_rows is not None else 1 << 62
        nnz_cap = 1 << 62
        if shard_bytes is not None:
            rows_cap = min(rows_cap, shard_bytes // self.row_bytes + 1)
            nnz_cap = shard_bytes // 8 + 1
        # start small; buffers grow to what the shards need and keep that size
        self.init_rows = int(min(rows_cap, 1 << 18))
        self.init_nnz = int(min(nnz_cap, 1 << 22))
        self.buf: _ShardBuffer | None = None
        self.rows = 0
        self.nnz = 0
        self.max_col = -1

    def release(self, buf: _ShardBuffer) -> None:
        """A shard buffer the writer is done with."""
        self.free.put(buf)

    def _take(self) -> _ShardBuffer:
        try:
            return self.free.get_nowait()
        except queue.Empty:
            return _ShardBuffer(self.init_rows, self.init_nnz, self.has_qid)

    def _fits(self, indptr: np.ndarray, a: int, b: int) -> int:
        """How many of rows a..b-1 fit into the current shard (at least 1 for an empty shard)."""
        m = b - a
        if self.shard_rows is not None:
            m = min(m, self.shard_rows - self.rows)
        if self.shard_bytes is not None and m > 0:
            budget = self.shard_bytes - (self.rows * self.row_bytes + self.nnz * 8)
            # the cost of the first j rows grows with j: binary search on it
            base = int(indptr[a])
            lo, hi = 0, m
            while lo < hi:
                mid = (lo + hi + 1) // 2
                cost = mid * self.row_bytes + (int(indptr[a + mid]) - base) * 8
                if cost <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            m = lo
        if m == 0 and self.rows == 0:
            m = 1
        return m

    def add(self, indptr, indices, data, labels, qids, n_rows: int, max_col: int):
        """Copy rows in; yields every shard completed on the way."""
        a = 0
        while a < n_rows:
            m = self._fits(indptr, a, n_rows)
            if m > 0:
                b = a + m
                k0, k1 = int(indptr[a]), int(indptr[b])
                if self.buf is None:
                    self.buf = self._take()
                sb = self.buf
                r, z = self.rows, self.nnz
                sb.reserve(r + m, z + k1 - k0)
                np.subtract(indptr[a + 1 : b + 1], k0 - z, out=sb.indptr[r + 1 : r + m + 1])
                sb.indices[z : z + k1 - k0] = indices[k0:k1]
                sb.data[z : z + k1 - k0] = data[k0:k1]
                sb.y[r : r + m] = labels[a:b]
                if self.has_qid:
                    assert sb.qid is not None  # a buffer of a store with qids
                    sb.qid[r : r + m] = qids[a:b]
                self.rows += m
                self.nnz += k1 - k0
                self.max_col = max(self.max_col, max_col)
                a = b
            if a < n_rows or self._full():
                yield self.flush()

    def _full(self) -> bool:
        if self.shard_rows is not None and self.rows >= self.shard_rows:
            return True
        if self.shard_bytes is not None:
            return self.rows * self.row_bytes + self.nnz * 8 >= self.shard_bytes
        return False

    def flush(self) -> tuple[Shard, int, _ShardBuffer] | None:
        """The current shard (views into its buffer), its width and the buffer."""
        if not self.rows:
            return None
        sb, r, z = self.buf, self.rows, self.nnz
        assert sb is not None  # rows were added into it
        shard = Shard(
            sb.indptr[: r + 1],
            sb.indices[:z],
            sb.data[:z],
            sb.y[:r],
            sb.qid[:r] if self.has_qid and sb.qid is not None else None,
        )
        item = (shard, self.max_col + 1, sb)
        self.buf = None
        self.rows = 0
        self.nnz = 0
        self.max_col = -1
        return item


class _ShardWriters:
    """Writes shards in background threads.

    The main thread enters each shard in the store's table in row order
    (:meth:`StoreWriter.reserve`); ``n_threads`` threads then compress and write shards
    concurrently (:meth:`StoreWriter.write_reserved`): compression is the most expensive
    step after parsing. At most one shard waits in the queue.
    """

    def __init__(self, writer: StoreWriter, n_threads: int):
        self.writer = writer
        self.release: Callable[[_ShardBuffer], None] | None = None
        self.q: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.shards = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, name=f"ooc-svm-ingest-writer-{i}", daemon=True)
            for i in range(max(1, n_threads))
        ]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            info, shard, buf = item
            if self.error is None:
                try:
                    self.writer.write_reserved(info, shard)
                    with self._lock:
                        self.shards += 1
                except BaseException as e:  # re-raised in the main thread
                    self.error = e
            del shard, item
            if self.release is not None:
                self.release(buf)

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def put(self, item) -> None:
        """Enter a shard in the table (here, in row order) and queue it for writing."""
        self._check()
        shard, nf, buf = item
        info = self.writer.reserve(shard, n_features=nf)
        while True:
            try:
                self.q.put((info, shard, buf), timeout=0.2)
                return
            except queue.Full:
                self._check()
                if not any(t.is_alive() for t in self.threads):
                    raise StoreError("ingest writer threads stopped unexpectedly") from None

    def close(self) -> None:
        """Wait for every queued shard; re-raise a write error."""
        for _ in self.threads:
            self.q.put(None)
        for t in self.threads:
            t.join()
        self._check()

    def abandon(self) -> None:
        """Stop after the shards being written (the store is aborted anyway)."""
        self.error = self.error or RuntimeError("abandoned")
        try:
            while True:
                self.q.get_nowait()
        except queue.Empty:
            pass
        for _ in self.threads:
            try:
                self.q.put(None, timeout=60)
            except queue.Full:
                break
        for t in self.threads:
            t.join(timeout=60)
