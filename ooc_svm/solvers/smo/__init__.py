"""``--solver smo``: Sequential Minimal Optimization, out of core (Platt 1998; Fan et al. 2005).

Problem (C-SVC dual, LIBSVM's sign convention)::

    min_α  ½ αᵀQα − eᵀα   s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,   Q_ij = y_i y_j K(x_i, x_j)

f(x) = Σ_j y_j α_j K(x_j, x) + intercept (linear / rbf / poly / sigmoid kernels on sparse rows);
``intercept_`` is −b (Platt's u = w·x − b) or −ρ (LIBSVM).

``--selection wss2`` (default; :mod:`.wss2`, :mod:`.decomposition`) — Fan, Chen & Lin 2005,
    JMLR 6, section 3 (WSS 2, second order) with LIBSVM's gradient maintenance, shrinking and
    gradient reconstruction, in numba, on an in-memory working set W: the whole problem
    when it fits ``--working-mb`` / ``--working-rows``, else a decomposition with streamed
    passes for the gradient of every row outside W.
    Stopping rule: m(α) − M(α) ≤ tol over ALL rows (LIBSVM's), confirmed by an independent
    streamed KKT pass.

``--selection platt`` (:mod:`.platt`) — Platt 1998, section 2 as written (pseudo-code of
    section 2.5: eqs. 13–22, first choice alternating examine-all / non-bound passes, second
    choice max |E₁−E₂|), one shard at a time.
    Stopping rule: an examine-all pass changes nothing, then the independent KKT pass must
    confirm |violation| ≤ tol on every row, else examine-all passes continue.

Layout: ``__init__`` (Params, solve, the epilogue), ``wss2`` (LIBSVM on W, in ~0.05 s
slices so Ctrl-C and ``--checkpoint-seconds`` act between any two steps without changing
them), ``decomposition`` (out of core, checkpointed after every outer step), ``platt``,
``kernels`` (numba), ``common`` (shard functions and tuples).

Memory: α lives in per-shard engine state; the driver holds W (or Platt's non-bound rows),
the support vectors (kernel models need them), O(n_features) vectors and the kernel cache
(``--cache-mb``). It does not grow with the number of rows beyond α.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import Callback, Result
from .params import DEFAULTS, Params

__all__ = ["DEFAULTS", "STOPPING_RULE", "SUPPORTS_CHECKPOINT", "Params", "solve", "solve_warm"]

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer
    from ...engine.base import Engine
    from ...store.base import Store

#: ``--checkpoint`` works for wss2: in memory (state saved between chunks and every
#: ``--checkpoint-seconds``) and out of core (saved after every outer iteration).
SUPPORTS_CHECKPOINT = True

STOPPING_RULE = (
    "wss2: maximal violating pair m(a)-M(a) <= tol over all rows (LIBSVM); platt: an "
    "examine-all pass changes nothing; both confirmed by an independent KKT pass"
)


def solve(
    store: Store,
    engine: Engine,
    params: Params,
    *,
    callback: Callback | None = None,
    checkpoint: Checkpointer | None = None,
) -> Result:
    """Train with SMO; see the module docstring for the problem and the stopping rules.

    With ``checkpoint`` (a :class:`~ooc_svm.checkpoint.Checkpointer`), wss2 saves its state
    every ``checkpoint_every`` SMO steps and every ``checkpoint_seconds`` (in memory) or
    after every outer iteration (out of core) and, when resuming, starts from the latest
    checkpoint; a resumed run ends with exactly the model of an uninterrupted one.
    """
    from .driver import _solve  # the algorithm (numba kernels) loads when it runs

    return _solve(store, engine, params, callback, checkpoint)


def solve_warm(
    store: Store, engine: Engine, params: Params, init: Any, *, callback: Callback | None = None
) -> Result:
    """:func:`solve` started from ``init`` (a C sweep's next value): a binary model of this
    store with its dual coefficients (trained at ``init.info["C"]``). wss2 in memory starts
    from its α scaled into the box (α·C/C_old, yᵀα = 0 kept) and computes the gradient from
    it; the other paths start from α = 0. The model returned keeps its dual coefficients
    (linear kernel included), so it can start the next value."""
    from .driver import _solve

    return _solve(store, engine, params, callback, None, init=init, keep_dual=True)
