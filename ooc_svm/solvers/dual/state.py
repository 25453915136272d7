"""Per-shard α of the dual solvers: the engine state (one float64 array per shard), updates
by global row, and its checkpoint form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.base import Engine, ShardState

if TYPE_CHECKING:
    from ...checkpoint import CheckpointData
    from ...store.base import Store


def _zeros_for(info, _i):
    return np.zeros(int(info.n_rows), dtype=np.float64)


def init_alpha_state(engine: Engine, store: Store) -> ShardState:
    """Per-shard state: a zero float64 α array per shard."""
    return engine.init_state(store, _zeros_for)


def _apply_updates_fn(shard, bc, st):
    gids, vals = bc
    lo = np.searchsorted(gids, shard.row_start)
    hi = np.searchsorted(gids, shard.row_start + shard.n_rows)
    if hi > lo:
        st = np.array(st, copy=True)
        st[gids[lo:hi] - shard.row_start] = vals[lo:hi]
    return None, st


def split_updates_by_shard(store: Store, gids: np.ndarray) -> list[int]:
    """Shard ids that hold any of the (sorted) global rows ``gids``."""
    if len(gids) == 0:
        return []
    starts = np.array([s.row_start for s in store.meta.shards], dtype=np.int64)
    sids = np.searchsorted(starts, gids, side="right") - 1
    return sorted(set(int(s) for s in np.unique(sids)))


def apply_alpha_updates(
    store: Store, engine: Engine, state: ShardState, gids: np.ndarray, values: np.ndarray
) -> None:
    """Set α[gid] = value in the per-shard state (visits only the shards concerned)."""
    gids = np.asarray(gids, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if gids.size == 0:
        return
    order = np.argsort(gids, kind="stable")
    gids, values = gids[order], values[order]
    shards = split_updates_by_shard(store, gids)
    engine.map_reduce(store, _apply_updates_fn, (gids, values), state=state, shards=shards)


def shard_states_to_save(engine: Engine, state: ShardState, names: tuple[str, str]) -> list:
    """Per-shard ``(a, b)`` state (``b`` None for the linear kernel) as the dicts a
    checkpoint stores: ``{names[0]: a}`` or ``{names[0]: a, names[1]: b}``."""
    n0, n1 = names
    return [{n0: a} if b is None else {n0: a, n1: b} for a, b in engine.gather_state(state)]


def resume_shard_states(
    checkpoint: Any, store: Store, engine: Engine, names: tuple[str, str]
) -> tuple[CheckpointData, ShardState] | None:
    """``(data, state)`` of the checkpoint to resume from, or None without one: the saved
    per-shard ``(names[0], names[1])`` states, checked against the store's shards (one
    ``names[0]`` value per row) and handed to the engine."""
    from .. import SolverError

    data = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if data is None:
        return None
    shards = data.shard_states or []
    n0, n1 = names
    if len(shards) != store.n_shards or any(
        st[n0].shape != (int(info.n_rows),)
        for st, info in zip(shards, store.meta.shards, strict=True)
    ):
        raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
    return data, engine.set_state(store, [(st[n0], st.get(n1)) for st in shards])
