"""Read-only views of a store that change what solvers see without copying data.

:class:`BinaryView` turns a multiclass (or ordinal) store into the binary problem
"class k against the rest" for one-vs-rest training. Views pickle as (class, base path,
parameters), so Dask workers re-open the base store themselves.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from .format import Shard

if TYPE_CHECKING:
    from .base import Store


class LabelIsClass:
    """Shard transform: labels become 1.0 where ``y == positive``, 0.0 elsewhere (picklable)."""

    def __init__(self, positive: float) -> None:
        self.positive = float(positive)

    def __call__(self, s: Shard) -> Shard:
        y = (s.y == self.positive).astype(np.float64)
        return Shard(s.indptr, s.indices, s.data, y, s.qid, s.row_start)


class _TransformView:
    """What the views share: the base store's shards, read through it (its fast reader,
    shard caches and Dask workers) and passed through ``transform``.

    A subclass sets ``base``, ``transform``, ``path``, ``backend`` and ``meta``, names
    itself in the cache key by ``_kind`` and returns the arguments it was made with after
    ``base`` from :meth:`_args` (cache key and pickling: Dask workers re-open the base store
    by its path).
    """

    base: Store
    path: str
    transform: Callable[[Shard], Shard]
    _kind: str

    @property
    def n_shards(self) -> int:
        return self.base.n_shards

    @property
    def cache_key(self) -> tuple:
        return (getattr(self.base, "cache_key", self.path), self._kind, *self._args())

    def _args(self) -> tuple:
        raise NotImplementedError

    def __reduce__(self):
        return (_reopen_view, (type(self), self.path, self._args()))

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        return self.transform(self.base.read_shard(i, verify=verify))

    def shard_reader(self, fast: bool = True) -> Callable[[int], Shard]:
        """The base store's reader followed by :attr:`transform`."""
        base_read = self.base.shard_reader(fast=fast)
        transform = self.transform
        return lambda i: transform(base_read(i))


class BinaryView(_TransformView):
    """Store view whose labels are 1.0 where ``y == positive`` and 0.0 elsewhere.

    Engines read views through the base store (``base``) and apply ``transform`` to each
    shard, so the base store's fast read path and shard caches are shared by all views.
    """

    _kind = "binary"

    def __init__(self, base: Store, positive: float) -> None:
        self.base = base
        self.positive = float(positive)
        self.transform = LabelIsClass(self.positive)
        self.path = base.path
        self.backend = base.backend
        meta = copy.copy(base.meta)
        meta.label_kind = "binary"
        meta.labels = [0.0, 1.0]
        self.meta = meta

    def _args(self) -> tuple:
        return (self.positive,)


class KeepShards:
    """Shard transform of :class:`ShardSubsetView` (picklable).

    A shard of the base store whose ``row_start`` is in ``new_start`` is kept and renumbered
    (its rows get the subset's consecutive row ids); any other shard becomes an empty shard.
    """

    def __init__(self, new_start: dict[int, int], next_start: dict[int, int]) -> None:
        self.new_start = new_start  # base row_start of a kept shard -> its subset row_start
        self.next_start = next_start  # base row_start of a dropped shard -> subset row_start

    def __call__(self, s: Shard) -> Shard:
        r0 = int(s.row_start)
        if r0 in self.new_start:
            return Shard(s.indptr, s.indices, s.data, s.y, s.qid, self.new_start[r0])
        return Shard(
            np.zeros(1, dtype=s.indptr.dtype),
            np.zeros(0, dtype=s.indices.dtype),
            np.zeros(0, dtype=s.data.dtype),
            np.zeros(0, dtype=s.y.dtype),
            None if s.qid is None else np.zeros(0, dtype=s.qid.dtype),
            self.next_start[r0],
        )


class ShardSubsetView(_TransformView):
    """Store view holding only the rows of some shards (e.g. the training folds of a
    cross-validation made of shards, see
    :func:`ooc_svm.evaluation.cross_validation.fold_assignment`).

    The view keeps the base store's shard numbering so engines read it through the base
    store (shard caches, Dask workers and the fast reader work unchanged), but every shard not
    in ``shards`` is presented as an *empty* shard (zero rows) and the kept shards' rows are
    renumbered consecutively: ``meta.n_rows`` is the subset's row count and row ``i`` of the
    view is row ``i`` of the subset in shard order. Engines still read the dropped shards (the
    view cannot skip a shard id); a k-fold training fold reads k/(k−1) of what it uses.
    """

    _kind = "shards"

    def __init__(self, base: Store, shards: Iterable[int]) -> None:
        self.base = base
        keep = sorted({int(i) for i in np.asarray(shards, dtype=np.int64).ravel()})
        n = base.n_shards
        if keep and not (0 <= keep[0] and keep[-1] < n):
            raise ValueError(f"{base.path}: shard ids must be in [0, {n}), got {keep}")
        self.shards = tuple(keep)
        kept = set(keep)
        meta = copy.copy(base.meta)
        infos = []
        new_start: dict[int, int] = {}
        next_start: dict[int, int] = {}
        row = 0
        nnz = 0
        for i, s in enumerate(base.meta.shards):
            if i in kept:
                new_start[int(s.row_start)] = row
                infos.append(dataclasses.replace(s, row_start=row))
                row += int(s.n_rows)
                nnz += int(s.nnz)
            else:
                next_start[int(s.row_start)] = row
                infos.append(
                    dataclasses.replace(s, row_start=row, n_rows=0, nnz=0, checksum="empty")
                )
        meta.shards = infos
        meta.fingerprints = []  # a part of the store's rows
        meta.n_rows = row
        meta.nnz = nnz
        self.meta = meta
        self.transform = KeepShards(new_start, next_start)
        self.path = base.path
        self.backend = base.backend

    def _args(self) -> tuple:
        return (self.shards,)


def row_folds(row_start: int, n_rows: int, k: int, seed: int) -> np.ndarray:
    """Fold (0..k-1) of every row of the shard starting at global row ``row_start``.

    Within the shard, a permutation seeded by ``(seed, row_start)`` deals the rows to the
    folds in turn: folds balanced to one row per shard, the same on every read and every
    worker, and no index over the whole store."""
    perm = np.random.default_rng([int(seed), int(row_start)]).permutation(int(n_rows))
    out = np.empty(int(n_rows), dtype=np.int64)
    out[perm] = np.arange(int(n_rows)) % int(k)
    return out


class DropRowFold:
    """Shard transform of :class:`RowFoldView` (picklable): rows of fold ``fold`` removed
    (``held``: only they kept), the others renumbered from ``new_start``."""

    def __init__(
        self, k: int, seed: int, fold: int, new_start: dict[int, int], held: bool = False
    ) -> None:
        self.k, self.seed, self.fold, self.new_start = int(k), int(seed), int(fold), new_start
        self.held = bool(held)

    def __call__(self, s: Shard) -> Shard:
        keep = (row_folds(s.row_start, s.n_rows, self.k, self.seed) == self.fold) == self.held
        lens = np.diff(s.indptr)
        sel = np.repeat(keep, lens)  # entries of the kept rows
        indptr = np.zeros(int(keep.sum()) + 1, dtype=s.indptr.dtype)
        np.cumsum(lens[keep], out=indptr[1:])
        return Shard(
            indptr,
            s.indices[sel],
            s.data[sel],
            s.y[keep],
            None if s.qid is None else s.qid[keep],
            self.new_start[int(s.row_start)],
        )


class RowFoldView(_TransformView):
    """Store view without the rows of one cross-validation fold made of rows within shards
    (:func:`row_folds`): the training set of that fold when the store has fewer shards than
    folds. ``fold_nnz[i]`` is the number of non-zeros of fold ``fold`` in shard ``i``.
    ``held``: the view holds the rows of the fold instead (its held-out set)."""

    _kind = "rowfold"

    def __init__(
        self,
        base: Store,
        k: int,
        seed: int,
        fold: int,
        fold_nnz: Iterable[int],
        held: bool = False,
    ) -> None:
        self.base = base
        self.k, self.seed, self.fold = int(k), int(seed), int(fold)
        self.held = bool(held)
        self.fold_nnz = tuple(int(v) for v in fold_nnz)
        meta = copy.copy(base.meta)
        infos = []
        new_start: dict[int, int] = {}
        row = nnz = 0
        for i, s in enumerate(base.meta.shards):
            n_fold = int(np.count_nonzero(np.arange(s.n_rows) % self.k == self.fold))
            n_keep = n_fold if self.held else int(s.n_rows) - n_fold
            nz = self.fold_nnz[i] if self.held else int(s.nnz) - self.fold_nnz[i]
            new_start[int(s.row_start)] = row
            infos.append(dataclasses.replace(s, row_start=row, n_rows=n_keep, nnz=nz))
            row += n_keep
            nnz += nz
        meta.shards = infos
        meta.fingerprints = []  # a part of the store's rows
        meta.n_rows = row
        meta.nnz = nnz
        self.meta = meta
        self.transform = DropRowFold(self.k, self.seed, self.fold, new_start, self.held)
        self.path = base.path
        self.backend = base.backend

    def _args(self) -> tuple:
        return (self.k, self.seed, self.fold, self.fold_nnz, self.held)


class RemapColumns:
    """Shard transform of :class:`ColumnMapView`: column j becomes ``gmap[j]`` (picklable).

    The new ids of a row are not in increasing order (consumers that need sorted rows sort
    them); a column mapped to -1 must hold no entry of the store."""

    def __init__(self, gmap: np.ndarray) -> None:
        self.gmap = np.asarray(gmap, dtype=np.int32)

    def __call__(self, s: Shard) -> Shard:
        return Shard(s.indptr, self.gmap[s.indices], s.data, s.y, s.qid, s.row_start)


class ColumnMapView(_TransformView):
    """Store view over fewer columns: column j of the base store is column ``gmap[j]`` of the
    view, which has ``n_columns`` columns (e.g. only the columns the rows hold, so that a
    solver's dense vectors over the features are as long as the columns used, not the
    store's width). Every column holding an entry must map to an id in [0, n_columns)."""

    _kind = "columns"

    def __init__(self, base: Store, gmap: np.ndarray, n_columns: int) -> None:
        import hashlib

        self.base = base
        self.remap = RemapColumns(gmap)
        self.transform = self.remap
        self.n_columns = int(n_columns)
        self.path = base.path
        self.backend = base.backend
        meta = copy.copy(base.meta)
        meta.n_features = self.n_columns
        meta.fingerprints = []  # other columns
        self.meta = meta
        self._digest = hashlib.blake2b(self.remap.gmap.tobytes(), digest_size=12).hexdigest()

    @property
    def cache_key(self) -> tuple:
        return (getattr(self.base, "cache_key", self.path), self._kind, self._digest)

    def _args(self) -> tuple:
        return (self.remap.gmap, self.n_columns)


def _reopen_view(cls: type, path: str, args: tuple) -> _TransformView:
    from .writer import open_store

    return cls(open_store(path), *args)
