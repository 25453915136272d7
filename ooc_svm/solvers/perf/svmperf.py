"""``--solver perf --variant svmperf``: SVMperf 3.00's default training loop, with a certificate.

Problem: OP2 of Joachims (2006), the 1-slack soft-margin SVM, as :mod:`.error`::

    min_{w, ξ≥0} ½‖w‖² + C_perf·ξ   s.t. ∀c ∈ {0,1}ⁿ: wᵀ(1/n Σᵢ cᵢyᵢx̃ᵢ) ≥ 1/n Σᵢ cᵢ − ξ

with C_perf = C·n, solved through its 1-slack dual over a working set W of cuts (OP3; Joachims,
Finley & Yu, *Cutting-plane training of structural SVMs*, MLJ 2009, Section 4, Algorithm 4
"1-slack formulation, dual").

Stopping rule: SVMperf's — a *full* round (every row scored) whose most violated constraint
is violated by at most ε beyond the slack estimate (ceps ≤ ε) — **and then** the dual-gap
certificate P(w) − D(α) ≤ ε·C_perf, P measured exactly by that full pass and D the OP3 dual
of the QP's α (a lower bound of P*). When the loose α does not certify, the working-set QP is
solved tightly (1e-4·ε) once; if that dual still does not certify, the loop goes on from the
tight α (later QPs at tolerance ε/2). So P(w) ≤ P* + C·n·ε as for every other variant.

What SVMperf 3.00 does beyond Algorithm 1 (default ``-w 9``: ``svm_struct_main.c:84-85`` →
``svm_learn_struct_joint_custom_linear``, ``svm_struct_learn_custom.c:123-486``; measured
by ``scripts/bench_svmperf_fidelity.py``: on a9a these halve ``paper``'s 940 iterations to
SVMperf's 423):

1. *Loose, warm-started inner QP* (the main cause). OP3 is solved only until the largest KKT
   violation is ≤ ε_best/2, ε_best = min over full rounds of max(ceps, ε), starting at 1
   (``svm_struct_learn_custom.c:191-193, 358-366``; SVMlight's
   ``optimize_to_convergence_sharedslack``). Here: :func:`~ooc_svm.solvers.perf.qp.smo_simplex_qp`
   from the previous α. Early QPs take a few pair steps only, a damped step of w.
2. *First-above-mean slack estimate*: ξ_W = slack of the first plane j in W with
   αⱼ > mean(α) and positive slack, not maxⱼ (``svm_struct_learn_custom.c:255-261``).
3. *Shrinking* (``--s 1``): per row exponential averages (factor ½) of the score
   dᵢ = (1 − yᵢw·x̃ᵢ)/n, mean (starts at 1/n), variance (0) and conf = |mean| − √var (−1).
   A round is *full* when ε_part < ε_best/5, in the first 4 rounds, after a round with
   ceps < ε, else *partial*: only rows with conf < 0 are scored; the others keep their stale
   cᵢ. The cut Σ cᵢyᵢx̃ᵢ/n and its offset are updated incrementally with the flipped rows
   (``svm_struct_learn_custom.c:250-253, 272-309``), so a partial cut is a valid OP2
   constraint. ε_part = min(ε_part, max(ceps, ε)) sets the QP tolerance of partial rounds;
   a full round resets it (``svm_struct_learn_custom.c:358-366``).
4. The iteration count counts every round, full, partial, and those that add no plane
   (``svm_struct_learn_custom.c:243``); the run stops only on a full round
   (``svm_struct_learn_custom.c:404-406``). Planes with α = 0 for 50 QP solves are dropped
   (``svm_struct_learn_custom.c:392``), as ``max_inactive`` does.

SVMperf's own test (ceps ≤ ε on a full round) is not a certificate with an inexact α and an
estimated ξ_W (measured: gap/(C·n·ε) up to 1.35 with ξ_W = max, 1.04 on w8a with the first-
slack estimate); hence the certificate above.

Out of core: a full round is one streamed pass with per-shard state (mean, variance of each
row). The same pass collects the rows with conf < 0 (the set S scored by the partial rounds
until the next full round; it can only shrink) into memory: CSR slices, labels, cᵢ and
statistics, capped at ``inner_mb`` MiB (64 bytes per row + 8 per non-zero), most uncertain
rows (smallest conf, then row number) first. Rows beyond the cap are not scored by partial
rounds: their stale cᵢ stays in the cut, which is still a valid constraint. Partial rounds
touch only S in memory (no pass). S's statistics go back to the shards with the next full
pass's broadcast. Selection and cut are the same for any engine and reduction tree, so local
and Dask runs are bit-identical. Checkpoints are refused (the per-row state lives on the
shards).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.csr import csr_take_rows, u32
from ...sizes import sizes_of
from .. import Callback, Result, SolverError, binary_classes
from ..params import as_params
from ..reduce import none_is_identity
from ._numba.cuts import matvec, vdot
from ._numba.svmperf import full_round, partial_round
from .common import _finite, _Progress, _resolve_C, binary_result
from .params import Params
from .passes import _finish_accumulator, _new_accumulator, acc_row, merge_acc
from .qp import smo_simplex_qp
from .working_set import WorkingSet, _qp_atol, check_qp

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store
    from ...store.format import Shard

log = logging.getLogger(__name__)

STOPPING_RULE = (
    "svmperf: SVMperf 3.00's rule (a full round with ceps <= eps) and then P(w) - dual(W) "
    "<= eps * C * n"
)

#: bytes a row of S takes besides its non-zeros (row, conf, label, c, mean, var, indptr)
ROW_BYTES = 64
#: bytes per non-zero of S (int32 column + float32 value)
NZ_BYTES = 8
#: SVMperf: a full round when ε_part < ε_best / FULL_RATIO (svm_struct_learn_custom.c:250)
FULL_RATIO = 5.0
#: SVMperf's first rounds are full (numIt < 5)
FIRST_FULL = 5


_PER_ROW = ("conf", "row", "ys", "c", "mean", "var")


def _empty(budget: int) -> dict:
    sel: dict[str, Any] = {k: np.zeros(0) for k in _PER_ROW}
    sel["row"] = np.zeros(0, dtype=np.int64)
    sel.update(
        budget=int(budget),
        indptr=np.zeros(1, dtype=np.int64),
        indices=np.zeros(0, dtype=np.int32),
        data=np.zeros(0, dtype=np.float32),
    )
    return sel


def _row_bytes(sel: dict) -> np.ndarray:
    return ROW_BYTES + NZ_BYTES * np.diff(sel["indptr"])


def _take(sel: dict, keep: np.ndarray) -> dict:
    """The rows ``keep`` (positions, ascending) of a selection."""
    out = {k: sel[k][keep] for k in _PER_ROW}
    ip, ix, dt = csr_take_rows(sel["indptr"], sel["indices"], sel["data"], keep)
    out.update(budget=sel["budget"], indptr=ip, indices=ix, data=dt)
    return out


def _chunked(sel: dict) -> dict:
    """A shard's rows as a reduction partial: a list of selections (one per shard, in shard
    order) that merges without copying the rows."""
    chunks = [sel] if sel["row"].shape[0] else []
    return {"budget": sel["budget"], "bytes": int(_row_bytes(sel).sum()), "chunks": chunks}


def _cap(part: dict, limit: int) -> dict:
    """Keep the longest prefix in (conf, row) order within the budget when the rows take
    more than ``limit`` bytes (chunks keep their row order). Any element of the prefix of a
    union is in the prefix of every subset holding it, so caps of partial unions never drop
    a row of the final S: any reduction tree gives the same S."""
    if part["bytes"] <= limit:
        return part
    chunks = part["chunks"]
    nb = np.concatenate([_row_bytes(c) for c in chunks])
    conf = np.concatenate([c["conf"] for c in chunks])
    row = np.concatenate([c["row"] for c in chunks])
    order = np.lexsort((row, conf))
    k = int(np.searchsorted(np.cumsum(nb[order]), part["budget"], side="right"))
    keep = np.zeros(nb.shape[0], dtype=bool)
    keep[order[:k]] = True
    out, start = [], 0
    for c in chunks:
        m = c["row"].shape[0]
        sub = np.flatnonzero(keep[start : start + m]).astype(np.int64)
        start += m
        if sub.shape[0] == m:
            out.append(c)
        elif sub.shape[0]:
            out.append(_take(c, sub))
    return {"budget": part["budget"], "bytes": int(nb[order[:k]].sum()), "chunks": out}


def merge_selections(a: dict, b: dict) -> dict:
    """Partials of two consecutive shard ranges (``a`` first); capped beyond two budgets."""
    out = {"budget": a["budget"], "bytes": a["bytes"] + b["bytes"]}
    out["chunks"] = a["chunks"] + b["chunks"]
    return _cap(out, 2 * a["budget"])


def assemble(part: dict) -> dict:
    """S: the merged partial capped to the budget, as one selection (rows in row order)."""
    part = _cap(part, part["budget"])
    chunks = part["chunks"]
    if not chunks:
        return _empty(part["budget"])
    if len(chunks) == 1:
        return chunks[0]
    out = {k: np.concatenate([c[k] for c in chunks]) for k in _PER_ROW}
    ends = np.cumsum([c["indptr"][-1] for c in chunks])[:-1]
    tails = [c["indptr"][1:] + e for c, e in zip(chunks[1:], ends, strict=True)]
    out.update(
        budget=part["budget"],
        indptr=np.concatenate([chunks[0]["indptr"], *tails]),
        indices=np.concatenate([c["indices"] for c in chunks]),
        data=np.concatenate([c["data"] for c in chunks]),
    )
    return out


# ------------------------------------------------------------------------------------------
# the full pass (module level: the Dask engine pickles it)
# ------------------------------------------------------------------------------------------


def init_stats(info: Any, _i: int, inv_n: float) -> np.ndarray:
    """Per-shard state: (2, rows) mean = 1/n and variance 0 of each row's score."""
    st = np.zeros((2, int(info.n_rows)))
    st[0] = inv_n
    return st


def pass_full(shard: Shard, bc: Any, st: Any) -> tuple[dict, Any]:
    """One full round on a shard (see :func:`full_round`); S's statistics from the driver
    (``bc`` rows, mean, var) are written back first. Returns (partial, state)."""
    wd, tb, bias, pos, dim, inv_n, rows, mean, var, budget = bc
    lo, hi = np.searchsorted(rows, [shard.row_start, shard.row_start + shard.n_rows])
    st[0, rows[lo:hi] - shard.row_start] = mean[lo:hi]
    st[1, rows[lo:hi] - shard.row_start] = var[lo:hi]
    acc, gidx, bias_slot, cols = _new_accumulator(shard, dim, 1, True)
    out = np.empty((2, shard.n_rows))
    cnt, hinge = full_round(
        shard.indptr, u32(shard.indices), gidx, shard.data, shard.y, pos, wd, tb, bias,
        acc[0], bias_slot, inv_n, st, out,
    )  # fmt: skip
    keep = np.flatnonzero(out[0] < 0.0).astype(np.int64)
    sel = {
        "conf": out[0, keep],
        "row": keep + int(shard.row_start),
        "ys": np.where(shard.y[keep] == pos, 1.0, -1.0),
        "c": out[1, keep],
        "mean": st[0, keep],
        "var": st[1, keep],
        "budget": int(budget),
    }
    ip, ix, dt = csr_take_rows(shard.indptr, shard.indices, shard.data, keep)
    sel.update(indptr=ip, indices=ix, data=dt)
    part = {
        "g": _finish_accumulator(acc, cols, dim, True),
        "cnt": float(cnt),
        "hinge": float(hinge),
        "sel": _cap(_chunked(sel), sel["budget"]),
    }
    return part, st


@none_is_identity
def reduce_full(a: Any, b: Any) -> dict[str, Any]:
    """Reduce of :func:`pass_full` partials (cut, counts, S)."""
    return {
        "g": merge_acc(a["g"], b["g"]),
        "cnt": a["cnt"] + b["cnt"],
        "hinge": a["hinge"] + b["hinge"],
        "sel": merge_selections(a["sel"], b["sel"]),
    }


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------


def first_slack(ws: WorkingSet) -> float:
    """SVMperf's ξ_W: the slack rⱼ − w·gⱼ of the first plane with αⱼ > mean(α) whose slack
    is positive; 0 if none (``svm_struct_learn_custom.c:255-261``)."""
    if not len(ws):
        return 0.0
    a = ws.alpha
    sl = np.asarray(ws.r) - matvec(ws.Q, a)
    mean = a.sum() / a.shape[0]
    for j in range(a.shape[0]):
        if a[j] > mean and sl[j] > 0.0:
            return float(sl[j])
    return 0.0


def _loose_qp(ws: WorkingSet, Cp: float, tol: float) -> tuple[np.ndarray, float]:
    """OP3 over W by SMO from the previous α to a KKT violation ≤ ``tol``: (w, dual)."""
    r = np.asarray(ws.r)
    ws.alpha = smo_simplex_qp(ws.Q, r, Cp, ws.alpha, tol)
    for j, a in enumerate(ws.alpha):
        ws.inactive[j] = 0 if a > 0.0 else ws.inactive[j] + 1
    w = ws.combine(ws.alpha)
    return w, float(vdot(ws.alpha, r) - 0.5 * vdot(w, w))


class _Run:
    """State of one svmperf run: the cut (G, count), S, tolerances and counters."""

    def __init__(self, store, engine, params: Params, callback):
        meta = store.meta
        self.store, self.engine, self.params = store, engine, params
        self.neg, self.pos = binary_classes(meta)
        self.n, self.d = int(meta.n_rows), int(meta.n_features)
        self.dim = self.d + 1
        self.bias = float(params.bias)
        self.C = _resolve_C(params, self.n)
        self.Cp = self.C * self.n
        self.eps = float(params.eps)
        self.budget = int(params.inner_mib(sizes_of(engine, Params.OWN_CLAIMS)) * 2**20)
        self.ws = WorkingSet(self.dim, float(params.dense_limit_mb) * 2**20)
        self.prog = _Progress(engine, callback)
        self.state = engine.init_state(store, functools.partial(init_stats, inv_n=1.0 / self.n))
        self.G = np.zeros(self.dim)  # Σ cᵢyᵢx̃ᵢ over all rows (stale cᵢ outside S)
        self.count = 0.0  # Σ cᵢ
        self.sel = _empty(self.budget)
        self.counts = dict(full=0, partial=0, qp=0, scored=0, capped=0, refines=0, s_peak=0)
        self.pt = 0.0
        self.polished: tuple[np.ndarray, float] = (np.zeros(self.dim), -math.inf)

    def full(self, w: np.ndarray) -> float:
        """A full round (one streamed pass) at w: exact cut, S refreshed; returns hinge."""
        s, d = self.sel, self.d
        bc = (
            np.ascontiguousarray(w[:d]), float(w[d]) * self.bias, self.bias, self.pos, self.dim,
            1.0 / self.n, s["row"], s["mean"], s["var"], self.budget,
        )  # fmt: skip
        t = time.perf_counter()
        part = self.engine.map_reduce(
            self.store, pass_full, bc, reduce=reduce_full, state=self.state
        )
        self.pt = time.perf_counter() - t
        self.G = acc_row(part["g"], 0)
        self.count = float(part["cnt"])
        self.sel = assemble(part["sel"])
        self.counts["full"] += 1
        self.counts["scored"] += self.n
        k = int(self.sel["row"].shape[0])
        self.counts["s_peak"] = max(self.counts["s_peak"], k)
        return float(part["hinge"])

    def partial(self, w: np.ndarray) -> None:
        """A partial round on S in memory: flipped rows update the cut."""
        s = self.sel
        dg = np.zeros(self.dim)
        dc, checked = partial_round(
            s["indptr"], u32(s["indices"]), s["data"], s["ys"], w, float(w[self.d]) * self.bias,
            self.bias, 1.0 / self.n, s["c"], s["mean"], s["var"], s["conf"], dg,
        )  # fmt: skip
        self.G += dg
        self.count += dc
        self.counts["partial"] += 1
        self.counts["scored"] += int(checked)


def solve_svmperf(
    store: Store,
    engine: Engine,
    params: Params | dict,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train a linear SVM (OP2) with SVMperf 3.00's loop and the dual-gap certificate.

    ``params``: :class:`ooc_svm.solvers.perf.Params` or a mapping (the variant is taken to be
    ``svmperf``); ``inner_mb`` caps the rows S kept in memory between full rounds.
    """
    if isinstance(params, Params):
        params = params.replace(variant="svmperf")
    else:
        params = as_params(Params, {**dict(params or {}), "variant": "svmperf"})
    meta = store.meta
    params.validate(meta)
    if checkpoint is not None:
        raise SolverError(
            "perf --variant svmperf does not support --checkpoint (its per-row statistics "
            "live on the shards); use --variant accelerated or paper"
        )
    loss = params.resolve_loss(meta)
    if loss != "error":
        raise SolverError(
            f"perf --variant svmperf trains --loss error only (got {loss}); use accelerated"
        )
    run = _Run(store, engine, params, callback)
    w0 = None
    if params.init is not None:  # train --init: SVMperf's loop from the model's w
        from .warm import perf_start

        neg, pos = binary_classes(meta)
        w0 = perf_start(params.init, meta, [neg, pos], "error", run.bias).w
    return _loop(run, w0)


def _loop(run: _Run, w0: np.ndarray | None = None) -> Result:
    """SVMperf's ``svm_learn_struct_joint_custom_linear`` loop plus the certificate
    (``w0``: the first iterate, default 0)."""
    n, C, Cp, eps, ws = run.n, run.C, run.Cp, run.eps, run.ws
    max_iter = int(run.params.max_iter)
    max_inactive = int(run.params.max_inactive)
    w = np.zeros(run.dim) if w0 is None else np.asarray(w0, dtype=np.float64).copy()
    eps_full = eps_part = 1.0
    ceps = math.inf
    D = -math.inf
    best = (math.inf, w, math.inf)  # (P, w, ξ) of the best fully scored point
    it = 0
    converged = False
    final = None
    while True:
        it += 1
        full = eps_part < eps_full / FULL_RATIO or it < FIRST_FULL or ceps < eps
        xi_w = first_slack(ws)
        if full:
            hinge = run.full(w)
            P = 0.5 * float(vdot(w, w)) + C * hinge
            if P < best[0]:
                best = (P, w, hinge / n)
        else:
            run.partial(w)
        ceps = max(0.0, (run.count - float(vdot(w, run.G))) / n - xi_w)
        if ceps > eps:
            ws.add(run.G / n, run.count / n)
            if full:
                eps_full = min(eps_full, max(ceps, eps))
                eps_part = eps_full
            else:
                eps_part = min(eps_part, max(ceps, eps))
            w, dual = _loose_qp(ws, Cp, eps_part / 2.0)
            run.prog.stalled = run.prog.stalled or check_qp(C, Cp, ws, "error")
            D = max(D, dual)
            run.counts["qp"] += 1
            ws.drop_inactive(max_inactive)
        if full:
            _emit(run, it, P, hinge / n, ceps, D)
        if full and ceps <= eps:
            final = _certify(run, w, P, D)
            if final is not None:
                converged = True
                w, P, D = final
                break
            w, D = run.polished
            eps_full = eps
            ceps = math.inf
        if it >= max_iter or run.prog.stalled:
            break
    if not converged:
        if not run.prog.stalled:
            log.warning("perf: stopped after %d iterations (max_iter) before the certificate", it)
        P, w, _ = best
    xi = (P - 0.5 * float(vdot(w, w))) / Cp
    return _result(run, w, P, xi, D, it, converged)


def _certify(run: _Run, w: np.ndarray, P: float, D: float):
    """(w, P, D) when P − D ≤ ε·C_perf with the loose α or after a tight QP over W; else
    None (``run.polished`` = the tight (w, D) to continue from)."""
    tol = run.eps * run.Cp
    if P - D <= tol:
        return w, P, D
    run.counts["refines"] += 1
    wt, Dt, _ = run.ws.solve(run.Cp, _qp_atol(run.eps))
    D = max(D, Dt)
    if P - D <= tol:
        return w, P, D
    run.polished = (wt, D)
    return None


def _emit(run: _Run, it: int, P: float, xi: float, ceps: float, D: float) -> None:
    run.prog.emit(
        {
            "iteration": it,
            "objective": P,
            "xi": xi,
            "violation": ceps,
            "working_set": len(run.ws),
            "pass_seconds": run.pt,
            "lower_bound": _finite(D),
            "partial_rounds": run.counts["partial"],
            "selected_rows": int(run.sel["row"].shape[0]),
        }
    )


def _result(run: _Run, w, P: float, xi: float, D: float, it: int, converged: bool) -> Result:
    c = run.counts
    stop = (P - D) / run.Cp if math.isfinite(D) else math.inf
    extra = {
        "full_rounds": c["full"],
        "partial_rounds": c["partial"],
        "qp_solves": c["qp"],
        "full_pass_equiv": c["scored"] / run.n,
        "certificate_refines": c["refines"],
        "peak_selected_rows": c["s_peak"],
    }
    return binary_result(run, w, "svmperf", P, it, converged, stop, xi, D, extra=extra)
