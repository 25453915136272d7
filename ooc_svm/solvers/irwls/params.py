"""Parameters of ``--solver irwls``: :class:`Params`, its stopping rule (kept apart from the
driver so that ``ooc-svm train`` builds its flags without importing the algorithm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..params import KernelSolverParams, param

#: working-set selections of section 3 (``--strategy``)
STRATEGIES = ("random", "largest", "smallest")


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver irwls`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "irwls"
    SUPPORTS_CLASS_WEIGHT: ClassVar[bool] = True

    tol: float = param(1e-3, "stopping conditions (9)-(11): |y_i e_i| within tol", gt=0)
    max_iter: int = param(
        100_000,
        "outer iterations (working sets); reaching it is reported as not converged",
        ge=0,
    )
    seed: int = param(0, "the random selection's draws (seeded per iteration and shard)")
    cache_mb: float = param(
        256.0, "kernel columns K(shard rows, x_j) of rows whose beta keeps changing, MiB", ge=0
    )
    working_set: int = param(600, "q, rows per working set (chunk); one streamed pass each", ge=2)
    strategy: str = param(
        "random",
        "working-set selection of section 3 (random is the paper's)",
        choices=STRATEGIES,
    )


DEFAULTS = Params.defaults()

STOPPING_RULE = (
    "Perez-Cruz et al. eqs. (9)-(11) on every row: y_i e_i < tol at beta_i=0, -y_i e_i < tol "
    "at beta_i=C, |y_i e_i| < tol for 0<beta_i<C (e_i = y_i - f(x_i)), confirmed by an "
    "independent KKT pass"
)

#: ``--checkpoint`` / ``--resume``: the state is saved after every outer iteration.
SUPPORTS_CHECKPOINT = True
