"""smo ``--selection wss2``: LIBSVM's solver (Fan, Chen & Lin 2005) on the rows in memory,
in ~0.05 s slices, with checkpoints between chunks and every ``--checkpoint-seconds``; when the
rows exceed the working budget, :mod:`.decomposition`."""

from __future__ import annotations

import logging
import time

import numpy as np

from .. import SolverError
from ..dual_common import WorkingRows, apply_alpha_updates, fetch_rows
from .common import _budget_rows, _cache_for, _kernel_tuple, _x_tuple
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
    slices of ~0.1 s (Ctrl-C is seen between them) and its whole state (α, G, Ḡ, the
    shrinking order and counters) is checkpointed when ``checkpoint_seconds`` have passed
    since the last save; pausing does not change a step, so a resumed run ends with the
    model of an uninterrupted one.
    """
    X = _x_tuple(W)
    kt = _kernel_tuple(kp)
    work = np.zeros(max(n_features, int(W.indices.max()) + 1 if W.indices.size else 1))
    G = np.empty(W.n)
    G_bar = np.empty(W.n)
    QD = _diag(X, kt)
    total, chunk, seq, init = 0, 0, 0, True
    active, ist, fst = _wss2_fresh_state(W.n)
    stats = {"hits": 0, "misses": 0, "evictions": 0}
    if checkpoint is not None and checkpoint.resume:
        data = checkpoint.load()
        if data is not None:
            arr = data.arrays
            if "alpha" not in arr:
                raise SolverError(
                    f"{checkpoint.directory}: checkpoint of the out-of-core decomposition; the "
                    "in-memory solver cannot resume from it (same --working-mb / --working-rows?)"
                )
            if arr["alpha"].shape != W.alpha.shape:
                raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
            W.alpha[:], G[:], G_bar[:] = arr["alpha"], arr["G"], arr["G_bar"]
            total, seq, init = int(data.scalars["iterations"]), data.iteration, False
            chunk = int(data.scalars.get("chunk", data.iteration))
            if "active" in arr:
                active, ist, fst = arr["active"].copy(), arr["ist"].copy(), arr["fst"].copy()
            log.info("smo: resuming after %d SMO steps", total + int(ist[IST_IT]))
    last_save = time.perf_counter()

    def save() -> None:
        nonlocal seq, last_save
        seq += 1
        checkpoint.save(
            seq,
            scalars={"iterations": total, "chunk": chunk},
            arrays={
                "alpha": W.alpha,
                "G": G,
                "G_bar": G_bar,
                "active": active,
                "ist": ist,
                "fst": fst,
            },
        )
        last_save = time.perf_counter()

    step = int(every) if every and every > 0 else int(max_iter)
    sl = _Slicer()
    while True:
        sc = _cache_for(cache_mb, W.n)  # a fresh cache: shrinking restarts in every chunk
        if init:
            _init_grad_sliced(X, kt, sc, work, W.alpha, G, G_bar, p_lin, C)
            init = False
        limit = max(1, min(step, int(max_iter) - total))
        while not ist[IST_DONE]:
            _wss2_steps(
                X,
                kt,
                sc.arrays(),
                work,
                W.alpha,
                G,
                G_bar,
                p_lin,
                QD,
                C,
                tol,
                limit,
                bool(shrinking),
                active,
                ist,
                fst,
                sl.budget,
            )
            sl.adapt()
            if (
                checkpoint is not None
                and not ist[IST_DONE]
                and time.perf_counter() - last_save >= checkpoint_seconds
            ):
                save()
        status, gap = int(ist[IST_STATUS]), float(fst[0])
        total += int(ist[IST_IT])
        chunk += 1
        for k, v in sc.stats_dict().items():
            stats[k] = stats.get(k, 0) + v
        if status == 0 or total >= max_iter:
            break
        if report is not None:
            report(
                {
                    "iteration": chunk,
                    "violation": gap,
                    "working_set": W.n,
                    "smo_iterations": total,
                    "objective": float(0.5 * np.dot(W.alpha, G + p_lin)),
                    "passes": 1,
                }
            )
        active, ist, fst = _wss2_fresh_state(W.n)
        if checkpoint is not None:
            save()
    return total, G, stats, status


def _solve_wss2(store, engine, state, p, C, tol, kp, pos, report, checkpoint=None):
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
        it, G, cs, status = _run_wss2(
            W,
            p_lin,
            kp,
            C,
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
        rho, m_up, m_low = _rho_and_gap(W.y, W.alpha, G, C)
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
    return _solve_wss2_decomposition(
        store, engine, state, p, C, tol, kp, pos, report, budget, checkpoint
    )
