"""The working set of an outer iteration: the q rows chosen from a pass's candidates, their
kernel block, and the support vectors collected at the end."""

from __future__ import annotations

import numpy as np

from ...kernels.kernel_functions import KernelParams
from ...kernels.parallel import kernel_block_par, thread_share
from ..dual import (
    WorkingRows,
    shard_rows,
)
from .passes import (
    _S_NCAND,
    _PassPartial,
    _Pool,
)


def _select(part: _PassPartial, q: int) -> tuple[WorkingRows, np.ndarray]:
    """The next working set (rows and their gᵢ) from the reduced pools (section 3).

    Always the maximal violating pair first, then: at least q candidates → one violator per
    class and condition, then candidates in pool order; fewer → all candidates, then the
    fill (non-candidates of smallest |eᵢ|).
    """
    n_cand = int(part.stats[_S_NCAND])
    pools: list[_Pool] = [s for s in (part.pair or []) if s is not None]
    if n_cand >= q:
        pools += [s for s in (part.special or []) if s is not None]
        if part.main is not None:
            pools.append(part.main)
    else:
        if part.main is not None:
            pools.append(part.main)
        if part.fill is not None:
            pools.append(part.fill)
    if not pools:
        return WorkingRows.empty(), np.zeros(0)
    rows = WorkingRows.concat([p.rows for p in pools])
    g = np.concatenate([p.g for p in pools])
    _, first = np.unique(rows.gids, return_index=True)
    first = np.sort(first)[:q]  # keep pool order: specials, then candidates, then fill
    return rows.take(first), g[first]


def _working_kernel(rows: WorkingRows, kp: KernelParams, n_features: int) -> np.ndarray:
    ip, ix, data = rows.csr()
    sq = rows.sq_norms()
    out = np.empty((rows.n, rows.n), dtype=np.float64)
    width = int(ix.max()) + 1 if ix.size else 1
    with thread_share():
        kernel_block_par(ip, ix, data, sq, ip, ix, data, sq, *kp.args(), width, out)
    return out


def _collect_fn(shard, positive, st):
    beta = st[0]
    idx = np.flatnonzero(beta > 0.0)
    return ([shard_rows(shard, idx, positive, beta)] if idx.size else None), st
