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

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import scipy.sparse as sp
from numba import njit

from ..kernels.csr import csr_matvec_rows, csr_rmatvec_rows_add, csr_take_rows
from ..kernels.kernel_functions import (
    KernelParams,
    kernel_from_dot,
    kernel_row,
    kernel_row_subset,
    kernel_scores,
    linear_scores,
    row_sq_norms,
)
from ..model import load_model
from . import Callback, Result, SolverError, binary_classes
from .cholesky import ActiveFactor
from .dual_common import (
    CheckpointClock,
    WorkingRows,
    check_interrupt,
    collect_support_vectors,
    finish_dual,
    interruptible,
    shard_rows,
    split_updates_by_shard,
)
from .params import KernelSolverParams, as_params, at_least, param, positive

if TYPE_CHECKING:
    from ..checkpoint import Checkpointer

log = logging.getLogger("ooc_svm")


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver active-set`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "active-set"

    tol: float = param(
        1e-3, "stop when every bound variable's reduced cost is >= -tol (Step 2(iii))"
    )
    max_iter: int = param(
        10_000_000, "active-set (minor) iterations; reaching it is reported as not converged"
    )
    seed: int = param(0, "tie-breaking among equal reduced costs, probe vectors")
    cache_mb: float = param(
        256.0, "Q columns of I_s over the working rows + the Cholesky factor, MiB (section 4.2)"
    )
    pricing: str = param(
        "sprint", "pricing strategy of Scheinberg 2006 section 4.1", choices=("sprint", "shrinking")
    )
    sprint_size: int = param(
        0,
        "rows |I0'|+|Ic'| pulled into memory per major iteration (0: 5*sqrt(rows), at most "
        "8000, less if --cache-mb is short)",
    )
    shrink_after: int = param(
        100, "shrinking: drop a row after this many non-negative pricings in a row"
    )
    init: str | None = param(
        None,
        "warm start from a model of this store (or of its first rows, before `ingest "
        "--append`): alpha from its dual coefficients by global row index",
    )
    check: bool = param(True, "final independent KKT check pass (--no-check skips it)", cli="no")

    def rules(self) -> None:
        super().rules()
        positive(self, "cache_mb")
        at_least(self, "sprint_size", 0, " (0 = from the memory budget)")
        at_least(self, "shrink_after", 1)


DEFAULTS = Params.defaults()

STOPPING_RULE = (
    "every bound variable's reduced cost (s for alpha=0, xi for alpha=C) >= -tol in a full "
    "pricing pass, free variables optimal for the reduced QP (Scheinberg 2006, Step 2(iii))"
)

#: ``--checkpoint`` / ``--resume``: the state is saved after every major iteration.
SUPPORTS_CHECKPOINT = True

#: automatic sprint size: SPRINT_SQRT·√n_rows rows (balances the O(n·|Δ|) cost of a pass
#: against the O(|W|·n_s) cost of pricing the working rows), at most SPRINT_AUTO_MAX
SPRINT_SQRT = 5.0
SPRINT_AUTO_MAX = 8000
#: smallest working set a major iteration asks for
MIN_CANDIDATES = 64
#: relative probe error of the factor above which it is rebuilt
REFACTOR_TOL = 1e-9
#: factor updates between two probe checks
CHECK_EVERY = 64
#: pricings between two exact (full) gradient refreshes of the working set
FULL_FLUSH_EVERY = 16


# ------------------------------------------------------------------------------------------
# numba helpers
# ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def dense_dots(indptr, indices, data, r0, r1, Dt, out):
    """out[i − r0, :] = x_i · Dt for rows r0 ≤ i < r1 (Dt dense, n_features × m)."""
    m = Dt.shape[1]
    for i in range(r0, r1):
        buf = out[i - r0]
        for j in range(m):
            buf[j] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = float(data[k])
            row = Dt[indices[k]]
            for j in range(m):
                buf[j] += v * row[j]
    return out


@njit(cache=True, nogil=True)
def rows_dot_add(K, coef, out):
    """out[r] += K[r]·coef (single-threaded dots: no BLAS thread pool inside engine threads)."""
    for r in range(K.shape[0]):
        out[r] += np.dot(K[r], coef)
    return out


def kernel_from_dots(
    D: np.ndarray, sq_rows: np.ndarray, sq_cols: np.ndarray, kp: KernelParams
) -> np.ndarray:
    """K from dot products in place, vectorised (numpy's SIMD exp / tanh / power)."""
    if kp.kernel == "linear":
        return D
    if kp.kernel == "rbf":
        D *= 2.0
        D -= sq_rows[:, None]
        D -= sq_cols[None, :]
        np.minimum(D, 0.0, out=D)
        D *= kp.gamma
        return np.exp(D, out=D)
    D *= kp.gamma
    D += kp.coef0
    if kp.kernel == "poly":
        return np.power(D, kp.degree, out=D)
    return np.tanh(D, out=D)


@njit(cache=True, nogil=True)
def dense_kernel_block(indptr, indices, data, sq, Dt, dsq, code, gamma, degree, coef0, out):
    """out[i, j] = K(xᵢ, dⱼ) for CSR rows x and dense columns Dt (n_features, m)."""
    n = indptr.shape[0] - 1
    m = Dt.shape[1]
    for i in range(n):
        buf = out[i]
        for j in range(m):
            buf[j] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = float(data[k])
            row = Dt[indices[k]]
            for j in range(m):
                buf[j] += v * row[j]
        sqi = sq[i]
        for j in range(m):
            buf[j] = kernel_from_dot(code, buf[j], sqi, dsq[j], gamma, degree, coef0)
    return out


@njit(cache=True, nogil=True)
def dense_kernel_col(Dt, sq, i_indices, i_data, sq_i, code, gamma, degree, coef0, out):
    """out[r] = K(x, w_r) for every working row r, x given sparse, rows dense: Dt (nf, |W|)."""
    n = Dt.shape[1]
    for r in range(n):
        out[r] = 0.0
    for k in range(i_indices.shape[0]):
        v = float(i_data[k])
        row = Dt[i_indices[k]]
        for r in range(n):
            out[r] += v * row[r]
    for r in range(n):
        out[r] = kernel_from_dot(code, out[r], sq_i, sq[r], gamma, degree, coef0)
    return out


#: dense expansion blocks up to this many float64 entries (n_features × rows) are used
DENSE_BLOCK_MAX = 8_000_000


def _dense_transposed(indptr, indices, data, n_features: int) -> np.ndarray:
    """Dense (n_features, m) transpose of a CSR block."""
    m = indptr.shape[0] - 1
    Dt = np.zeros((max(n_features, 1), m))
    rows = np.repeat(np.arange(m), np.diff(indptr))
    Dt[indices.astype(np.int64), rows] = data
    return Dt


def expansion_add(
    indptr, indices_u32, data, sq, exp_rows, kp: KernelParams, n_features: int, out: np.ndarray
) -> np.ndarray:
    """out += Σⱼ coefⱼ K(xᵢ, dⱼ) for the CSR rows x against the expansion ``exp_rows``."""
    d_ip, d_ix, d_data, d_sq, coef = exp_rows
    m = d_ip.shape[0] - 1
    if m == 0 or indptr.shape[0] <= 1:
        return out
    width = max(
        n_features,
        int(indices_u32.max()) + 1 if indices_u32.size else 0,
        int(d_ix.max()) + 1 if d_ix.size else 0,
    )
    if width * m <= DENSE_BLOCK_MAX:
        Dt = _dense_transposed(d_ip, d_ix, d_data, width)
        n = indptr.shape[0] - 1
        block = max(1, min(n, 1_000_000 // m))
        buf = np.empty((block, m))
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            D = dense_dots(indptr, indices_u32, data, r0, r1, Dt, buf[: r1 - r0])
            rows_dot_add(kernel_from_dots(D, sq[r0:r1], d_sq, kp), coef, out[r0:r1])
        return out
    work = np.zeros(width)
    tmp = np.empty(indptr.shape[0] - 1)
    kernel_scores(
        indptr,
        indices_u32,
        data,
        sq,
        d_ip,
        d_ix.view(np.uint32),
        d_data,
        d_sq,
        coef,
        *kp.args(),
        work,
        tmp,
    )
    out += tmp
    return out


# ------------------------------------------------------------------------------------------
# per-shard state and the major pass
# ------------------------------------------------------------------------------------------
def _init_state(linear: bool, info, _i):
    n = int(info.n_rows)
    return (np.zeros(n), None if linear else np.zeros(n))


@dataclass
class MajorBroadcast:
    """What one pricing pass ships to the shards (picklable)."""

    kp: KernelParams
    n_features: int
    C: float
    beta: float
    positive: float
    tol: float
    k: int
    seed: int
    upd_gids: np.ndarray  # sorted global rows whose α changed
    upd_alpha: np.ndarray
    keep_gids: np.ndarray  # sorted global rows of I_s (their f is returned)
    keep_rows: bool = False  # also return the I_s rows' data (warm start)
    max_value: float = np.inf  # candidates must have reduced cost below this
    w: np.ndarray | None = None  # linear kernel: the full w
    delta: tuple | None = None  # kernel: (indptr, indices, data, sq, coef) of α changes


@dataclass
class MajorPartial:
    """Partial result of a pricing pass (reduced by :func:`_major_reduce`)."""

    k: int
    stats: np.ndarray
    cand_val: np.ndarray
    cand_tie: np.ndarray
    cand_f: np.ndarray
    cand_rows: WorkingRows
    keep_gids: np.ndarray
    keep_f: np.ndarray
    keep_rows: WorkingRows | None = None
    w: np.ndarray | None = None


# stats vector layout
_S_MAXV, _S_NVIOL, _S_SUMA, _S_SUMYA, _S_AQA, _S_HINGE, _S_NSV, _S_NC, _S_FREEV = range(9)
_N_STATS = 9


def _tiebreak(gids: np.ndarray, seed: int) -> np.ndarray:
    """Deterministic pseudo-random key per global row (breaks ties among equal costs)."""
    h = gids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed & 0xFFFFFFFF)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


def _select_smallest(val: np.ndarray, tie: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest (val, tie) pairs, sorted."""
    if val.size <= k:
        return np.lexsort((tie, val))
    thr = np.partition(val, k - 1)[k - 1]
    lt = np.flatnonzero(val < thr)
    eq = np.flatnonzero(val == thr)
    need = k - lt.size
    if need < eq.size:
        eq = eq[np.argsort(tie[eq], kind="stable")[:need]]
    idx = np.concatenate([lt, eq])
    return idx[np.lexsort((tie[idx], val[idx]))]


def _major_fn(shard, bc: MajorBroadcast, st):
    check_interrupt()
    alpha, f = st
    r0 = shard.row_start
    n = shard.n_rows
    # 1. α changes of the last major iteration
    lo, hi = np.searchsorted(bc.upd_gids, [r0, r0 + n])
    if hi > lo:
        alpha = np.array(alpha, copy=True)
        alpha[bc.upd_gids[lo:hi] - r0] = bc.upd_alpha[lo:hi]
    y = np.where(shard.y == bc.positive, 1.0, -1.0)
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    data = shard.data
    # 2. scores f(x) without intercept
    w_part = None
    if bc.w is not None:
        w = bc.w
        width = int(ix.max()) + 1 if ix.size else 0
        if w.shape[0] < width:
            w = np.concatenate([w, np.zeros(width - w.shape[0])])
        fc = linear_scores(ip, ix, data, w, np.empty(n))
        nz = np.flatnonzero(alpha)
        w_part = np.zeros(bc.n_features)
        if nz.size:
            csr_rmatvec_rows_add(ip, ix, data, nz, alpha[nz] * y[nz], w_part)
    else:
        if bc.delta is not None and bc.delta[0].shape[0] > 1:
            f = np.array(f, copy=True)
            sq = row_sq_norms(ip, ix, data, np.empty(n))
            expansion_add(ip, ix, data, sq, bc.delta, bc.kp, bc.n_features, f)
        fc = f
    # 3. reduced costs of the bound variables
    C = bc.C
    G = y * fc - 1.0
    rho = G - bc.beta * y
    at0 = alpha <= 0.0
    atC = alpha >= C
    rc = np.full(n, np.inf)
    rc[at0] = rho[at0]
    rc[atC] = -rho[atC]
    gids = np.arange(r0, r0 + n, dtype=np.int64)
    kl, kh = np.searchsorted(bc.keep_gids, [r0, r0 + n])
    keep_local = bc.keep_gids[kl:kh] - r0
    rc[keep_local] = np.inf  # I_s rows of the driver (may sit at a bound value)
    stats = np.zeros(_N_STATS)
    finite = np.isfinite(rc)
    stats[_S_MAXV] = max(0.0, -float(rc[finite].min())) if finite.any() else 0.0
    stats[_S_NVIOL] = float((rc < -bc.tol).sum())
    stats[_S_SUMA] = float(alpha.sum())
    stats[_S_SUMYA] = float((alpha * y).sum())
    stats[_S_AQA] = float((alpha * y * fc).sum())
    stats[_S_HINGE] = float(np.maximum(0.0, 1.0 - y * (fc - bc.beta)).sum())
    stats[_S_NSV] = float((alpha > 0).sum())
    stats[_S_NC] = float(atC.sum())
    # free rows (I_s of the driver) must solve the reduced problem: G − βy = 0
    stats[_S_FREEV] = float(np.abs(rho[keep_local]).max()) if keep_local.size else 0.0
    # 4. candidates: the k smallest reduced costs (below max_value)
    cidx = np.flatnonzero(finite & (rc < bc.max_value))
    tie = _tiebreak(gids[cidx], bc.seed)
    sel = cidx[_select_smallest(rc[cidx], tie, bc.k)] if bc.k > 0 else cidx[:0]
    rows = shard_rows(shard, sel, bc.positive, alpha)
    part = MajorPartial(
        k=bc.k,
        stats=stats,
        cand_val=rc[sel],
        cand_tie=_tiebreak(gids[sel], bc.seed),
        cand_f=fc[sel].copy(),
        cand_rows=rows,
        keep_gids=bc.keep_gids[kl:kh].copy(),
        keep_f=fc[keep_local].copy(),
        keep_rows=shard_rows(shard, keep_local, bc.positive, alpha) if bc.keep_rows else None,
        w=w_part,
    )
    return part, (alpha, f)


def _major_reduce(a: MajorPartial | None, b: MajorPartial | None) -> MajorPartial | None:
    if a is None:
        return b
    if b is None:
        return a
    s = a.stats.copy()
    for i in (_S_NVIOL, _S_SUMA, _S_SUMYA, _S_AQA, _S_HINGE, _S_NSV, _S_NC):
        s[i] = a.stats[i] + b.stats[i]
    s[_S_MAXV] = max(a.stats[_S_MAXV], b.stats[_S_MAXV])
    s[_S_FREEV] = max(a.stats[_S_FREEV], b.stats[_S_FREEV])
    val = np.concatenate([a.cand_val, b.cand_val])
    tie = np.concatenate([a.cand_tie, b.cand_tie])
    rows = WorkingRows.concat([a.cand_rows, b.cand_rows])
    fv = np.concatenate([a.cand_f, b.cand_f])
    sel = _select_smallest(val, tie, a.k)
    if sel.size != val.size or not np.all(sel == np.arange(val.size)):
        rows = rows.take(sel) if rows.n else rows
        val, tie, fv = val[sel], tie[sel], fv[sel]
    keep_rows = None
    if a.keep_rows is not None or b.keep_rows is not None:
        keep_rows = WorkingRows.concat([a.keep_rows, b.keep_rows])
    w = None
    if a.w is not None or b.w is not None:
        w = b.w if a.w is None else (a.w if b.w is None else a.w + b.w)
    return MajorPartial(
        k=a.k,
        stats=s,
        cand_val=val,
        cand_tie=tie,
        cand_f=fv,
        cand_rows=rows,
        keep_gids=np.concatenate([a.keep_gids, b.keep_gids]),
        keep_f=np.concatenate([a.keep_f, b.keep_f]),
        keep_rows=keep_rows,
        w=w,
    )


def _warm_fn(shard, bc, st):
    """Set α of the listed rows from signed dual coefficients yᵢαᵢ; count label mismatches."""
    gids, coef, positive = bc
    alpha, f = st
    r0 = shard.row_start
    lo, hi = np.searchsorted(gids, [r0, r0 + shard.n_rows])
    bad = 0
    if hi > lo:
        alpha = np.array(alpha, copy=True)
        loc = gids[lo:hi] - r0
        y = np.where(shard.y[loc] == positive, 1.0, -1.0)
        a = coef[lo:hi] * y
        bad = int((a < 0).sum())
        alpha[loc] = np.maximum(a, 0.0)
    return bad, (alpha, f)


def _collect_fn(shard, bc, st):
    """Rows with α > 0 (support vectors), with α, in row order."""
    positive = bc
    alpha, _ = st
    idx = np.flatnonzero(alpha > 0)
    return ([shard_rows(shard, idx, positive, alpha)] if idx.size else None), st


# ------------------------------------------------------------------------------------------
# Q columns over the working set
# ------------------------------------------------------------------------------------------
class KernelColumns:
    """Q[W, j] for the members j of I_s (and those that left since the last full flush), §4.2.

    Stored row-major as Qt (|W| × capacity): Qt[i, slot(j)] = Q_ij, so the gradient of any
    subset of working rows is a set of contiguous dot products. ``Gbase`` (held by the
    caller) is the exact gradient at the α of the last *full* flush (``aflush``); a partial
    flush recomputes G = Gbase + Qt (α − aflush) for the bound rows only.
    """

    def __init__(
        self, rows: WorkingRows, y: np.ndarray, kp: KernelParams, n_features: int, capacity: int
    ):
        self.ip, self.ix, self.data = rows.csr()
        self.sq = rows.sq_norms()
        self.y = y
        self.kp = kp
        self.n = rows.n
        width = max(n_features, int(self.ix.max()) + 1 if self.ix.size else 0, 1)
        self.width = width
        self.work = np.zeros(width)
        self.tmp = np.empty(self.n)
        # dense copy of the working rows (n_features × |W|) when small: a column is then a
        # few contiguous axpys instead of |W| sparse dot products
        self.Dt = (
            _dense_transposed(self.ip, self.ix, self.data, width)
            if width * self.n <= DENSE_BLOCK_MAX
            else None
        )
        cap = max(8, int(capacity))
        self.Qt = np.empty((self.n, cap))
        self.slot = np.full(self.n, -1, dtype=np.int64)
        self.key = np.zeros(cap, dtype=np.int64)
        self.aflush = np.zeros(cap)
        self.released = np.zeros(cap, dtype=bool)
        self.p = 0
        self.kernel_evals = 0

    def nbytes(self) -> int:
        return int(self.Qt.nbytes)

    def _grow(self, need: int) -> None:
        cap = self.Qt.shape[1]
        new = max(need, cap + max(cap // 2, 8))
        Qt = np.empty((self.n, new))
        Qt[:, : self.p] = self.Qt[:, : self.p]
        self.Qt = Qt
        for name in ("key", "aflush", "released"):
            a = getattr(self, name)
            b = np.zeros(new, dtype=a.dtype)
            b[: self.p] = a[: self.p]
            setattr(self, name, b)

    def add(self, key: int, alpha_key: float) -> None:
        s = self.slot[key]
        if s >= 0:
            self.released[s] = False
            return
        if self.p == self.Qt.shape[1]:
            self._grow(self.p + 1)
        s = self.p
        out = self.tmp
        if self.Dt is not None:
            a, b = self.ip[key], self.ip[key + 1]
            dense_kernel_col(
                self.Dt, self.sq, self.ix[a:b], self.data[a:b], self.sq[key], *self.kp.args(), out
            )
        else:
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.sq,
                key,
                self.ip,
                self.ix,
                self.data,
                self.sq,
                *self.kp.args(),
                self.work,
                out,
            )
        out *= self.y
        out *= self.y[key]
        self.Qt[:, s] = out
        self.kernel_evals += self.n
        self.key[s] = key
        self.slot[key] = s
        self.aflush[s] = alpha_key
        self.released[s] = False
        self.p += 1

    def fill(self, keys: np.ndarray, alphas: np.ndarray, block: np.ndarray | None = None):
        """Add several members at once (block = K(W, keys) when already computed)."""
        keys = np.asarray(keys, dtype=np.int64)
        if keys.size == 0:
            return
        if self.p + keys.size > self.Qt.shape[1]:
            self._grow(self.p + keys.size)
        if block is None:
            block = self.kernel_block(keys)
        s0 = self.p
        sl = slice(s0, s0 + keys.size)
        self.Qt[:, sl] = block
        self.Qt[:, sl] *= self.y[:, None]
        self.Qt[:, sl] *= self.y[keys][None, :]
        self.key[sl] = keys
        self.slot[keys] = np.arange(s0, s0 + keys.size)
        self.aflush[sl] = alphas
        self.released[sl] = False
        self.p += keys.size

    def kernel_block(self, keys: np.ndarray) -> np.ndarray:
        """K(W, W[keys]) as an (|W|, len(keys)) array."""
        keys = np.asarray(keys, dtype=np.int64)
        sub_ip, sub_ix, sub_data = csr_take_rows(self.ip, self.ix, self.data, keys)
        out = np.empty((self.n, keys.size))
        self.kernel_evals += self.n * keys.size
        if self.Dt is not None and keys.size > 0:
            out = np.empty((keys.size, self.n))
            for t, k in enumerate(keys):
                a, b = self.ip[k], self.ip[k + 1]
                dense_kernel_col(
                    self.Dt,
                    self.sq,
                    self.ix[a:b],
                    self.data[a:b],
                    self.sq[k],
                    *self.kp.args(),
                    out[t],
                )
            return out.T
        if self.width * keys.size <= DENSE_BLOCK_MAX:
            Dt = _dense_transposed(sub_ip, sub_ix, sub_data, self.width)
            return dense_kernel_block(
                self.ip, self.ix, self.data, self.sq, Dt, self.sq[keys], *self.kp.args(), out
            )
        for t, k in enumerate(keys):
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.sq,
                k,
                self.ip,
                self.ix,
                self.data,
                self.sq,
                *self.kp.args(),
                self.work,
                self.tmp,
            )
            out[:, t] = self.tmp
        return out

    def col(self, key: int, rows: np.ndarray | None = None) -> np.ndarray:
        return self.Qt[:, self.slot[key]]

    def release(self, key: int) -> None:
        self.released[self.slot[key]] = True

    def n_released(self) -> int:
        return int(self.released[: self.p].sum())

    def partial(
        self, rows: np.ndarray, alpha: np.ndarray, Gbase: np.ndarray, G: np.ndarray
    ) -> None:
        """G[rows] = Gbase[rows] + Q[rows, ·](α − α_flush): O(|rows| · n_columns)."""
        p = self.p
        delta = alpha[self.key[:p]] - self.aflush[:p]
        gradient_rows(self.Qt, rows, p, delta, Gbase, G)

    def full(self, alpha: np.ndarray, Gbase: np.ndarray) -> None:
        """Gbase += Q(α − α_flush) for every working row; forget the released columns."""
        p = self.p
        if p == 0:
            return
        keys = self.key[:p]
        a = alpha[keys]
        delta = a - self.aflush[:p]
        if np.any(delta != 0.0):
            gradient_rows(self.Qt, np.arange(self.n), p, delta, Gbase, Gbase)
        self.aflush[:p] = a
        gone = np.flatnonzero(self.released[:p])
        for s in gone[::-1]:
            self._drop(int(s))

    def _drop(self, s: int) -> None:
        last = self.p - 1
        k = self.key[s]
        self.slot[k] = -1
        if s != last:
            self.Qt[:, s] = self.Qt[:, last]
            self.key[s] = self.key[last]
            self.aflush[s] = self.aflush[last]
            self.released[s] = self.released[last]
            self.slot[self.key[s]] = s
        self.p = last

    def qss(self, keys: np.ndarray) -> np.ndarray:
        return self.Qt[keys][:, self.slot[keys]]

    def qss_matvec(self, keys: np.ndarray, v: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        return gather_matvec(
            self.Qt, keys, self.slot[keys], np.ascontiguousarray(v, np.float64), np.empty(keys.size)
        )

    def compacted(self, rows: WorkingRows, kept: np.ndarray, mapping: np.ndarray):
        """The same columns restricted to the rows ``kept`` (keys renamed by ``mapping``)."""
        new = KernelColumns.__new__(KernelColumns)
        new.ip, new.ix, new.data = rows.csr()
        new.sq = self.sq[kept]
        new.y = rows.y
        new.kp = self.kp
        new.n = rows.n
        new.width = self.width
        new.work = self.work
        new.tmp = np.empty(new.n)
        new.Dt = None if self.Dt is None else np.ascontiguousarray(self.Dt[:, kept])
        new.Qt = np.ascontiguousarray(self.Qt[kept])
        new.slot = self.slot[kept].copy()
        new.key = self.key.copy()
        new.key[: self.p] = mapping[self.key[: self.p]]
        new.aflush = self.aflush.copy()
        new.released = self.released.copy()
        new.p = self.p
        new.kernel_evals = self.kernel_evals
        return new


@njit(cache=True, nogil=True)
def gradient_rows(Qt, rows, p, delta, Gbase, G):
    """G[r] = Gbase[r] + Qt[r, :p]·delta for the listed rows (contiguous BLAS dots)."""
    d = delta[:p]
    for t in range(rows.shape[0]):
        r = rows[t]
        G[r] = Gbase[r] + (np.dot(Qt[r, :p], d) if p > 0 else 0.0)


@njit(cache=True, nogil=True)
def gather_matvec(Qt, rows, cols, v, out):
    """out[a] = Σ_b Qt[rows[a], cols[b]] v[b] (Q_ss v from the stored columns)."""
    for a in range(rows.shape[0]):
        r = Qt[rows[a]]
        s = 0.0
        for b in range(cols.shape[0]):
            s += r[cols[b]] * v[b]
        out[a] = s
    return out


class LinearColumns:
    """Linear kernel: no stored columns; the gradient of working rows comes from w (§4.2).

    ``w`` is Σ αⱼyⱼxⱼ over the whole store, kept current with the α changes of the working
    rows (``aflush`` is the α at which w was last brought up to date).
    """

    def __init__(
        self, rows: WorkingRows, y: np.ndarray, w: np.ndarray, alpha: np.ndarray, n_features: int
    ):
        self.ip, self.ix, self.data = rows.csr()
        self.y = y
        self.n = rows.n
        width = max(n_features, int(self.ix.max()) + 1 if self.ix.size else 0, 1)
        self.w = np.zeros(width)
        self.w[: min(width, w.shape[0])] = w[:width]
        self.aflush = alpha.copy()
        self.work = np.zeros(width)
        self.zeros = np.zeros(self.n)
        self.tmp = np.empty(self.n)
        self.kernel_evals = 0
        self.p = 0

    def nbytes(self) -> int:
        return int(self.w.nbytes * 2 + self.aflush.nbytes)

    def add(self, key: int, alpha_key: float) -> None:
        pass

    def fill(self, keys, alphas, block=None) -> None:
        pass

    def col(self, key: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Q[·, key]; with ``rows`` only those entries are computed (the others are 0)."""
        if rows is None:
            out = np.empty(self.n)
            kernel_row(
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                key,
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                0,
                0.0,
                1,
                0.0,
                self.work,
                out,
            )
            out *= self.y
            self.kernel_evals += self.n
        else:
            rows = np.asarray(rows, dtype=np.int64)
            out = np.zeros(self.n)
            kernel_row_subset(
                self.ip,
                self.ix,
                self.data,
                self.zeros,
                key,
                rows,
                rows.size,
                0,
                0.0,
                1,
                0.0,
                self.work,
                out,
            )
            out[rows] *= self.y[rows]
            self.kernel_evals += rows.size
        out *= self.y[key]
        return out

    def release(self, key: int) -> None:
        pass

    def n_released(self) -> int:
        return 0

    def _sync_w(self, alpha: np.ndarray) -> None:
        changed = np.flatnonzero(alpha != self.aflush)
        if changed.size:
            coef = (alpha[changed] - self.aflush[changed]) * self.y[changed]
            csr_rmatvec_rows_add(self.ip, self.ix, self.data, changed, coef, self.w)
            self.aflush[changed] = alpha[changed]

    def partial(
        self, rows: np.ndarray, alpha: np.ndarray, Gbase: np.ndarray, G: np.ndarray
    ) -> None:
        self._sync_w(alpha)
        out = csr_matvec_rows(self.ip, self.ix, self.data, rows, self.w, 0.0, np.empty(rows.size))
        G[rows] = self.y[rows] * out - 1.0
        Gbase[rows] = G[rows]

    def full(self, alpha: np.ndarray, Gbase: np.ndarray) -> None:
        self._sync_w(alpha)
        linear_scores(self.ip, self.ix, self.data, self.w, Gbase)
        Gbase *= self.y
        Gbase -= 1.0

    def _sub(self, keys):
        ip, ix, data = csr_take_rows(self.ip, self.ix, self.data, np.asarray(keys, np.int64))
        return sp.csr_matrix(
            (data.astype(np.float64), ix.view(np.int32), ip), shape=(len(keys), self.w.shape[0])
        )

    def qss(self, keys: np.ndarray) -> np.ndarray:
        X = self._sub(keys)
        yk = self.y[keys]
        return (X @ X.T).toarray() * yk[:, None] * yk[None, :]

    def qss_matvec(self, keys: np.ndarray, v: np.ndarray) -> np.ndarray:
        X = self._sub(keys)
        yk = self.y[keys]
        return yk * (X @ (X.T @ (yk * v)))

    def compacted(self, rows: WorkingRows, kept: np.ndarray, mapping: np.ndarray):
        new = LinearColumns.__new__(LinearColumns)
        new.ip, new.ix, new.data = rows.csr()
        new.y = rows.y
        new.n = rows.n
        new.w = self.w
        new.aflush = self.aflush[kept].copy()
        new.work = self.work
        new.zeros = np.zeros(new.n)
        new.tmp = np.empty(new.n)
        new.kernel_evals = self.kernel_evals
        new.p = 0
        return new


# ------------------------------------------------------------------------------------------
# the reduced problem over the working set (minor iterations)
# ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def ratio_test(d, a, C, eps):
    """Largest t ≥ 0 with 0 ≤ a + t d ≤ C and the blocking index (−1: none, t = inf)."""
    t_max = np.inf
    j = -1
    for k in range(d.shape[0]):
        dk = d[k]
        if dk > eps:
            t = (C - a[k]) / dk
        elif dk < -eps:
            t = -a[k] / dk
        else:
            continue
        if t < 0.0:
            t = 0.0
        if t < t_max:
            t_max = t
            j = k
    return t_max, j


@njit(cache=True, nogil=True)
def take_step(keys, d, t, C, finite, beta, alpha, G, y):
    """α[keys] += t d (clipped to [0, C]); for a finite step G[keys] += t (β y − G)."""
    for k in range(keys.shape[0]):
        i = keys[k]
        v = alpha[i] + t * d[k]
        if v < 0.0:
            v = 0.0
        elif v > C:
            v = C
        alpha[i] = v
        if finite:
            g = G[i]
            G[i] = g + t * (beta * y[i] - g)


S_ZERO, S_FREE, S_UPPER, S_OUT = 0, 1, 2, -1


@dataclass
class Counters:
    iterations: int = 0
    entered: int = 0
    left: int = 0
    infinite_steps: int = 0
    degenerate_steps: int = 0
    pricings: int = 0
    full_flushes: int = 0
    refactorisations: int = 0
    probe_checks: int = 0
    shrunk: int = 0
    max_dependent: int = 0
    memory_stops: int = 0
    peak_bytes: int = 0
    extra: dict = field(default_factory=dict)


class WorkingSet:
    """Rows W = I_s ∪ I₀′ ∪ I_c′ in memory and the active-set iterations on them (§2).

    Parameters
    ----------
    rows : WorkingRows
        The rows (with α, which this object updates in place).
    G : ndarray
        Gradient (Qα − e) of every working row at the current α.
    status : ndarray of int8
        S_ZERO / S_FREE / S_UPPER per row (S_FREE rows are the factor's members).
    columns : KernelColumns or LinearColumns
    factor : ActiveFactor
        Factor of Q_ss for the free rows (keys = positions in ``rows``).
    C, tol : float
    beta : float
        Current multiplier (used when I_s is empty at the first pricing).
    counters : Counters
    shrink_after : int or None
        Drop a row from pricing after this many consecutive non-negative reduced costs.
    seed : int
        Seed of the probe vectors.
    """

    def __init__(
        self,
        rows: WorkingRows,
        G: np.ndarray,
        status: np.ndarray,
        columns,
        factor: ActiveFactor,
        C: float,
        tol: float,
        beta: float,
        counters: Counters,
        shrink_after: int | None = None,
        seed: int = 0,
    ):
        self.rows = rows
        self.y = rows.y
        self.alpha = rows.alpha
        self.Gbase = np.array(G, dtype=np.float64)
        self.G = self.Gbase.copy()
        self.status = status
        self.cols = columns
        self.factor = factor
        self.C = float(C)
        self.tol = float(tol)
        self.beta = float(beta)
        self.c = counters
        self.shrink_after = shrink_after
        self.nonneg = np.zeros(rows.n, dtype=np.int32) if shrink_after else None
        self.seed = seed
        self.last_violation = np.inf
        self.alpha0 = self.alpha.copy()
        self._dropped: list[tuple[WorkingRows, np.ndarray]] = []
        self._since_full = 0
        self._entered = -1
        self._last_move = counters.iterations
        self.cycling = False
        self.memory_full = False
        self.max_bytes = 0

    # -- helpers ----------------------------------------------------------------------------
    def _col_fn(self, key: int) -> np.ndarray:
        """Q column of ``key``, at least over the factor's members and ``key`` itself."""
        return self.cols.col(key, np.append(self.factor.keys(), key))

    def refactor(self) -> None:
        """Rebuild the factor of Q_ss from the stored columns (§2.2 accuracy safeguard)."""
        keys = self.factor.keys()
        self.factor.refactor(keys, self.y[keys], self.cols.qss(keys), g=self.G)
        self.c.refactorisations += 1

    def _probe(self) -> float:
        self.c.probe_checks += 1
        return self.factor.probe_error(self.cols.qss_matvec, seed=self.seed + self.c.probe_checks)

    def _bound_rows(self) -> np.ndarray:
        st = self.status
        return np.flatnonzero((st == S_ZERO) | (st == S_UPPER))

    def flush_full(self) -> None:
        """Exact gradient of every working row; r2 of the factor recomputed from it."""
        self.cols.full(self.alpha, self.Gbase)
        self.G[:] = self.Gbase
        if self.factor.n:
            self.factor.set_gradient(self.G)
        self._since_full = 0
        self.c.full_flushes += 1

    def flush_partial(self) -> None:
        """Exact gradient of the bound working rows (the ones priced)."""
        self.cols.partial(self._bound_rows(), self.alpha, self.Gbase, self.G)

    # -- Step 1 -----------------------------------------------------------------------------
    def step1(self) -> int:
        """Steps along d until the reduced optimum is reached; returns the bounds hit."""
        hits = 0
        C = self.C
        f = self.factor
        while f.n > 0:
            if f.nd > self.c.max_dependent:
                self.c.max_dependent = f.nd
            finite, db, dd, beta_new = f.direction(self.G)
            keys = np.concatenate([f.bkeys[: f.nb], f.dkeys[: f.nd]])
            d = np.concatenate([db, dd])
            a = self.alpha[keys]
            dmax = float(np.abs(d).max()) if d.size else 0.0
            if not finite and self._entered >= 0:
                # a flat infinite direction (gᵀd = 0) may be taken either way: move the
                # variable that just entered inwards, or it would leave at once and cycle
                gd = float(self.G[keys] @ d)
                if abs(gd) <= 1e-12 * dmax * (1.0 + float(np.abs(self.G[keys]).max())):
                    pos = np.flatnonzero(keys == self._entered)
                    if pos.size:
                        inward = 1.0 if self.alpha[self._entered] < 0.5 * C else -1.0
                        if d[pos[0]] * inward < 0:
                            d = -d
            # components below rounding level (relative to the step and to C) do not block
            t_max, j = ratio_test(d, a, C, max(1e-13 * dmax, 1e-14 * C))
            if finite:
                if t_max >= 1.0:
                    t = 1.0
                    j = -1
                else:
                    t = t_max
            else:
                self.c.infinite_steps += 1
                if not np.isfinite(t_max):
                    # numerically zero direction: nothing moves; drop a dependent index
                    t = 0.0
                    j = f.nb if f.nd else int(np.argmax(np.abs(d)))
                else:
                    t = t_max
            if t > 0.0:
                self._last_move = self.c.iterations
                # α_s += t d; finite step: exact gradient change Q_ss d = β y_s − g_s
                take_step(keys, d, t, C, finite, beta_new, self.alpha, self.G, self.y)
                if finite:
                    f.advance(t, beta_new)
            else:
                self.c.degenerate_steps += 1
            if finite:
                self.beta = beta_new
            self._entered = -1
            if j < 0:
                return hits
            kj = int(keys[j])
            to_upper = d[j] > 0
            self.alpha[kj] = C if to_upper else 0.0
            self._leave(kj, S_UPPER if to_upper else S_ZERO)
            hits += 1
        return hits

    def _leave(self, key: int, status: int) -> None:
        self.factor.remove(key, self._col_fn, g=self.G)
        self.cols.release(key)
        self.status[key] = status
        self.c.left += 1
        self.c.iterations += 1

    def nbytes(self) -> int:
        """Memory of the working set: rows, gradients, Q columns and the factor."""
        dt = getattr(self.cols, "Dt", None)
        return int(
            self.rows.nbytes
            + 3 * self.G.nbytes
            + self.cols.nbytes()
            + (0 if dt is None else dt.nbytes)
            + self.factor.nbytes()
        )

    def _enter(self, key: int) -> None:
        self.cols.add(key, float(self.alpha[key]))
        self.factor.append(key, float(self.y[key]), self._col_fn(key), g=float(self.G[key]))
        self.status[key] = S_FREE
        self._entered = key
        self.c.entered += 1
        self.c.iterations += 1

    # -- Step 2 -----------------------------------------------------------------------------
    def _beta_interval(self) -> float:
        G, y, st = self.G, self.y, self.status
        at0 = st == S_ZERO
        atC = st == S_UPPER
        lo_c = np.concatenate([-G[at0 & (y < 0)], G[atC & (y > 0)]])
        hi_c = np.concatenate([G[at0 & (y > 0)], -G[atC & (y < 0)]])
        lo = float(lo_c.max()) if lo_c.size else -np.inf
        hi = float(hi_c.min()) if hi_c.size else np.inf
        if np.isfinite(lo) and np.isfinite(hi):
            return 0.5 * (lo + hi)
        if np.isfinite(lo):
            return lo
        if np.isfinite(hi):
            return hi
        return self.beta

    def price(self) -> tuple[int, float]:
        """Reduced costs of the bound working rows; (most negative row, its value)."""
        self.c.pricings += 1
        if self.factor.n == 0:
            self.beta = self._beta_interval()
        rho = self.G - self.beta * self.y
        st = self.status
        rc = np.where(st == S_ZERO, rho, np.where(st == S_UPPER, -rho, np.inf))
        if self.nonneg is not None:
            bound = (st == S_ZERO) | (st == S_UPPER)
            ok = bound & (rc >= 0)
            self.nonneg[ok] += 1
            self.nonneg[bound & ~ok] = 0
            drop = ok & (self.nonneg >= self.shrink_after)
            if drop.any():
                st[drop] = S_OUT
                rc[drop] = np.inf
                self.c.shrunk += int(drop.sum())
        i = int(np.argmin(rc))
        return i, float(rc[i])

    def residual(self) -> float:
        """max |Gᵢ − βyᵢ| over I_s (zero at the reduced optimum)."""
        keys = self.factor.keys()
        if keys.size == 0:
            return 0.0
        return float(np.abs(self.G[keys] - self.beta * self.y[keys]).max())

    # -- the minor loop ---------------------------------------------------------------------
    def run(self, max_iter: int, tol_enter: float) -> bool:
        """Active-set iterations until no working row has reduced cost < −tol_enter.

        Returns True when the reduced problem over W is optimal, False at ``max_iter``.
        """
        start = self.c.iterations
        start_bytes = self.nbytes()
        if self.factor.n:
            self.factor.set_gradient(self.G)
        repaired = False
        while self.c.iterations - start < max_iter:
            check_interrupt()
            self.step1()
            self._since_full += 1
            if self._since_full >= FULL_FLUSH_EVERY or self.cols.n_released() > max(
                16, self.cols.p // 4
            ):
                self.flush_full()
                res = self.residual()
                lost = res > max(1e-9, 1e-4 * self.tol) * (1.0 + float(np.abs(self.G).max()))
                if not lost and self.factor.updates >= CHECK_EVERY:
                    lost = self._probe() > REFACTOR_TOL
                if lost and not repaired:
                    # the updated factor has lost accuracy: rebuild it and re-solve (4)
                    log.debug("active-set: refactorising (residual %.3g)", res)
                    self.refactor()
                    repaired = True
                    continue
            else:
                self.flush_partial()
            repaired = False
            i, v = self.price()
            if self.nonneg is not None:
                n_out = int((self.status == S_OUT).sum())
                if n_out > max(256, self.rows.n // 3):
                    self.compact()
                    i, v = self._argmin_rc()
            self.last_violation = max(0.0, -v)
            if v >= -tol_enter:
                if self._since_full > 0:
                    # confirm optimality with exact gradients before handing back
                    self.flush_full()
                    if self.residual() > 1e-6 * (1.0 + float(np.abs(self.G).max())):
                        continue
                    i, v = self._argmin_rc()
                    if v < -tol_enter:
                        self._enter(i)
                        continue
                return True
            if (
                self.max_bytes
                and self.c.iterations - start > 0
                and self.nbytes() > max(self.max_bytes, 1.5 * start_bytes)
            ):
                # §4.2: the working set outgrew --cache-mb (I_s grew); end this major
                # iteration, the next one takes fewer candidate rows. (A budget too small
                # for even the smallest working set is exceeded by at most half per major.)
                self.memory_full = True
                self.c.memory_stops += 1
                return True
            if self.c.iterations - self._last_move > 2 * self.rows.n + 100:
                # only zero-length (degenerate) steps for too long: stop this major iteration
                log.warning(
                    "active-set: %d degenerate steps in a row; leaving the minor loop",
                    self.c.iterations - self._last_move,
                )
                self.cycling = True
                return True
            self._enter(i)
        return False

    def _argmin_rc(self) -> tuple[int, float]:
        st = self.status
        rho = self.G - self.beta * self.y
        rc = np.where(st == S_ZERO, rho, np.where(st == S_UPPER, -rho, np.inf))
        i = int(np.argmin(rc))
        return i, float(rc[i])

    def compact(self) -> None:
        """Drop the shrunk rows from memory (their α changes are remembered)."""
        keep = self.status != S_OUT
        out = np.flatnonzero(~keep)
        if out.size == 0:
            return
        moved = out[self.alpha[out] != self.alpha0[out]]
        if moved.size:
            self._dropped.append((self.rows.take(moved), self.alpha0[moved].copy()))
        self.flush_full()
        kept = np.flatnonzero(keep)
        mapping = np.full(self.rows.n, -1, dtype=np.int64)
        mapping[kept] = np.arange(kept.size)
        self.rows = self.rows.take(kept)
        self.y = self.rows.y
        self.alpha = self.rows.alpha
        self.alpha0 = self.alpha0[kept]
        self.Gbase = self.Gbase[kept]
        self.G = self.G[kept]
        self.status = self.status[kept]
        if self.nonneg is not None:
            self.nonneg = self.nonneg[kept]
        self.factor.remap(mapping)
        self.cols = self.cols.compacted(self.rows, kept, mapping)

    def changes(self) -> tuple[WorkingRows, np.ndarray]:
        """Rows whose α changed during this major iteration (new α) and their old α."""
        ch = np.flatnonzero(self.alpha != self.alpha0)
        parts = [r for r, _ in self._dropped] + [self.rows.take(ch)]
        old = np.concatenate([a for _, a in self._dropped] + [self.alpha0[ch]])
        return WorkingRows.concat(parts), old


# ------------------------------------------------------------------------------------------
# the solver
# ------------------------------------------------------------------------------------------
def _candidate_count(
    p: Params, n_s: int, avg_nnz: float, linear: bool, n_rows: int, n_features: int
) -> int:
    """|I₀′ ∪ I_c′| for the next major iteration: explicit, or from the memory budget.

    The budget (``cache_mb``) covers the Cholesky factor, the working rows and, for kernels,
    their dense copy and the Q columns of I_s over them (§4.2), with room for I_s to grow
    by half during the major iteration.
    """
    if int(p.sprint_size) > 0:
        return int(p.sprint_size)
    budget = float(p.cache_mb) * (1 << 20)
    n_cols = 1.5 * max(n_s, 64) + 32
    factor_bytes = 8.0 * n_cols**2
    left = max(budget - factor_bytes, budget * 0.1)
    per_row = 12.0 * avg_nnz + 64.0
    if not linear:
        per_row += 8.0 * n_cols
        if n_features * SPRINT_AUTO_MAX <= DENSE_BLOCK_MAX:
            per_row += 8.0 * n_features
    k = int(left / per_row) - n_s
    if p.pricing == "sprint":
        k = min(k, SPRINT_AUTO_MAX, int(SPRINT_SQRT * np.sqrt(max(n_rows, 1))))
    return int(max(MIN_CANDIDATES, min(k, n_rows)))


def _load_init(path: str, C: float, kp: KernelParams, n_rows: int):
    """(sorted gids, signed coefficients yα rescaled to C, SV rows, w, intercept) of a model."""
    try:
        model = load_model(path)
    except Exception as e:
        raise SolverError(f"--init {path}: {e}") from None
    if model.support_ is None or model.dual_coef_ is None:
        raise SolverError(
            f"--init {path}: the model keeps no dual coefficients with their row indices "
            "(support_); kernel models and active-set models of any kernel do"
        )
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    if coef.ndim != 1:
        raise SolverError(f"--init {path}: one-vs-rest models cannot seed a binary problem")
    gids = np.asarray(model.support_, dtype=np.int64)
    if gids.size and (gids.min() < 0 or gids.max() >= n_rows):
        raise SolverError(
            f"--init {path}: support vector row {int(gids.max())} is outside this store "
            f"({n_rows} rows); the model was trained on another store"
        )
    C_old = float(model.info.get("C", C))
    scale = C / C_old if C_old > 0 else 1.0
    coef = coef * scale
    # clip |coef| to C (rounding) and order by row
    coef = np.sign(coef) * np.minimum(np.abs(coef), C)
    order = np.argsort(gids, kind="stable")
    gids, coef = gids[order], coef[order]
    sv = model.support_vectors_
    w = None
    if kp.kernel == "linear":
        if model.coef_ is not None and sv is None:
            w = np.asarray(model.coef_, dtype=np.float64) * scale
    intercept = float(model.intercept_) * scale if np.ndim(model.intercept_) == 0 else 0.0
    sv_rows = None
    if sv is not None:
        import scipy.sparse as sp

        X = sp.csr_matrix(sv)[order]
        X.sort_indices()
        sv_rows = WorkingRows(
            gids.copy(),
            X.indptr.astype(np.int64),
            X.indices.astype(np.int32),
            X.data.astype(np.float32),
            np.sign(coef),
            np.abs(coef),
        )
    return gids, coef, sv_rows, w, intercept, C_old


def _repair_equality(rows: WorkingRows, status: np.ndarray, C: float, imbalance: float):
    """Move α of working rows so that yᵀα changes by −imbalance (free rows first)."""
    r = float(imbalance)
    order = np.concatenate([np.flatnonzero(status == S_FREE), np.flatnonzero(status != S_FREE)])
    for i in order:
        if abs(r) <= 1e-15 * C:
            break
        yi = rows.y[i]
        # want Δα with yi Δα = −r
        want = -r * yi
        a = rows.alpha[i]
        na = min(C, max(0.0, a + want))
        r += yi * (na - a)
        rows.alpha[i] = na
    return r


def _exp_tuple(rows: WorkingRows, coef: np.ndarray):
    """(indptr, indices, data, sq, coef) of the rows with non-zero coefficient."""
    nz = np.flatnonzero(coef != 0.0)
    sub = rows.take(nz) if nz.size != rows.n else rows
    ip, ix, data = sub.csr()
    return (
        ip,
        ix.view(np.int32),
        np.asarray(data, dtype=np.float64),
        sub.sq_norms(),
        np.asarray(coef[nz], dtype=np.float64),
    )


# ------------------------------------------------------------------------------------------
# checkpoints: the state between two major iterations
# ------------------------------------------------------------------------------------------
_FACTOR_ARRAYS = ("R", "Lam", "T", "bkeys", "by", "dkeys", "dy", "ddiag")
_FACTOR_SCALARS = ("dep_tol", "r2_valid", "nb", "nd", "updates", "refactorisations", "promotions")
_ROW_ARRAYS = ("gids", "indptr", "indices", "data", "y", "alpha")


@dataclass
class _Loop:
    """What the driver carries from one major iteration to the next (and checkpoints)."""

    major: int = 0
    stall: int = 0
    beta: float = 0.0
    hit_max_iter: bool = False
    stop_value: float = np.inf
    passes: int = 0


def _save_checkpoint(
    checkpoint,
    engine,
    state,
    loop: _Loop,
    s_rows,
    factor,
    counters,
    w,
    delta,
    upd_gids,
    upd_alpha,
    history,
    warm,
) -> None:
    """Write the state after a major iteration: per-shard (α, f), I_s rows, the factor, the
    pending α changes and the scalars; resuming from it repeats the run bit for bit."""
    arrays = {"upd_gids": upd_gids, "upd_alpha": upd_alpha}
    arrays.update({f"s_{k}": getattr(s_rows, k) for k in _ROW_ARRAYS})
    arrays.update({f"factor_{k}": getattr(factor, k) for k in _FACTOR_ARRAYS})
    if w is not None:
        arrays["w"] = w
    if delta is not None:
        arrays.update({f"delta_{i}": a for i, a in enumerate(delta)})
    scalars = {
        "loop": dataclasses.asdict(loop),
        "factor": {k: getattr(factor, k) for k in _FACTOR_SCALARS},
        "counters": dataclasses.asdict(counters),
        "history": history,
        "warm": warm,
        "delta": delta is not None,
    }
    shards = [
        {"alpha": a} if f is None else {"alpha": a, "f": f} for a, f in engine.gather_state(state)
    ]
    checkpoint.save(loop.major, scalars=scalars, arrays=arrays, shard_states=shards)


def _load_checkpoint(checkpoint, store, engine):
    """The state saved by :func:`_save_checkpoint`, or None when there is no checkpoint."""
    data = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if data is None:
        return None
    shards = data.shard_states or []
    if len(shards) != store.n_shards or any(
        st["alpha"].shape != (int(info.n_rows),)
        for st, info in zip(shards, store.meta.shards, strict=True)
    ):
        raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
    a, sc = data.arrays, data.scalars
    state = engine.set_state(store, [(st["alpha"], st.get("f")) for st in shards])
    s_rows = WorkingRows(*(a[f"s_{k}"] for k in _ROW_ARRAYS))
    factor = ActiveFactor()
    for k in _FACTOR_ARRAYS:
        setattr(factor, k, np.array(a[f"factor_{k}"]))
    for k, v in sc["factor"].items():
        setattr(factor, k, v)
    delta = tuple(a[f"delta_{i}"] for i in range(5)) if sc["delta"] else None
    return (
        state,
        _Loop(**sc["loop"]),
        s_rows,
        factor,
        Counters(**sc["counters"]),
        a.get("w"),
        delta,
        a["upd_gids"],
        a["upd_alpha"],
        list(sc["history"]),
        bool(sc["warm"]),
    )


@interruptible
def solve(
    store,
    engine,
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
        Saves the state after every major iteration; with ``checkpoint.resume`` the run
        continues from the latest checkpoint and ends with the same model.

    Returns
    -------
    Result
        ``iterations`` counts minor (active-set) iterations; ``summary`` has ``n_s``, ``n_c``,
        ``major_iterations``, ``minor_iterations``, ``refactorisations`` and more.
    """
    t0 = time.perf_counter()
    p = as_params(Params, params)
    p.validate(store.meta)
    neg, pos = binary_classes(store.meta)
    meta = store.meta
    nf = int(meta.n_features)
    kp = KernelParams.from_params(p.kernel_dict(), nf)
    linear = kp.kernel == "linear"
    C = float(p.C)
    tol = float(p.tol)
    seed = int(p.seed)
    max_iter = int(p.max_iter)
    shrinking = p.pricing == "shrinking"
    shrink_after = int(p.shrink_after) if shrinking else None
    passes0 = engine.passes
    avg_nnz = meta.nnz / max(meta.n_rows, 1)

    state = engine.init_state(store, functools.partial(_init_state, linear))
    counters = Counters()
    history: list[dict] = []
    beta = 0.0
    w = np.zeros(nf) if linear else None
    delta = None
    upd_gids = np.zeros(0, dtype=np.int64)
    upd_alpha = np.zeros(0)
    s_rows = WorkingRows.empty()  # rows of I_s, in factor-key order 0..n_s−1
    factor = ActiveFactor(capacity=64)
    warm = p.init is not None
    keep_rows = False
    clock = CheckpointClock(float(getattr(p, "checkpoint_seconds", 60.0)))
    resumed = _load_checkpoint(checkpoint, store, engine)
    if resumed is not None:
        state, loop, s_rows, factor, counters, w, delta, upd_gids, upd_alpha, history, warm = (
            resumed
        )
        s_gids = s_rows.gids.copy()
        passes0 = engine.passes - loop.passes
        log.info("active-set: resuming after major iteration %d", loop.major)
    elif warm:
        gids, coef, sv_rows, w_init, intercept, C_old = _load_init(str(p.init), C, kp, meta.n_rows)
        bad = (
            engine.map_reduce(
                store,
                _warm_fn,
                (gids, coef, pos),
                state=state,
                shards=split_updates_by_shard(store, gids),
            )
            if gids.size
            else 0
        )
        if bad:
            raise SolverError(
                f"--init {p.init}: {bad} support vector(s) have the opposite label in this "
                "store; the model was trained on another store"
            )
        beta = -intercept
        a_abs = np.abs(coef)
        free = (a_abs > 0) & (a_abs < C)
        keep_rows = bool(free.any())
        s_gids = gids[free]
        if linear:
            if w_init is not None:
                w = np.zeros(nf)
                w[: min(nf, w_init.size)] = w_init[:nf]
            elif sv_rows is not None:
                w = np.zeros(nf)
                ip, ix, data = sv_rows.csr()
                csr_rmatvec_rows_add(ip, ix, data, np.arange(sv_rows.n), coef, w)
        else:
            if sv_rows is None:
                raise SolverError(
                    f"--init {p.init}: kernel warm start needs the support vectors in the model"
                )
            delta = _exp_tuple(sv_rows, coef)
        log.info(
            "active-set: warm start from %s: %d SVs (%d free), C %.6g -> %.6g",
            p.init,
            gids.size,
            int(free.sum()),
            C_old,
            C,
        )
    else:
        s_gids = np.zeros(0, dtype=np.int64)

    if resumed is None:
        loop = _Loop()
    major, stall, beta = loop.major, loop.stall, loop.beta if resumed is not None else beta
    hit_max_iter, stop_value = loop.hit_max_iter, loop.stop_value
    converged = False
    stats = None
    while True:
        check_interrupt()
        k = _candidate_count(p, s_gids.size, avg_nnz, linear, meta.n_rows, nf)
        tp = time.perf_counter()
        bc = MajorBroadcast(
            kp=kp,
            n_features=nf,
            C=C,
            beta=beta,
            positive=pos,
            tol=tol,
            k=k,
            seed=seed,
            upd_gids=upd_gids,
            upd_alpha=upd_alpha,
            keep_gids=np.sort(s_gids),
            keep_rows=keep_rows,
            w=w if linear else None,
            delta=None if linear else delta,
            max_value=0.0 if shrinking else np.inf,
        )
        res: MajorPartial = engine.map_reduce(
            store, _major_fn, bc, reduce=_major_reduce, state=state
        )
        pass_seconds = time.perf_counter() - tp
        major += 1
        stats = res.stats
        if linear and res.w is not None:
            w = res.w.copy()
        stop_value = max(float(stats[_S_MAXV]), float(stats[_S_FREEV]))
        aqa = float(stats[_S_AQA])
        dual = 0.5 * aqa - float(stats[_S_SUMA])
        primal = 0.5 * aqa + C * float(stats[_S_HINGE])
        rec = {
            "iteration": major,
            "minor_iterations": counters.iterations,
            "violation": stop_value,
            "n_violators": int(stats[_S_NVIOL]),
            "dual_objective": dual,
            "objective": primal,
            "n_s": int(s_gids.size),
            "n_c": int(stats[_S_NC]),
            "n_sv": int(stats[_S_NSV]),
            "working_set": int(res.cand_rows.n + s_gids.size),
            "pass_seconds": pass_seconds,
            "seconds": time.perf_counter() - t0,
            "passes": engine.passes - passes0,
        }
        history.append(rec)
        if callback is not None:
            callback(rec)
        log.debug(
            "active-set major %d: violation %.3g, n_s %d, n_c %d, dual %.10g",
            major,
            stop_value,
            s_gids.size,
            int(stats[_S_NC]),
            dual,
        )
        if hit_max_iter:
            break
        if stop_value <= tol:
            converged = True
            break

        # ---- build the working set: I_s rows (kept) + candidates -------------------------
        if keep_rows:
            kr = res.keep_rows
            s_rows = kr.take(np.argsort(kr.gids, kind="stable"))
            keep_rows = False
        kf = dict(zip(res.keep_gids.tolist(), res.keep_f.tolist(), strict=True))
        f_s = np.array([kf[int(g)] for g in s_rows.gids]) if s_rows.n else np.zeros(0)
        n_s = s_rows.n
        W = WorkingRows.concat([s_rows, res.cand_rows, WorkingRows.empty()])
        if W is res.cand_rows:
            W = W.take(np.arange(W.n))
        G = W.y * np.concatenate([f_s, res.cand_f]) - 1.0
        status = np.where(W.alpha <= 0.0, S_ZERO, np.where(W.alpha >= C, S_UPPER, S_FREE))
        status[:n_s] = S_FREE
        fix_pos = np.zeros(0, dtype=np.int64)
        fix_old = np.zeros(0)
        if warm and major == 1:
            imb = float(stats[_S_SUMYA])
            if abs(imb) > 1e-12 * C * max(1.0, float(stats[_S_NSV])):
                a0 = W.alpha.copy()
                left = _repair_equality(W, status, C, imb)
                log.info(
                    "active-set: warm start: restored y'alpha = 0 (imbalance %.3g, %.3g left)",
                    imb,
                    left,
                )
                fix_pos = np.flatnonzero(W.alpha != a0)
                fix_old = a0[fix_pos]
                status = np.where(W.alpha <= 0.0, S_ZERO, np.where(W.alpha >= C, S_UPPER, S_FREE))
        if linear:
            cols = LinearColumns(W, W.y, w, W.alpha, nf)
            if fix_pos.size:
                cols.aflush[fix_pos] = fix_old
                cols.full(W.alpha, G)
        else:
            cols = KernelColumns(W, W.y, kp, nf, int(1.25 * max(n_s, 16)) + 32)
            if fix_pos.size:
                blk = cols.kernel_block(fix_pos) * W.y[:, None] * W.y[fix_pos][None, :]
                G += blk @ (W.alpha[fix_pos] - fix_old)
            free_pos = np.flatnonzero(status == S_FREE)
            cols.fill(free_pos, W.alpha[free_pos])
        if major == 1 or fix_pos.size:
            # (re)build the factor of Q_ss for the starting free set (warm start: §2.1 Case 3)
            free_pos = np.flatnonzero(status == S_FREE)
            factor = ActiveFactor(capacity=max(64, free_pos.size + 16))
            if free_pos.size:
                factor.refactor(free_pos, W.y[free_pos], cols.qss(free_pos))
        ws = WorkingSet(
            W, G, status, cols, factor, C, tol, beta, counters, shrink_after=shrink_after, seed=seed
        )
        ws.max_bytes = int(float(p.cache_mb) * (1 << 20))
        if fix_pos.size:
            ws.alpha0[fix_pos] = fix_old
        ok = ws.run(max_iter - counters.iterations, 0.5 * tol)
        if not ok:
            log.warning("active-set: stopped at max_iter=%d minor iterations", max_iter)
            hit_max_iter = True
        beta = ws.beta
        counters.peak_bytes = max(counters.peak_bytes, ws.nbytes())
        # ---- hand the α changes to the shards -----------------------------------------------
        ch_rows, ch_old = ws.changes()
        if ch_rows.n == 0 and not hit_max_iter:
            stall += 1
            if stall >= 3:
                log.warning(
                    "active-set: no progress in 3 major iterations (violation %.3g > "
                    "tol %.3g); stopping",
                    stop_value,
                    tol,
                )
                break
        else:
            stall = 0
        order = np.argsort(ch_rows.gids, kind="stable")
        ch_rows = ch_rows.take(order)
        ch_old = ch_old[order]
        upd_gids = ch_rows.gids.copy()
        upd_alpha = ch_rows.alpha.copy()
        if linear:
            ws.cols.full(ws.alpha, ws.Gbase)
            w = ws.cols.w[:nf].copy()
            delta = None
        else:
            delta = _exp_tuple(ch_rows, ch_rows.y * (ch_rows.alpha - ch_old))
        # ---- next I_s: the free rows in factor-key order become positions 0..n_s−1 ----------
        keys = factor.keys()
        mapping = np.full(ws.rows.n, -1, dtype=np.int64)
        mapping[keys] = np.arange(keys.size)
        factor.remap(mapping)
        s_rows = ws.rows.take(keys)
        s_gids = s_rows.gids.copy()
        del ws, cols, W
        if checkpoint is not None and clock.due():
            t_save = time.perf_counter()
            loop = _Loop(major, stall, beta, hit_max_iter, stop_value, engine.passes - passes0)
            _save_checkpoint(
                checkpoint,
                engine,
                state,
                loop,
                s_rows,
                factor,
                counters,
                w if linear else None,
                delta,
                upd_gids,
                upd_alpha,
                history,
                warm,
            )
            clock.saved(t_save)

    # ---- the model, independent KKT check -------------------------------------------------
    sv = collect_support_vectors(store, engine, state, pos, _collect_fn)
    intercept = -beta
    aqa = float(stats[_S_AQA]) if stats is not None else 0.0
    dual = 0.5 * aqa - (float(stats[_S_SUMA]) if stats is not None else 0.0)
    primal = 0.5 * aqa + C * (float(stats[_S_HINGE]) if stats is not None else 0.0)
    n_c = int(np.sum(sv.alpha >= C)) if sv.n else 0
    info = {
        "solver": "active-set",
        "C": C,
        "tol": tol,
        "pricing": p.pricing,
        "dual_objective": dual,
        "objective": primal,
        "converged": converged,
    }
    # linear models keep the dual coefficients (by global row) to warm-start a new run
    fin = finish_dual(
        store, engine, sv, intercept, kp, C, tol, (neg, pos), info, check=p.check, keep_dual=True
    )
    model = fin.model
    summary = {
        "n_s": int(s_gids.size),
        "n_c": n_c,
        "n_sv": int(sv.n),
        "major_iterations": major,
        "minor_iterations": counters.iterations,
        "entered": counters.entered,
        "left": counters.left,
        "infinite_steps": counters.infinite_steps,
        "degenerate_steps": counters.degenerate_steps,
        "refactorisations": counters.refactorisations,
        "probe_checks": counters.probe_checks,
        "max_dependent": counters.max_dependent,
        "pricings": counters.pricings,
        "shrunk": counters.shrunk,
        "memory_stops": counters.memory_stops,
        "working_set_peak_mb": counters.peak_bytes / (1 << 20),
        "pricing": p.pricing,
        "converged": converged,
        "intercept": intercept,
        "warm_start": warm,
    }
    if fin.kkt is not None:
        chk = fin.kkt
        summary["kkt_max_violation"] = chk["max_violation"]
        summary["kkt_n_violators"] = chk["n_violators"]
        summary["kkt_ok"] = chk["ok"]
        summary["kkt_gap"] = chk["gap"]
    seconds = time.perf_counter() - t0
    summary["seconds"] = seconds
    return Result(
        model=model,
        objective=primal,
        dual_objective=dual,
        converged=converged,
        stop_reason=None if converged else ("max_iter" if hit_max_iter else "stalled"),
        iterations=counters.iterations,
        passes=engine.passes - passes0,
        seconds=seconds,
        stop_value=stop_value,
        history=history,
        summary=summary,
    )
