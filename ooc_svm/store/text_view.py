"""A read-only store over a plain SVMlight / LIBSVM text file, for ``predict`` / ``evaluate``.

``svm-predict`` users score a text file directly; :func:`open_input` lets ooc-svm do the
same: a store path opens the store, anything else (a file: plain, .gz, .bz2, .xz, or ``-``
for stdin) a :class:`TextStore`, which the engine reads shard by shard like any store.

How it works (memory bounded by one text block per shard being read, never by the file):

1. A first pass streams the file in blocks of ``shard_mb`` MB cut at line ends (the
   decompression and block reader of :mod:`ooc_svm.store.ingest_input`), parses each block with
   the ingest parser (:mod:`ooc_svm.store.svmlight`) and keeps only the shard table: byte
   offsets, rows, non-zeros, first line — plus the label values (at most
   :data:`~ooc_svm.store.format.MAX_DISCRETE_LABELS` kept), the widest column and whether
   rows carry ``qid:``. Bad lines are reported as ingest reports them (file, line, fix).
2. ``read_shard(i)`` reads that byte range again (plain files: seek; compressed files: one
   decompression stream read forward, reopened only to go back) and parses it into a
   :class:`~ooc_svm.store.format.Shard`.

Shards are blocks of text, so their row counts vary. Standard input cannot be read twice: it
is first copied, as it arrives (compressed or not), to a temporary file that is removed when
the store is closed or garbage-collected — disk, not memory, holds it.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernels.hashing import hash_csr_inplace
from . import svmlight as sv
from .format import (
    MAX_DISCRETE_LABELS,
    MAX_FEATURES,
    Shard,
    ShardInfo,
    StoreError,
    StoreMeta,
    hashing_info,
    infer_label_kind,
)
from .ingest_input import (
    IngestError,
    _BufferPool,
    _check_input,
    _open_stream,
    _read_blocks,
    _read_into,
)
from .ingest_parse import _fallback_error, _status_error
from .paths import is_store_path

if TYPE_CHECKING:
    from .base import Store

log = logging.getLogger(__name__)

#: default text per shard (MB of decompressed text)
DEFAULT_SHARD_MB = 8.0


@dataclass
class _TextShard:
    offset: int  # byte offset of the shard's text in the decompressed input
    size: int  # bytes of complete lines
    line0: int  # lines before it


class TextStore:
    """Read-only store interface (``meta``, ``n_shards``, ``read_shard``) over a text file.

    Parameters
    ----------
    path : str
        SVMlight / LIBSVM file (plain, .gz, .bz2, .xz) or ``"-"`` for standard input.
    n_features : int, optional
        Width of the data (e.g. the model's); the store is at least as wide as its largest
        column.
    zero_based : bool
        Indices in the file start at 0.
    shard_mb : float
        Decompressed text per shard.
    hash_bits : int, optional
        Hash the features into 2^hash_bits columns as ``ingest --hash-bits`` does (the
        model's hashing, :mod:`ooc_svm.kernels.hashing`).
    """

    backend = "text"

    def __init__(
        self,
        path: str,
        n_features: int | None = None,
        zero_based: bool = False,
        shard_mb: float = DEFAULT_SHARD_MB,
        _scan: tuple | None = None,
        hash_bits: int | None = None,
    ) -> None:
        self.path = str(path)
        self.zero_based = bool(zero_based)
        self.hash_bits = None if hash_bits is None else int(hash_bits)
        self.shard_bytes = max(1 << 12, int(float(shard_mb) * (1 << 20)))
        self._lock = threading.Lock()
        self._stream = None
        self._spool: str | None = None
        self._finalizer = None
        if self.path != "-" and _scan is None:
            _check_text_path(self.path)
        if self.path == "-" or _is_pipe(self.path):
            # read once: standard input or a FIFO cannot be read a second time
            self._spool = _spool(self.path)
            self._finalizer = weakref.finalize(self, _remove, self._spool)
            self.file = self._spool
            self.name = "<stdin>" if self.path == "-" else self.path
        else:
            self.file = self.path
            self.name = self.path
        self._input = _check_input(self.file)
        self._input.name = self.name
        if _scan is None:
            _scan = self._scan(n_features)
        self._shards, self.meta, self.qid_state, self.kind = _scan
        if n_features is not None and n_features > self.meta.n_features:
            self.meta.n_features = int(n_features)

    # -- the store interface ---------------------------------------------------------------
    @property
    def n_shards(self) -> int:
        return len(self._shards)

    @property
    def cache_key(self) -> tuple:
        return ("text", os.path.abspath(self.file), self.shard_bytes)

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        """Parse shard ``i`` (its byte range of the text) into CSR arrays."""
        info = self.meta.shards[i]
        ts = self._shards[i]
        buf = np.empty(ts.size + sv.PAD + 8, np.uint8)
        with self._lock:
            self._read_range(ts.offset, buf, ts.size)
        shard = self._parse(buf, ts, i)
        shard.row_start = info.row_start
        if shard.n_rows != info.n_rows:
            raise StoreError(
                f"{self.name}: the file changed while it was read (shard {i} has "
                f"{shard.n_rows} rows, {info.n_rows} in the first pass)"
            )
        return shard

    def close(self) -> None:
        with self._lock:
            self._close_stream()
        if self._finalizer is not None:
            self._finalizer()

    def __reduce__(self):
        return (
            _reopen_text,
            (
                self.file,
                self.zero_based,
                self.shard_bytes / (1 << 20),
                self._scan_state(),
                self.hash_bits,
            ),
        )

    # -- internals --------------------------------------------------------------------------
    def _scan_state(self) -> tuple:
        return (self._shards, self.meta, self.qid_state, self.kind)

    def _scan(self, n_features: int | None) -> tuple:
        """First pass: the shard table, labels, width, qid state (see the module docstring)."""
        stop = threading.Event()
        pool = _BufferPool()
        col_limit = MAX_FEATURES
        qid_state = -1
        labels: set[float] | None = set()
        shards: list[_TextShard] = []
        infos: list[ShardInfo] = []
        rows = nnz = 0
        max_col = -1
        line0 = 0
        kind = "plain"
        stream, _raw, kind, close = _open_stream(self._input, self.file)
        close()
        for blk in _read_blocks(0, self._input, self.file, self.shard_bytes, stop, pool):
            ts = _TextShard(blk.offset, blk.n, line0)
            shard, info = self._parse_block(blk.buf, blk.n, ts, qid_state, col_limit)
            qid_state = int(info[sv.I_QID_STATE]) if qid_state == -1 else qid_state
            line0 += int(info[sv.I_LINES])
            pool.put(blk.buf)
            if shard.n_rows == 0:
                continue
            shards.append(ts)
            infos.append(
                ShardInfo(f"t{len(infos):07d}", rows, shard.n_rows, shard.nnz, f"{blk.offset:x}")
            )
            rows += shard.n_rows
            nnz += shard.nnz
            max_col = max(max_col, int(info[sv.I_MAX_COL]))
            if self.hash_bits is not None:
                max_col = (1 << self.hash_bits) - 1
            if labels is not None:
                labels.update(np.unique(shard.y).tolist())
                if len(labels) > MAX_DISCRETE_LABELS:
                    labels = None
        if rows == 0:
            raise IngestError(
                f"{self.name}: no data rows (the input is empty or holds only comments and "
                "blank lines)"
            )
        label_kind, values = (
            infer_label_kind(np.array(sorted(labels))) if labels is not None else ("real", None)
        )
        meta = StoreMeta(
            backend="text",
            n_rows=rows,
            n_features=max(max_col + 1, int(n_features or 0)),
            nnz=nnz,
            label_kind=label_kind,
            labels=values,
            has_qid=qid_state == 1,
            shards=infos,
            compression=kind,
            sources=[self.name],
        )
        if self.hash_bits is not None:
            meta.hashing = hashing_info(self.hash_bits)
        return shards, meta, qid_state, kind

    def _parse_block(self, buf, n, ts: _TextShard, qid_state: int, col_limit: int):
        res = sv.parse_block(
            buf, n, zero_based=self.zero_based, col_limit=col_limit, qid_state=qid_state,
            padded=True,
        )  # fmt: skip
        indptr, indices, data, labels, qids, fb, _skips, info = res
        if int(info[sv.I_STATUS]):
            where = _status_error(
                info, buf, ts.offset, self.name, ts.line0 + 1, self.zero_based, None
            )
            raise IngestError(
                f"{where}; fix the line (or ingest the file with --skip-invalid and score the "
                "store)"
            )
        r, z = int(info[sv.I_ROWS]), int(info[sv.I_NNZ])
        if info[sv.I_FALLBACK]:
            bad = sv.resolve_fallbacks(buf, fb, info[sv.I_FALLBACK], data, labels)
            if bad:
                what = _fallback_error(buf, bad[0], self.zero_based, None)
                raise IngestError(f"{self.name}: line {ts.line0 + 1 + bad[0][1]:,}: {what}")
        has_qid = int(info[sv.I_QID_STATE]) == 1
        indptr, indices, data = indptr[: r + 1].copy(), indices[:z].copy(), data[:z].copy()
        if self.hash_bits is not None:
            z, _merged, _max = hash_csr_inplace(indptr, indices, data, r, self.hash_bits)
            indices, data = indices[:z].copy(), data[:z].copy()
        shard = Shard(
            indptr, indices, data, labels[:r].copy(), qids[:r].copy() if has_qid else None
        )
        return shard, info

    def _parse(self, buf, ts: _TextShard, i: int) -> Shard:
        shard, _ = self._parse_block(buf, ts.size, ts, self.qid_state, MAX_FEATURES)
        return shard

    def _read_range(self, offset: int, buf: np.ndarray, size: int) -> None:
        """Fill buf[:size] with the decompressed bytes at ``offset`` (caller holds the lock)."""
        if self.kind == "plain":
            with open(self.file, "rb") as f:
                f.seek(offset)
                got = f.readinto(buf.data[:size])
            if got != size:
                raise StoreError(f"{self.name}: the file is shorter than when it was first read")
            return
        if self._stream is None or self._pos > offset:
            self._close_stream()
            stream, _raw, _kind, close = _open_stream(self._input, self.file)
            self._stream, self._close, self._pos = stream, close, 0
        stream = self._stream
        assert stream is not None  # opened above
        skip = offset - self._pos
        scratch = np.empty(min(max(skip, 1), 1 << 20), np.uint8)
        while skip > 0:  # read forward to offset
            n = min(skip, scratch.shape[0])
            self._read_exactly(stream, scratch, n)
            skip -= n
        self._read_exactly(stream, buf, size)
        self._pos = offset + size

    def _read_exactly(self, stream, buf: np.ndarray, size: int) -> None:
        """Fill buf[:size] from the stream; the stream ending first means the file changed."""
        if max(_read_into(stream, buf.data, 0, size), default=0) < size:
            raise StoreError(f"{self.name}: the file is shorter than when it was first read")

    def _close_stream(self) -> None:
        if self._stream is not None:
            try:
                self._close()
            finally:
                self._stream = None


def _reopen_text(
    file: str, zero_based: bool, shard_mb: float, scan: tuple, hash_bits: int | None = None
) -> TextStore:
    return TextStore(file, None, zero_based, shard_mb, _scan=scan, hash_bits=hash_bits)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _spool(path: str) -> str:
    """Copy standard input (``"-"``) or a FIFO, as it comes (compressed or not), to a
    temporary file."""
    fd, tmp = tempfile.mkstemp(prefix="ooc-svm-stdin-")
    try:
        with os.fdopen(fd, "wb") as f:
            if path == "-":
                shutil.copyfileobj(sys.stdin.buffer, f, 1 << 20)
            else:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _is_pipe(path: str) -> bool:
    """Whether ``path`` (symlinks followed) is a FIFO or a socket: readable once only."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _check_text_path(path: str) -> None:
    """Refuse what is neither a regular file nor a FIFO (``/dev/zero``, a terminal, a disk):
    reading it would never end, or not be SVMlight text."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # reported by the reader, with its own message
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISDIR(mode):
        return
    what = "a character device" if stat.S_ISCHR(mode) else (
        "a block device" if stat.S_ISBLK(mode) else "not a regular file"
    )  # fmt: skip
    raise StoreError(
        f"{path}: is {what}, not an SVMlight/LIBSVM text file; give a regular file or a "
        "store (or '-' to read standard input)"
    )


def open_input(path: str, n_features: int | None = None, **options: Any) -> Store | TextStore:
    """A store for a store path, a :class:`TextStore` for a text file (or ``"-"``).

    Parameters
    ----------
    path : str
        Store directory / URL, or SVMlight / LIBSVM text (plain, .gz, .bz2, .xz, ``-``).
    n_features : int, optional
        Width of the data for text input (e.g. the model's ``n_features``).
    **options
        ``zero_based``, ``shard_mb``, ``hash_bits`` for text input (``hash_bits`` is
        ignored for a store, whose own hashing is in its metadata).
    """
    if is_store_path(path):
        from .writer import open_store

        return open_store(path)
    if options.get("hash_bits") is None:
        options.pop("hash_bits", None)
    if not os.path.exists(str(path)) and str(path) != "-":
        raise StoreError(
            f"{path}: no such store or file (give a store directory or an SVMlight/LIBSVM "
            "text file, or '-' for stdin)"
        )
    return TextStore(str(path), n_features=n_features, **options)
