"""Streaming ingest: SVMlight / LIBSVM text (plain, .gz, .bz2, .xz or stdin) into a store.

Pipeline (memory is bounded by the block and shard sizes, never by the input size)::

    reader thread        read + decompress blocks of ``block_mb`` MB, cut at the last newline
        -> parse pool    one numba call per block (no GIL): CSR arrays + labels (+ qids)
        -> main thread   checks results in input order, cuts rows into shards
        -> writer thread compresses and writes each shard (StoreWriter.add)

Everything is written through :class:`~ooc_svm.store.writer.StoreWriter` under a temporary
name and renamed into place at the end; any error (bad line, truncated file, interrupt)
removes what was written, so nothing is left at the destination (``--append`` leaves the
existing store unchanged). See ``docs/FORMAT.md`` for the rules.
"""

from __future__ import annotations

import bz2
import gzip
import io
import logging
import lzma
import os
import queue
import stat
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._util import cpu_count
from ..kernels.hashing import hash_csr_inplace
from . import svmlight as sv
from .format import MAX_FEATURES, MAX_HASH_BITS, Shard, StoreError, StoreMeta
from .writer import StoreWriter, backend_from_path

log = logging.getLogger(__name__)

#: Default size of a text block handed to the parser (bytes).
DEFAULT_BLOCK_MB = 8.0
#: Default shard size in MB of decoded CSR (indices + data + indptr + labels + qids).
DEFAULT_SHARD_MB = 64.0
#: Lines listed in the report of ``skip_invalid``.
MAX_SKIP_EXAMPLES = 5

LABEL_KIND_CHOICES = ("auto", "binary", "ordinal", "multiclass", "real")


class IngestError(Exception):
    """The input cannot be ingested; the message names the file, the line and the fix."""


@dataclass
class IngestStats:
    """What an ingest did (returned by :func:`ingest_with_stats`)."""

    rows: int = 0
    nnz: int = 0
    shards: int = 0
    seconds: float = 0.0
    text_bytes: int = 0
    input_bytes: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    #: ``hash_bits``: entries of a row summed because they hashed to one column
    collisions: int = 0
    hash_bits: int | None = None

    def skip_report(self) -> str:
        """``skipped N invalid lines (first: FILE line L: what; ...)``, or "" when none."""
        if not self.skipped:
            return ""
        s = "s" if self.skipped != 1 else ""
        first = "; ".join(self.skipped_examples)
        return f"skipped {self.skipped:,} invalid line{s} (first: {first})"

    def summary(self, store: str) -> str:
        """One line: rows, non-zeros, shards, seconds, throughput."""
        mb = self.text_bytes / 1e6
        rate = mb / self.seconds if self.seconds > 0 else float("inf")
        rows_s = self.rows / self.seconds if self.seconds > 0 else float("inf")
        shards = f"{self.shards} shard{'s' if self.shards != 1 else ''}"
        s = (
            f"ingested {self.rows:,} rows, {self.nnz:,} non-zeros into {shards} "
            f"from {len(self.inputs)} input{'s' if len(self.inputs) != 1 else ''} "
            f"({mb:,.1f} MB of text) in {self.seconds:.2f} s ({rate:,.1f} MB/s, "
            f"{rows_s:,.0f} rows/s) -> {store}"
        )
        if self.hash_bits is not None:
            s += (
                f"; features hashed into 2^{self.hash_bits} columns "
                f"({self.collisions:,} in-row collisions)"
            )
        if self.skipped:
            s += f"; skipped {self.skipped:,} invalid lines"
        return s


# ------------------------------------------------------------------------------------------
# Opening inputs
# ------------------------------------------------------------------------------------------
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_UNSUPPORTED_MAGIC = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
    (b"\x04\x22\x4d\x18", "lz4"),
)


class _CountingReader(io.RawIOBase):
    """Raw stream over a binary file that first replays ``prefix`` and counts bytes read."""

    def __init__(self, f, prefix: bytes):
        super().__init__()
        self._f = f
        self._prefix = prefix
        self.count = len(prefix)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        n = self._f.readinto(b)
        if n:
            self.count += n
        return n or 0


def _read_prefix(f, n: int) -> bytes:
    parts = []
    got = 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


@dataclass
class _Input:
    name: str  # as shown in messages
    source: str  # as recorded in the store metadata
    size: int | None  # bytes on disk (None for pipes / stdin)


def _check_input(path: str) -> _Input:
    if path == "-":
        return _Input("<stdin>", "<stdin>", None)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise IngestError(f"{path}: no such file (check the path; use '-' for stdin)") from None
    except OSError as e:
        raise IngestError(f"{path}: cannot open input ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise IngestError(f"{path}: is a directory, not an SVMlight file")
    size = st.st_size if stat.S_ISREG(st.st_mode) else None
    return _Input(path, os.path.abspath(path), size)


def _open_stream(inp: _Input, path: str):
    """Open one input; returns (stream with readinto, counting raw reader, kind, closer)."""
    if path == "-":
        f = sys.stdin.buffer
        own = False
    else:
        try:
            f = open(path, "rb", buffering=0)
        except FileNotFoundError:
            raise IngestError(f"{path}: no such file") from None
        except OSError as e:
            raise IngestError(f"{path}: cannot open input ({e.strerror or e})") from None
        own = True
        try:  # ask for a larger read-ahead: the file is read once, front to back
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (AttributeError, OSError):
            pass
    try:
        prefix = _read_prefix(f, 6)
    except OSError as e:
        if own:
            f.close()
        raise IngestError(f"{inp.name}: cannot read input ({e.strerror or e})") from None
    for magic, kind in _UNSUPPORTED_MAGIC:
        if prefix.startswith(magic):
            if own:
                f.close()
            raise IngestError(
                f"{inp.name}: looks like a {kind} file; ingest reads plain text, .gz, .bz2 and "
                f".xz; decompress it first (or pipe it in with '-')"
            )
    kind = "plain"
    for magic, k in _MAGIC:
        if prefix.startswith(magic):
            kind = k
            break
    raw = _CountingReader(f, prefix)
    stream: _CountingReader | gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile
    if kind == "plain":
        stream = raw
    else:
        buffered = io.BufferedReader(raw, 1 << 20)
        if kind == "gzip":
            stream = gzip.GzipFile(fileobj=buffered, mode="rb")
        elif kind == "bzip2":
            stream = bz2.BZ2File(buffered, "rb")
        else:
            stream = lzma.LZMAFile(buffered, "rb")

    def close() -> None:
        try:
            stream.close()
        finally:
            if own:
                f.close()

    return stream, raw, kind, close


# ------------------------------------------------------------------------------------------
# Blocks
# ------------------------------------------------------------------------------------------
@dataclass
class _Block:
    input_index: int
    buf: np.ndarray  # uint8, with sv.PAD spare bytes after n
    n: int  # bytes of complete lines in buf
    offset: int  # byte offset of buf[0] in the (decompressed) input
    raw_count: int  # input bytes consumed so far (for progress)
    last: bool  # last block of this input


class _BufferPool:
    """Recycles text buffers (8-byte aligned numpy arrays with parser padding), so steady
    state reading neither zero-fills nor page-faults fresh memory."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue = queue.SimpleQueue()

    def get(self, size: int) -> np.ndarray:
        need = size + sv.PAD + 8
        while True:
            try:
                buf = self._free.get_nowait()
            except queue.Empty:
                return np.empty(need, np.uint8)
            if buf.shape[0] >= need:
                return buf
            # too small (after a very long line): drop it

    def put(self, buf: np.ndarray) -> None:
        self._free.put(buf)


def _read_blocks(
    idx: int, inp: _Input, path: str, block_bytes: int, stop: threading.Event, pool: _BufferPool
):
    """Blocks of complete lines from one input (runs in the reader thread)."""
    stream, raw, kind, close = _open_stream(inp, path)
    carry = b""
    offset = 0
    try:
        while not stop.is_set():
            size = len(carry) + block_bytes
            buf = pool.get(size)
            buf[: len(carry)] = np.frombuffer(carry, np.uint8)
            filled = len(carry)
            mv = buf.data
            try:
                for got_to in _read_into(stream, mv, filled, size):
                    filled = got_to  # kept up to date for the messages below
                eof = filled < size
            except EOFError:
                raise IngestError(
                    f"{inp.name}: the {kind} stream ends early: the compressed file is truncated "
                    f"(after {offset + filled:,} bytes of text); nothing was written; copy or "
                    "download the file again"
                ) from None
            except (OSError, zlib.error, lzma.LZMAError, ValueError) as e:
                if kind == "plain":
                    raise IngestError(f"{inp.name}: read error ({e})") from None
                raise IngestError(
                    f"{inp.name}: corrupt {kind} data after {offset + filled:,} bytes of text "
                    f"({e}); nothing was written; check the file (e.g. with `{_tool(kind)} -t`)"
                ) from None
            finally:
                mv.release()
            if eof:
                cut = filled
            else:
                cut = sv.rfind_newline(buf, filled) + 1
                if cut == 0:  # a line longer than the block: read on
                    carry = buf[:filled].tobytes()
                    continue
            carry = buf[cut:filled].tobytes()
            yield _Block(idx, buf, cut, offset, raw.count, eof)
            offset += cut
            if eof:
                return
    finally:
        close()


def _read_into(stream, mv: memoryview, start: int, end: int) -> Generator[int, None, None]:
    """Fill ``mv[start:end]`` from ``stream``; yields how far it is filled after each read.

    Stops early at the end of the stream: the caller compares the last value with ``end``
    (and, when a read fails, still knows how far it got).
    """
    while start < end:
        got = stream.readinto(mv[start:end])
        if not got:
            return
        start += got
        yield start


def _tool(kind: str) -> str:
    return {"gzip": "gzip", "bzip2": "bzip2", "xz": "xz"}.get(kind, "cat")


def _background(
    gen: Generator[Any, None, None], maxsize: int, stop: threading.Event
) -> Generator[Any, None, None]:
    """Run a generator in a daemon thread, yield its items here; errors are re-raised here."""
    q: queue.Queue = queue.Queue(maxsize)
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in gen:
                if not put(("item", item)):
                    return
            put(("end", done))
        except BaseException as e:  # handed to the consumer
            put(("error", e))
        finally:
            gen.close()

    t = threading.Thread(target=run, name="ooc-svm-ingest-reader", daemon=True)
    t.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "item":
                yield item
            elif kind == "end":
                return
            else:
                raise item
    finally:
        stop.set()
        while True:
            try:
                q.get_nowait()
            except queue.Empty:
                break
        t.join(timeout=5)  # a reader blocked on a pipe is a daemon thread: do not wait long


# ------------------------------------------------------------------------------------------
# Parsing results
# ------------------------------------------------------------------------------------------
@dataclass
class _Parsed:
    block: _Block
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    fallback: np.ndarray
    skips: np.ndarray
    info: np.ndarray
    qid_state_in: int
    out: tuple  # the output arrays, returned to the pool once copied into a shard


class _OutputPool:
    """Recycles the parser's output arrays (one set per block in flight)."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue = queue.SimpleQueue()

    def get(self, rows: int, nnz: int) -> tuple:
        while True:
            try:
                out = self._free.get_nowait()
            except queue.Empty:
                # a little slack so blocks of about the same size reuse each other's arrays
                return sv.alloc_outputs(rows + rows // 8 + 16, nnz + nnz // 8 + 16)
            if out[3].shape[0] >= rows and out[1].shape[0] >= nnz:
                return out

    def put(self, out: tuple) -> None:
        self._free.put(out)


def _parse(
    block: _Block,
    zero_based: bool,
    col_limit: int,
    qid_state: int,
    skip: bool,
    outputs: _OutputPool,
):
    n_nl, n_colon = sv.count_block(block.buf, block.n)
    out = outputs.get(n_nl + 1, n_colon)
    res = sv.parse_block(
        block.buf,
        block.n,
        zero_based=zero_based,
        col_limit=col_limit,
        qid_state=qid_state,
        skip_invalid=skip,
        max_skip_records=MAX_SKIP_EXAMPLES,
        padded=True,
        out=out,
    )
    indptr, indices, data, labels, qids, fallback, skips, info = res
    return _Parsed(
        block,
        indptr,
        indices,
        data,
        labels,
        qids,
        fallback,
        skips,
        info,
        qid_state_in=qid_state,
        out=out,
    )


def _token(buf, s: int, e: int) -> str:
    raw = bytes(buf[s : min(e, s + 60)])
    text = raw.decode("utf-8", errors="replace")
    return text + ("…" if e - s > 60 else "")


#: Messages of the parser's error codes that need no more than the token ``tok``.
_MESSAGES = {
    sv.E_VALUE: (
        "feature value in {tok!r} is not a number; write INDEX:VALUE with a decimal "
        "VALUE such as 0.25, -3 or 1e-4"
    ),
    sv.E_INDEX: (
        "feature index in {tok!r} is not an integer; write INDEX:VALUE with an integer INDEX"
    ),
    sv.E_INDEX_ZERO: (
        "feature index 0 in {tok!r}, but SVMlight/LIBSVM indices start at 1; if this "
        "file is 0-based, pass --zero-based"
    ),
    sv.E_VALUE_NAN: "feature value in {tok!r} is NaN; replace it by a number or drop the line",
    sv.E_VALUE_INF: (
        "feature value in {tok!r} is infinite or beyond the float32 range (±3.4e38); "
        "rescale the feature or drop the line"
    ),
    sv.E_LABEL_MISSING: (
        "missing label: the line starts with {tok!r}; every line must be "
        "'LABEL [qid:N] INDEX:VALUE ...'"
    ),
    sv.E_LABEL: (
        "label {tok!r} is not a number; the first item of a line must be a numeric "
        "label such as +1, -1, 0, 2 or 0.5"
    ),
    sv.E_LABEL_NAN: "label {tok!r} is NaN; give the line a numeric label or drop it",
    sv.E_LABEL_INF: "label {tok!r} is infinite; give the line a finite label or drop it",
    sv.E_QID: "bad qid {tok!r}; write qid:N with an integer N right after the label",
    sv.E_QID_POS: "{tok!r} must come right after the label, before the features",
    sv.E_NO_COLON: "feature {tok!r} is not INDEX:VALUE",
}


def _describe(code: int, tok: str, extra: int, zero_based: bool, n_features: int | None) -> str:
    """What is wrong and what to do, for an error code of the parser."""
    base = 0 if zero_based else 1
    if code in _MESSAGES:
        return _MESSAGES[code].format(tok=tok)
    if code == sv.E_INDEX_NEG:
        return f"negative feature index in {tok!r}; indices must be >= {base}" + (
            "" if zero_based else " (>= 0 with --zero-based)"
        )
    if code == sv.E_NOT_INCREASING:
        return (
            f"feature indices are not strictly increasing ({extra + base} then {tok!r}); "
            "sort each line's features by index and remove duplicates"
        )
    if code == sv.E_QID_MIXED:
        if extra == 1:
            return (
                "this line has no qid: but earlier lines (or the store appended to) have "
                "one; give every line a qid: or none"
            )
        return (
            "this line has a qid: but earlier lines (or the store appended to) have none; "
            "give every line a qid: or none"
        )
    if code == sv.E_INDEX_LIMIT:
        if n_features is not None and extra < MAX_FEATURES - 1:
            return (
                f"feature index in {tok!r} is beyond --n-features {n_features}; raise "
                "--n-features or drop it"
            )
        return (
            f"feature index in {tok!r} is too large (the largest supported index is "
            f"{MAX_FEATURES - 1 + base})"
        )
    return f"invalid line (parser code {code}) near {tok!r}"


_HINT = "; fix the line or pass --skip-invalid to skip invalid lines"


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


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------
def ingest(inputs: str | Sequence[str], store: str, **options) -> StoreMeta:
    """Ingest SVMlight / LIBSVM text files into a store; returns the store's metadata.

    Parameters
    ----------
    inputs : str or sequence of str
        Input paths (plain, .gz, .bz2 or .xz, detected from the content), ``"-"`` for stdin.
        Rows of several inputs are stored in input order.
    store : str
        Destination store (``*.parquet`` / ``*.pq`` → Parquet, else Zarr, unless ``format``).
    **options
        See :func:`ingest_with_stats`.

    Raises
    ------
    IngestError
        Bad input (file, line and fix in the message), empty input, truncated compressed
        file, missing input. Nothing is left at the destination.
    StoreError
        Destination exists (without ``overwrite``) or cannot be written.
    """
    meta, stats = ingest_with_stats(inputs, store, **options)
    if stats.skipped:
        log.warning("%s", stats.skip_report())
    return meta


def ingest_with_stats(
    inputs: str | Sequence[str],
    store: str,
    *,
    format: str | None = None,
    zero_based: bool = False,
    shard_rows: int | None = None,
    shard_mb: float | None = None,
    append: bool = False,
    overwrite: bool = False,
    compression: str | None = None,
    label_kind: str = "auto",
    n_features: int | None = None,
    hash_bits: int | None = None,
    skip_invalid: bool = False,
    block_mb: float = DEFAULT_BLOCK_MB,
    threads: int | None = None,
    writer_threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[StoreMeta, IngestStats]:
    """Ingest text into a store; returns ``(metadata, statistics)``.

    Parameters
    ----------
    inputs, store
        As in :func:`ingest`.
    format : {"zarr", "parquet"}, optional
        Store backend (default from the suffix of ``store``; with ``append`` the existing
        store's).
    zero_based : bool
        Indices in the text start at 0 (default: at 1; column j = feature j + 1).
    shard_rows : int, optional
        At most this many rows per shard.
    shard_mb : float, optional
        At most this many MB of decoded CSR per shard (8 bytes per non-zero, 16 or 24 per
        row). Default 64 when ``shard_rows`` is not given; both limits apply when both are.
    append, overwrite : bool
        Add rows to an existing store / replace an existing store.
    compression : {"zstd", "lz4", "none"}, optional
        Shard compression (default zstd; with ``append`` the store's).
    label_kind : {"auto", "binary", "ordinal", "multiclass", "real"}
        ``auto`` infers it from the distinct labels (two → binary, integers → ordinal, else
        real); integer class ids that are not ranks need ``multiclass``.
    n_features : int, optional
        Declared width; an index beyond it is an error.
    hash_bits : int, optional
        Hash the features into 2^hash_bits columns (signed MurmurHash3 of the feature
        number, as scikit-learn's ``FeatureHasher``; :mod:`ooc_svm.kernels.hashing`); entries
        of a row that meet on one column are summed and counted as collisions in the
        metadata (``meta.hashing``). Not with ``n_features``.
    skip_invalid : bool
        Skip invalid lines instead of failing; ``stats.skipped`` counts them and
        ``stats.skip_report()`` names the first few (:func:`ingest` logs it as a warning).
    block_mb : float
        Text block size handed to the parser.
    threads : int, optional
        Parser threads (default: usable CPUs, at most 4).
    writer_threads : int, optional
        Threads compressing and writing shards (default: 2, or 1 with one parser thread).
    progress : callable, optional
        Called with the number of input bytes consumed since the last call.
    """
    t0 = time.perf_counter()
    paths = _input_paths(inputs)
    job = _make_job(
        label_kind, shard_rows, shard_mb, n_features, block_mb, threads, zero_based, skip_invalid
    )
    job.progress = progress
    job.hash_bits = _check_hash_bits(hash_bits, n_features)
    store = os.fspath(store)
    infos = [_check_input(p) for p in paths]  # a missing input fails before anything is written
    if append and (format is not None or compression is not None):
        _check_append_options(store, format, compression)
    stats = IngestStats(inputs=[i.source for i in infos], hash_bits=job.hash_bits)
    with StoreWriter(
        store,
        backend=format or backend_from_path(store),
        compression=compression,
        overwrite=overwrite,
        append=append,
        label_kind=None if label_kind == "auto" else label_kind,
        n_features=n_features,
        hash_bits=job.hash_bits,
    ) as writer:
        _write_shards(writer, paths, infos, job, stats, writer_threads)
        writer.collisions = stats.collisions
        meta = writer.commit(sources=stats.inputs)
    stats.seconds = time.perf_counter() - t0
    return meta, stats


@dataclass
class _Job:
    """The settings of one ingest, checked (see :func:`ingest_with_stats`)."""

    zero_based: bool
    skip_invalid: bool
    n_features: int | None
    col_limit: int
    shard_rows: int | None
    shard_bytes: int | None
    block_bytes: int
    n_threads: int
    progress: Callable[[int], None] | None = None
    hash_bits: int | None = None


def _check_hash_bits(hash_bits: int | None, n_features: int | None) -> int | None:
    """``--hash-bits``: an integer in 1..MAX_HASH_BITS, not with ``--n-features``."""
    if hash_bits is None:
        return None
    if isinstance(hash_bits, bool) or not isinstance(hash_bits, int):
        raise IngestError(f"--hash-bits must be an integer, got {hash_bits!r}")
    if not 1 <= hash_bits <= MAX_HASH_BITS:
        raise IngestError(
            f"--hash-bits must be between 1 and {MAX_HASH_BITS} (2^B columns), got {hash_bits}"
        )
    if n_features is not None:
        raise IngestError(
            "--hash-bits sets the width (2^B columns); drop --n-features (or --hash-bits)"
        )
    return hash_bits


def _input_paths(inputs: str | Sequence[str]) -> list[str]:
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise IngestError("no input given")
    if paths.count("-") > 1:
        raise IngestError("'-' (stdin) can be given only once")
    return paths


def _make_job(
    label_kind: str,
    shard_rows: int | None,
    shard_mb: float | None,
    n_features: int | None,
    block_mb: float,
    threads: int | None,
    zero_based: bool,
    skip_invalid: bool,
) -> _Job:
    """Check the options (one-line errors naming the flag) and derive the sizes."""
    if label_kind not in LABEL_KIND_CHOICES:
        raise IngestError(f"unknown label kind {label_kind!r}; use one of {LABEL_KIND_CHOICES}")
    if shard_rows is not None and shard_rows < 1:
        raise IngestError("--shard-rows must be at least 1")
    if shard_mb is not None and not shard_mb > 0:
        raise IngestError("--shard-mb must be positive")
    if n_features is not None and not (1 <= n_features <= MAX_FEATURES):
        raise IngestError(f"--n-features must be between 1 and {MAX_FEATURES}")
    if block_mb <= 0:
        raise IngestError("block size must be positive")
    if shard_rows is None and shard_mb is None:
        shard_mb = DEFAULT_SHARD_MB
    return _Job(
        zero_based=zero_based,
        skip_invalid=skip_invalid,
        n_features=n_features,
        col_limit=min(n_features, MAX_FEATURES) if n_features is not None else MAX_FEATURES,
        shard_rows=shard_rows,
        shard_bytes=None if shard_mb is None else max(1, int(shard_mb * 1e6)),
        block_bytes=max(1 << 12, int(block_mb * (1 << 20))),
        n_threads=max(1, int(threads)) if threads else min(4, cpu_count()),
    )


def _check_append_options(store: str, format: str | None, compression: str | None) -> None:
    """``--format`` / ``--compression`` with ``--append`` must match the existing store."""
    from .writer import open_store

    base = open_store(store).meta if _exists(store) else None
    if base is not None and format is not None and format != base.backend:
        raise IngestError(
            f"{store}: is a {base.backend} store; --format {format} does not apply to "
            "--append (drop --format)"
        )
    if base is not None and compression is not None and compression != base.compression:
        raise IngestError(
            f"{store}: uses {base.compression} compression; --compression "
            f"{compression} does not apply to --append"
        )


def _write_shards(
    writer: StoreWriter,
    paths: list[str],
    infos: list[_Input],
    job: _Job,
    stats: IngestStats,
    writer_threads: int | None,
) -> None:
    """Run the pipeline into ``writer`` (reader, parse pool, writer threads) and count the
    shards in ``stats``. On any error the writer threads are abandoned; no rows at all is
    an error."""
    rows_before = writer.n_rows
    qid_state = -1 if writer.has_qid is None else int(bool(writer.has_qid))
    wt = _ShardWriters(writer, writer_threads or min(2, job.n_threads))
    stop = threading.Event()
    pool = ThreadPoolExecutor(job.n_threads, thread_name_prefix="ooc-svm-ingest-parse")
    ok = False
    try:
        _Pipeline(job, paths, infos, stop, pool, wt, stats, qid_state).run()
        wt.close()
        ok = True
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        if not ok:
            wt.abandon()
    if writer.n_rows == rows_before:
        raise _no_rows_error(infos, stats)
    stats.shards = wt.shards


def _no_rows_error(infos: list[_Input], stats: IngestStats) -> IngestError:
    names = ", ".join(i.name for i in infos)
    if stats.skipped:
        return IngestError(
            f"{names}: no valid rows: all {stats.skipped:,} data lines were invalid "
            f"(first: {'; '.join(stats.skipped_examples[:3])}); nothing was written"
        )
    return IngestError(
        f"{names}: no data rows (the input is empty or holds only comments and blank "
        "lines); nothing was written"
    )


def _exists(path: str) -> bool:
    from .paths import get_fs

    fs, root = get_fs(path)
    return fs.exists(root)


class _Pipeline:
    """The main loop: blocks in, checked rows to the shard builder, shards to the writer.

    Blocks are parsed in the pool (up to ``n_threads + 1`` in flight once the qid state is
    known, one before) and taken back in input order.
    """

    def __init__(self, job: _Job, paths, infos, stop, pool, wt: _ShardWriters, stats, qid_state):
        self.job = job
        self.paths = paths
        self.infos = infos
        self.stop = stop
        self.pool = pool
        self.wt = wt
        self.stats = stats
        self.qid_state = qid_state
        self.buffers = _BufferPool()
        self.outputs = _OutputPool()
        self.builder: _ShardBuilder | None = None
        self.pending: deque = deque()
        self.line0 = [0] * len(paths)  # lines of each input before its current block
        self.rows_in = [0] * len(paths)
        self.last_raw = 0
        self.last_input = -1

    def _blocks(self):
        for i, (inp, path) in enumerate(zip(self.infos, self.paths, strict=True)):
            yield from _read_blocks(i, inp, path, self.job.block_bytes, self.stop, self.buffers)

    def _submit(self, block: _Block) -> None:
        j = self.job
        self.pending.append(
            self.pool.submit(
                _parse, block, j.zero_based, j.col_limit, self.qid_state, j.skip_invalid,
                self.outputs,
            )
        )  # fmt: skip

    def run(self) -> None:
        src = _background(self._blocks(), maxsize=2, stop=self.stop)
        try:
            src_done = False
            while True:
                # keep up to n_threads + 1 blocks in flight once the qid state is known
                limit = self.job.n_threads + 1 if self.qid_state != -1 else 1
                while not src_done and len(self.pending) < limit:
                    try:
                        self._submit(next(src))
                    except StopIteration:
                        src_done = True
                if not self.pending:
                    break
                res: _Parsed = self.pending.popleft().result()
                self._take(res)
                self.buffers.put(res.block.buf)
                self.outputs.put(res.out)
                del res
            if self.builder is not None:
                item = self.builder.flush()
                if item is not None:
                    self.wt.put(item)
        finally:
            src.close()

    def _count_input(self, blk: _Block) -> None:
        """Progress and ``input_bytes`` from the block's count of raw input bytes."""
        if blk.input_index != self.last_input:
            self.last_input = blk.input_index
            self.last_raw = 0
        if self.job.progress is not None:
            self.job.progress(blk.raw_count - self.last_raw)
        self.stats.input_bytes += blk.raw_count - self.last_raw
        self.last_raw = blk.raw_count

    def _take(self, res: _Parsed) -> None:
        """Check one parsed block (in input order) and hand its rows to the shard builder."""
        blk, info, stats = res.block, res.info, self.stats
        inp = self.infos[blk.input_index]
        self._count_input(blk)
        first_line = self.line0[blk.input_index] + 1
        if int(info[sv.I_STATUS]):
            where = _status_error(info, blk.buf, blk.offset, inp.name, first_line,
                                  self.job.zero_based, self.job.n_features)  # fmt: skip
            raise IngestError(f"{where}{_HINT}; nothing was written")
        rows = (res.indptr, res.indices, res.data, res.labels, res.qids,
                int(info[sv.I_ROWS]), int(info[sv.I_NNZ]))  # fmt: skip
        if info[sv.I_FALLBACK]:
            rows = self._resolve_fallbacks(res, inp.name, first_line, rows)
        if info[sv.I_SKIPPED]:
            stats.skipped += int(info[sv.I_SKIPPED])
            for j in range(int(info[sv.I_SKIP_RECORDED])):
                line, scode, _off = (int(x) for x in res.skips[j])
                _note_skip(stats, inp.name, first_line + line, scode, "", count=False)
        if self.qid_state == -1:
            self.qid_state = int(info[sv.I_QID_STATE])
        n_rows = rows[5]
        self.line0[blk.input_index] += int(info[sv.I_LINES])
        self.rows_in[blk.input_index] += n_rows
        stats.text_bytes += blk.n
        if n_rows:
            self._add_rows(rows, int(info[sv.I_MAX_COL]))
        if blk.last and self.rows_in[blk.input_index] == 0 and len(self.paths) > 1:
            log.warning("%s: no data rows", inp.name)

    def _resolve_fallbacks(self, res: _Parsed, name: str, first_line: int, rows: tuple):
        """Numbers the kernel left to Python; a value that turns out infinite fails the line
        (or, with ``skip_invalid``, drops its row)."""
        indptr, indices, data, labels, qids, n_rows, nnz = rows
        blk = res.block
        bad = sv.resolve_fallbacks(blk.buf, res.fallback, res.info[sv.I_FALLBACK], data, labels)
        if not bad:
            return rows
        if not self.job.skip_invalid:
            _slot, line, _bcode, s, _e = bad[0]
            what = _fallback_error(blk.buf, bad[0], self.job.zero_based, self.job.n_features)
            raise IngestError(
                f"{name}: line {first_line + line:,} (byte {blk.offset + s:,}): "
                f"{what}{_HINT}; nothing was written"
            )
        drop = set()
        for slot, line, bcode, _s, _e in bad:
            r = (
                -slot - 1
                if slot < 0
                else int(np.searchsorted(indptr[: n_rows + 1], slot, side="right") - 1)
            )
            if r not in drop:
                drop.add(r)
                _note_skip(self.stats, name, first_line + line, bcode, "")
        return _drop_rows(indptr, indices, data, labels, qids, n_rows, sorted(drop))

    def _add_rows(self, rows: tuple, max_col: int) -> None:
        indptr, indices, data, labels, qids, n_rows, nnz = rows
        if self.job.hash_bits is not None:
            nnz, merged, max_col = hash_csr_inplace(
                indptr, indices, data, n_rows, self.job.hash_bits
            )
            self.stats.collisions += int(merged)
        if self.builder is None:
            self.builder = _ShardBuilder(
                self.job.shard_rows, self.job.shard_bytes, self.qid_state == 1
            )
            self.wt.release = self.builder.release
        self.stats.rows += n_rows
        self.stats.nnz += nnz
        for item in self.builder.add(indptr, indices, data, labels, qids, n_rows, max_col):
            if item is not None:
                self.wt.put(item)


def _status_error(
    info: np.ndarray,
    buf: np.ndarray,
    offset: int,
    name: str,
    first_line: int,
    zero_based: bool,
    n_features: int | None,
) -> str:
    """``NAME: line L (byte B): what is wrong and what to do`` for a block of text the parser
    stopped in (``info`` from :func:`~.svmlight.parse_block`; ``buf`` the block's text,
    ``offset`` its byte offset in the input, ``first_line`` the number of its first line)."""
    code = int(info[sv.I_STATUS])
    s, e = int(info[sv.I_ERR_START]), int(info[sv.I_ERR_END])
    if code == sv.E_QID_MIXED:
        e = min(e, s + 40)
    tok = _token(buf, s, e)
    what = _describe(code, tok, int(info[sv.I_ERR_EXTRA]), zero_based, n_features)
    return f"{name}: line {first_line + int(info[sv.I_ERR_LINE]):,} (byte {offset + s:,}): {what}"


def _fallback_error(buf, bad: tuple, zero_based: bool, n_features: int | None) -> str:
    """What is wrong with a value :func:`~.svmlight.resolve_fallbacks` found infinite."""
    _slot, _line, code, s, e = bad
    return _describe(code, _token(buf, s, e), 0, zero_based, n_features)


def _note_skip(
    stats: IngestStats, name: str, line: int, code: int, _tok: str, count: bool = True
) -> None:
    if count:
        stats.skipped += 1
    if len(stats.skipped_examples) < MAX_SKIP_EXAMPLES:
        stats.skipped_examples.append(f"{name} line {line:,}: {_SHORT.get(code, 'invalid')}")


_SHORT = {
    sv.E_VALUE: "non-numeric value",
    sv.E_INDEX: "non-integer index",
    sv.E_INDEX_ZERO: "index 0 in a 1-based file",
    sv.E_INDEX_NEG: "negative index",
    sv.E_NOT_INCREASING: "indices not increasing",
    sv.E_VALUE_NAN: "NaN value",
    sv.E_VALUE_INF: "infinite value",
    sv.E_LABEL_MISSING: "missing label",
    sv.E_LABEL: "non-numeric label",
    sv.E_LABEL_NAN: "NaN label",
    sv.E_LABEL_INF: "infinite label",
    sv.E_QID: "bad qid",
    sv.E_QID_POS: "qid: not after the label",
    sv.E_QID_MIXED: "qid: on some lines only",
    sv.E_NO_COLON: "feature not INDEX:VALUE",
    sv.E_INDEX_LIMIT: "index too large",
}


def _drop_rows(indptr, indices, data, labels, qids, n_rows, drop):
    """Remove rows (rare path: values only Python could convert turned out infinite)."""
    keep = np.ones(n_rows, bool)
    keep[drop] = False
    counts = np.diff(indptr[: n_rows + 1])
    entry_keep = np.repeat(keep, counts)
    nnz = int(indptr[n_rows])
    new_indices = indices[:nnz][entry_keep]
    new_data = data[:nnz][entry_keep]
    new_counts = counts[keep]
    new_indptr = np.zeros(new_counts.shape[0] + 1, np.int64)
    np.cumsum(new_counts, out=new_indptr[1:])
    return (
        new_indptr,
        new_indices,
        new_data,
        labels[:n_rows][keep],
        qids[:n_rows][keep],
        int(keep.sum()),
        int(new_indptr[-1]),
    )
