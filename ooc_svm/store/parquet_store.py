"""Parquet backend: a directory with ``_ooc_svm.json`` and one Parquet file per shard.

Columns: ``y`` (float64), optional ``qid`` (int64), ``indices`` (large_list<int32>) and
``values`` (large_list<float32>). The Arrow list offsets of ``indices`` *are* the CSR indptr.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .format import Shard, ShardCorruptError, StoreError, StoreMeta
from .paths import atomic_write_bytes, get_fs
from .zarr_store import _check_shape

META_FILE = "_ooc_svm.json"


def _codec(name: str) -> str:
    if name in ("zstd", "lz4", "none"):
        return name
    raise StoreError(f"unknown compression {name!r}; use zstd, lz4 or none")


class ParquetShardWriter:
    def __init__(self, path: str, compression: str = "zstd"):
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


def table_arrays(table, has_qid: bool) -> tuple:
    """CSR arrays of one shard's Arrow table: (indptr int64, indices int32, data float32,
    y float64, qid int64 or None)."""
    idx = table.column("indices").combine_chunks()
    val = table.column("values").combine_chunks()
    indptr = np.asarray(idx.offsets, dtype=np.int64)
    indptr = indptr - indptr[0] if indptr.size else np.zeros(1, np.int64)
    indices = np.asarray(idx.values.to_numpy(zero_copy_only=False), dtype=np.int32)
    data = np.asarray(val.values.to_numpy(zero_copy_only=False), dtype=np.float32)
    y = table.column("y").to_numpy().astype(np.float64, copy=False)
    qid = table.column("qid").to_numpy().astype(np.int64, copy=False) if has_qid else None
    return indptr, indices, data, y, qid


class ParquetStore:
    """Read access to a Parquet store."""

    backend = "parquet"

    def __init__(self, path: str):
        self.path = str(path)
        self.fs, self.root = get_fs(self.path)
        try:
            raw = self.fs.cat_file(f"{self.root}/{META_FILE}")
            doc = json.loads(raw)
        except FileNotFoundError:
            raise StoreError(
                f"{self.path}: not an ooc-svm store (no {META_FILE}); "
                "create one with `ooc-svm ingest INPUT STORE --format parquet`"
            ) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise StoreError(f"{self.path}: unreadable store metadata ({e})") from None
        self.meta = StoreMeta.from_dict(doc, where=self.path)

    @property
    def n_shards(self) -> int:
        return self.meta.n_shards

    @property
    def cache_key(self) -> str:
        return self.path

    def __reduce__(self):
        # pickles as its path: a Dask worker re-opens the store from the shared file system
        return (ParquetStore, (self.path,))

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        from .format import shard_checksum

        info = self.meta.shards[i]
        try:
            with self.fs.open(f"{self.root}/{info.name}.parquet", "rb") as f:
                table = pq.read_table(f)
            indptr, indices, data, y, qid = table_arrays(table, self.meta.has_qid)
        except Exception as e:  # noqa: BLE001 - any decode failure means a damaged shard
            raise ShardCorruptError(
                f"{self.path}: shard {i} ({info.name}.parquet) cannot be read: "
                f"{type(e).__name__}: {e}; run `ooc-svm verify` and re-ingest"
            ) from None
        if info.n_rows == 0:
            indptr = np.zeros(1, np.int64)
        shard = Shard(indptr, indices, data, y, qid, row_start=info.row_start)
        _check_shape(self.path, i, info, shard)
        if verify and shard_checksum(shard) != info.checksum:
            raise ShardCorruptError(
                f"{self.path}: shard {i} ({info.name}.parquet) checksum mismatch: the data is "
                "corrupted; re-ingest the store"
            )
        return shard
