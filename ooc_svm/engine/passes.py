"""Ready-made pass functions (module level, so every engine can pickle them).

They are what the engine tests and ``scripts/bench_pass.py`` run, and small examples of the
``fn(shard, broadcast[, state])`` contract of :meth:`Engine.map_reduce`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernels.csr import csr_matvec, hinge_violated, u32

if TYPE_CHECKING:
    from ..store.format import Shard


def margins_pass(shard: Shard, bc: Any) -> list[np.ndarray]:
    """Partial = [X·w + b] of the shard (reduce with ``concat_partials``); bc = (w, b)."""
    w, b = bc
    out = np.empty(shard.n_rows, dtype=np.float64)
    csr_matvec(shard.indptr, u32(shard.indices), shard.data, w, float(b), out)
    return [out]


def hinge_pass(shard: Shard, bc: Any) -> tuple[np.ndarray, float, float, float]:
    """The cutting-plane oracle over a shard: (Σ_viol yᵢxᵢ, #viol, Σ hinge, Σ_viol yᵢ·bias).

    ``bc = (w, bias_value, w_bias)``; labels are used as given (expects ±1).
    """
    w, bias_value, w_bias = bc
    g = np.zeros(w.shape[0], dtype=np.float64)
    m = np.empty(shard.n_rows, dtype=np.float64)
    cnt, hinge, gb = hinge_violated(
        shard.indptr,
        u32(shard.indices),
        shard.data,
        shard.y,
        w,
        float(bias_value),
        float(w_bias),
        g,
        m,
    )
    return g, float(cnt), float(hinge), float(gb)


def hinge_state_pass(shard: Shard, bc: Any, st: Any) -> tuple[Any, np.ndarray]:
    """Like :func:`hinge_pass` but keeps the shard's margins as per-shard state.

    Partial = (g, #viol, hinge, gb, Σ|m - previous m|); the new state is the margins.
    """
    g, cnt, hinge, gb = hinge_pass(shard, bc)
    w, bias_value, w_bias = bc
    m = np.empty(shard.n_rows, dtype=np.float64)
    csr_matvec(shard.indptr, u32(shard.indices), shard.data, w, float(bias_value * w_bias), m)
    m *= shard.y
    change = float(np.abs(m - st).sum()) if st is not None else 0.0
    return (g, cnt, hinge, gb, change), m
