"""perf ``--variant selective``: the lower model P̃ on the rows kept in memory — its
margins, planes and cuts on all threads, in groups of rows (:class:`_Inner`) — and its exact
line search along a segment (:func:`segment`, :func:`segment_min_threaded`). The driver and
the selection are :mod:`.selective` and :mod:`.selection`."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.csr import u32
from ._numba.cuts import accumulate_rows, vdot
from ._numba.selective import (
    bins_eval,
    flip_cut,
    narrow,
    segment_bin_sums,
    segment_bisect,
    signed_margins,
    step_flip,
    violated_at,
)
from .working_set import WorkingSet

if TYPE_CHECKING:
    pass


#: the rows in memory form groups of about this many non-zeros: the inner margin sweeps and
#: cut updates run group by group on every thread
PART_NNZ = 1 << 20
#: a group of the cut updates holds at least this many times d + 1 non-zeros (and
#: ``PART_NNZ``): its plane's zeroing and summing stay small beside its rows
PLANE_COLS = 64
#: per-group planes of the cut updates while they take at most this many bytes in all
#: (very wide stores: one plane, one thread)
PLANE_PARTS_BYTES = 64 << 20
#: rows per chunk of the threaded line search and of the inner loop's update
LINE_CHUNK = 1 << 16
#: bisection steps of the inner line search (its precision: 2^-LINE_STEPS of the doubling
#: bracket [0, 1], [1, 2], [2, 4], ... that holds the minimiser)
LINE_STEPS = 32
#: the line search's first grid: ``LINE_BINS`` equal steps on [0, 1], then doublings to 2^60
LINE_GRID = np.concatenate([np.linspace(0.0, 1.0, 1025), 2.0 ** np.arange(1, 61, dtype=np.float64)])
#: equal bins of [0, 1] in the line search's first round, of the bracket in the later ones
LINE_BINS = 1024
#: at most this many rounds of binning (sweeps of the rows still in the bracket)
LINE_ROUNDS = 3
#: rows left in the bracket below which the last halvings run on one thread
LINE_FEW = 4096
#: columns per task when the groups' planes are summed on the pool
SUM_BLOCK = 1 << 13


# ------------------------------------------------------------------------------------------
# the lower model P~ on the rows in memory
# ------------------------------------------------------------------------------------------


class _Inner:
    """P̃ of the module docstring: the selected rows (CSR) and the fixed part of the others.

    ``G`` = Σ_{i∉S} cᵢ⁰yᵢx̃ᵢ and ``R`` = Σ_{i∉S} cᵢ⁰ (unnormalised), so that for w
    P̃(w) = ½‖w‖² + C(max(0, R − w·G) + Σ_{i∈S} max(0, 1 − mᵢ(w))) (``agg``: the aggregated
    row; when every row is in memory there is none and R = 0, G = 0). The S-part of the last cut,
    ``gS`` = Σ_{i∈S} cᵢyᵢx̃ᵢ, is updated by the rows whose cᵢ flips only (as SVMperf's
    incremental cut): late inner cuts touch few rows.
    """

    def __init__(self, sel: list, kg, q: int, G_p, cnt_p: float, d: int, n_rows: int, bias, pool):
        # the selection stays in its per-shard chunks (no copy into one CSR)
        self.chunks = [
            (c["indptr"], u32(np.ascontiguousarray(c["indices"])), c["data"])
            for c in sel
            if c["ys"].shape[0]
        ]
        sel = [c for c in sel if c["ys"].shape[0]]
        cat = lambda k: np.concatenate([c[k] for c in sel]) if sel else np.zeros(0)  # noqa: E731
        self.ys = cat("ys")
        self.d = d
        self.bias = bias
        self.pool = pool
        n = self.ys.shape[0]
        self.off = np.zeros(len(self.chunks) + 1, dtype=np.int64)
        np.cumsum([ip.shape[0] - 1 for ip, _, _ in self.chunks], out=self.off[1:])
        #: every row of the store is in memory (then P~ = P exactly)
        self.whole = n == n_rows
        # groups of consecutive chunks of about PART_NNZ non-zeros: the margin sweeps and the
        # cut updates run group by group on every thread of the pool (a split that depends
        # on the selection only, never on the number of threads)
        self.parts = []
        a = acc = 0
        for j, (ip, _, _) in enumerate(self.chunks):
            acc += int(ip[-1])
            if acc >= PART_NNZ:
                self.parts.append((a, j + 1))
                a, acc = j + 1, 0
        if a < len(self.chunks) or not self.parts:
            self.parts.append((a, len(self.chunks)))
        # the cut updates' groups: of at least PLANE_COLS dense planes' worth of non-zeros
        # each (a group's plane is zeroed and summed whatever its flips), so fewer than the
        # sweeps' groups on narrow stores; per-group planes (summed in group order) while
        # they take at most PLANE_PARTS_BYTES
        self.plane_groups = []
        a = acc = 0
        for j, (ip, _, _) in enumerate(self.chunks):
            acc += int(ip[-1])
            if acc >= max(PART_NNZ, PLANE_COLS * (d + 1)):
                self.plane_groups.append((a, j + 1))
                a, acc = j + 1, 0
        if a < len(self.chunks) or not self.plane_groups:
            self.plane_groups.append((a, len(self.chunks)))
        self.plane_parts = len(self.plane_groups) * 8 * (d + 1) <= PLANE_PARTS_BYTES
        # the S rows' coefficients in the pass's plane at kg[q], by the pass's own rule, so
        # that G, R hold exactly the other rows' part of that plane
        viol = np.empty(n)
        mb, mc, rng = cat("mb"), cat("mc"), line_chunks(n)
        list(pool.map(violated_at, [mb[a:b] for a, b in rng], [mc[a:b] for a, b in rng],
                      repeat(kg), repeat(q), [viol[a:b] for a, b in rng]))  # fmt: skip
        del mb, mc
        self.gS = self.plane(viol * self.ys)
        self.G = G_p - self.gS
        self.R = float(cnt_p) - float(np.count_nonzero(viol))
        #: the rows outside S that the pass's plane counts as violated enter P~ as one
        #: aggregated row, max(0, R − w·G) (≤ their hinge sum), not as the linear R − w·G,
        #: which falls without bound as w moves to satisfy them: its margin 1 − R + w·G is
        #: the last entry of :meth:`margins` and its coefficient c the last of ``self.c``
        self.agg = 1 if (not self.whole and self.R > 0.0) else 0
        self.c = np.zeros(n + self.agg, dtype=np.bool_)
        self.c[:n] = viol > 0.0
        self.c[n:] = True
        self.ysx = np.concatenate([self.ys, np.ones(self.agg)])

    def _plane(self, coef: np.ndarray, a: int, b: int) -> tuple[np.ndarray, float]:
        g = np.zeros(self.d + 1)
        tot = 0.0
        for j in range(a, b):
            ip, idx, data = self.chunks[j]
            tot += accumulate_rows(ip, idx, data, coef[self.off[j] : self.off[j + 1]], g)
        return g, tot

    def plane(self, coef: np.ndarray) -> np.ndarray:
        """Σ_{i∈S} coefᵢ x̃ᵢ as a dense vector of length d + 1 (group by group on the pool,
        the groups' vectors summed in group order column block by column block on the pool,
        when the per-group vectors fit ``PLANE_PARTS_BYTES``)."""
        if not self.plane_parts or len(self.plane_groups) == 1:
            g, tot = self._plane(coef, 0, len(self.chunks))
        else:
            parts = list(self.pool.map(lambda ab: self._plane(coef, *ab), self.plane_groups))
            g = sum_in_order(self.pool, [p[0] for p in parts])
            tot = 0.0
            for _, tj in parts:
                tot += tj
        g[self.d] += tot * self.bias
        return g

    def _margins(self, w: np.ndarray, out: np.ndarray, a: int, b: int) -> None:
        tb = float(w[self.d]) * self.bias
        for j in range(a, b):
            ip, idx, data = self.chunks[j]
            o, e = self.off[j], self.off[j + 1]
            signed_margins(ip, idx, data, self.ys[o:e], w[: self.d], tb, out[o:e])

    def margins(self, w: np.ndarray) -> np.ndarray:
        """yᵢ·wᵀx̃ᵢ of the rows in S, then (when ``agg``) the aggregated row's 1 − R + w·G."""
        n = self.ys.shape[0]
        out = np.empty(n + self.agg)
        if len(self.parts) == 1:
            self._margins(w, out, *self.parts[0])
        else:
            list(self.pool.map(lambda ab: self._margins(w, out, *ab), self.parts))
        if self.agg:
            out[n] = 1.0 - self.R + float(vdot(w, self.G))
        return out

    def linear(self, w: np.ndarray) -> float:
        """The linear part of P~ at w: R − w·G, or 0 when the aggregated row holds it."""
        return 0.0 if self.agg else self.R - float(vdot(w, self.G))

    def value(self, w: np.ndarray, m: np.ndarray, C: float) -> float:
        hinge = float(np.maximum(0.0, 1.0 - m).sum())
        return 0.5 * float(vdot(w, w)) + C * (self.linear(w) + hinge)

    def flip(self, mb: np.ndarray, dm: np.ndarray, k: float, t: float, move: bool) -> tuple:
        """After a line search, on the pool (chunks of ``LINE_CHUNK`` rows): the cut point's
        margins mb + t·dm give the next cut's coefficients (:meth:`cut`) and, when ``move``,
        the best point's margins mb += k·dm in place. Returns (coef, flips, violated)."""
        coef = np.empty(mb.shape[0])
        c, ys = self.c, self.ysx

        def run(ab: tuple[int, int]) -> tuple[int, int]:
            a, b = ab
            return step_flip(mb[a:b], dm[a:b], k, t, move, c[a:b], ys[a:b], coef[a:b])

        flips = viol = 0
        for f, v in self.pool.map(run, line_chunks(mb.shape[0])):
            flips += int(f)
            viol += int(v)
        return coef, flips, viol

    def cut(self, m: np.ndarray | None, n: int, flipped: tuple | None = None):
        """The plane whose S-coefficients are [mᵢ < 1] (and the other rows' c⁰ when the
        aggregated row is violated, else 0): (g, r) normalised by n. ``flipped``: what
        :meth:`flip` returned for the margins m (then ``m`` is not read)."""
        if flipped is None:
            coef = np.empty(m.shape[0])  # type: ignore[union-attr]
            flips, viol = flip_cut(m, self.c, self.ysx, coef)  # one sweep; updates self.c
        else:
            coef, flips, viol = flipped
        if flips:
            self.gS += self.plane(coef)  # the rows of S only (coef's last entry: ignored)
        if not self.agg:
            return (self.G + self.gS) / n, (self.R + float(viol)) / n
        if self.c[-1]:
            return (self.G + self.gS) / n, (self.R + float(viol - 1)) / n
        return self.gS / n, float(viol) / n


def line_chunks(n: int) -> list[tuple[int, int]]:
    """Row ranges of ``LINE_CHUNK`` rows: the tasks of the line search and of the inner
    loop's update (a split that depends on n only, never on the number of threads)."""
    return [(a, min(n, a + LINE_CHUNK)) for a in range(0, max(n, 1), LINE_CHUNK)]


def sum_in_order(pool: ThreadPoolExecutor, vecs: list[np.ndarray]) -> np.ndarray:
    """Σ of equal-length vectors, added in list order (same bits as a plain loop), column
    block by column block on the pool; the first vector is overwritten and returned."""
    out = vecs[0]
    n = out.shape[0]

    def add(a: int) -> None:
        b = min(n, a + SUM_BLOCK)
        for v in vecs[1:]:
            out[a:b] += v[a:b]

    list(pool.map(add, range(0, n, SUM_BLOCK)))
    return out


def segment(
    inner: _Inner,
    ws: WorkingSet,
    gwb: Any,
    gwc: Any,
    wb: Any,
    wc: Any,
    mb: np.ndarray,
    mc: np.ndarray,
    C: float,
    Cp: float,
) -> tuple[Any, Any, Any, Any]:
    """Minimise F = max(P̃, M) on wb + k(wc − wb) (:func:`segment_min`), M the working set's
    model ½‖w‖² + C_perf·max(0, maxⱼ rⱼ − w·gⱼ) (``gwb``, ``gwc``: the gⱼ·wb, gⱼ·wc);
    returns (k, F(k), wc − wb, mc − mb)."""
    dw = wc - wb
    dm = np.empty_like(mb)
    L1 = 0.0 if inner.agg else float(vdot(dw, inner.G))
    k, f = segment_min_threaded(
        inner.pool,
        float(vdot(wb, wb)), float(vdot(wb, dw)), float(vdot(dw, dw)),
        inner.linear(wb), L1, C, Cp, mb, mc, dm,
        np.asarray(ws.r) - gwb, gwc - gwb, LINE_STEPS,
    )  # fmt: skip
    return k, f, dw, dm


def segment_min_threaded(
    pool: ThreadPoolExecutor,
    a0: float,
    a1: float,
    a2: float,
    L0: float,
    L1: float,
    C: float,
    Cp: float,
    mb: np.ndarray,
    mc: np.ndarray,
    dm: np.ndarray,
    u: Any,
    v: Any,
    steps: int,
) -> tuple[float, float]:
    """The minimiser k ≥ 0 of F of :func:`~ooc_svm.solvers.perf._numba.selective.segment_min`
    (``dm`` = ``mc`` − ``mb``, written here), with its sweeps of every row on the threads of
    ``pool`` (chunks of ``LINE_CHUNK`` rows, summed in chunk order: same bits for any number
    of threads).

    Instead of one sweep per bisection step: one sweep bins every row's hinge by where on
    the grid ``LINE_GRID`` (``LINE_BINS`` equal steps on [0, 1], doublings to 2⁶⁰) it changes sign
    (:func:`~ooc_svm.solvers.perf._numba.selective.segment_bins`), which gives F and F'(k⁺) at
    every grid point (:func:`~ooc_svm.solvers.perf._numba.selective.bins_eval`); the bracket is the
    first grid interval where F' turns non-negative; a second sweep keeps the rows whose
    hinge changes sign in it (the others become a linear term). While they are more than
    ``LINE_FEW``, the same is done on them with ``LINE_BINS`` equal bins of the bracket
    (at most ``LINE_ROUNDS`` rounds); the last halvings, to the precision of ``steps``
    halvings of the doubling bracket, run on the few rows left
    (:func:`~ooc_svm.solvers.perf._numba.selective.segment_bisect`)."""
    n = mb.shape[0]
    bounds = line_chunks(n)
    cmb = [mb[a:b] for a, b in bounds]
    cdm = [dm[a:b] for a, b in bounds]
    cmc = [mc[a:b] for a, b in bounds]
    grid = LINE_GRID
    h0 = h1 = 0.0
    lo = hi = fl = fh = 0.0
    for rnd in range(LINE_ROUNDS):
        G = grid.shape[0]
        ends = cmc if rnd == 0 else [np.zeros(0)] * len(cmb)  # round 0 also writes dm
        parts = pool.map(segment_bin_sums, cmb, ends, cdm, repeat(grid), repeat(LINE_BINS))
        bins = np.zeros((5, G + 1))
        for b in parts:
            bins += b
        F, S = np.empty(G), np.empty(G)
        bins_eval(grid, bins, h0, h1, a0, a1, a2, L0, L1, C, Cp, u, v, F, S)
        up = np.flatnonzero(S >= 0.0)
        j = int(up[0]) if up.shape[0] else G - 1
        if j == 0:
            return float(grid[0]), float(F[0])
        lo, hi, fl, fh = float(grid[j - 1]), float(grid[j]), float(F[j - 1]), float(F[j])
        few = int(bins[4, j]) <= LINE_FEW
        nar = list(pool.map(narrow, cmb, cdm, repeat(lo), repeat(hi)))
        cmb = [x[0] for x in nar]
        cdm = [x[1] for x in nar]
        for x in nar:
            h0 += x[2]
            h1 += x[3]
        if few or hi - lo <= 1e-12 * max(1.0, hi):
            break
        grid = np.linspace(lo, hi, LINE_BINS + 1)
    # halvings left: the bracket down to 2^-steps of the doubling bracket holding it
    w0 = 1.0 if hi <= 1.0 else 0.5 * hi
    left = min(steps, max(0, steps + math.ceil(math.log2(max(hi - lo, 1e-300) / w0))))
    rows_b = np.concatenate(cmb) if cmb else np.zeros(0)
    rows_d = np.concatenate(cdm) if cdm else np.zeros(0)
    return segment_bisect(lo, hi, fl, fh, a0, a1, a2, L0, L1, C, Cp, rows_b, rows_d, u, v,
                          h0, h1, left)  # fmt: skip
