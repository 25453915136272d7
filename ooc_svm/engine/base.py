"""The streamed-pass contract every solver uses, and the deterministic reduction it relies on.

A solver never touches a store directly: it calls

    engine.map_reduce(store, fn, broadcast, reduce=None, state=None)

``fn(shard, broadcast)`` (or ``fn(shard, broadcast, st)`` with ``state``) is a module-level,
picklable function that returns a *partial*: a numpy array, a float, or a tuple / dict of
those (``None`` for shards that contribute nothing). Partials are combined by ``reduce``
(default :func:`add_partials`) **in shard order** (local engine: a left fold; Dask: a fixed
binary tree over shard ids), so a result never depends on thread timing or worker count
beyond floating-point reduction order.

Per-shard solver state that lives as long as training does (dual variables, scores) is a
:class:`ShardState`: with ``state=handle``, ``fn`` receives the shard's current state and
returns ``(partial, new_state)``; the engine keeps the new states (local: in a list; Dask: as
futures on the workers) for the next pass.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np


def add_partials(a: Any, b: Any) -> Any:
    """Element-wise sum of two partial results (arrays, scalars, tuples, lists, dicts, None)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, tuple):
        return tuple(add_partials(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, list):
        return [add_partials(x, y) for x, y in zip(a, b, strict=True)]
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = add_partials(out.get(k), v)
        return out
    return a + b


def concat_partials(a: Any, b: Any) -> Any:
    """Reduce that concatenates lists (e.g. per-row scores gathered in shard order)."""
    if a is None:
        return b
    if b is None:
        return a
    return list(a) + list(b)


def tree_reduce(parts: list[Any], reduce: Callable[[Any, Any], Any]) -> Any:
    """Reduce in a fixed binary tree over the list order (deterministic for a given list)."""
    if not parts:
        return None
    while len(parts) > 1:
        nxt = [reduce(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


class ShardState:
    """Handle to per-shard state kept by an engine between passes.

    Use :meth:`Engine.init_state` to create one and :meth:`Engine.gather_state` to fetch the
    states (a list in shard order) for checkpoints or final results.
    """

    def __init__(self, engine: Engine, n_shards: int, items: list[Any]):
        self.engine = engine
        self.n_shards = n_shards
        self.items = items


class Engine(abc.ABC):
    """Runs streamed passes over the shards of a store."""

    #: number of passes made so far (solvers report it)
    passes: int = 0

    @abc.abstractmethod
    def map_reduce(
        self,
        store,
        fn: Callable,
        broadcast: Any = None,
        reduce: Callable[[Any, Any], Any] | None = None,
        state: ShardState | None = None,
        shards: list[int] | None = None,
    ) -> Any:
        """Apply ``fn`` to every shard (or the listed ``shards``) and combine the partials."""

    def init_state(self, store, init: Callable[[Any, int], Any], shards=None) -> ShardState:
        """Create per-shard state with ``init(shard_info, shard_index)`` (no data is read)."""
        ids = list(range(store.n_shards)) if shards is None else list(shards)
        items = [init(store.meta.shards[i], i) for i in ids]
        return ShardState(self, store.n_shards, items)

    def set_state(self, store, items: list[Any]) -> ShardState:
        """Create per-shard state from explicit values (e.g. loaded from a checkpoint)."""
        return ShardState(self, store.n_shards, list(items))

    def gather_state(self, state: ShardState) -> list[Any]:
        """Return the per-shard states, in shard order, to the caller."""
        return list(state.items)

    def close(self) -> None:
        """Release threads / cluster connections."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def as_float_array(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)
