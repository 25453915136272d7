"""On-disk sharded CSR stores (Zarr v3 and Parquet) behind one interface."""

from .base import Store
from .format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Shard,
    ShardCorruptError,
    ShardInfo,
    StoreChangedError,
    StoreError,
    StoreMeta,
    check_feature_bound,
    shard_checksum,
)
from .writer import StoreWriter, backend_from_path, csr_to_shards, open_store, write_store

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Shard",
    "ShardCorruptError",
    "ShardInfo",
    "Store",
    "StoreChangedError",
    "StoreError",
    "StoreMeta",
    "StoreWriter",
    "backend_from_path",
    "check_feature_bound",
    "csr_to_shards",
    "open_store",
    "shard_checksum",
    "write_store",
]
