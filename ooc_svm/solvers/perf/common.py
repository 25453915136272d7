"""Driver helpers shared by the error, rank and one-vs-rest drivers of perf."""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from .. import Callback
from .params import Params

log = logging.getLogger(__name__)


def _resolve_C(params: Params, count: int) -> float:
    if params.c_perf is not None:
        return 100.0 * float(params.c_perf) / count
    return float(params.C)


def _line_grid(points: int) -> np.ndarray:
    points = max(1, int(points))
    return np.concatenate([np.arange(1, points + 1) / points, [1.25, 1.5, 2.0, 3.0]])


def _cut_grid(points: int, mu: float) -> np.ndarray:
    """Step lengths of the candidate cuts: from μ (k* = 0) to 1 (k* = 1), denser near μ."""
    points = max(1, int(points))
    if points == 1:
        return np.array([1.0])
    t = np.arange(points) / (points - 1)
    return mu + (1.0 - mu) * t**1.5


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


class _Progress:
    def __init__(self, engine, callback: Callback | None):
        self.engine = engine
        self.callback = callback
        self.history: list[dict] = []
        self.t0 = time.perf_counter()
        self.p0 = engine.passes + getattr(engine, "partial_passes", 0)

    def passes(self) -> int:
        return self.engine.passes + getattr(self.engine, "partial_passes", 0) - self.p0

    def emit(self, rec: dict) -> None:
        rec["passes"] = self.passes()
        rec["seconds"] = time.perf_counter() - self.t0
        self.history.append(rec)
        log.debug(
            "perf it %d: obj %.10g xi %.6g viol %s |W| %d pass %.3fs",
            rec["iteration"],
            rec["objective"],
            rec["xi"],
            rec["violation"],
            rec["working_set"],
            rec["pass_seconds"],
        )
        if self.callback is not None:
            self.callback(dict(rec))
