"""The ``Store`` interface every backend and view implements, and the checks every read runs.

Every shard a backend hands out (``read_shard`` or the function ``shard_reader`` returns) has
been checked here before any kernel sees it:

1. *bounded I/O*: only regular files are opened (a FIFO, device or ``/dev/zero`` symlink is
   refused), their sizes are compared with what the shard table declares before anything is
   read, and compressed chunks are decoded into buffers of exactly the declared size;
2. *structure*: array sizes against the shard table, ``indptr`` from 0 to nnz and never
   decreasing, ``0 <= indices < n_features``, finite values and labels
   (:func:`ooc_svm.kernels.validate.check_csr`, one numba pass), and every label among
   the ``labels`` of the store metadata (:func:`~ooc_svm.kernels.validate.check_labels`);
3. *checksum*: the shard's checksum against the shard table.

Steps 2 and 3 run **once per store object and shard** while the shard's files keep their
identity (device, inode, size, modification time): a later read of the same unchanged files
skips them, so only the first pass of a training pays (measured in ``scripts/bench_pass.py``).
``read_shard(i, verify=True)`` (``ooc-svm verify``) always re-checks. Remote (fsspec) stores
have no file identity and are checked on every read (sizes, structure and checksum, as local
ones).

A reader also holds a *snapshot*: the directory it opened (device and inode of the local store
root). When ``ingest --overwrite`` has moved another store into place, the next read fails with
:class:`StoreChangedError` instead of mixing shards of two stores.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .format import (
    MAX_META_BYTES,
    Shard,
    ShardCorruptError,
    StoreChangedError,
    StoreError,
    StoreMeta,
    shard_checksum,
)
from .paths import get_fs, is_local, local_path, remote_errors

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: a JSON document describing one Zarr array is a few hundred bytes
MAX_ARRAY_META_BYTES = 1 << 16

#: local file identity used to remember verified shards (None for remote files)
FileId = tuple[int, int, int, int] | None


@runtime_checkable
class Store(Protocol):
    """What engines, solvers and commands use of a store (backends and views alike)."""

    path: str
    backend: str
    meta: StoreMeta

    @property
    def n_shards(self) -> int: ...

    @property
    def cache_key(self) -> Hashable: ...

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        """Shard ``i``, validated (``verify``: re-check the checksum even if done before)."""
        ...

    def shard_reader(self, fast: bool = True) -> Callable[[int], Shard]:
        """A function ``read(i) -> Shard`` for passes (``fast``: the backend's fastest way,
        e.g. memory-mapped chunks; arrays may be read-only). Shards are validated."""
        ...


# ------------------------------------------------------------------------------------------
# bounded local / remote reads
# ------------------------------------------------------------------------------------------
def open_regular(
    path: str, max_bytes: int, what: str, limit: str = "its declared size allows"
) -> tuple[int, os.stat_result]:
    """Open a local file for reading only if it is a regular file of at most ``max_bytes``.

    Returns the file descriptor (caller closes it) and its ``fstat``. ``O_NONBLOCK`` keeps a
    FIFO from blocking the open; it is refused right after.

    Raises
    ------
    FileNotFoundError
        When it does not exist.
    StoreError
        When it is not a regular file or is larger than ``max_bytes``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{what}: {path} is not a regular file; refusing to read it")
        if st.st_size > max_bytes:
            raise StoreError(
                f"{what}: {path} is {st.st_size:,} bytes, more than the {max_bytes:,} {limit}; "
                "refusing to read it"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def file_id(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_file(
    fs: AbstractFileSystem,
    root: str,
    rel: str,
    max_bytes: int,
    what: str,
    limit: str = "its declared size allows",
) -> tuple[bytes, FileId]:
    """Bytes of ``root/rel`` (local or fsspec), refusing non-regular or too large files."""
    path = f"{root}/{rel}"
    if fs is None:
        fd, st = open_regular(path, max_bytes, what, limit)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                raw = f.read(max_bytes + 1)
        finally:
            os.close(fd)
        if len(raw) > max_bytes:
            raise StoreError(f"{what}: {path} grew while being read; refusing it")
        return raw, file_id(st)
    # one request: a GET of at most max_bytes + 1 bytes (no separate HEAD for the size)
    with remote_errors(path, fs):
        try:
            raw = fs.cat_file(path, start=0, end=max_bytes + 1)
        except OSError as e:
            if "range" not in str(e).lower():
                raise
            raw = fs.cat_file(path)  # a zero-length object: S3 answers a Range GET with 416
    if len(raw) > max_bytes:
        raise StoreError(
            f"{what}: {path} is larger than the {max_bytes:,} {limit}; refusing to read it"
        )
    return raw, None


def read_into(path: str, out: np.ndarray, what: str) -> FileId:
    """Fill ``out`` with the bytes of a local regular file of exactly ``out.nbytes`` bytes."""
    fd, st = open_regular(path, out.nbytes, what)
    try:
        if st.st_size != out.nbytes:
            raise _SizeMismatch(st.st_size)
        view = out.view(np.uint8).data
        got = 0
        while got < out.nbytes:
            n = os.readv(fd, [view[got:]])
            if n <= 0:
                raise _SizeMismatch(got)
            got += n
    finally:
        os.close(fd)
    return file_id(st)


def read_local(
    path: str, max_bytes: int, what: str, pool: BufferPool | None = None
) -> tuple[np.ndarray, FileId]:
    """Bytes of a local regular file of at most ``max_bytes`` as a uint8 array.

    One ``readinto`` straight into the array (no intermediate ``bytes`` object): a buffer of
    ``pool`` (reused from shard to shard, see :class:`BufferPool`) or a fresh one. The array
    holds exactly the bytes read; a file that shrank while being read is returned short (the
    decoder and the size checks then refuse it).
    """
    fd, st = open_regular(path, max_bytes, what)
    try:
        size = st.st_size
        out: np.ndarray = pool.take(size) if pool is not None else np.empty(size, np.uint8)
        view = memoryview(out)  # type: ignore[arg-type]  # an ndarray is a Buffer
        got = 0
        while got < size:
            n = os.readv(fd, [view[got:]])
            if n <= 0:
                break
            got += n
    finally:
        os.close(fd)
    return out[:got], file_id(st)


#: free buffers a :class:`BufferPool` keeps at most (whatever their sizes)
MAX_FREE_BUFFERS = 64


class _Lease:
    """Owner of one pooled buffer while arrays use it.

    The arrays :meth:`BufferPool.take` hands out are numpy views whose ``base`` chain ends at a
    lease; when the last of them (and every view of a view) is garbage, the lease is too and
    its buffer goes back to the pool. So a consumer that keeps a shard (the shard cache, a
    solver's in-memory rows) simply keeps its buffers out of the pool: nothing is ever
    overwritten while referenced.
    """

    __slots__ = ("_buf", "_pool", "__array_interface__")

    def __init__(self, buf: np.ndarray, nbytes: int, pool: BufferPool):
        self._buf = buf
        self._pool = pool
        addr = buf.__array_interface__["data"][0]
        self.__array_interface__ = {
            "data": (addr, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }

    def __del__(self):
        try:
            self._pool._give_back(self._buf)
        except Exception:  # interpreter shutdown: nothing to give back to
            pass


def held_bytes(a: np.ndarray) -> int:
    """Bytes of memory an array keeps alive: the whole pooled buffer behind it (see
    :class:`BufferPool`), else its own size."""
    b = a.base
    while isinstance(b, np.ndarray):
        b = b.base
    return int(b._buf.nbytes) if isinstance(b, _Lease) else int(a.nbytes)


class BufferPool:
    """Reusable byte buffers for the read path of passes (compressed chunks, decoded arrays).

    Decoding every shard into freshly allocated memory costs a page fault and the kernel's
    zeroing of every 4 KiB page (measured: about as much CPU as lz4 decoding itself); a pass
    over a store larger than memory allocates the same sizes shard after shard, so buffers are
    reused instead. Lifetime is reference counting (:class:`_Lease`): a buffer is back in the
    pool only once nothing refers to any array made from it. At most ``max_free_bytes`` of
    free buffers are kept (oldest dropped first).
    """

    def __init__(self, max_free_bytes: int) -> None:
        self.max_free_bytes = max(0, int(max_free_bytes))
        self.free_bytes = 0
        self.reused = 0
        self.allocated = 0
        self._free: list[np.ndarray] = []
        # re-entrant: a lease's __del__ may run in this thread while it holds the lock
        self._lock = threading.RLock()

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of ``nbytes`` (contents undefined) backed by a pooled buffer."""
        nbytes = int(nbytes)
        fit = None
        with self._lock:
            most = nbytes + nbytes // 4 + (1 << 20)  # reuse only buffers that fit snugly
            for j, b in enumerate(self._free):
                if nbytes <= b.nbytes <= most and (
                    fit is None or b.nbytes < self._free[fit].nbytes
                ):
                    fit = j
            if fit is not None:
                buf = self._free.pop(fit)
                self.free_bytes -= buf.nbytes
                self.reused += 1
        if fit is None:
            # a little room above this size: the next shard's arrays differ by a few rows
            size = (nbytes + nbytes // 32 + 0xFFFF) & ~0xFFFF
            buf = np.empty(size, np.uint8)
            self.allocated += 1
        return np.asarray(_Lease(buf, nbytes, self))

    def _give_back(self, buf: np.ndarray) -> None:
        with self._lock:
            if not 0 < buf.nbytes <= self.max_free_bytes:
                return
            self._free.append(buf)
            self.free_bytes += buf.nbytes
            while self.free_bytes > self.max_free_bytes or len(self._free) > MAX_FREE_BUFFERS:
                self.free_bytes -= self._free.pop(0).nbytes

    def clear(self) -> None:
        """Drop every free buffer (buffers in use return later, within the bound)."""
        with self._lock:
            self._free.clear()
            self.free_bytes = 0


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def map_file(path: str, nbytes: int, what: str) -> tuple[mmap.mmap, FileId]:
    """Read-only memory map of a local regular file of exactly ``nbytes`` bytes."""
    fd, st = open_regular(path, nbytes, what)
    try:
        if st.st_size != nbytes:
            raise _SizeMismatch(st.st_size)
        mm = mmap.mmap(fd, nbytes, flags=_MAP_FLAGS, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return mm, file_id(st)


class _SizeMismatch(Exception):
    """A file's size differs from the size the shard table declares."""


def load_meta_json(fs: AbstractFileSystem, root: str, rel: str, path: str) -> dict[str, Any]:
    """Parse a store's metadata JSON (bounded size, regular file) into a dict."""
    limit = f"bytes ({MAX_META_BYTES >> 20} MiB, about 100,000 shards) store metadata is limited to"
    raw, _ = read_file(fs, root, rel, MAX_META_BYTES, path, limit)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        why = "JSON nested too deeply" if isinstance(e, RecursionError) else e
        raise StoreError(
            f"{path}: unreadable store metadata {rel} ({why}); re-ingest the store"
        ) from None
    if not isinstance(doc, dict):
        raise StoreError(f"{path}: {rel} is not a JSON object; not an ooc-svm store")
    return doc


# ------------------------------------------------------------------------------------------
# the checks every backend runs on a shard
# ------------------------------------------------------------------------------------------
class ShardGuard:
    """Mixin of the backends: validation, remembered checksums, snapshot of the store root."""

    path: str
    meta: StoreMeta

    @property
    def n_shards(self) -> int:
        return self.meta.n_shards

    @property
    def cache_key(self) -> str:
        return self.path

    def __reduce__(self):
        # pickles as its path: a Dask worker re-opens the store from the shared file system
        return (type(self), (self.path,))

    def _init_guard(self, local: bool, root: str) -> None:
        self._local = local
        self._root = root
        self._verified: dict[int, tuple] = {}
        self._vlock = threading.Lock()
        self._root_id = self._stat_root() if local else None

    def _stat_root(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._root)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def check_unchanged(self) -> None:
        """Raise :class:`StoreChangedError` if another store was moved to this path."""
        if self._root_id is not None and self._stat_root() != self._root_id:
            raise StoreChangedError(
                f"store {self.path} changed while reading (rewritten by another ingest); rerun"
            )

    def describe(self, i: int) -> str:
        info = self.meta.shards[i]
        last = info.row_start + info.n_rows - 1
        return f"store {self.path}: shard {i} ({info.name}, rows {info.row_start}-{last})"

    def damaged(self, i: int, what: str) -> ShardCorruptError:
        """The error for a damaged shard (a replaced store is reported as such instead)."""
        self.check_unchanged()
        return ShardCorruptError(
            f"{self.describe(i)} is damaged: {what} — run `ooc-svm verify {self.path}` and "
            "re-ingest the store"
        )

    def accept(self, i: int, shard: Shard, ident: tuple | None, verify: bool) -> Shard:
        """Validate shard ``i`` (sizes, structure, checksum) unless these files passed before."""
        info = self.meta.shards[i]
        n, nnz = info.n_rows, info.nnz
        sizes_ok = (
            shard.indptr.dtype == np.int64
            and shard.indices.dtype == np.int32
            and shard.data.dtype == np.float32
            and shard.y.dtype == np.float64
            and (shard.qid is None or shard.qid.dtype == np.int64)
            and shard.indptr.shape == (n + 1,)
            and shard.indices.shape == (nnz,)
            and shard.data.shape == (nnz,)
            and shard.y.shape == (n,)
            and (
                (shard.qid is None) == (not self.meta.has_qid)
                and (shard.qid is None or shard.qid.shape == (n,))
            )
        )
        if not sizes_ok:
            raise self.damaged(i, "its arrays do not have the sizes of the shard table")
        if not verify and ident is not None and self._verified.get(i) == ident:
            self.check_unchanged()
            return shard
        from ..kernels.validate import MESSAGES, check_csr, check_labels

        m = self.meta
        code, pos = check_csr(shard.indptr, shard.indices, shard.data, shard.y, m.n_features)
        if code:
            raise self.damaged(i, MESSAGES[int(code)].format(pos=int(pos)))
        if m.labels is not None:
            r = check_labels(shard.y, np.asarray(m.labels, dtype=np.float64))
            if r >= 0:
                shown = ", ".join(f"{v:g}" for v in m.labels[:6])
                more = ", ..." if len(m.labels) > 6 else ""
                raise self.damaged(
                    i,
                    f"label {shard.y[r]:g} at row {info.row_start + r} is not one of the "
                    f"labels in the store metadata ({shown}{more}; metadata edited?)",
                )
        if shard_checksum(shard, self.meta.version) != info.checksum:
            raise self.damaged(i, "checksum mismatch")
        self.check_unchanged()
        if ident is not None:
            with self._vlock:
                self._verified[i] = ident
        return shard


def store_fs(path: str) -> tuple[Any, str, bool]:
    """``(fs or None for local, root, local)`` of a store path."""
    if is_local(path):
        return None, local_path(path), True
    fs, root = get_fs(path)
    return fs, root, False
