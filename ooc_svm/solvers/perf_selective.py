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
  selects S: the rows nearest the margin along the segment (distance of 1 from the interval
  of their margins, then |1 − margin at w_c|, ties broken by a hash of the row number) that
  fit the byte budget ``inner_mb``. Each shard returns its closest rows up to ``SHARE`` = 1.25
  times its share of the budget (CSR slices); partials concatenate these candidate lists and
  merge them down to the budget when they exceed twice of it (:func:`reduce_select`), and the
  driver keeps the closest within the budget. So only O(budget) bytes travel from workers,
  and the selection is the same for any engine and any reduction tree.
- *Inner iterations* (no pass): the rows outside S keep their coefficients cᵢ⁰ from the
  pass's plane at the new w_b (=: w_p); the rows in S choose cᵢ = [mᵢ(w) < 1] at the current
  w. Each such plane is a constraint of OP2, hence a valid cut. Together they define the lower
  model P̃(w) = ½‖w‖² + C(Σ_{i∉S} cᵢ⁰(1 − mᵢ(w)) + Σ_{i∈S} max(0, 1 − mᵢ(w))) ≤ P(w), equal to
  P at w_p. Away from w_p, P̃ can fall below the working set's own model
  M(w) = ½‖w‖² + C_perf·max(0, maxⱼ rⱼ − w·gⱼ) (also ≤ P), so the inner loop is OCAS
  (Franc & Sonnenburg, ICML 2008) on F = max(P̃, M): solve OP3 over the working set, line
  search of F between the best inner point and the QP solution (F is convex; its minimiser
  lies between k = 1, where M is least, and the exact minimiser of P̃, found from sorted
  breakpoints; golden section between), new plane at k* + μ(1 − k*). It stops when
  F(best) − D ≤ ``inner_share``·ε·C_perf (or after ``max_inner`` planes); the next pass runs
  on the segment from w_b to the best inner point.

P ≥ P̃ everywhere, so a small gap of P̃ says nothing about P until a pass has measured it; only
the full pass gives the exact P(w) and the true most violated constraint. The certificate
therefore only ever uses P values measured by passes. When S holds every row, P̃ = P and the
method is the accelerated variant run in memory: two or three passes. The pass's line search
keeps P(w_b) monotone when the proposal overshoots (rows outside S changed sides).

Memory: the selection (≤ ``inner_mb`` MiB, counted as 64 bytes per row plus 8 per non-zero;
default 256) lives in the driver between passes; during a pass the shards' candidates
(≤ 1.25 budgets) and the merged result add about two budgets more (measured: a 4 MiB budget
added 12 MiB of peak RSS over the accelerated variant's, a budget holding a 40 MiB store 87
MiB, tests/test_perf_selective.py; on the 1M store the default 256 MiB raised the peak RSS
from 468 to 1232 MiB, scripts/bench_passes.py). When the budget holds every row, P̃ = P
and the run is the accelerated variant in memory after one selecting pass. Checkpoints are not
supported by this variant (yet).
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from ..kernels.csr import csr_take_rows, u32
from ..kernels.perf import accumulate_rows, vdot
from ..kernels.perf_selective import (
    copy_rows,
    cut_segment_margins,
    hinge_line,
    select_prefix,
    signed_margins,
    violated_at,
)
from ..model import Model
from . import Callback, Result, SolverError, binary_classes
from .params import as_params
from .perf import (
    Params,
    WorkingSet,
    _finish_accumulator,
    _golden,
    _new_accumulator,
    _Progress,
    _qp_atol,
    _resolve_C,
    acc_row,
    reduce_cut,
)

log = logging.getLogger(__name__)

STOPPING_RULE = (
    "selective: P(w_best) - dual(W) <= eps * C * n, P(w_best) measured by a full pass "
    "(the accelerated variant's certificate)"
)

#: bytes a selected row takes besides its non-zeros: 2 keys, tie, row, indptr, label, margins
ROW_BYTES = 64
#: bytes per selected non-zero: int32 column + float32 value
NZ_BYTES = 8
#: a shard returns up to this many times its share of the selection budget
SHARE = 1.25

_HASH = np.uint64(0x9E3779B97F4A7C15)


# ------------------------------------------------------------------------------------------
# selection of the rows near the margin (bounded, deterministic)
# ------------------------------------------------------------------------------------------


def _tie(rows: np.ndarray) -> np.ndarray:
    """A bijective hash of global row numbers: spreads ties (e.g. w = 0) over the store."""
    h = rows.astype(np.uint64) * _HASH
    return h ^ (h >> np.uint64(29))


def _empty_selection(budget: int) -> dict:
    return {
        "budget": int(budget),
        "key": np.zeros(0),
        "key2": np.zeros(0),
        "tie": np.zeros(0, dtype=np.uint64),
        "row": np.zeros(0, dtype=np.int64),
        "indptr": np.zeros(1, dtype=np.int64),
        "indices": np.zeros(0, dtype=np.int32),
        "data": np.zeros(0, dtype=np.float32),
        "ys": np.zeros(0),
        "mb": np.zeros(0),
        "mc": np.zeros(0),
    }


_PER_ROW = ("key", "key2", "tie", "row", "ys", "mb", "mc")


def segment_keys(mb: np.ndarray, mc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closeness to the margin of rows with margins ``mb`` at w_b and ``mc`` at w_c: the
    distance of 1 from [min(mb, mc), max(mb, mc)] (0 for rows that change sides along the
    segment), then |1 − mc|."""
    lo = np.minimum(mb, mc)
    hi = np.maximum(mb, mc)
    key = np.maximum(0.0, np.maximum(lo - 1.0, 1.0 - hi))
    return key, np.abs(1.0 - mc)


def select_rows(indptr, indices, data, ys, mb, mc, row_start: int, budget: int) -> dict:
    """The rows with the smallest (``key``, ``key2``, :func:`_tie`) that fit ``budget``
    bytes, as a selection dict (CSR slices in that order, labels ±1, keys)."""
    key, key2 = segment_keys(mb, mc)
    n = key.shape[0]
    sel = _empty_selection(budget)
    if n == 0 or budget < ROW_BYTES:
        return sel
    nnz_row = np.diff(indptr)
    kmax = int(min(n, budget // (ROW_BYTES + NZ_BYTES * int(nnz_row.min()))))
    if kmax == 0:
        return sel
    if kmax < n:
        t = np.partition(key, kmax - 1)[kmax - 1]
        cand = np.flatnonzero(key <= t)
    else:
        cand = np.arange(n, dtype=np.int64)
    full = {
        "key": key[cand],
        "key2": key2[cand],
        "row": cand.astype(np.int64) + int(row_start),
        "ys": ys[cand],
        "mb": mb[cand],
        "mc": mc[cand],
        "budget": int(budget),
    }
    full["tie"] = _tie(full["row"])
    order = np.lexsort((full["tie"], full["key2"], full["key"]))
    k = int(select_prefix(indptr, cand[order], ROW_BYTES, NZ_BYTES, budget))
    sub = {kk: (v[order[:k]] if kk != "budget" else v) for kk, v in full.items()}
    ip, ix, dt = csr_take_rows(indptr, indices, data, np.ascontiguousarray(cand[order[:k]]))
    sub.update(indptr=ip, indices=ix, data=dt)
    return sub


def merge_selections(*sels: dict) -> dict:
    """The closest rows of several selections within the budget (order: key, key2, tie).

    Only the per-row keys are concatenated; the chosen rows' CSR slices are copied from their
    sources straight into the result, so the peak is the inputs plus the result."""
    sels = tuple(s for s in sels if s["key"].shape[0])
    if len(sels) == 0:
        return _empty_selection(0)
    if len(sels) == 1:
        return sels[0]
    budget = sels[0]["budget"]
    cat = {k: np.concatenate([s[k] for s in sels]) for k in _PER_ROW}
    src = np.concatenate(
        [np.full(s["key"].shape[0], j, dtype=np.int64) for j, s in enumerate(sels)]
    )
    local = np.concatenate([np.arange(s["key"].shape[0], dtype=np.int64) for s in sels])
    length = np.concatenate([np.diff(s["indptr"]) for s in sels])
    order = np.lexsort((cat["tie"], cat["key2"], cat["key"]))
    used = np.cumsum(ROW_BYTES + NZ_BYTES * length[order])
    k = int(np.searchsorted(used, budget, side="right"))
    take = order[:k]
    out = {key: v[take] for key, v in cat.items()}
    del cat
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(length[take], out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=sels[0]["indices"].dtype)
    data = np.empty(nnz, dtype=sels[0]["data"].dtype)
    src_t = src[take]
    for j, s in enumerate(sels):
        pos = np.flatnonzero(src_t == j)
        if pos.shape[0]:
            copy_rows(
                s["indptr"], s["indices"], s["data"], local[take[pos]], indptr, pos, indices, data
            )
    out.update(budget=budget, indptr=indptr, indices=indices, data=data)
    return out


def selection_bytes(sel: dict) -> int:
    """Bytes of a selection as the budget counts them."""
    return ROW_BYTES * sel["key"].shape[0] + NZ_BYTES * sel["indices"].shape[0]


# ------------------------------------------------------------------------------------------
# pass function and reduce (module level: the Dask engine pickles them)
# ------------------------------------------------------------------------------------------


def pass_select(shard, bc):
    """One streamed pass on the segment w_b + k(w_c − w_b): hinge sums and cutting planes at
    the grid ``kg`` (as the accelerated pass), plus the shard's rows nearest the margin along
    the segment (:func:`segment_keys`) within the byte budget."""
    w2, tb, tc, bias, pos, dim, kg, budget, store_bytes = bc
    K = kg.shape[0]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, K, True)
    hv = np.zeros(K)
    cnt = np.zeros(K, dtype=np.int64)
    mb = np.empty(shard.n_rows)
    mc = np.empty(shard.n_rows)
    cut_segment_margins(
        shard.indptr,
        u32(shard.indices),
        gidx,
        shard.data,
        shard.y,
        pos,
        w2,
        tb,
        tc,
        kg,
        hv,
        acc,
        cnt,
        bias,
        bias_slot,
        mb,
        mc,
    )
    ys = np.where(np.asarray(shard.y) == pos, 1.0, -1.0)
    indptr = np.ascontiguousarray(shard.indptr, dtype=np.int64)
    quota = shard_quota(shard.n_rows, shard.nnz, budget, store_bytes)
    sel = select_rows(indptr, shard.indices, shard.data, ys, mb, mc, shard.row_start, quota)
    sel["budget"] = int(budget)
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": cnt.astype(np.float64),
        "hinge": hv,
        "sel": [sel],
    }


def shard_quota(n_rows: int, nnz: int, budget: int, store_bytes: int) -> int:
    """Bytes of its closest rows a shard returns: ``SHARE`` times its share of the budget
    (its share of the store's bytes), at most the budget. A function of the shard alone, so
    the candidates — and the selection — do not depend on the engine."""
    own = ROW_BYTES * int(n_rows) + NZ_BYTES * int(nnz)
    return int(min(budget, math.ceil(SHARE * budget * own / max(1, store_bytes))))


def reduce_select(a, b):
    """Reduce of :func:`pass_select` partials: planes summed, the shards' candidate lists
    concatenated — and merged down to the budget whenever they exceed twice the budget, which
    keeps every partial O(budget) and changes nothing in the final :func:`merge_selections`
    (a row among the closest of the union is among the closest of any part holding it)."""
    if a is None:
        return b
    if b is None:
        return a
    out = reduce_cut(
        {k: v for k, v in a.items() if k != "sel"}, {k: v for k, v in b.items() if k != "sel"}
    )
    sel = list(a["sel"]) + list(b["sel"])
    if sel and sum(selection_bytes(s) for s in sel) > 2 * sel[0]["budget"]:
        sel = [merge_selections(*sel)]
    out["sel"] = sel
    return out


# ------------------------------------------------------------------------------------------
# the lower model P~ on the rows in memory
# ------------------------------------------------------------------------------------------


class _Inner:
    """P̃ of the module docstring: the selected rows (CSR) and the fixed part of the others.

    ``G`` = Σ_{i∉S} cᵢ⁰yᵢx̃ᵢ and ``R`` = Σ_{i∉S} cᵢ⁰ (unnormalised), so that for w
    P̃(w) = ½‖w‖² + C(R − w·G + Σ_{i∈S} max(0, 1 − mᵢ(w))).
    """

    def __init__(
        self, sel: dict, kg: np.ndarray, q: int, G_p: np.ndarray, cnt_p: float, d: int, bias: float
    ):
        self.indptr = sel["indptr"]
        self.idx = u32(np.ascontiguousarray(sel["indices"]))
        self.data = sel["data"]
        self.ys = sel["ys"]
        self.d = d
        self.bias = bias
        # the S rows' coefficients in the pass's plane at kg[q], by the pass's own rule, so
        # that G, R hold exactly the other rows' part of that plane
        viol = violated_at(sel["mb"], sel["mc"], kg, q, np.empty(self.ys.shape[0]))
        self.G = G_p - self.plane(viol * self.ys)
        self.R = float(cnt_p) - float(viol.sum())

    def plane(self, coef: np.ndarray) -> np.ndarray:
        """Σ_{i∈S} coefᵢ x̃ᵢ as a dense vector of length d + 1."""
        g = np.zeros(self.d + 1)
        tot = accumulate_rows(self.indptr, self.idx, self.data, coef, g)
        g[self.d] += tot * self.bias
        return g

    def margins(self, w: np.ndarray) -> np.ndarray:
        out = np.empty(self.ys.shape[0])
        signed_margins(
            self.indptr,
            self.idx,
            self.data,
            self.ys,
            w[: self.d],
            float(w[self.d]) * self.bias,
            out,
        )
        return out

    def value(self, w: np.ndarray, m: np.ndarray, C: float) -> float:
        hinge = float(hinge_line(m, m, 0.0))
        return 0.5 * float(vdot(w, w)) + C * (self.R - float(vdot(w, self.G)) + hinge)

    def cut(self, m: np.ndarray, n: int) -> tuple[np.ndarray, float]:
        """The plane whose S-coefficients are [mᵢ < 1]: (g, r) normalised by n."""
        viol = m < 1.0
        g = self.G + self.plane(viol.astype(np.float64) * self.ys)
        return g / n, (self.R + float(np.count_nonzero(viol))) / n


def line_search(a0, a1, a2, L0, L1, mb, dm, C) -> tuple[float, float]:
    """Exact minimiser k ≥ 0 of the convex piecewise quadratic
    f(k) = ½(a0 + 2k·a1 + k²·a2) + C(L0 − k·L1 + Σᵢ max(0, 1 − mbᵢ − k·dmᵢ));
    returns (k*, f(k*))."""
    b = 1.0 - mb
    act0 = (b > 0.0) | ((b == 0.0) & (dm < 0.0))
    s0 = a1 - C * L1 - C * float(dm[act0].sum())
    if s0 >= 0.0 or a2 <= 0.0:
        k = 0.0
    else:
        nzd = dm != 0.0
        t = np.full(mb.shape[0], -1.0)
        t[nzd] = b[nzd] / dm[nzd]
        brk = t > 0.0
        t = t[brk]
        jump = C * np.abs(dm[brk])
        order = np.argsort(t, kind="stable")
        t = t[order]
        jump = jump[order]
        J = np.cumsum(jump)
        Jb = np.concatenate([[0.0], J[:-1]]) if J.shape[0] else J
        before = s0 + a2 * t + Jb
        after = before + jump
        hit = np.flatnonzero(after >= 0.0)
        if hit.shape[0] == 0:
            k = -(s0 + (float(J[-1]) if J.shape[0] else 0.0)) / a2
        else:
            j = int(hit[0])
            k = -(s0 + float(Jb[j])) / a2 if before[j] >= 0.0 else float(t[j])
        k = max(0.0, k)
    f = 0.5 * (a0 + 2 * k * a1 + k * k * a2) + C * (L0 - k * L1 + float(hinge_line(mb, dm, k)))
    return k, f


class _Segment:
    """F(k) = max(P̃, M) on the segment wb + k(wc − wb), M the cutting-plane model of the
    working set: ½‖w‖² + C_perf·max(0, maxⱼ rⱼ − w·gⱼ). Both are lower bounds of P; F is the
    inner loop's objective (P̃ alone can fall below the working set's dual bound away from
    the pass point)."""

    def __init__(self, inner: _Inner, ws: WorkingSet, wb, wc, mb, mc, C: float, Cp: float):
        self.dw = wc - wb
        self.mb = mb
        self.dm = mc - mb
        self.C = C
        self.Cp = Cp
        self.a0 = float(vdot(wb, wb))
        self.a1 = float(vdot(wb, self.dw))
        self.a2 = float(vdot(self.dw, self.dw))
        self.L0 = inner.R - float(vdot(wb, inner.G))
        self.L1 = float(vdot(self.dw, inner.G))
        r = np.asarray(ws.r)
        self.u = r - np.array([ws._dot(v, wb) for v in ws.vecs])
        self.v = np.array([ws._dot(v, self.dw) for v in ws.vecs])

    def __call__(self, k: float) -> float:
        quad = 0.5 * (self.a0 + 2 * k * self.a1 + k * k * self.a2)
        lt = self.C * (self.L0 - k * self.L1 + float(hinge_line(self.mb, self.dm, k)))
        lm = self.Cp * max(0.0, float(np.max(self.u - k * self.v))) if self.u.shape[0] else 0.0
        return quad + max(lt, lm)

    def minimise(self, evals: int = 30) -> tuple[float, float]:
        """k* ≥ 0 and F(k*): F is convex, M is least at k = 1 (wc solves the QP) and P̃ at
        the exact :func:`line_search` point k̃, so k* lies between 1 and k̃."""
        kt, _ = line_search(self.a0, self.a1, self.a2, self.L0, self.L1, self.mb, self.dm, self.C)
        lo, hi = min(1.0, kt), max(1.0, kt)
        if hi - lo <= 1e-12:
            return lo, self(lo)
        return _golden(self, lo, hi, evals)


# ------------------------------------------------------------------------------------------
# the solver
# ------------------------------------------------------------------------------------------


#: step lengths on the segment w_b + k(w_c − w_b) at which a pass measures P and a plane
GRID = np.array([0.0, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0])


def solve_selective(
    store,
    engine,
    params: Params | dict,
    *,
    callback: Callback | None = None,
    checkpoint=None,
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
    meta = store.meta
    params.validate(meta)
    if checkpoint is not None:
        raise SolverError("perf --variant selective does not support --checkpoint yet")
    loss = params.resolve_loss(meta)
    if loss != "error":
        raise SolverError(
            f"perf --variant selective trains --loss error only (got {loss}); use accelerated"
        )
    neg, pos = binary_classes(meta)
    n = meta.n_rows
    d = meta.n_features
    dim = d + 1
    bias = float(params.bias)
    C = _resolve_C(params, n)
    Cp = C * n
    eps = float(params.eps)
    mu = float(params.mu)
    share = float(params.inner_share)
    max_iter = int(params.max_iter)
    max_inner = int(params.max_inner)
    max_inactive = int(params.max_inactive)
    budget = int(float(params.inner_mb) * 2**20)
    ws = WorkingSet(dim, float(params.dense_limit_mb) * 2**20)
    prog = _Progress(engine, callback)
    atol = _qp_atol(eps)
    kg = GRID
    K = kg.shape[0]
    sbytes = ROW_BYTES * n + NZ_BYTES * int(meta.nnz)

    w_b = np.zeros(dim)
    w_c = w_b
    P_b, xi_b = math.inf, math.inf
    D = -math.inf
    outer = 0
    inner_total = 0
    converged = False
    stop = math.inf
    sel_rows = 0
    sel_peak = 0
    while True:
        t = time.perf_counter()
        w2 = np.ascontiguousarray(np.stack([w_b[:d], w_c[:d]], axis=1))
        bc = (w2, float(w_b[d]) * bias, float(w_c[d]) * bias, bias, pos, dim, kg, budget, sbytes)
        part = engine.map_reduce(store, pass_select, bc, reduce=reduce_select)
        pt = time.perf_counter() - t
        dw = w_c - w_b
        a0, a1, a2 = float(vdot(w_b, w_b)), float(vdot(w_b, dw)), float(vdot(dw, dw))
        vals = 0.5 * (a0 + 2 * kg * a1 + kg * kg * a2) + C * part["hinge"]
        q = int(np.argmin(vals))
        if vals[q] < P_b:
            w_b = w_b + kg[q] * dw
            P_b = 0.5 * float(vdot(w_b, w_b)) + C * float(part["hinge"][q])
            xi_b = float(part["hinge"][q]) / n
        else:
            q = 0
        stop = (P_b - D) / Cp
        sel = merge_selections(*part.pop("sel"))
        sel_rows = int(sel["key"].shape[0])
        sel_peak = max(sel_peak, selection_bytes(sel))
        prog.emit(
            {
                "iteration": outer + inner_total,
                "objective": P_b,
                "xi": xi_b,
                "violation": stop if math.isfinite(stop) else None,
                "working_set": len(ws),
                "pass_seconds": pt,
                "lower_bound": D if math.isfinite(D) else None,
                "step": float(kg[q]),
                "selected_rows": sel_rows,
            }
        )
        if stop <= eps:
            converged = True
            break
        if outer >= max_iter:
            break
        outer += 1
        # the exact most violated constraint at the new best point, and the one at w_c
        G_p = acc_row(part["g"], q, upto=True)
        cnt_p = float(part["cnt"][: q + 1].sum())
        ws.add(G_p / n, cnt_p / n)
        if q != K - 1 and a2 > 0.0:
            ws.add(acc_row(part["g"], K - 1, upto=True) / n, float(part["cnt"].sum()) / n)
        ws.drop_inactive(max_inactive)
        del part
        inner = _Inner(sel, kg, q, G_p, cnt_p, d, bias)
        del sel
        # OCAS on F = max(P~, M) from the best point, where P~ = P
        wb = w_b
        mb = inner.margins(wb)
        Fb = inner.value(wb, mb, C)
        wc = w_b
        seg = None
        for _ in range(max_inner):
            wc, dual, _ = ws.solve(Cp, atol)
            D = max(D, dual)
            if P_b - D <= eps * Cp:
                break
            mc = inner.margins(wc)
            seg = _Segment(inner, ws, wb, wc, mb, mc, C, Cp)
            k, f = seg.minimise()
            if f < Fb:
                wb = wb + k * seg.dw
                mb = mb + k * seg.dm
                Fb = f
            else:
                k = 0.0
            if Fb - D <= share * eps * Cp:
                break
            kc = k + mu * (1.0 - k)
            g, r = inner.cut(seg.mb + kc * seg.dm, n)
            ws.add(g, r)
            ws.drop_inactive(max_inactive)
            inner_total += 1
        log.debug(
            "perf selective: pass %d, %d rows in memory, %d inner planes, F %.10g, D %.10g",
            outer,
            sel_rows,
            inner_total,
            Fb,
            D,
        )
        if P_b - D <= eps * Cp:
            stop = (P_b - D) / Cp
            converged = True
            break
        w_c = wb if wb is not w_b else wc
        del inner, seg  # the next pass brings a new selection
    if not converged:
        log.warning("perf: stopped after %d passes (max_iter) with gap %.3g > eps", outer, stop)
    info = {
        "solver": "perf",
        "loss": "error",
        "variant": "selective",
        "C": C,
        "C_perf": Cp,
        "c_perf_svmperf": Cp / 100.0,
        "eps": eps,
        "bias": bias,
        "objective": P_b,
        "iterations": outer + inner_total,
        "converged": converged,
        "float32_planes": ws.float32,
    }
    model = Model(
        kind="linear",
        n_features=d,
        classes=[neg, pos],
        coef_=w_b[:d].copy(),
        intercept_=float(w_b[d] * bias),
        info=info,
    )
    return Result(
        model=model,
        objective=P_b,
        dual_objective=None,
        iterations=outer + inner_total,
        passes=prog.passes(),
        seconds=time.perf_counter() - prog.t0,
        stop_value=float(stop),
        history=prog.history,
        summary={
            "xi": xi_b,
            "peak_working_set": ws.peak,
            "working_set": len(ws),
            "working_set_mb": ws.peak_bytes / 2**20,
            "variant": "selective",
            "loss": "error",
            "lower_bound": D if math.isfinite(D) else None,
            "C": C,
            "converged": converged,
            "outer_iterations": outer,
            "inner_iterations": inner_total,
            "selected_rows": sel_rows,
            "selected_mb": sel_peak / 2**20,
            "inner_mb": budget / 2**20,
        },
    )
