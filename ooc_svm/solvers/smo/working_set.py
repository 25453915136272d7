"""smo ``--selection wss2``: LIBSVM's solver (Fan, Chen & Lin 2005) on the rows in memory,
in ~0.05 s slices, with checkpoints between chunks and every ``--checkpoint-seconds``; when the
rows exceed the working budget, :mod:`.decomposition`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import SolverError
from ..dual import WorkingRows
from ._numba.wss2 import (
    IST_DONE,
    IST_IT,
    IST_N_ACTIVE,
    IST_STATUS,
    _diag,
    _wss2_fresh_state,
    _wss2_init_grad,
    _wss2_steps,
)
from .common import _cache_for, _kernel_tuple, _x_tuple_compact

log = logging.getLogger(__name__)


#: target seconds of one numba call of the wss2 loop (Ctrl-C and time checkpoints between)
SLICE_SECONDS = 0.05
#: seconds between two progress records inside a chunk (the commands show one line every
#: ``$OOC_SVM_PROGRESS_SECONDS``, 5 s by default; these records keep that cadence on chunks
#: that run for minutes, e.g. 300,000 rows under a small ``--cache-mb``)
PROGRESS_SECONDS = 1.0


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

    def run_chunk(
        self, sc, limit, shrinking, sl, checkpoint, checkpoint_seconds, progress=None
    ) -> None:
        """The solve (or its rest) up to ``limit`` steps, in slices of ``sl.budget`` steps;
        ``progress(sc)`` is called between slices every :data:`PROGRESS_SECONDS` (it only
        reads the state: the steps are the same with or without it)."""
        last = time.perf_counter()
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
            if progress is not None and not self.ist[IST_DONE]:
                now = time.perf_counter()
                if now - last >= PROGRESS_SECONDS:
                    progress(sc)
                    last = now
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
    progress=None,
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

    ``progress`` (a callable taking one dict, or None) gets a record between slices every
    :data:`PROGRESS_SECONDS` while a chunk runs: ``chunk`` (1, 2, ...), ``smo_iterations``
    (steps so far), ``violation`` (m − M over the active rows at the last step: the rows
    shrinking set aside are checked when the chunk ends), ``active_rows``,
    ``cache_hit_rate`` (so far) and ``in_chunk`` = True.
    """
    r = _Wss2Run(W, p_lin, kp, C, tol, n_features)
    stats = {"hits": 0, "misses": 0, "evictions": 0}
    in_chunk = None if progress is None else _in_chunk_progress(r, stats, progress)
    if checkpoint is not None and checkpoint.resume:
        r.resume(checkpoint)
    step = int(every) if every and every > 0 else int(max_iter)
    sl = _Slicer()
    while True:
        sc = _cache_for(cache_mb, W.n)  # a fresh cache: shrinking restarts in every chunk
        limit = max(1, min(step, int(max_iter) - r.total))
        r.run_chunk(
            sc,
            limit,
            shrinking,
            sl,
            checkpoint,
            checkpoint_seconds,
            in_chunk,
        )
        status, gap = int(r.ist[IST_STATUS]), float(r.fst[0])
        r.total += int(r.ist[IST_IT])
        r.chunk += 1
        for k, v in sc.stats_dict().items():
            stats[k] = stats.get(k, 0) + v
        if status == 0 or r.total >= max_iter:
            break
        if report is not None:
            report(_chunk_record(r, W, p_lin, gap, stats))
        r.active, r.ist, r.fst = _wss2_fresh_state(W.n)
        if checkpoint is not None:
            r.save(checkpoint)
    return r.total, r.G, stats, status


def _in_chunk_progress(r: _Wss2Run, stats: dict, progress) -> Callable[[Any], None]:
    """The record ``progress`` gets between two slices of a chunk (see :func:`_run_wss2`)."""

    def in_chunk(sc) -> None:
        hits = stats["hits"] + int(sc.stats[0])
        misses = stats["misses"] + int(sc.stats[1])
        progress(
            {
                "chunk": r.chunk + 1,
                "smo_iterations": r.total + int(r.ist[IST_IT]),
                "violation": float(r.fst[0]),
                "active_rows": int(r.ist[IST_N_ACTIVE]),
                "cache_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
                "in_chunk": True,
            }
        )

    return in_chunk


def _chunk_record(r: _Wss2Run, W: WorkingRows, p_lin, gap: float, stats: dict) -> dict:
    """The progress record ``report`` gets after a chunk (see :func:`_run_wss2`)."""
    return {
        "iteration": r.chunk,
        "violation": gap,
        "working_set": W.n,
        "smo_iterations": r.total,
        "cache_hit_rate": _hit_rate(stats),
        "objective": float(0.5 * np.dot(W.alpha, r.G + p_lin)),
        "passes": 1,
    }


def _hit_rate(stats: dict) -> float:
    n = stats["hits"] + stats["misses"]
    return stats["hits"] / n if n else 0.0
