"""``solve``: perf's entry point, which hands the problem to the entry point of the variant's
row (:mod:`.algorithms`; see the package docstring for the problems and the stopping rules),
and ``solve_planes``, the loop of ``paper`` and ``accelerated``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import Callback, Result
from ..params import as_params
from .algorithms import resolved
from .params import Params

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store


def solve(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a linear SVM with the cutting-plane algorithm (see the package docstring).

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), the state (w or the
    best point, the working set of cutting planes and its QP solution) is saved after every
    iteration, and a resumed run continues exactly where the checkpoint was taken.
    """
    params = as_params(Params, params)
    meta = store.meta
    room = params.room_of(engine)  # auto chooses by the room the command resolved
    params.validate(meta, room=room)
    why = ""
    if room is not None:
        from .auto import choose

        variant, why = choose(params, meta, checkpoint is not None, room=room)
        log.debug("perf: variant %s (auto: %s)", variant, why)
        params = resolved(params, variant)
    res = params.algorithm.entry(store, engine, params, callback=callback, checkpoint=checkpoint)
    if why:
        res.summary["auto"] = f"{params.variant}: {why}"
    return res


def solve_planes(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """The cutting-plane loop of ``paper`` and ``accelerated``: Algorithm 1 (the error loss,
    :mod:`.error`) or 2 (roc, ordinal: :mod:`.rank`)."""
    params = as_params(Params, params)
    loss = params.resolve_loss(store.meta)
    if loss == "error":
        from .error import _solve_error

        return _solve_error(store, engine, params, params.variant, callback, checkpoint)
    from .rank import _solve_rank

    return _solve_rank(store, engine, params, loss, params.variant, callback, checkpoint)
