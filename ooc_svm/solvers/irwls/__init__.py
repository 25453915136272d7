"""``--solver irwls``: IRWLS-SVC with chunking (Pérez-Cruz, Alarcón-Diana, Navia-Vázquez and
Artés-Rodríguez, *Fast training of support vector classifiers*, NIPS 2000).

Problem (the soft-margin SVC, linear or kernel, yᵢ ∈ {−1, +1}; LIBSVM's dual sign)::

    primal:  min_{w,b}  ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(φ(xᵢ)ᵀw + b))
    dual:    min_β  ½ βᵀHβ − 1ᵀβ   s.t.  0 ≤ βᵢ ≤ C,  yᵀβ = 0,   Hᵢⱼ = yᵢyⱼK(xᵢ, xⱼ)

Stopping rule (eqs. (9)–(11), e = ``tol``, on every row in the streamed pass, with the b of
the last working-set problem), then an independent KKT pass::

    yᵢeᵢ < e  for βᵢ = 0,    −yᵢeᵢ < e  for βᵢ = C,    |yᵢeᵢ| < e  for 0 < βᵢ < C

Paper sections → modules:

- section 2, eq. (8), Table 1 (the weighted least-squares iterations on one working set,
  with this implementation's guaranteed-descent step rule and SMO finish):
  :mod:`.working_set`;
- sections 2.1 and 3 (chunking: one streamed pass per outer iteration applies the last
  change, checks (9)–(11) and draws the next working set; kernel column cache):
  :mod:`.passes`;
- the driver (outer loop, b reset, checkpoints, the model), parameters: :mod:`.driver`
  (its module docstring has the full description of the method and its choices);
- numba kernels (the linear systems, the SMO finish, the pass's column update): :mod:`._numba`.
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
        "SubproblemResult": ".working_set",
        "irwls_working_set": ".working_set",
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
    "Params",
    "SubproblemResult",
    "irwls_working_set",
    "solve",
    "solve_warm",
]

SPEC = SolverSpec(
    name="irwls",
    Params=Params,
    stopping_rule=STOPPING_RULE,
    solve=Entry(f"{__name__}.driver", "solve"),
    solve_warm=Entry(f"{__name__}.driver", "solve_warm"),
    checkpoint=SUPPORTS_CHECKPOINT,
    checkpoint_often={"checkpoint_seconds": 1e-9},
    algorithm="strategy",
)
