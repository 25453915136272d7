"""Parameters, stopping rule and tuning constants of ``--solver active-set``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from ..params import KernelSolverParams, param

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver active-set`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "active-set"
    SUPPORTS_CLASS_WEIGHT: ClassVar[bool] = True

    tol: float = param(
        1e-3, "stop when every bound variable's reduced cost is >= -tol (Step 2(iii))", gt=0
    )
    max_iter: int = param(
        10_000_000,
        "active-set (minor) iterations; reaching it is reported as not converged",
        ge=0,
    )
    seed: int = param(0, "tie-breaking among equal reduced costs, probe vectors")
    cache_mb: float = param(
        256.0,
        "Q columns of I_s over the working rows + the Cholesky factor, MiB (section 4.2)",
        gt=0,
    )
    pricing: str = param(
        "sprint", "pricing strategy of Scheinberg 2006 section 4.1", choices=("sprint", "shrinking")
    )
    sprint_size: int = param(
        0,
        "rows |I0'|+|Ic'| pulled into memory per major iteration (0: 5*sqrt(rows), at most "
        "8000, less if --cache-mb is short)",
        ge=0,
        note=" (0 = from the memory budget)",
    )
    shrink_after: int = param(
        100, "shrinking: drop a row after this many non-negative pricings in a row", ge=1
    )
    check: bool = param(True, "final independent KKT check pass (--no-check skips it)", cli="no")


DEFAULTS = Params.defaults()

STOPPING_RULE = (
    "every bound variable's reduced cost (s for alpha=0, xi for alpha=C) >= -tol in a full "
    "pricing pass, free variables optimal for the reduced QP (Scheinberg 2006, Step 2(iii))"
)

#: ``--checkpoint`` / ``--resume``: the state is saved after every major iteration.
SUPPORTS_CHECKPOINT = True

#: automatic sprint size: SPRINT_SQRT·√n_rows rows (balances the O(n·|Δ|) cost of a pass
#: against the O(|W|·n_s) cost of pricing the working rows), at most SPRINT_AUTO_MAX
SPRINT_SQRT = 5.0
SPRINT_AUTO_MAX = 8000
#: smallest working set a major iteration asks for
MIN_CANDIDATES = 64
#: relative probe error of the factor above which it is rebuilt
REFACTOR_TOL = 1e-9
#: factor updates between two probe checks
CHECK_EVERY = 64
#: pricings between two exact (full) gradient refreshes of the working set
FULL_FLUSH_EVERY = 16
