"""One-vs-rest training of multiclass stores: one binary problem per class.

Solvers with a fused driver (a ``solve_ovr`` in their spec: perf, every class's pass
sharing one streamed pass) use it; the others train one binary problem after the other on a
:class:`~ooc_svm.store.views.BinaryView` ("class c vs the rest"). :func:`combine_ovr_models`
stacks the binary models into one OvR model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.model import Model
from ..store.views import BinaryView
from . import Callback, Result, SolverError
from .params import SolverParams, parse_class_weight

if TYPE_CHECKING:
    from ..checkpoint import Checkpointer
    from ..engine import Engine
    from ..store.base import Store
    from .contract import SolverSpec


def train_ovr(
    store: Store,
    spec: SolverSpec,
    engine: Engine,
    params: SolverParams,
    *,
    callback: Callback | None = None,
    checkpoint: Callable[[int, float], Checkpointer] | None = None,
) -> Result:
    """One-vs-rest: one binary problem per class (shared passes when the solver has a
    ``solve_ovr``, else one binary training after the other).

    ``checkpoint(k, c)`` gives the checkpointer of class k (solvers whose spec declares
    ``ovr_checkpoint`` only).
    """
    classes = [float(c) for c in (store.meta.labels or [])]
    if len(classes) < 2:
        raise SolverError(f"{store.path}: one-vs-rest needs at least two classes")
    if spec.solve_ovr is not None and (spec.ovr_fused is None or spec.ovr_fused(params)):
        return spec.solve_ovr(
            store, engine, params, classes, callback=callback, checkpoint=checkpoint
        )
    t0 = time.perf_counter()
    _class_params(params, classes[0], classes)  # refuse a bad --class-weight before training
    from .warm import start_from

    # one class of the one-vs-rest model starts each problem
    init = start_from(params.init, store.meta)
    results = []
    for k, c in enumerate(classes):

        def cb(rec, k=k, c=c):
            if callback is not None:
                callback({**rec, "class": c, "class_index": k})

        sub = _class_params(params, c, classes)
        if init is not None:
            sub = sub.replace(init=init.for_class(k, len(classes), labels=(0.0, 1.0)))
        results.append(spec.solve(BinaryView(store, c), engine, sub, callback=cb))
    return ovr_result(results, classes, t0)


def ovr_result(
    results: list[Result], classes: list[float], t0: float, shared_variant: str | None = None
) -> Result:
    """The combined one-vs-rest model and the :class:`Result` of all classes (trained from
    ``t0``, a ``time.perf_counter()``). ``shared_variant``: the perf variant whose classes
    shared every pass; iterations and passes are then the slowest class's, not the sums."""
    shared = shared_variant is not None
    model = combine_ovr_models([r.model for r in results], classes)
    objs = [r.objective for r in results]
    duals = [r.dual_objective for r in results]
    converged = all(r.converged for r in results)
    reasons = [r.stop_reason for r in results if not r.converged]
    summary: dict[str, Any] = {"multiclass": "ovr", "n_classes": len(classes)}
    if shared:
        model.info["shared_passes"] = True
        summary.update(shared_passes=True, variant=shared_variant)
    summary["per_class_objective"] = objs
    iters, passes = [r.iterations for r in results], [r.passes for r in results]
    summary["per_class_iterations"] = iters
    if shared:
        summary["converged"] = converged
    return Result(
        model=model,
        objective=_total(objs),
        dual_objective=_total(duals),
        iterations=max(iters) if shared else sum(iters),
        # shared: the slowest class's count (it includes passes made before a resume)
        passes=max(passes) if shared else sum(passes),
        seconds=time.perf_counter() - t0,
        stop_value=max(r.stop_value for r in results),
        history=[h for r in results for h in r.history],
        summary=summary,
        converged=converged,
        stop_reason=reasons[0] if reasons else None,
    )


def _total(values: list[float | None]) -> float | None:
    """The sum of the classes' values; None when one of them is None."""
    if any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def _class_params(params: SolverParams, c: float, classes: list[float]) -> SolverParams:
    """The parameters of class ``c``'s subproblem ("c vs the rest"): as LIBLINEAR's
    one-vs-rest ``-wi``, class c's weight multiplies C on its own rows (the positive side)
    and the rest keep C; ``balanced`` is computed within each subproblem."""
    spec = params.class_weight
    if spec is None or str(spec).strip() == "balanced":
        return params
    parsed = parse_class_weight(spec)
    assert isinstance(parsed, dict)
    known = {repr(float(x)): x for x in classes}
    bad = [k for k in parsed if k not in known]
    if bad:
        raise SolverError(
            f"--class-weight {spec!r} with one-vs-rest: give weights by class label "
            f"(classes {', '.join(f'{x:g}' for x in classes)}); {', '.join(bad)} is not one"
        )
    w = parsed.get(repr(float(c)))
    return params.replace(class_weight=None if w is None else f"pos={w!r}")


def combine_ovr_models(models: list[Model], classes: list[float]) -> Model:
    """Stack binary models (positive class = ``classes[k]``) into one OvR model."""
    import scipy.sparse as sp

    first = models[0]
    info = dict(first.info)
    info["multiclass"] = "ovr"
    linear = all(m.kind == "linear" for m in models)
    keep_sv = all(m.support_ is not None and m.support_vectors_ is not None for m in models)
    if linear and not keep_sv:
        out = Model(
            kind="linear",
            n_features=first.n_features,
            classes=classes,
            coef_=np.vstack([np.asarray(m.coef_, dtype=np.float64) for m in models]),
            intercept_=np.array([float(m.intercept_) for m in models]),
            kernel=first.kernel,
            info=info,
        )
        _combine_warm(out, models, info)
        return out
    # kernel models (and linear ones that keep their SVs, for warm starts): union of support
    # vectors (by global row index), one coefficient row each
    index: dict[int, int] = {}
    rows: list[Any] = []  # one-row scipy CSR matrices
    for m in models:
        sv = sp.csr_matrix(m.support_vectors_)
        for j, g in enumerate(np.asarray(m.support_, dtype=np.int64)):
            if int(g) not in index:
                index[int(g)] = len(rows)
                rows.append(sv[j])
    coef = np.zeros((len(models), len(rows)))
    for k, m in enumerate(models):
        assert m.dual_coef_ is not None  # a kernel model
        dual = np.ravel(m.dual_coef_)
        for j, g in enumerate(np.asarray(m.support_, dtype=np.int64)):
            coef[k, index[int(g)]] = dual[j]
    return Model(
        kind="linear" if linear else "kernel",
        n_features=first.n_features,
        classes=classes,
        coef_=(
            np.vstack([np.asarray(m.coef_, dtype=np.float64) for m in models]) if linear else None
        ),
        intercept_=np.array([float(m.intercept_) for m in models]),
        support_vectors_=sp.vstack(rows).tocsr() if rows else None,
        dual_coef_=coef,
        support_=np.array(sorted(index, key=index.__getitem__), dtype=np.int64),
        kernel=first.kernel,
        gamma=first.gamma,
        degree=first.degree,
        coef0=first.coef0,
        info=info,
    )


def _warm_cols(m: Model) -> np.ndarray:
    """The columns of a perf model's warm state (:attr:`Model.warm_cols_`; all of them and
    the bias entry for a model that keeps them dense)."""
    if m.warm_cols_ is not None:
        return np.asarray(m.warm_cols_, dtype=np.int64)
    return np.arange(int(m.n_features) + 1, dtype=np.int64)


def _combine_warm(out: Model, models: list[Model], info: dict) -> None:
    """perf's warm state of the classes' models in one model: one plane per class and the
    classes' points one after the other, over the union of their columns."""
    info.pop("warm_cut", None)
    info.pop("warm_points_per_class", None)
    info.pop("warm_alpha", None)  # dcd's α of a binary problem: one-vs-rest keeps none
    warm = [m for m in models if m.warm_cut_ is not None or m.warm_points_ is not None]
    if not warm:
        return
    cols = np.unique(np.concatenate([_warm_cols(m) for m in warm]))
    out.warm_cols_ = cols
    if any(m.warm_cut_ is not None for m in models):  # perf: one plane per class
        cut = np.zeros((len(models), cols.shape[0]))
        specs = []
        for k, m in enumerate(models):
            if m.warm_cut_ is not None:
                cut[k, np.searchsorted(cols, _warm_cols(m))] = m.warm_cut_
            specs.append(m.info.get("warm_cut", {"r": 0.0, "count": 0}))
        out.warm_cut_ = cut
        info["warm_cut"] = specs
    if any(m.warm_points_ is not None for m in models):
        per = [0 if m.warm_points_ is None else int(m.warm_points_.shape[0]) for m in models]
        rows = []
        for m in models:
            if m.warm_points_ is not None:
                p = np.zeros((m.warm_points_.shape[0], cols.shape[0]), dtype=np.float32)
                p[:, np.searchsorted(cols, _warm_cols(m))] = m.warm_points_
                rows.append(p)
        out.warm_points_ = np.concatenate(rows)
        info["warm_points_per_class"] = per
