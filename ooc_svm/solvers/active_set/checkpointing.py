"""Active-set checkpoints: the state between two major iterations (α, the working set, the
Cholesky factor of the free block) saved after each and read back to resume."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..dual import (
    resume_shard_states,
    rows_from_arrays,
    rows_to_arrays,
    shard_states_to_save,
)
from .cholesky import ActiveFactor
from .working_set import Counters

_FACTOR_ARRAYS = ("R", "Lam", "T", "bkeys", "by", "dkeys", "dy", "ddiag")


_FACTOR_SCALARS = ("dep_tol", "r2_valid", "nb", "nd", "updates", "refactorisations", "promotions")


@dataclass
class _Loop:
    """What the driver carries from one major iteration to the next (and checkpoints)."""

    major: int = 0
    stall: int = 0
    beta: float = 0.0
    hit_max_iter: bool = False
    stop_value: float = np.inf
    passes: int = 0


def _save_checkpoint(
    checkpoint,
    engine,
    state,
    loop: _Loop,
    s_rows,
    factor,
    counters,
    w,
    delta,
    upd_gids,
    upd_alpha,
    history,
    warm,
) -> None:
    """Write the state after a major iteration: per-shard (α, f), I_s rows, the factor, the
    pending α changes and the scalars; resuming from it repeats the run bit for bit."""
    arrays = {"upd_gids": upd_gids, "upd_alpha": upd_alpha}
    arrays.update(rows_to_arrays(s_rows, "s_"))
    arrays.update({f"factor_{k}": getattr(factor, k) for k in _FACTOR_ARRAYS})
    if w is not None:
        arrays["w"] = w
    if delta is not None:
        arrays.update({f"delta_{i}": a for i, a in enumerate(delta)})
    scalars = {
        "loop": dataclasses.asdict(loop),
        "factor": {k: getattr(factor, k) for k in _FACTOR_SCALARS},
        "counters": dataclasses.asdict(counters),
        "history": history,
        "warm": warm,
        "delta": delta is not None,
    }
    shards = shard_states_to_save(engine, state, ("alpha", "f"))
    checkpoint.save(loop.major, scalars=scalars, arrays=arrays, shard_states=shards)


def _load_checkpoint(checkpoint, store, engine):
    """The state saved by :func:`_save_checkpoint`, or None when there is no checkpoint."""
    resumed = resume_shard_states(checkpoint, store, engine, ("alpha", "f"))
    if resumed is None:
        return None
    data, state = resumed
    a, sc = data.arrays, data.scalars
    s_rows = rows_from_arrays(a, "s_")
    factor = ActiveFactor()
    for k in _FACTOR_ARRAYS:
        setattr(factor, k, np.array(a[f"factor_{k}"]))
    for k, v in sc["factor"].items():
        setattr(factor, k, v)
    delta = tuple(a[f"delta_{i}"] for i in range(5)) if sc["delta"] else None
    return (
        state,
        _Loop(**sc["loop"]),
        s_rows,
        factor,
        Counters(**sc["counters"]),
        a.get("w"),
        delta,
        a["upd_gids"],
        a["upd_alpha"],
        list(sc["history"]),
        bool(sc["warm"]),
    )
