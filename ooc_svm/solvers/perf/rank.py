"""``loss="ordinal"`` / ``"roc"``: Algorithm 2 of Joachims 2006 (OP5) and its accelerated variant.

The most violated constraint, in its condensed form Σᵢ (c⁺ᵢ − c⁻ᵢ) xᵢ, comes from the sorted
scores in O(n log n) (:func:`ooc_svm.solvers.perf._numba.cuts.rank_cut`). Two passes per iteration:
scores of every row (gathered at the driver as float64, 8 bytes per row, plus the rank and
query of every row gathered once), then Σᵢ (c⁺ᵢ − c⁻ᵢ) xᵢ with the coefficients as per-shard
state. The bias cancels in pair differences and is not used. ``accelerated``: the line search
runs at the driver on the gathered scores (golden section) and the cut is taken exactly at
that point.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ...engine import concat_partials
from ...kernels.ranking import count_pairs, rank_loss
from ...model.model import Model
from .. import Result, SolverError
from ..params import class_weights
from ._numba.cuts import rank_cut, vdot
from .algorithms import algorithm
from .common import (
    _finite,
    _Progress,
    _resolve_C,
    emit_start,
    iteration_done,
    perf_result,
    save_run,
)
from .passes import acc_row, pass_accumulate, pass_labels, pass_scores, reduce_cut
from .working_set import WorkingSet, _qp_atol, check_qp

log = logging.getLogger(__name__)


class _Ranking:
    """Ranks and query groups of all rows (gathered once; O(n) driver memory)."""

    def __init__(self, y: np.ndarray, qid: np.ndarray | None, labels: list[float]):
        lab = np.asarray(labels, dtype=np.float64)
        self.n_ranks = lab.shape[0]
        self.r = np.searchsorted(lab, y).astype(np.int64)
        self.n = y.shape[0]
        self.gid: np.ndarray | None
        if qid is not None and qid.shape[0] == self.n:
            _, self.gid = np.unique(qid, return_inverse=True)
            self.gid = self.gid.astype(np.int64)
        else:
            self.gid = None
        order = self.order(np.zeros(self.n))
        self.starts = self._starts(order)
        self.m = int(count_pairs(order, self.r, self.starts, self.n_ranks))

    def order(self, s: np.ndarray) -> np.ndarray:
        if self.gid is None:
            return np.argsort(-s, kind="stable").astype(np.int64)
        return np.lexsort((-s, self.gid)).astype(np.int64)

    def _starts(self, order: np.ndarray) -> np.ndarray:
        if self.gid is None:
            return np.array([0, self.n], dtype=np.int64)
        g = self.gid[order]
        return np.concatenate([[0], np.flatnonzero(np.diff(g)) + 1, [self.n]]).astype(np.int64)

    def cut(self, s: np.ndarray):
        order = self.order(s)
        cp = np.zeros(self.n, dtype=np.int64)
        cm = np.zeros(self.n, dtype=np.int64)
        viol, loss = rank_cut(order, s, self.r, self.starts, self.n_ranks, cp, cm)
        return int(viol), float(loss), (cp - cm).astype(np.float64)

    def loss(self, s: np.ndarray) -> float:
        order = self.order(s)
        return float(rank_loss(order, s, self.r, self.starts, self.n_ranks)[1])


def _golden(f, lo: float, hi: float, evals: int) -> tuple[float, float]:
    """Minimise a convex function on [lo, hi] by golden-section search (``evals`` evaluations)."""
    gr = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c = b - gr * (b - a)
    d = a + gr * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(max(0, evals - 2)):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - gr * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + gr * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)


class _RankRun:
    """State of one ranking problem (OP5) and its streamed passes."""

    def __init__(self, store, engine, params, loss: str, variant: str, callback, checkpoint):
        meta = store.meta
        self.store, self.engine, self.params = store, engine, params
        self.loss, self.variant, self.checkpoint = loss, variant, checkpoint
        self.d = self.dim = meta.n_features
        self.labels = list(meta.labels or [])
        self.prog = _Progress(engine, callback)
        parts = engine.map_reduce(store, pass_labels, None, reduce=concat_partials)
        y = np.concatenate([p[0] for p in parts])
        qid = np.concatenate([p[1] for p in parts]) if meta.has_qid else None
        self.rk = _Ranking(y, qid, self.labels)
        self.m = m = self.rk.m
        if m == 0:
            raise SolverError(
                "no pairs with different ranks"
                + (" within any query" if meta.has_qid else "")
                + f"; --loss {loss} needs at least two ranks"
            )
        self.C_user = _resolve_C(params, m)
        self.pair_weight = self._pair_weight(y)
        # every pair (i positive, j negative) costs C·w₊·w₋: class weights rescale C
        self.C = self.C_user * self.pair_weight
        self.Cp = self.C * m
        self.eps = float(params.eps)
        self.max_iter = int(params.max_iter)
        self.max_inactive = int(params.max_inactive)
        self.ws = WorkingSet(self.dim, float(params.dense_limit_mb) * 2**20)
        self.atol = _qp_atol(self.eps)
        self.shard_rows = [(s.row_start, s.n_rows) for s in meta.shards]
        self.it = 0
        #: the working-set QP stalled (:func:`check_qp`): the run stops, not converged
        self.stalled = False
        self.converged = False
        self.stop = math.inf
        self.dual = -math.inf
        self.pt = 0.0
        self.wb: Any = None
        self.Pb = self.xib = 0.0

    def _pair_weight(self, y: np.ndarray) -> float:
        """w₊·w₋ of ``--class-weight`` (1 without): the weight of every pair under --loss roc
        (the product of the two rows' class weights; one value, as every pair has one
        positive and one negative row)."""
        spec = self.params.class_weight
        if spec is None:
            return 1.0
        if self.loss != "roc":
            raise SolverError(
                "--class-weight applies to the binary losses (error, roc); --loss ordinal has "
                "no two classes to weigh"
            )
        neg, pos = float(self.labels[0]), float(self.labels[1])
        counts = {neg: int(np.count_nonzero(y == neg)), pos: int(np.count_nonzero(y == pos))}
        w_neg, w_pos = class_weights(spec, neg, pos, counts)
        log.info("perf roc: class weights %.6g (neg), %.6g (pos): pair weight %.6g",
                 w_neg, w_pos, w_neg * w_pos)  # fmt: skip
        return w_neg * w_pos

    def accumulate(self, coef: np.ndarray):
        """Σᵢ coefᵢ xᵢ (one pass, coefficients as per-shard state) and the pass seconds."""
        store, engine = self.store, self.engine
        st = engine.set_state(store, [coef[a : a + k] for a, k in self.shard_rows])
        t = time.perf_counter()
        part = engine.map_reduce(store, pass_accumulate, (self.dim,), reduce=reduce_cut, state=st)
        return acc_row(part["g"], 0), time.perf_counter() - t

    def scores(self, w, w_other=None):
        """Scores of every row at w (and at ``w_other``), gathered; and the pass seconds."""
        t = time.perf_counter()
        if w_other is None:
            bc = (np.ascontiguousarray(w), False)
        else:
            bc = (np.ascontiguousarray(np.stack([w, w_other], axis=1)), True)
        parts = self.engine.map_reduce(self.store, pass_scores, bc, reduce=concat_partials)
        out = tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))
        return out, time.perf_counter() - t

    def save(self) -> None:
        save_run(self, {"Pb": self.Pb, "xib": self.xib}, {"wb": self.wb})

    def start(self) -> None:
        """Resume from the checkpoint, or iteration 0: w = 0, every pair violated."""
        ck, ws, prog = self.checkpoint, self.ws, self.prog
        resume = ck.load() if (ck is not None and ck.resume) else None
        if resume is not None:
            ws.restore(resume.scalars, resume.arrays)
            self.it = int(resume.scalars["it"])
            dual = resume.scalars["dual"]
            self.dual = float(dual) if dual is not None else -math.inf
            # the labels pass is made again by the resumed run: counted once
            prog.p0 -= int(resume.scalars["passes"]) - prog.passes()
            self.wb = np.array(resume.arrays["wb"], dtype=np.float64)
            self.Pb, self.xib = float(resume.scalars["Pb"]), float(resume.scalars["xib"])
            self.pt = 0.0
            log.info("perf: resuming at iteration %d", self.it)
            return
        if self.params.init is not None:
            self.warm_start()
            return
        viol, lossv, coef = self.rk.cut(np.zeros(self.rk.n))
        g, self.pt = self.accumulate(coef)
        self.wb, self.Pb, self.xib = np.zeros(self.dim), self.C * lossv, lossv / self.m
        emit_start(self, self.Pb, self.xib)
        ws.add(g / self.m, viol / self.m)
        self.save()

    def warm_start(self) -> None:
        """Iteration 0 from the ``--init`` model (:func:`~.warm.perf_start`): its w, the
        cut there, and its aggregated plane over its pairs (cᵢⱼ = 0 on the pairs the
        appended rows make: a valid plane of the grown problem)."""
        from .warm import perf_start

        classes = self.labels if self.loss == "ordinal" else self.labels[:2]
        weights = (self.pair_weight, self.pair_weight)
        st = perf_start(self.params.init, self.store.meta, classes, self.loss, 0.0, weights=weights)
        w = np.ascontiguousarray(st.w[: self.d])
        (s,), t1 = self.scores(w)
        viol, lossv, coef = self.rk.cut(s)
        g, t2 = self.accumulate(coef)
        self.pt = t1 + t2
        self.wb = w
        self.Pb = 0.5 * float(vdot(w, w)) + self.C * lossv
        self.xib = lossv / self.m
        emit_start(self, self.Pb, self.xib, warm=True)
        self.ws.add(g / self.m, viol / self.m)
        if st.cut is not None and 0 < st.count <= self.m:
            f = st.count / self.m
            self.ws.add(np.ascontiguousarray(st.dense(st.cut)[: self.d]) * f, st.r * f)
        self.save()

    def step_paper(self, wc: np.ndarray):
        """Algorithm 2 at w_c: the new w is w_c; returns the step and a cut maker."""
        (s,), self.pt = self.scores(wc)
        viol, lossv, coef = self.rk.cut(s)
        obj = 0.5 * float(vdot(wc, wc)) + self.C * lossv
        xi_new = lossv / self.m
        self.stop = xi_new - self.ws.slack()
        self.wb, self.Pb, self.xib = wc, obj, xi_new
        return 1.0, lambda: (viol, coef)

    def step_accelerated(self, wc: np.ndarray):
        """Golden-section line search on w_b + k(w_c − w_b); returns the step and a cut maker."""
        C, rk, wb = self.C, self.rk, self.wb
        (sb, sc), self.pt = self.scores(wb, wc)
        dw = wc - wb
        a2 = float(vdot(dw, dw))
        a1 = float(vdot(wb, dw))
        a0 = float(vdot(wb, wb))

        def phi(k, sb=sb, sc=sc, a0=a0, a1=a1, a2=a2):
            return 0.5 * (a0 + 2 * k * a1 + k * k * a2) + C * rk.loss(sb + k * (sc - sb))

        k1 = phi(1.0)
        kstar, fk = _golden(phi, 0.0, 2.0, 14)
        if k1 < fk:
            kstar, fk = 1.0, k1
        step = 0.0
        if fk < self.Pb:
            step = kstar
            self.wb = wb + kstar * dw
            lk = rk.loss(sb + kstar * (sc - sb))
            self.Pb = 0.5 * float(vdot(self.wb, self.wb)) + C * lk
            self.xib = lk / self.m
        self.stop = (self.Pb - self.dual) / self.Cp

        def cut():
            kc = step + float(self.params.mu) * (1.0 - step)
            viol, _, coef = rk.cut(sb + kc * (sc - sb))
            return viol, coef

        return step, cut

    def loop(self) -> None:
        """Iterations 1, 2, …: QP over W, a scores pass, the stop test, a cut pass."""
        ws = self.ws
        while True:
            self.it += 1
            wc, self.dual, _ = ws.solve(self.Cp, self.atol)
            self.stalled = self.stalled or check_qp(self.C, self.Cp, ws, self.loss)
            if not algorithm(self.variant).line_search:  # paper: to the QP's solution
                step, cut = self.step_paper(wc)
            else:
                step, cut = self.step_accelerated(wc)
            if iteration_done(self, self.Pb, self.xib, self.dual, step=step):
                break
            viol, coef = cut()
            g, _ = self.accumulate(coef)
            ws.add(g / self.m, viol / self.m)
            ws.drop_inactive(self.max_inactive)
            self.save()
        if not self.converged and not self.stalled and not self.prog.stalled:
            log.warning(
                "perf: stopped after %d iterations (max_iter) with violation %.3g > eps",
                self.it,
                self.stop,
            )

    def result(self, has_qid: bool) -> Result:
        """The linear ranking model (no intercept) and the :class:`Result`."""
        ws, Cp, Pb = self.ws, self.Cp, self.Pb
        classes = self.labels if self.loss == "ordinal" else self.labels[:2]
        info = {
            "solver": "perf",
            "loss": self.loss,
            "variant": self.variant,
            "C": self.C_user,
            "pair_weight": self.pair_weight,
            "C_perf": Cp,
            "c_perf_svmperf": Cp / 100.0,
            "eps": self.eps,
            "bias": 0.0,
            "objective": Pb,
            "n_pairs": self.m,
            "iterations": self.it,
            "converged": self.converged,
            "has_qid": has_qid,
            "float32_planes": ws.float32,
        }
        model = Model(
            kind="linear",
            n_features=self.d,
            classes=[float(c) for c in classes],
            coef_=np.asarray(self.wb, dtype=np.float64).copy(),
            intercept_=0.0,
            info=info,
        )
        summary = {
            "variant": self.variant,
            "loss": self.loss,
            "lower_bound": _finite(self.dual),
            "n_pairs": self.m,
            "C": self.C_user,
            "pair_weight": self.pair_weight,
            "converged": self.converged,
        }
        from .warm import aggregate_cut, attach_cut

        if self.params.warm_state:
            pw = (self.pair_weight, self.pair_weight)
            attach_cut(model, aggregate_cut(ws), self.m, 0.0, pw)
        return perf_result(self.prog, ws, model, Pb, self.it, self.stop, self.xib, summary)


def _solve_rank(store, engine, params, loss, variant, callback, checkpoint=None) -> Result:
    """OP5 for ``loss`` ("ordinal" or "roc") with Algorithm 2 or the accelerated variant."""
    run = _RankRun(store, engine, params, loss, variant, callback, checkpoint)
    run.start()
    run.loop()
    return run.result(bool(store.meta.has_qid))
