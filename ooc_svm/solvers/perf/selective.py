"""``--solver perf --variant selective``: cutting planes with few full passes.

Problem: OP2 of Joachims (2006), exactly as :mod:`ooc_svm.solvers.perf` (``loss="error"``)::

    min_{w, ξ≥0}  ½‖w‖² + C_perf·ξ   s.t. ∀c ∈ {0,1}ⁿ:  wᵀ(1/n Σᵢ cᵢyᵢx̃ᵢ) ≥ 1/n Σᵢ cᵢ − ξ

with C_perf = C·n (C in LIBLINEAR units, x̃ᵢ = (xᵢ, bias)), whose optimum is LIBLINEAR's
P(w) = ½‖w‖² + C Σᵢ max(0, 1 − yᵢwᵀx̃ᵢ).

Stopping rule — the certificate of the ``accelerated`` variant: P(w_b) − D ≤ ε·C_perf, where
w_b is the best point whose *exact* P was computed by a full streamed pass and D the largest
dual value of the working-set QP (OP3) seen, a lower bound of the optimum (every plane in the
working set is a constraint of OP2). So the returned w satisfies P(w) ≤ P* + C·n·ε, as
Theorem 3 and the other variants guarantee.

What is different: the passes. The idea is that of block minimisation (Yu, Hsieh, Chang &
Lin, *Large linear classification when data cannot fit in memory*, KDD 2010) made
*selective* as in Chang & Roth (*Selective block minimization for faster convergence of
limited memory large-scale linear models*, KDD 2011): keep in memory the informative rows —
here the rows near the margin, which are the ones whose term of the loss can change kind —
and do most of the optimisation on them, streaming the whole data only now and then
(StreamSVM, Matsushima, Vishwanathan & Smola, KDD 2012, likewise learns from a cached part
while the rest streams). Applied to the cutting-plane method it rests on one fact of OP2:
**every** c ∈ {0,1}ⁿ gives a valid constraint, so planes may be built from any coefficients.

- *Full pass* (:func:`pass_select`, one streamed pass) on the segment from the best point
  w_b to the inner loop's proposal w_c, like the accelerated pass: P and the most violated
  constraint at the grid points ``GRID`` of k in w_b + k(w_c − w_b); w_b moves to the best
  grid point, whose exact plane (and the one at w_c) joins the working set. The same pass
  selects S, the rows near the margin along the segment: key = the distance of 1 from the
  interval of their margins (0 for rows that change sides). Each shard copies, in its own
  order and without sorting, the rows whose key is within the threshold τ that the previous
  pass's histograms give (:func:`threshold_from_hist`: the rows within τ of the margin at the
  new w_b take the budget, and the next segment starts there, so its keys are at most those
  distances); τ = ∞ on the first pass. A shard whose rows within τ exceed its quota
  (:func:`shard_quota`: ``SHARE`` = 1.25 times its share of the budget) keeps its closest
  rows within the quota instead (key, then |1 − margin at w_c|, ties by a hash of the row
  number). Partials only concatenate these per-shard chunks, which stay the selection (no
  merge, no copy): every shard's result depends on the shard and the broadcast only, so S is
  the same for any engine and any reduction tree, and the candidates alive at once never
  exceed the sum of the quotas, ``SELECTION_SHARE`` of ``inner_mb``, whatever the number of
  shards.
- *Inner iterations* (no pass): the rows outside S keep their coefficients cᵢ⁰ from the
  pass's plane at the new w_b (=: w_p); the rows in S choose cᵢ = [mᵢ(w) < 1] at the current
  w. Each such plane is a constraint of OP2, hence a valid cut. Together they define the lower
  model P̃(w) = ½‖w‖² + C(max(0, Σ_{i∉S} cᵢ⁰(1 − mᵢ(w))) + Σ_{i∈S} max(0, 1 − mᵢ(w))) ≤ P(w),
  equal to P at w_p: the rows outside S that are violated at w_p enter as ONE aggregated row
  (a sum of hinges is at least the hinge of the sum), whose cut coefficient is all their
  cᵢ⁰ or none. (Kept linear, Σ cᵢ⁰(1 − mᵢ(w)) falls without bound as w moves to satisfy
  them, and the inner loop's proposals overshot: with a quarter of the 1M store in memory
  the aggregated row took 7 passes to the certificate instead of 12, docs/PERFORMANCE.md.)
  Away from w_p, P̃ can fall below the working set's own model
  M(w) = ½‖w‖² + C_perf·max(0, maxⱼ rⱼ − w·gⱼ) (also ≤ P), so the inner loop is OCAS
  (Franc & Sonnenburg, ICML 2008) on F = max(P̃, M): solve OP3 over the working set, exact
  line search of F between the best inner point and the QP solution (F is convex: its right
  derivative's sign change is bracketed by binning every row's hinge on a grid, two sweeps
  of the in-memory margins on every thread, then bisection on the few rows left), new plane at
  k* + μ(1 − k*). It stops when F(best) − D ≤ ``inner_share``·ε·C_perf (or after
  ``max_inner`` planes); the next pass runs on the segment from w_b to the best inner point.
  Cost per inner plane: one sweep of the selected rows for the margins (every thread of the
  engine, groups of ``PART_NNZ`` non-zeros), the plane's S-part updated by the rows that
  change sides only (SVMperf's incremental cut; per group on every thread; which rows flip
  and the best point's margins in one sweep on every thread), the gⱼ·w of the line search
  from the Gram matrix (gⱼ·w_c = (Qα)ⱼ) instead of |W| dot products over the features (its
  sweeps of every row on every thread, ``LINE_CHUNK`` rows a task), and the
  working-set QP, timed by the accelerated variant's stall stop
  (:func:`~ooc_svm.solvers.perf.check_qp`).
- *Every row in memory*: then P̃ = P exactly, F(best) is the exact objective and the inner
  loop certifies by itself — one streamed pass in all.

P ≥ P̃ everywhere, so a small gap of P̃ says nothing about P until a pass has measured it; only
the full pass gives the exact P(w) and the true most violated constraint. The certificate
therefore only ever uses P values measured by passes, or P̃ when it is P (every row in
memory: then the method is the accelerated variant run in memory, one pass). The pass's line search
keeps P(w_b) monotone when the proposal overshoots (rows outside S changed sides).

Memory: the selection — the candidates of a pass, kept as they are until the next pass —
takes at most ``SELECTION_SHARE`` (3/4) of ``inner_mb`` as the quotas count it (64 bytes per
row plus 8 per non-zero); the inner loop's per-row arrays (margins, ~40 bytes a row) fit the
rest. ``--inner-mb auto`` (the default): half of the process's memory budget left at the
start (:mod:`ooc_svm.memory_budget`: the container's limit, ``--memory-mb``, ...), at most
what holds every row (then one pass; the 1M store needs ~1.1 GiB). Besides the selection a
pass holds what the accelerated pass holds: the decoded shards in flight and one dense plane
accumulator of ``len(GRID)`` × (d + 1) floats per partial alive in the reduction (~log₂ S +
the engine's window of them) — claimed from the budget before the rows
(:func:`pass_accumulator_bytes`); and the engine's shard cache
(``--shard-cache-mb``, auto by default: a share of what the budget has left once the rows in
memory are claimed) fills from the second pass on (up to 8 GiB: most likely the bulk of the
10.5 GB peak of an earlier 50M-row run;
``scripts/scale.py --shard-cache-mb`` sets it). Checkpoints are not supported by this variant (yet).
"""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from ..._util import cpu_count
from ...engine.blocks import Blocked
from ...sizes import sizes_of
from ...store.views import ColumnMapView
from .. import Callback, Result, SolverError, binary_classes
from ..params import as_params
from ._numba.cuts import matvec, vdot
from .common import _finite, _Progress, _resolve_C, binary_result
from .params import Params, remap_min_dim
from .passes import acc_row, column_remap, pass_column_counts, reduce_cut
from .selection import (
    GRID,
    NZ_BYTES,
    ROW_BYTES,
    SHARE,
    pass_select,
    reduce_select,
    selection_bytes,
    threshold_from_hist,
)
from .selective_inner import _Inner, segment
from .working_set import WorkingSet, _qp_atol, check_qp

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store

log = logging.getLogger(__name__)

STOPPING_RULE = (
    "selective: P(w_best) - dual(W) <= eps * C * n, P(w_best) measured by a full pass "
    "(the accelerated variant's certificate)"
)


# ------------------------------------------------------------------------------------------
# selection of the rows near the margin (bounded, deterministic)
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# pass function and reduce (module level: the Dask engine pickles them)
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# the solver
# ------------------------------------------------------------------------------------------


#: the selection takes this share of ``inner_mb``; the pass's candidate lists and their
#: merge the rest (module docstring, "Memory")
SELECTION_SHARE = 0.75

#: the name of the rows' claim on the memory budget
ROWS_CLAIM = "selective rows in memory"

#: the name of the claim of a pass's plane accumulators
ACC_CLAIM = "selective pass accumulators"


def pass_accumulator_bytes(dim: int, threads: int | None = None) -> int:
    """What a selective pass's partials hold at once: ``len(GRID)`` planes over the ``dim``
    columns each (dense once two are merged), one per compute thread's row block and three
    more in the fold of the reduction (a 1M-column store: 112 MB a partial; unclaimed, they
    took a 520 MB cgroup's last 300 MB)."""
    n = int(threads or cpu_count())
    return (n + 3) * GRID.shape[0] * 8 * int(dim)


class _Run:
    """State of one selective run: best point, working set, lower bound, counters."""

    def __init__(self, store, engine, params: Params, callback):
        meta = store.meta
        self.store, self.engine, self.params = store, engine, params
        self.neg, self.pos = binary_classes(meta)
        self.n, self.d = meta.n_rows, meta.n_features
        self.bias = float(params.bias)
        self.C = _resolve_C(params, self.n)
        self.Cp = self.C * self.n
        self.eps = float(params.eps)
        #: the selection's target; the shards' quotas add up to SHARE times it at most
        self.sbytes = ROW_BYTES * self.n + NZ_BYTES * int(meta.nnz)
        #: the run's sizes, handed down by the command (the claims below are the budget's)
        self.sizes = sizes_of(engine, params.OWN_CLAIMS)
        # the pass's accumulators first: the rows in memory take a share of what they leave
        self.sizes.claim(
            ACC_CLAIM, pass_accumulator_bytes(self.d + 1, getattr(engine, "n_threads", None)),
            "--variant selective", "give --variant accelerated",
        )  # fmt: skip
        #: inner_mb in MiB (auto: at most what holds every row, with the quotas' slack)
        self.inner_mb = params.inner_mib(
            self.sizes, whole_mib=self.sbytes * SHARE / SELECTION_SHARE / 2**20
        )
        self.budget = int(self.inner_mb * 2**20 * SELECTION_SHARE / SHARE)
        # the rows in memory are the budget's before the shard cache sizes itself on the
        # first pass (the cache takes a share of what they leave)
        self.sizes.claim(
            ROWS_CLAIM, int(self.inner_mb * 2**20), "--variant selective",
            "give a smaller --inner-mb",
        )  # fmt: skip
        self.ws = WorkingSet(self.d + 1, float(params.dense_limit_mb) * 2**20)
        self.prog = _Progress(engine, callback)
        self.atol = _qp_atol(self.eps)
        self.w_b = np.zeros(self.d + 1)
        self.P_b = self.xi_b = self.stop = math.inf
        self.D = -math.inf
        self.outer = self.inner_total = self.sel_rows = self.sel_peak = 0
        self.pt = 0.0
        #: segment-key threshold of the rows the next pass copies (∞: each shard its closest)
        self.tau = math.inf
        self.converged = False

    def full_pass(self, w_c: np.ndarray):
        """One streamed pass on w_b → w_c: P on the grid, w_b to the best point; returns the
        reduced partial, the best grid index and the new selection."""
        d, kg, w_b = self.d, GRID, self.w_b
        t = time.perf_counter()
        w2 = np.ascontiguousarray(np.stack([w_b[:d], w_c[:d]], axis=1))
        bc = (w2, float(w_b[d]) * self.bias, float(w_c[d]) * self.bias, self.bias, self.pos,
              d + 1, kg, self.budget, self.sbytes, self.tau)  # fmt: skip
        # pass_select over each shard's row blocks (looked up here: tests replace it)
        fn = Blocked(pass_select, reduce_select)
        part = self.engine.map_reduce(self.store, fn, bc, reduce=reduce_select)
        self.pt = time.perf_counter() - t
        dw = w_c - w_b
        a0, a1, a2 = float(vdot(w_b, w_b)), float(vdot(w_b, dw)), float(vdot(dw, dw))
        vals = 0.5 * (a0 + 2 * kg * a1 + kg * kg * a2) + self.C * part["hinge"]
        q = int(np.argmin(vals))
        if vals[q] < self.P_b:
            self.w_b = w_b + kg[q] * dw
            self.P_b = 0.5 * float(vdot(self.w_b, self.w_b)) + self.C * float(part["hinge"][q])
            self.xi_b = float(part["hinge"][q]) / self.n
        else:
            q = 0
        self.stop = (self.P_b - self.D) / self.Cp
        sel = part.pop("sel")
        self.tau = threshold_from_hist(part["hist"], self.budget, q)
        self.sel_rows = sum(int(c["key"].shape[0]) for c in sel)
        self.sel_peak = max(self.sel_peak, sum(selection_bytes(c) for c in sel))
        self.prog.emit(
            {
                "iteration": self.outer + self.inner_total, "objective": self.P_b,
                "xi": self.xi_b, "violation": _finite(self.stop), "working_set": len(self.ws),
                "pass_seconds": self.pt, "lower_bound": _finite(self.D), "step": float(kg[q]),
                "selected_rows": self.sel_rows,
            }
        )  # fmt: skip
        return part, q, sel

    def add_pass_planes(self, part: dict, q: int) -> tuple[np.ndarray, float]:
        """The exact most violated constraint at the new best point, and the one at w_c."""
        n, K = self.n, GRID.shape[0]
        G_p = acc_row(part["g"], q, upto=True)
        cnt_p = float(part["cnt"][: q + 1].sum())
        self.ws.add(G_p / n, cnt_p / n)
        if q != K - 1:
            self.ws.add(acc_row(part["g"], K - 1, upto=True) / n, float(part["cnt"].sum()) / n)
        self.ws.drop_inactive(int(self.params.max_inactive))
        return G_p, cnt_p

    def qp(self) -> np.ndarray:
        """OP3 over the working set (timed for the stall stop); raises the lower bound."""
        wc, dual, _ = self.ws.solve(self.Cp, self.atol)
        self.prog.stalled = self.prog.stalled or check_qp(self.C, self.Cp, self.ws, "error")
        self.D = max(self.D, dual)
        return wc

    def inner_loop(self, inner: _Inner) -> np.ndarray:
        """OCAS on F = max(P̃, M) from w_b (where P̃ = P); returns the next pass's w_c."""
        C, Cp, n, eps, ws = self.C, self.Cp, self.n, self.eps, self.ws
        mu, share = float(self.params.mu), float(self.params.inner_share)
        wb = self.w_b
        mb = inner.margins(wb)
        Fb = inner.value(wb, mb, C)
        wc = wb
        gwb = np.array([ws._dot(v, wb) for v in ws.vecs])  # gⱼ·wb, kept up to date
        for _ in range(int(self.params.max_inner)):
            wc = self.qp()
            if self.P_b - self.D <= eps * Cp or self.prog.stalled:
                break
            gwc = matvec(ws.Q, ws.alpha)  # gⱼ·wc from the Gram matrix
            k, f, dw, dm = segment(inner, ws, gwb, gwc, wb, wc, mb, inner.margins(wc), C, Cp)
            move = f < Fb
            k = k if move else 0.0
            # the next cut at the margins mb + (k + mu(1 - k))·dm, and mb += k·dm: one sweep
            flipped = inner.flip(mb, dm, k, k + mu * (1.0 - k), move)
            if move:
                wb, Fb, gwb = wb + k * dw, f, gwb + k * (gwc - gwb)
            if inner.whole and Fb - self.D <= eps * Cp:
                # every row in memory: P~ = P, so F(w) = P(w) is exact and certifies
                self.w_b, self.P_b, self.xi_b = wb, Fb, float(np.maximum(0.0, 1 - mb).sum()) / n
                break
            if Fb - self.D <= share * eps * Cp:
                break
            g, r = inner.cut(None, n, flipped)
            ws.add(g, r)
            if len(ws) == gwb.shape[0] + 1:
                gwb = np.append(gwb, float(vdot(g, wb)))
            else:
                # the set outgrew --dense-limit-mb and was bounded (planes dropped or
                # aggregated, WorkingSet._bound): every gⱼ·wb again, over the planes kept
                gwb = np.array([ws._dot(v, wb) for v in ws.vecs])
            keep = np.asarray(ws.inactive) < int(self.params.max_inactive)
            if ws.drop_inactive(int(self.params.max_inactive)):
                gwb = gwb[keep]
            self.inner_total += 1
        log.debug("perf selective: pass %d, %d rows, %d inner planes, F %.10g, D %.10g",
                  self.outer, self.sel_rows, self.inner_total, Fb, self.D)  # fmt: skip
        return wb if wb is not self.w_b else wc


def solve_selective(
    store: Store,
    engine: Engine,
    params: Params | dict,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a linear SVM (OP2) with the selective cutting-plane variant (module docstring).

    ``params``: :class:`ooc_svm.solvers.perf.Params` (or a mapping of its fields; the variant
    is taken to be ``selective``); ``inner_mb``, ``max_inner`` and ``inner_share`` are this
    variant's own.
    """
    if isinstance(params, Params):
        params = params.replace(variant="selective")
    else:
        params = as_params(Params, {**dict(params or {}), "variant": "selective"})
    params.validate(store.meta)
    if checkpoint is not None:
        raise SolverError("perf --variant selective does not support --checkpoint yet")
    loss = params.resolve_loss(store.meta)
    if loss != "error":
        raise SolverError(
            f"perf --variant selective trains --loss error only (got {loss}); use accelerated"
        )
    t0 = time.perf_counter()
    remap = None
    meta = store.meta
    if meta.n_features >= remap_min_dim():
        # train over the columns the rows hold (a counting pass): the dense vectors and the
        # planes are as long as those, and the model is expanded at the end
        part = engine.map_reduce(store, pass_column_counts, (meta.n_features,), reduce=reduce_cut)
        remap = column_remap(part["g"], meta.n_features)
        del part
        store = ColumnMapView(store, remap[0], remap[1].shape[0])
        params.check_dense(store.meta, extra_bytes=remap[0].nbytes + remap[1].nbytes)
        log.info(
            "perf selective: %d of the %d columns hold non-zeros; training over them",
            remap[1].shape[0],
            meta.n_features,
        )
    run = _Run(store, engine, params, callback)
    if remap is not None:  # the counting pass is one of the run's passes and its time
        run.prog.p0 -= 1
        run.prog.t0 = t0
    try:
        if params.init is not None:  # train --init: the first pass selects around its w
            from .warm import perf_start

            neg, pos = binary_classes(meta)
            w = perf_start(params.init, meta, [neg, pos], "error", run.bias).w
            if remap is not None:  # the model's w over the columns trained
                w = np.concatenate([w[: meta.n_features][remap[1]], w[meta.n_features :]])
            run.w_b = w.copy()
        res = _iterate(run, engine, params)
    finally:
        run.sizes.release(ROWS_CLAIM)
        run.sizes.release(ACC_CLAIM)
    if remap is not None:
        m = res.model
        coef = np.zeros(meta.n_features)
        coef[remap[1]] = m.coef_
        m.coef_, m.n_features = coef, int(meta.n_features)
    return res


def _iterate(run: _Run, engine, params: Params) -> Result:
    """The passes and inner loops of :func:`solve_selective` until the certificate."""
    w_c = run.w_b
    with ThreadPoolExecutor(int(getattr(engine, "n_threads", 0) or cpu_count())) as pool:
        while True:
            part, q, sel = run.full_pass(w_c)
            if run.stop <= run.eps:
                run.converged = True
                break
            if run.outer >= int(params.max_iter) or run.prog.stalled:
                break
            run.outer += 1
            G_p, cnt_p = run.add_pass_planes(part, q)
            del part
            inner = _Inner(sel, GRID, q, G_p, cnt_p, run.d, run.n, run.bias, pool)
            del sel
            w_c = run.inner_loop(inner)
            del inner  # the next pass brings a new selection
            if run.P_b - run.D <= run.eps * run.Cp:
                run.stop = (run.P_b - run.D) / run.Cp
                run.converged = True
                break
    if not run.converged and not run.prog.stalled:
        log.warning("perf: stopped after %d passes (max_iter) with gap %.3g > eps", run.outer,
                    run.stop)  # fmt: skip
    return _result(run)


def _result(run: _Run) -> Result:
    """The binary linear model and the :class:`Result` of a selective run."""
    extra = {
        "outer_iterations": run.outer, "inner_iterations": run.inner_total,
        "selected_rows": run.sel_rows, "selected_mb": run.sel_peak / 2**20,
        "inner_mb": run.inner_mb,
    }  # fmt: skip
    iterations = run.outer + run.inner_total
    return binary_result(
        run, run.w_b, "selective", run.P_b, iterations, run.converged, run.stop, run.xi_b, run.D,
        extra=extra,
    )  # fmt: skip
