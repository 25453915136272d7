"""Zarr v3 backend: one group, metadata in its attributes, one sub-group per shard."""

from __future__ import annotations

import json

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

from .format import Shard, ShardCorruptError, StoreError, StoreMeta
from .paths import atomic_write_bytes, get_fs, is_local, local_path

META_KEY = "ooc_svm"


def _zarr_store(path: str, mode: str):
    if is_local(path):
        return zarr.storage.LocalStore(local_path(path), read_only=(mode == "r"))
    return zarr.storage.FsspecStore.from_url(str(path), read_only=(mode == "r"))


def compressors_for(name: str):
    """Zarr v3 compressor list for a compression name."""
    if name == "zstd":
        return [ZstdCodec(level=1)]
    if name == "lz4":
        return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
    if name == "none":
        return None
    raise StoreError(f"unknown compression {name!r}; use zstd, lz4 or none")


class ZarrShardWriter:
    """Writes shards into a Zarr group at ``path`` (which must already exist or be creatable)."""

    def __init__(self, path: str, compression: str = "zstd"):
        self.path = path
        self.compression = compression
        self._compressors = compressors_for(compression)
        self.group = zarr.open_group(_zarr_store(path, "w"), mode="a", zarr_format=3)

    def write(self, name: str, shard: Shard) -> None:
        if name in self.group:
            del self.group[name]
        g = self.group.create_group(name)
        arrays = {
            "indptr": np.ascontiguousarray(shard.indptr, dtype=np.int64),
            "indices": np.ascontiguousarray(shard.indices, dtype=np.int32),
            "data": np.ascontiguousarray(shard.data, dtype=np.float32),
            "y": np.ascontiguousarray(shard.y, dtype=np.float64),
        }
        if shard.qid is not None:
            arrays["qid"] = np.ascontiguousarray(shard.qid, dtype=np.int64)
        for key, arr in arrays.items():
            a = g.create_array(
                key,
                shape=arr.shape,
                chunks=(max(1, arr.shape[0]),),
                dtype=arr.dtype,
                compressors=self._compressors,
                serializer=BytesCodec(),
                fill_value=0,
            )
            if arr.shape[0]:
                a[:] = arr

    def write_meta(self, meta: StoreMeta) -> None:
        """Replace the group attributes atomically (local: write-temp-then-rename of zarr.json)."""
        fs, root = get_fs(self.path)
        zpath = f"{root}/zarr.json"
        doc = json.loads(fs.cat_file(zpath))
        doc.setdefault("attributes", {})[META_KEY] = meta.to_dict()
        atomic_write_bytes(fs, zpath, json.dumps(doc, indent=1).encode())


class ZarrStore:
    """Read access to a Zarr store."""

    backend = "zarr"

    def __init__(self, path: str):
        self.path = str(path)
        try:
            self.group = zarr.open_group(_zarr_store(self.path, "r"), mode="r", zarr_format=3)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError) as e:
            raise StoreError(f"{self.path}: not an ooc-svm store ({e})") from None
        attrs = dict(self.group.attrs)
        self.meta = StoreMeta.from_dict(attrs.get(META_KEY), where=self.path)

    @property
    def n_shards(self) -> int:
        return self.meta.n_shards

    @property
    def cache_key(self) -> str:
        return self.path

    def __reduce__(self):
        # pickles as its path: a Dask worker re-opens the store from the shared file system
        return (ZarrStore, (self.path,))

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        """Read and decode shard ``i``; with ``verify`` compare its checksum."""
        from .format import shard_checksum

        info = self.meta.shards[i]
        try:
            g = self.group[info.name]
            indptr = g["indptr"][:]
            indices = g["indices"][:]
            data = g["data"][:]
            y = g["y"][:]
            qid = g["qid"][:] if self.meta.has_qid else None
        except Exception as e:  # noqa: BLE001 - any decode failure means a damaged shard
            raise ShardCorruptError(
                f"{self.path}: shard {i} ({info.name}) cannot be read: {type(e).__name__}: {e}; "
                "run `ooc-svm verify` and re-ingest"
            ) from None
        shard = Shard(indptr, indices, data, y, qid, row_start=info.row_start)
        _check_shape(self.path, i, info, shard)
        if verify and shard_checksum(shard) != info.checksum:
            raise ShardCorruptError(
                f"{self.path}: shard {i} ({info.name}) checksum mismatch: the data is corrupted; "
                "re-ingest the store"
            )
        return shard


def _check_shape(path, i, info, shard: Shard) -> None:
    ok = (
        shard.indptr.shape[0] == info.n_rows + 1
        and shard.indices.shape[0] == info.nnz
        and shard.data.shape[0] == info.nnz
        and shard.y.shape[0] == info.n_rows
        and (shard.qid is None or shard.qid.shape[0] == info.n_rows)
        and (info.n_rows == 0 or (shard.indptr[0] == 0 and shard.indptr[-1] == info.nnz))
    )
    if not ok:
        raise ShardCorruptError(
            f"{path}: shard {i} ({info.name}) has the wrong size for the shard table: it is "
            "truncated or corrupted; re-ingest the store"
        )
