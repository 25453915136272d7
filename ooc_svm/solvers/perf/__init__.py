"""``--solver perf`` (package; the solver lives in :mod:`.error` while it is split up)."""

from .error import *  # noqa: F403
from .error import (  # noqa: F401
    COMPACT_MIN_DIM,
    DEFAULTS,
    STOPPING_RULE,
    SUPPORTS_CHECKPOINT,
    SUPPORTS_OVR_CHECKPOINT,
    Params,
    SolverError,
    WorkingSet,
    _cut_grid,
    _finish_accumulator,
    _golden,
    _line_grid,
    _new_accumulator,
    _Progress,
    _qp_atol,
    _resolve_C,
    acc_row,
    merge_acc,
    pass_segment,
    reduce_cut,
    solve,
    solve_ovr,
)
