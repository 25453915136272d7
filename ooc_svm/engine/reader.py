"""Reading shards for passes: the store's own reader, read-only shards, and a shard cache.

Each store backend owns its fast read path (``Store.shard_reader(fast)``, e.g. memory-mapped
uncompressed Zarr chunks, GIL-free decoding of compressed ones) and validates every shard it
hands out (sizes, structure, checksum; see :mod:`ooc_svm.store.base`). This module only
wraps that reader so pass functions get read-only arrays, and keeps what the engines share:

:class:`ShardCache` is the byte-bounded cache of decoded shards that both engines keep
(``cache_mb``): once full it keeps what it holds (a cyclic scan over a store larger than
the cache then still hits the cached part on every pass, where LRU would hit nothing).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from ..store.backends import shard_suffixes
from ..store.base import held_bytes
from ..store.format import Shard

if TYPE_CHECKING:
    from ..store.base import Store

log = logging.getLogger(__name__)


def readonly(shard: Shard) -> Shard:
    """Mark a shard's arrays read-only (pass functions must not modify shared data)."""
    for a in (shard.indptr, shard.indices, shard.data, shard.y, shard.qid):
        if a is not None and a.flags.writeable:
            a.flags.writeable = False
    return shard


def materialize(shard: Shard) -> Shard:
    """Copy memory-mapped arrays into private memory (for the cache), and arrays in a pooled
    read buffer much larger than themselves (so the cache's byte count is what it holds).
    Other arrays, pooled ones included, are kept as they are: a pooled buffer returns to
    its pool only once no array uses it."""

    def own(a):
        if a is None:
            return None
        b = a.base
        while isinstance(b, np.ndarray):
            b = b.base
        if isinstance(b, mmap.mmap) or held_bytes(a) > a.nbytes + a.nbytes // 8 + (1 << 16):
            a = np.array(a, copy=True)
        return a

    return readonly(
        Shard(
            own(shard.indptr),
            own(shard.indices),
            own(shard.data),
            own(shard.y),
            own(shard.qid),
            row_start=shard.row_start,
        )
    )


def shard_reader(store: Store, fast: bool = True) -> Callable[[int], Shard]:
    """Function ``read(i) -> Shard`` (read-only arrays) for this store.

    Uses the store's own reader (``store.shard_reader(fast)``, validated shards). A store
    *view* (an object with ``base`` and ``transform(shard)``, e.g.
    :class:`~ooc_svm.store.views.BinaryView`) reads through its base store's reader and then
    applies its transform.
    """
    if hasattr(store, "base") and hasattr(store, "transform"):
        base_read = shard_reader(store.base, fast=fast)

        def view_read(i: int) -> Shard:
            return readonly(store.transform(base_read(i)))

        view_read.pool = getattr(base_read, "pool", None)  # type: ignore[attr-defined]
        return view_read
    make = getattr(store, "shard_reader", None)
    if make is None:  # a minimal store object (tests): read_shard only
        return lambda i: readonly(store.read_shard(i))
    read = make(fast=fast)

    def read_only(i: int) -> Shard:
        return readonly(read(i))

    # the reader's buffer pool, for Engine.release_buffers
    read_only.pool = getattr(read, "pool", None)  # type: ignore[attr-defined]
    return read_only


def shard_files(store: Store, sid: int) -> list[str]:
    """The local files of shard ``sid`` (a Zarr shard's folder, or its ``.parquet`` file) for
    read-ahead hints; ``[]`` for a remote store, a view's transform-only shard, or a layout
    not found on disk (the hint is then simply not given)."""
    from ..store.paths import is_local, local_path

    base = getattr(store, "base", store)
    path = str(getattr(base, "path", "") or "")
    if not path or not is_local(path):
        return []
    p = os.path.join(local_path(path), store.meta.shards[sid].name)
    if os.path.isdir(p):
        return [os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs]
    return [p + s for s in shard_suffixes() if s and os.path.isfile(p + s)][:1]


def read_ahead(files: list[str]) -> None:
    """Ask the kernel to read these files into the page cache in the background
    (``posix_fadvise(WILLNEED)``: no copy, no CPU; a file that is gone is skipped)."""
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def store_token(store: Store) -> str:
    """Identity of a store's contents: path + shard table (changes on overwrite / append)."""
    try:
        return _TOKENS[store]
    except (KeyError, TypeError):
        pass
    h = hashlib.blake2b(digest_size=12)
    meta = store.meta
    h.update(str(getattr(store, "path", "")).encode())
    h.update(repr(getattr(store, "cache_key", "")).encode())  # views differ from their base
    h.update(f"|{meta.n_rows}|{meta.nnz}|{meta.n_features}|".encode())
    for s in meta.shards:
        h.update(f"{s.name}:{s.n_rows}:{s.nnz}:{s.checksum};".encode())
    tok = h.hexdigest()
    try:
        _TOKENS[store] = tok
    except TypeError:
        pass
    return tok


def shard_content_key(info) -> tuple:
    """Cache key of a shard's contents from its row in the shard table: its checksum (of
    indptr, indices, data, labels and qid), its first row and its sizes.

    Two stores share the key of a shard only when that shard holds the same rows at the same
    row positions, so a cache keyed by it serves the unchanged shards of a store that was
    appended to, and never a shard of a store that was rewritten with other contents.
    """
    return ("content", info.checksum, int(info.row_start), int(info.n_rows), int(info.nnz))


class ShardCache:
    """Byte-bounded cache of decoded shards, keyed by (store token, shard id).

    Fill-until-full: a shard is added while it fits; entries of *other* stores are evicted
    (oldest first) to make room, entries of the store being read are kept. Thread-safe.
    Entries are keyed by ``(store token, shard id)`` or by a caller's key for the shard's
    contents (the Dask workers' cache, which outlives one training: see
    :func:`shard_content_key`).
    """

    def __init__(self, budget_bytes: int = 0) -> None:
        self.budget = int(max(0, budget_bytes))
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def resize(self, budget_bytes: int) -> None:
        with self._lock:
            self.budget = int(max(0, budget_bytes))
            while self.used > self.budget and self._d:
                self.used -= self._d.popitem(last=False)[1][1]

    def contains(self, token: str, sid: int) -> bool:
        """Whether the shard is cached (no hit or miss counted)."""
        with self._lock:
            return self.budget > 0 and (token, sid) in self._d

    def get(self, token: str, sid: int, key: Hashable | None = None) -> Shard | None:
        """The cached shard, or None. ``key`` (default ``(token, sid)``) names the shard's
        contents; a hit on an entry cached for another store token (an unchanged shard of a
        store that was appended to) moves it to ``token``'s entries."""
        if self.budget <= 0:
            return None
        k = (token, sid) if key is None else key
        with self._lock:
            hit = self._d.get(k)
            if hit is None:
                self.misses += 1
                return None
            self.hits += 1
            if hit[2] != token:
                self._d[k] = (hit[0], hit[1], token)
                self._d.move_to_end(k)
            return hit[0]

    def put(self, token: str, sid: int, shard: Shard, key: Hashable | None = None) -> Shard:
        """Offer a shard of the store ``token``; returns the shard to use (a private copy
        when it was cached). ``key`` as in :meth:`get`."""
        if self.budget <= 0:
            return shard
        k = (token, sid) if key is None else key
        nb = shard.nbytes
        with self._lock:
            if k in self._d:
                return self._d[k][0]
            if nb > self.budget:
                return shard
            if self.used + nb > self.budget:
                for other in [o for o, v in self._d.items() if v[2] != token]:
                    self.used -= self._d.pop(other)[1]
                    if self.used + nb <= self.budget:
                        break
            if self.used + nb > self.budget:
                return shard
            self.used += nb  # reserve before copying outside the lock
        own = materialize(shard)
        with self._lock:
            if k in self._d:  # another thread cached it meanwhile
                self.used -= nb
                return self._d[k][0]
            self._d[k] = (own, nb, token)
        return own

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.used = 0
