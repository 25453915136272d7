"""The store backends: one :class:`Backend` record per on-disk format, and their registry.

A backend says how its stores are named (path suffixes), how an existing one is recognised
(the marker file at its root), the shard codec used when none is asked for, the suffix of a
shard's entry in the store directory, and which classes read and write it. The classes are
named by module and attribute and imported only when a store of their kind is opened or
written: reading a Zarr store needs no pyarrow, and a command that opens no store imports
neither zarr nor pyarrow.

Everything that depends on the format asks this registry (:func:`backends`,
:func:`get_backend`, :func:`backend_for_path`, :func:`detect_backend`); a third format is one
:func:`register_backend` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import CODECS, StoreError


@dataclass(frozen=True)
class Backend:
    """One on-disk store format.

    Attributes
    ----------
    name : str
        ``--format`` value and the store metadata's ``backend``.
    suffixes : tuple of str
        Path suffixes (lower case) that choose this format for a new store; the first is the
        usual one.
    marker : str
        File at the root of every store of this format (how :func:`open_store` recognises it).
    default_codec : str
        Shard codec when none is asked for (one of :data:`CODECS`).
    reader, writer : str or class
        The store reader (``Class(path)``, a :class:`~.base.Store`) and the shard writer
        (``Class(path, compression=...)`` with ``write(name, shard)`` and
        ``write_meta(meta)``), or their ``"module:Class"`` (imported when first used).
    shard_suffix : str
        Suffix of a shard's entry in the store directory ("" where a shard is a directory).
    """

    name: str
    suffixes: tuple[str, ...]
    marker: str
    default_codec: str
    reader: str | type
    writer: str | type
    shard_suffix: str = ""

    def reader_class(self) -> Callable[[str], Any]:
        """The store reader class (imports its module)."""
        return _load(self.reader)

    def writer_class(self) -> Callable[..., Any]:
        """The shard writer class (imports its module)."""
        return _load(self.writer)


def _load(ref: str | type) -> Any:
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


ZARR = Backend(
    name="zarr",
    suffixes=(".zarr",),
    marker="zarr.json",
    # lz4 measured smaller or equal to zstd level 1 on these stores and 1.1-2.7x faster to
    # decode
    default_codec="lz4",
    reader="ooc_svm.store.zarr_store:ZarrStore",
    writer="ooc_svm.store.zarr_store:ZarrShardWriter",
)

PARQUET = Backend(
    name="parquet",
    suffixes=(".parquet", ".pq"),
    marker="_ooc_svm.json",
    default_codec="zstd",  # the codec other Parquet readers handle best
    reader="ooc_svm.store.parquet_store:ParquetStore",
    writer="ooc_svm.store.parquet_store:ParquetShardWriter",
    shard_suffix=".parquet",
)

_BACKENDS: list[Backend] = [ZARR, PARQUET]


def backends() -> list[Backend]:
    """Every backend, the default (Zarr) first."""
    return list(_BACKENDS)


def backend_names() -> list[str]:
    return [b.name for b in _BACKENDS]


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises
    ------
    StoreError
        No backend has that name.
    """
    for b in _BACKENDS:
        if b.name == name:
            return b
    raise StoreError(f"unknown store format {name!r}; use {' or '.join(backend_names())}")


def backend_for_path(path: str) -> Backend:
    """The backend a new store at ``path`` gets from its suffix (none known: the default)."""
    p = str(path).rstrip("/").lower()
    for b in _BACKENDS:
        if p.endswith(b.suffixes):
            return b
    return _BACKENDS[0]


def detect_backend(exists: Callable[[str], bool], root: str) -> Backend | None:
    """The backend whose marker file is at ``root`` (``exists(path)`` tells), or None."""
    for b in _BACKENDS:
        if exists(f"{root}/{b.marker}"):
            return b
    return None


def shard_suffixes() -> tuple[str, ...]:
    """The suffixes a shard's entry may have in a store directory ("" included)."""
    return tuple(dict.fromkeys(b.shard_suffix for b in _BACKENDS))


def register_backend(backend: Backend) -> None:
    """Add a store format (after the built-in ones); its name must be new."""
    if backend.name in backend_names():
        raise StoreError(f"a store format named {backend.name!r} is already registered")
    if backend.default_codec not in CODECS:
        raise StoreError(f"{backend.name}: default codec {backend.default_codec!r} not in {CODECS}")
    _BACKENDS.append(backend)


def unregister_backend(name: str) -> None:
    """Remove a format added with :func:`register_backend` (the built-in ones stay)."""
    _BACKENDS[:] = [b for b in _BACKENDS if b.name != name or b in (ZARR, PARQUET)]
