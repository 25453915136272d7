"""Pass functions over row blocks of a shard: parallel within a shard, same bits everywhere.

A shard holds tens of millions of non-zeros when a store is written with the default shard
size; parallel over shards only, a pass on a store of 6 shards keeps at most 6 cores busy,
and the last shards of a pass run alone (the serial tail). :class:`Blocked` makes
a pass function's partial over a shard the reduction, in a fixed binary tree, of its
partials over the shard's row blocks of about ``block_nnz`` non-zeros (:func:`row_blocks`:
the boundaries depend on the shard alone, never on the number of threads).

- Called as a plain pass function (``fn(shard, broadcast)``: the Dask engine, the local
  engine's in-thread path, tests), it computes the blocks one after the other.
- :class:`~ooc_svm.engine.local.LocalEngine` recognises it and runs the blocks of a shard on
  all its compute threads, then reduces them in the same tree.

So the result is bit for bit the same for any number of threads and either engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..store.format import Shard
from .base import tree_reduce

#: non-zeros per row block (about 16 MB of CSR): enough blocks for 16-64 cores on a store of
#: the default shard size, few enough that a block's own accumulator stays cheap
BLOCK_NNZ = 1 << 21


def block_bounds(indptr: np.ndarray, block_nnz: int) -> np.ndarray:
    """Row boundaries ``[0, r1, ..., n_rows]`` splitting a shard into blocks of about
    ``block_nnz`` non-zeros each (one block for a shard of at most ``block_nnz``)."""
    n = int(indptr.shape[0] - 1)
    nnz = int(indptr[-1] - indptr[0]) if n >= 0 else 0
    nb = max(1, -(-nnz // max(1, int(block_nnz))))
    if nb == 1 or n <= 1:
        return np.array([0, max(n, 0)], dtype=np.int64)
    targets = int(indptr[0]) + (np.arange(1, nb, dtype=np.int64) * nnz) // nb
    cuts = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    bounds = np.unique(np.concatenate(([0], np.clip(cuts, 0, n), [n])))
    return bounds.astype(np.int64)


def row_blocks(shard: Shard, block_nnz: int) -> list[Shard]:
    """The shard as consecutive row blocks (``[shard]`` itself when it is one block).

    A block shares the shard's ``indices``, ``data`` and ``y`` memory; its ``indptr`` is a
    new array starting at 0 and its ``row_start`` the global number of its first row."""
    bounds = block_bounds(shard.indptr, block_nnz)
    if bounds.shape[0] <= 2:
        return [shard]
    out = []
    ip = shard.indptr
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        pa, pb = int(ip[a]), int(ip[b])
        out.append(
            Shard(
                ip[a : b + 1] - pa,
                shard.indices[pa:pb],
                shard.data[pa:pb],
                shard.y[a:b],
                None if shard.qid is None else shard.qid[a:b],
                row_start=int(shard.row_start) + a,
            )
        )
    return out


class Blocked:
    """A pass function ``fn(shard, broadcast)`` whose partial over a shard is ``reduce``
    over its row blocks (module docstring). Picklable when ``fn`` and ``reduce`` are
    module-level functions."""

    def __init__(
        self,
        fn: Callable[[Any, Any], Any],
        reduce: Callable[[Any, Any], Any],
        block_nnz: int | None = None,
    ) -> None:
        self.fn = fn
        self.reduce = reduce
        #: None: :data:`BLOCK_NNZ` as it is when a pass runs
        self.block_nnz = block_nnz
        self.__name__ = getattr(fn, "__name__", "blocked")

    def blocks(self, shard: Shard) -> list:
        """The row blocks of ``shard`` (a shard without rows, e.g. a stub, is one block).

        Kept on the shard object, so a cached shard is split once, not on every pass."""
        if not isinstance(shard, Shard):
            return [shard]
        size = self.block_nnz or BLOCK_NNZ
        memo = shard.__dict__.get("_row_blocks")
        if memo is not None and memo[0] == size:
            return memo[1]
        out = row_blocks(shard, size)
        if len(out) > 1:
            shard.__dict__["_row_blocks"] = (size, out)
        return out

    def combine(self, parts: list) -> Any:
        """The shard's partial from its blocks' partials (in block order)."""
        return tree_reduce(list(parts), self.reduce)

    def __call__(self, shard, broadcast) -> Any:
        return self.combine([self.fn(b, broadcast) for b in self.blocks(shard)])
