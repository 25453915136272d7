"""``--solver smo``: Sequential Minimal Optimization, out of core (Platt 1998; Fan et al. 2005).

Problem (C-SVC dual, LIBSVM's sign convention)::

    min_α  ½ αᵀQα − eᵀα   s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,   Q_ij = y_i y_j K(x_i, x_j)

f(x) = Σ_j y_j α_j K(x_j, x) + intercept (linear / rbf / poly / sigmoid kernels on sparse rows);
``intercept_`` is −b (Platt's u = w·x − b) or −ρ (LIBSVM).

``--selection wss2`` (default; :mod:`.working_set`, :mod:`.decomposition`) — Fan, Chen & Lin 2005,
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

Layout: ``__init__`` (the card), ``params``, ``driver`` (``solve``, ``solve_warm``, the
epilogue), ``working_set`` (wss2: LIBSVM on W, in ~0.05 s
slices so Ctrl-C and ``--checkpoint-seconds`` act between any two steps without changing
them), ``decomposition`` (out of core, checkpointed after every outer step), ``platt``,
``_numba`` (numba: ``wss2``, ``platt``), ``common`` (shard functions and tuples).

Memory: α lives in per-shard engine state; the driver holds W (or Platt's non-bound rows),
the support vectors (kernel models need them), O(n_features) vectors and the kernel cache
(``--cache-mb``). It does not grow with the number of rows beyond α.
"""

from __future__ import annotations

from .. import lazy_exports
from ..contract import Entry, SolverSpec
from .params import DEFAULTS, Params

__all__ = [
    "DEFAULTS",
    "SPEC",
    "STOPPING_RULE",
    "SUPPORTS_CHECKPOINT",
    "Params",
    "solve",
    "solve_warm",
]

#: imported on first use: the package stays light (``train`` reads ``Params`` and
#: ``STOPPING_RULE`` to build its flags without loading numba)
__getattr__ = lazy_exports(
    __name__,
    {
        # solve(store, engine, params, *, callback=None, checkpoint=None) -> Result
        "solve": ".driver",
        # solve_warm(store, engine, params, init, *, callback=None) -> Result (a C sweep)
        "solve_warm": ".driver",
    },
)

#: ``--checkpoint`` works for wss2: in memory (state saved between chunks and every
#: ``--checkpoint-seconds``) and out of core (saved after every outer iteration).
SUPPORTS_CHECKPOINT = True

STOPPING_RULE = (
    "wss2: maximal violating pair m(a)-M(a) <= tol over all rows (LIBSVM); platt: an "
    "examine-all pass changes nothing; both confirmed by an independent KKT pass"
)

SPEC = SolverSpec(
    name="smo",
    Params=Params,
    stopping_rule=STOPPING_RULE,
    record_labels={"objective": "dual"},
    few_records_hint=(
        " (smo in memory records once per --checkpoint-every SMO steps: train again with "
        "a smaller --checkpoint-every to record more)"
    ),
    solve=Entry(f"{__name__}.driver", "solve"),
    solve_warm=Entry(f"{__name__}.driver", "solve_warm"),
    checkpoint=SUPPORTS_CHECKPOINT,
    # in memory: a chunk of 20 SMO steps, each saved
    checkpoint_often={"checkpoint_every": 20},
    algorithm="selection",
)
