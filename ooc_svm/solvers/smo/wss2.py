"""smo ``--selection wss2``: LIBSVM's solver (Fan, Chen & Lin 2005) on the rows in memory,
in ~0.05 s slices, with checkpoints between chunks and every ``--checkpoint-seconds``; when the
rows exceed the working budget, :mod:`.decomposition`."""

from __future__ import annotations

import logging
import time

import numpy as np

from .. import SolverError
from ..dual_common import WorkingRows, apply_alpha_updates, fetch_rows
from .common import _budget_rows, _cache_for, _kernel_tuple, _x_tuple_compact
from .kernels import (
    IST_DONE,
    IST_IT,
    IST_STATUS,
    _diag,
    _rho_and_gap,
    _wss2_fresh_state,
    _wss2_init_grad,
    _wss2_steps,
)

log = logging.getLogger(__name__)


#: target seconds of one numba call of the wss2 loop (Ctrl-C and time checkpoints between)
SLICE_SECONDS = 0.05


class _Slicer:
    """Step budgets for numba calls so each takes about ``SLICE_SECONDS``: the process returns
    to Python (where Ctrl-C is raised and checkpoints are timed) many times a second. The
    budget follows the measured time per step (at most doubling per call, as steps get
    dearer when the kernel cache misses)."""

    def __init__(self, budget: int = 16):
        self.budget = budget
        self.t = time.perf_counter()

    def adapt(self) -> None:
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        want = self.budget * SLICE_SECONDS / max(dt, 1e-6)
        self.budget = int(max(1, min(2 * self.budget, want, 1 << 40)))


def _init_grad_sliced(X, kt, sc, work, alpha, G, G_bar, p_lin, C) -> None:
    m = alpha.shape[0]
    sl = _Slicer(64)
    lo = 0
    while True:
        hi = min(m, lo + sl.budget)
        _wss2_init_grad(X, kt, sc.arrays(), work, alpha, G, G_bar, p_lin, C, lo, hi)
        sl.adapt()
        lo = hi
        if lo >= m:
            break


class _Wss2Run:
    """The state of one LIBSVM solve on ``W``: α (in W), G, Ḡ, the loop state of
    :func:`_wss2_steps` and the chunk / checkpoint counters."""

    def __init__(self, W: WorkingRows, p_lin, kp, C, tol, n_features):
        self.W, self.p_lin, self.tol = W, p_lin, tol
        # each row's upper bound (one C, or C·w_{y_i} with class weights)
        self.C = np.full(W.n, float(C)) if np.ndim(C) == 0 else np.asarray(C, dtype=np.float64)
        # the rows' own (compacted) width: no workspace grows with the store's n_features
        self.X, width = _x_tuple_compact(W)
        self.kt = _kernel_tuple(kp)
        self.work = np.zeros(width)
        self.G = np.empty(W.n)
        self.G_bar = np.empty(W.n)
        self.QD = _diag(self.X, self.kt)
        self.total, self.chunk, self.seq, self.init = 0, 0, 0, True
        self.active, self.ist, self.fst = _wss2_fresh_state(W.n)
        self.last_save = time.perf_counter()

    def resume(self, checkpoint) -> None:
        """Continue from the latest checkpoint, if there is one."""
        data = checkpoint.load()
        if data is None:
            return
        arr = data.arrays
        if "alpha" not in arr:
            raise SolverError(
                f"{checkpoint.directory}: checkpoint of the out-of-core decomposition; the "
                "in-memory solver cannot resume from it (same --working-mb / --working-rows?)"
            )
        if arr["alpha"].shape != self.W.alpha.shape:
            raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
        self.W.alpha[:], self.G[:], self.G_bar[:] = arr["alpha"], arr["G"], arr["G_bar"]
        self.total, self.seq, self.init = int(data.scalars["iterations"]), data.iteration, False
        self.chunk = int(data.scalars.get("chunk", data.iteration))
        if "active" in arr:  # saved within a chunk
            self.active, self.ist, self.fst = (arr[k].copy() for k in ("active", "ist", "fst"))
        log.info("smo: resuming after %d SMO steps", self.total + int(self.ist[IST_IT]))

    def save(self, checkpoint) -> None:
        self.seq += 1
        checkpoint.save(
            self.seq,
            scalars={"iterations": self.total, "chunk": self.chunk},
            arrays={
                "alpha": self.W.alpha,
                "G": self.G,
                "G_bar": self.G_bar,
                "active": self.active,
                "ist": self.ist,
                "fst": self.fst,
            },
        )
        self.last_save = time.perf_counter()

    def run_chunk(self, sc, limit, shrinking, sl, checkpoint, checkpoint_seconds) -> None:
        """The solve (or its rest) up to ``limit`` steps, in slices of ``sl.budget`` steps."""
        if self.init:
            _init_grad_sliced(
                self.X, self.kt, sc, self.work, self.W.alpha, self.G, self.G_bar, self.p_lin, self.C
            )
            self.init = False
        head = (self.X, self.kt, sc.arrays(), self.work, self.W.alpha, self.G, self.G_bar)
        args = (*head, self.p_lin, self.QD, self.C, self.tol, limit, bool(shrinking))
        while not self.ist[IST_DONE]:
            _wss2_steps(*args, self.active, self.ist, self.fst, sl.budget)
            sl.adapt()
            if (
                checkpoint is not None
                and not self.ist[IST_DONE]
                and time.perf_counter() - self.last_save >= checkpoint_seconds
            ):
                self.save(checkpoint)


def _run_wss2(
    W: WorkingRows,
    p_lin,
    kp,
    C,
    tol,
    cache_mb,
    max_iter,
    shrinking,
    n_features,
    every: int = 0,
    checkpoint=None,
    report=None,
    checkpoint_seconds: float = 60.0,
):
    """LIBSVM's solver on the rows of ``W`` (α updated in place).

    With ``every`` > 0 the solver runs in chunks of at most ``every`` SMO steps (the gradient
    is reconstructed and shrinking restarts between chunks — still LIBSVM's algorithm, and
    the same chunks with or without checkpoints); after each chunk α, G and Ḡ go to
    ``checkpoint`` and a progress record to ``report``. Within a chunk the numba loop runs in
    slices of ~0.05 s (Ctrl-C is seen between them) and its whole state (α, G, Ḡ, the
    shrinking order and counters) is checkpointed when ``checkpoint_seconds`` have passed
    since the last save; pausing does not change a step, so a resumed run ends with the
    model of an uninterrupted one.
    """
    r = _Wss2Run(W, p_lin, kp, C, tol, n_features)
    stats = {"hits": 0, "misses": 0, "evictions": 0}
    if checkpoint is not None and checkpoint.resume:
        r.resume(checkpoint)
    step = int(every) if every and every > 0 else int(max_iter)
    sl = _Slicer()
    while True:
        sc = _cache_for(cache_mb, W.n)  # a fresh cache: shrinking restarts in every chunk
        limit = max(1, min(step, int(max_iter) - r.total))
        r.run_chunk(sc, limit, shrinking, sl, checkpoint, checkpoint_seconds)
        status, gap = int(r.ist[IST_STATUS]), float(r.fst[0])
        r.total += int(r.ist[IST_IT])
        r.chunk += 1
        for k, v in sc.stats_dict().items():
            stats[k] = stats.get(k, 0) + v
        if status == 0 or r.total >= max_iter:
            break
        if report is not None:
            report(
                {
                    "iteration": r.chunk,
                    "violation": gap,
                    "working_set": W.n,
                    "smo_iterations": r.total,
                    "objective": float(0.5 * np.dot(W.alpha, r.G + p_lin)),
                    "passes": 1,
                }
            )
        r.active, r.ist, r.fst = _wss2_fresh_state(W.n)
        if checkpoint is not None:
            r.save(checkpoint)
    return r.total, r.G, stats, status


def _warm_alpha(W: WorkingRows, init, C: float, Cv: np.ndarray) -> None:
    """α of ``W`` (all rows, by global row) from ``init`` scaled into the box [0, Cv]."""
    from ..sweep import warm_start_from_model

    gids, coef, _, _ = warm_start_from_model(init, C, W.n)
    rows = np.searchsorted(W.gids, gids)
    W.alpha[rows] = np.minimum(np.abs(coef), Cv[rows])
    log.info("smo: warm start from %d support vectors", gids.size)


def _solve_wss2(
    store, engine, state, p, C, tol, kp, pos, report, checkpoint=None, costs=None, init=None
):
    """wss2 in memory when the rows fit the budget, else the decomposition. ``costs``:
    (C_neg, C_pos) of class weights (in memory only), or None. ``init``: a model to start
    from (in memory only; :func:`ooc_svm.solvers.sweep.warm_start_from_model`)."""
    from .decomposition import _solve_wss2_decomposition  # (it imports _run_wss2)

    n = store.meta.n_rows
    nf = store.meta.n_features
    budget = _budget_rows(store, p)
    max_iter = int(p.max_iter)
    cache_stats = {"hits": 0, "misses": 0, "evictions": 0}
    if n <= budget:
        t1 = time.perf_counter()
        W = fetch_rows(store, engine, np.arange(n), pos)
        p_lin = -np.ones(W.n)
        Cv = np.full(W.n, float(C)) if costs is None else np.where(W.y > 0, costs[1], costs[0])
        if init is not None and not (checkpoint is not None and checkpoint.resume):
            _warm_alpha(W, init, float(C), Cv)
        it, G, cs, status = _run_wss2(
            W,
            p_lin,
            kp,
            Cv,
            tol,
            p.cache_mb,
            max_iter,
            p.shrinking,
            nf,
            every=int(p.checkpoint_every),
            checkpoint=checkpoint,
            report=report,
            checkpoint_seconds=float(p.checkpoint_seconds),
        )
        rho, m_up, m_low = _rho_and_gap(W.y, W.alpha, G, Cv)
        dual = float(0.5 * np.dot(W.alpha, G + p_lin))
        sv = np.flatnonzero(W.alpha > 0)
        apply_alpha_updates(store, engine, state, W.gids[sv], W.alpha[sv])
        report(
            {
                "iteration": 1,
                "violation": float(m_up - m_low),
                "working_set": W.n,
                "smo_iterations": it,
                "objective": dual,
                "pass_seconds": time.perf_counter() - t1,
                "passes": 1,
            }
        )
        for k in cache_stats:
            cache_stats[k] += cs[k]
        extra = {
            "working_rows": W.n,
            "outer_iterations": 1,
            "stop_value": float(m_up - m_low),
            "passes": 2,  # reading every row + the independent KKT pass
            "cache_hits": cache_stats["hits"],
            "cache_misses": cache_stats["misses"],
            "cache_evictions": cache_stats["evictions"],
            "in_memory": True,
            "status": "optimal" if status == 0 else "max_iter",
        }
        if status != 0:
            log.warning("smo: iteration limit %d reached (gap %.3g)", max_iter, m_up - m_low)
        return W.take(sv), -float(rho), it, extra, dual
    if costs is not None:
        raise SolverError(
            f"smo: --class-weight needs the problem in memory ({n} rows > the working budget "
            f"of {budget}; raise --working-mb or --working-rows)"
        )
    if init is not None:
        log.info("smo: out of core, the warm start is not used: starting from alpha = 0")
    return _solve_wss2_decomposition(
        store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint
    )
