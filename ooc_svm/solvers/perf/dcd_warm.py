"""Warm starts of ``--variant dcd`` (``train --init MODEL``): the model's α, one per row.

A dcd model keeps its dual variables (``warm_alpha_``: float32, one per training row in the
store's row order; ``info["warm_alpha"]``: their rows, C and hinge), unless trained with
``--no-warm-state``. A later run on the store grown by ``ingest --append`` starts from them
when the store still begins with the model's rows (:func:`~ooc_svm.solvers.warm.rows_status`
``"prefix"``: the model's shard table, or its rows' fingerprint), or with the rows left of
them after ``ooc-svm drop`` removed the oldest shards (``"dropped"``): αᵢ of the rows the
model knew and the store still has, scaled by C / C_old and clipped to this run's bounds
(class weights included), and α = 0 on the appended rows. w = Σαᵢyᵢx̃ᵢ is computed from
them over the rows (:func:`~ooc_svm.solvers.perf._numba.dcd.add_rows`), so the dual point
and the primal one agree, and the run stops on the cold run's test
(:func:`.dcd_cert.gap_scale`).

α of other rows (the store changed or was re-ingested: its fingerprint differs), of a
model that records no rows, or of a model that keeps none, is not used: ``-v`` says why
and dcd starts from α = 0. A model of another width, label set or loss is refused in one
line (:func:`~ooc_svm.solvers.warm.check_model`, :func:`.warm.check_perf_model`).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..warm import (
    Start,
    check_model,
    rescale,
    rows_status,
    start_from,
    trained_rows,
)
from .warm import check_perf_model

if TYPE_CHECKING:
    from ...model.model import Model
    from ...store.format import StoreMeta

log = logging.getLogger(__name__)

#: a stored α within this relative distance of its bound is put at the bound (float32 of C
#: is not C: the row would otherwise count as free and never be shrunk)
SNAP = 1e-6


def alpha_unusable(model: Model, meta: StoreMeta, status: str | None = None) -> str | None:
    """Why the α ``model`` keeps cannot start dcd on a store with ``meta``, or None when it
    can (the store begins with the model's rows, one α each). ``status``: the model's
    :func:`~ooc_svm.solvers.warm.rows_status` there, when known."""
    alpha = getattr(model, "warm_alpha_", None)
    if alpha is None:
        return (
            "the model keeps no dual variables (trained by another variant, or with "
            "--no-warm-state)"
        )
    status = rows_status(model, meta) if status is None else status
    n_old = trained_rows(model)
    if status not in ("prefix", "dropped") or n_old is None:
        return {
            "changed": "the store does not begin with the model's rows (their fingerprint "
            "or shards differ: the data changed or was re-ingested)",
            "any": "the model is a start for any rows, not for the store's",
        }.get(status, "the model records no rows to match its dual variables to")
    if int(np.asarray(alpha).shape[0]) != n_old:
        return f"the model keeps {np.asarray(alpha).shape[0]} dual variables for {n_old} rows"
    return None


def has_alpha(init: Any, meta: StoreMeta) -> bool:
    """Whether ``init`` (a model or its directory) keeps α that can start dcd on ``meta``
    (what :mod:`.auto` picks dcd for a warm start by); False when it cannot be read (the
    variant it falls to names the problem). A directory's ``model.json`` alone is read:
    ``auto`` asks on every sizing question, and loading a wide model's arrays each time
    read it eight times in one run (its α is checked against this count when loaded)."""
    from ...model.model import Model

    if isinstance(init, Start):
        if init.loaded or not init.matches(meta):
            start = start_from(init, meta)
            assert start is not None
            return alpha_unusable(start.model, meta, start.status) is None
        init = init.source  # a directory not read yet: its model.json alone
    if isinstance(init, Model):
        return alpha_unusable(init, meta) is None
    info = _model_info(init)
    spec = info.get("warm_alpha") if info is not None else None
    if not isinstance(spec, dict) or not isinstance(spec.get("n_rows"), int):
        return False
    head = SimpleNamespace(info=info)  # what rows_status and trained_rows read
    status = rows_status(head, meta)  # type: ignore[arg-type]
    return status in ("prefix", "dropped") and trained_rows(head) == spec["n_rows"]  # type: ignore[arg-type]


def _model_info(init: Any) -> dict | None:
    """``info`` of the model directory ``init`` from its ``model.json``, or None."""
    import json
    import os

    from ...model.model_files import MAX_META_BYTES

    if not isinstance(init, str | os.PathLike):
        return None
    try:
        with open(os.path.join(os.fspath(init), "model.json"), encoding="utf-8") as f:
            meta = json.loads(f.read(MAX_META_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    info = meta.get("info") if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else None


def alpha_start(init: Any, meta: StoreMeta, classes: list[float], C: float) -> np.ndarray | None:
    """α over the store's rows from ``init`` (a :class:`~ooc_svm.solvers.warm.Start`, or
    what :func:`~ooc_svm.solvers.warm.start_from` takes), or None for a cold start (``-v``
    says why).

    Refuses (:class:`~ooc_svm.solvers.SolverError`) a model of another width, label set,
    hashing or loss. α of the model's rows is scaled by C / C_old; the appended rows get 0
    (the bounds are applied per block, :func:`clipped`).
    """
    start = start_from(init, meta)
    assert start is not None
    where, model = start.where, start.model
    check_model(model, meta, where, classes=classes)
    check_perf_model(model, where, "error")
    why = alpha_unusable(model, meta, start.status)
    if why is not None:
        log.info("perf dcd: %s: %s; its dual variables are not used: dcd starts from 0", where, why)
        return None
    old = np.asarray(model.warm_alpha_, dtype=np.float64)
    gone = start.dropped
    old = old[gone:]  # the rows `ooc-svm drop` removed take their α with them
    spec = model.info.get("warm_alpha")
    c_old = float(spec.get("C", C)) if isinstance(spec, dict) else C
    alpha = np.zeros(int(meta.n_rows))
    alpha[: old.shape[0]] = rescale(old, C, c_old)
    log.info(
        "perf dcd: warm start from %s: dual variables of its %d rows%s, 0 for the %d appended",
        where,
        old.shape[0],
        f" ({gone} of its oldest rows dropped)" if gone else "",
        alpha.shape[0] - old.shape[0],
    )
    return alpha


def clipped(alpha: np.ndarray, sign: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``alpha`` in [0, Uᵢ] (``upper`` by class: index 0 for sign −1), values within
    :data:`SNAP` of Uᵢ put at it."""
    u = np.where(sign > 0, upper[1], upper[0])
    out = np.minimum(np.maximum(alpha, 0.0), u)
    out[out >= u * (1.0 - SNAP)] = u[out >= u * (1.0 - SNAP)]
    return out


def attach_alpha(model: Model, alphas: list[np.ndarray], C: float, hinge: str) -> None:
    """Keep the run's α (the blocks' ``alphas``, in the store's row order) in ``model`` for a
    later warm start: ``warm_alpha_`` (float32: 4 bytes a row) and ``info["warm_alpha"]``."""
    alpha = np.concatenate(alphas) if alphas else np.zeros(0)
    if not np.all(np.isfinite(alpha)):
        return
    model.warm_alpha_ = alpha.astype(np.float32)
    model.info["warm_alpha"] = {"n_rows": int(alpha.shape[0]), "C": float(C), "hinge": hinge}
