"""Ingest's inputs: open a text file, compressed file or stdin, and read it in blocks.

Compression is recognised by its magic bytes (gzip, bzip2, xz; zstd, zip and lz4 are refused
with a hint); a background thread decompresses and reads blocks of ``block_mb`` MB, cut at the
last newline, into pooled buffers. :class:`IngestError` is the one error of every stage.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import queue
import stat
import sys
import threading
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import svmlight as sv


class IngestError(Exception):
    """The input cannot be ingested; the message names the file, the line and the fix."""


#: longest line accepted (bytes, 64 MiB: at least four million features): a longer one is
#: an error, so a stream without newlines (``/dev/zero`` piped in, a binary file) cannot
#: make ingest hold it all in memory (peak: about twice this)
MAX_LINE_BYTES = 1 << 26


class LongLineError(IngestError):
    """A line of input ``input_index`` starting at byte ``offset`` (of its text) is longer
    than ``limit`` bytes; the pipeline turns it into a message naming the line number."""

    def __init__(self, name: str, input_index: int, offset: int, limit: int) -> None:
        super().__init__(
            f"{name}: the line at byte {offset:,} is longer than {limit:,} bytes (no newline); "
            "not an SVMlight text file?; nothing was written"
        )
        self.name = name
        self.input_index = input_index
        self.offset = offset
        self.limit = limit


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
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        # /dev/zero, /dev/urandom, a terminal: endless or interactive, never a data file
        kind = "character" if stat.S_ISCHR(st.st_mode) else "block"
        raise IngestError(
            f"{path}: is a {kind} device, not an SVMlight file; give a file path, or pipe the "
            "data in with '-'"
        )
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
    idx: int,
    inp: _Input,
    path: str,
    block_bytes: int,
    stop: threading.Event,
    pool: _BufferPool,
    max_line: int = MAX_LINE_BYTES,
):
    """Blocks of complete lines from one input (runs in the reader thread); a line longer
    than ``max_line`` bytes raises :class:`LongLineError`."""
    stream, raw, kind, close = _open_stream(inp, path)
    carry: bytes | np.ndarray = b""
    offset = 0
    try:
        while not stop.is_set():
            # a line longer than a block doubles the read (few copies), up to max_line + 1
            size = len(carry) + block_bytes
            if len(carry) > block_bytes:
                size = min(2 * len(carry), max(max_line + 1, size))
            buf = pool.get(size)
            buf[: len(carry)] = (
                np.frombuffer(carry, np.uint8) if isinstance(carry, bytes) else carry
            )
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
                if cut == 0:  # a line longer than the block: read on, up to max_line
                    if filled > max_line:
                        raise LongLineError(inp.name, idx, offset, max_line)
                    carry = buf[:filled]  # copied into the next, larger buffer
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
