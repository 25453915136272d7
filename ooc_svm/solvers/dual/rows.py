"""Working rows: rows of the store brought into memory (CSR + global ids + ±1 labels + α),
fetched in one streamed pass over only the shards that hold them, and their checkpoint form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...engine.base import Engine, ShardState, concat_partials
from ...kernels.kernel_functions import (
    row_sq_norms,
)
from .state import split_updates_by_shard

if TYPE_CHECKING:  # imported where used: linear models never need scipy
    import scipy.sparse as sp

    from ...store.base import Store
    from ...store.format import Shard


@dataclass
class WorkingRows:
    """Rows held in memory by a dual solver.

    Attributes
    ----------
    gids : int64 (m,)        global row indices
    indptr : int64 (m+1,)
    indices : int32 (nnz,)
    data : float32 (nnz,)
    y : float64 (m,)         ±1
    alpha : float64 (m,)
    """

    gids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray
    alpha: np.ndarray

    @property
    def n(self) -> int:
        return int(self.gids.shape[0])

    @property
    def nbytes(self) -> int:
        return int(
            sum(
                a.nbytes
                for a in (self.gids, self.indptr, self.indices, self.data, self.y, self.alpha)
            )
        )

    @property
    def u32(self) -> np.ndarray:
        """``indices`` viewed as uint32 for the kernels."""
        return self.indices.view(np.uint32)

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices as uint32, data) for the numba kernels."""
        return self.indptr, self.u32, self.data

    def sq_norms(self) -> np.ndarray:
        return row_sq_norms(self.indptr, self.u32, self.data, np.empty(self.n, dtype=np.float64))

    def to_scipy(self, n_features: int) -> sp.csr_matrix:
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n, n_features))

    @classmethod
    def empty(cls) -> WorkingRows:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(1, np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.float32),
            np.zeros(0),
            np.zeros(0),
        )

    def take(self, idx: np.ndarray) -> WorkingRows:
        """The rows at local positions ``idx`` (a new, compact CSR)."""
        idx = np.asarray(idx)
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64, copy=False)
        starts = self.indptr[idx]
        lens = self.indptr[idx + 1] - starts
        indptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        sel = np.arange(int(indptr[-1]), dtype=np.int64) + np.repeat(starts - indptr[:-1], lens)
        return WorkingRows(
            self.gids[idx].copy(),
            indptr,
            self.indices[sel],
            self.data[sel],
            self.y[idx].copy(),
            self.alpha[idx].copy(),
        )

    @classmethod
    def concat(cls, items: Sequence[WorkingRows | None]) -> WorkingRows:
        parts = [p for p in items if p is not None and p.n]  # None: no rows
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        offs = np.cumsum([0] + [int(p.indptr[-1]) for p in parts])
        indptr = np.concatenate(
            [parts[0].indptr[:1]]
            + [p.indptr[1:] - p.indptr[0] + o for p, o in zip(parts, offs[:-1], strict=True)]
        )
        return cls(
            np.concatenate([p.gids for p in parts]),
            indptr.astype(np.int64),
            np.concatenate([p.indices[p.indptr[0] : p.indptr[-1]] for p in parts]),
            np.concatenate([p.data[p.indptr[0] : p.indptr[-1]] for p in parts]),
            np.concatenate([p.y for p in parts]),
            np.concatenate([p.alpha for p in parts]),
        )


def shard_rows(
    shard: Shard, local_idx: np.ndarray, positive: float, alpha: np.ndarray | None = None
) -> WorkingRows:
    """Rows ``local_idx`` of a shard as :class:`WorkingRows` (labels mapped to ±1)."""
    local_idx = np.asarray(local_idx, dtype=np.int64)
    y = np.where(shard.y[local_idx] == positive, 1.0, -1.0)
    a = np.zeros(local_idx.size) if alpha is None else np.asarray(alpha)[local_idx].copy()
    full = WorkingRows(
        np.arange(shard.row_start, shard.row_start + shard.n_rows, dtype=np.int64),
        np.asarray(shard.indptr, dtype=np.int64),
        shard.indices,
        shard.data,
        np.zeros(shard.n_rows),
        np.zeros(shard.n_rows),
    )
    out = full.take(local_idx)
    out.y = y
    out.alpha = a
    return out


def _fetch_fn(shard, bc, st=None):
    gids, positive = bc
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    local = gids[lo:hi] - shard.row_start
    part = [shard_rows(shard, local, positive, st)] if hi > lo else None
    return part if st is None else (part, st)


def fetch_rows(
    store: Store, engine: Engine, gids: np.ndarray, positive: float, state: ShardState | None = None
) -> WorkingRows:
    """Bring the global rows ``gids`` into memory (α from ``state`` when given, else 0).

    Visits only the shards that hold them; rows come back sorted by global index.
    """
    gids = np.unique(np.asarray(gids, dtype=np.int64))
    if gids.size == 0:
        return WorkingRows.empty()
    shards = split_updates_by_shard(store, gids)
    parts = engine.map_reduce(
        store,
        _fetch_fn,
        (gids, float(positive)),
        reduce=concat_partials,
        state=state,
        shards=shards,
    )
    return build_working_rows(parts or [])


def build_working_rows(parts: list[WorkingRows]) -> WorkingRows:
    """One :class:`WorkingRows` from fetched parts (e.g. the reduce result of a pass)."""
    return WorkingRows.concat(list(parts))


#: the arrays of a :class:`WorkingRows`, in constructor order (how checkpoints store them)
ROW_ARRAYS = ("gids", "indptr", "indices", "data", "y", "alpha")


def rows_to_arrays(rows: WorkingRows, prefix: str) -> dict[str, np.ndarray]:
    """``{prefix + name: array}`` of ``rows`` for a checkpoint (:func:`rows_from_arrays`)."""
    return {f"{prefix}{k}": getattr(rows, k) for k in ROW_ARRAYS}


def rows_from_arrays(arrays: Mapping[str, np.ndarray], prefix: str) -> WorkingRows:
    """The :class:`WorkingRows` that :func:`rows_to_arrays` saved under ``prefix``."""
    return WorkingRows(*(arrays[f"{prefix}{k}"] for k in ROW_ARRAYS))
