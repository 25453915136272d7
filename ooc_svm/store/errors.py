"""The store's errors and the shard codecs every backend understands: a leaf below the
format (:mod:`ooc_svm.store.format`) and the backend registry
(:mod:`ooc_svm.store.backends`), which both name them."""

from __future__ import annotations

#: shard codecs every backend understands (``--compression``)
CODECS = ("zstd", "lz4", "none")


class StoreError(Exception):
    """A store cannot be opened, read or written; the message says what to do."""


class ShardCorruptError(StoreError):
    """A shard's bytes do not match the checksum recorded when it was written."""


class StoreChangedError(StoreError):
    """The store was replaced (``ingest --overwrite``) while it was being read."""
