"""Reading shards for passes: a zero-copy fast path for local Zarr stores and a shard cache.

``Store.read_shard`` goes through Zarr's generic async machinery, which costs 3-10x more
than the numba kernels of a pass over the same bytes (measured on this machine: ~25 ms to
read a 4M-non-zero uncompressed shard from page cache, against ~6 ms to compute on it).
For a **local Zarr store** whose arrays are single-chunk with the ``bytes`` codec plus at
most one of ``blosc`` / ``zstd`` (what :class:`ooc_svm.store.StoreWriter` writes), the
engines read the chunk files directly instead:

- ``compression="none"``: the chunk file is memory-mapped (``MAP_POPULATE``, read-only);
  the kernels read the page cache without any copy;
- ``blosc`` (``lz4``): decoded by numcodecs straight into the output array (GIL released);
- ``zstd``: decoded by pyarrow's zstd codec (GIL released; numcodecs' holds the GIL).

Anything unexpected (another codec, a missing chunk, a size that does not match the shard
table, a remote path) falls back to ``store.read_shard``, so the store's own error messages
apply. Shards handed to pass functions have read-only arrays.

:class:`ShardCache` is the byte-bounded cache of decoded shards that both engines keep
(``cache_mb``): once full it keeps what it holds (a cyclic scan over a store larger than
the cache then still hits the cached part on every pass, where LRU would hit nothing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..store.format import Shard

log = logging.getLogger("ooc_svm")

_DTYPES = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "float64": np.float64}
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


class _Fallback(Exception):
    """The fast path does not apply to this shard; use ``store.read_shard``."""


def _read_array_meta(adir: str) -> tuple[np.dtype, int, str, dict]:
    with open(os.path.join(adir, "zarr.json"), "rb") as f:
        doc = json.loads(f.read())
    if doc.get("zarr_format") != 3 or doc.get("node_type") != "array":
        raise _Fallback("not a zarr v3 array")
    if doc.get("storage_transformers"):
        raise _Fallback("storage transformers")
    shape = doc.get("shape")
    dt = _DTYPES.get(doc.get("data_type"))
    if dt is None or not isinstance(shape, list) or len(shape) != 1:
        raise _Fallback("dtype/shape")
    n = int(shape[0])
    grid = doc.get("chunk_grid", {})
    if grid.get("name") != "regular" or grid.get("configuration", {}).get("chunk_shape") != [
        max(1, n)
    ]:
        raise _Fallback("not single-chunk")
    cke = doc.get("chunk_key_encoding", {})
    if cke.get("name") != "default" or cke.get("configuration", {}).get("separator", "/") != "/":
        raise _Fallback("chunk key encoding")
    codecs = doc.get("codecs") or []
    if not codecs or codecs[0].get("name") != "bytes":
        raise _Fallback("first codec is not bytes")
    if codecs[0].get("configuration", {}).get("endian", "little") != "little":
        raise _Fallback("big endian")
    if len(codecs) == 1:
        return np.dtype(dt), n, "none", {}
    if len(codecs) == 2 and codecs[1].get("name") in ("blosc", "zstd"):
        return np.dtype(dt), n, codecs[1]["name"], codecs[1].get("configuration", {})
    raise _Fallback("codec pipeline")


def _read_array(adir: str) -> np.ndarray:
    dtype, n, codec, _ = _read_array_meta(adir)
    if n == 0:
        return np.zeros(0, dtype=dtype)
    path = os.path.join(adir, "c", "0")
    nbytes = n * dtype.itemsize
    try:
        if codec == "none":
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size != nbytes:
                    raise _Fallback("chunk size")
                mm = mmap.mmap(f.fileno(), nbytes, flags=_MAP_FLAGS, prot=mmap.PROT_READ)
            return np.frombuffer(mm, dtype=dtype, count=n)
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise _Fallback("missing chunk") from None
    if codec == "blosc":
        from numcodecs import Blosc

        out = np.empty(n, dtype=dtype)
        Blosc().decode(raw, out=out)
        return out
    import pyarrow as pa

    buf = pa.Codec("zstd").decompress(raw, decompressed_size=nbytes, asbytes=False)
    if buf.size != nbytes:
        raise _Fallback("zstd size")
    return np.frombuffer(buf, dtype=dtype, count=n)


def _fast_zarr_shard(root: str, store, i: int) -> Shard:
    info = store.meta.shards[i]
    sdir = os.path.join(root, info.name)
    indptr = _read_array(os.path.join(sdir, "indptr"))
    indices = _read_array(os.path.join(sdir, "indices"))
    data = _read_array(os.path.join(sdir, "data"))
    y = _read_array(os.path.join(sdir, "y"))
    qid = _read_array(os.path.join(sdir, "qid")) if store.meta.has_qid else None
    if info.n_rows == 0 and indptr.shape[0] == 0:
        indptr = np.zeros(1, np.int64)
    ok = (
        indptr.dtype == np.int64
        and indices.dtype == np.int32
        and indptr.shape[0] == info.n_rows + 1
        and indices.shape[0] == info.nnz
        and data.shape[0] == info.nnz
        and y.shape[0] == info.n_rows
        and (qid is None or qid.shape[0] == info.n_rows)
        and indptr[0] == 0
        and indptr[-1] == info.nnz
    )
    if not ok:
        raise _Fallback("shape/dtype differs from the shard table")
    if y.dtype != np.float64:
        y = y.astype(np.float64)
    return Shard(indptr, indices, data, y, qid, row_start=info.row_start)


def _fast_parquet_shard(root: str, store, i: int) -> Shard:
    """Parquet shard through a memory map, decoded on the calling thread only.

    ``pq.read_table`` with its own thread pool contends with the engine's threads (which
    already decode several shards at once); memory-mapped and single-threaded it is ~2x
    faster here. Parquet list columns still decode slowly (repetition levels per value).
    """
    import pyarrow.parquet as pq

    from ..store.parquet_store import table_arrays

    info = store.meta.shards[i]
    cols = ["y", "indices", "values"] + (["qid"] if store.meta.has_qid else [])
    table = pq.read_table(
        os.path.join(root, info.name + ".parquet"), columns=cols, memory_map=True, use_threads=False
    )
    indptr, indices, data, y, qid = table_arrays(table, store.meta.has_qid)
    if info.n_rows == 0:
        indptr = np.zeros(1, np.int64)
    ok = (
        indptr.shape[0] == info.n_rows + 1
        and indices.shape[0] == info.nnz
        and data.shape[0] == info.nnz
        and y.shape[0] == info.n_rows
        and (qid is None or qid.shape[0] == info.n_rows)
        and indptr[-1] == info.nnz
    )
    if not ok:
        raise _Fallback("shape differs from the shard table")
    return Shard(indptr, indices, data, y, qid, row_start=info.row_start)


def readonly(shard: Shard) -> Shard:
    """Mark a shard's arrays read-only (pass functions must not modify shared data)."""
    for a in (shard.indptr, shard.indices, shard.data, shard.y, shard.qid):
        if a is not None and a.flags.writeable:
            a.flags.writeable = False
    return shard


def materialize(shard: Shard) -> Shard:
    """Copy memory-mapped / foreign-buffer arrays into private memory (for the cache)."""

    def own(a):
        if a is None:
            return None
        b = a.base
        while isinstance(b, np.ndarray):
            b = b.base
        if isinstance(b, mmap.mmap):
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


def shard_reader(store, fast: bool = True) -> Callable[[int], Shard]:
    """Function ``read(i) -> Shard`` (read-only arrays) for this store, fast path if possible.

    A store *view* (an object with ``base`` and ``transform(shard)``, e.g.
    :class:`~ooc_svm.store.views.BinaryView`) reads through its base store's reader and then
    applies its transform.
    """
    if hasattr(store, "base") and hasattr(store, "transform"):
        base_read = shard_reader(store.base, fast=fast)
        return lambda i: readonly(store.transform(base_read(i)))
    root = None
    backend = getattr(store, "backend", None)
    if fast and backend in ("zarr", "parquet"):
        from ..store.paths import is_local, local_path

        path = str(getattr(store, "path", ""))
        if path and is_local(path):
            root = local_path(path)
    if root is None:
        return lambda i: readonly(store.read_shard(i))
    warned = []
    fast_read = _fast_zarr_shard if backend == "zarr" else _fast_parquet_shard

    def read(i: int) -> Shard:
        try:
            return readonly(fast_read(root, store, i))
        except Exception as e:  # noqa: BLE001 - any trouble: the store's own reader decides
            if not warned:
                warned.append(True)
                log.debug(
                    "%s: fast shard read not possible (%s); using store.read_shard", store.path, e
                )
            return readonly(store.read_shard(i))

    return read


_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def store_token(store) -> str:
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


class ShardCache:
    """Byte-bounded cache of decoded shards, keyed by (store token, shard id).

    Fill-until-full: a shard is added while it fits; entries of *other* stores are evicted
    (oldest first) to make room, entries of the store being read are kept. Thread-safe.
    """

    def __init__(self, budget_bytes: int = 0):
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
                _, (_, nb) = self._d.popitem(last=False)
                self.used -= nb

    def get(self, token: str, sid: int) -> Shard | None:
        if self.budget <= 0:
            return None
        with self._lock:
            hit = self._d.get((token, sid))
            if hit is None:
                self.misses += 1
                return None
            self.hits += 1
            return hit[0]

    def put(self, token: str, sid: int, shard: Shard) -> Shard:
        """Offer a shard; returns the shard to use (a private copy when it was cached)."""
        if self.budget <= 0:
            return shard
        nb = shard.nbytes
        with self._lock:
            if (token, sid) in self._d:
                return self._d[(token, sid)][0]
            if nb > self.budget:
                return shard
            if self.used + nb > self.budget:
                for key in [k for k in self._d if k[0] != token]:
                    _, knb = self._d.pop(key)
                    self.used -= knb
                    if self.used + nb <= self.budget:
                        break
            if self.used + nb > self.budget:
                return shard
            self.used += nb  # reserve before copying outside the lock
        own = materialize(shard)
        with self._lock:
            if (token, sid) in self._d:  # another thread cached it meanwhile
                self.used -= nb
                return self._d[(token, sid)][0]
            self._d[(token, sid)] = (own, nb)
        return own

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.used = 0
