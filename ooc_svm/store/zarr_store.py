"""Zarr v3 backend: one group, metadata in its attributes, one sub-group per shard."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .base import (
    MAX_ARRAY_META_BYTES,
    BufferPool,
    ShardGuard,
    _SizeMismatch,
    load_meta_json,
    map_file,
    read_file,
    read_into,
    read_local,
    store_fs,
)
from .format import Shard, StoreError, StoreMeta
from .paths import atomic_write_bytes, get_fs, is_local, local_path

META_KEY = "ooc_svm"

#: free buffers a pass reader keeps for reuse, in largest shards (decoded + compressed)
DEFAULT_POOL_SHARDS = 2


def _zarr_store(path: str, mode: str):
    # zarr is imported by the writers only: reading a store goes through the chunk files
    import zarr

    if is_local(path):
        return zarr.storage.LocalStore(local_path(path), read_only=(mode == "r"))
    return zarr.storage.FsspecStore.from_url(str(path), read_only=(mode == "r"))


def compressors_for(name: str) -> list | None:
    """Zarr v3 compressor list for a compression name."""
    from zarr.codecs import BloscCodec, ZstdCodec

    if name == "zstd":
        return [ZstdCodec(level=1)]
    if name == "lz4":
        return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
    if name == "none":
        return None
    raise StoreError(f"unknown compression {name!r}; use zstd, lz4 or none")


class ZarrShardWriter:
    """Writes shards into a Zarr group at ``path`` (which must already exist or be creatable)."""

    def __init__(self, path: str, compression: str = "zstd") -> None:
        self.path = path
        self.compression = compression
        import zarr

        self._compressors = compressors_for(compression)
        self.group = zarr.open_group(_zarr_store(path, "w"), mode="a", zarr_format=3)

    def write(self, name: str, shard: Shard) -> None:
        from zarr.codecs import BytesCodec

        if name in self.group:
            del self.group[name]
        g = self.group.create_group(name)
        arrays: dict[str, np.ndarray] = {
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


_DTYPES: dict[object, type[np.generic]] = {
    "int64": np.int64,
    "int32": np.int32,
    "float32": np.float32,
    "float64": np.float64,
}

#: dtype of every array of a shard
ARRAY_DTYPES: dict[str, np.dtype] = {
    "indptr": np.dtype(np.int64),
    "indices": np.dtype(np.int32),
    "data": np.dtype(np.float32),
    "y": np.dtype(np.float64),
    "qid": np.dtype(np.int64),
}


def _compressed_bound(nbytes: int) -> int:
    """Largest chunk file a compressor can produce for ``nbytes`` of input (generous)."""
    return nbytes + nbytes // 8 + (1 << 16)


class ZarrStore(ShardGuard):
    """Read access to a Zarr store.

    The store's JSON and chunk files are read directly (not through Zarr's generic machinery,
    which costs 3-10x more than the kernels of a pass over the same bytes): every array is
    single-chunk with the ``bytes`` codec plus at most one of ``blosc`` (lz4) / ``zstd``, as
    :class:`ZarrShardWriter` writes them. Uncompressed chunks are memory-mapped by the fast
    reader (kernels read the page cache without a copy). A compressed chunk is read with one
    ``readinto`` and decoded (numcodecs blosc / zstd, GIL released) straight into the output
    array; the fast reader takes both buffers from a :class:`~ooc_svm.store.base.BufferPool`,
    so a pass does not page-fault fresh memory for every shard. A chunk file that is absent
    reads as zeros, as in Zarr (the checksum then decides).
    """

    backend = "zarr"

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._fs, root, local = store_fs(self.path)
        self._init_guard(local, root)
        try:
            doc = load_meta_json(self._fs, root, "zarr.json", self.path)
        except FileNotFoundError:
            raise StoreError(
                f"{self.path}: not an ooc-svm store (no zarr.json); "
                "create one with `ooc-svm ingest INPUT STORE`"
            ) from None
        if doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
            raise StoreError(
                f"{self.path}: zarr.json is not a Zarr v3 group (zarr_format "
                f"{doc.get('zarr_format')!r}, node_type {doc.get('node_type')!r}); "
                "not an ooc-svm store, re-ingest it with `ooc-svm ingest`"
            )
        attrs = doc.get("attributes")
        if not isinstance(attrs, dict):
            attrs = {}
        self.meta = StoreMeta.from_dict(attrs.get(META_KEY), where=self.path)

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        """Read, decode and validate shard ``i`` (writable arrays); ``verify``: always
        re-check the checksum, even when this store object checked these files before."""
        shard, ident = self._read(i, mapped=False, pool=None)
        return self.accept(i, shard, ident, verify)

    def shard_reader(
        self, fast: bool = True, pool_shards: int = DEFAULT_POOL_SHARDS
    ) -> Callable[[int], Shard]:
        """``read(i) -> Shard`` for passes; ``fast``: memory-map uncompressed local chunks and
        decode compressed ones into reused buffers (a :class:`~ooc_svm.store.base.BufferPool`
        keeping at most ``pool_shards`` of the largest shard's decoded and compressed bytes
        free between uses; 0: fresh memory for every shard, as :meth:`read_shard`)."""
        mapped = bool(fast) and self._local
        pool = None
        if fast and pool_shards > 0 and self.meta.compression != "none":
            pool = BufferPool(int(pool_shards) * self._largest_shard_bytes())

        def read(i: int) -> Shard:
            shard, ident = self._read(i, mapped=mapped, pool=pool)
            return self.accept(i, shard, ident, False)

        read.pool = pool  # type: ignore[attr-defined]
        return read

    def _largest_shard_bytes(self) -> int:
        """Decoded plus worst-case compressed bytes of the largest shard."""
        per_row = 8 + 8 + (8 if self.meta.has_qid else 0)
        big = max((s.nnz * 8 + (s.n_rows + 1) * per_row for s in self.meta.shards), default=0)
        return big + _compressed_bound(big)

    # -- decoding ---------------------------------------------------------------------------
    def _read(self, i: int, mapped: bool, pool: BufferPool | None) -> tuple[Shard, tuple | None]:
        if not (0 <= i < self.meta.n_shards):
            raise IndexError(f"{self.path}: no shard {i} (the store has {self.meta.n_shards})")
        info = self.meta.shards[i]
        sizes = {"indptr": info.n_rows + 1, "indices": info.nnz, "data": info.nnz}
        sizes["y"] = info.n_rows
        if self.meta.has_qid:
            sizes["qid"] = info.n_rows
        arrays: dict[str, np.ndarray] = {}
        ids = []
        try:
            for key, n in sizes.items():
                rel = f"{info.name}/{key}"
                arrays[key], fid = self._array(i, rel, ARRAY_DTYPES[key], n, mapped, pool)
                ids.append(fid)
        except StoreError:
            self.check_unchanged()
            raise
        except _SizeMismatch as e:
            raise self.damaged(i, f"{key} has {e} bytes, not the size of the shard table") from None
        except FileNotFoundError as e:
            raise self.damaged(i, f"missing file {e.filename or e}") from None
        except Exception as e:  # any decode failure means a damaged shard
            raise self.damaged(i, f"{key} cannot be decoded ({type(e).__name__}: {e})") from None
        shard = Shard(
            arrays["indptr"],
            arrays["indices"],
            arrays["data"],
            arrays["y"],
            arrays.get("qid"),
            row_start=info.row_start,
        )
        ident = None if any(f is None for f in ids) or not self._local else tuple(ids)
        return shard, ident

    def _array(
        self, i: int, rel: str, dtype: np.dtype, n: int, mapped: bool, pool: BufferPool | None
    ):
        root = self._root
        what = self.describe(i)
        meta_raw, meta_id = read_file(
            self._fs, root, f"{rel}/zarr.json", MAX_ARRAY_META_BYTES, what
        )
        try:
            codec = _check_array_meta(json.loads(meta_raw), dtype, n)
        except (ValueError, RecursionError):
            codec = None  # not JSON (or nested too deeply): damaged, as below
        raw: bytes | np.ndarray
        if codec is None:
            raise self.damaged(i, f"{rel}/zarr.json does not match the shard table")
        nbytes = n * dtype.itemsize
        if n == 0:
            return np.zeros(0, dtype=dtype), meta_id
        chunk = f"{rel}/c/0"
        if codec == "none" and self._local:
            if mapped:
                try:
                    mm, fid = map_file(f"{root}/{chunk}", nbytes, what)
                except FileNotFoundError:
                    return np.zeros(n, dtype=dtype), (meta_id, None)
                return np.frombuffer(mm, dtype=dtype, count=n), (meta_id, fid)
            out = np.empty(n, dtype=dtype)
            try:
                fid = read_into(f"{root}/{chunk}", out, what)
            except FileNotFoundError:
                return np.zeros(n, dtype=dtype), (meta_id, None)
            return out, (meta_id, fid)
        bound = nbytes if codec == "none" else _compressed_bound(nbytes)
        try:
            if self._local:  # straight into a (pooled) buffer: no bytes object, no copy
                raw, fid = read_local(f"{root}/{chunk}", bound, what, pool)
            else:
                raw, fid = read_file(self._fs, root, chunk, bound, what)
        except FileNotFoundError:
            return np.zeros(n, dtype=dtype), (meta_id, None)
        if codec == "none":  # remote, uncompressed
            if len(raw) != nbytes:
                raise _SizeMismatch(len(raw))
            return np.frombuffer(bytearray(raw), dtype=dtype, count=n), (meta_id, fid)
        out = (pool.take(nbytes) if pool is not None else np.empty(nbytes, np.uint8)).view(dtype)
        if codec == "blosc":
            head = bytes(raw[:16])
            if len(head) < 16 or int.from_bytes(head[4:8], "little") != nbytes:
                raise _SizeMismatch("a blosc header with another size")
            if int.from_bytes(head[12:16], "little") != len(raw):
                # blosc trusts its header: never let it read past the bytes of the file
                raise ValueError(
                    f"blosc header declares {int.from_bytes(head[12:16], 'little')}"
                    f" compressed bytes, the file has {len(raw)}"
                )
            from numcodecs import Blosc

            Blosc().decode(raw, out=out)  # releases the GIL
            return out, (meta_id, fid)
        declared = _zstd_content_size(bytes(raw[:18]))
        if declared is not None and declared != nbytes:
            raise _SizeMismatch(f"a zstd frame of {declared}")
        from numcodecs import Zstd

        Zstd().decode(raw, out=out)  # releases the GIL; checks the decoded size is nbytes
        return out, (meta_id, fid)


def _check_array_meta(doc: Any, dtype: np.dtype, n: int) -> str | None:
    """The codec (``none``, ``blosc``, ``zstd``) of a single-chunk 1-D array of ``n``
    elements of ``dtype`` as this package writes it, or None for anything else."""
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3:
        return None
    if doc.get("node_type") != "array" or doc.get("storage_transformers"):
        return None
    if doc.get("shape") != [n] or _DTYPES.get(doc.get("data_type")) is not dtype.type:
        return None
    grid = doc.get("chunk_grid")
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        return None
    if (grid.get("configuration") or {}).get("chunk_shape") != [max(1, n)]:
        return None
    cke = doc.get("chunk_key_encoding")
    if not isinstance(cke, dict) or cke.get("name") != "default":
        return None
    if (cke.get("configuration") or {}).get("separator", "/") != "/":
        return None
    codecs = doc.get("codecs")
    if not isinstance(codecs, list) or not codecs or not all(isinstance(c, dict) for c in codecs):
        return None
    if codecs[0].get("name") != "bytes":
        return None
    if (codecs[0].get("configuration") or {}).get("endian", "little") != "little":
        return None
    if len(codecs) == 1:
        return "none"
    if len(codecs) == 2 and codecs[1].get("name") in ("blosc", "zstd"):
        return str(codecs[1]["name"])
    return None


def _zstd_content_size(raw: bytes) -> int | None:
    """The decompressed size a zstd frame header declares (None when it declares none)."""
    if len(raw) < 6 or raw[:4] != b"\x28\xb5\x2f\xfd":
        raise ValueError("not a zstd frame")
    fhd = raw[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0:
        return None
    if len(raw) < pos + size:
        raise ValueError("truncated zstd frame header")
    v = int.from_bytes(raw[pos : pos + size], "little")
    return v + 256 if size == 2 else v
