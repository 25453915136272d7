"""smo helpers shared by its drivers: shard functions (they run inside the engine) and the
tuples the numba kernels take."""

from __future__ import annotations

import numpy as np

from ...kernels.kernel_functions import KernelParams
from .. import SolverError
from ..dual import WorkingRows, dual_class_costs
from ..kernel_cache import MB, SlotCache


# ============================================================================================
# driver helpers
# ============================================================================================
def _kernel_tuple(kp: KernelParams):
    return (np.int64(kp.code), float(kp.gamma), np.int64(kp.degree), float(kp.coef0))


def _x_tuple(rows: WorkingRows):
    return (
        rows.indptr,
        rows.u32,
        rows.data.astype(np.float32, copy=False),
        rows.sq_norms(),
        rows.y,
    )


def _x_tuple_compact(rows: WorkingRows):
    """(:func:`_x_tuple`, width) with the columns renumbered 0 .. width − 1 over the features
    the rows use: the kernel workspace is then as wide as the rows, not the store (an
    increasing renumbering keeps every row's order, so every dot product is unchanged)."""
    ix = rows.indices
    if ix.size == 0:
        return _x_tuple(rows), 1
    hi = int(ix.max()) + 1
    if hi <= max(4 * ix.size, 1 << 16):
        return _x_tuple(rows), hi
    feats, inv = np.unique(ix, return_inverse=True)
    X = (
        rows.indptr,
        inv.astype(np.uint32),
        rows.data.astype(np.float32, copy=False),
        rows.sq_norms(),
        rows.y,
    )
    return X, int(feats.size)


def _cache_for(cache_mb: float, m: int) -> SlotCache:
    return SlotCache(int(cache_mb * MB), max(m, 1), max(m, 1))


def _kernel_params(store, p) -> KernelParams:
    try:
        return KernelParams.from_params(p.kernel_dict(), store.meta.n_features)
    except ValueError as e:
        raise SolverError(str(e)) from None


def _budget_rows(store, p) -> int:
    if int(p.working_rows) > 0:
        return max(2, int(p.working_rows))
    meta = store.meta
    per_row = 8.0 * (meta.nnz / max(meta.n_rows, 1)) + 10 * 8.0
    return max(2, int(float(p.working_mb) * MB / per_row))


def _class_costs(store, engine, p, neg: float, pos: float) -> tuple[float, float]:
    """(C_neg, C_pos) of ``--class-weight`` (``balanced``: one labels pass for the counts)."""
    costs = dual_class_costs(store, engine, p, neg, pos)
    assert costs is not None  # called with a class weight only
    return costs
