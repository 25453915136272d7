"""``--solver active-set``: Scheinberg's SVM-QP dual active-set method over streamed shards.

Problem (LIBSVM's C-SVC dual; Scheinberg, *An efficient implementation of an active set
method for SVMs*, JMLR 2006, eq. (2))::

    min_α  ½ αᵀQα − eᵀα    s.t.  yᵀα = 0,  0 ≤ αᵢ ≤ C,     Q_ij = yᵢ yⱼ K(xᵢ, xⱼ)

decision function f(x) = Σⱼ yⱼαⱼK(xⱼ, x) − β (β: multiplier of yᵀα = 0, system (5)).

Stopping rule (§2 Step 2(iii), checked in a full streamed pricing pass): every bound
variable's reduced cost is ≥ −tol (yᵢf(xᵢ) ≥ 1 − tol where αᵢ = 0, ≤ 1 + tol where αᵢ = C),
the free variables solving the reduced problem (4) exactly; then an independent KKT pass.

Paper sections → modules:

- §2 Steps 0–2, §2.1–2.2 (reduced problem through an updated Cholesky factor, infinite
  steps when Q_ss is singular): :mod:`.working_set`, :mod:`.cholesky`;
- §4.1 pricing (major iteration = one streamed pass; ``sprint`` / ``shrinking``):
  :mod:`.passes`;
- §4.2 memory saving (Q columns of I_s over the working rows only): :mod:`.columns`;
- §4.3–4.4 warm start / incremental (``--init``), the driver, checkpoints: :mod:`.driver`;
- parameters and tuning constants: :mod:`.params`; numba kernels: :mod:`._numba`.
"""

from __future__ import annotations

from .. import lazy_exports
from ..contract import Entry, SolverSpec
from .params import DEFAULTS, STOPPING_RULE, SUPPORTS_CHECKPOINT, Params

#: imported on first use: the package stays light (``train`` reads ``Params`` and
#: ``STOPPING_RULE`` to build its flags without loading numba)
__getattr__ = lazy_exports(
    __name__,
    {
        "KernelParams": "...kernels.kernel_functions",
        "KernelColumns": ".columns",
        "LinearColumns": ".columns",
        "Counters": ".working_set",
        "WorkingSet": ".working_set",
        # solve(store, engine, params, *, callback=None, checkpoint=None) -> Result
        "solve": ".driver",
        # solve_warm(store, engine, params, init, *, callback=None) -> Result (a C sweep)
        "solve_warm": ".driver",
    },
)

__all__ = [
    "DEFAULTS",
    "SPEC",
    "STOPPING_RULE",
    "SUPPORTS_CHECKPOINT",
    "Counters",
    "KernelColumns",
    "KernelParams",
    "LinearColumns",
    "Params",
    "WorkingSet",
    "solve",
    "solve_warm",
]

SPEC = SolverSpec(
    name="active-set",
    Params=Params,
    stopping_rule=STOPPING_RULE,
    solve=Entry(f"{__name__}.driver", "solve"),
    solve_warm=Entry(f"{__name__}.driver", "solve_warm"),
    checkpoint=SUPPORTS_CHECKPOINT,
    checkpoint_often={"checkpoint_seconds": 1e-9},
    algorithm="pricing",
)
