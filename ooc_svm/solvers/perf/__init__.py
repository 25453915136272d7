"""``--solver perf``: Joachims' cutting-plane algorithm for linear SVMs, out of core.

Problems (T. Joachims, *Training Linear SVMs in Linear Time*, KDD 2006, Sections 2–3), with
x̃ᵢ = (xᵢ, bias) (the bias a constant feature regularised like LIBLINEAR ``-B``; 0 = none):

- ``loss="error"`` (:mod:`.error`, Algorithm 1) — OP2, the 1-slack soft-margin SVM::

      min_{w, ξ≥0} ½‖w‖² + C_perf·ξ   s.t. ∀c ∈ {0,1}ⁿ: wᵀ(1/n Σᵢ cᵢyᵢx̃ᵢ) ≥ 1/n Σᵢ cᵢ − ξ

  with C_perf = C·n: at the optimum ½‖w‖² + C_perf·ξ = ½‖w‖² + C Σᵢ max(0, 1 − yᵢwᵀx̃ᵢ),
  LIBLINEAR's primal (Theorem 1). One streamed pass per iteration gives the most violated
  constraint (cᵢ = [yᵢwᵀx̃ᵢ < 1]) and the exact loss.
- ``loss="ordinal"`` / ``"roc"`` (:mod:`.rank`, Algorithm 2) — OP5, the 1-slack form of OP4
  over the m pairs P = {(i, j): yᵢ > yⱼ} (same query only, with qids)::

      min_{w, ξ≥0} ½‖w‖² + C_perf·ξ   s.t. ∀c ∈ {0,1}ᵐ: wᵀ(1/m Σ_P cᵢⱼ(xᵢ − xⱼ)) ≥ 1/m Σ cᵢⱼ − ξ

  with C_perf = C·m: ½‖w‖² + C Σ_P max(0, 1 − wᵀ(xᵢ − xⱼ)); no bias (it cancels).

Each iteration solves the dual OP3 over the working set W of cuts (:mod:`.working_set`,
:func:`ooc_svm.solvers.perf.qp.solve_simplex_qp`, to a gap ≤ 1e-4·C_perf·ε); planes inactive
``max_inactive`` iterations are dropped. ``variant="accelerated"`` (default) adds an OCAS line
search (Franc & Sonnenburg 2008) in the same pass; ``selective`` (error loss,
:mod:`ooc_svm.solvers.perf.selective`) iterates on the rows near the margin kept in memory,
with full passes only to refresh them and certify; ``svmperf`` (error loss, :mod:`.svmperf`)
is SVMperf 3.00's loop (loose inner QP, first-above-mean slack, shrinking) plus the certificate.

Stopping rule — ``paper``: the most violated constraint is violated by at most ε,
ξ' ≤ ξ_W + ε (Alg. 1 line 9 / Alg. 2 line 26), returning that w; ``accelerated``:
P(w_b) − D(α) ≤ ε·C_perf with D the OP3 dual over W, so P(w_b) ≤ P* + C·n·ε (Theorem 3).

``c_perf`` is SVMperf's ``-c`` (loss in percent): C = 100·c/n (error) or 100·c/m (ranks);
SVMperf's ``-e 0.1`` is our ε = 0.001.

Layout: :mod:`.algorithms` (the table of variants: what each solves, reads, supports and
runs), :mod:`.params` (Params), :mod:`.driver` (``solve``: the variant's entry point),
:mod:`.passes` (per-shard functions, reductions),
:mod:`.working_set` (cuts, QP glue), :mod:`.error`, :mod:`.rank`, :mod:`.ovr` (one-vs-rest
with fused passes), :mod:`.common` (driver helpers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import SolverError, lazy_exports
from ..contract import Entry, SolverSpec
from .algorithms import ALGORITHMS, DENSE_VECTORS, Algorithm, algorithm
from .params import DEFAULTS, LOSSES, VARIANTS, Params

if TYPE_CHECKING:
    from ...store.format import StoreMeta

#: names imported from a submodule on first use (the package itself stays light: ``train``
#: reads ``Params`` and ``STOPPING_RULE`` to build its flags without loading numba);
#: the private helpers are those selective and scripts/scale.py import from here
_LAZY = {
    **dict.fromkeys(("_cut_grid", "_finite", "_line_grid", "_Progress", "_resolve_C"), ".common"),
    **dict.fromkeys(("_error_steps", "_solve_error"), ".error"),
    **dict.fromkeys(("SUPPORTS_OVR_CHECKPOINT", "solve_ovr"), ".ovr"),
    # solve(store, engine, params, *, callback=None, checkpoint=None) -> Result
    "solve": ".driver",
    **dict.fromkeys(
        (
            "COMPACT_MIN_DIM",
            "acc_row",
            "merge_acc",
            "pass_accumulate",
            "pass_labels",
            "pass_many",
            "pass_scores",
            "pass_segment",
            "pass_single",
            "reduce_cut",
            "reduce_many",
            "_finish_accumulator",
            "_new_accumulator",
        ),
        ".passes",
    ),
    **dict.fromkeys(("_golden", "_Ranking", "_solve_rank"), ".rank"),
    **dict.fromkeys(
        (
            "QP_STALL_FAILS",
            "QP_MAX_STEPS",
            "QP_MAX_SMO_STEPS",
            "WorkingSet",
            "check_qp",
            "_qp_atol",
        ),
        ".working_set",
    ),
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "COMPACT_MIN_DIM",
    "DEFAULTS",
    "DENSE_VECTORS",
    "LOSSES",
    "QP_STALL_FAILS",
    "QP_MAX_STEPS",
    "QP_MAX_SMO_STEPS",
    "SPEC",
    "STOPPING_RULE",
    "SUPPORTS_CHECKPOINT",
    "SUPPORTS_OVR_CHECKPOINT",
    "VARIANTS",
    "Params",
    "SolverError",
    "WorkingSet",
    "acc_row",
    "check_qp",
    "merge_acc",
    "pass_accumulate",
    "pass_labels",
    "pass_many",
    "pass_scores",
    "pass_segment",
    "pass_single",
    "reduce_cut",
    "reduce_many",
    "solve",
    "solve_ovr",
]

#: each variant's stopping rule, from its row (``train --help``)
STOPPING_RULE = "; ".join(f"{a.name}: {a.stopping}" for a in ALGORITHMS.values() if a.stopping)

#: ``--checkpoint`` / ``--resume`` are supported (every loss; the variants whose row says so)
SUPPORTS_CHECKPOINT = any(a.checkpoint for a in ALGORITHMS.values())


def fused_ovr(params: Params) -> bool:
    """Whether one-vs-rest runs the classes fused (:func:`solve_ovr`): the row's
    ``ovr_fused`` (``dcd`` trains one class after the other: its sweeps update w row by row,
    nothing to share); a row without one-vs-rest goes to :func:`solve_ovr` too, which refuses
    it in one line."""
    row = algorithm(params.variant)
    return row.ovr_fused or not row.ovr


def _progress_label(params: Params) -> str:
    """What the row's stop test measures: the most violated constraint's violation
    (``paper``) or the gap (the others)."""
    return "viol" if algorithm(params.variant).stop == "violation" else "gap"


def _sweep_mode(spec: SolverSpec, params: Params, meta: StoreMeta) -> str:
    """The error loss sweeps C in shared passes where the row says so (``sweep_shared``),
    every class of a multiclass store too; the other losses and rows train every C on its
    own."""
    row = algorithm(params.variant)
    if meta.label_kind == "multiclass":
        shared = row.sweep_shared and params.loss in (None, "error")
    else:
        shared = row.sweep_shared and params.resolve_loss(meta) == "error"
    return "shared" if shared else "independent"


SPEC = SolverSpec(
    name="perf",
    Params=Params,
    stopping_rule=STOPPING_RULE,
    problem="liblinear",
    tolerance="eps",
    progress_label=_progress_label,
    violation_label="ξ violation of the most\nviolated constraint",
    primal_objective=True,
    solve=Entry(f"{__name__}.driver", "solve"),
    solve_ovr=Entry(f"{__name__}.ovr", "solve_ovr"),
    ovr_fused=fused_ovr,
    solve_sweep=Entry(f"{__name__}.ovr", "solve_sweep"),
    checkpoint=SUPPORTS_CHECKPOINT,
    ovr_checkpoint=True,
    sweep_mode=_sweep_mode,
    algorithm="variant",
)
