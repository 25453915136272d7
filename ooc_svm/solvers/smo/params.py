"""Parameters of ``--solver smo``: the dataclass with each field's default, help and range,
and the stopping rule the card shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..params import KernelSolverParams, param


@dataclass(frozen=True)
class Params(KernelSolverParams):
    """Parameters of ``--solver smo`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "smo"
    SUPPORTS_CLASS_WEIGHT: ClassVar[bool] = True
    BUDGET_SHARES: ClassVar[dict[str, float]] = {"cache_mb": 0.25, "working_mb": 0.25}

    tol: float = param(1e-3, "KKT tolerance (LIBSVM -e, Platt's tol)", gt=0)
    max_iter: int = param(10_000_000, "SMO steps; reaching it is reported as not converged", ge=0)
    seed: int = param(0, "Platt's random starting points; the decomposition's first sample")
    cache_mb: float = param(256.0, "kernel column cache budget in MiB", ge=0)
    selection: str = param(
        "wss2",
        "working-set selection: wss2 = Fan et al. 2005 second order (LIBSVM), platt = Platt "
        "1998 as written",
        choices=("wss2", "platt"),
    )
    shrinking: bool = param(True, "LIBSVM shrinking (wss2 only)", cli="bool")
    working_mb: float = param(256.0, "memory budget of the in-memory working set (MiB)", gt=0)
    working_rows: int = param(0, "cap on in-memory working rows (0: from --working-mb)", ge=0)
    checkpoint_every: int = param(
        100_000, "wss2 in memory: SMO steps per chunk (--checkpoint saves after each)", ge=0
    )


DEFAULTS = Params.defaults()
