"""``--variant dcd``: block-minimization dual coordinate descent over the shards.

Problem: perf's (and LIBLINEAR ``-s 3 -B bias``'s) primal over x̃ᵢ = (xᵢ, bias), the bias a
constant feature regularised with w::

    min_w  P(w) = ½‖w‖² + Σᵢ Cᵢ ℓ(1 − yᵢwᵀx̃ᵢ),   ℓ(t) = max(0, t)  (``hinge="l1"``)
                                                 ℓ(t) = max(0, t)²  (``hinge="l2"``, ``-s 1``)

solved in its dual D(α) = Σαᵢ − ½‖Σαᵢyᵢx̃ᵢ‖² − ½ΣDᵢᵢαᵢ² (0 ≤ αᵢ ≤ Uᵢ; :mod:`._numba.dcd`)
by the dual coordinate descent of Hsieh et al. (ICML 2008, Algorithm 1, shrinking as in
Section 3.2). When the rows fit the memory budget they are held as one block and every epoch
sweeps all the active rows in one seeded random order, as LIBLINEAR's
``solve_l2r_l1l2_svc``; otherwise by block minimization (Yu, Hsieh, Chang, Lin, *Large Linear
Classification When Data Cannot Fit in Memory*, KDD 2010, Algorithm 2): the blocks are the
store's shards, read and visited in a seeded random order every epoch, each visit one sweep
over the block's active rows in a seeded random order. w = Σαᵢyᵢx̃ᵢ (dense float64, over
the columns the store holds when it is wide, most frequent first) and the per-row state (α,
Q̄ᵢᵢ, the margins at the best point and at the last measured w, sign and place in the active
order, α of the epoch being certified: 45 bytes a row) stay in memory; the rows are held
decoded when they fit ``--inner-mb`` (default: half the memory budget) and read again
every epoch otherwise.

Certificate (:mod:`.dcd_cert`): a pass over the rows after the first epoch and then each time
the rows swept reach the number of rows gives the best primal point on the segment from the
best point so far to the epoch's w, P(w_b), and D(α); the run stops when P(w_b) − D(α) ≤
ε·min(C·n, P(w_b)) (:func:`.dcd_cert.gap_scale`), so P(w_b) ≤ P* + C·n·ε and P(w_b) ≤ P*/(1 − ε)
(D(α) ≤ P* by weak duality), and returns w_b. The losses are
summed block by block in shard order and the schedule depends on the active counts only: the
model is the same bits for any number of threads and either engine, and a function of
``--seed`` (held and streamed rows take different paths to the same certificate).
"""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.base import concat_partials
from ...model.model import Model
from ...sizes import sizes_of
from .. import Result, SolverError, binary_classes
from ._numba.dcd import (
    add_rows,
    alpha_terms,
    count_columns,
    dcd_sweep,
    remap_columns,
    row_norms,
)
from .common import _finite, _Progress, _resolve_C
from .dcd_cert import Best, Schedule, _Cert, certify
from .dcd_warm import alpha_start, attach_alpha, clipped
from .params import remap_min_dim

if TYPE_CHECKING:
    from ...engine.base import Engine
    from ...store.base import Store
    from .. import Callback
    from .params import Params

log = logging.getLogger(__name__)

#: bytes a row of per-row state costs (α, Q̄ᵢᵢ and the margins at the best point and at the
#: last measured w: float64; place in the active order: int32; sign: int8; α of the epoch
#: whose certificate runs beside the sweeps: float64)
STATE_BYTES_PER_ROW = 45

#: decoded bytes of a held block: CSR (8 per non-zero: int32 column + float32 value; int64
#: row pointer) and the per-row state
HELD_BYTES_PER_NNZ = 8
HELD_BYTES_PER_ROW = 8 + STATE_BYTES_PER_ROW

#: dcd trains over the columns the rows hold, most frequent first, from this width on (below
#: the other variants' ``REMAP_MIN_DIM``): the hot columns of w share cache lines (criteo
#: shape, 1M rows over 1M columns: 0.78 CPU s an epoch against 0.84)
REMAP_MIN_DIM_DCD = 1 << 16

#: LIBLINEAR's tolerance on the spread of projected gradients of the active rows below which
#: shrunk rows come back (it is divided by 10 each time all rows are active and the
#: certificate still does not hold)
PG_TOL = 0.1


@dataclass
class _Block:
    """One shard's rows and their dual state."""

    sid: int
    n_rows: int
    sign: np.ndarray
    alpha: np.ndarray
    qd: np.ndarray
    index: np.ndarray
    n_active: int
    #: margins yᵢ w·x̃ᵢ at the best point and at the last measured w (:mod:`.dcd_cert`)
    mb: np.ndarray
    mc: np.ndarray
    #: CSR arrays (columns remapped when the run is) while held; None when streamed
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    data: np.ndarray | None = None


def _whole_shard(shard: Any, bc: Any) -> list:
    """Pass function that hands the shard itself to the driver (``[(index, shard)]``)."""
    return [(int(bc[0]) if bc is not None else 0, shard)]


def _shard_list(shard: Any, bc: Any) -> list:
    """Pass function of the loading pass: ``[shard]`` (gathered in shard order)."""
    return [shard]


@dataclass
class _Rows:
    """The held shards' rows as one CSR block (what :meth:`_Run._new_block` reads)."""

    n_rows: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray


def _merged(shards: list) -> _Rows:
    """All the shards' rows as one block, in shard order; each shard is let go once copied
    (so the peak is the rows once plus a shard). Held rows are swept in one random order
    over all of them, as LIBLINEAR does: sweeping shard after shard (block minimization)
    made far less progress per epoch on data whose shards differ (kdd2010-shaped 200,000
    rows: P 6,128 against 3,268 after 30 epochs with five blocks)."""
    n = sum(int(sh.n_rows) for sh in shards)
    nnz = sum(int(sh.indptr[-1]) for sh in shards)
    ix_type = np.result_type(*[sh.indices.dtype for sh in shards]) if shards else np.int32
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=ix_type)
    data = np.empty(nnz, dtype=np.float32)
    y = np.empty(n, dtype=np.asarray(shards[0].y).dtype if shards else np.float64)
    r = k = 0
    for j in range(len(shards)):
        sh, shards[j] = shards[j], None
        m, z = int(sh.n_rows), int(sh.indptr[-1])
        indptr[r + 1 : r + m + 1] = np.asarray(sh.indptr[1:], dtype=np.int64) + k
        indices[k : k + z] = sh.indices[:z]
        data[k : k + z] = sh.data[:z]
        y[r : r + m] = sh.y
        r, k = r + m, k + z
        del sh
    return _Rows(n, indptr, indices, data, y)


def _sign(y: np.ndarray, pos: float) -> np.ndarray:
    return np.where(y == pos, 1, -1).astype(np.int8)


class _Run:
    """Constants and state of one dcd run."""

    def __init__(self, store: Store, engine: Engine, params: Params, callback: Callback | None):
        meta = store.meta
        self.store, self.engine, self.params = store, engine, params
        self.neg, self.pos = binary_classes(meta)
        self.n, self.d = int(meta.n_rows), int(meta.n_features)
        self.C = _resolve_C(params, self.n)
        self.eps = float(params.eps)
        self.bias = float(params.bias)
        self.squared = params.hinge == "l2"
        self.costs = np.array([self.C, self.C])
        if params.class_weight is not None:
            from .error import relative_costs

            n_pos = None
            if str(params.class_weight).strip() == "balanced":
                n_pos = self._count_pos()
            sw = relative_costs(params.class_weight, self.neg, self.pos, n_pos, self.n)
            self.costs = np.array([self.C * sw[0], self.C * sw[1]])
        if self.squared:
            self.upper = np.array([np.inf, np.inf])
            self.diag = 0.5 / self.costs
        else:
            self.upper = self.costs.copy()
            self.diag = np.zeros(2)
        self.prog = _Progress(engine, callback)
        self.blocks: list[_Block] = []
        self.cols: np.ndarray | None = None  # the store's column of each remapped id
        self.gmap: np.ndarray | None = None  # remap kept for streamed blocks
        self.held = False
        self.warm = False  # started from a model's α
        self.threads = max(1, int(getattr(engine, "n_threads", 1) or 1))

    def _count_pos(self) -> int:
        from .passes import pass_count_pos

        part = self.engine.map_reduce(self.store, pass_count_pos, (self.pos,))
        return int(part["n_pos"][0])

    # -- blocks -----------------------------------------------------------------------------
    def hold_budget(self) -> float:
        """Bytes of decoded blocks that may stay in memory between epochs: ``--inner-mb``, or
        for ``auto[:SHARE]`` that share of the memory budget left besides perf's own claims
        (the room :mod:`.auto` chose dcd by, resolved once by the command and handed down:
        ``room`` of :class:`ooc_svm.sizes.Sizes`; at most what the blocks need). The engine's
        automatic shard cache is sized on its first pass, after this choice: reading it here
        gave 0 and every epoch read the store again."""
        sizes = sizes_of(self.engine, self.params.OWN_CLAIMS)
        share = self.params.inner_auto_share()
        if share is not None:
            return float(min(share * sizes.room, self.held_bytes()))
        return self.params.inner_mib(sizes) * 2**20

    def held_bytes(self) -> float:
        meta = self.store.meta
        return HELD_BYTES_PER_NNZ * float(meta.nnz) + HELD_BYTES_PER_ROW * float(self.n)

    def prepare(self, alpha0: np.ndarray | None = None) -> np.ndarray:
        """Read the blocks once: held as one block (remapped when wide) if they fit the budget,
        else one block a shard with only its per-row state (the rows are read again every
        epoch). Returns the start w = Σαᵢyᵢx̃ᵢ of ``alpha0`` (α over the store's rows, a warm
        start: :mod:`.dcd_warm`), zeros without it."""
        self.held = self.held_bytes() <= self.hold_budget()
        wide = self.d >= min(remap_min_dim(), REMAP_MIN_DIM_DCD)
        if self.held:
            shards = self.engine.map_reduce(self.store, _shard_list, None, reduce=concat_partials)
            self.blocks.append(self._new_block(0, _merged(list(shards or [])), keep=True))
            del shards
            self.engine.release_buffers()
            if wide:
                self._remap_held()
            self.dim = (self.d if self.cols is None else int(self.cols.shape[0])) + 1
            w = np.zeros(self.dim)
            if alpha0 is not None:
                self._start(self.blocks[0], alpha0, 0, self.rows(self.blocks[0]), w)
        else:
            if wide:
                from .passes import column_remap, pass_column_counts, reduce_cut

                part = self.engine.map_reduce(
                    self.store, pass_column_counts, (self.d,), reduce=reduce_cut
                )
                self.gmap, self.cols = column_remap(part["g"], self.d)
            self.dim = (self.d if self.cols is None else int(self.cols.shape[0])) + 1
            w = np.zeros(self.dim)
            r0 = 0
            for sid in range(self.store.n_shards):
                shard = self._fetch(sid)
                blk = self._new_block(sid, shard, keep=False)
                self.blocks.append(blk)
                if alpha0 is not None:
                    self._start(blk, alpha0, r0, self.rows(blk, shard), w)
                r0 += blk.n_rows
                del shard
        log.info(
            "perf dcd: %d blocks, %s, w over %d columns",
            len(self.blocks),
            "held in memory" if self.held else "read every epoch",
            self.dim - 1,
        )
        return w

    def _new_block(self, sid: int, shard: Any, keep: bool) -> _Block:
        n = int(shard.n_rows)
        sign = _sign(np.asarray(shard.y), self.pos)
        qd = np.empty(n)
        row_norms(shard.indptr, shard.data, self.bias, sign, self.diag, qd)
        blk = _Block(
            sid=sid, n_rows=n, sign=sign, alpha=np.zeros(n), qd=qd,
            index=np.arange(n, dtype=np.int32), n_active=n, mb=np.zeros(n), mc=np.zeros(n),
        )  # fmt: skip
        if keep:
            blk.indptr, blk.indices, blk.data = shard.indptr, shard.indices, shard.data
        return blk

    def _start(self, blk: _Block, alpha0: np.ndarray, r0: int, rows: tuple, w: np.ndarray) -> None:
        """A warm start's α of the block (rows ``r0`` on of ``alpha0``, in the run's bounds)
        and ``w += Σαᵢyᵢx̃ᵢ`` over its ``rows``."""
        blk.alpha[:] = clipped(alpha0[r0 : r0 + blk.n_rows], blk.sign, self.upper)
        ip, ix, dt = rows
        add_rows(ip, ix, dt, blk.sign, blk.alpha, self.bias, w)

    def _remap_held(self) -> None:
        """Translate the held blocks to the columns they hold, most frequent first (ties by
        column), dropping the store's column ids."""
        counts = np.zeros(self.d, dtype=np.int32)
        for b in self.blocks:
            count_columns(b.indices, counts)
        held = np.flatnonzero(counts)
        order = np.argsort(-counts[held], kind="stable")
        self.cols = held[order].astype(np.int64)
        del held, order
        gmap = counts  # reused: int32 over the width
        gmap.fill(-1)
        gmap[self.cols] = np.arange(self.cols.shape[0], dtype=np.int32)
        for b in self.blocks:  # one block at a time: its store ids go before the next
            ix = np.empty(b.indices.shape[0], dtype=np.int32)  # type: ignore[union-attr]
            remap_columns(b.indices, gmap, ix)
            b.indices = ix
            del ix
            self.engine.release_buffers()
        del gmap, counts

    def _fetch(self, sid: int) -> Any:
        parts = self.engine.map_reduce(
            self.store, _whole_shard, (sid,), reduce=concat_partials, shards=[sid]
        )
        return parts[0][1]

    def rows(self, blk: _Block, shard: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A block's CSR arrays in the run's column space."""
        if blk.indptr is not None:
            return blk.indptr, blk.indices, blk.data  # type: ignore[return-value]
        ix = shard.indices
        if self.gmap is not None:
            ix = np.empty(shard.indices.shape[0], dtype=np.int32)
            remap_columns(shard.indices, self.gmap, ix)
        return shard.indptr, ix, shard.data

    def visit(self, order: list[int]):
        """Yield ``(block, (indptr, indices, data))`` in ``order``; streamed blocks are read
        one ahead on a helper thread."""
        if self.held:
            for k in order:
                blk = self.blocks[k]
                yield blk, self.rows(blk)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="ooc-svm-dcd") as pool:
            nxt = pool.submit(self._fetch, order[0]) if order else None
            for j, k in enumerate(order):
                shard = nxt.result()  # type: ignore[union-attr]
                nxt = pool.submit(self._fetch, order[j + 1]) if j + 1 < len(order) else None
                blk = self.blocks[k]
                yield blk, self.rows(blk, shard)
                del shard

    # -- the certificate --------------------------------------------------------------------
    def alpha_sums(self) -> tuple[float, float]:
        """(Σαᵢ, Σ Dᵢᵢαᵢ²), summed block by block in shard order."""
        asum = asq = 0.0
        for b in self.blocks:
            s, q = alpha_terms(b.sign, b.alpha, self.diag)
            asum += s
            asq += q
        return asum, asq


def _sweep_seed(seed: int, epoch: int, sid: int) -> int:
    """The seed of block ``sid``'s order in ``epoch`` (a fixed function of the three)."""
    h = (int(seed) * 0x9E3779B1 + epoch * 0x85EBCA77 + sid * 0xC2B2AE3D) & ((1 << 63) - 1)
    return h


def solve_dcd(
    store: Store,
    engine: Engine,
    params: Params,
    callback: Callback | None = None,
    checkpoint: Any = None,
) -> Result:
    """Train by block-minimization dual coordinate descent (see the module docstring)."""
    if checkpoint is not None:
        raise SolverError(
            "perf --variant dcd does not save checkpoints; train without --checkpoint (an "
            "epoch over data that fits in memory takes seconds) or use --variant accelerated"
        )
    t0 = time.perf_counter()
    run = _Run(store, engine, params, callback)
    alpha0 = None
    if params.init is not None:  # train --init: the model's α (module dcd_warm)
        alpha0 = alpha_start(params.init, store.meta, [run.neg, run.pos], run.C)
    w = run.prepare(alpha0)
    run.warm = alpha0 is not None
    del alpha0
    run.prog.t0 = t0
    # with held blocks and a second thread, the certificate pass of epoch e runs on a copy
    # of w while the next epochs sweep; the run stops at the first certified epoch and
    # returns its best point: the model and the epochs are those of the serial order
    overlap = run.held and run.threads > 1
    pool = ThreadPoolExecutor(1, thread_name_prefix="ooc-svm-dcd") if overlap else None
    try:
        final, last = _loop(run, params, w, pool)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    best, D, stop = last
    converged = stop <= run.eps
    if not converged:
        log.warning(
            "perf dcd: stopped after %d epochs (max_iter) with gap %.3g > eps", final.epoch, stop
        )
    return _result(run, best, D, final, converged, stop)


def _loop(
    run: _Run, params: Params, w: np.ndarray, pool: ThreadPoolExecutor | None
) -> tuple[_Cert, tuple[Best, float, float]]:
    """The epochs, until a measured epoch is certified or ``max_iter``: (that epoch, its
    (best point, D, gap / (C n)))."""
    rng = np.random.default_rng(int(params.seed))
    Cn = run.C * run.n
    pg_max_old, pg_min_old, pg_tol = math.inf, -math.inf, PG_TOL
    shrink = bool(params.shrinking)
    sched = Schedule(run.n)
    best = Best(np.zeros(run.dim), math.inf, math.inf)
    snap = np.empty(run.dim) if pool is not None else w
    max_iter = max(1, int(params.max_iter))
    pending: _Cert | None = None
    last: tuple[Best, float, float] | None = None
    epoch = 0
    while True:
        epoch += 1
        te = time.perf_counter()
        swept = sum(b.n_active for b in run.blocks)
        order = [int(k) for k in rng.permutation(len(run.blocks))]
        pg_max, pg_min, active = _sweep_epoch(
            run, order, w, pg_max_old, pg_min_old, int(params.seed), epoch, shrink
        )
        spread = pg_max - pg_min
        due = sched.after(swept) or epoch >= max_iter
        if pending is not None and (due or pending.best.done()):
            last = pending.finish(Cn)
            best = last[0]
            _emit(run, pending, last)
            if last[2] <= run.eps:
                return pending, last
            pending = None
        if due:
            asum, asq = run.alpha_sums()
            fut: Any
            if pool is not None:
                np.copyto(snap, w)
                fut = pool.submit(certify, run, best, snap, 1)
            else:
                fut = certify(run, best, w, run.threads)
            snap_a = [b.alpha.copy() for b in run.blocks] if pool is not None else None
            pending = _Cert(epoch, asum, asq, float(np.dot(w, w)), active, spread,
                            time.perf_counter() - te, fut, snap_a)  # fmt: skip
            if pool is None or epoch >= max_iter:
                last = pending.finish(Cn)
                best = last[0]
                _emit(run, pending, last)
                if last[2] <= run.eps or epoch >= max_iter:
                    return pending, last
                pending = None
        # shrinking (LIBLINEAR): rows come back when the active ones are optimal to pg_tol
        if spread <= pg_tol:
            if active == run.n:
                pg_tol /= 10.0
            for b in run.blocks:
                b.n_active = b.n_rows
            pg_max_old, pg_min_old = math.inf, -math.inf
            continue
        pg_max_old = pg_max if pg_max > 0 else math.inf
        pg_min_old = pg_min if pg_min < 0 else -math.inf


def _sweep_epoch(
    run: _Run,
    order: list[int],
    w: np.ndarray,
    pg_max_old: float,
    pg_min_old: float,
    seed: int,
    epoch: int,
    shrink: bool,
) -> tuple[float, float, int]:
    """One epoch: every block swept once in ``order`` (its α and ``w`` updated in place);
    returns the largest and smallest projected gradient and the rows left active."""
    pg_max, pg_min, active = -math.inf, math.inf, 0
    for blk, (ip, ix, dt) in run.visit(order):
        blk.n_active, bmax, bmin = dcd_sweep(
            ip, ix, dt, blk.sign, blk.alpha, blk.qd, blk.index, blk.n_active, w,
            run.bias, run.upper, run.diag, pg_max_old, pg_min_old,
            _sweep_seed(seed, epoch, blk.sid), shrink,
        )  # fmt: skip
        pg_max, pg_min = max(pg_max, bmax), min(pg_min, bmin)
        active += blk.n_active
    return pg_max, pg_min, active


def _emit(run: _Run, ep: _Cert, vals: tuple[Best, float, float]) -> None:
    best, D, stop = vals
    run.prog.emit(
        {
            "iteration": ep.epoch,
            "objective": best.P,
            "xi": best.loss / (run.C * run.n),
            "violation": stop,
            "working_set": ep.active,
            "pass_seconds": ep.seconds,
            "lower_bound": D,
            "pg_spread": ep.spread,
        }
    )


def _result(run: _Run, best: Best, D: float, final: _Cert, converged: bool, stop: float) -> Result:
    """The model at the best point of the certified (or last measured) epoch."""
    w, P, loss, epochs = best.w, best.P, best.loss, final.epoch
    d = run.d
    coef = np.zeros(d)
    if run.cols is None:
        coef[:] = w[:d]
    else:
        coef[run.cols] = w[: run.cols.shape[0]]
    bias_w = float(w[-1])
    costs = [float(run.costs[0]), float(run.costs[1])]
    weighted = run.params.class_weight is not None
    info = {
        "solver": "perf",
        "loss": "error",
        "variant": "dcd",
        "hinge": run.params.hinge,
        "C": run.C,
        "C_perf": run.C * run.n,
        "eps": run.eps,
        "bias": run.bias,
        "objective": P,
        "iterations": epochs,
        "converged": converged,
    }
    if weighted:
        info["class_costs"] = costs
    if run.warm:
        info["warm_start"] = True
    model = Model(
        kind="linear",
        n_features=d,
        classes=[run.neg, run.pos],
        coef_=coef,
        intercept_=bias_w * run.bias,
        info=info,
    )
    if run.params.warm_state:
        alphas = final.alphas if final.alphas is not None else [b.alpha for b in run.blocks]
        attach_alpha(model, alphas, run.C, run.params.hinge)
    active = final.active
    summary = {
        "variant": "dcd",
        "loss": "error",
        "hinge": run.params.hinge,
        "xi": loss / (run.C * run.n),
        "lower_bound": _finite(D),
        "C": run.C,
        "epochs": epochs,
        "blocks": len(run.blocks),
        "held": run.held,
        "columns": run.dim - 1,
        "active_rows": active,
        "warm_start": run.warm,
        "converged": converged,
        **({"class_costs": costs} if weighted else {}),
    }
    return Result(
        model=model,
        objective=P,
        dual_objective=-D if math.isfinite(D) else None,
        iterations=epochs,
        passes=run.prog.passes(),
        seconds=time.perf_counter() - run.prog.t0,
        stop_value=float(stop),
        history=run.prog.history,
        summary=summary,
        converged=converged,
    )
