"""IRWLS-SVC with chunking (``--solver irwls``): Pérez-Cruz, Alarcón-Diana, Navia-Vázquez and
Artés-Rodríguez, *Fast training of support vector classifiers* (NIPS 2000).

Problem
-------
The standard soft-margin SVC, linear or kernel, with labels yᵢ ∈ {−1, +1}::

    primal:  min_{w,b}  ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(φ(xᵢ)ᵀw + b))
    dual:    min_β  ½ βᵀHβ − 1ᵀβ   s.t.  0 ≤ βᵢ ≤ C,  yᵀβ = 0,   Hᵢⱼ = yᵢyⱼK(xᵢ, xⱼ)

(LIBSVM's sign convention for the dual objective; β is LIBSVM's α). w = Σᵢ βᵢyᵢφ(xᵢ).

Method (paper section 2 and 2.1)
--------------------------------
With eᵢ = yᵢ − f(xᵢ) the error of sample i (so uᵢ = yᵢeᵢ = 1 − yᵢf(xᵢ) is its hinge argument),
the primal is rewritten as the weighted least-squares problem
½‖w‖² + ½ Σᵢ aᵢeᵢ² with aᵢ = C/(eᵢyᵢ) for eᵢyᵢ ≥ 0 and 0 otherwise (eq. 8). With the aᵢ fixed
its minimum solves the linear system (3) ``[[H + D_a⁻¹, y], [yᵀ, 0]]·[β; b] = [1; 0]``;
IRWLS alternates solving it and recomputing the aᵢ. The samples are split into three sets,
S₁ (0 < βᵢ < C, solved for), S₂ (βᵢ = 0) and S₃ (βᵢ = C), and the system is solved for S₁ only
(size |S₁| + 1, Cholesky of the Schur complement, LU when that fails), with the fixed S₃
multipliers (and, in chunking, every support vector outside the working set) moved to the
right-hand side as G_in / G_bin (Table 1, steps 1 and 5). Sets reordering (Table 1 step 4):
S₃ samples with eᵢyᵢ < 0 go to S₂; S₁ samples with βᵢ ≥ C go to S₃; S₁ samples with aᵢ = 0 go
to S₂; S₂ samples with aᵢ ≠ 0 go to S₁.

This implementation's choices where the paper is silent or garbled (Table 1), each measured
on a9a / mushrooms working sets before being adopted:

* *Step rule with guaranteed descent.* With the sets chosen from the signs of the current
  errors and aᵢ from eq. (8), the weighted problem is tangent to the working-set primal
  objective P(β, b) = ½βᵀH_WWβ + C Σ_{i∈W} max(0, uᵢ) + λb (λ = yᵀβ_W, the term the chunking
  constraint adds), so the segment old → new is a descent direction of P. The full step is
  taken when P does not exceed the largest of its last 10 values (a non-monotone window,
  Grippo, Lampariello & Lucidi 1986); otherwise the exact minimiser of the convex
  piecewise-quadratic P along the segment (breakpoints sorted) is taken. If a corrected step
  (below) finds no decrease, the plain step is used; if that finds none either, the
  working-set problem stops. Independently, only dual-feasible iterates (full steps whose S₁
  values lie in [0, C]) are ever returned, the best of them by the working-set dual objective
  (the starting point included), so the dual objective of the whole problem never
  increases from one outer iteration to the next.
* Weights aᵢ = C / max(uᵢ, 1e-3·inner_tol) keep D_a⁻¹ bounded away from 0.
* Rule a releases an S₃ sample with eᵢyᵢ < 0 to S₁ (where the system places it on the margin)
  instead of dropping it to S₂ (β = 0): measured 158 → 10 IRWLS iterations per working set.
* Rule b, relaxed: an S₁ sample whose new βᵢ ≥ C/2 while it still violates the margin
  (uᵢ > inner_tol) goes to S₃. With the paper's βᵢ ≥ C, such samples approach C only
  geometrically (βᵢ = C·u_new/u_old) and dominate the iteration count.
* Set corrections: when the solution of (3) contradicts the sets (S₁ values outside [0, C];
  then S₂/S₃ samples the step would carry across the margin) the sets are corrected and (3)
  re-solved, up to 5 times, before stepping. On rank-deficient kernels (linear kernel on
  binary data) this can cycle; when no descent is found, or after 50 iterations, the plain
  IRWLS step is used.
* Each working-set problem is warm-started from the current β, b (the paper restarts from
  β = 0, S₁ = W) and solved to ``0.1 * tol``.

Chunking (section 2.1) and working-set selection (section 3)
-----------------------------------------------------------
One streamed pass over the store per outer iteration (``engine.map_reduce``; β and
gᵢ = Σⱼ βⱼyⱼK(xⱼ, xᵢ) live in per-shard state, the linear kernel keeps w explicitly on the
driver, so G_in of a working-set row is gᵢ minus the working set's own contribution) applies
the previous working set's change, computes every eᵢ, checks the stopping conditions and
draws the next working set of ``working_set`` = q rows in the same pass: each shard keeps
bounded pools (at most q rows each, with their CSR data) and the pools are merged
deterministically (smallest (key, row) first), so no row is read at random afterwards.
Strategies (``--strategy``):

* ``random`` (the paper's): candidates = violators of (9), (10) and every free SV; when there
  are at least q candidates, one violator per class and per condition (9)–(11), the rest drawn
  uniformly at random (bottom-q of per-row random keys from an RNG seeded by (seed, iteration,
  shard), so the draw does not depend on the engine or the worker count); otherwise all
  candidates, completed with the non-candidates of smallest |eᵢ|.
* ``largest`` / ``smallest``: the violators of (9)–(11) with the largest / smallest |eᵢ|
  (plus one per class and condition), completed likewise.

Additions to section 3, all measured necessary: every working set also holds LIBSVM's
maximal violating pair (argmax of F = y − g over the rows whose yᵢβᵢ may grow, argmin over
those whose yᵢβᵢ may shrink; F does not depend on b). Without it a working set whose
violators all lie on one side can be solved by moving b alone, and the outer iteration cycles
(seen with ``largest`` at C = 100 and ``smallest`` on small problems). When an outer iteration
does not lower the dual objective anyway, the next pass selects with b = (m(β) + M(β)) / 2.
A working set on which IRWLS has not met ``0.1·tol`` after 150 iterations (rank-deficient
kernels, e.g. the linear kernel on binary features), or whose KKT point has a higher dual
objective than an earlier feasible iterate, is finished from its best dual-feasible point by
second-order SMO on the q × q kernel matrix; ``summary["smo_finishes"]`` counts those working
sets and ``summary["smo_steps"]`` the SMO steps.

Kernel work: the change of gᵢ after a working set is Σⱼ Δβⱼyⱼ K(xᵢ, xⱼ) over the changed
rows. Rows whose β changes again and again (free SVs) reuse their column K(shard rows, xⱼ)
from a per-shard byte-bounded cache (``--cache-mb`` split over the shards; a process-local
performance cache outside the replicated engine state, dropped at the end of the run).

Stopping rule (eqs. 9–11, with e = ``tol``, default 1e-3)::

    yᵢeᵢ < e  for βᵢ = 0,    −yᵢeᵢ < e  for βᵢ = C,    |yᵢeᵢ| < e  for 0 < βᵢ < C

checked on every row in the pass, with the bias b of the last working-set problem (or the
b-reset value), then confirmed by the independent KKT pass of
:func:`~ooc_svm.solvers.dual.kkt_violation_pass` (f recomputed from the final SVs).

Memory: per-shard β and g (16 bytes a row) in the engine state; on the driver the working set
(q rows, its q × q kernel matrix), O(n_features) for the linear kernel's w, and at the end the
support vectors of the model.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.base import WorkerScratch
from ...kernels.kernel_functions import KernelParams
from .. import Callback, Result, binary_classes
from ..dual import (
    CheckpointClock,
    Expansion,
    WorkingRows,
    check_interrupt,
    collect_support_vectors,
    dual_class_costs,
    dual_result,
    finish_run,
    interruptible,
    primal_w,
    row_costs,
)
from ..kernel_cache import MB
from ..params import as_params
from .checkpointing import _LOOP_KEYS, _load_checkpoint, _save_checkpoint
from .params import Params
from .passes import (
    _S_BYG,
    _S_CHINGE,
    _S_HINGE,
    _S_HITS,
    _S_MAXV,
    _S_MISSES,
    _S_MLOW,
    _S_MUP,
    _S_NBSV,
    _S_NSV,
    _S_NVIOL,
    _S_SUMB,
    _drop_caches_fn,
    _init_state,
    _pass_fn,
    _pass_reduce,
    _PassBroadcast,
    _PassPartial,
)
from .selection import _collect_fn, _select, _working_kernel
from .working_set import irwls_working_set

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store

log = logging.getLogger(__name__)


# ============================================================================================
# chunking: the driver
# ============================================================================================
#: the working-set problem is solved to this fraction of ``tol``
INNER_TOL_FACTOR = 0.1
#: IRWLS iterations allowed per working set
MAX_INNER = 150
#: outer iterations in a row without any change before the run is declared stalled
MAX_STALL = 20


class _Run:
    """One training run: constants, the state carried between outer iterations (checkpointed
    by :func:`_save_checkpoint`) and the steps of an outer iteration."""

    # loop counters, set from _LOOP_KEYS in __init__ and on resume
    it: int
    stall: int
    hits: int
    misses: int
    inner_total: int
    line_total: int
    failures: int
    smo_total: int
    fallbacks: int
    b_resets: int
    # the last pass's reduced partial and the change sent with the next pass
    part: _PassPartial | None
    delta: Expansion | None
    delta_rows: WorkingRows | None
    delta_coef: np.ndarray | None

    def __init__(self, store, engine, p: Params, callback, checkpoint):
        self.t0 = time.perf_counter()
        self.store, self.engine, self.p = store, engine, p
        self.callback, self.checkpoint = callback, checkpoint
        self.neg, self.pos = binary_classes(store.meta)
        self.nf = int(store.meta.n_features)
        self.kp = KernelParams.from_params(p.kernel_dict(), self.nf)
        self.C, self.tol, self.q = float(p.C), float(p.tol), int(p.working_set)
        self.linear = self.kp.kernel == "linear"
        self.inner_tol = INNER_TOL_FACTOR * self.tol
        self.passes0 = engine.passes
        self.costs = dual_class_costs(store, engine, p, self.neg, self.pos)
        if self.costs is not None:
            log.info("irwls: class costs C_neg = %.6g, C_pos = %.6g", *self.costs)
        self.scratch = WorkerScratch("irwls-columns")
        self.cache_bytes = (
            0 if self.linear else int(float(p.cache_mb) * MB / max(1, store.n_shards))
        )
        self.clock = CheckpointClock(float(getattr(p, "checkpoint_seconds", 60.0)))
        # the state between outer iterations
        self.state = engine.init_state(store, functools.partial(_init_state, self.linear))
        self.w = np.zeros(self.nf) if self.linear else None
        self.upd_gids = np.zeros(0, dtype=np.int64)
        self.upd_beta = np.zeros(0)
        self.delta = self.delta_rows = self.delta_coef = None
        self.history: list[dict] = []
        for k in _LOOP_KEYS[:-1]:
            setattr(self, k, 0)
        self.b = self.prev_dual = 0.0
        self.just_reset = self.converged = False
        self.part = None

    def start(self) -> None:
        resumed = _load_checkpoint(self.checkpoint, self.store, self.engine)
        if resumed is None:
            return
        self.state, loop, self.w, self.upd_gids, self.upd_beta = resumed[:5]
        self.delta_rows, self.delta_coef, self.history = resumed[5:]
        for k in _LOOP_KEYS[:-1]:
            setattr(self, k, loop[k])
        self.it, self.b, self.prev_dual = (
            int(loop["it"]),
            float(loop["b"]),
            float(loop["prev_dual"]),
        )
        self.just_reset, self.stall = bool(loop["just_reset"]), int(loop["stall"])
        self.passes0 = self.engine.passes - int(loop["passes"])
        if self.delta_rows is not None and not self.cache_bytes:
            self.delta = self._expansion()
        log.info("irwls: resuming after outer iteration %d", self.it)

    def warm(self, model) -> None:
        """Start from ``model`` (:func:`~..warm.dual_start`'s: its α at this C): β = its α,
        sent as the first pass's change (g is recomputed from it), and its b."""
        from ..dual import start_point

        gids, coef, X, intercept = start_point(model, self.C, self.store.meta.n_rows)
        self.upd_gids, self.upd_beta, self.b = gids, np.abs(coef), intercept
        if self.linear:
            self.w = np.asarray(X.T @ coef, dtype=np.float64).ravel()
        elif gids.size:
            y = np.where(coef > 0, 1.0, -1.0)
            ip, ix = X.indptr.astype(np.int64), X.indices.astype(np.int32)
            self.delta_rows = WorkingRows(gids, ip, ix, X.data.astype(np.float32), y, abs(coef))
            self.delta_coef = coef
            if not self.cache_bytes:
                self.delta = self._expansion()
        log.debug("irwls: warm start from %d support vectors", gids.size)

    def _expansion(self) -> Expansion:
        r = self.delta_rows
        assert r is not None  # a kernel change was made
        return Expansion.from_csr(self.kp, self.nf, r.indptr, r.indices, r.data, self.delta_coef)

    # -- one outer iteration ------------------------------------------------------------------
    def outer_pass(self) -> float:
        """The streamed pass (apply the last change, check (9)–(11), draw candidates)."""
        tp = time.perf_counter()
        bc = _PassBroadcast(
            self.it,
            int(self.p.seed),
            self.p.strategy,
            self.q,
            self.tol,
            self.C,
            self.b,
            self.pos,
            self.upd_gids,
            self.upd_beta,
            self.w,
            self.delta,
            True,
            self.kp,
            self.delta_rows,
            self.delta_coef,
            self.cache_bytes,
            self.scratch,
            self.nf,
            self.costs,
        )
        part = self.engine.map_reduce(
            self.store, _pass_fn, bc, reduce=_pass_reduce, state=self.state
        )
        self.part = part
        st = part.stats
        self.hits += int(st[_S_HITS])
        self.misses += int(st[_S_MISSES])
        return time.perf_counter() - tp

    def objectives(self) -> tuple[float, float, float]:
        """(violation, dual, primal) at the last pass."""
        assert self.part is not None  # after outer_pass
        st = self.part.stats
        dual = 0.5 * float(st[_S_BYG]) - float(st[_S_SUMB])
        if self.costs is None:
            primal = 0.5 * float(st[_S_BYG]) + self.C * float(st[_S_HINGE])
        else:  # Σ C_{y_i} ξᵢ
            primal = 0.5 * float(st[_S_BYG]) + float(st[_S_CHINGE])
        return float(st[_S_MAXV]), dual, primal

    def step(self) -> bool:
        """One outer iteration after the pass; False when the run stops."""
        pass_s = self.outer_pass()
        assert self.part is not None
        st = self.part.stats
        viol, dual, primal = self.objectives()
        if viol <= self.tol:
            self.converged = True
        prev = self.prev_dual
        no_progress = self.it > 0 and dual >= prev - 1e-13 * max(1.0, abs(prev))
        self.prev_dual = dual
        if no_progress and not self.just_reset and not self.converged:
            # the working set was optimal and only b moved (it can cycle between two values
            # when W holds violators on one side only): select again with the b that
            # balances LIBSVM's m(β), M(β) over all rows
            self.b = 0.5 * (float(st[_S_MUP]) + float(st[_S_MLOW]))
            self.upd_gids, self.upd_beta = np.zeros(0, dtype=np.int64), np.zeros(0)
            self.delta = self.delta_rows = self.delta_coef = None
            self.just_reset = True
            self.b_resets += 1
            return True
        self.just_reset = False
        self.stall = self.stall + 1 if no_progress else 0
        rec = {
            "iteration": self.it,
            "violation": viol,
            "n_violators": int(st[_S_NVIOL]),
            "objective": primal,
            "dual_objective": dual,
        }
        if self.converged or self.it >= int(self.p.max_iter) or self.stall >= MAX_STALL:
            rec["pass_seconds"] = pass_s
            self._report(rec)
            return False
        self.it += 1
        rec["iteration"] = self.it
        ts = time.perf_counter()
        rec.update(self.solve_working_set())
        rec.update({"n_sv": int(st[_S_NSV]), "n_bound_sv": int(st[_S_NBSV])})
        rec.update({"pass_seconds": pass_s, "solve_seconds": time.perf_counter() - ts})
        self._report(rec)
        self.save()
        return True

    def _report(self, rec: dict) -> None:
        rec["seconds"] = time.perf_counter() - self.t0
        rec["passes"] = self.engine.passes - self.passes0
        self.history.append(rec)
        if self.callback is not None:
            self.callback(rec)

    def solve_working_set(self) -> dict:
        """The next working set and its IRWLS-SVC problem; the change goes to the next pass."""
        assert self.part is not None  # after outer_pass
        rows, g_w = _select(self.part, self.q)
        K = _working_kernel(rows, self.kp, self.nf)
        yb = rows.y * rows.alpha
        g_out = g_w - K @ yb
        C = self.C if self.costs is None else row_costs(rows.y, self.C, self.costs)
        sub = irwls_working_set(K, rows.y, rows.alpha, self.b, g_out, C, self.inner_tol, MAX_INNER)
        self.inner_total += sub.iterations
        self.line_total += sub.line_searches
        self.failures += int(not sub.converged)
        self.smo_total += sub.smo_steps
        self.fallbacks += int(sub.smo_steps > 0)
        d = sub.beta - rows.alpha
        ch = np.flatnonzero(d != 0.0)
        self.b = float(sub.b)
        ch = ch[np.argsort(rows.gids[ch], kind="stable")]
        self.upd_gids = rows.gids[ch].copy()
        self.upd_beta = sub.beta[ch].copy()
        if self.linear:
            if ch.size:
                self.w = self.w + primal_w(rows.take(ch), d[ch] * rows.y[ch], self.nf)
            self.delta = None
        else:
            self.delta = self.delta_rows = self.delta_coef = None
            if ch.size:
                self.delta_rows = rows.take(ch)
                self.delta_coef = d[ch] * rows.y[ch]
                if not self.cache_bytes:  # the shards evaluate Σ Δβⱼyⱼ K(xⱼ, ·) directly
                    self.delta = self._expansion()
        log.debug(
            "irwls it %d: |W| %d changed %d inner %d", self.it, rows.n, ch.size, sub.iterations
        )
        return {
            "working_set": int(rows.n),
            "changed": int(ch.size),
            "inner_iterations": sub.iterations,
            "inner_converged": sub.converged,
            "b": self.b,
        }

    def save(self) -> None:
        """Checkpoint the state when one is due (:meth:`CheckpointClock.maybe_save`)."""
        self.clock.maybe_save(self.checkpoint, self._write_checkpoint)

    def _write_checkpoint(self) -> None:
        loop = {k: getattr(self, k) for k in _LOOP_KEYS[:-1]}
        loop["passes"] = self.engine.passes - self.passes0
        _save_checkpoint(
            self.checkpoint,
            self.engine,
            self.state,
            loop,
            self.w,
            self.upd_gids,
            self.upd_beta,
            self.delta_rows,
            self.delta_coef,
            self.history,
        )

    # -- the end ----------------------------------------------------------------------------
    def drop_caches(self) -> None:
        if self.cache_bytes:
            _drop_caches_fn(None, self.scratch)
            try:
                self.engine.map_state(self.store, _drop_caches_fn, self.scratch)
            except NotImplementedError:  # pragma: no cover - engines without map_state
                pass

    def result(self) -> Result:
        """The model (support vectors collected in one pass), the independent KKT check."""
        C, p = self.C, self.p
        stop_value, dual, _ = self.objectives()
        assert self.part is not None  # after outer_pass
        st = self.part.stats
        self.drop_caches()
        sv = collect_support_vectors(self.store, self.engine, self.state, self.pos, _collect_fn)
        primal = math.nan

        def info(chk: dict | None) -> dict:
            nonlocal primal
            assert chk is not None  # finish_dual made the KKT pass
            loss = C * float(chk["hinge"]) if self.costs is None else float(chk["cost_hinge"])
            primal = 0.5 * float(st[_S_BYG]) + loss
            extra = {} if self.costs is None else {"class_costs": list(self.costs)}
            return {
                **extra,
                "solver": "irwls",
                "C": C,
                "tol": self.tol,
                "working_set": self.q,
                "strategy": p.strategy,
                "dual_objective": dual,
                "objective": primal,
                "converged": self.converged,
            }

        fin = finish_run(self, sv, self.b, info)
        seconds = time.perf_counter() - self.t0
        assert fin.kkt is not None  # check=True
        summary = self._summary(sv, fin.kkt, seconds)
        if not self.converged:
            log.warning(
                "irwls: stopped after %d iterations without meeting tol=%g (violation %.3g)",
                self.it,
                self.tol,
                stop_value,
            )
        return dual_result(
            self, fin.model, primal, dual, self.it, seconds, stop_value, summary,
            self.it >= p.max_iter,
        )  # fmt: skip

    def _summary(self, sv, chk: dict, seconds: float) -> dict:
        return {
            "strategy": self.p.strategy,
            "working_set": self.q,
            "outer_iterations": self.it,
            "inner_iterations": self.inner_total,
            "line_searches": self.line_total,
            "inner_unconverged": self.failures,
            "smo_finishes": self.fallbacks,
            "smo_steps": self.smo_total,
            "b_resets": self.b_resets,
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "n_sv": int(sv.n),
            "n_bound_sv": (
                int(np.count_nonzero(sv.alpha >= row_costs(sv.y, self.C, self.costs)))
                if sv.n
                else 0
            ),
            "intercept": self.b,
            "converged": self.converged,
            "stalled": bool(not self.converged and self.stall >= MAX_STALL),
            "kkt_max_violation": chk["max_violation"],
            "kkt_n_violators": chk["n_violators"],
            "kkt_ok": chk["ok"],
            "kkt_gap": chk["gap"],
            "kkt_source": chk.get("source", "exact"),
            "kkt_drift": chk.get("drift"),
            "sum_y_alpha": chk["sum_y_alpha"],
            "seconds": seconds,
            **({} if self.costs is None else {"class_costs": list(self.costs)}),
        }


@interruptible
def solve(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a C-SVC by IRWLS chunking (see the module docstring).

    Parameters
    ----------
    store
        An opened store with binary labels.
    engine : Engine
        Runs the streamed passes.
    params : Params
        (or a dict of its fields)
    callback : callable, optional
        Receives one dict per outer iteration.
    checkpoint : Checkpointer, optional
        Saves the state after outer iterations (see :class:`CheckpointClock`); with
        ``checkpoint.resume`` the run continues from the latest checkpoint and ends with the
        same model.

    Returns
    -------
    Result
        ``model`` (kernel model; for the linear kernel ``kind="linear"`` with ``coef_`` and the
        support vectors kept), ``dual_objective`` (LIBSVM sign), ``objective`` (primal).
    """
    return _train(store, engine, params, callback, checkpoint)


@interruptible
def solve_warm(
    store: Store, engine: Engine, params: Params, init: Any, *, callback: Callback | None = None
) -> Result:
    """:func:`solve` started from ``init`` (a C sweep's next value: a binary model of this
    store with its dual coefficients, or its :class:`~..warm.Start`; None: cold), passed as
    ``init=`` like ``--init`` (:func:`~..warm.dual_init`: β starts at its α scaled by
    C/C_old)."""
    from ..warm import start_from

    p = as_params(Params, params)
    if init is not None:
        p = p.replace(init=start_from(init, store.meta))
    return _train(store, engine, p, callback, None)


def _train(store, engine, params, callback, checkpoint) -> Result:
    p = as_params(Params, params)
    p.validate(store.meta)
    run = _Run(store, engine, p, callback, checkpoint)
    run.start()
    resuming = checkpoint is not None and checkpoint.resume
    if p.init is not None and not resuming:  # a warm start (warm.Start)
        from ..warm import dual_init

        init = dual_init(p, store, engine, "irwls", run.costs)
        if init is not None:
            run.warm(init)
    while True:
        check_interrupt()
        if not run.step():
            break
    return run.result()
