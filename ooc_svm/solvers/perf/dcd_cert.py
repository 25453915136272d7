"""The certificate of ``--variant dcd``: the best primal point along the iterates, and when
to measure it.

Dual coordinate descent on the hinge loss moves w = Σαᵢyᵢx̃ᵢ towards the optimum while its
primal objective P(w) swings (by tens of percent between epochs on click-log shaped data).
Every certificate pass therefore measures P not only at the epoch's w but on the segment
from the best point so far, w_b, to it — one pass over the rows gives the margins at w, and
the margins at w_b are kept per row (8 bytes a row), so P(w_b + t(w − w_b)) costs no data
for any t (a line search as OCAS's, Franc & Sonnenburg 2008). The best point of the segment
becomes the new w_b. The run certifies P(w_b) − D(α) ≤ ε·C·n with D(α) ≤ P* (weak duality)
at the α of the epoch measured, and returns w_b: P(w_b) is never above P of any measured
iterate, and the model is the best point found, not the last iterate.

A certificate pass reads every row; a late epoch sweeps only the rows shrinking left active.
:class:`Schedule` measures after the first epoch, then after the epoch in which the rows
swept since the last certificate reach both the number of rows and a tenth of all the rows
swept so far (so certificates cost at most about as much as the sweeps, a tenth of them in
a long run, and a run stops at most about a tenth of its work after the certified point).
The schedule depends on the active counts only, not on time or threads: the model is the
same bits for one thread or two (with two, the pass runs beside the next epochs' sweeps on a
copy of w).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._numba.dcd import line_losses, move_margins, segment_losses

if TYPE_CHECKING:
    from .dcd import _Run

log = logging.getLogger(__name__)

#: grid of the line search over t ∈ [0, 1] (then refined between the best point's neighbours)
GRID = np.linspace(0.0, 1.0, 33)
REFINE_POINTS = 17

#: a certificate after the epoch in which the rows swept since the last one reach this many
#: times the number of rows, and this share of all the rows swept so far (so a run that
#: needs many epochs spends at most about a tenth of its sweeps' work on certificates, and
#: stops at most about a tenth of its work late)
CERT_WORK, CERT_SHARE = 1.0, 0.1


class Schedule:
    """When to measure the certificate: after epoch 1, then each time the rows swept since
    the last measurement reach both ``CERT_WORK`` × n and ``CERT_SHARE`` × the rows swept
    in all (a function of the active counts only)."""

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self.work = 0.0
        self.total = 0.0
        self.first = True

    def after(self, swept: int) -> bool:
        """Record an epoch that swept ``swept`` rows; True when it is to be measured."""
        self.work += float(swept)
        self.total += float(swept)
        if self.first or self.work >= max(CERT_WORK * self.n, CERT_SHARE * self.total):
            self.first = False
            self.work = 0.0
            return True
        return False


@dataclass
class Best:
    """The best primal point so far: w_b (dense, the run's column space), ‖w_b‖², P(w_b)
    and its loss; the margins yᵢ w_b·x̃ᵢ live in the blocks (``mb``)."""

    w: np.ndarray
    P: float
    loss: float


def certify(run: _Run, best: Best, w: np.ndarray, threads: int) -> Best:
    """Move ``best`` to the best point of the segment from it to ``w`` (one pass over the
    rows; blocks summed in shard order, on up to ``threads`` threads when held)."""

    def one(item):
        blk, (ip, ix, dt) = item
        out = np.zeros(GRID.shape[0])
        line_losses(ip, ix, dt, blk.sign, w, run.bias, blk.mb, blk.mc, GRID, run.costs,
                    run.squared, out)  # fmt: skip
        return out

    order = list(range(len(run.blocks)))
    if run.held and threads > 1 and len(order) > 1:
        with ThreadPoolExecutor(threads, thread_name_prefix="ooc-svm-dcd") as pool:
            parts = list(pool.map(one, run.visit(order)))
    else:
        parts = [one(item) for item in run.visit(order)]
    losses = np.zeros(GRID.shape[0])
    for p in parts:
        losses += p
    delta = w - best.w
    bb, bd, dd = float(best.w @ best.w), float(best.w @ delta), float(delta @ delta)

    def reg(t: np.ndarray) -> np.ndarray:
        return 0.5 * (bb + 2.0 * t * bd + t * t * dd)

    vals = reg(GRID) + losses
    k = int(np.argmin(vals))
    ts = np.linspace(GRID[max(k - 1, 0)], GRID[min(k + 1, GRID.shape[0] - 1)], REFINE_POINTS)
    fine = np.zeros(REFINE_POINTS)
    for b in run.blocks:
        segment_losses(b.sign, b.mb, b.mc, ts, run.costs, run.squared, fine)
    fvals = reg(ts) + fine
    j = int(np.argmin(fvals))
    if fvals[j] < vals[k]:
        t, P, loss = float(ts[j]), float(fvals[j]), float(fine[j])
    else:
        t, P, loss = float(GRID[k]), float(vals[k]), float(losses[k])
    log.debug("perf dcd: line search t %.4g, P(w) %.10g, P(best) %.10g -> %.10g", t,
              float(vals[-1]), float(vals[0]), P)  # fmt: skip
    if t == 0.0:
        return Best(best.w, P, loss)
    for b in run.blocks:
        move_margins(b.mb, b.mc, t)
    wb = best.w + t * delta
    return Best(wb, P, loss)


@dataclass
class _Cert:
    """A measured epoch: its dual terms (D(α) = Σα − ½‖w‖² − ½ΣDα²) and the best point after
    its certificate pass (``best``: a :class:`Best`, or its Future while the pass runs)."""

    epoch: int
    asum: float
    asq: float
    wn: float
    active: int
    spread: float
    seconds: float
    best: Any
    #: α of the blocks at this epoch when later epochs sweep while its pass runs (None: the
    #: blocks' α is this epoch's): what the model keeps for a warm start, the same bits
    #: however many epochs ran beside the pass
    alphas: list | None = None

    def finish(self, Cn: float) -> tuple[Best, float, float]:
        """(best point, D, gap / min(C n, P(w_b))) at this epoch: the stop test's value."""
        if hasattr(self.best, "result"):
            self.best = self.best.result()
        D = self.asum - 0.5 * self.wn - 0.5 * self.asq
        return self.best, D, (self.best.P - D) / gap_scale(Cn, self.best.P)


def gap_scale(Cn: float, P: float) -> float:
    """What dcd's duality gap is measured against: C·n (SVMperf's ε, the other variants'
    rule) and P(w_b) itself, whichever is smaller. On nearly separable rows P* is a few
    percent of C·n and ε·C·n let P stop 3–4 % above LIBLINEAR's (kdd2010- and url-shaped
    1M rows: P 1.028× and 1.039×, relative gaps 2.8e-2 and 3.9e-2 where LIBLINEAR's were
    1.4e-3 and 1.3e-3). Measured against the smaller, the certificate P(w_b) − D ≤ ε·C·n
    holds and so does P(w_b) ≤ P*/(1 − ε): within about ε of the optimum, relatively."""
    return min(Cn, P) if P > 0.0 else Cn
