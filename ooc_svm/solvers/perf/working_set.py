"""The working set of cutting planes and the glue to its QP (OP3)."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ...kernels.kernel_functions import sparse_sparse_dot
from .. import SolverError
from ._numba.cuts import matvec, sparse_vdot, vdot
from ._numba.sparse import axpy, scatter_add
from .qp import solve_simplex_qp

log = logging.getLogger(__name__)


class WorkingSet:
    """Cutting planes (gⱼ, rⱼ) with their Gram matrix, in bounded memory.

    Each gⱼ is kept in the smaller of a dense and a sparse (int32 indices + values) form,
    with float64 values while the set uses less than half of ``limit_bytes`` and float32
    beyond. The Gram matrix is updated with one row per new plane (O(|W|·size) work); a
    plane given sparse (``(columns, values)``, :func:`~.passes.acc_cut`) is never
    densified. Beyond ``limit_bytes`` the set is bounded (:meth:`_bound`): planes with
    αⱼ = 0 are dropped, then the others are aggregated into their α-weighted mean (bundle
    aggregation: w and the dual value are unchanged, the dual stays a lower bound).
    """

    def __init__(self, dim: int, limit_bytes: float) -> None:
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
        #: consecutive QPs that used up their step budget (:meth:`solve`)
        self.failed_in_a_row = 0
        #: the point each plane was computed at (float32, or None: not kept), so that the
        #: model can keep them for a warm start on a grown store (:mod:`..warm`); kept while
        #: they take at most ``points_limit`` bytes (0: never)
        self.points: list[np.ndarray | None] = []
        self.points_limit = 0.0

    def __len__(self) -> int:
        return len(self.vecs)

    @staticmethod
    def _dot(v, g: np.ndarray) -> float:
        if isinstance(v, np.ndarray):
            return float(vdot(v, g))
        idx, vals = v
        return float(sparse_vdot(idx, vals, g))

    def _store(self, g):
        """The stored form of plane ``g`` (dense array or ``(columns, values)``), its size."""
        sparse_in = isinstance(g, tuple)
        nz = g[0] if sparse_in else np.flatnonzero(g)
        use32 = self.nbytes > self.limit / 2
        vb = 4 if use32 else 8
        dt = np.float32 if use32 else np.float64
        it = np.int32 if self.dim <= np.iinfo(np.int32).max else np.int64
        ib = np.dtype(it).itemsize
        v: np.ndarray | tuple[np.ndarray, np.ndarray]
        if nz.size * (ib + vb) < self.dim * vb:
            v = (nz.astype(it), (g[1] if sparse_in else g[nz]).astype(dt))
            size = nz.size * (ib + vb)
        else:
            if sparse_in:
                v = np.zeros(self.dim, dtype=dt)
                v[g[0]] = g[1]
            else:
                v = g.astype(dt)
            size = self.dim * vb
        if use32:
            self.float32 += 1
            if self.nbytes + size > self.limit and not self._warned:
                self._warned = True
                log.warning(
                    "perf: the working set of cutting planes reaches dense_limit_mb=%g "
                    "(%d planes, %.1f MB); planes with alpha = 0 are dropped and the oldest "
                    "others aggregated into one to stay within it",
                    self.limit / 2**20,
                    len(self.vecs) + 1,
                    (self.nbytes + size) / 2**20,
                )
        return v, size

    def add(self, g: Any, r: float, bound: bool = True, point: np.ndarray | None = None) -> None:
        """Add plane (g, r); g is a dense float64 vector of length ``dim`` or a sparse
        ``(sorted columns, float64 values)`` pair (then no dense vector is formed).
        ``bound``: then keep the set within ``limit`` (:meth:`_bound`). ``point``: where
        the plane was computed (kept as float32 within ``points_limit``)."""
        kept = sum(p.nbytes for p in self.points if p is not None)
        if point is not None and kept + 4 * self.dim <= self.points_limit:
            self.points.append(np.asarray(point, dtype=np.float32).copy())
        else:
            self.points.append(None)
        v, size = self._store(g)
        if isinstance(g, tuple) and isinstance(v, tuple):
            row = np.array([self._dot_sparse(u, v) for u in self.vecs] + [_sq(v[1])])
        else:
            # (a sparse g stored dense: v; a float32 plane: its float64 copy)
            gq = v if isinstance(v, np.ndarray) and v.dtype == np.float64 else self._as_dense(v)
            row = np.array([self._dot(u, gq) for u in self.vecs] + [float(vdot(gq, gq))])
            del gq
        check_plane(row[-1])
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
        if bound:
            self._bound()

    @staticmethod
    def _dot_sparse(u, v) -> float:
        """u·v for a stored plane u and a sparse stored plane v."""
        if isinstance(u, np.ndarray):
            return float(sparse_vdot(v[0], v[1], u))
        return float(sparse_sparse_dot(u[0], u[1], v[0], v[1]))

    def _bound(self) -> None:
        """Keep the planes within ``limit`` bytes: drop those with α = 0 (not the newest),
        then aggregate the oldest half of the others (at least two, never the newest) into
        their α-weighted mean, again until the set fits: the newer planes, which carry
        the recent progress, stay as they are."""
        if self.nbytes <= self.limit or len(self.vecs) <= 2:
            return
        last = len(self.vecs) - 1
        keep = [j for j in range(last) if self.alpha[j] > 0.0] + [last]
        if len(keep) < len(self.vecs):
            self._keep(keep)
        newest = self.vecs[-1]
        while self.nbytes > self.limit and len(self.vecs) > 2:
            cand = [j for j, v in enumerate(self.vecs) if v is not newest]
            self._aggregate(cand[: max(2, len(cand) // 2)])

    def _aggregate(self, old: list[int]) -> None:
        """Replace planes ``old`` by their α-weighted mean, appended with α = their α sum
        (w = Σ αⱼgⱼ and the dual value are unchanged; the dual stays a lower bound)."""
        A = float(self.alpha[old].sum())
        lam = self.alpha[old] / A
        g = np.zeros(self.dim)
        for i, j in enumerate(old):
            v = self.vecs[j]
            if isinstance(v, np.ndarray):
                axpy(g, v, float(lam[i]))
            else:
                scatter_add(g, v[0], v[1], lam[i])
        r = float(np.dot(lam, np.asarray(self.r)[old]))
        gone = set(old)
        self._keep([j for j in range(len(self.vecs)) if j not in gone])
        nz = np.flatnonzero(g)
        self.add((nz, g[nz]) if nz.size * 3 < self.dim else g, r, bound=False)
        del g
        self.alpha[-1] = A
        log.debug("perf: %d planes aggregated into one (alpha sum %.6g)", len(old), A)

    def _keep(self, keep: list[int]) -> None:
        kept = set(keep)
        for j in range(len(self.vecs)):
            if j not in kept:
                self.nbytes -= self._size(self.vecs[j])
        self.vecs = [self.vecs[j] for j in keep]
        self.points = [self.points[j] for j in keep]
        self.r = [self.r[j] for j in keep]
        self.inactive = [self.inactive[j] for j in keep]
        self.alpha = self.alpha[keep]
        self.Q = self.Q[np.ix_(keep, keep)]

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
                axpy(w, v, float(a))
            else:
                scatter_add(w, v[0], v[1], float(a))
        return w

    def solve(self, C_perf: float, atol: float) -> tuple[np.ndarray, float, float]:
        """Solve OP3 over W (warm-started); returns (w, dual value, QP gap).

        Counts in :attr:`failed_in_a_row` the consecutive QPs that used up their step budget
        without reaching their tolerance (see :func:`check_qp`)."""
        try:
            res = solve_simplex_qp(
                self.Q, np.asarray(self.r), C_perf, x0=self.alpha, atol=atol,
                max_steps=QP_MAX_STEPS, max_smo_iter=QP_MAX_SMO_STEPS,
            )  # fmt: skip
        except ValueError as e:
            raise SolverError(f"perf: {e}; scale the features or use a smaller --C") from None
        exhausted = res.exhausted
        self.failed_in_a_row = self.failed_in_a_row + 1 if exhausted else 0
        self.alpha = res.x
        w = self.combine(res.x)
        dual = float(vdot(res.x, np.asarray(self.r)) - 0.5 * vdot(w, w))
        for j, a in enumerate(res.x):
            self.inactive[j] = 0 if a > 0.0 else self.inactive[j] + 1
        return w, dual, res.gap

    def active_points(self) -> list[np.ndarray]:
        """The points of the planes with αⱼ > 0 (those kept), largest α first."""
        order = np.argsort(-np.asarray(self.alpha), kind="stable")
        return [p for j in order if self.alpha[j] > 0.0 and (p := self.points[j]) is not None]

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
            self._keep(keep)
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
        self.points = [None] * n  # not checkpointed: a resumed run keeps fewer


#: bytes of plane points a working set keeps at most (float32; for warm starts)
POINTS_MAX_BYTES = 64 << 20


def points_budget(limit: float, dim: int) -> float:
    """Bytes of plane points to keep: a quarter of the planes' budget, at most
    :data:`POINTS_MAX_BYTES`, 0 when fewer than four points fit (no warm points then)."""
    b = min(limit / 4, float(POINTS_MAX_BYTES))
    return b if b >= 16.0 * dim else 0.0


#: largest squared norm of a cutting plane (an average of y·x over rows, so at most the
#: largest squared row norm R²) the method can work with: at R² beyond it, ‖w‖² ~ 1/R² sits
#: below float64's resolution of the loss terms (~1) and the QP's gradients lose all
#: precision (feature values near 3.4e38 ran for ever with the gap stuck at 0.97)
PLANE_NORM2_MAX = 1e30


def check_plane(norm2: float) -> None:
    """Refuse a cutting plane whose squared norm is non-finite or beyond
    ``PLANE_NORM2_MAX``: the feature values are too large for the method (one line)."""
    if math.isfinite(norm2) and norm2 <= PLANE_NORM2_MAX:
        return
    raise SolverError(
        f"perf: the feature values are too large: a cutting plane (an average of label x "
        f"row) has squared norm {norm2:.3g} (limit {PLANE_NORM2_MAX:g}), beyond what float64 "
        "arithmetic resolves; scale the features (e.g. to [-1, 1]) and train again; no "
        "model written"
    )


def _sq(v: np.ndarray) -> float:
    return float(vdot(v, v))


def _qp_atol(eps: float) -> float:
    return 1e-4 * eps


#: step budget of one working-set QP: active-set changes, then SMO steps of the fallback
QP_MAX_STEPS = 5000
QP_MAX_SMO_STEPS = 2_000_000
#: this many consecutive working-set QPs that use up their step budget stop the run (stalled)
QP_STALL_FAILS = 5


def stall_advice(loss: str) -> str:
    """What to do when the cutting-plane QP stalls, for ``loss``."""
    if loss == "error":
        return "use --solver active-set or smo (no such dependence on C), or a smaller --C"
    return "use a smaller --C or a larger --eps"


def check_qp(C: float, Cp: float, ws: WorkingSet, loss: str = "error") -> bool:
    """Whether the run must stop because the working-set QP stalls (extreme C); deterministic.

    At extreme C (C_perf = C·n of 1e12 and more) α grows towards C_perf, the Gram matrix of
    the planes is singular, the gradient Qα − r loses its precision to round-off and a QP
    uses up its step budget (``QP_MAX_STEPS`` active-set changes, then ``QP_MAX_SMO_STEPS``
    SMO steps) without reaching its tolerance, while the cutting-plane method itself would
    need O(C_perf·R²/ε²) iterations (Joachims 2006, Theorem 5). The QP never returns a point
    worse than its warm start (:func:`~ooc_svm.solvers.perf.qp.solve_simplex_qp`), so the lower
    bound stays valid; ``QP_STALL_FAILS`` such QPs in a row stop the run, which then returns
    its best point flagged not converged (``stop_reason`` ``"stalled"``). The rule counts QP
    steps, not seconds: the same run stops at the same iteration on a busy machine and an
    idle one, and the work of a stalled run is bounded by the step budgets.
    """
    if ws.failed_in_a_row < QP_STALL_FAILS:
        return False
    log.warning(
        "perf: the cutting-plane QP stalls at --C %g (C*n = %.3g: %d working-set QPs in a row "
        "used up their %d steps); stopping with the best point so far, not converged; %s",
        C, Cp, ws.failed_in_a_row, QP_MAX_STEPS + QP_MAX_SMO_STEPS, stall_advice(loss),
    )  # fmt: skip
    return True
