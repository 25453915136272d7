"""``solve``: perf's entry point, which hands the problem to the variant's loop (see the
package docstring for the problems and the stopping rules)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import Callback, Result
from ..params import as_params
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
    params.validate(meta)
    loss, variant = params.resolve_loss(meta), params.resolve_variant(meta, checkpoint is not None)
    if variant != params.variant:
        if variant == "selective":
            log.info("perf: variant selective (auto: the store does not fit the memory budget)")
        else:
            log.debug("perf: variant %s (auto)", variant)
        params = params.replace(variant=variant)
    if variant == "selective":
        from .selective import solve_selective

        return solve_selective(store, engine, params, callback=callback, checkpoint=checkpoint)
    if variant == "dcd":
        from .dcd import solve_dcd

        return solve_dcd(store, engine, params, callback=callback, checkpoint=checkpoint)
    if variant == "svmperf":
        from .svmperf import solve_svmperf

        return solve_svmperf(store, engine, params, callback=callback, checkpoint=checkpoint)
    if loss == "error":
        from .error import _solve_error

        return _solve_error(store, engine, params, variant, callback, checkpoint)
    from .rank import _solve_rank

    return _solve_rank(store, engine, params, loss, variant, callback, checkpoint)
