"""Cross-validated decision values for Platt's sigmoid (``train --probability``), above the
model: folds of shards, one model trained per fold, the held-out rows scored.

The decision values must come from models that did not see the rows (Platt §2.2, LIBSVM
``-b 1`` uses 5-fold cross-validation): :func:`cross_val_decision_values` trains one model per
fold of *shards* (:func:`fold_assignment`) through :func:`ooc_svm.train` on a
:class:`~ooc_svm.store.views.ShardSubsetView` and scores the held-out shards, keeping 8 bytes
per row (the decision values) plus 1 byte per row (the label sign). A store with fewer shards
than folds (a9a ingests as one shard) gets folds of rows within its shards instead
(:func:`~ooc_svm.store.views.row_folds`, seeded; the training view is a
:class:`~ooc_svm.store.views.RowFoldView`), as LIBSVM's ``-b 1`` works on any data.
:func:`fit_platt` fits the sigmoid(s) of :mod:`ooc_svm.model.probability` to them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.probability import sigmoid_train

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..store.base import Store
    from ..store.format import StoreMeta


# ---------------------------------------------------------------------------------------------
# cross-validation folds made of shards
# ---------------------------------------------------------------------------------------------
def fold_assignment(store_meta: StoreMeta, k: int, seed: int = 0) -> np.ndarray:
    """Assign whole shards to ``k`` cross-validation folds, deterministically by ``seed``.

    Shards are shuffled with ``numpy.random.default_rng(seed)``, then (largest first, ties in
    shuffled order) each goes to the fold with the fewest rows so far — folds of nearly equal
    row counts, made of whole shards, so a fold is read shard by shard and never needs a
    row-level index.

    Parameters
    ----------
    store_meta : StoreMeta or store
        Anything with ``.shards`` (``ShardInfo`` with ``n_rows``), or a store with ``.meta``.
    k : int
        Number of folds, ``2 <= k <= n_shards``.
    seed : int

    Returns
    -------
    ndarray of int64, shape (n_shards,)
        Fold of every shard.
    """
    meta = getattr(store_meta, "meta", store_meta)
    rows = np.array([int(s.n_rows) for s in meta.shards], dtype=np.int64)
    k = int(k)
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    if rows.size < k:
        raise ValueError(
            f"{k} folds need at least {k} shards but the store has {rows.size}; use fewer "
            "folds or re-ingest with a smaller --shard-rows"
        )
    order = np.random.default_rng(int(seed)).permutation(rows.size)
    order = order[np.argsort(-rows[order], kind="stable")]
    fold = np.empty(rows.size, dtype=np.int64)
    load = np.zeros(k, dtype=np.int64)
    count = np.zeros(k, dtype=np.int64)
    for s in order:
        # fewest rows, then fewest shards (so zero-row shards do not pile up), then lowest id
        c = int(np.lexsort((np.arange(k), count, load))[0])
        fold[s] = c
        load[c] += rows[s]
        count[c] += 1
    return fold


@dataclass
class CVScores:
    """Held-out decision values of a shard-fold cross-validation.

    Attributes
    ----------
    dec_values : ndarray of float64, shape (n_rows,) or (n_rows, n_classes) for OvR
        Row ``i`` scored by the model of the fold that did not contain it.
    y : ndarray of float64, shape (n_rows,)
        Labels as stored.
    folds : ndarray of int64, shape (n_shards,)
        Fold of every shard.
    classes : list of float
        Label values; for binary stores ``classes[1]`` is the positive class.
    results : list
        The ``ooc_svm.Result`` of every fold's training (objective, passes, ...).
    """

    dec_values: np.ndarray
    y: np.ndarray
    folds: np.ndarray
    classes: list[float]
    results: list = field(default_factory=list)


def cross_val_decision_values(
    store: Store,
    k: int = 5,
    seed: int = 0,
    *,
    train: Callable[..., Any],
    solver: str = "perf",
    engine: Engine | None = None,
    **params: Any,
) -> CVScores:
    """Decision values of every row from a model trained on the other shard folds.

    Trains ``k`` models with ``train`` (:func:`ooc_svm.train`) on
    :class:`~ooc_svm.store.views.ShardSubsetView` views (every shard outside one fold), then
    reads the held-out shards one at a time and scores them. Memory: the decision values
    (8 bytes per row and class) and the labels, plus one shard and one model at a time.

    Parameters
    ----------
    store : str or Store
    k, seed : int
        Folds and seed of :func:`fold_assignment`.
    train : callable
        :func:`ooc_svm.train`, called as ``train(view, solver=..., engine=..., **params)``;
        passed in because this module sits below :mod:`ooc_svm.api`, which calls it.
    solver : str
    engine : Engine, optional
        Passed to :func:`ooc_svm.train` (one engine reused by every fold saves start-up).
    **params
        Solver parameters, as for :func:`ooc_svm.train`.

    Returns
    -------
    CVScores
    """
    from ..store import open_store
    from ..store.views import RowFoldView, ShardSubsetView

    if isinstance(store, str):
        store = open_store(store)
    meta = store.meta
    k = int(k)
    by_rows = len(meta.shards) < k
    folds = _shard_folds(meta, k, seed, by_rows)
    classes = [float(c) for c in (meta.labels or [])]
    multi = _is_multiclass(store, params)
    n = int(meta.n_rows)
    dec = np.empty((n, len(classes)) if multi else n, dtype=np.float64)
    y = np.empty(n, dtype=np.float64)
    results = []
    fold_nnz = _row_fold_nnz(store, k, seed) if by_rows else None
    for c in range(k):
        t0 = time.perf_counter()
        view: RowFoldView | ShardSubsetView
        if fold_nnz is not None:
            view = RowFoldView(store, k, seed, c, fold_nnz[:, c])
            held = np.arange(len(meta.shards))
        else:
            held = np.flatnonzero(folds == c)
            view = ShardSubsetView(store, np.flatnonzero(folds != c))
        log.info("probability: fold %d/%d: training on %d rows", c + 1, k, view.meta.n_rows)
        res = train(view, solver=solver, engine=engine, **params)
        results.append(res)
        row_fold = (k, seed, c) if fold_nnz is not None else None
        _score_held_out(store, res.model, held, row_fold, y, dec)
        log.info(
            "probability: fold %d/%d done: %d passes, %.1fs",
            c + 1, k, int(res.passes or 0), time.perf_counter() - t0,
        )  # fmt: skip
    return CVScores(dec, y, folds, classes, results)


def _shard_folds(meta, k: int, seed: int, by_rows: bool) -> np.ndarray:
    """The fold of every shard (:func:`fold_assignment`), or -1 for all when the folds are
    rows (``by_rows``: fewer shards than folds); raises ValueError for too few folds or rows."""
    if not by_rows:
        return fold_assignment(meta, k, seed)
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    if meta.n_rows < k:
        raise ValueError(f"{k} folds need at least {k} rows, the store has {meta.n_rows}")
    return np.full(len(meta.shards), -1, dtype=np.int64)


def _is_multiclass(store, params: dict[str, Any]) -> bool:
    """True for a multiclass store (or ordinal with ``multiclass='ovr'``), False for a binary
    one; raises ValueError for labels that have no probabilities."""
    meta = store.meta
    multi = meta.label_kind == "multiclass" or (
        meta.label_kind == "ordinal" and params.get("multiclass") == "ovr"
    )
    if not multi and meta.label_kind != "binary":
        raise ValueError(
            f"{store.path}: probability outputs need binary or multiclass labels, the store's "
            f"are {meta.label_kind}; for integer classes stored as ordinal pass multiclass='ovr'"
        )
    return bool(multi)


def _score_held_out(
    store,
    model,
    held: np.ndarray,
    row_fold: tuple[int, int, int] | None,
    y: np.ndarray,
    dec: np.ndarray,
) -> None:
    """Labels and decision values of the held-out rows, written into ``y`` and ``dec``: the
    shards ``held``, or with ``row_fold = (k, seed, fold)`` only their rows of that fold."""
    from ..store.views import row_folds

    meta = store.meta
    for sid in held:
        shard = store.read_shard(int(sid))
        lo = int(shard.row_start)
        rows = np.arange(lo, lo + shard.n_rows)
        X = shard.to_scipy(meta.n_features)
        if row_fold is not None:
            k, seed, c = row_fold
            mine = row_folds(lo, shard.n_rows, k, seed) == c
            rows, X = rows[mine], X[mine]
        y[rows] = shard.y[rows - lo]
        if rows.size:
            dec[rows] = model.decision_function(X)


def _row_fold_nnz(store, k: int, seed: int) -> np.ndarray:
    """Non-zeros of every row fold (:func:`~ooc_svm.store.views.row_folds`) in every shard,
    shape (n_shards, k): one read of each shard."""
    from ..store.views import row_folds

    out = np.zeros((store.n_shards, k), dtype=np.int64)
    for i in range(store.n_shards):
        s = store.read_shard(i)
        f = row_folds(s.row_start, s.n_rows, k, seed)
        out[i] = np.bincount(f, weights=np.diff(s.indptr), minlength=k).astype(np.int64)
    return out


def fit_platt(cv: CVScores) -> tuple[np.ndarray, np.ndarray]:
    """Sigmoid parameters from cross-validated scores: one (A, B) per OvR class, or one pair.

    Returns
    -------
    probA, probB : ndarray of float64, shape (1,) for binary, (n_classes,) for one-vs-rest
    """
    if cv.dec_values.ndim == 1:
        pos = cv.y == cv.classes[-1]
        A, B = sigmoid_train(cv.dec_values, pos)
        return np.array([A]), np.array([B])
    AB = [sigmoid_train(cv.dec_values[:, j], cv.y == c) for j, c in enumerate(cv.classes)]
    return np.array([a for a, _ in AB]), np.array([b for _, b in AB])
