"""Writing stores: shards go to a temporary name, the store is renamed into place when complete."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .backends import backend_for_path, backends, detect_backend, get_backend
from .format import (
    FORMAT_VERSION,
    LABEL_KINDS,
    MAX_DISCRETE_LABELS,
    Shard,
    ShardInfo,
    StoreError,
    StoreMeta,
    fingerprint_hex,
    hashing_info,
    hashing_label,
    infer_label_kind,
    rows_fingerprint,
    shard_checksum,
    shard_name,
)
from .lock import RemoteStoreLock, StoreLock
from .paths import check_bucket, get_fs, is_local, local_path, remote_errors, temp_sibling

if TYPE_CHECKING:
    from .base import Store

# the backends (zarr, pyarrow) are imported when a store of their kind is opened or written:
# reading a Zarr store needs neither package, and a command that opens no store none at all

log = logging.getLogger(__name__)


def backend_from_path(path: str) -> str:
    """The format a new store at ``path`` gets from its suffix (:mod:`.backends`:
    ``.parquet`` / ``.pq`` Parquet, else Zarr)."""
    return backend_for_path(path).name


def open_store(path: str) -> Store:
    """Open an existing store (its format detected from its contents: the marker file of a
    backend of :mod:`.backends`).

    Raises
    ------
    StoreError
        When ``path`` does not exist, is not a store, or is of a newer format version.
    """
    path = str(path).rstrip("/") or str(path)
    if is_local(path):  # no fsspec for a local store
        root = local_path(path)
        if not os.path.exists(root):
            raise StoreError(f"{path}: no such store")
        found = detect_backend(os.path.exists, root)
        if found is not None:
            return found.reader_class()(path)
    else:
        fs, root = get_fs(path)
        with remote_errors(path, fs):
            if not fs.exists(root):
                check_bucket(fs, path)
                raise StoreError(f"{path}: no such store")
            found = detect_backend(fs.exists, root)
            if found is not None:
                return found.reader_class()(path)
    markers = " nor ".join(b.marker for b in backends())
    raise StoreError(
        f"{path}: not an ooc-svm store (neither {markers} found); "
        "create one with `ooc-svm ingest INPUT STORE`"
    )


#: shard codec when none is asked for, per built-in backend (see :class:`StoreWriter`)
DEFAULT_COMPRESSION = {b.name: b.default_codec for b in backends()}


class StoreWriter:
    """Accumulates shards into a new store (or new shards of an existing one).

    Parameters
    ----------
    path : str
        Destination store.
    backend : str or None
        A format of :mod:`.backends` (``zarr``, ``parquet``); default: from the suffix of
        ``path``.
    compression : {"zstd", "lz4", "none"} or None
        Default (None): the backend's ``default_codec`` — lz4 for Zarr (measured smaller or
        equal to zstd level 1 on our stores and 1.1–2.7× faster to decode), zstd for Parquet
        (the codec other Parquet readers handle best).
    overwrite : bool
        Replace an existing store at ``path``.
    append : bool
        Add shards to the existing store at ``path``; metadata is replaced atomically at commit.
    label_kind : str or None
        Force the label kind instead of inferring it.

    Use as a context manager: leaving the block with an exception removes every partial write.
    """

    def __init__(
        self,
        path: str,
        backend: str | None = None,
        compression: str | None = None,
        overwrite: bool = False,
        append: bool = False,
        label_kind: str | None = None,
        n_features: int | None = None,
        hash_bits: int | None = None,
    ) -> None:
        self.path = str(path).rstrip("/")
        self.fs, self.root = get_fs(self.path)
        self._lock: StoreLock | RemoteStoreLock | None = None
        #: ``hash_bits``: features hashed into 2^bits columns (``ingest --hash-bits``);
        #: ``collisions`` is added to by the caller
        self.hash_bits = hash_bits
        self.collisions = 0
        if hash_bits is not None:
            n_features = 1 << int(hash_bits)
        with remote_errors(self.path, self.fs):
            self._init(backend, compression, overwrite, append, label_kind, n_features)

    def _init(self, backend, compression, overwrite, append, label_kind, n_features) -> None:
        if label_kind is not None and label_kind not in LABEL_KINDS:
            raise StoreError(f"unknown label kind {label_kind!r}; use one of {LABEL_KINDS}")
        self.label_kind = label_kind
        self.min_features = n_features or 0
        self.append = append
        self.overwrite = overwrite
        local = is_local(self.path)
        if not local:
            check_bucket(self.fs, self.path)
        exists = self.fs.exists(self.root)
        self._base: StoreMeta | None = None
        if append:
            if not exists:
                raise StoreError(f"{self.path}: --append needs an existing store; there is none")
            # serialise appends: the lock is taken before the shard table is read
            if local:
                self._lock = StoreLock(local_path(self.path), self.path).acquire()
            else:
                self._lock = RemoteStoreLock(self.fs, self.root, self.path).acquire()
            try:
                self._base = open_store(self.path).meta
            except BaseException:
                self._release()
                raise
            backend = self._base.backend
            compression = self._base.compression
            self.target = self.path
            self._check_append_hashing()
        else:
            if exists and not overwrite:
                raise StoreError(
                    f"{self.path}: destination exists; replace it with --overwrite "
                    "(overwrite=True in Python) or add rows to it with --append (append=True)"
                )
            self.target = temp_sibling(self.path, "ingest")
        self._format = get_backend(backend) if backend else backend_for_path(self.path)
        self.backend = self._format.name
        if compression is None:
            compression = self._format.default_codec
        self.compression = compression
        self._writer = self._format.writer_class()(self.target, compression=compression)
        if not append and is_local(self.target):
            # marks the temporary store as in use (`verify --repair` leaves it alone)
            self._lock = StoreLock(local_path(self.target), self.target).acquire()
        self.shards: list[ShardInfo] = list(self._base.shards) if self._base else []
        #: the number of the next shard's name: after every name in the table and every
        #: shard file on disk (`ooc-svm drop` leaves the oldest shards' files for readers
        #: still open, and the table then has fewer entries than the last name's number)
        self._next_index = self._first_free_index()
        self.n_rows = self._base.n_rows if self._base else 0
        self.nnz = self._base.nnz if self._base else 0
        self.n_features = max(self._base.n_features if self._base else 0, self.min_features)
        self.has_qid: bool | None = (
            self._base.has_qid if (self._base and self._base.n_rows) else None
        )
        self.version = self._base.version if self._base else FORMAT_VERSION
        self._labels: set[float] | None = set()
        if self._base is not None:
            if self._base.labels is None and self._base.n_rows:
                self._labels = None
            else:
                self._labels = set(self._base.labels or [])
        self._done = False
        # the rows' fingerprint, continued from the base store's (none: written before it)
        prints = self._base.fingerprints if self._base else []
        self._fp_lock = threading.Lock()
        self._fp = int(prints[-1][1], 16) if prints else 0
        self._fp_known = self._base is None or bool(prints) or self._base.n_rows == 0

    def _check_append_hashing(self) -> None:
        """Rows appended to a store are hashed as its rows were (or not at all)."""
        assert self._base is not None
        h = self._base.hashing
        if (h["bits"] if h else None) == self.hash_bits:
            return
        self._release()
        if h:
            raise StoreError(
                f"{self.path}: the store's features are hashed ({hashing_label(h)}); append "
                f"with --hash-bits {h['bits']}"
            )
        raise StoreError(
            f"{self.path}: the store's features are not hashed; append without --hash-bits"
        )

    # -- writing --------------------------------------------------------------------------
    def add(self, shard: Shard, n_features: int | None = None) -> ShardInfo:
        """Write one shard (its ``row_start`` is assigned here) and return its table entry."""
        name = self._next_name(shard)
        with remote_errors(self.path, self.fs):
            self._writer.write(name, shard)
        self._add_fingerprint(shard)
        return self._enter(shard, name, n_features, shard_checksum(shard, self.version))

    def _add_fingerprint(self, shard: Shard) -> None:
        fp = rows_fingerprint(shard)
        with self._fp_lock:
            self._fp = (self._fp + fp) & 0xFFFFFFFFFFFFFFFF

    def reserve(self, shard: Shard, n_features: int | None = None) -> ShardInfo:
        """:meth:`add` in two steps, for writing several shards concurrently: this first step
        gives the shard its name and ``row_start`` and enters it in the shard table without
        writing it. Call it in row order from one thread; :meth:`write_reserved` may then run
        in other threads, and every call must have returned before :meth:`commit`."""
        return self._enter(shard, self._next_name(shard), n_features, "")

    def write_reserved(self, info: ShardInfo, shard: Shard) -> ShardInfo:
        """Second step of :meth:`reserve`: write the shard and record its checksum.
        Thread-safe for different shards."""
        with remote_errors(self.path, self.fs):
            self._writer.write(info.name, shard)
        info.checksum = shard_checksum(shard, self.version)
        self._add_fingerprint(shard)
        return info

    def _next_name(self, shard: Shard) -> str:
        has_qid = shard.qid is not None
        if self.has_qid is None:
            self.has_qid = has_qid
        elif self.has_qid != has_qid:
            raise StoreError(
                f"{self.path}: some rows have qid: and others do not; a store has qids on "
                "every row or on none"
            )
        shard.row_start = self.n_rows
        name = shard_name(self._next_index)
        self._next_index += 1
        return name

    def _first_free_index(self) -> int:
        """1 + the largest shard number in the base table or on disk (0 for a new store)."""
        if not self.append:
            return 0
        from .gc import _shard_entry

        nums = [int(s.name[1:]) for s in self.shards if s.name[1:].isdigit()]
        if is_local(self.path) and os.path.isdir(local_path(self.path)):
            for entry in os.listdir(local_path(self.path)):
                base = _shard_entry(entry)
                if base is not None:
                    nums.append(int(base[1:]))
        return max(nums, default=-1) + 1

    def _enter(self, shard: Shard, name: str, n_features: int | None, checksum: str):
        info = ShardInfo(name, self.n_rows, shard.n_rows, shard.nnz, checksum)
        self.shards.append(info)
        self.n_rows += shard.n_rows
        self.nnz += shard.nnz
        nf = (
            n_features
            if n_features is not None
            else (int(shard.indices.max()) + 1 if shard.indices.size else 0)
        )
        self.n_features = max(self.n_features, nf)
        if self._labels is not None:
            self._labels.update(np.unique(shard.y).tolist())
            if len(self._labels) > MAX_DISCRETE_LABELS:
                self._labels = None
        return info

    def meta(self) -> StoreMeta:
        if self._labels is None:
            kind, labels = "real", None
        else:
            kind, labels = infer_label_kind(
                np.array(sorted(self._labels)), has_qid=bool(self.has_qid)
            )
        if self.label_kind is not None:
            kind = self.label_kind
            if kind != "real" and labels is None:
                raise StoreError(f"{self.path}: too many distinct labels for kind {kind!r}")
            if kind == "real":
                labels = None
        elif self.has_qid and kind == "binary" and labels and len(labels) == 2:
            pass
        m = StoreMeta(
            backend=self.backend,
            n_rows=self.n_rows,
            n_features=self.n_features,
            nnz=self.nnz,
            label_kind=kind,
            labels=labels,
            has_qid=bool(self.has_qid),
            shards=list(self.shards),
            compression=self.compression,
            version=self.version,
            uuid=uuid.uuid4().hex,
        )
        if self._fp_known:
            prints = [list(e) for e in (self._base.fingerprints if self._base else [])]
            if not prints or prints[-1][0] != self.n_rows:
                prints.append([self.n_rows, fingerprint_hex(self._fp)])
            m.fingerprints = prints
        if self.hash_bits is not None:
            base = self._base.hashing if self._base is not None else None
            m.hashing = hashing_info(
                self.hash_bits, (base["collisions"] if base else 0) + self.collisions
            )
        m.validate(self.path)
        return m

    def commit(self, sources: list[str] | None = None) -> StoreMeta:
        """Write metadata and move the store into place. Returns the final metadata."""
        meta = self.meta()
        base_sources = self._base.sources if self._base else []
        meta.sources = list(base_sources) + list(sources or [])
        try:
            with remote_errors(self.path, self.fs):
                self._commit(meta)
            self._done = True
        finally:
            if self._done:
                self._release()
        return meta

    def _commit(self, meta: StoreMeta) -> None:
        # local: written to a temporary file and renamed; remote: one PUT (atomic on S3)
        self._writer.write_meta(meta)
        if not self.append:
            self._release()  # the temporary store's lock must not move into place
            self._move_into_place()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _move_into_place(self) -> None:
        old = None
        if not is_local(self.path):
            self.fs.invalidate_cache()  # listings cached since __init__ may be stale
        if self.fs.exists(self.root):
            if not self.overwrite:
                raise StoreError(
                    f"{self.path}: destination appeared while ingesting (another ingest won?); "
                    "nothing was changed"
                )
            old = temp_sibling(self.path, "old")
            local_dir = is_local(self.path) and os.path.isdir(local_path(self.path))
            lock: StoreLock | RemoteStoreLock | None = None
            if local_dir:
                lock = StoreLock(local_path(self.path), self.path)
            elif not is_local(self.path) and self.fs.isdir(self.root):
                lock = RemoteStoreLock(self.fs, self.root, self.path)
            if lock is not None:
                lock.acquire()  # not while an append is writing into the old store
            try:
                self._rename(self.root, old)
            except BaseException:
                if lock is not None:
                    lock.release()
                raise
        try:
            self._rename(self.target, self.root)
        except OSError as e:
            raise StoreError(
                f"{self.path}: could not move the new store into place ({e}); another process "
                "may have written the destination at the same time"
            ) from None
        if old is not None:
            self._remove(old)

    def _rename(self, src: str, dst: str) -> None:
        if is_local(self.path):
            src_l, dst_l = local_path(src), local_path(dst)
            # os.rename onto an existing non-empty directory fails: a racing ingest loses cleanly.
            if os.path.exists(dst_l):
                raise OSError(f"{dst_l} exists")
            os.rename(src_l, dst_l)
        else:
            self._remote_move(src, dst)

    def _remote_move(self, src: str, dst: str) -> None:
        """Object stores have no rename: copy every object (server side), the store's
        metadata object last, so ``dst`` looks like a store only once complete; then delete
        ``src``. A writer lock of ``src`` is neither copied nor kept."""
        src, dst = self.fs._strip_protocol(src), self.fs._strip_protocol(dst)
        if self.fs.exists(dst):
            raise OSError(f"{dst} exists")
        keys = [k for k in self.fs.find(src) if k.rsplit("/", 1)[-1] != ".lock"]
        meta_names = {f"{src}/zarr.json", f"{src}/_ooc_svm.json"}
        last = [k for k in keys if k in meta_names]
        first = [k for k in keys if k not in meta_names]
        for group in (first, last):
            if group:
                self.fs.copy(group, [dst + k[len(src) :] for k in group])
        self.fs.rm(src, recursive=True)

    def _remove(self, p: str) -> None:
        if is_local(self.path):
            lp = local_path(p)
            if os.path.isdir(lp) and not os.path.islink(lp):
                shutil.rmtree(lp, ignore_errors=True)
            else:
                try:
                    os.unlink(lp)  # a Parquet shard is a file (rmtree would leave it)
                except FileNotFoundError:
                    pass
        else:
            try:
                self.fs.rm(p, recursive=True)
            except FileNotFoundError:
                pass

    def abort(self) -> None:
        """Remove everything written so far (a new store vanishes; an append leaves the old one)."""
        if self._done:
            return
        self._done = True
        try:
            self._abort()
        finally:
            self._release()

    def _abort(self) -> None:
        if self.append:
            base_names = {s.name for s in (self._base.shards if self._base else [])}
            for s in self.shards:
                if s.name not in base_names:
                    p = f"{self.root}/{s.name}{self._format.shard_suffix}"
                    self._remove(p)
        else:
            self._remove(self.target)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._done:
            self.abort()


def write_store(path: str, shards: Iterable[Shard], **kwargs: Any) -> StoreMeta:
    """Write an iterable of :class:`Shard` as a new store (convenience for tests and synth)."""
    with StoreWriter(path, **kwargs) as w:
        for s in shards:
            w.add(s)
        return w.commit()


def csr_to_shards(
    X: Any, y: np.ndarray, qid: np.ndarray | None = None, shard_rows: int = 10_000
) -> Iterator[Shard]:
    """Split an in-memory scipy CSR matrix and labels into shards (for tests and the Python API)."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    X.sort_indices()
    y = np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    for start in range(0, max(n, 1), shard_rows):
        stop = min(n, start + shard_rows)
        sub = X[start:stop]
        yield Shard(
            np.asarray(sub.indptr, dtype=np.int64),
            np.asarray(sub.indices, dtype=np.int32),
            np.asarray(sub.data, dtype=np.float32),
            y[start:stop].copy(),
            None if qid is None else np.asarray(qid[start:stop], dtype=np.int64),
            row_start=start,
        )
        if n == 0:
            break
