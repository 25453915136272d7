"""Class costs (``--class-weight``: per-row boxes 0 ≤ αᵢ ≤ C_{yᵢ}) and the dual objective of a
set of rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.base import Engine
from ...kernels.kernel_functions import (
    KernelParams,
)
from ...model.expansion import (
    make_expansion,
)
from ..reduce import none_is_identity
from .rows import WorkingRows

if TYPE_CHECKING:
    from ...store.base import Store


def dual_objective(rows: WorkingRows, kp: KernelParams, n_features: int) -> float:
    """½αᵀQα − eᵀα over the rows with α > 0 (LIBSVM sign; the rest contribute nothing).

    O(n_SV · nnz(SV)) kernel work: the SV expansion evaluated at the SVs.
    """
    nz = np.flatnonzero(rows.alpha > 0)
    if nz.size == 0:
        return 0.0
    sv = rows.take(nz)
    coef = sv.y * sv.alpha
    f = make_expansion(kp, n_features, sv, coef).scores(*sv.csr())
    return float(0.5 * np.dot(coef, f) - sv.alpha.sum())


def _label_counts_fn(shard, bc):
    vals, counts = np.unique(np.asarray(shard.y, dtype=np.float64), return_counts=True)
    return {float(v): int(c) for v, c in zip(vals, counts, strict=True)}


@none_is_identity
def _label_counts_reduce(p, q):
    out = dict(p)
    for k, v in q.items():
        out[k] = out.get(k, 0) + v
    return out


def dual_class_costs(
    store: Store, engine: Engine, params: Any, neg: float, pos: float
) -> tuple[float, float] | None:
    """``(C_neg, C_pos)`` of ``--class-weight`` (None without): C times each class's weight
    (LIBSVM ``-wi``); ``balanced`` counts the labels in one streamed pass."""
    if params.class_weight is None:
        return None
    counts = None
    if str(params.class_weight).strip() == "balanced":
        counts = engine.map_reduce(store, _label_counts_fn, None, reduce=_label_counts_reduce)
    costs = params.class_costs(neg, pos, counts)
    return float(costs[0]), float(costs[1])


def row_costs(y: np.ndarray, C: float, costs: tuple[float, float] | None) -> np.ndarray:
    """Each row's upper bound ``C_{y_i}`` for ±1 labels ``y`` (``C`` for all without
    ``costs``)."""
    if costs is None:
        return np.full(np.shape(y), float(C))
    return np.where(np.asarray(y) > 0, float(costs[1]), float(costs[0]))
