"""IRWLS-SVC with chunking (``--solver irwls``): Pérez-Cruz, Alarcón-Diana, Navia-Vázquez and
Artés-Rodríguez, *Fast training of support vector classifiers* (NIPS 2000).

Problem
-------
The standard soft-margin SVC, linear or kernel, with labels yᵢ ∈ {−1, +1}::

    primal:  min_{w,b}  ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(φ(xᵢ)ᵀw + b))
    dual:    min_β  ½ βᵀHβ − 1ᵀβ   s.t.  0 ≤ βᵢ ≤ C,  yᵀβ = 0,   Hᵢⱼ = yᵢyⱼK(xᵢ, xⱼ)

(LIBSVM's sign convention for the dual objective; β is LIBSVM's α). w = Σᵢ βᵢyᵢφ(xᵢ).

Method (paper section 2 and 2.1)
--------------------------------
With eᵢ = yᵢ − f(xᵢ) the error of sample i (so uᵢ = yᵢeᵢ = 1 − yᵢf(xᵢ) is its hinge argument),
the primal is rewritten as the weighted least-squares problem
½‖w‖² + ½ Σᵢ aᵢeᵢ² with aᵢ = C/(eᵢyᵢ) for eᵢyᵢ ≥ 0 and 0 otherwise (eq. 8). With the aᵢ fixed
its minimum solves the linear system (3) ``[[H + D_a⁻¹, y], [yᵀ, 0]]·[β; b] = [1; 0]``;
IRWLS alternates solving it and recomputing the aᵢ. The samples are split into three sets,
S₁ (0 < βᵢ < C, solved for), S₂ (βᵢ = 0) and S₃ (βᵢ = C), and the system is solved for S₁ only
(size |S₁| + 1, Cholesky of the Schur complement, LU when that fails), with the fixed S₃
multipliers (and, in chunking, every support vector outside the working set) moved to the
right-hand side as G_in / G_bin (Table 1, steps 1 and 5). Sets reordering (Table 1 step 4):
S₃ samples with eᵢyᵢ < 0 go to S₂; S₁ samples with βᵢ ≥ C go to S₃; S₁ samples with aᵢ = 0 go
to S₂; S₂ samples with aᵢ ≠ 0 go to S₁.

This implementation's choices where the paper is silent or garbled (Table 1), each measured
on a9a / mushrooms working sets before being adopted:

* *Step rule with guaranteed descent.* With the sets chosen from the signs of the current
  errors and aᵢ from eq. (8), the weighted problem is tangent to the working-set primal
  objective P(β, b) = ½βᵀH_WWβ + C Σ_{i∈W} max(0, uᵢ) + λb (λ = yᵀβ_W, the term the chunking
  constraint adds), so the segment old → new is a descent direction of P. The full step is
  taken when P does not exceed the largest of its last 10 values (a non-monotone window,
  Grippo, Lampariello & Lucidi 1986); otherwise the exact minimiser of the convex
  piecewise-quadratic P along the segment (breakpoints sorted) is taken. If a corrected step
  (below) finds no decrease, the plain step is used; if that finds none either, the
  working-set problem stops. Independently, only dual-feasible iterates (full steps whose S₁
  values lie in [0, C]) are ever returned, the best of them by the working-set dual objective
  (the starting point included), so the dual objective of the whole problem never
  increases from one outer iteration to the next.
* Weights aᵢ = C / max(uᵢ, 1e-3·inner_tol) keep D_a⁻¹ bounded away from 0.
* Rule a releases an S₃ sample with eᵢyᵢ < 0 to S₁ (where the system places it on the margin)
  instead of dropping it to S₂ (β = 0): measured 158 → 10 IRWLS iterations per working set.
* Rule b, relaxed: an S₁ sample whose new βᵢ ≥ C/2 while it still violates the margin
  (uᵢ > inner_tol) goes to S₃. With the paper's βᵢ ≥ C, such samples approach C only
  geometrically (βᵢ = C·u_new/u_old) and dominate the iteration count.
* Set corrections: when the solution of (3) contradicts the sets (S₁ values outside [0, C];
  then S₂/S₃ samples the step would carry across the margin) the sets are corrected and (3)
  re-solved, up to 5 times, before stepping. On rank-deficient kernels (linear kernel on
  binary data) this can cycle; when no descent is found, or after 50 iterations, the plain
  IRWLS step is used.
* Each working-set problem is warm-started from the current β, b (the paper restarts from
  β = 0, S₁ = W) and solved to ``0.1 * tol``.

Chunking (section 2.1) and working-set selection (section 3)
-----------------------------------------------------------
One streamed pass over the store per outer iteration (``engine.map_reduce``; β and
gᵢ = Σⱼ βⱼyⱼK(xⱼ, xᵢ) live in per-shard state, the linear kernel keeps w explicitly on the
driver, so G_in of a working-set row is gᵢ minus the working set's own contribution) applies
the previous working set's change, computes every eᵢ, checks the stopping conditions and
draws the next working set of ``working_set`` = q rows in the same pass: each shard keeps
bounded pools (at most q rows each, with their CSR data) and the pools are merged
deterministically (smallest (key, row) first), so no row is read at random afterwards.
Strategies (``--strategy``):

* ``random`` (the paper's): candidates = violators of (9), (10) and every free SV; when there
  are at least q candidates, one violator per class and per condition (9)–(11), the rest drawn
  uniformly at random (bottom-q of per-row random keys from an RNG seeded by (seed, iteration,
  shard), so the draw does not depend on the engine or the worker count); otherwise all
  candidates, completed with the non-candidates of smallest |eᵢ|.
* ``largest`` / ``smallest``: the violators of (9)–(11) with the largest / smallest |eᵢ|
  (plus one per class and condition), completed likewise.

Additions to section 3, all measured necessary: every working set also holds LIBSVM's
maximal violating pair (argmax of F = y − g over the rows whose yᵢβᵢ may grow, argmin over
those whose yᵢβᵢ may shrink; F does not depend on b). Without it a working set whose
violators all lie on one side can be solved by moving b alone, and the outer iteration cycles
(seen with ``largest`` at C = 100 and ``smallest`` on small problems). When an outer iteration
does not lower the dual objective anyway, the next pass selects with b = (m(β) + M(β)) / 2.
A working set on which IRWLS has not met ``0.1·tol`` after 150 iterations (rank-deficient
kernels, e.g. the linear kernel on binary features), or whose KKT point has a higher dual
objective than an earlier feasible iterate, is finished from its best dual-feasible point by
second-order SMO on the q × q kernel matrix; ``summary["smo_finishes"]`` counts those working
sets and ``summary["smo_steps"]`` the SMO steps.

Kernel work: the change of gᵢ after a working set is Σⱼ Δβⱼyⱼ K(xᵢ, xⱼ) over the changed
rows. Rows whose β changes again and again (free SVs) reuse their column K(shard rows, xⱼ)
from a per-shard byte-bounded cache (``--cache-mb`` split over the shards; a process-local
performance cache outside the replicated engine state, dropped at the end of the run).

Stopping rule (eqs. 9–11, with e = ``tol``, default 1e-3)::

    yᵢeᵢ < e  for βᵢ = 0,    −yᵢeᵢ < e  for βᵢ = C,    |yᵢeᵢ| < e  for 0 < βᵢ < C

checked on every row in the pass, with the bias b of the last working-set problem (or the
b-reset value), then confirmed by the independent KKT pass of
:func:`~ooc_svm.solvers.dual_common.kkt_violation_pass` (f recomputed from the final SVs).

Memory: per-shard β and g (16 bytes a row) in the engine state; on the driver the working set
(q rows, its q × q kernel matrix), O(n_features) for the linear kernel's w, and at the end the
support vectors of the model.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ...engine.base import WorkerScratch
from ...kernels.kernel_functions import KernelParams, kernel_block
from .. import Callback, Result, SolverError, binary_classes
from ..dual_common import (
    CheckpointClock,
    Expansion,
    WorkingRows,
    check_interrupt,
    collect_support_vectors,
    finish_dual,
    interruptible,
    primal_w,
    shard_rows,
)
from ..kernel_cache import MB
from ..params import KernelSolverParams, as_params, at_least, param
from .passes import (
    _S_BYG,
    _S_HINGE,
    _S_HITS,
    _S_MAXV,
    _S_MISSES,
    _S_MLOW,
    _S_MUP,
    _S_NBSV,
    _S_NCAND,
    _S_NSV,
    _S_NVIOL,
    _S_SUMB,
    STRATEGIES,
    _drop_caches_fn,
    _init_state,
    _pass_fn,
    _pass_reduce,
    _PassBroadcast,
    _PassPartial,
    _Pool,
)
from .working_set import irwls_working_set

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer

log = logging.getLogger("ooc_svm")


# ============================================================================================
# chunking: the driver
# ============================================================================================
@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver irwls`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "irwls"

    tol: float = param(1e-3, "stopping conditions (9)-(11): |y_i e_i| within tol")
    max_iter: int = param(
        100_000, "outer iterations (working sets); reaching it is reported as not converged"
    )
    seed: int = param(0, "the random selection's draws (seeded per iteration and shard)")
    cache_mb: float = param(
        256.0, "kernel columns K(shard rows, x_j) of rows whose beta keeps changing, MiB"
    )
    working_set: int = param(150, "q, rows per working set (chunk); one streamed pass each")
    strategy: str = param(
        "random",
        "working-set selection of section 3 (random is the paper's)",
        choices=STRATEGIES,
    )

    def rules(self) -> None:
        super().rules()
        at_least(self, "working_set", 2)


DEFAULTS = Params.defaults()

STOPPING_RULE = (
    "Perez-Cruz et al. eqs. (9)-(11) on every row: y_i e_i < tol at beta_i=0, -y_i e_i < tol "
    "at beta_i=C, |y_i e_i| < tol for 0<beta_i<C (e_i = y_i - f(x_i)), confirmed by an "
    "independent KKT pass"
)

#: ``--checkpoint`` / ``--resume``: the state is saved after every outer iteration.
SUPPORTS_CHECKPOINT = True

#: the working-set problem is solved to this fraction of ``tol``
INNER_TOL_FACTOR = 0.1
#: IRWLS iterations allowed per working set
MAX_INNER = 150
#: outer iterations in a row without any change before the run is declared stalled
MAX_STALL = 20


def _select(part: _PassPartial, q: int) -> tuple[WorkingRows, np.ndarray]:
    """The next working set (rows and their gᵢ) from the reduced pools (section 3).

    Always the maximal violating pair first, then: at least q candidates → one violator per
    class and condition, then candidates in pool order; fewer → all candidates, then the
    fill (non-candidates of smallest |eᵢ|).
    """
    n_cand = int(part.stats[_S_NCAND])
    pools: list[_Pool] = [s for s in (part.pair or []) if s is not None]
    if n_cand >= q:
        pools += [s for s in (part.special or []) if s is not None]
        if part.main is not None:
            pools.append(part.main)
    else:
        if part.main is not None:
            pools.append(part.main)
        if part.fill is not None:
            pools.append(part.fill)
    if not pools:
        return WorkingRows.empty(), np.zeros(0)
    rows = WorkingRows.concat([p.rows for p in pools])
    g = np.concatenate([p.g for p in pools])
    _, first = np.unique(rows.gids, return_index=True)
    first = np.sort(first)[:q]  # keep pool order: specials, then candidates, then fill
    return rows.take(first), g[first]


def _working_kernel(rows: WorkingRows, kp: KernelParams, n_features: int) -> np.ndarray:
    ip, ix, data = rows.csr()
    sq = rows.sq_norms()
    out = np.empty((rows.n, rows.n), dtype=np.float64)
    work = np.zeros(max(n_features, int(ix.max()) + 1 if ix.size else 1), dtype=np.float64)
    kernel_block(ip, ix, data, sq, ip, ix, data, sq, *kp.args(), work, out)
    return out


def _collect_fn(shard, positive, st):
    beta = st[0]
    idx = np.flatnonzero(beta > 0.0)
    return ([shard_rows(shard, idx, positive, beta)] if idx.size else None), st


# ============================================================================================
# checkpoints: the state between two outer iterations
# ============================================================================================
_ROW_ARRAYS = ("gids", "indptr", "indices", "data", "y", "alpha")
#: the driver's scalars carried from one outer iteration to the next (and checkpointed)
_LOOP_KEYS = (
    "it",
    "b",
    "prev_dual",
    "just_reset",
    "stall",
    "hits",
    "misses",
    "inner_total",
    "line_total",
    "failures",
    "smo_total",
    "fallbacks",
    "b_resets",
    "passes",
)


def _save_checkpoint(
    checkpoint, engine, state, loop: dict, w, upd_gids, upd_beta, delta_rows, delta_coef, history
) -> None:
    """Write the state after an outer iteration: per-shard (β, g), the pending change of the
    last working set, w (linear) and the driver's scalars; a resumed run repeats the rest of
    the run bit for bit."""
    arrays = {"upd_gids": upd_gids, "upd_beta": upd_beta}
    if w is not None:
        arrays["w"] = w
    if delta_rows is not None:
        arrays.update({f"delta_{k}": getattr(delta_rows, k) for k in _ROW_ARRAYS})
        arrays["delta_coef"] = delta_coef
    scalars = {"loop": loop, "history": history, "delta": delta_rows is not None}
    shards = [
        {"beta": bt} if g is None else {"beta": bt, "g": g} for bt, g in engine.gather_state(state)
    ]
    checkpoint.save(int(loop["it"]), scalars=scalars, arrays=arrays, shard_states=shards)


def _load_checkpoint(checkpoint, store, engine):
    """(state, loop, w, upd_gids, upd_beta, delta_rows, delta_coef, history) saved by
    :func:`_save_checkpoint`, or None when there is no checkpoint to resume."""
    data = checkpoint.load() if (checkpoint is not None and checkpoint.resume) else None
    if data is None:
        return None
    shards = data.shard_states or []
    if len(shards) != store.n_shards or any(
        st["beta"].shape != (int(info.n_rows),)
        for st, info in zip(shards, store.meta.shards, strict=True)
    ):
        raise SolverError(f"{checkpoint.directory}: checkpoint is of another store")
    a, sc = data.arrays, data.scalars
    state = engine.set_state(store, [(st["beta"], st.get("g")) for st in shards])
    delta_rows = delta_coef = None
    if sc["delta"]:
        delta_rows = WorkingRows(*(a[f"delta_{k}"] for k in _ROW_ARRAYS))
        delta_coef = a["delta_coef"]
    loop = dict(sc["loop"])
    return (
        state,
        loop,
        a.get("w"),
        a["upd_gids"],
        a["upd_beta"],
        delta_rows,
        delta_coef,
        list(sc["history"]),
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
    """Train a C-SVC by IRWLS chunking (see the module docstring).

    Parameters
    ----------
    store
        An opened store with binary labels.
    engine : Engine
        Runs the streamed passes.
    params : Params
        (or a dict of its fields)
    callback : callable, optional
        Receives one dict per outer iteration.
    checkpoint : Checkpointer, optional
        Saves the state after every outer iteration; with ``checkpoint.resume`` the run
        continues from the latest checkpoint and ends with the same model.

    Returns
    -------
    Result
        ``model`` (kernel model; for the linear kernel ``kind="linear"`` with ``coef_`` and the
        support vectors kept), ``dual_objective`` (LIBSVM sign), ``objective`` (primal).
    """
    t0 = time.perf_counter()
    p = as_params(Params, params)
    p.validate(store.meta)
    neg, pos = binary_classes(store.meta)
    nf = int(store.meta.n_features)
    kp = KernelParams.from_params(p.kernel_dict(), nf)
    C, tol, q = float(p.C), float(p.tol), int(p.working_set)
    linear = kp.kernel == "linear"
    inner_tol = INNER_TOL_FACTOR * tol
    passes0 = engine.passes
    state = engine.init_state(store, functools.partial(_init_state, linear))
    w = np.zeros(nf) if linear else None
    b = 0.0
    upd_gids = np.zeros(0, dtype=np.int64)
    upd_beta = np.zeros(0)
    delta = delta_rows = delta_coef = None
    scratch = WorkerScratch("irwls-columns")
    cache_bytes = 0 if linear else int(float(p.cache_mb) * MB / max(1, store.n_shards))
    hits = misses = 0
    history: list[dict] = []
    inner_total = line_total = failures = stall = smo_total = fallbacks = b_resets = 0
    converged = just_reset = False
    prev_dual = 0.0
    it = 0
    part = None
    clock = CheckpointClock(float(getattr(p, "checkpoint_seconds", 60.0)))
    resumed = _load_checkpoint(checkpoint, store, engine)
    if resumed is not None:
        state, loop, w, upd_gids, upd_beta, delta_rows, delta_coef, history = resumed
        it, b, prev_dual, just_reset, stall = (
            int(loop["it"]),
            float(loop["b"]),
            float(loop["prev_dual"]),
            bool(loop["just_reset"]),
            int(loop["stall"]),
        )
        hits, misses, inner_total, line_total = (
            loop["hits"],
            loop["misses"],
            loop["inner_total"],
            loop["line_total"],
        )
        failures, smo_total, fallbacks, b_resets = (
            loop["failures"],
            loop["smo_total"],
            loop["fallbacks"],
            loop["b_resets"],
        )
        passes0 = engine.passes - int(loop["passes"])
        if delta_rows is not None and not cache_bytes:
            delta = Expansion.from_csr(
                kp, nf, delta_rows.indptr, delta_rows.indices, delta_rows.data, delta_coef
            )
        log.info("irwls: resuming after outer iteration %d", it)
    while True:
        check_interrupt()
        tp = time.perf_counter()
        bc = _PassBroadcast(
            it,
            int(p.seed),
            p.strategy,
            q,
            tol,
            C,
            b,
            pos,
            upd_gids,
            upd_beta,
            w,
            delta,
            True,
            kp,
            delta_rows,
            delta_coef,
            cache_bytes,
            scratch,
            nf,
        )
        part = engine.map_reduce(store, _pass_fn, bc, reduce=_pass_reduce, state=state)
        pass_s = time.perf_counter() - tp
        st = part.stats
        hits += int(st[_S_HITS])
        misses += int(st[_S_MISSES])
        viol = float(st[_S_MAXV])
        dual = 0.5 * float(st[_S_BYG]) - float(st[_S_SUMB])
        primal = 0.5 * float(st[_S_BYG]) + C * float(st[_S_HINGE])
        if viol <= tol:
            converged = True
        no_progress = it > 0 and dual >= prev_dual - 1e-13 * max(1.0, abs(prev_dual))
        prev_dual = dual
        if no_progress and not just_reset and not converged:
            # the working set was optimal and only b moved (it can cycle between two values
            # when W holds violators on one side only): select again with the b that
            # balances LIBSVM's m(β), M(β) over all rows
            b = 0.5 * (float(st[_S_MUP]) + float(st[_S_MLOW]))
            upd_gids, upd_beta = np.zeros(0, dtype=np.int64), np.zeros(0)
            delta = delta_rows = delta_coef = None
            just_reset = True
            b_resets += 1
            continue
        just_reset = False
        stall = stall + 1 if no_progress else 0
        if converged or it >= int(p.max_iter) or stall >= MAX_STALL:
            rec = {
                "iteration": it,
                "violation": viol,
                "n_violators": int(st[_S_NVIOL]),
                "objective": primal,
                "dual_objective": dual,
                "pass_seconds": pass_s,
                "seconds": time.perf_counter() - t0,
                "passes": engine.passes - passes0,
            }
            history.append(rec)
            if callback is not None:
                callback(rec)
            break
        it += 1
        # ---- the working set and its IRWLS-SVC problem ------------------------------------
        ts = time.perf_counter()
        rows, g_w = _select(part, q)
        K = _working_kernel(rows, kp, nf)
        yb = rows.y * rows.alpha
        g_out = g_w - K @ yb
        sub = irwls_working_set(K, rows.y, rows.alpha, b, g_out, C, inner_tol, MAX_INNER)
        inner_total += sub.iterations
        line_total += sub.line_searches
        failures += int(not sub.converged)
        smo_total += sub.smo_steps
        fallbacks += int(sub.smo_steps > 0)
        d = sub.beta - rows.alpha
        ch = np.flatnonzero(d != 0.0)
        b = float(sub.b)
        order = np.argsort(rows.gids[ch], kind="stable")
        ch = ch[order]
        upd_gids = rows.gids[ch].copy()
        upd_beta = sub.beta[ch].copy()
        if linear:
            if ch.size:
                w = w + primal_w(rows.take(ch), d[ch] * rows.y[ch], nf)
            delta = None
        else:
            delta = delta_rows = delta_coef = None
            if ch.size:
                delta_rows = rows.take(ch)
                delta_coef = d[ch] * rows.y[ch]
                if not cache_bytes:  # the shards evaluate Σ Δβⱼyⱼ K(xⱼ, ·) directly
                    delta = Expansion.from_csr(
                        kp, nf, delta_rows.indptr, delta_rows.indices, delta_rows.data, delta_coef
                    )
        solve_s = time.perf_counter() - ts
        rec = {
            "iteration": it,
            "violation": viol,
            "n_violators": int(st[_S_NVIOL]),
            "objective": primal,
            "dual_objective": dual,
            "working_set": int(rows.n),
            "changed": int(ch.size),
            "inner_iterations": sub.iterations,
            "inner_converged": sub.converged,
            "b": b,
            "n_sv": int(st[_S_NSV]),
            "n_bound_sv": int(st[_S_NBSV]),
            "pass_seconds": pass_s,
            "solve_seconds": solve_s,
            "seconds": time.perf_counter() - t0,
            "passes": engine.passes - passes0,
        }
        history.append(rec)
        if callback is not None:
            callback(rec)
        log.debug(
            "irwls it %d: viol %.3g dual %.10g |W| %d changed %d inner %d",
            it,
            viol,
            dual,
            rows.n,
            ch.size,
            sub.iterations,
        )
        if checkpoint is not None and clock.due():
            t_save = time.perf_counter()
            loop = dict(
                zip(
                    _LOOP_KEYS,
                    (
                        it,
                        b,
                        prev_dual,
                        just_reset,
                        stall,
                        hits,
                        misses,
                        inner_total,
                        line_total,
                        failures,
                        smo_total,
                        fallbacks,
                        b_resets,
                        engine.passes - passes0,
                    ),
                    strict=True,
                )
            )
            _save_checkpoint(
                checkpoint,
                engine,
                state,
                loop,
                w,
                upd_gids,
                upd_beta,
                delta_rows,
                delta_coef,
                history,
            )
            clock.saved(t_save)

    stop_value = float(part.stats[_S_MAXV])
    if cache_bytes:
        _drop_caches_fn(None, scratch)
        try:
            engine.map_state(store, _drop_caches_fn, scratch)
        except NotImplementedError:  # pragma: no cover - engines without map_state
            pass
    # ---- model, independent KKT check ---------------------------------------------------------
    sv = collect_support_vectors(store, engine, state, pos, _collect_fn)
    st = part.stats
    dual = 0.5 * float(st[_S_BYG]) - float(st[_S_SUMB])
    primal = math.nan

    def info(chk: dict | None) -> dict:
        nonlocal primal
        primal = 0.5 * float(st[_S_BYG]) + C * float(chk["hinge"])
        return {
            "solver": "irwls",
            "C": C,
            "tol": tol,
            "working_set": q,
            "strategy": p.strategy,
            "dual_objective": dual,
            "objective": primal,
            "converged": converged,
        }

    fin = finish_dual(store, engine, sv, b, kp, C, tol, (neg, pos), info, keep_dual=True)
    model, chk = fin.model, fin.kkt
    seconds = time.perf_counter() - t0
    summary = {
        "strategy": p.strategy,
        "working_set": q,
        "outer_iterations": it,
        "inner_iterations": inner_total,
        "line_searches": line_total,
        "inner_unconverged": failures,
        "smo_finishes": fallbacks,
        "smo_steps": smo_total,
        "b_resets": b_resets,
        "cache_hits": hits,
        "cache_misses": misses,
        "n_sv": int(sv.n),
        "n_bound_sv": int(np.count_nonzero(sv.alpha >= C)) if sv.n else 0,
        "intercept": b,
        "converged": converged,
        "stalled": bool(not converged and stall >= MAX_STALL),
        "kkt_max_violation": chk["max_violation"],
        "kkt_n_violators": chk["n_violators"],
        "kkt_ok": chk["ok"],
        "kkt_gap": chk["gap"],
        "sum_y_alpha": chk["sum_y_alpha"],
        "seconds": seconds,
    }
    if not converged:
        log.warning(
            "irwls: stopped after %d iterations without meeting tol=%g (violation %.3g)",
            it,
            tol,
            stop_value,
        )
    return Result(
        model=model,
        objective=primal,
        dual_objective=dual,
        converged=converged,
        stop_reason=None if converged else ("max_iter" if it >= p.max_iter else "stalled"),
        iterations=it,
        passes=engine.passes - passes0,
        seconds=seconds,
        stop_value=stop_value,
        history=history,
        summary=summary,
    )
