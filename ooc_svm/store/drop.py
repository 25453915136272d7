"""``ooc-svm drop``: remove a store's oldest shards (a time window over appended data).

A store grown by ``ingest --append`` keeps its shards in the order they came; dropping the
oldest ones is the decremental half of a sliding window. The shard table is rewritten in
one atomic replacement of the metadata (the same commit as an append's, under the store's
writer lock), so a reader sees the store before the drop or after it, never a mix: a reader
that opened the store before keeps reading the old table, whose shard files stay on disk
until ``ooc-svm verify --repair`` (or ``--purge`` here) removes them.

The kept shards keep their bytes and checksums; their ``row_start`` moves down by the rows
dropped. The rows' fingerprints (position-dependent) are not carried over, and the store
gets a new ``uuid``. A model trained before the drop still starts ``train --init``: its
shard table (``info["rows"]["shards"]``) matches the kept shards
(:func:`~ooc_svm.solvers.warm.dropped_rows`), so dcd keeps α of the kept rows, the dual
solvers their support vectors, and perf starts from w.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from dataclasses import dataclass

from .errors import StoreError
from .format import StoreMeta
from .paths import get_fs, is_local, local_path


@dataclass(frozen=True)
class DropResult:
    """What :func:`drop_oldest` did: shards and rows removed and left, and the files
    removed (``purge``) or left for ``verify --repair``."""

    shards_dropped: int
    rows_dropped: int
    shards_left: int
    rows_left: int
    files_removed: int
    files_left: int


def shards_to_drop(meta: StoreMeta, shards: int | None, keep_rows: int | None) -> int:
    """How many of the oldest shards go: ``shards`` of them, or as many as leave at least
    ``keep_rows`` rows (exactly one of the two is given)."""
    if (shards is None) == (keep_rows is None):
        raise StoreError(
            "drop: give the shards to drop (--shards K) or the rows to keep (--keep-rows N)"
        )
    if shards is not None:
        if shards < 0:
            raise StoreError(f"drop: --shards must be >= 0 (got {shards})")
        k = int(shards)
    else:
        assert keep_rows is not None
        if keep_rows < 1:
            raise StoreError(f"drop: --keep-rows must be >= 1 (got {keep_rows})")
        k, left = 0, int(meta.n_rows)
        while k < len(meta.shards) and left - meta.shards[k].n_rows >= keep_rows:
            left -= meta.shards[k].n_rows
            k += 1
    if k >= len(meta.shards) and len(meta.shards):
        raise StoreError(
            f"drop: the store has {len(meta.shards)} shards; dropping {k} would leave no rows "
            "(keep at least one shard, or remove the store)"
        )
    return k


def dropped_meta(meta: StoreMeta, k: int) -> StoreMeta:
    """``meta`` without its ``k`` oldest shards (kept shards renumbered from row 0)."""
    gone = sum(s.n_rows for s in meta.shards[:k])
    kept = [dataclasses.replace(s, row_start=s.row_start - gone) for s in meta.shards[k:]]
    return dataclasses.replace(
        meta,
        shards=kept,
        n_rows=int(meta.n_rows) - gone,
        nnz=int(meta.nnz) - sum(s.nnz for s in meta.shards[:k]),
        sources=[*meta.sources, f"drop {k} oldest shards ({gone} rows)"],
        uuid=uuid.uuid4().hex,
        fingerprints=[],
    )


def drop_oldest(
    path: str, *, shards: int | None = None, keep_rows: int | None = None, purge: bool = False
) -> DropResult:
    """Remove the oldest shards of the store at ``path`` atomically.

    Parameters
    ----------
    path : str
        The store.
    shards : int or None
        Drop this many of the oldest shards.
    keep_rows : int or None
        Drop the oldest shards while at least this many rows are left.
    purge : bool
        Also delete the dropped shards' files now (a reader that opened the store before the
        drop then fails on them with a clear error); default: leave them for ``ooc-svm verify
        --repair``.

    Returns
    -------
    DropResult
    """
    from .backends import get_backend
    from .gc import find_leftovers, remove_leftovers
    from .lock import RemoteStoreLock, StoreLock
    from .writer import open_store

    fs, root = get_fs(path)
    if not fs.exists(root):
        raise StoreError(f"{path}: no store there")
    lock: StoreLock | RemoteStoreLock
    if is_local(path):
        lock = StoreLock(local_path(path), path)
    else:
        lock = RemoteStoreLock(fs, root, path)
    with lock:  # the table is read and replaced under the writer lock (no append between)
        meta = open_store(path).meta
        k = shards_to_drop(meta, shards, keep_rows)
        if k == 0:
            return DropResult(0, 0, len(meta.shards), int(meta.n_rows), 0, 0)
        new = dropped_meta(meta, k)
        writer = get_backend(meta.backend).writer_class()(path, compression=meta.compression)
        writer.write_meta(new)  # the one atomic step
    removed = 0
    names = [s.name for s in meta.shards[:k]]
    left = find_leftovers(path, [s.name for s in new.shards])
    mine = [p for p in left.orphans if os.path.basename(p).split(".")[0] in names]
    if purge and mine:
        removed = remove_leftovers(
            dataclasses.replace(left, temp_dirs=[], parts=[], orphans=mine, stale_lock=None)
        )
    return DropResult(
        k,
        int(meta.n_rows) - int(new.n_rows),
        len(new.shards),
        int(new.n_rows),
        removed,
        len(mine) - removed,
    )


__all__ = ["DropResult", "drop_oldest", "dropped_meta", "shards_to_drop"]
