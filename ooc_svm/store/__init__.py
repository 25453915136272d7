"""On-disk sharded CSR stores (Zarr v3 and Parquet) behind one interface."""

from .format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Shard,
    ShardCorruptError,
    ShardInfo,
    StoreError,
    StoreMeta,
    shard_checksum,
)
from .writer import StoreWriter, backend_from_path, csr_to_shards, open_store, write_store

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Shard",
    "ShardCorruptError",
    "ShardInfo",
    "StoreError",
    "StoreMeta",
    "StoreWriter",
    "backend_from_path",
    "csr_to_shards",
    "open_store",
    "shard_checksum",
    "write_store",
]
