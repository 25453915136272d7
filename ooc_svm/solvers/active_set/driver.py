"""``--solver active-set``: Scheinberg's SVM-QP dual active-set method over streamed shards.

Problem (LIBSVM's C-SVC dual, Scheinberg 2006 eq. (2))::

    min_α  ½ αᵀQα − eᵀα    s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,     Q_ij = yᵢ yⱼ K(xᵢ, xⱼ)

with primal (3) and decision function f(x) = Σⱼ yⱼαⱼK(xⱼ, x) − β (intercept −β, β the
multiplier of yᵀα = 0 in system (5)). With Gᵢ = (Qα − e)ᵢ the *reduced cost* of a bound
variable is sᵢ = Gᵢ − βyᵢ for αᵢ = 0 (the primal slack, §2 Step 2(i)) and ξᵢ = −(Gᵢ − βyᵢ)
for αᵢ = C (the surplus).

Stopping rule (§2 Step 2(iii) with tolerance ``tol``, applied in a full pricing pass):
every bound variable has reduced cost ≥ −tol, i.e. yᵢf(xᵢ) ≥ 1 − tol where αᵢ = 0 and
yᵢf(xᵢ) ≤ 1 + tol where αᵢ = C, while the free variables solve the reduced problem (4)
exactly (yᵢf(xᵢ) = 1 up to rounding).

Method, following the paper section by section:

- §2, Steps 0–2: partition I₀ (α = 0), I_c (α = C), I_s (free). Step 1 solves the reduced
  problem (4) on I_s through the Cholesky factor of Q_ss and the Schur complement for β
  (system (5)), or takes an infinite descent direction when Q_ss is singular (§2.1 cases 1–3,
  in :mod:`.cholesky`), and steps along d until the first bound is hit (that index leaves to
  I₀ or I_c) or the optimum is reached. Step 2 prices the bound variables and moves the most
  negative reduced cost into I_s. Exact, finite steps; the factor is updated in O(n_s²)
  (§2.2), its accuracy probed and rebuilt when lost.
- §4.1, pricing: a *major iteration* is one streamed pass over all shards (per-row α and the
  un-biased score f live in per-shard state; f is updated from the α changes of the last
  major iteration, or computed from an explicit w for the linear kernel). It prices every
  bound variable and returns the rows with the smallest reduced costs as I₀′ ∪ I_c′. *Minor
  iterations* (the active-set steps) then price only I₀′ ∪ I_c′ in memory. ``sprint``
  (default) takes the ``sprint_size`` smallest reduced costs (negative or not) and keeps
  I₀′ ∪ I_c′ fixed during the major iteration; ``shrinking`` takes every negative reduced
  cost the memory budget allows and drops (shrinks) rows whose reduced cost stayed
  non-negative for ``shrink_after`` consecutive pricings; the next pass unshrinks all.
- §4.2, memory saving: only the Q columns of I_s restricted to the rows I_s ∪ I₀′ ∪ I_c′ are
  kept (the linear kernel keeps none: it prices from w), sized from ``cache_mb``.
- §4.3–4.4, warm start / incremental: ``init`` names a model of this store (or of a prefix of
  it, before ``ingest --append`` added rows); its dual coefficients, matched to rows by
  global row index (``model.support_``), give the starting α (rescaled by C/C_old when C
  changed; yᵀα = 0 restored). New rows start in I₀ and are priced like all others.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from ...kernels.kernel_functions import (
    KernelParams,
)
from .. import Callback, Result, binary_classes
from ..dual import (
    CheckpointClock,
    WorkingRows,
    check_interrupt,
    collect_support_vectors,
    dual_class_costs,
    dual_result,
    finish_run,
    interruptible,
    row_costs,
)
from ..params import as_params
from .checkpointing import _load_checkpoint, _Loop, _save_checkpoint
from .cholesky import ActiveFactor
from .columns import KernelColumns, LinearColumns
from .params import Params
from .passes import (
    _S_AQA,
    _S_CHINGE,
    _S_FREEV,
    _S_HINGE,
    _S_MAXV,
    _S_NC,
    _S_NSV,
    _S_NVIOL,
    _S_SUMA,
    _S_SUMYA,
    MajorBroadcast,
    MajorPartial,
    _collect_fn,
    _init_state,
    _major_fn,
    _major_reduce,
)
from .start import _candidate_count, _exp_tuple, _repair_equality, warm_start
from .working_set import S_FREE, S_UPPER, S_ZERO, Counters, WorkingSet

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...model.model import Model
    from ...store.base import Store

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# the solver
# ------------------------------------------------------------------------------------------


class _Run:
    """One training run: the constants, the state carried between major iterations
    (checkpointed by :func:`_save_checkpoint`) and the steps of a major iteration."""

    def __init__(self, store, engine, p: Params, callback, checkpoint):
        self.t0 = time.perf_counter()
        self.store, self.engine, self.p = store, engine, p
        self.callback, self.checkpoint = callback, checkpoint
        self.neg, self.pos = binary_classes(store.meta)
        self.meta = store.meta
        self.nf = int(self.meta.n_features)
        self.kp = KernelParams.from_params(p.kernel_dict(), self.nf)
        self.linear = self.kp.kernel == "linear"
        self.C, self.tol, self.seed = float(p.C), float(p.tol), int(p.seed)
        self.max_iter = int(p.max_iter)
        self.shrinking = p.pricing == "shrinking"
        self.shrink_after = int(p.shrink_after) if self.shrinking else None
        self.passes0 = engine.passes
        self.costs = dual_class_costs(store, engine, p, self.neg, self.pos)
        if self.costs is not None:
            log.info("active-set: class costs C_neg = %.6g, C_pos = %.6g", *self.costs)
        self.avg_nnz = self.meta.nnz / max(self.meta.n_rows, 1)
        self.clock = CheckpointClock(float(getattr(p, "checkpoint_seconds", 60.0)))
        # the state between major iterations
        self.state = engine.init_state(store, functools.partial(_init_state, self.linear))
        self.counters = Counters()
        self.history: list[dict] = []
        self.beta = 0.0
        self.w = np.zeros(self.nf) if self.linear else None
        self.delta = None
        self.upd_gids = np.zeros(0, dtype=np.int64)
        self.upd_alpha = np.zeros(0)
        self.s_rows = WorkingRows.empty()  # rows of I_s, in factor-key order 0..n_s−1
        self.s_gids = np.zeros(0, dtype=np.int64)
        self.factor = ActiveFactor(capacity=64)
        self.warm = p.init is not None
        self.keep_rows = False
        self.major = self.stall = 0
        self.hit_max_iter = self.converged = False
        self.stop_value = np.inf
        self.stats: np.ndarray | None = None

    # -- start: fresh, warm or resumed -------------------------------------------------------
    def start(self) -> None:
        resumed = _load_checkpoint(self.checkpoint, self.store, self.engine)
        if resumed is not None:
            (self.state, loop, self.s_rows, self.factor, self.counters, self.w, self.delta) = (
                resumed[:7]
            )
            self.upd_gids, self.upd_alpha, self.history, self.warm = resumed[7:]
            self.s_gids = self.s_rows.gids.copy()
            self.passes0 = self.engine.passes - loop.passes
            self.major, self.stall, self.beta = loop.major, loop.stall, loop.beta
            self.hit_max_iter, self.stop_value = loop.hit_max_iter, loop.stop_value
            log.info("active-set: resuming after major iteration %d", loop.major)
        elif self.warm:
            self._warm_start()

    def _warm_start(self) -> None:
        """§4.3–4.4: α, β (and w or the expansion to add to f) from the ``--init`` model."""
        warm_start(self)

    # -- one major iteration -----------------------------------------------------------------
    def major_pass(self) -> MajorPartial:
        """§4.1: one streamed pass applies the last changes and prices every bound row."""
        k = _candidate_count(
            self.p, self.s_gids.size, self.avg_nnz, self.linear, self.meta.n_rows, self.nf
        )
        tp = time.perf_counter()
        bc = MajorBroadcast(
            kp=self.kp,
            n_features=self.nf,
            C=self.C,
            beta=self.beta,
            positive=self.pos,
            tol=self.tol,
            k=k,
            seed=self.seed,
            upd_gids=self.upd_gids,
            upd_alpha=self.upd_alpha,
            keep_gids=np.sort(self.s_gids),
            keep_rows=self.keep_rows,
            w=self.w if self.linear else None,
            delta=None if self.linear else self.delta,
            max_value=0.0 if self.shrinking else np.inf,
            costs=self.costs,
        )
        res: MajorPartial = self.engine.map_reduce(
            self.store, _major_fn, bc, reduce=_major_reduce, state=self.state
        )
        self.major += 1
        self.stats = stats = res.stats
        if self.linear and res.w is not None:
            self.w = res.w.copy()
        self.stop_value = max(float(stats[_S_MAXV]), float(stats[_S_FREEV]))
        self._record(res, time.perf_counter() - tp)
        return res

    def objectives(self) -> tuple[float, float]:
        """(dual, primal) objective at the last pass."""
        st = self.stats
        aqa = float(st[_S_AQA]) if st is not None else 0.0
        dual = 0.5 * aqa - (float(st[_S_SUMA]) if st is not None else 0.0)
        if st is None:
            loss = 0.0
        elif self.costs is not None:  # Σ C_{y_i} ξᵢ
            loss = float(st[_S_CHINGE])
        else:
            loss = self.C * float(st[_S_HINGE])
        primal = 0.5 * aqa + loss
        return dual, primal

    def _record(self, res: MajorPartial, pass_seconds: float) -> None:
        stats = self.stats
        assert stats is not None  # after a major pass
        dual, primal = self.objectives()
        rec = {
            "iteration": self.major,
            "minor_iterations": self.counters.iterations,
            "violation": self.stop_value,
            "n_violators": int(stats[_S_NVIOL]),
            "dual_objective": dual,
            "objective": primal,
            "n_s": int(self.s_gids.size),
            "n_c": int(stats[_S_NC]),
            "n_sv": int(stats[_S_NSV]),
            "working_set": int(res.cand_rows.n + self.s_gids.size),
            "pass_seconds": pass_seconds,
            "seconds": time.perf_counter() - self.t0,
            "passes": self.engine.passes - self.passes0,
        }
        self.history.append(rec)
        if self.callback is not None:
            self.callback(rec)
        log.debug(
            "active-set major %d: violation %.3g, n_s %d, n_c %d, dual %.10g",
            self.major,
            self.stop_value,
            self.s_gids.size,
            int(stats[_S_NC]),
            dual,
        )

    def working_set(self, res: MajorPartial) -> WorkingSet:
        """W = I_s (kept) ∪ the candidates, their gradients, columns and factor."""
        C = self.C
        if self.keep_rows:
            kr = res.keep_rows
            assert kr is not None  # asked for with keep_rows
            self.s_rows = kr.take(np.argsort(kr.gids, kind="stable"))
            self.keep_rows = False
        s_rows = self.s_rows
        kf = dict(zip(res.keep_gids.tolist(), res.keep_f.tolist(), strict=True))
        f_s = np.array([kf[int(g)] for g in s_rows.gids]) if s_rows.n else np.zeros(0)
        n_s = s_rows.n
        W = WorkingRows.concat([s_rows, res.cand_rows, WorkingRows.empty()])
        if W is res.cand_rows:
            W = W.take(np.arange(W.n))
        G = W.y * np.concatenate([f_s, res.cand_f]) - 1.0
        status = _status(W.alpha, row_costs(W.y, C, self.costs))
        status[:n_s] = S_FREE
        fix_pos, fix_old = np.zeros(0, dtype=np.int64), np.zeros(0)
        if self.warm and self.major == 1:
            fix_pos, fix_old, status = self._repair(W, status)
        cols = self._columns(W, G, status, n_s, fix_pos, fix_old)
        if self.major == 1 or fix_pos.size:
            # (re)build the factor of Q_ss for the starting free set (warm start: §2.1 Case 3)
            free_pos = np.flatnonzero(status == S_FREE)
            self.factor = ActiveFactor(capacity=max(64, free_pos.size + 16))
            if free_pos.size:
                self.factor.refactor(free_pos, W.y[free_pos], cols.qss(free_pos))
        ws = WorkingSet(
            W,
            G,
            status,
            cols,
            self.factor,
            C,
            self.tol,
            self.beta,
            self.counters,
            shrink_after=self.shrink_after,
            seed=self.seed,
            costs=self.costs,
        )
        ws.max_bytes = int(float(self.p.cache_mb) * (1 << 20))
        if fix_pos.size:
            ws.alpha0[fix_pos] = fix_old
        return ws

    def _repair(self, W: WorkingRows, status: np.ndarray):
        """Warm start: restore yᵀα = 0 on the working rows (positions, old α, new status)."""
        C = self.C
        fix_pos, fix_old = np.zeros(0, dtype=np.int64), np.zeros(0)
        assert self.stats is not None  # after a major pass
        imb = float(self.stats[_S_SUMYA])
        if abs(imb) > 1e-12 * C * max(1.0, float(self.stats[_S_NSV])):
            a0 = W.alpha.copy()
            Cv = row_costs(W.y, C, self.costs)
            left = _repair_equality(W, status, C, imb, Cv)
            log.info(
                "active-set: warm start: restored y'alpha = 0 (imbalance %.3g, %.3g left)",
                imb,
                left,
            )
            fix_pos = np.flatnonzero(W.alpha != a0)
            fix_old = a0[fix_pos]
            status = _status(W.alpha, Cv)
        return fix_pos, fix_old, status

    def _columns(self, W, G, status, n_s, fix_pos, fix_old):
        """§4.2: the Q columns of I_s over W (G corrected for a warm-start repair)."""
        if self.linear:
            assert self.w is not None  # a linear run keeps w
            cols = LinearColumns(W, W.y, self.w, W.alpha, self.nf)
            if fix_pos.size:
                cols.aflush[fix_pos] = fix_old
                cols.full(W.alpha, G)
            return cols
        kcols = KernelColumns(W, W.y, self.kp, self.nf, int(1.25 * max(n_s, 16)) + 32)
        if fix_pos.size:
            blk = kcols.kernel_block(fix_pos) * W.y[:, None] * W.y[fix_pos][None, :]
            G += blk @ (W.alpha[fix_pos] - fix_old)
        free_pos = np.flatnonzero(status == S_FREE)
        kcols.fill(free_pos, W.alpha[free_pos])
        return kcols

    def minor(self, ws: WorkingSet) -> bool:
        """§2: the active-set iterations on W; False when the run should stop (stall)."""
        ok = ws.run(self.max_iter - self.counters.iterations, 0.5 * self.tol)
        if not ok:
            log.warning("active-set: stopped at max_iter=%d minor iterations", self.max_iter)
            self.hit_max_iter = True
        self.beta = ws.beta
        self.counters.peak_bytes = max(self.counters.peak_bytes, ws.nbytes())
        ch_rows, ch_old = ws.changes()
        if ch_rows.n == 0 and not self.hit_max_iter:
            self.stall += 1
            if self.stall >= 3:
                log.warning(
                    "active-set: no progress in 3 major iterations (violation %.3g > "
                    "tol %.3g); stopping",
                    self.stop_value,
                    self.tol,
                )
                return False
        else:
            self.stall = 0
        self._hand_over(ws, ch_rows, ch_old)
        return True

    def _hand_over(self, ws: WorkingSet, ch_rows: WorkingRows, ch_old: np.ndarray) -> None:
        """The α changes go to the shards with the next pass; the free rows become I_s."""
        order = np.argsort(ch_rows.gids, kind="stable")
        ch_rows = ch_rows.take(order)
        ch_old = ch_old[order]
        self.upd_gids = ch_rows.gids.copy()
        self.upd_alpha = ch_rows.alpha.copy()
        if self.linear:
            ws.cols.full(ws.alpha, ws.Gbase)
            self.w = ws.cols.w[: self.nf].copy()
            self.delta = None
        else:
            self.delta = _exp_tuple(ch_rows, ch_rows.y * (ch_rows.alpha - ch_old))
        # the free rows in factor-key order become positions 0..n_s−1
        keys = self.factor.keys()
        mapping = np.full(ws.rows.n, -1, dtype=np.int64)
        mapping[keys] = np.arange(keys.size)
        self.factor.remap(mapping)
        self.s_rows = ws.rows.take(keys)
        self.s_gids = self.s_rows.gids.copy()

    def save(self) -> None:
        """Checkpoint the state when one is due (:meth:`CheckpointClock.maybe_save`)."""
        self.clock.maybe_save(self.checkpoint, self._write_checkpoint)

    def _write_checkpoint(self) -> None:
        loop = _Loop(
            self.major,
            self.stall,
            self.beta,
            self.hit_max_iter,
            self.stop_value,
            self.engine.passes - self.passes0,
        )
        _save_checkpoint(
            self.checkpoint,
            self.engine,
            self.state,
            loop,
            self.s_rows,
            self.factor,
            self.counters,
            self.w if self.linear else None,
            self.delta,
            self.upd_gids,
            self.upd_alpha,
            self.history,
            self.warm,
        )

    # -- the end ----------------------------------------------------------------------------
    def result(self) -> Result:
        """The model (support vectors collected in one pass), the independent KKT check."""
        C, c = self.C, self.counters
        sv = collect_support_vectors(self.store, self.engine, self.state, self.pos, _collect_fn)
        intercept = -self.beta
        dual, primal = self.objectives()
        info = {
            "solver": "active-set",
            "C": C,
            "tol": self.tol,
            "pricing": self.p.pricing,
            "dual_objective": dual,
            "objective": primal,
            "converged": self.converged,
        }
        if self.costs is not None:
            info["class_costs"] = list(self.costs)
        # linear models keep the dual coefficients (by global row) to warm-start a new run
        fin = finish_run(self, sv, intercept, info, check=self.p.check)
        summary = {
            "n_s": int(self.s_gids.size),
            "n_c": int(np.sum(sv.alpha >= row_costs(sv.y, C, self.costs))) if sv.n else 0,
            "n_sv": int(sv.n),
            "major_iterations": self.major,
            "minor_iterations": c.iterations,
            **{k: getattr(c, k) for k in _SUMMARY_COUNTERS},
            "working_set_peak_mb": c.peak_bytes / (1 << 20),
            "pricing": self.p.pricing,
            "converged": self.converged,
            "intercept": intercept,
            "warm_start": self.warm,
        }
        if self.costs is not None:
            summary["class_costs"] = list(self.costs)
        if fin.kkt is not None:
            chk = fin.kkt
            summary["kkt_max_violation"] = chk["max_violation"]
            summary["kkt_n_violators"] = chk["n_violators"]
            summary["kkt_ok"] = chk["ok"]
            summary["kkt_gap"] = chk["gap"]
            summary["kkt_source"] = chk.get("source", "exact")
            summary["kkt_drift"] = chk.get("drift")
        seconds = time.perf_counter() - self.t0
        summary["seconds"] = seconds
        return dual_result(
            self, fin.model, primal, dual, c.iterations, seconds, self.stop_value, summary,
            self.hit_max_iter,
        )  # fmt: skip


#: counters reported in the summary under their own names
_SUMMARY_COUNTERS = (
    "entered",
    "left",
    "infinite_steps",
    "degenerate_steps",
    "refactorisations",
    "probe_checks",
    "max_dependent",
    "pricings",
    "shrunk",
    "memory_stops",
)


def _status(alpha: np.ndarray, C) -> np.ndarray:
    """S_ZERO / S_UPPER / S_FREE of each α (``C``: one bound or each row's C_{y_i})."""
    return np.where(alpha <= 0.0, S_ZERO, np.where(alpha >= C, S_UPPER, S_FREE))


@interruptible
def solve(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train with the active-set method (see the module docstring).

    Parameters
    ----------
    store : Store
        Binary-labelled store.
    engine : Engine
    params : Params
        (or a dict of its fields)
    callback : callable, optional
        Called with one record per major iteration.
    checkpoint : Checkpointer, optional
        Saves the state after major iterations (see :class:`CheckpointClock`); with
        ``checkpoint.resume`` the run continues from the latest checkpoint and ends with the
        same model.

    Returns
    -------
    Result
        ``iterations`` counts minor (active-set) iterations; ``summary`` has ``n_s``, ``n_c``,
        ``major_iterations``, ``minor_iterations``, ``refactorisations`` and more.
    """
    p = as_params(Params, params)
    p.validate(store.meta)
    run = _Run(store, engine, p, callback, checkpoint)
    run.start()
    while True:
        check_interrupt()
        res = run.major_pass()
        if run.hit_max_iter:
            break
        if run.stop_value <= run.tol:
            run.converged = True
            break
        ws = run.working_set(res)
        if not run.minor(ws):
            break
        del ws
        run.save()
    return run.result()


def solve_warm(
    store: Store,
    engine: Engine,
    params: Params,
    init: Model | None,
    *,
    callback: Callback | None = None,
) -> Result:
    """:func:`solve` started from ``init`` (a C sweep's next value: a model of this store at
    another C, or its :class:`~..warm.Start`; None: cold) by Scheinberg's incremental mode
    (§4.3–4.4): ``init`` is passed as ``init=``, as ``--init`` is."""
    if init is None:
        return solve(store, engine, params, callback=callback)
    from ..warm import start_from

    p = as_params(Params, params).replace(init=start_from(init, store.meta))
    return solve(store, engine, p, callback=callback)
