"""Shared pieces of the dual solvers (smo, active-set, irwls) and of kernel-model scoring.

All dual solvers solve LIBSVM's C-SVC dual

    min_α  ½ αᵀQα − eᵀα    s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,     Q_ij = y_i y_j K(x_i, x_j)

with decision function f(x) = Σ_j y_j α_j K(x_j, x) + intercept (``intercept = −b`` in Platt's
notation u = w·x − b, ``−ρ`` in LIBSVM's).

Conventions (stable API):

- **Per-shard α.** The engine's per-shard state of a dual solver is one float64 array of
  αᵢ per shard row (:func:`init_alpha_state`); fns that take the state return it unchanged or
  updated (:func:`apply_alpha_updates`).
- **Working rows.** Rows brought into memory are a :class:`WorkingRows` (CSR + global row ids
  + ±1 labels + α), built by :func:`fetch_rows` (one streamed pass over only the shards that
  hold the rows) or :func:`build_working_rows` from fetched parts.
- **Expansions.** f(x) without intercept is an :class:`Expansion`: the SV rows and
  coefficients yᵢαᵢ (kernel) or a dense w (linear kernel). It is picklable: broadcast it.
  It lives in :mod:`ooc_svm.model.expansion` (shared with scoring) and is re-exported here.
- **KKT check.** :func:`kkt_violation_pass` is an independent streamed pass that, given α
  (shard state), the expansion and the intercept, checks every row's KKT condition and returns
  the largest violation (and LIBSVM's m(α) − M(α)).
- **Models.** :func:`make_model` builds the :class:`~ooc_svm.model.model.Model` from the SVs
  (``kind="linear"`` with ``coef_ = Σ yᵢαᵢxᵢ``, Platt eq. 22, for the linear kernel).
- **Class weights.** ``--class-weight`` gives per-class costs ``(C_neg, C_pos)``
  (:func:`dual_class_costs`): row i's box is ``0 ≤ αᵢ ≤ C_{y_i}`` (:func:`row_costs`), the
  KKT tests use ``α < C_{y_i}`` and the primal sums ``C_{y_i} ξᵢ``.
- **Warm start.** :func:`start_point`: the starting α of a warm start, read from its model
  made ready by :func:`ooc_svm.solvers.warm.dual_start` (every route: ``--init``, a C sweep's
  next value, ``--follow``, ``warm_start``).
- **Scoring.** :func:`kernel_scores_pass` streams a store against a kernel (or linear) model in
  memory bounded by the model plus one shard per engine thread (used by predict / evaluate).
"""

from __future__ import annotations

from ...model.expansion import (  # re-exported: the expansion lives in ooc_svm.expansion
    Expansion,
    ScoringBroadcast,
    kernel_scores_pass,
    make_expansion,
    primal_w,
    score_shard,
    scoring_broadcast,
)
from .costs import dual_class_costs, dual_objective, row_costs
from .finish import (
    DualFinish,
    collect_support_vectors,
    dual_result,
    finish_dual,
    finish_run,
    make_model,
)
from .interrupt import CheckpointClock, check_interrupt, interruptible
from .kkt import kkt_violation_pass
from .rows import (
    ROW_ARRAYS,
    WorkingRows,
    build_working_rows,
    fetch_rows,
    rows_from_arrays,
    rows_to_arrays,
    shard_rows,
)
from .state import (
    apply_alpha_updates,
    init_alpha_state,
    resume_shard_states,
    shard_states_to_save,
    split_updates_by_shard,
)
from .warm import start_point

__all__ = [
    "CheckpointClock",
    "DualFinish",
    "Expansion",
    "ROW_ARRAYS",
    "ScoringBroadcast",
    "WorkingRows",
    "apply_alpha_updates",
    "build_working_rows",
    "check_interrupt",
    "collect_support_vectors",
    "dual_class_costs",
    "dual_objective",
    "dual_result",
    "fetch_rows",
    "finish_dual",
    "finish_run",
    "init_alpha_state",
    "interruptible",
    "kernel_scores_pass",
    "kkt_violation_pass",
    "make_expansion",
    "make_model",
    "primal_w",
    "resume_shard_states",
    "row_costs",
    "rows_from_arrays",
    "rows_to_arrays",
    "score_shard",
    "scoring_broadcast",
    "shard_rows",
    "shard_states_to_save",
    "split_updates_by_shard",
    "start_point",
]
