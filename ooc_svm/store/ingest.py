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

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._util import cpu_count
from ..kernels.hashing import hash_csr_inplace
from . import ingest_input
from . import svmlight as sv
from .format import MAX_FEATURES, MAX_HASH_BITS, StoreMeta
from .ingest_input import (
    IngestError,
    LongLineError,
    _background,
    _Block,
    _BufferPool,
    _check_input,
    _Input,
    _read_blocks,
)
from .ingest_parse import (
    _HINT,
    IngestStats,
    _drop_rows,
    _fallback_error,
    _note_skip,
    _OutputPool,
    _parse,
    _Parsed,
    _status_error,
)
from .ingest_shards import (
    _ShardBuilder,
    _ShardWriters,
)
from .writer import StoreWriter, backend_from_path

if TYPE_CHECKING:
    from ..memory_budget import MemoryBudget

log = logging.getLogger(__name__)

#: Default size of a text block handed to the parser (bytes).
DEFAULT_BLOCK_MB = 8.0
#: Default shard size in MB of decoded CSR (indices + data + indptr + labels + qids).
DEFAULT_SHARD_MB = 64.0

LABEL_KIND_CHOICES = ("auto", "binary", "ordinal", "multiclass", "real")


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------
def ingest(inputs: str | Sequence[str], store: str, **options: Any) -> StoreMeta:
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
    format : str, optional
        Store format (:mod:`.backends`; default: ``store``'s suffix, with ``append`` the store's).
    zero_based : bool
        Indices in the text start at 0 (default: at 1; column j = feature j + 1).
    shard_rows : int, optional
        At most this many rows per shard.
    shard_mb : float, optional
        At most this many MB of decoded CSR per shard (8 bytes per non-zero, 16 or 24 per
        row); default 64 without ``shard_rows``; both limits apply when both are given.
    append, overwrite : bool
        Add rows to / replace an existing store.
    compression : {"zstd", "lz4", "none"}, optional
        Shard compression (default zstd; with ``append`` the store's).
    label_kind : {"auto", "binary", "ordinal", "multiclass", "real"}
        ``auto`` infers it from the distinct labels (two → binary, integers → ordinal, else
        real); integer class ids that are not ranks need ``multiclass``.
    n_features : int, optional
        Declared width; an index beyond it is an error.
    hash_bits : int, optional
        Hash the features into 2^hash_bits columns (signed MurmurHash3, as scikit-learn's
        ``FeatureHasher``; :mod:`ooc_svm.kernels.hashing`); entries of a row that meet on
        one column are summed, counted as collisions in ``meta.hashing``. Not with n_features.
    skip_invalid : bool
        Skip invalid lines (``stats.skipped``; ``stats.skip_report()`` names the first few).
    block_mb : float
        Text block size handed to the parser.
    threads, writer_threads : int, optional
        Parser threads (default: usable CPUs, at most 4); threads compressing and writing
        shards (default: 2, or 1 with one parser thread).
    progress : callable, optional
        Called with the number of input bytes consumed since the last call.
    """
    t0 = time.perf_counter()
    paths = _input_paths(inputs)
    job = _make_job(label_kind, shard_rows, shard_mb, n_features, block_mb, threads,
                    zero_based, skip_invalid)  # fmt: skip
    job.progress = progress
    job.hash_bits = _check_hash_bits(hash_bits, n_features)
    store = os.fspath(store)
    infos = [_check_input(p) for p in paths]  # a missing input fails before anything is written
    if append and (format is not None or compression is not None):
        _check_append_options(store, format, compression)
    stats = IngestStats(inputs=[i.source for i in infos], hash_bits=job.hash_bits)
    writer = StoreWriter(
        store, backend=format or backend_from_path(store), compression=compression,
        overwrite=overwrite, append=append, n_features=n_features, hash_bits=job.hash_bits,
        label_kind=None if label_kind == "auto" else label_kind,
    )  # fmt: skip
    with writer:
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


def budget_sizes(
    budget: MemoryBudget,
    threads: int | None = None,
    shard_mb: float | None = None,
    block_mb: float | None = None,
) -> tuple[float | None, float]:
    """``(shard_mb, block_mb)`` of an ingest within the process's memory budget.

    Ingest holds, besides its code, a block of text and its parsed rows per parser thread and
    two more queued per thread (``3 × threads`` blocks, the parsed form about the size of the
    text), and the shard being assembled three times (its rows, its CSR arrays, its
    compressed chunks). Defaults (:data:`DEFAULT_SHARD_MB`, :data:`DEFAULT_BLOCK_MB`) are
    lowered so that these fit the budget left; a given value is kept. What cannot go lower
    (one 1 MiB block per thread, a 1 MB shard) is claimed: a budget below it is refused
    before any input is read.
    """
    from ..memory_budget import code_need

    t = max(1, int(threads)) if threads else min(4, cpu_count())
    budget.require("ooc-svm's code and libraries", code_need(budget))
    budget.require("ingest's buffers", (3 * t + 3) * (1 << 20), "ingest", "give fewer --threads")
    free_mb = (budget.free + (3 * t + 3) * (1 << 20)) / (1 << 20)
    if block_mb is None:
        block_mb = max(1.0, min(DEFAULT_BLOCK_MB, free_mb / 2 / (6 * t)))
    if shard_mb is None:
        shard_mb = max(1.0, min(DEFAULT_SHARD_MB, free_mb / 2 / 3))
    return shard_mb, float(block_mb)


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
            yield from _read_blocks(
                i, inp, path, self.job.block_bytes, self.stop, self.buffers,
                ingest_input.MAX_LINE_BYTES,
            )  # fmt: skip

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
                    except LongLineError as e:
                        self._long_line(e)
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

    def _long_line(self, e: LongLineError) -> None:
        """Parse the blocks before an over-long line (an error in them comes first), then
        name the line by its number."""
        while self.pending:
            res: _Parsed = self.pending.popleft().result()
            self._take(res)
        line = self.line0[e.input_index] + 1
        raise IngestError(
            f"{e.name}: line {line:,} (byte {e.offset:,}) is longer than {e.limit:,} bytes "
            "without a newline: not SVMlight text (a device or binary file?); nothing was "
            "written"
        ) from None

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


__all__ = [
    "DEFAULT_BLOCK_MB",
    "budget_sizes",
    "DEFAULT_SHARD_MB",
    "LABEL_KIND_CHOICES",
    "IngestError",
    "IngestStats",
    "ingest",
    "ingest_with_stats",
]
