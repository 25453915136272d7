"""Decision values of any model over a store, streamed shard by shard (below the model:
:meth:`ooc_svm.model.model.Model.decision_function` of a store calls :func:`score_store`).

One entry point per shard, :func:`score_shard(shard, broadcast) <score_shard>`, for every
kind of model: linear (binary or one-vs-rest: the numba CSR kernels), kernel (binary or
one-vs-rest: the SV expansion of :mod:`ooc_svm.model.expansion`), one-vs-one
(:mod:`ooc_svm.model.ovo`). :func:`make_broadcast` builds the picklable broadcast once per
pass; the engine runs the shards next to the data (threads locally, workers on Dask).
Memory: the model plus one shard and its scores per engine thread.

- :func:`iter_scored` yields (labels, scores, qid) per batch of whole shards (at most
  ``max_rows`` rows), in store order; :func:`score_store` returns all scores (n_rows values).

The model is only an argument here, typed by the protocol
:class:`~ooc_svm.model.model_like.ModelLike`: this module sits below
:mod:`ooc_svm.model.model`. Compatibility checks and output files:
:mod:`ooc_svm.evaluation.scoring`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine import concat_partials
from ..kernels.csr import csr_matvec, u32
from .expansion import ScoringBroadcast, scoring_broadcast
from .expansion import score_shard as expansion_score_shard
from .ovo import ovo_decision_function

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..store.base import Store
    from ..store.format import Shard
    from .model_like import ModelLike


def is_ovr(model: ModelLike) -> bool:
    """True for one-vs-rest models (one intercept per class)."""
    return np.ndim(model.intercept_) != 0


# ------------------------------------------------------------------------------------------
# one shard
# ------------------------------------------------------------------------------------------


@dataclass
class LinearBroadcast:
    """Scoring data of a linear model: W (n_outputs, width) and b (n_outputs,)."""

    W: np.ndarray
    b: np.ndarray


@dataclass
class OvoBroadcast:
    """Scoring data of a one-vs-one model (LIBSVM's layout, imported): the model itself,
    scored per shard in blocks of rows by :func:`ooc_svm.model.ovo.ovo_decision_function`."""

    model: ModelLike


Broadcast = LinearBroadcast | ScoringBroadcast | OvoBroadcast


def make_broadcast(model: ModelLike, n_features: int) -> Broadcast:
    """Picklable scoring data for ``model`` on a store with ``n_features`` columns."""
    if model.kind == "ovo":
        return OvoBroadcast(model)
    if model.kind == "linear":
        coef = np.atleast_2d(np.asarray(model.coef_, dtype=np.float64))
        # the model's width, never the store's: store columns the model never saw weigh 0
        # (score_shard drops them), so a wide store costs no dense vector of its width
        W = np.zeros((coef.shape[0], int(model.n_features)))
        W[:, : coef.shape[1]] = coef
        b = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
        if b.shape[0] != W.shape[0]:
            b = np.full(W.shape[0], float(b[0]))
        return LinearBroadcast(W, b)
    return scoring_broadcast(model)


def score_shard(shard: Shard, bc: Broadcast) -> np.ndarray:
    """Decision values of every row of a shard: (n,) binary, (n, n_classes) one-vs-rest,
    (n, n_pairs) one-vs-one."""
    if isinstance(bc, ScoringBroadcast):
        return expansion_score_shard(shard, bc)
    if isinstance(bc, OvoBroadcast):
        ix = shard.indices
        width = max(bc.model.n_features, int(ix.max()) + 1 if ix.size else 0)
        return ovo_decision_function(bc.model, shard.to_scipy(width))
    W, b = bc.W, bc.b
    n = shard.n_rows
    indptr, ix, data = _within(shard, W.shape[1])
    out = np.empty((n, W.shape[0]))
    col = np.empty(n)
    for k in range(W.shape[0]):
        csr_matvec(indptr, ix, data, W[k], float(b[k]), col)
        out[:, k] = col
    return out[:, 0] if W.shape[0] == 1 else out


def _within(shard, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shard's CSR arrays without the entries in columns >= ``width`` (weight 0)."""
    ix = u32(shard.indices)
    if not ix.size or int(ix.max()) < width:
        return shard.indptr, ix, shard.data
    a, z = int(shard.indptr[0]), int(shard.indptr[-1])
    ix, data = ix[a:z], shard.data[a:z]
    keep = ix < width
    rows = np.repeat(np.arange(shard.n_rows), np.diff(shard.indptr))
    indptr = np.zeros(shard.n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=shard.n_rows), out=indptr[1:])
    return indptr, ix[keep], data[keep]


# ------------------------------------------------------------------------------------------
# a store
# ------------------------------------------------------------------------------------------


def _predict_fn(shard, bc):
    sbc, with_qid = bc
    s = score_shard(shard, sbc)
    q = shard.qid if (with_qid and shard.qid is not None) else None
    return [
        (
            np.asarray(shard.y, dtype=np.float64).copy(),
            s,
            None if q is None else np.asarray(q, dtype=np.int64).copy(),
        )
    ]


def shard_batches(store: Store, max_rows: int) -> list[list[int]]:
    """Consecutive shard ids grouped so that a group holds at most ``max_rows`` rows
    (a single shard larger than that forms its own group)."""
    groups: list[list[int]] = []
    cur: list[int] = []
    rows = 0
    for i, s in enumerate(store.meta.shards):
        if cur and rows + s.n_rows > max_rows:
            groups.append(cur)
            cur, rows = [], 0
        cur.append(i)
        rows += s.n_rows
    if cur:
        groups.append(cur)
    return groups


def iter_scored(
    store: Store, engine: Engine, model: ModelLike, max_rows: int, with_qid: bool = True
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Yield (labels, scores, qid or None) per batch of shards, in store order."""
    bc = (make_broadcast(model, store.meta.n_features), with_qid and store.meta.has_qid)
    for ids in shard_batches(store, max(1, int(max_rows))):
        parts = engine.map_reduce(store, _predict_fn, bc, reduce=concat_partials, shards=ids)
        y = np.concatenate([p[0] for p in parts])
        s = np.concatenate([p[1] for p in parts])
        q = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
        yield y, s, q


def score_store(
    model: ModelLike, store: Store, engine: Engine | None = None, max_rows: int = 1_000_000
) -> np.ndarray:
    """All decision values of ``store`` (store order), computed shard by shard: only the
    scores are kept, never the rows. ``engine=None`` uses the default local engine."""
    from ..engine import make_engine

    if engine is None:
        with make_engine(None) as eng:
            return score_store(model, store, eng, max_rows)
    parts = [s for _, s, _ in iter_scored(store, engine, model, max_rows, with_qid=False)]
    if parts:
        return np.concatenate(parts)
    return np.zeros((0, len(model.classes)) if is_ovr(model) else 0)


__all__ = [
    "Broadcast",
    "LinearBroadcast",
    "OvoBroadcast",
    "is_ovr",
    "iter_scored",
    "make_broadcast",
    "score_shard",
    "score_store",
    "shard_batches",
]
