"""Read-only views of a store that change what solvers see without copying data.

:class:`BinaryView` turns a multiclass (or ordinal) store into the binary problem
"class k against the rest" for one-vs-rest training. Views pickle as (class, base path,
parameters), so Dask workers re-open the base store themselves.
"""

from __future__ import annotations

import copy

import numpy as np

from .format import Shard


class LabelIsClass:
    """Shard transform: labels become 1.0 where ``y == positive``, 0.0 elsewhere (picklable)."""

    def __init__(self, positive: float):
        self.positive = float(positive)

    def __call__(self, s: Shard) -> Shard:
        y = (s.y == self.positive).astype(np.float64)
        return Shard(s.indptr, s.indices, s.data, y, s.qid, s.row_start)


class BinaryView:
    """Store view whose labels are 1.0 where ``y == positive`` and 0.0 elsewhere.

    Engines read views through the base store (``base``) and apply ``transform`` to each
    shard, so the base store's fast read path and shard caches are shared by all views.
    """

    def __init__(self, base, positive: float):
        self.base = base
        self.positive = float(positive)
        self.transform = LabelIsClass(self.positive)
        self.path = base.path
        self.backend = base.backend
        meta = copy.copy(base.meta)
        meta.label_kind = "binary"
        meta.labels = [0.0, 1.0]
        self.meta = meta

    @property
    def n_shards(self) -> int:
        return self.base.n_shards

    @property
    def cache_key(self) -> tuple:
        return (getattr(self.base, "cache_key", self.path), "binary", self.positive)

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        return self.transform(self.base.read_shard(i, verify=verify))

    def __reduce__(self):
        return (_reopen_binary_view, (self.path, self.positive))


def _reopen_binary_view(path: str, positive: float) -> BinaryView:
    from .writer import open_store

    return BinaryView(open_store(path), positive)
