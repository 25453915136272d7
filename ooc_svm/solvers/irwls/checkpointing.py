"""IRWLS checkpoints: the loop's state (β, the bias, the working set and counters) saved after
every outer iteration and read back to resume."""

from __future__ import annotations

from ..dual import (
    resume_shard_states,
    rows_from_arrays,
    rows_to_arrays,
    shard_states_to_save,
)

# ============================================================================================
# checkpoints: the state between two outer iterations
# ============================================================================================
#: the driver's scalars carried from one outer iteration to the next (and checkpointed)
_LOOP_KEYS = (
    "it",
    "b",
    "prev_dual",
    "just_reset",
    "stall",
    "hits",
    "misses",
    "inner_total",
    "line_total",
    "failures",
    "smo_total",
    "fallbacks",
    "b_resets",
    "passes",
)


def _save_checkpoint(
    checkpoint, engine, state, loop: dict, w, upd_gids, upd_beta, delta_rows, delta_coef, history
) -> None:
    """Write the state after an outer iteration: per-shard (β, g), the pending change of the
    last working set, w (linear) and the driver's scalars; a resumed run repeats the rest of
    the run bit for bit."""
    arrays = {"upd_gids": upd_gids, "upd_beta": upd_beta}
    if w is not None:
        arrays["w"] = w
    if delta_rows is not None:
        arrays.update(rows_to_arrays(delta_rows, "delta_"))
        arrays["delta_coef"] = delta_coef
    scalars = {"loop": loop, "history": history, "delta": delta_rows is not None}
    shards = shard_states_to_save(engine, state, ("beta", "g"))
    checkpoint.save(int(loop["it"]), scalars=scalars, arrays=arrays, shard_states=shards)


def _load_checkpoint(checkpoint, store, engine):
    """(state, loop, w, upd_gids, upd_beta, delta_rows, delta_coef, history) saved by
    :func:`_save_checkpoint`, or None when there is no checkpoint to resume."""
    resumed = resume_shard_states(checkpoint, store, engine, ("beta", "g"))
    if resumed is None:
        return None
    data, state = resumed
    a, sc = data.arrays, data.scalars
    delta_rows = delta_coef = None
    if sc["delta"]:
        delta_rows = rows_from_arrays(a, "delta_")
        delta_coef = a["delta_coef"]
    loop = dict(sc["loop"])
    return (
        state,
        loop,
        a.get("w"),
        a["upd_gids"],
        a["upd_beta"],
        delta_rows,
        delta_coef,
        list(sc["history"]),
    )
