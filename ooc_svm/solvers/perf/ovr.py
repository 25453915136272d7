"""One-vs-rest perf: every class's cutting-plane iteration shares one streamed pass."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import Callback, Result, SolverError, binary_classes, tagged
from ..params import as_params
from .error import _error_steps
from .params import Params
from .passes import pass_many, reduce_many

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store

log = logging.getLogger(__name__)

#: ``--checkpoint`` / ``--resume`` of one-vs-rest: one checkpoint directory per class.
SUPPORTS_OVR_CHECKPOINT = True


def solve_ovr(
    store: Store,
    engine: Engine,
    params: Params,
    classes: list[float],
    *,
    callback: Callback | None = None,
    checkpoint: Callable[[int, float], Checkpointer] | None = None,
) -> Result:
    """One-vs-rest with every class's cutting-plane iteration sharing one streamed pass.

    Each class runs its own Algorithm 1 (or the accelerated variant) for "class c vs the
    rest" (labels ``y == c`` → +1, others −1) with its own working set; at every round the
    passes all unfinished classes need are fused into **one** pass over the store
    (:func:`pass_many`: each shard is read once and every class's margins and cut are
    computed from it). Passes therefore equal the iterations of the slowest class, not their
    sum. The accumulators of a pass are sized so that all classes together stay within
    ``dense_limit_mb`` (fewer cut points per class when there are many classes).

    ``checkpoint(k, c)``, if given, returns the :class:`~ooc_svm.checkpoint.Checkpointer` of
    class k (label c): every class saves its own state after each of its iterations and
    resumes from it, so an interrupted run ends with the same model as an uninterrupted one.
    """
    params = as_params(Params, params)
    meta = store.meta
    if meta.n_rows == 0:
        raise SolverError("the store has no rows")
    if params.loss not in (None, "error"):
        raise SolverError("one-vs-rest perf trains --loss error only")
    variant = params.algorithm.fused
    if not params.algorithm.ovr:
        raise SolverError(
            f"one-vs-rest perf does not support --variant {variant} yet; use accelerated"
        )
    from ..ovr import _class_params

    classes = [float(c) for c in classes]
    params.check_dense(meta, copies=len(classes), room=params.room_of(engine))
    from ..warm import start_from

    # one class of the one-vs-rest model starts each problem
    init = start_from(params.init, meta)
    t0 = time.perf_counter()
    steps = []
    for k, c in enumerate(classes):

        def cb(rec, k=k, c=c):
            if callback is not None:
                callback({**rec, "class": c, "class_index": k})

        # neg: "the rest" (the binary model's classes are replaced by combine_ovr_models)
        ck = None if checkpoint is None else checkpoint(k, c)
        sub = _class_params(params, c, classes)  # --class-weight of "c vs the rest"
        if init is not None:
            sub = sub.replace(init=init.for_class(k, len(classes)))
        g = _error_steps(meta, math.nan, c, engine, sub, variant, cb, ck, share=len(classes))
        steps.append(g)
    res = run_fused(store, engine, steps, "perf ovr", "classes")
    return _ovr_result(res, classes, variant, t0)


def run_fused(
    store: Store, engine: Engine, steps: list, label: str, what: str, level: int = logging.INFO
) -> list[Result]:
    """Run problem generators (:func:`~.error._error_steps`) to the end, each round fusing
    the passes all unfinished problems need into one streamed pass (:func:`pass_many`).

    The problems may differ in their labels (one-vs-rest: one class each) or in C (a C
    sweep) or both; returns their :class:`Result` in the order of ``steps``. Each pass is
    logged at ``level`` as "``label``: pass N for K of M ``what``".
    """
    reqs = {}
    for k, g in enumerate(steps):  # in order: each primes its own state (and resume)
        reqs[k] = next(g)
    results = {}
    rounds = 0
    while reqs:
        ks = sorted(reqs)
        t = time.perf_counter()
        parts = engine.map_reduce(store, pass_many, [reqs[k] for k in ks], reduce=reduce_many)
        pt = time.perf_counter() - t
        rounds += 1
        log.log(
            level,
            "%s: pass %d for %d of %d %s (%.2fs)",
            label,
            rounds,
            len(ks),
            len(steps),
            what,
            pt,
        )
        for k, part in zip(ks, parts, strict=True):
            try:
                reqs[k] = steps[k].send((part, pt))
            except StopIteration as done:
                results[k] = done.value
                del reqs[k]
    return [results[k] for k in range(len(steps))]


def _ovr_result(res: list[Result], classes: list[float], variant: str, t0: float) -> Result:
    """The combined one-vs-rest model and the :class:`Result` of all classes."""
    from ..ovr import ovr_result

    return ovr_result(res, classes, t0, shared_variant=variant)


def solve_sweep(
    store: Store, engine: Engine, params: Params, Cs: list[float], callback: Callback | None
) -> list[Result]:
    """A C sweep with the error loss: every C's (and, on a multiclass store, every class's)
    cutting-plane iteration as a generator, one fused pass per round (:func:`run_fused`).
    Records get ``C`` and ``C_index`` (and ``class``, ``class_index``)."""
    meta = store.meta
    multi = meta.label_kind == "multiclass"
    if multi:
        classes = [float(c) for c in (meta.labels or [])]
        pos_list = [(math.nan, c) for c in classes]  # "class c vs the rest"
    else:
        pos_list = [binary_classes(meta)]
    share = len(Cs) * len(pos_list)
    params.check_dense(meta, copies=share, room=params.room_of(engine))
    t0 = time.perf_counter()
    steps = []
    for k, c in enumerate(Cs):
        p = params.replace(C=c, c_perf=None)
        for j, (neg, pos) in enumerate(pos_list):
            cb = tagged(callback, C=c, C_index=k)
            if multi and cb is not None:
                cb = tagged(cb, **{"class": pos, "class_index": j})
            variant = p.algorithm.fused
            steps.append(_error_steps(meta, neg, pos, engine, p, variant, cb, None, share=share))
    res = run_fused(store, engine, steps, "perf C sweep", "problems", logging.DEBUG)
    if not multi:
        return res
    m = len(pos_list)
    return [
        _ovr_result(
            res[k * m : (k + 1) * m],
            classes,
            params.algorithm.fused,
            t0,
        )
        for k in range(len(Cs))
    ]
