"""The epilogue of a dual solve: support vectors collected, the model built, the KKT pass run,
the :class:`~ooc_svm.solvers.Result` assembled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.base import Engine, ShardState, concat_partials
from ...kernels.kernel_functions import (
    KernelParams,
)
from ...model.expansion import (
    make_expansion,
    primal_w,
)
from ...model.model import Model
from .kkt import MaintainedCheck, kkt_violation_pass, maintained_kkt_pass
from .rows import WorkingRows, shard_rows
from .state import apply_alpha_updates, init_alpha_state

if TYPE_CHECKING:
    from ...store.base import Store
    from .. import Result


def make_model(
    sv_rows: WorkingRows,
    intercept: float,
    kp: KernelParams,
    n_features: int,
    classes: tuple[float, float],
    info: dict | None = None,
) -> Model:
    """Model from support vectors (rows with α > 0; coefficient yᵢαᵢ) and the intercept.

    ``intercept`` is added to Σ yᵢαᵢK(xᵢ, x): pass ``−b`` (Platt) or ``−ρ`` (LIBSVM). The linear
    kernel gives ``kind="linear"`` with ``coef_ = Σ yᵢαᵢxᵢ`` (Platt eq. 22) and keeps no SVs.
    """
    import scipy.sparse as sp

    nz = np.flatnonzero(sv_rows.alpha > 0)
    sv = sv_rows.take(nz) if nz.size != sv_rows.n else sv_rows
    order = np.argsort(sv.gids, kind="stable")
    sv = sv.take(order)
    coef = sv.y * sv.alpha
    info = dict(info or {})
    info.setdefault("n_sv", int(sv.n))
    class_list = [float(classes[0]), float(classes[1])]
    if kp.kernel == "linear":
        return Model(
            kind="linear",
            n_features=n_features,
            classes=class_list,
            coef_=primal_w(sv, coef, n_features),
            intercept_=float(intercept),
            kernel="linear",
            gamma=kp.gamma,
            degree=kp.degree,
            coef0=kp.coef0,
            info=info,
        )
    X = sp.csr_matrix((sv.data.astype(np.float64), sv.indices, sv.indptr), shape=(sv.n, n_features))
    return Model(
        kind="kernel",
        n_features=n_features,
        classes=class_list,
        intercept_=float(intercept),
        support_vectors_=X,
        dual_coef_=coef,
        support_=sv.gids.copy(),
        kernel=kp.kernel,
        gamma=kp.gamma,
        degree=kp.degree,
        coef0=kp.coef0,
        info=info,
    )


def _collect_fn(shard, positive, st):
    a = np.asarray(st)
    idx = np.flatnonzero(a > 0.0)
    return ([shard_rows(shard, idx, positive, a)] if idx.size else None), st


def collect_support_vectors(
    store: Store, engine: Engine, state: ShardState, positive: float, fn: Callable | None = None
) -> WorkingRows:
    """The rows with α > 0 (with α) from the per-shard state, in one streamed pass.

    ``fn(shard, positive, st)`` returns ``([WorkingRows] or None, st)``; the default reads
    an α-array state (:func:`init_alpha_state`).
    """
    parts = engine.map_reduce(
        store, fn or _collect_fn, positive, reduce=concat_partials, state=state
    )
    return WorkingRows.concat(parts or [])


@dataclass
class DualFinish:
    """What :func:`finish_dual` returns: the model and the KKT check (None when skipped)."""

    model: Model
    kkt: dict | None


def finish_dual(
    store: Store,
    engine: Engine,
    sv: WorkingRows,
    intercept: float,
    kp: KernelParams,
    C: float | tuple[float, float],
    tol: float,
    classes: tuple[float, float],
    info: dict | Callable[[dict | None], dict],
    *,
    check: bool = True,
    state: ShardState | None = None,
    w: np.ndarray | None = None,
    keep_dual: bool = False,
    kkt: dict | None = None,
    maintained: MaintainedCheck | None = None,
) -> DualFinish:
    """The dual solvers' epilogue: the KKT check, then the model.

    Parameters
    ----------
    sv : WorkingRows
        Support vectors with their α.
    intercept : float
        Added to Σ yᵢαᵢK(xᵢ, x) (``−b`` / ``−ρ``).
    info : dict or callable
        The model's ``info``, or a function of the KKT result (None when skipped) giving it
        (the primal objective needs the KKT pass's hinge sum).
    check : bool
        Run :func:`kkt_violation_pass` (skipped when ``kkt`` is given: a solver that already
        made the pass).
    state : ShardState, optional
        α of every row for the check; default: built from ``sv`` (one update pass).
    w : ndarray, optional
        Linear kernel: the explicit w (bound SVs folded in, Platt eq. 22); it becomes the
        expansion of the check and the model's ``coef_``.
    keep_dual : bool
        Linear models keep their SVs, dual coefficients and global row indices (so they can
        warm-start a later run).
    maintained : callable, optional
        The check from the f the solver maintained (:func:`~.kkt.maintained_kkt_pass`), given
        the final expansion; when it returns None (drift found on its exact sample), or is not
        given, the independent pass is made.
    """
    nf = int(store.meta.n_features)
    pos = float(classes[1])
    if kkt is None and check:
        exp = (
            make_expansion(kp, nf, sv, sv.y * sv.alpha)
            if w is None
            else make_expansion(kp, nf, w=w)
        )
        if maintained is not None:
            kkt = maintained(exp)
        if kkt is None:
            if state is None:
                state = init_alpha_state(engine, store)
                apply_alpha_updates(store, engine, state, sv.gids, sv.alpha)
            kkt = kkt_violation_pass(store, engine, state, exp, intercept, C, pos, tol)
    model_info = info(kkt) if callable(info) else info
    model = make_model(sv, intercept, kp, nf, classes, info=model_info)
    if w is not None:
        model.coef_ = np.asarray(w, dtype=np.float64)
    if keep_dual and model.kind == "linear" and sv.n:
        order = np.argsort(sv.gids, kind="stable")
        svo = sv.take(order)
        import scipy.sparse as sp

        model.support_vectors_ = sp.csr_matrix(
            (svo.data.astype(np.float64), svo.indices, svo.indptr), shape=(svo.n, nf)
        )
        model.dual_coef_ = svo.y * svo.alpha
        model.support_ = svo.gids.copy()
    return DualFinish(model=model, kkt=kkt)


def finish_run(
    run: Any, sv: WorkingRows, intercept: float, info: Any, check: bool = True
) -> DualFinish:
    """:func:`finish_dual` of an active-set or irwls run (``run`` has ``store``, ``engine``,
    ``state``, ``kp``, ``C``, ``costs``, ``tol``, ``neg`` and ``pos``), keeping the dual
    coefficients (a C sweep starts its next value from them). A kernel run's shard state is
    ``(α, f − intercept)``, kept up to date by its last pass: the KKT check starts from that f
    (:func:`~.kkt.maintained_kkt_pass`)."""
    C = run.C if run.costs is None else run.costs
    classes = (run.neg, run.pos)
    maintained = None
    if run.kp.kernel != "linear":

        def maintained(exp):
            return maintained_kkt_pass(
                run.store, run.engine, run.state, exp, intercept, C, run.pos, run.tol
            )

    return finish_dual(
        run.store, run.engine, sv, intercept, run.kp, C, run.tol, classes, info, check=check,
        keep_dual=True, maintained=maintained,
    )  # fmt: skip


def dual_result(
    run: Any,
    model: Model,
    primal: float,
    dual: float,
    iterations: int,
    seconds: float,
    stop_value: float,
    summary: dict,
    hit_max_iter: bool,
) -> Result:
    """The :class:`~ooc_svm.solvers.Result` of an active-set or irwls run (``run`` has
    ``converged``, ``engine``, ``passes0`` and ``history``); an unconverged run stopped at
    ``max_iter`` when ``hit_max_iter``, else it stalled."""
    from .. import Result

    stop_reason = None
    if not run.converged:
        stop_reason = "max_iter" if hit_max_iter else "stalled"
    return Result(
        model=model,
        objective=primal,
        dual_objective=dual,
        converged=run.converged,
        stop_reason=stop_reason,
        iterations=iterations,
        passes=run.engine.passes - run.passes0,
        seconds=seconds,
        stop_value=stop_value,
        history=run.history,
        summary=summary,
    )
