"""The warm start of the dual solvers (smo, irwls), as they read it: the starting point of
a :class:`~ooc_svm.solvers.warm.Start` made ready by :func:`~ooc_svm.solvers.warm.dual_start`
(``--init``, a C sweep's next value, ``--follow``, ``warm_start``: α already scaled to the
new C there, by :func:`~ooc_svm.solvers.warm.rescale`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import SolverError

if TYPE_CHECKING:
    import numpy as np

    from ...model.model import Model


def start_point(model: Model, C: float, n_rows: int) -> tuple[np.ndarray, np.ndarray, Any, float]:
    """Starting point of a dual solver at ``C`` from a start's model
    (:func:`~ooc_svm.solvers.warm.dual_start`: its α already at ``C``): ``(gids, coef, sv,
    intercept)`` with ``gids`` sorted global rows, ``coef`` = yᵢαᵢ (|coef| within C of C put
    at C, yᵀα = 0 kept), ``sv`` the CSR rows of the support vectors (``scipy.sparse``) and
    ``intercept``.

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
    # at the bound -> exactly at it (C_old·C/C_old may miss C by an ulp)
    a = np.abs(coef)
    coef = np.sign(coef) * np.where(a >= C * (1.0 - 1e-12), C, a)
    from ..warm import balance  # yᵀα = 0 restored, as every warm start does

    coef = balance(coef)
    order = np.argsort(gids, kind="stable")
    import scipy.sparse as sp

    X = sp.csr_matrix(model.support_vectors_)[order]
    X.sort_indices()
    intercept = float(model.intercept_) if np.ndim(model.intercept_) == 0 else 0.0
    return gids[order], coef[order], X, intercept
