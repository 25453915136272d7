"""The warm start of the dual solvers (smo, irwls; a C sweep's next value): the starting
point at a new C from a model of the same store trained at another C."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import SolverError

if TYPE_CHECKING:
    import numpy as np

    from ...model.model import Model


def warm_start_from_model(
    model: Model, C: float, n_rows: int
) -> tuple[np.ndarray, np.ndarray, Any, float]:
    """Starting point of a dual solver at ``C`` from a model of the same store trained at
    ``model.info["C"]``: ``(gids, coef, sv, intercept)`` with ``gids`` sorted global rows,
    ``coef`` = yᵢαᵢ·C/C_old (|coef| clipped to C), ``sv`` the CSR rows of the support vectors
    (``scipy.sparse``) and ``intercept`` scaled alike.

    Raises
    ------
    SolverError
        The model keeps no dual coefficients with their rows, or they are outside the store.
    """
    import numpy as np

    if model.support_ is None or model.dual_coef_ is None or model.support_vectors_ is None:
        raise SolverError("warm start: the model keeps no dual coefficients with their row indices")
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    gids = np.asarray(model.support_, dtype=np.int64)
    if coef.ndim != 1 or (gids.size and (gids.min() < 0 or gids.max() >= n_rows)):
        raise SolverError("warm start: the model is not a binary model of this store")
    C_old = float(model.info.get("C", C))
    scale = C / C_old if C_old > 0 else 1.0
    coef = coef * scale
    # at the old bound → exactly at the new one (C_old·C/C_old may miss C by an ulp)
    a = np.abs(coef)
    coef = np.sign(coef) * np.where(a >= C * (1.0 - 1e-12), C, a)
    from ..warm import balance  # yᵀα = 0 restored, as every warm start does

    coef = balance(coef)
    order = np.argsort(gids, kind="stable")
    import scipy.sparse as sp

    X = sp.csr_matrix(model.support_vectors_)[order]
    X.sort_indices()
    intercept = float(model.intercept_) * scale if np.ndim(model.intercept_) == 0 else 0.0
    return gids[order], coef[order], X, intercept
