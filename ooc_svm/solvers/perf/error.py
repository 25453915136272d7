"""``loss="error"``: Algorithm 1 of Joachims 2006 (OP2) and its accelerated variant.

:func:`_error_steps` runs one problem ("``pos`` vs the rest") as a generator of the passes
it needs, so that one driver can run them one at a time (:func:`_solve_error`) and another
can fuse several problems' passes into one streamed pass (:mod:`.ovr`).

``accelerated`` (OCAS-style, Franc & Sonnenburg, ICML 2008): besides the cutting-plane
solution w_c the best point w_b so far is kept; the pass evaluates the primal objective
along the segment w_b + k(w_c − w_b) at a grid of step lengths (``line_points`` in (0, 1]
plus 1.25, 1.5, 2, 3) and accumulates cutting planes at a few grid points (``cut_points``)
at once, in the same single pass; w_b moves to the best grid point and the new cut is the
one nearest OCAS's k* + μ(1 − k*) (μ = ``mu``).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import Result, SolverError, binary_classes
from ..params import class_weights, parse_class_weight
from ._numba.cuts import vdot
from ._numba.sparse import segment_terms, sq_norm, step_towards
from .algorithms import algorithm
from .common import (
    _cut_grid,
    _finite,
    _line_grid,
    _Progress,
    _resolve_C,
    binary_result,
    emit_start,
    iteration_done,
    save_run,
)
from .passes import (
    REMAP_MIN_DIM,
    acc_cut,
    acc_row,
    column_remap,
    pass_column_counts,
    pass_count_pos,
    reduce_cut,
    segment_blocks,
    single_blocks,
    warm_blocks,
)
from .working_set import WorkingSet, _qp_atol, check_qp, points_budget

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer

log = logging.getLogger(__name__)


def _solve_error(store, engine, params, variant, callback, checkpoint=None) -> Result:
    neg, pos = binary_classes(store.meta)
    steps = _error_steps(store.meta, neg, pos, engine, params, variant, callback, checkpoint)
    req = next(steps)
    while True:
        fn, bc = req
        t = time.perf_counter()
        part = engine.map_reduce(store, fn, bc, reduce=reduce_cut)
        try:
            req = steps.send((part, time.perf_counter() - t))
        except StopIteration as done:
            return done.value


@dataclass
class _ErrorRun:
    """State of one binary problem of Algorithm 1 / the accelerated variant."""

    meta: Any
    neg: float
    pos: float
    params: Any
    variant: str
    checkpoint: Checkpointer | None
    ws: WorkingSet
    prog: _Progress
    n: int = 0
    d: int = 0
    dim: int = 0
    bias: float = 0.0
    C: float = 0.0
    Cp: float = 0.0
    eps: float = 0.0
    max_iter: int = 0
    max_inactive: int = 0
    atol: float = 0.0
    it: int = 0
    converged: bool = False
    stop: float = math.inf
    dual: float = -math.inf
    pt: float = 0.0
    resume: Any = None
    extra: dict = field(default_factory=dict)
    #: ``(s_neg, s_pos)``: relative per-class costs C_k / C of ``--class-weight`` (None: 1, 1)
    sw: tuple[float, float] | None = None
    #: the working-set QP stalled (:func:`check_qp`): the run stops, not converged
    stalled: bool = False
    #: ``(gmap, cols)`` of :func:`~.passes.column_remap` when the run works over the
    #: remapped columns (then ``dim`` is their number + 1; ``d`` stays the store's width)
    remap: tuple[np.ndarray, np.ndarray] | None = None
    #: ``train --init``: the model's w and cutting plane (:func:`~.warm.perf_start`)
    warm: Any = None

    def _weights(self) -> tuple:
        if self.remap is not None:
            return (self.sw, self.remap[0])
        return () if self.sw is None else (self.sw,)

    def single_request(self, w):
        d = self.dim - 1
        bc = (np.ascontiguousarray(w[:d]), float(w[d]), self.bias, self.pos, self.dim)
        return single_blocks, bc + self._weights()

    def full(self, w: np.ndarray) -> np.ndarray:
        """w over the store's columns (length ``d`` + 1) from w over the working columns."""
        if self.remap is None:
            return w
        out = np.zeros(self.d + 1)
        cols = self.remap[1]
        out[cols] = w[: cols.shape[0]]
        out[self.d] = w[cols.shape[0]]
        return out

    def work(self, v: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`full`: a vector over the store's columns (+ bias entry) over
        the working columns."""
        if self.remap is None:
            return np.asarray(v, dtype=np.float64).copy()
        cols = self.remap[1]
        out = np.zeros(self.dim)
        out[: cols.shape[0]] = v[cols]
        out[self.dim - 1] = v[self.d]
        return out

    def work_at(self, cols: np.ndarray, v: np.ndarray) -> np.ndarray:
        """A vector ``v`` over the store's columns ``cols`` (sorted; ``d`` is the bias
        entry), as :meth:`work` makes of a dense one, without the dense one."""
        out = np.zeros(self.dim)
        feat = cols < self.d
        if self.remap is None:
            out[cols[feat]] = v[feat]
        else:
            j = self.remap[0][cols[feat]]
            held = j >= 0
            out[j[held]] = v[feat][held]
        out[self.dim - 1] = float(v[~feat].sum())
        return out

    def warm_request(self, w: np.ndarray):
        """The first pass of a warm start (:func:`~.passes.pass_warm`): cuts at ``w`` and
        at the points of the model's planes, in one pass."""
        st = self.warm
        pts = [w] + [self.work_at(st.cols, p) for p in st.points]
        d = self.dim - 1
        P = np.ascontiguousarray(np.stack([p[:d] for p in pts], axis=1))
        pb = np.array([float(p[d]) for p in pts])
        bc: tuple = (P, pb, self.bias, self.pos, self.dim, self.sw or (1.0, 1.0))
        if self.remap is not None:
            bc = (*bc, self.remap[0])
        self.warm_points = pts
        return warm_blocks, (bc, st.n_rows)

    def warm_cuts(self, part: dict) -> tuple[np.ndarray, float, float]:
        """Working set of a warm start: the cuts at the model's w and at its planes' points
        over every row, and the model's aggregated plane completed over the appended rows
        (module :mod:`..warm`); returns the best of these points ``(w, P(w), ξ(w))``."""
        n, st, C = self.n, self.warm, self.C
        best = (math.inf, 0)
        for j, pt in enumerate(self.warm_points):
            self.ws.add(acc_cut(part["g"], j, n=n), float(part["cnt"][j]) / n, point=pt)
            obj = 0.5 * float(vdot(pt, pt)) + C * float(part["hinge"][j])
            best = min(best, (obj, j))
        if st.cut is not None and st.count > 0:
            ext = self.work_at(st.cols, st.cut) * (st.count / n)
            if part.get("g_new") is not None:
                ext += acc_row(part["g_new"], 0) / n
            self.ws.add(ext, (st.r * st.count + float(part["cnt_new"][0])) / n)
        obj, j = best
        w = self.warm_points[j]
        self.warm_points = []
        return w, obj, float(part["hinge"][j]) / n

    def save(self, scalars: dict, arrays: dict) -> None:
        save_run(self, scalars, arrays)

    def qp(self) -> np.ndarray:
        """Solve OP3 over W; returns w, sets the dual value (and ``stalled``, see
        :func:`~ooc_svm.solvers.perf.working_set.check_qp`)."""
        w, self.dual, _ = self.ws.solve(self.Cp, self.atol)
        self.stalled = self.stalled or check_qp(self.C, self.Cp, self.ws, "error")
        return w


def _error_run(
    meta, neg, pos, engine, params, variant, callback, checkpoint, remap=None
) -> _ErrorRun:
    """Sizes, constants, working set and (on ``--resume``) the restored state; ``remap``:
    the run works over the remapped columns (:func:`~.passes.column_remap`)."""
    n = meta.n_rows
    d = meta.n_features
    dim = d + 1 if remap is None else remap[1].shape[0] + 1
    C = _resolve_C(params, n)
    eps = float(params.eps)
    limit = float(params.dense_limit_mb) * 2**20
    if remap is not None:  # the map and its inverse count in the budget
        limit -= remap[0].nbytes + remap[1].nbytes
    # the planes share --dense-limit-mb with the dense vectors (at least a quarter of it),
    # counted at the store's width: the model and the pass's vectors are that wide at the end,
    # and over remapped columns the per-pass accumulators grow with the planes' budget
    ws = WorkingSet(dim, max(limit / 4, limit - params.dense_vectors(meta) * 8.0 * (d + 1)))
    ws.points_limit = points_budget(ws.limit, dim)
    prog = _Progress(engine, callback)
    run = _ErrorRun(
        meta, neg, pos, params, variant, checkpoint, ws, prog, n=n, d=d, dim=dim,
        bias=float(params.bias), C=C, Cp=C * n, eps=eps, max_iter=int(params.max_iter),
        max_inactive=int(params.max_inactive), atol=_qp_atol(eps), remap=remap,
    )  # fmt: skip
    resume = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    run.resume = resume
    if resume is not None:
        ws.restore(resume.scalars, resume.arrays)
        run.it = int(resume.scalars["it"])
        dual = resume.scalars["dual"]
        run.dual = float(dual) if dual is not None else -math.inf
        prog.p0 -= int(resume.scalars["passes"])
        log.info("perf: resuming at iteration %d", run.it)
    return run


def _error_steps(
    meta, neg, pos, engine, params, variant, callback, checkpoint=None, share: int = 1
):
    """Algorithm 1 (``paper``) or its accelerated variant for the problem ``pos`` vs the rest,
    as a generator: it yields the pass it needs, ``(pass function, broadcast)``, receives
    ``(reduced partial, pass seconds)`` and returns the :class:`Result`.

    The driver decides how passes are run: one at a time (:func:`_solve_error`) or several
    problems' passes fused into one streamed pass (:func:`solve_ovr`). ``share`` divides the
    memory budget of a pass's accumulators between the problems that share it.
    """
    remap = None
    t0 = time.perf_counter()
    if share == 1 and checkpoint is None and meta.n_features >= _remap_min_dim():
        part, _ = yield (pass_column_counts, (meta.n_features,))
        remap = column_remap(part["g"], meta.n_features)
        del part
        log.info(
            "perf: %d of the %d columns hold non-zeros; training over them, most frequent first",
            remap[1].shape[0],
            meta.n_features,
        )
    run = _error_run(meta, neg, pos, engine, params, variant, callback, checkpoint, remap)
    if remap is not None:  # the counting pass is one of the run's passes and its time
        run.prog.p0 -= 1
        run.prog.t0 = t0
    if params.class_weight is not None:
        n_pos = None
        if parse_class_weight(params.class_weight) == "balanced":
            part, _ = yield (pass_count_pos, (pos,))
            n_pos = int(part["n_pos"][0])
        run.sw = relative_costs(params.class_weight, neg, pos, n_pos, run.n)
        costs = (run.C * run.sw[0], run.C * run.sw[1])
        log.info("perf: class costs C_neg = %.6g, C_pos = %.6g", *costs)
    if params.init is not None and run.resume is None:
        from .warm import perf_start

        run.warm = perf_start(
            params.init, meta, [neg, pos], "error", run.bias, weights=run.sw or (1.0, 1.0)
        )
    if not algorithm(variant).line_search:  # paper: to the QP's solution
        final = yield from _paper_steps(run)
    else:
        final = yield from _accelerated_steps(run, share)
    if not run.converged and not run.stalled and not run.prog.stalled:
        log.warning(
            "perf: stopped after %d iterations (max_iter) with violation %.3g > eps",
            run.it,
            run.stop,
        )
    w_final, obj, xi = final
    return _error_result(run, run.full(w_final), obj, xi)


def _remap_min_dim() -> int:
    """``REMAP_MIN_DIM`` as ``ooc_svm.solvers.perf`` exports it (tests lower it)."""
    pkg = sys.modules.get(__package__ or "")
    return int(getattr(pkg, "REMAP_MIN_DIM", REMAP_MIN_DIM))


def _paper_steps(run: _ErrorRun):
    """Algorithm 1 as published; returns (w, objective, ξ) of the final w."""
    n, C, ws = run.n, run.C, run.ws
    w = np.zeros(run.dim)
    if run.resume is not None:
        w = np.array(run.resume.arrays["w"], dtype=np.float64)
    warm = run.warm is not None
    if warm:
        w = run.work(run.warm.w)
    while True:
        part, run.pt = yield (run.warm_request(w) if warm else run.single_request(w))
        hinge = float(part["hinge"][0])
        cnt = float(part["cnt"][0])
        obj = 0.5 * float(vdot(w, w)) + C * hinge
        xi_new = hinge / n
        if warm:  # the model's w is no QP solution over W: no stop test at it
            emit_start(run, obj, xi_new, warm=True)
            run.warm_cuts(part)
            warm = False
            w = run.qp()
            run.it += 1
            run.save({}, {"w": w})
            continue
        else:
            xi_w = ws.slack()
            run.stop = xi_new - xi_w
            if iteration_done(run, obj, xi_new, _finite(run.dual)):
                break
            ws.add(acc_cut(part["g"], 0, n=n), cnt / n, point=w)
        ws.drop_inactive(run.max_inactive)
        w = run.qp()
        run.it += 1
        run.save({}, {"w": w})
    return w, obj, xi_new


def _accelerated_start(run: _ErrorRun):
    """Iteration 0 of the accelerated variant at w = 0 (or the resumed best point):
    returns (w_b, P(w_b), ξ(w_b))."""
    if run.resume is not None:
        r = run.resume
        return (
            np.array(r.arrays["wb"], dtype=np.float64),
            float(r.scalars["Pb"]),
            float(r.scalars["xib"]),
        )
    part, run.pt = yield run.single_request(np.zeros(run.dim))
    hinge = float(part["hinge"][0])
    wb = np.zeros(run.dim)
    Pb = 0.5 * float(vdot(wb, wb)) + run.C * hinge
    xib = hinge / run.n
    emit_start(run, Pb, xib, step=0.0)
    run.ws.add(acc_cut(part["g"], 0, n=run.n), float(part["cnt"][0]) / run.n, point=wb)
    run.save({"Pb": Pb, "xib": xib}, {"wb": wb})
    return wb, Pb, xib


def _accelerated_warm(run: _ErrorRun):
    """Iteration 0 of a warm start: one pass at the model's w (every row, and the appended
    rows apart); returns (w_b, P(w_b), ξ(w_b)) with W holding the two warm planes."""
    part, run.pt = yield run.warm_request(run.work(run.warm.w))
    wb, Pb, xib = run.warm_cuts(part)
    emit_start(run, Pb, xib, step=0.0, warm=True)
    run.save({"Pb": Pb, "xib": xib}, {"wb": wb})
    return wb, Pb, xib


def _accelerated_steps(run: _ErrorRun, share: int):
    """The accelerated (OCAS-style) variant; returns (w_b, P(w_b), ξ(w_b))."""
    params, n, dim, C, ws = run.params, run.n, run.dim, run.C, run.ws
    d = dim - 1
    kv = _line_grid(params.line_points)
    mu = float(params.mu)
    K = max(1, int(params.cut_points))
    # a pass holds a few K-row accumulators (the fold of the reduction): at most
    # three dense ones within the working-set budget (compact ones, over the columns the
    # shards hold, are no bigger when the store has as many non-zeros as columns)
    K = int(max(min(K, 2), min(K, ws.limit / (3 * 8.0 * dim * max(1, share)))))
    kg = _cut_grid(K, mu)
    if run.warm is not None:
        wb, Pb, xib = yield from _accelerated_warm(run)
        # the stop test needs no pass: P(w_b) is known and W holds two valid planes
        run.it += 1
        run.qp()
        run.stop = (Pb - run.dual) / run.Cp
        if iteration_done(run, Pb, xib, run.dual, step=0.0):
            return wb, Pb, xib
    else:
        wb, Pb, xib = yield from _accelerated_start(run)
    # w_b lives in column 0 of the pass's two-column array (w_c in column 1) and its bias
    # entry in wb_bias: with the QP's w_c while column 1 is filled, at most three dense
    # vectors over the features are alive (two between iterations)
    w2 = np.empty((d, 2))
    w2[:, 0] = wb[:d]
    wb_bias = float(wb[d])
    del wb
    while True:
        run.it += 1
        wc = run.qp()
        w2[:, 1] = wc[:d]
        wc_bias = float(wc[d])
        del wc
        tb, tc = wb_bias * run.bias, wc_bias * run.bias
        bc = (w2, tb, tc, run.bias, run.pos, dim, kv, kg) + run._weights()
        part, run.pt = yield (segment_blocks, bc)
        a2, a1 = _segment_terms(w2, wb_bias, wc_bias)
        a0 = _sq_norm(w2, wb_bias)
        vals = 0.5 * (a0 + 2 * kv * a1 + kv * kv * a2) + C * part["hinge"]
        q = int(np.argmin(vals))
        kstar = float(kv[q]) if vals[q] < Pb else 0.0
        p = int(np.argmin(np.abs(kg - (kstar + mu * (1.0 - kstar)))))
        point = _segment_point(w2, wb_bias, wc_bias, float(kg[p])) if ws.points_limit else None
        if vals[q] < Pb:
            step_towards(w2[:, 0], w2[:, 1], kstar)
            wb_bias = wb_bias + kstar * (wc_bias - wb_bias)
            Pb = 0.5 * _sq_norm(w2, wb_bias) + C * float(part["hinge"][q])
            xib = float(part["hinge"][q]) / n
        run.stop = (Pb - run.dual) / run.Cp
        if iteration_done(run, Pb, xib, run.dual, step=kstar):
            break
        cut = acc_cut(part["g"], p, upto=True, n=n)
        cnt = float(part["cnt"][: p + 1].sum()) / n
        del part
        ws.add(cut, cnt, point=point)
        del point
        del cut
        ws.drop_inactive(run.max_inactive)
        if run.checkpoint is not None:
            run.save({"Pb": Pb, "xib": xib}, {"wb": np.append(w2[:, 0], wb_bias)})
    wb = np.append(w2[:, 0], wb_bias)
    return wb, Pb, xib


def _segment_point(w2: np.ndarray, wb_bias: float, wc_bias: float, k: float) -> np.ndarray:
    """w_b + k(w_c − w_b) with its bias entry (float32: where a plane was computed)."""
    out = np.empty(w2.shape[0] + 1, dtype=np.float32)
    out[:-1] = w2[:, 0] + k * (w2[:, 1] - w2[:, 0])
    out[-1] = wb_bias + k * (wc_bias - wb_bias)
    return out


def _segment_terms(w2: np.ndarray, wb_bias: float, wc_bias: float) -> tuple[float, float]:
    """(‖w_c − w_b‖², w_b·(w_c − w_b)) of w_b = (w2[:, 0], wb_bias), w_c = (w2[:, 1],
    wc_bias), summed in index order as over the dense difference, without forming it."""
    a2, a1 = segment_terms(w2[:, 0], w2[:, 1])
    db = wc_bias - wb_bias
    return a2 + db * db, a1 + wb_bias * db


def _sq_norm(w2: np.ndarray, wb_bias: float) -> float:
    """‖w_b‖² of w_b = (w2[:, 0], wb_bias), summed in index order."""
    return float(sq_norm(w2[:, 0])) + wb_bias * wb_bias


def _error_result(run: _ErrorRun, w_final, obj_final: float, xi_final: float) -> Result:
    """The binary linear model and the :class:`Result` of one error-loss problem."""
    from .warm import aggregate_cut, attach_warm

    C, sw = run.C, run.sw
    costs = None if sw is None else [C * sw[0], C * sw[1]]
    res = binary_result(
        run, w_final, run.variant, obj_final, run.it, run.converged, run.stop, xi_final,
        run.dual, costs,
    )  # fmt: skip
    if run.params.warm_state:
        cols = None if run.remap is None else run.remap[1]
        cut, points = aggregate_cut(run.ws), run.ws.active_points()
        attach_warm(res.model, cut, points, run.n, run.bias, sw, cols)
    if run.warm is not None:
        res.model.info["warm_start"] = True
    return res


def relative_costs(
    spec: str, neg: float, pos: float, n_pos: int | None, n: int
) -> tuple[float, float]:
    """``(s_neg, s_pos)`` = ``(C_neg / C, C_pos / C)`` of ``--class-weight spec`` for the
    problem ``pos`` vs the rest (``neg`` may be NaN for "the rest" of one-vs-rest).

    ``balanced`` needs ``n_pos`` (rows of class ``pos``) of the ``n`` rows: ``n / (2 n_k)``.
    """
    if parse_class_weight(spec) != "balanced":
        return class_weights(spec, neg, pos)
    n_pos = int(n_pos or 0)
    if n_pos == 0 or n_pos == n:
        raise SolverError("--class-weight balanced: one class has no rows")
    return n / (2.0 * (n - n_pos)), n / (2.0 * n_pos)
