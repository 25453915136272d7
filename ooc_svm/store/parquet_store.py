"""Parquet backend: a directory with ``_ooc_svm.json`` and one Parquet file per shard.

Columns: ``y`` (float64), optional ``qid`` (int64), ``indices`` (large_list<int32>) and
``values`` (large_list<float32>). The Arrow list offsets of ``indices`` *are* the CSR indptr.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .base import (
    ShardGuard,
    _SizeMismatch,
    file_id,
    load_meta_json,
    open_regular,
    read_file,
    store_fs,
)
from .format import Shard, StoreError, StoreMeta
from .paths import atomic_write_bytes, get_fs

META_FILE = "_ooc_svm.json"


def _codec(name: str) -> str:
    if name in ("zstd", "lz4", "none"):
        return name
    raise StoreError(f"unknown compression {name!r}; use zstd, lz4 or none")


class ParquetShardWriter:
    def __init__(self, path: str, compression: str = "zstd") -> None:
        self.path = path
        self.compression = compression
        self.fs, self.root = get_fs(path)
        self.fs.makedirs(self.root, exist_ok=True)

    def write(self, name: str, shard: Shard) -> None:
        indptr = np.ascontiguousarray(shard.indptr, dtype=np.int64)
        offsets = pa.array(indptr - indptr[0] if indptr.size else np.zeros(1, np.int64))
        idx = pa.LargeListArray.from_arrays(
            offsets, pa.array(np.ascontiguousarray(shard.indices, dtype=np.int32))
        )
        val = pa.LargeListArray.from_arrays(
            offsets, pa.array(np.ascontiguousarray(shard.data, dtype=np.float32))
        )
        cols = {"y": pa.array(np.asarray(shard.y, dtype=np.float64))}
        if shard.qid is not None:
            cols["qid"] = pa.array(np.asarray(shard.qid, dtype=np.int64))
        cols["indices"] = idx
        cols["values"] = val
        table = pa.table(cols)
        with self.fs.open(f"{self.root}/{name}.parquet", "wb") as f:
            pq.write_table(
                table,
                f,
                compression=_codec(self.compression),
                use_dictionary=False,
                write_statistics=False,
                row_group_size=max(1, table.num_rows),
            )

    def write_meta(self, meta: StoreMeta) -> None:
        atomic_write_bytes(self.fs, f"{self.root}/{META_FILE}", meta.to_json().encode())


def table_arrays(table: pa.Table, has_qid: bool) -> tuple:
    """CSR arrays of one shard's Arrow table: (indptr int64, indices int32, data float32,
    y float64, qid int64 or None)."""
    idx = table.column("indices").combine_chunks()
    val = table.column("values").combine_chunks()
    indptr = np.asarray(idx.offsets, dtype=np.int64)
    if not indptr.size:
        indptr = np.zeros(1, np.int64)
    elif indptr[0]:  # a sliced list array: offsets do not start at 0 (a file never has that)
        indptr = indptr - indptr[0]
    indices = np.asarray(idx.values.to_numpy(zero_copy_only=False), dtype=np.int32)
    data = np.asarray(val.values.to_numpy(zero_copy_only=False), dtype=np.float32)
    y = table.column("y").to_numpy().astype(np.float64, copy=False)
    qid = table.column("qid").to_numpy().astype(np.int64, copy=False) if has_qid else None
    return indptr, indices, data, y, qid


def _file_bound(n_rows: int, nnz: int) -> int:
    """Largest Parquet shard file plausible for the declared sizes (generous)."""
    return 2 * (8 * nnz + 40 * n_rows) + (1 << 20)


class ParquetStore(ShardGuard):
    """Read access to a Parquet store.

    A shard file is opened only if it is a regular file no larger than its declared sizes
    allow, memory-mapped (local) and decoded on the calling thread only: ``pq.read_table``
    with its own thread pool contends with the engine's threads (which already decode
    several shards at once); memory-mapped and single-threaded it is ~2x faster here. Its
    footer must declare the row count of the shard table and uncompressed column sizes within
    the declared sizes before any page is decoded.
    """

    backend = "parquet"

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._fs, root, local = store_fs(self.path)
        self._init_guard(local, root)
        try:
            doc = load_meta_json(self._fs, root, META_FILE, self.path)
        except FileNotFoundError:
            raise StoreError(
                f"{self.path}: not an ooc-svm store (no {META_FILE}); "
                "create one with `ooc-svm ingest INPUT STORE --format parquet`"
            ) from None
        self.meta = StoreMeta.from_dict(doc, where=self.path)

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        """Read, decode and validate shard ``i``; ``verify``: always re-check the checksum."""
        shard, ident = self._read(i)
        return self.accept(i, shard, ident, verify)

    def shard_reader(self, fast: bool = True) -> Callable[[int], Shard]:
        """``read(i) -> Shard`` for passes (the same decoding as :meth:`read_shard`)."""

        def read(i: int) -> Shard:
            shard, ident = self._read(i)
            return self.accept(i, shard, ident, False)

        return read

    def _read(self, i: int) -> tuple[Shard, tuple | None]:
        if not (0 <= i < self.meta.n_shards):
            raise IndexError(f"{self.path}: no shard {i} (the store has {self.meta.n_shards})")
        info = self.meta.shards[i]
        rel = f"{info.name}.parquet"
        bound = _file_bound(info.n_rows, info.nnz)
        what = self.describe(i)
        ident = None
        try:
            if self._local:
                fd, st = open_regular(f"{self._root}/{rel}", bound, what)
                try:
                    if st.st_size == 0:
                        raise ValueError("empty file")
                    mm = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
                finally:
                    os.close(fd)
                ident = file_id(st)
                source = pa.BufferReader(pa.py_buffer(mm))
            else:
                raw, _ = read_file(self._fs, self._root, rel, bound, what)
                source = pa.BufferReader(pa.py_buffer(raw))
            pf = pq.ParquetFile(source)
            md = pf.metadata
            if md.num_rows != info.n_rows or md.num_row_groups > 1:
                raise _SizeMismatch(f"{md.num_rows} rows in {md.num_row_groups} row groups")
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                unc = sum(rg.column(c).total_uncompressed_size for c in range(rg.num_columns))
                if unc > bound:
                    raise _SizeMismatch(f"{unc:,} uncompressed bytes")
            cols = ["y", "indices", "values"] + (["qid"] if self.meta.has_qid else [])
            table = pf.read(columns=cols, use_threads=False)
            indptr, indices, data, y, qid = table_arrays(table, self.meta.has_qid)
        except StoreError:
            self.check_unchanged()
            raise
        except FileNotFoundError as e:
            raise self.damaged(i, f"missing file {e.filename or rel}") from None
        except _SizeMismatch as e:
            raise self.damaged(i, f"the file holds {e}, not what the shard table says") from None
        except Exception as e:  # any decode failure means a damaged shard
            raise self.damaged(i, f"cannot be decoded ({type(e).__name__}: {e})") from None
        if info.n_rows == 0:
            indptr = np.zeros(1, np.int64)
        return Shard(indptr, indices, data, y, qid, row_start=info.row_start), ident
