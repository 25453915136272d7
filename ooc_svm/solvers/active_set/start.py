"""How a major iteration starts: the number of pricing candidates, a warm start from a model
(``--init``), repairing yᵀα = 0, the expansion of the working rows."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...kernels.csr import csr_rmatvec_rows_add
from ...kernels.kernel_functions import (
    KernelParams,
)
from .. import SolverError
from ..dual import (
    WorkingRows,
    row_costs,
    split_updates_by_shard,
)
from ._numba.blocks import DENSE_BLOCK_MAX
from .params import MIN_CANDIDATES, SPRINT_AUTO_MAX, SPRINT_SQRT, Params
from .passes import _warm_fn
from .working_set import S_FREE

if TYPE_CHECKING:
    from ...model.model import Model
    from ...store.format import StoreMeta

log = logging.getLogger(__name__)


class WarmRun(Protocol):
    """What :func:`warm_start` reads and sets of a run (the driver's ``_Run``, which imports
    this module: declared here, not imported from there)."""

    p: Params
    C: float
    nf: int
    linear: bool
    kp: KernelParams
    meta: StoreMeta
    store: Any
    engine: Any
    state: Any
    costs: Any
    pos: float
    beta: float
    keep_rows: bool
    s_gids: np.ndarray
    w: np.ndarray | None
    delta: Any


def _candidate_count(
    p: Params, n_s: int, avg_nnz: float, linear: bool, n_rows: int, n_features: int
) -> int:
    """|I₀′ ∪ I_c′| for the next major iteration: explicit, or from the memory budget.

    The budget (``cache_mb``) covers the Cholesky factor, the working rows and, for kernels,
    their dense copy and the Q columns of I_s over them (§4.2), with room for I_s to grow
    by half during the major iteration.
    """
    if int(p.sprint_size) > 0:
        return int(p.sprint_size)
    budget = float(p.cache_mb) * (1 << 20)
    n_cols = 1.5 * max(n_s, 64) + 32
    factor_bytes = 8.0 * n_cols**2
    left = max(budget - factor_bytes, budget * 0.1)
    per_row = 12.0 * avg_nnz + 64.0
    if not linear:
        per_row += 8.0 * n_cols
        if n_features * SPRINT_AUTO_MAX <= DENSE_BLOCK_MAX:
            per_row += 8.0 * n_features
    k = int(left / per_row) - n_s
    if p.pricing == "sprint":
        k = min(k, SPRINT_AUTO_MAX, int(SPRINT_SQRT * np.sqrt(max(n_rows, 1))))
    return int(max(MIN_CANDIDATES, min(k, n_rows)))


def _load_init(model: Model, C: float, kp: KernelParams, n_rows: int, costs=None, where: str = ""):
    """(sorted gids, signed coefficients yα, SV rows, w, intercept) of a start's model
    made ready by :func:`~..warm.dual_start` (α already at C).

    ``costs`` (class weights): each |yα| is clipped to its class's C_{y_i} instead of C.
    """
    path = where
    if model.support_ is None or model.dual_coef_ is None:
        raise SolverError(
            f"{path}: the model keeps no dual coefficients with their row indices "
            "(support_); kernel models and active-set models of any kernel do"
        )
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    if coef.ndim != 1:
        raise SolverError(f"{path}: one-vs-rest models cannot seed a binary problem")
    gids = np.asarray(model.support_, dtype=np.int64)
    if gids.size and (gids.min() < 0 or gids.max() >= n_rows):
        raise SolverError(
            f"{path}: support vector row {int(gids.max())} is outside this store "
            f"({n_rows} rows); the model was trained on another store"
        )
    # clip |coef| to C (rounding) and order by row; sign(coef) = y
    coef = np.sign(coef) * np.minimum(np.abs(coef), row_costs(np.sign(coef), C, costs))
    order = np.argsort(gids, kind="stable")
    gids, coef = gids[order], coef[order]
    sv = model.support_vectors_
    w = None
    if kp.kernel == "linear":
        if model.coef_ is not None and sv is None:
            w = np.asarray(model.coef_, dtype=np.float64)
    intercept = float(model.intercept_) if np.ndim(model.intercept_) == 0 else 0.0
    sv_rows = None
    if sv is not None:
        import scipy.sparse as sp

        X = sp.csr_matrix(sv)[order]
        X.sort_indices()
        sv_rows = WorkingRows(
            gids.copy(),
            X.indptr.astype(np.int64),
            X.indices.astype(np.int32),
            X.data.astype(np.float32),
            np.sign(coef),
            np.abs(coef),
        )
    return gids, coef, sv_rows, w, intercept


def _repair_equality(
    rows: WorkingRows, status: np.ndarray, C: float, imbalance: float, Cv: np.ndarray | None = None
):
    """Move α of working rows so that yᵀα changes by −imbalance (free rows first); ``Cv``:
    each row's upper bound (default C)."""
    r = float(imbalance)
    Cv = np.full(rows.n, float(C)) if Cv is None else Cv
    order = np.concatenate([np.flatnonzero(status == S_FREE), np.flatnonzero(status != S_FREE)])
    for i in order:
        if abs(r) <= 1e-15 * C:
            break
        yi = rows.y[i]
        # want Δα with yi Δα = −r
        want = -r * yi
        a = rows.alpha[i]
        na = min(Cv[i], max(0.0, a + want))
        r += yi * (na - a)
        rows.alpha[i] = na
    return r


def _exp_tuple(rows: WorkingRows, coef: np.ndarray):
    """(indptr, indices, data, sq, coef) of the rows with non-zero coefficient."""
    nz = np.flatnonzero(coef != 0.0)
    sub = rows.take(nz) if nz.size != rows.n else rows
    ip, ix, data = sub.csr()
    return (
        ip,
        ix.view(np.int32),
        np.asarray(data, dtype=np.float64),
        sub.sq_norms(),
        np.asarray(coef[nz], dtype=np.float64),
    )


def warm_start(run: WarmRun) -> None:
    """§4.3–4.4: α, β (and w or the expansion to add to f) of the active-set ``run`` from its
    ``--init`` model."""
    from ..warm import dual_init, start_from

    p, C, nf = run.p, run.C, run.nf
    start = start_from(p.init, run.meta)
    assert start is not None
    where = start.where
    C_old = float(start.model.info.get("C", C))  # what the log line says
    model = dual_init(p.replace(init=start), run.store, run.engine, "active-set", run.costs)
    assert model is not None
    gids, coef, sv_rows, w_init, intercept = _load_init(
        model, C, run.kp, run.meta.n_rows, run.costs, where
    )
    bad = (
        run.engine.map_reduce(
            run.store,
            _warm_fn,
            (gids, coef, run.pos),
            state=run.state,
            shards=split_updates_by_shard(run.store, gids),
        )
        if gids.size
        else 0
    )
    if bad:
        raise SolverError(
            f"{where}: {bad} support vector(s) have the opposite label in this "
            "store; the model was trained on another store"
        )
    run.beta = -intercept
    a_abs = np.abs(coef)
    free = (a_abs > 0) & (a_abs < row_costs(np.sign(coef), C, run.costs))
    run.keep_rows = bool(free.any())
    run.s_gids = gids[free]
    if run.linear:
        if w_init is not None:
            run.w = np.zeros(nf)
            run.w[: min(nf, w_init.size)] = w_init[:nf]
        elif sv_rows is not None:
            run.w = np.zeros(nf)
            ip, ix, data = sv_rows.csr()
            csr_rmatvec_rows_add(ip, ix, data, np.arange(sv_rows.n), coef, run.w)
    else:
        if sv_rows is None:
            raise SolverError(f"{where}: kernel warm start needs the support vectors in the model")
        run.delta = _exp_tuple(sv_rows, coef)
    log.info(
        "active-set: warm start from %s: %d SVs (%d free), C %.6g -> %.6g",
        where,
        gids.size,
        int(free.sum()),
        C_old,
        C,
    )
