"""``--solver perf``: Joachims' cutting-plane algorithm for linear SVMs, out of core.

Follows T. Joachims, *Training Linear SVMs in Linear Time*, KDD 2006 (Sections 2–3).

Problems solved (x̃ᵢ = (xᵢ, bias): the bias is an extra constant feature, regularised like
LIBLINEAR ``-B bias``; ``bias = 0`` means no bias):

- ``loss="error"`` (binary labels) — OP2, the 1-slack form of the soft-margin SVM::

      min_{w, ξ≥0}  ½‖w‖² + C_perf·ξ
      s.t. ∀c ∈ {0,1}ⁿ:  wᵀ (1/n Σᵢ cᵢyᵢx̃ᵢ) ≥ 1/n Σᵢ cᵢ − ξ

  with C_perf = C·n, so that at the optimum ½‖w‖² + C_perf·ξ = ½‖w‖² + C Σᵢ max(0, 1 − yᵢwᵀx̃ᵢ),
  LIBLINEAR's primal (Theorem 1). Algorithm 1: each iteration solves the dual OP3 over the
  working set W, then makes **one streamed pass** computing wᵀxᵢ for every row, the most
  violated constraint (g = 1/n Σ cᵢyᵢx̃ᵢ, r = 1/n Σ cᵢ, cᵢ = [yᵢwᵀx̃ᵢ < 1]) and the exact loss.

- ``loss="ordinal"`` (rank labels) and ``loss="roc"`` (binary labels, two ranks) — OP5, the
  1-slack form of the ordinal-regression SVM OP4 (Herbrich et al.; ROC area for two ranks)::

      min_{w, ξ≥0}  ½‖w‖² + C_perf·ξ
      s.t. ∀c ∈ {0,1}ᵐ:  wᵀ (1/m Σ_{(i,j)∈P} cᵢⱼ(xᵢ − xⱼ)) ≥ 1/m Σ cᵢⱼ − ξ

  over the m pairs P = {(i, j): yᵢ > yⱼ} (with qids: only pairs of the same query), C_perf = C·m,
  i.e. LIBLINEAR units on the pair differences: ½‖w‖² + C Σ_{(i,j)∈P} max(0, 1 − wᵀ(xᵢ − xⱼ)).
  Algorithm 2: the most violated constraint, in its condensed form Σᵢ (c⁺ᵢ − c⁻ᵢ) xᵢ, comes from
  the sorted scores in O(n log n) (:func:`ooc_svm.kernels.perf.rank_cut`). Two passes per
  iteration: scores of every row (gathered at the driver as float64, 8 bytes per row, plus the
  rank and query of every row gathered once), then Σᵢ (c⁺ᵢ − c⁻ᵢ) xᵢ with the coefficients as
  per-shard state. The bias cancels in pair differences and is not used.

The working-set QP (OP3: max Σⱼ αⱼrⱼ − ½ αᵀGα, Σαⱼ ≤ C_perf, α ≥ 0, G the Gram matrix of
the constraint vectors) is solved by :func:`ooc_svm.solvers.qp.solve_simplex_qp` (primal
active set, warm-started) to a Frank–Wolfe gap ≤ 1e-4·C_perf·ε. Constraints with αⱼ = 0 for
``max_inactive`` consecutive iterations are dropped. Constraint vectors are stored dense or
sparse, float64 while the working set uses less than half of ``dense_limit_mb``, float32
beyond (see :class:`WorkingSet`).

Variants (``variant``):

- ``paper`` — Algorithm 1 / 2 as published. Stopping rule (line 9 / 26): the most violated
  constraint at the current w is violated by at most ε, ξ' ≤ ξ_W + ε, where ξ' is the exact
  average loss at w and ξ_W the slack of w over W. Returned: that w.
- ``accelerated`` (default) — OCAS-style (Franc & Sonnenburg, *Optimized cutting plane
  algorithm for support vector machines*, ICML 2008): besides the cutting-plane solution w_c
  the best point w_b so far is kept; the pass evaluates the primal objective along the segment
  w_b + k(w_c − w_b) at a grid of step lengths (``line_points`` in (0, 1] plus 1.25, 1.5, 2, 3)
  and accumulates cutting planes at a few grid points (``cut_points``) at once, in the same
  single pass; w_b moves to the best grid point and the new cut is the one nearest OCAS's
  k* + μ(1 − k*) (μ = ``mu``). For ranks, the line search runs at the driver on the gathered
  scores (golden section) and the cut is taken exactly at that point. Stopping rule:
  P(w_b) − D(α) ≤ ε·C_perf, with D the dual value of OP3 over W, a lower bound of the optimum;
  so the returned w_b satisfies P(w_b) ≤ P* + C·n·ε — the same guarantee as Theorem 3.

- ``selective`` (``loss="error"``) — many cheap inner cutting-plane iterations on the rows
  near the margin kept in memory (``inner_mb``), with the other rows' coefficients fixed at
  their values from the last full pass (any c ∈ {0,1}ⁿ gives a valid cut), and full passes only
  to refresh those rows and certify P(w_b) − D ≤ ε·C_perf, the accelerated variant's
  certificate; see :mod:`ooc_svm.solvers.perf_selective`.

``C`` is LIBLINEAR's C. ``c_perf`` takes SVMperf's ``-c`` instead: SVMperf measures losses in
percent, so its objective is ½‖w‖² + c·100·ξ, i.e. C_perf = 100·c and C = 100·c/n (``error``;
its own help: "c_light = c_perf*100/n for the 'Errorrate' loss") or C = 100·c/m (``roc`` /
``ordinal``). SVMperf's ``-e`` is likewise in percent: its default 0.1 is our ε = 0.001.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...engine import concat_partials
from ...kernels.csr import csr_matvec, u32
from ...kernels.perf import (
    accumulate_rows,
    count_pairs,
    cut_segment,
    cut_single,
    matvec,
    merge_sparse_rows,
    rank_cut,
    rank_loss,
    scores_two,
    sparse_vdot,
    vdot,
)
from ...model import Model
from .. import Callback, Result, SolverError, binary_classes
from ..params import KERNELS, SolverParams, as_params, at_least, param, positive
from ..qp import solve_simplex_qp

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer

log = logging.getLogger("ooc_svm")

STOPPING_RULE = (
    "paper: most violated constraint violated by <= eps (xi' <= xi_W + eps, Joachims 2006 "
    "Alg. 1 line 9); accelerated: P(w_best) - dual(W) <= eps * C * n (n: rows, or pairs "
    "for roc/ordinal); selective: the accelerated certificate, P(w_best) measured by a full "
    "pass"
)

#: dense float64 vectors over the features perf holds at once per problem (w, w_b, w_c,
#: w_c − w_b, the two-column copy for the pass, the new cut and temporaries), all within
#: ``dense_limit_mb``
DENSE_VECTORS = 10

#: stores with more columns than this (and than 2 × a shard's non-zeros) accumulate cutting
#: planes per shard over the shard's distinct columns only
COMPACT_MIN_DIM = 1 << 16

LOSSES = ("error", "roc", "ordinal")
VARIANTS = ("paper", "accelerated", "selective")


@dataclass(frozen=True)
class Params(SolverParams):
    """Parameters of ``--solver perf`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "perf"

    eps: float = param(
        0.001,
        "stopping tolerance epsilon: P(w) <= P* + C*n*eps (SVMperf's -e is in percent: "
        "-e 0.1 is --eps 0.001)",
    )
    bias: float = param(1.0, "value of the constant bias feature; 0 = no bias")
    loss: str | None = param(
        None,
        "error (binary, OP2), roc (binary labels, ROC area), ordinal (rank labels, OP5; with "
        "qids pairs only within a query). Default: error for binary stores, ordinal for rank "
        "labels",
        choices=LOSSES,
    )
    variant: str = param(
        "accelerated",
        "paper = Joachims 2006 Algorithms 1/2; accelerated = OCAS-style line search to the "
        "best point, same single pass per iteration; selective = many inner cutting planes on "
        "the rows near the margin kept in memory (--inner-mb), full passes only to refresh "
        "them and certify (loss error; ooc_svm/solvers/perf_selective.py)",
        choices=VARIANTS,
    )
    c_perf: float | None = param(
        None,
        "SVMperf's -c instead of --C: C = 100*c/n (error) or 100*c/m (roc/ordinal, m pairs), "
        "since SVMperf measures loss in percent (c_light = c_perf*100/n)",
    )
    max_inactive: int = param(
        50, "drop a cutting plane inactive (alpha=0) this many iterations in a row (0 = never)"
    )
    dense_limit_mb: float = param(
        1024.0,
        "memory for the working set of cutting planes (float64 up to half of it, float32 "
        "beyond; sparse where smaller); perf's dense vectors over the features (10 per "
        "problem, 8 bytes per feature each) must fit it too, else the store is refused",
    )
    line_points: int = param(32, "accelerated: line-search grid points in (0, 1]")
    cut_points: int = param(5, "accelerated: candidate cutting planes accumulated per pass")
    mu: float = param(0.1, "accelerated: cut at k* + mu*(1 - k*) (OCAS)")
    kernel: str = param("linear", "perf trains linear SVMs only", choices=KERNELS)
    inner_mb: float = param(
        256.0,
        "selective: MiB of rows near the margin kept in memory between full passes (64 bytes "
        "per row + 8 per non-zero; transient copies during a pass add a few times this)",
    )
    max_inner: int = param(2000, "selective: inner cutting planes between two full passes")
    inner_share: float = param(
        0.25, "selective: inner loop stops at gap <= inner_share * eps * C * n"
    )

    @classmethod
    def from_mapping(cls, params=None, **kw):
        given = {k: v for k, v in {**(params or {}), **kw}.items() if v is not None}
        if "C" in given and "c_perf" in given:
            raise SolverError(
                "give --C or --c-perf, not both (--c-perf is SVMperf's scale: C = 100*c_perf/n)"
            )
        return super().from_mapping(given)

    @classmethod
    def misplaced_hint(cls, unknown: list[str]) -> str | None:
        if "tol" in unknown:
            return (
                "perf stops on --eps (the duality gap, as SVMperf's -e); --tol is for the "
                "dual solvers"
            )
        return None

    def rules(self) -> None:
        if self.kernel != "linear":
            raise SolverError(
                f"--solver perf trains linear SVMs only (got --kernel {self.kernel}); use smo, "
                "active-set or irwls for kernels"
            )
        if self.c_perf is None:
            positive(self, "C")
        positive(self, "c_perf")
        at_least(self, "max_iter", 0)
        positive(self, "eps")
        at_least(self, "bias", 0, " (0 = no bias)")
        at_least(self, "max_inactive", 0)
        positive(self, "dense_limit_mb")
        at_least(self, "line_points", 1)
        at_least(self, "cut_points", 1)
        at_least(self, "inner_mb", 0)
        at_least(self, "max_inner", 1)
        positive(self, "inner_share")

    def validate(self, meta) -> None:
        super().validate(meta)
        self.resolve_loss(meta)
        self.check_dense(meta)

    def check_dense(self, meta, copies: int = 1) -> None:
        """Refuse up front a store whose dense vectors would not fit ``dense_limit_mb``.

        perf keeps about ``DENSE_VECTORS`` dense float64 vectors over the features (w, the
        best point, the cutting-plane solution, their difference, the new cut, ...) per
        problem (``copies``: one-vs-rest classes); together they must fit the limit, which
        also bounds the working set of cutting planes. A legal line such as
        ``1 2147483648:1`` would otherwise make training ask for tens of GiB.
        """
        dim = int(meta.n_features) + 1
        need = DENSE_VECTORS * 8.0 * dim * max(1, copies)
        limit = float(self.dense_limit_mb) * 2**20
        if need > limit:
            raise SolverError(
                f"perf: the store has {int(meta.n_features):,} features: a dense w needs "
                f"{8.0 * dim / 2**20:,.0f} MiB and perf keeps {DENSE_VECTORS * max(1, copies)} "
                f"such vectors ({need / 2**20:,.0f} MiB), more than --dense-limit-mb "
                f"{self.dense_limit_mb:g}; re-ingest with hashing or a smaller --n-features, "
                "or raise --dense-limit-mb"
            )

    def resolve_loss(self, meta) -> str:
        """The loss for this store (default: error for binary, ordinal for rank labels)."""
        loss = self.loss
        if loss is None:
            loss = "ordinal" if meta.label_kind == "ordinal" else "error"
        if loss in ("error", "roc") and meta.label_kind != "binary":
            if loss == "error":
                binary_classes(meta)  # raises the standard message
            raise SolverError(
                f"--loss roc needs binary labels; the store has label kind {meta.label_kind!r} "
                "(use --loss ordinal for rank labels)"
            )
        if loss == "ordinal" and meta.label_kind == "binary":
            raise SolverError(
                "--loss ordinal needs rank labels; the store's labels are binary: use --loss roc "
                "(ROC area, the ordinal loss of two ranks)"
            )
        if loss == "ordinal" and meta.label_kind != "ordinal":
            raise SolverError(
                f"--loss ordinal needs rank labels (integers); the store has label kind "
                f"{meta.label_kind!r}"
            )
        return loss


DEFAULTS: dict[str, Any] = Params.defaults()


# ------------------------------------------------------------------------------------------
# accumulators: dense (K, dim) arrays, or compact ("s", columns, (K, len) values, dim)
# ------------------------------------------------------------------------------------------


def _new_accumulator(shard, dim: int, K: int, with_bias: bool):
    """(acc, gidx, bias_slot, columns or None) for one shard."""
    if dim > max(COMPACT_MIN_DIM, 2 * shard.nnz):
        cols = np.sort(shard.indices).astype(np.int64)
        if cols.shape[0]:
            cols = cols[np.concatenate(([True], cols[1:] != cols[:-1]))]
        gidx = np.searchsorted(cols, shard.indices).astype(np.uint32)
        if with_bias:
            cols = np.append(cols, dim - 1)
        acc = np.zeros((K, cols.shape[0] + (0 if with_bias else 1)))
        bias_slot = cols.shape[0] - 1 if with_bias else acc.shape[1] - 1
        return acc, gidx, bias_slot, cols
    acc = np.zeros((K, dim + (0 if with_bias else 1)))
    bias_slot = dim - 1 if with_bias else dim
    return acc, u32(shard.indices), bias_slot, None


def _finish_accumulator(acc, cols, dim: int, with_bias: bool):
    if cols is None:
        return acc if with_bias else acc[:, :dim]
    vals = acc if with_bias else acc[:, : cols.shape[0]]
    return ("s", cols, vals, dim)


def merge_acc(a, b):
    """Sum of two accumulators (dense arrays or compact tuples); densifies when it pays."""
    if a is None:
        return b
    if b is None:
        return a
    a_dense = isinstance(a, np.ndarray)
    b_dense = isinstance(b, np.ndarray)
    if a_dense and b_dense:
        return a + b
    if a_dense or b_dense:
        dense, sparse = (a, b) if a_dense else (b, a)
        out = dense.copy()
        out[:, sparse[1]] += sparse[2]
        return out
    _, ca, va, dim = a
    _, cb, vb, _ = b
    if (ca.shape[0] + cb.shape[0]) * 4 > dim:
        out = np.zeros((va.shape[0], dim))
        out[:, ca] += va
        out[:, cb] += vb
        return out
    cols, vals = merge_sparse_rows(ca, np.ascontiguousarray(va), cb, np.ascontiguousarray(vb))
    return ("s", cols, vals, dim)


def acc_row(acc, p: int | None = None, upto: bool = False) -> np.ndarray:
    """Dense float64 row ``p`` of an accumulator (``upto``: sum of rows 0..p, a prefix sum)."""
    if isinstance(acc, np.ndarray):
        return acc[: p + 1].sum(axis=0) if upto else acc[p].copy()
    _, cols, vals, dim = acc
    out = np.zeros(dim)
    out[cols] = vals[: p + 1].sum(axis=0) if upto else vals[p]
    return out


def reduce_cut(a, b):
    """Reduce for the pass partials: dicts whose ``"g"`` entry is an accumulator."""
    if a is None:
        return b
    if b is None:
        return a
    out = {}
    for k, v in a.items():
        out[k] = merge_acc(v, b[k]) if k == "g" else v + b[k]
    return out


# ------------------------------------------------------------------------------------------
# pass functions (module level: the Dask engine pickles them)
# ------------------------------------------------------------------------------------------


def pass_single(shard, bc):
    """Algorithm 1 lines 5–7 at one point w: count, hinge sum and Σ_{violated} yᵢx̃ᵢ."""
    w, w_bias, bias, pos, dim = bc
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, 1, True)
    cnt, hinge = cut_single(
        shard.indptr,
        u32(shard.indices),
        gidx,
        shard.data,
        shard.y,
        pos,
        w,
        w_bias,
        bias,
        acc[0],
        bias_slot,
    )
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": np.array([float(cnt)]),
        "hinge": np.array([hinge]),
    }


def pass_segment(shard, bc):
    """Accelerated pass: hinge sums along w_b + k(w_c − w_b) and cuts at grid points."""
    w2, tb, tc, bias, pos, dim, kv, kg = bc
    K = kg.shape[0]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, K, True)
    hv = np.zeros(kv.shape[0])
    cnt = np.zeros(K, dtype=np.int64)
    cut_segment(
        shard.indptr,
        u32(shard.indices),
        gidx,
        shard.data,
        shard.y,
        pos,
        w2,
        tb,
        tc,
        kv,
        kg,
        hv,
        acc,
        cnt,
        bias,
        bias_slot,
    )
    return {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": cnt.astype(np.float64),
        "hinge": hv,
    }


def pass_labels(shard, bc):
    """Labels (and qids) of a shard, for the ranking losses."""
    q = shard.qid if shard.qid is not None else np.zeros(0, dtype=np.int64)
    return [(np.asarray(shard.y, dtype=np.float64).copy(), np.asarray(q, dtype=np.int64).copy())]


def pass_scores(shard, bc):
    """w·xᵢ for every row (one point) or (w_b·xᵢ, w_c·xᵢ) (two points)."""
    w2, two = bc
    n = shard.n_rows
    if not two:
        out = np.empty(n)
        csr_matvec(shard.indptr, u32(shard.indices), shard.data, w2, 0.0, out)
        return [(out,)]
    ob = np.empty(n)
    oc = np.empty(n)
    scores_two(shard.indptr, u32(shard.indices), shard.data, w2, 0.0, 0.0, ob, oc)
    return [(ob, oc)]


def pass_accumulate(shard, bc, st):
    """Σᵢ coefᵢ xᵢ with the per-row coefficients kept as per-shard state."""
    (dim,) = bc
    acc, gidx, _, cols = _new_accumulator(shard, dim, 1, False)
    accumulate_rows(shard.indptr, gidx, shard.data, st, acc[0])
    return {"g": _finish_accumulator(acc, cols, dim, False)}, st


# ------------------------------------------------------------------------------------------
# working set of cutting planes
# ------------------------------------------------------------------------------------------


class WorkingSet:
    """Cutting planes (gⱼ, rⱼ) with their Gram matrix, in bounded memory.

    Each gⱼ is kept in the smaller of a dense and a sparse (int32 indices + values) form,
    with float64 values while the set uses less than half of ``limit_bytes`` and float32
    beyond. The Gram matrix is updated with one row per new plane (O(|W|·size) work).
    """

    def __init__(self, dim: int, limit_bytes: float):
        self.dim = int(dim)
        self.limit = float(limit_bytes)
        self.vecs: list[Any] = []
        self.r: list[float] = []
        self.inactive: list[int] = []
        self.Q = np.zeros((0, 0))
        self.alpha = np.zeros(0)
        self.nbytes = 0
        self.peak = 0
        self.peak_bytes = 0
        self.float32 = 0
        self._warned = False

    def __len__(self) -> int:
        return len(self.vecs)

    @staticmethod
    def _dot(v, g: np.ndarray) -> float:
        if isinstance(v, np.ndarray):
            return float(vdot(v, g))
        idx, vals = v
        return float(sparse_vdot(idx, vals, g))

    def _store(self, g: np.ndarray):
        nz = np.flatnonzero(g)
        use32 = self.nbytes > self.limit / 2
        vb = 4 if use32 else 8
        dt = np.float32 if use32 else np.float64
        if nz.size * (4 + vb) < self.dim * vb:
            v = (nz.astype(np.int32), g[nz].astype(dt))
            size = nz.size * (4 + vb)
        else:
            v = g.astype(dt)
            size = self.dim * vb
        if use32:
            self.float32 += 1
            if self.nbytes + size > self.limit and not self._warned:
                self._warned = True
                log.warning(
                    "perf: the working set of cutting planes exceeds dense_limit_mb=%g "
                    "(%d planes, %.1f MB); planes inactive for max_inactive iterations are "
                    "dropped",
                    self.limit / 2**20,
                    len(self.vecs) + 1,
                    (self.nbytes + size) / 2**20,
                )
        return v, size

    def add(self, g: np.ndarray, r: float) -> None:
        """Add plane (g, r); g is a dense float64 vector of length ``dim``."""
        v, size = self._store(g)
        gq = g if isinstance(v, np.ndarray) and v.dtype == np.float64 else self._as_dense(v)
        row = np.array([self._dot(u, gq) for u in self.vecs] + [float(vdot(gq, gq))])
        m = len(self.vecs)
        Q = np.empty((m + 1, m + 1))
        Q[:m, :m] = self.Q
        Q[m, :] = row
        Q[:, m] = row
        self.Q = Q
        self.vecs.append(v)
        self.r.append(float(r))
        self.inactive.append(0)
        self.alpha = np.append(self.alpha, 0.0)
        self.nbytes += size
        self.peak = max(self.peak, len(self.vecs))
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def _as_dense(self, v) -> np.ndarray:
        if isinstance(v, np.ndarray):
            return v.astype(np.float64)
        out = np.zeros(self.dim)
        out[v[0]] = v[1]
        return out

    def combine(self, alpha: np.ndarray) -> np.ndarray:
        """w = Σⱼ αⱼ gⱼ."""
        w = np.zeros(self.dim)
        for a, v in zip(alpha, self.vecs, strict=True):
            if a == 0.0:
                continue
            if isinstance(v, np.ndarray):
                w += a * v
            else:
                w[v[0]] += a * v[1]
        return w

    def solve(self, C_perf: float, atol: float) -> tuple[np.ndarray, float, float]:
        """Solve OP3 over W (warm-started); returns (w, dual value, QP gap)."""
        res = solve_simplex_qp(self.Q, np.asarray(self.r), C_perf, x0=self.alpha, atol=atol)
        self.alpha = res.x
        w = self.combine(res.x)
        dual = float(vdot(res.x, np.asarray(self.r)) - 0.5 * vdot(w, w))
        for j, a in enumerate(res.x):
            self.inactive[j] = 0 if a > 0.0 else self.inactive[j] + 1
        return w, dual, res.gap

    def slack(self) -> float:
        """ξ_W = max(0, maxⱼ rⱼ − w·gⱼ) at w = Σ αⱼgⱼ (w·gⱼ = (Qα)ⱼ)."""
        if not self.vecs:
            return 0.0
        return max(0.0, float(np.max(np.asarray(self.r) - matvec(self.Q, self.alpha))))

    def drop_inactive(self, max_inactive: int) -> int:
        """Remove planes inactive for ``max_inactive`` iterations; returns how many."""
        if max_inactive <= 0:
            return 0
        keep = [j for j, c in enumerate(self.inactive) if c < max_inactive]
        dropped = len(self.vecs) - len(keep)
        if dropped:
            kept = set(keep)
            for j in range(len(self.vecs)):
                if j not in kept:
                    self.nbytes -= self._size(self.vecs[j])
            self.vecs = [self.vecs[j] for j in keep]
            self.r = [self.r[j] for j in keep]
            self.inactive = [self.inactive[j] for j in keep]
            self.alpha = self.alpha[keep]
            self.Q = self.Q[np.ix_(keep, keep)]
        return dropped

    def _size(self, v) -> int:
        if isinstance(v, np.ndarray):
            return v.nbytes
        return v[0].nbytes + v[1].nbytes

    def state(self) -> tuple[dict, dict]:
        """(scalars, arrays) describing the whole working set, for checkpoints."""
        arrays = {
            "ws_Q": self.Q,
            "ws_alpha": self.alpha,
            "ws_r": np.asarray(self.r),
            "ws_inactive": np.asarray(self.inactive, dtype=np.int64),
        }
        for j, v in enumerate(self.vecs):
            if isinstance(v, np.ndarray):
                arrays[f"ws_v{j}"] = v
            else:
                arrays[f"ws_v{j}_idx"], arrays[f"ws_v{j}_val"] = v
        scalars = {
            "ws_n": len(self.vecs),
            "ws_nbytes": self.nbytes,
            "ws_peak": self.peak,
            "ws_peak_bytes": self.peak_bytes,
            "ws_float32": self.float32,
            "ws_warned": self._warned,
        }
        return scalars, arrays

    def restore(self, scalars: dict, arrays: dict) -> None:
        """Inverse of :meth:`state`."""
        n = int(scalars["ws_n"])
        self.vecs = [
            arrays[f"ws_v{j}"]
            if f"ws_v{j}" in arrays
            else (arrays[f"ws_v{j}_idx"], arrays[f"ws_v{j}_val"])
            for j in range(n)
        ]
        self.Q = np.array(arrays["ws_Q"], dtype=np.float64).reshape(n, n)
        self.alpha = np.array(arrays["ws_alpha"], dtype=np.float64)
        self.r = [float(v) for v in arrays["ws_r"]]
        self.inactive = [int(v) for v in arrays["ws_inactive"]]
        self.nbytes = int(scalars["ws_nbytes"])
        self.peak = int(scalars["ws_peak"])
        self.peak_bytes = int(scalars["ws_peak_bytes"])
        self.float32 = int(scalars["ws_float32"])
        self._warned = bool(scalars["ws_warned"])


# ------------------------------------------------------------------------------------------
# the solver
# ------------------------------------------------------------------------------------------


def _resolve_C(params: Params, count: int) -> float:
    if params.c_perf is not None:
        return 100.0 * float(params.c_perf) / count
    return float(params.C)


def _line_grid(points: int) -> np.ndarray:
    points = max(1, int(points))
    return np.concatenate([np.arange(1, points + 1) / points, [1.25, 1.5, 2.0, 3.0]])


def _cut_grid(points: int, mu: float) -> np.ndarray:
    """Step lengths of the candidate cuts: from μ (k* = 0) to 1 (k* = 1), denser near μ."""
    points = max(1, int(points))
    if points == 1:
        return np.array([1.0])
    t = np.arange(points) / (points - 1)
    return mu + (1.0 - mu) * t**1.5


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


class _Progress:
    def __init__(self, engine, callback: Callback | None):
        self.engine = engine
        self.callback = callback
        self.history: list[dict] = []
        self.t0 = time.perf_counter()
        self.p0 = engine.passes + getattr(engine, "partial_passes", 0)

    def passes(self) -> int:
        return self.engine.passes + getattr(self.engine, "partial_passes", 0) - self.p0

    def emit(self, rec: dict) -> None:
        rec["passes"] = self.passes()
        rec["seconds"] = time.perf_counter() - self.t0
        self.history.append(rec)
        log.debug(
            "perf it %d: obj %.10g xi %.6g viol %s |W| %d pass %.3fs",
            rec["iteration"],
            rec["objective"],
            rec["xi"],
            rec["violation"],
            rec["working_set"],
            rec["pass_seconds"],
        )
        if self.callback is not None:
            self.callback(dict(rec))


#: ``--checkpoint`` / ``--resume`` are supported (every loss, both variants).
SUPPORTS_CHECKPOINT = True


def solve(
    store,
    engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a linear SVM with the cutting-plane algorithm (see the module docstring).

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), the state (w or the
    best point, the working set of cutting planes and its QP solution) is saved after every
    iteration, and a resumed run continues exactly where the checkpoint was taken.
    """
    params = as_params(Params, params)
    meta = store.meta
    params.validate(meta)
    loss, variant = params.resolve_loss(meta), params.variant
    if variant == "selective":
        from .perf_selective import solve_selective

        return solve_selective(store, engine, params, callback=callback, checkpoint=checkpoint)
    if loss == "error":
        return _solve_error(store, engine, params, variant, callback, checkpoint)
    return _solve_rank(store, engine, params, loss, variant, callback, checkpoint)


def pass_many(shard, bc):
    """Several problems' passes over one shard read once: ``bc`` is a list of
    ``(pass function, broadcast)``; returns the list of their partials."""
    return [fn(shard, b) for fn, b in bc]


def reduce_many(a, b):
    """Reduce of :func:`pass_many` partials, problem by problem."""
    if a is None:
        return b
    if b is None:
        return a
    return [reduce_cut(x, y) for x, y in zip(a, b, strict=True)]


#: ``--checkpoint`` / ``--resume`` of one-vs-rest: one checkpoint directory per class.
SUPPORTS_OVR_CHECKPOINT = True


def solve_ovr(
    store,
    engine,
    params: Params,
    classes: list[float],
    *,
    callback: Callback | None = None,
    checkpoint: Callable[[int, float], Checkpointer] | None = None,
) -> Result:
    """One-vs-rest with every class's cutting-plane iteration sharing one streamed pass.

    Each class runs its own Algorithm 1 (or the accelerated variant) for "class c vs the
    rest" (labels ``y == c`` → +1, others −1) with its own working set; at every round the
    passes all unfinished classes need are fused into **one** pass over the store
    (:func:`pass_many`: each shard is read once and every class's margins and cut are
    computed from it). Passes therefore equal the iterations of the slowest class, not their
    sum. The accumulators of a pass are sized so that all classes together stay within
    ``dense_limit_mb`` (fewer cut points per class when there are many classes).

    ``checkpoint(k, c)``, if given, returns the :class:`~ooc_svm.checkpoint.Checkpointer` of
    class k (label c): every class saves its own state after each of its iterations and
    resumes from it, so an interrupted run ends with the same model as an uninterrupted one.
    """
    from ..ovr import combine_ovr_models

    params = as_params(Params, params)
    meta = store.meta
    if meta.n_rows == 0:
        raise SolverError("the store has no rows")
    if params.loss not in (None, "error"):
        raise SolverError("one-vs-rest perf trains --loss error only")
    variant = params.variant
    if variant == "selective":
        raise SolverError(
            "one-vs-rest perf does not support --variant selective yet; use accelerated"
        )
    classes = [float(c) for c in classes]
    params.check_dense(meta, copies=len(classes))
    t0 = time.perf_counter()
    steps, reqs, results = [], {}, {}
    for k, c in enumerate(classes):

        def cb(rec, k=k, c=c):
            if callback is not None:
                callback({**rec, "class": c, "class_index": k})

        # neg: "the rest" (the binary model's classes are replaced by combine_ovr_models)
        ck = None if checkpoint is None else checkpoint(k, c)
        g = _error_steps(meta, math.nan, c, engine, params, variant, cb, ck, share=len(classes))
        steps.append(g)
        reqs[k] = next(g)
    rounds = 0
    while reqs:
        ks = sorted(reqs)
        t = time.perf_counter()
        parts = engine.map_reduce(store, pass_many, [reqs[k] for k in ks], reduce=reduce_many)
        pt = time.perf_counter() - t
        rounds += 1
        log.info(
            "perf ovr: pass %d for %d of %d classes (%.2fs)", rounds, len(ks), len(classes), pt
        )
        for k, part in zip(ks, parts, strict=True):
            try:
                reqs[k] = steps[k].send((part, pt))
            except StopIteration as done:
                results[k] = done.value
                del reqs[k]
    res = [results[k] for k in range(len(classes))]
    model = combine_ovr_models([r.model for r in res], classes)
    model.info["shared_passes"] = True
    return Result(
        model=model,
        objective=float(sum(r.objective for r in res)),
        dual_objective=None,
        iterations=max(r.iterations for r in res),
        # the slowest class's count (it includes passes made before a resume)
        passes=max(r.passes for r in res),
        seconds=time.perf_counter() - t0,
        stop_value=max(r.stop_value for r in res),
        history=[h for r in res for h in r.history],
        summary={
            "multiclass": "ovr",
            "n_classes": len(classes),
            "shared_passes": True,
            "variant": variant,
            "per_class_objective": [r.objective for r in res],
            "per_class_iterations": [r.iterations for r in res],
            "converged": all(r.summary.get("converged") for r in res),
        },
    )


def _qp_atol(eps: float) -> float:
    return 1e-4 * eps


#: a working-set QP slower than this many seconds and than QP_STALL_PASSES passes means breakdown
QP_STALL_SECONDS = 10.0
QP_STALL_PASSES = 20.0


def check_qp(C: float, Cp: float, qp_seconds: float, pass_seconds: float) -> None:
    """Stop, in bounded time, when the working-set QP stalls (extreme C).

    At extreme C (C_perf = C·n of 1e12 and more) α grows towards C_perf, the Gram matrix of
    the planes is singular, the gradient Qα − r loses its precision to round-off and every
    QP costs seconds, while the cutting-plane method itself would need O(C_perf·R²/ε²)
    iterations (Joachims 2006, Theorem 5). The QP never returns a point worse than its warm
    start (:func:`~ooc_svm.solvers.qp.solve_simplex_qp`), so the lower bound stays valid and
    non-decreasing; a QP slower than ``QP_STALL_SECONDS`` and than ``QP_STALL_PASSES``
    passes stops the run with a one-line message pointing to the dual-coordinate-descent
    solvers, which have no such dependence on C.
    """
    if qp_seconds > max(QP_STALL_SECONDS, QP_STALL_PASSES * pass_seconds):
        raise SolverError(
            f"perf: the cutting-plane QP stalls at --C {C:g} (C*n = {Cp:.3g}: one working-set "
            f"QP took {qp_seconds:.0f} s); use --solver active-set or smo, or a smaller --C"
        )


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
    n = meta.n_rows
    d = meta.n_features
    dim = d + 1
    bias = float(params.bias)
    C = _resolve_C(params, n)
    Cp = C * n
    eps = float(params.eps)
    max_iter = int(params.max_iter)
    max_inactive = int(params.max_inactive)
    ws = WorkingSet(dim, float(params.dense_limit_mb) * 2**20)
    prog = _Progress(engine, callback)
    atol = _qp_atol(eps)

    def single_request(w):
        return pass_single, (np.ascontiguousarray(w[:d]), float(w[d]), bias, pos, dim)

    w = np.zeros(dim)
    it = 0
    converged = False
    stop = math.inf
    dual = -math.inf
    pt = 0.0
    resume = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if resume is not None:
        ws.restore(resume.scalars, resume.arrays)
        it = int(resume.scalars["it"])
        dual = float(resume.scalars["dual"]) if resume.scalars["dual"] is not None else -math.inf
        prog.p0 -= int(resume.scalars["passes"])
        log.info("perf: resuming at iteration %d", it)

    def save(scalars: dict, arrays: dict) -> None:
        if checkpoint is None:
            return
        wsc, wsa = ws.state()
        checkpoint.save(
            it,
            scalars={**scalars, **wsc, "it": it, "passes": prog.passes(), "dual": _finite(dual)},
            arrays={**arrays, **wsa},
        )

    if variant == "paper":
        if resume is not None:
            w = np.array(resume.arrays["w"], dtype=np.float64)
        while True:
            part, pt = yield single_request(w)
            hinge = float(part["hinge"][0])
            cnt = float(part["cnt"][0])
            obj = 0.5 * float(vdot(w, w)) + C * hinge
            xi_new = hinge / n
            xi_w = ws.slack()
            stop = xi_new - xi_w
            prog.emit(
                {
                    "iteration": it,
                    "objective": obj,
                    "xi": xi_new,
                    "violation": stop,
                    "working_set": len(ws),
                    "pass_seconds": pt,
                    "lower_bound": _finite(dual),
                }
            )
            if stop <= eps:
                converged = True
                break
            if it >= max_iter:
                break
            ws.add(acc_row(part["g"], 0) / n, cnt / n)
            ws.drop_inactive(max_inactive)
            tq = time.perf_counter()
            w, dual, _ = ws.solve(Cp, atol)
            check_qp(C, Cp, time.perf_counter() - tq, pt)
            it += 1
            save({}, {"w": w})
        w_final, obj_final, xi_final = w, obj, xi_new
    else:
        kv = _line_grid(params.line_points)
        mu = float(params.mu)
        K = max(1, int(params.cut_points))
        # a pass holds a few K-row accumulators (the fold of the reduction): at most
        # three dense ones within the working-set budget
        K = int(max(min(K, 2), min(K, ws.limit / (3 * 8.0 * dim * max(1, share)))))
        kg = _cut_grid(K, mu)
        if resume is not None:
            wb = np.array(resume.arrays["wb"], dtype=np.float64)
            Pb, xib = float(resume.scalars["Pb"]), float(resume.scalars["xib"])
        else:
            part, pt = yield single_request(w)
            hinge = float(part["hinge"][0])
            wb = w.copy()
            Pb = 0.5 * float(vdot(wb, wb)) + C * hinge
            xib = hinge / n
            prog.emit(
                {
                    "iteration": 0,
                    "objective": Pb,
                    "xi": xib,
                    "violation": None,
                    "working_set": 0,
                    "pass_seconds": pt,
                    "lower_bound": None,
                    "step": 0.0,
                }
            )
            ws.add(acc_row(part["g"], 0) / n, float(part["cnt"][0]) / n)
            save({"Pb": Pb, "xib": xib}, {"wb": wb})
        while True:
            it += 1
            tq = time.perf_counter()
            wc, dual, _ = ws.solve(Cp, atol)
            check_qp(C, Cp, time.perf_counter() - tq, pt)
            w2 = np.ascontiguousarray(np.stack([wb[:d], wc[:d]], axis=1))
            part, pt = yield (
                pass_segment,
                (w2, float(wb[d]) * bias, float(wc[d]) * bias, bias, pos, dim, kv, kg),
            )
            dw = wc - wb
            a2 = float(vdot(dw, dw))
            a1 = float(vdot(wb, dw))
            a0 = float(vdot(wb, wb))
            vals = 0.5 * (a0 + 2 * kv * a1 + kv * kv * a2) + C * part["hinge"]
            q = int(np.argmin(vals))
            kstar = float(kv[q]) if vals[q] < Pb else 0.0
            if vals[q] < Pb:
                wb = wb + kstar * dw
                Pb = 0.5 * float(vdot(wb, wb)) + C * float(part["hinge"][q])
                xib = float(part["hinge"][q]) / n
            stop = (Pb - dual) / Cp
            prog.emit(
                {
                    "iteration": it,
                    "objective": Pb,
                    "xi": xib,
                    "violation": stop,
                    "working_set": len(ws),
                    "pass_seconds": pt,
                    "lower_bound": dual,
                    "step": kstar,
                }
            )
            if stop <= eps:
                converged = True
                break
            if it >= max_iter:
                break
            kc = kstar + mu * (1.0 - kstar)
            p = int(np.argmin(np.abs(kg - kc)))
            g = acc_row(part["g"], p, upto=True)
            cnt = float(part["cnt"][: p + 1].sum())
            ws.add(g / n, cnt / n)
            ws.drop_inactive(max_inactive)
            save({"Pb": Pb, "xib": xib}, {"wb": wb})
        w_final, obj_final, xi_final = wb, Pb, xib
    if not converged:
        log.warning(
            "perf: stopped after %d iterations (max_iter) with violation %.3g > eps", it, stop
        )
    info = {
        "solver": "perf",
        "loss": "error",
        "variant": variant,
        "C": C,
        "C_perf": Cp,
        "c_perf_svmperf": Cp / 100.0,
        "eps": eps,
        "bias": bias,
        "objective": obj_final,
        "iterations": it,
        "converged": converged,
        "float32_planes": ws.float32,
    }
    model = Model(
        kind="linear",
        n_features=d,
        classes=[neg, pos],
        coef_=w_final[:d].copy(),
        intercept_=float(w_final[d] * bias),
        info=info,
    )
    return Result(
        model=model,
        objective=obj_final,
        dual_objective=None,
        iterations=it,
        passes=prog.passes(),
        seconds=time.perf_counter() - prog.t0,
        stop_value=float(stop),
        history=prog.history,
        summary={
            "xi": xi_final,
            "peak_working_set": ws.peak,
            "working_set": len(ws),
            "working_set_mb": ws.peak_bytes / 2**20,
            "variant": variant,
            "loss": "error",
            "lower_bound": _finite(dual),
            "C": C,
            "converged": converged,
        },
    )


# ------------------------------------------------------------------------------------------
# ordinal regression / ROC area
# ------------------------------------------------------------------------------------------


class _Ranking:
    """Ranks and query groups of all rows (gathered once; O(n) driver memory)."""

    def __init__(self, y: np.ndarray, qid: np.ndarray | None, labels: list[float]):
        lab = np.asarray(labels, dtype=np.float64)
        self.n_ranks = lab.shape[0]
        self.r = np.searchsorted(lab, y).astype(np.int64)
        self.n = y.shape[0]
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


def _solve_rank(store, engine, params, loss, variant, callback, checkpoint=None) -> Result:
    meta = store.meta
    d = meta.n_features
    dim = d
    labels = list(meta.labels or [])
    prog = _Progress(engine, callback)
    parts = engine.map_reduce(store, pass_labels, None, reduce=concat_partials)
    y = np.concatenate([p[0] for p in parts])
    qid = np.concatenate([p[1] for p in parts]) if meta.has_qid else None
    rk = _Ranking(y, qid, labels)
    m = rk.m
    if m == 0:
        raise SolverError(
            "no pairs with different ranks"
            + (" within any query" if meta.has_qid else "")
            + f"; --loss {loss} needs at least two ranks"
        )
    C = _resolve_C(params, m)
    Cp = C * m
    eps = float(params.eps)
    max_iter = int(params.max_iter)
    max_inactive = int(params.max_inactive)
    ws = WorkingSet(dim, float(params.dense_limit_mb) * 2**20)
    atol = _qp_atol(eps)
    shard_rows = [(s.row_start, s.n_rows) for s in meta.shards]

    def accumulate(coef: np.ndarray):
        st = engine.set_state(store, [coef[a : a + k] for a, k in shard_rows])
        t = time.perf_counter()
        part = engine.map_reduce(store, pass_accumulate, (dim,), reduce=reduce_cut, state=st)
        return acc_row(part["g"], 0), time.perf_counter() - t

    def scores(w, w_other=None):
        t = time.perf_counter()
        if w_other is None:
            bc = (np.ascontiguousarray(w), False)
        else:
            bc = (np.ascontiguousarray(np.stack([w, w_other], axis=1)), True)
        parts = engine.map_reduce(store, pass_scores, bc, reduce=concat_partials)
        out = tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))
        return out, time.perf_counter() - t

    it = 0
    converged = False
    stop = math.inf
    dual = -math.inf
    resume = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if resume is not None:
        ws.restore(resume.scalars, resume.arrays)
        it = int(resume.scalars["it"])
        dual = float(resume.scalars["dual"]) if resume.scalars["dual"] is not None else -math.inf
        # the labels pass is made again by the resumed run: counted once
        prog.p0 -= int(resume.scalars["passes"]) - prog.passes()
        wb = np.array(resume.arrays["wb"], dtype=np.float64)
        Pb, xib = float(resume.scalars["Pb"]), float(resume.scalars["xib"])
        pt = 0.0
        log.info("perf: resuming at iteration %d", it)
    else:
        # iteration 0: w = 0, every pair violated
        viol, lossv, coef = rk.cut(np.zeros(rk.n))
        g, pt = accumulate(coef)
        wb, Pb, xib = np.zeros(dim), C * lossv, lossv / m
        prog.emit(
            {
                "iteration": 0,
                "objective": Pb,
                "xi": xib,
                "violation": None,
                "working_set": 0,
                "pass_seconds": pt,
                "lower_bound": None,
            }
        )
        ws.add(g / m, viol / m)

    def save() -> None:
        if checkpoint is None:
            return
        wsc, wsa = ws.state()
        checkpoint.save(
            it,
            scalars={
                **wsc,
                "it": it,
                "passes": prog.passes(),
                "dual": _finite(dual),
                "Pb": Pb,
                "xib": xib,
            },
            arrays={**wsa, "wb": wb},
        )

    if resume is None:
        save()
    while True:
        it += 1
        tq = time.perf_counter()
        wc, dual, _ = ws.solve(Cp, atol)
        check_qp(C, Cp, time.perf_counter() - tq, pt)
        if variant == "paper":
            (s,), pt = scores(wc)
            viol, lossv, coef = rk.cut(s)
            obj = 0.5 * float(vdot(wc, wc)) + C * lossv
            xi_new = lossv / m
            stop = xi_new - ws.slack()
            wb, Pb, xib = wc, obj, xi_new
            step = 1.0
        else:
            (sb, sc), pt = scores(wb, wc)
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
            if fk < Pb:
                step = kstar
                wb = wb + kstar * dw
                lk = rk.loss(sb + kstar * (sc - sb))
                Pb = 0.5 * float(vdot(wb, wb)) + C * lk
                xib = lk / m
            stop = (Pb - dual) / Cp
            obj = Pb
        prog.emit(
            {
                "iteration": it,
                "objective": Pb,
                "xi": xib,
                "violation": stop,
                "working_set": len(ws),
                "pass_seconds": pt,
                "lower_bound": dual,
                "step": step,
            }
        )
        if stop <= eps:
            converged = True
            break
        if it >= max_iter:
            break
        if variant != "paper":
            kc = step + float(params.mu) * (1.0 - step)
            viol, lossv, coef = rk.cut(sb + kc * (sc - sb))
        g, _ = accumulate(coef)
        ws.add(g / m, viol / m)
        ws.drop_inactive(max_inactive)
        save()
    if not converged:
        log.warning(
            "perf: stopped after %d iterations (max_iter) with violation %.3g > eps", it, stop
        )
    classes = labels if loss == "ordinal" else labels[:2]
    info = {
        "solver": "perf",
        "loss": loss,
        "variant": variant,
        "C": C,
        "C_perf": Cp,
        "c_perf_svmperf": Cp / 100.0,
        "eps": eps,
        "bias": 0.0,
        "objective": Pb,
        "n_pairs": m,
        "iterations": it,
        "converged": converged,
        "has_qid": bool(meta.has_qid),
        "float32_planes": ws.float32,
    }
    model = Model(
        kind="linear",
        n_features=d,
        classes=[float(c) for c in classes],
        coef_=np.asarray(wb, dtype=np.float64).copy(),
        intercept_=0.0,
        info=info,
    )
    return Result(
        model=model,
        objective=Pb,
        dual_objective=None,
        iterations=it,
        passes=prog.passes(),
        seconds=time.perf_counter() - prog.t0,
        stop_value=float(stop),
        history=prog.history,
        summary={
            "xi": xib,
            "peak_working_set": ws.peak,
            "working_set": len(ws),
            "working_set_mb": ws.peak_bytes / 2**20,
            "variant": variant,
            "loss": loss,
            "lower_bound": _finite(dual),
            "n_pairs": m,
            "C": C,
            "converged": converged,
        },
    )
