"""Warm starts from a trained model: ``train --init MODEL``, ``ooc_svm.train(store, init=model)``.

A store grows by ``ingest --append`` (new shards after the old ones, which keep their bytes);
a model trained on it records which rows it saw (:func:`rows_record`: the number of rows
and shards and a hash of the shard checksums, in ``info["rows"]``). A later training on
the grown store starts from that model:

- **perf** takes the model's w as its first iterate, and its cutting plane: the model keeps
  the α-weighted mean of its last working set's planes (``warm_cut_``, over the rows it was
  trained on; :func:`~ooc_svm.solvers.perf.warm.aggregate_cut`). Any choice of cᵢ ∈ {0, 1}
  per row is a valid constraint of the 1-slack problem, so that plane, completed over the
  appended rows by their violations at the model's w (computed in the first pass) or, for
  the ranking losses, with cᵢⱼ = 0 on the new pairs, is a valid plane of the new problem: the lower
  bound starts near the old optimum instead of at 0, and a small append often ends in
  one or two passes. The stopping rule (the duality gap ≤ ε·C·n) does not depend on the
  start, so a good start ends early (LIBLINEAR's relative stopping rule does not).
- **smo, active-set, irwls** take α of the rows the model knew (:func:`dual_start`: by
  global row index when the store's first shards are the model's, else found by a
  fingerprint of each support vector's row and label, one streamed pass), 0 for the new
  rows, scaled by C/C_old and clipped to the new bounds (class weights included), with
  yᵀα = 0 repaired; each solver rebuilds its gradient from it in its first pass. Their
  stopping rules (KKT within ``tol``) are absolute.

Refused, with the fix in the message (:func:`check_model`, :func:`check_dual_model` and perf's
:func:`~ooc_svm.solvers.perf.warm.check_perf_model`): a model of another feature
space, label set or hashing, of another kernel (dual solvers) or loss (perf), a kernel
model given to perf, a perf model given to a dual solver, and a model whose rows are no
longer in the store (overwritten, re-ingested, shards removed).
"""

from __future__ import annotations

import functools
import logging
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from . import SolverError
from .warm_rows import (
    _copy_model,
    _fingerprint_at,
    dropped_rows,
    lenient,
    locate_rows,
    row_fingerprints,
    rows_record,
    rows_status,
    trained_rows,
)

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..model.model import Model
    from ..store.base import Store
    from ..store.format import StoreMeta

log = logging.getLogger(__name__)


# -- what a model records about its rows ------------------------------------------------------


# -- loading and checking ---------------------------------------------------------------------
def init_model(init: Any) -> Model:
    """The :class:`~ooc_svm.model.model.Model` of ``init``: a model directory or a model."""
    from ..model.model import Model, load_model

    if isinstance(init, Model):
        return init
    if isinstance(init, str | os.PathLike):
        try:
            return load_model(os.fspath(init))
        except Exception as e:
            msg = str(e).removeprefix(f"{os.fspath(init)}: ")  # the path once
            raise SolverError(f"--init {os.fspath(init)}: {msg}") from None
    raise SolverError(
        f"--init: expected a model directory or an ooc_svm Model, got {type(init).__name__}"
    )


def init_name(init: Any) -> str:
    """How messages name the ``--init`` model."""
    return f"--init {os.fspath(init)}" if isinstance(init, str | os.PathLike) else "init model"


# -- the one warm start -------------------------------------------------------------------------
def _rows_key(meta: StoreMeta) -> tuple[int, tuple[str, ...]]:
    """What a :class:`Start`'s row status depends on: the store's rows and shard table."""
    return int(meta.n_rows), tuple(str(s.checksum) for s in meta.shards)


class Start:
    """A warm start: the one object every route passes as ``init=`` to a solver (``train
    --init``, the C sweep's next value, ``--follow``'s refits, the estimators'
    ``warm_start``), built by :func:`start_from` from a model or a model directory and the
    meta of the store it starts a training on.

    The model is loaded when first needed (:attr:`model`; a path that cannot be read is
    refused then, as ``--init`` always was); :attr:`status` and :attr:`dropped` say how its
    rows sit in the store (:func:`rows_status`, :func:`dropped_rows`). What each solver
    family starts from is made on demand from it: the dual solvers' α by row
    (:meth:`dual`, :func:`dual_start`), perf's w and planes
    (:func:`~ooc_svm.solvers.perf.warm.perf_start`) and dcd's α by row
    (:func:`~ooc_svm.solvers.perf.dcd_warm.alpha_start`), both given this object; α is scaled
    to the new C by :func:`rescale` alone.
    """

    def __init__(
        self, source: Any, meta: StoreMeta, *, lenient: bool = False, where: str | None = None
    ) -> None:
        #: the model or model directory as given (``to_dict`` names a directory by its path)
        self.source = source
        #: how messages name it (``--init PATH`` or ``init model``)
        self.where = where or init_name(source)
        #: :func:`lenient`: a start for any rows (scikit-learn's ``warm_start``)
        self.lenient = lenient
        self.meta = meta
        self._key = _rows_key(meta)

    @functools.cached_property
    def model(self) -> Model:
        """The model (loaded once; :func:`lenient` applied when asked)."""
        model = init_model(self.source)
        return lenient(model, self.meta) if self.lenient else model

    @functools.cached_property
    def status(self) -> str:
        """:func:`rows_status` of the model on the store."""
        return rows_status(self.model, self.meta)

    @functools.cached_property
    def dropped(self) -> int:
        """Rows of the model's oldest shards that ``ooc-svm drop`` removed (status
        ``"dropped"``), else 0."""
        return int(dropped_rows(self.model, self.meta) or 0) if self.status == "dropped" else 0

    @property
    def loaded(self) -> bool:
        """Whether :attr:`model` is in memory (a model given, or a directory read)."""
        from ..model.model import Model

        return "model" in self.__dict__ or isinstance(self.source, Model)

    def matches(self, meta: StoreMeta) -> bool:
        """Whether this start was built for a store with ``meta``'s rows and shards."""
        return self._key == _rows_key(meta)

    def name(self) -> str:
        """The start as a plain value (``SolverParams.to_dict``): its directory, or
        ``<model>``."""
        if isinstance(self.source, str | os.PathLike):
            return os.fspath(self.source)
        return "<model>"

    def for_class(self, k: int, n_classes: int, labels: tuple[float, float] | None = None) -> Start:
        """The start of one-vs-rest problem ``k`` (:func:`class_model`)."""
        sub = class_model(self.model, k, n_classes, labels)
        return Start(sub, self.meta, where=self.where)

    def dual(self, store: Store, engine: Engine, solver: str, kernel: dict[str, Any], pos: float,
             C: float, costs: tuple[float, float] | None = None,
             classes: list[float] | None = None) -> Model:  # fmt: skip
        """The dual solvers' start: :func:`dual_start`."""
        return dual_start(self, store, engine, solver, kernel, pos, C, costs, classes)

    def __repr__(self) -> str:
        return f"Start({self.where!r})"


def start_from(init: Any, meta: StoreMeta, *, lenient: bool = False) -> Start | None:
    """The :class:`Start` of ``init`` (a model directory, a Model or a Start; None: None)
    on a store with ``meta``: a Start built for the same rows and shards is returned as it
    is, one built for others is made again from its model (the store grew between two
    looks). ``lenient``: a start for any rows (:func:`lenient`)."""
    if init is None:
        return None
    if isinstance(init, Start):
        if init.matches(meta):
            return init
        source = init.model if init.loaded else init.source
        return Start(source, meta, lenient=init.lenient, where=init.where)
    return Start(init, meta, lenient=lenient)


def c_ratio(C: float, C_old: float) -> float:
    """C / C_old (1 when C_old is not positive): what α, the bias and w of a model trained
    at C_old are scaled by to start a training at C."""
    return C / C_old if C_old > 0 else 1.0


def rescale(values: Any, C: float, C_old: float) -> Any:
    """``values`` (α, yα, the bias) of a model trained at ``C_old`` scaled to ``C``: every
    warm start's one scaling (:func:`dual_start`, dcd's :func:`.perf.dcd_warm.alpha_start`)."""
    return values * c_ratio(C, C_old)


def check_model(
    model: Model, meta: StoreMeta, where: str, *, classes: list[float] | None = None
) -> None:
    """Refuse a model that cannot start a training on a store with ``meta``, in one line
    naming the mismatch and the fix: another feature space, hashing or label set, or a
    one-vs-one model (what a start from w or from α needs besides is checked by
    :func:`check_dual_model` and perf's ``check_perf_model``).

    ``classes``: the label values the problem trains (binary: ``[neg, pos]``; one-vs-rest:
    every class).
    """
    fix = "train without --init (a cold start), or give a model trained on this store"
    hashing = getattr(meta, "hashing", None) or None
    m_hash = model.info.get("hashing")
    if hashing or m_hash:
        want = {k: hashing[k] for k in ("bits", "hash", "key")} if hashing else None
        if want != m_hash:
            raise SolverError(
                f"{where}: the model was trained with feature hashing {m_hash or 'off'}, the "
                f"store is hashed {want or 'not at all'}; {fix}"
            )
    if model.n_features > meta.n_features:
        raise SolverError(
            f"{where}: the model has {model.n_features} features, the store {meta.n_features} "
            f"(another feature space); {fix}"
        )
    if model.kind == "ovo":
        raise SolverError(f"{where}: a one-vs-one model cannot start a training; {fix}")
    if classes is not None:
        got = [float(c) for c in model.classes]
        if len(got) != len(classes) or not all(
            (math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(got, classes, strict=False)
        ):
            raise SolverError(
                f"{where}: the model's labels {_labels(got)} are not this store's "
                f"{_labels(classes)}; {fix}"
            )


def check_dual_model(
    model: Model, solver: str, where: str, kernel: dict[str, Any] | None = None
) -> None:
    """Refuse a model (checked by :func:`check_model`) that cannot start the dual solver
    ``solver``: one without dual coefficients and their rows (a perf model), or one of
    another ``kernel`` (the resolved ``kernel, gamma, degree, coef0``)."""
    m_solver = str(model.info.get("solver", ""))
    if model.dual_coef_ is None or model.support_ is None:
        raise SolverError(
            f"{where}: the model ({m_solver or 'linear'}) keeps no dual coefficients with "
            f"their rows, which --solver {solver} starts from; give a model of smo, active-set "
            "or irwls, or use --solver perf --init, or drop --init"
        )
    if kernel is not None:
        mk: dict[str, Any] = {"kernel": model.kernel, "gamma": model.gamma}
        mk.update(degree=model.degree, coef0=model.coef0)
        if mk["kernel"] != kernel["kernel"]:
            raise SolverError(
                f"{where}: the model's kernel is {mk['kernel']}, this training's "
                f"{kernel['kernel']}; give --kernel {mk['kernel']}, or drop --init"
            )
        for k in ("gamma", "degree", "coef0"):
            if kernel["kernel"] == "linear" or (k == "degree" and kernel["kernel"] != "poly"):
                continue
            if k == "coef0" and kernel["kernel"] == "rbf":
                continue
            if not math.isclose(float(mk[k]), float(kernel[k]), rel_tol=1e-12, abs_tol=0.0):
                raise SolverError(
                    f"{where}: the model's kernel has {k} {mk[k]:g}, this training's "
                    f"{float(kernel[k]):g}; give --{k} {mk[k]!r}, or drop --init"
                )


def _labels(values: list[float]) -> str:
    return "[" + ", ".join("rest" if math.isnan(v) else f"{v:g}" for v in values) + "]"


def refuse_changed_rows(model: Model, meta: StoreMeta, where: str) -> None:
    """Say why the store does not begin with the model's rows (:func:`rows_status`
    ``"changed"``): fewer rows, other rows (their fingerprints differ), or other shards of
    a store that keeps no fingerprints."""
    rec = model.info.get("rows", {})
    n, k = int(rec.get("n_rows", 0)), int(rec.get("n_shards", 0))
    fix = "train without --init (a cold start)"
    if n > meta.n_rows:
        why = (
            f"the store has {meta.n_rows} rows, the model was trained on {n} (another data "
            "set, or shards removed)"
        )
    elif rec.get("fingerprint") is not None and _fingerprint_at(meta, n) is not None:
        what = "rows" if n == meta.n_rows else f"first {n} rows"
        why = (
            f"the store's {what} are not the model's {n} rows (other values, labels or order: "
            "another data set, or the data changed)"
        )
    elif rec.get("fingerprint") is not None and getattr(meta, "fingerprints", None):
        at = ", ".join(str(e[0]) for e in meta.fingerprints)
        why = (
            f"the store does not begin with the model's {n} rows (it was ingested or "
            f"appended to at {at} rows, never at {n}: another data set, or the rows changed)"
        )
    else:
        why = (
            f"the store's first {n} rows are not the model's {n} rows in {k} shards (the "
            "store was overwritten, re-ingested with other shard sizes, or lost shards; "
            "stores ingested by this version are matched by their rows' fingerprint)"
        )
    raise SolverError(f"{where}: {why}; {fix}")


# -- one-vs-rest: one class of a model --------------------------------------------------------
def class_model(
    model: Model, k: int, n_classes: int, labels: tuple[float, float] | None = None
) -> Model:
    """The binary model "class ``k`` vs the rest" of a one-vs-rest ``model``, with classes
    ``[nan, c_k]`` (perf's fused drivers) or ``labels`` (the binary views of the others)."""
    from ..model.model import Model

    if len(model.classes) != n_classes or model.kind == "ovo" or np.ndim(model.intercept_) == 0:
        raise SolverError(
            f"init model: a model of {len(model.classes)} classes cannot start a one-vs-rest "
            f"training of {n_classes} classes; train without --init (a cold start)"
        )
    info = {**model.info}
    info.pop("multiclass", None)
    c = float(model.classes[k])
    out = Model(
        kind=model.kind,
        n_features=model.n_features,
        classes=[math.nan, c] if labels is None else [float(v) for v in labels],
        intercept_=float(np.asarray(model.intercept_)[k]),
        kernel=model.kernel,
        gamma=model.gamma,
        degree=model.degree,
        coef0=model.coef0,
        info=info,
    )
    if model.coef_ is not None:
        out.coef_ = np.asarray(model.coef_)[k].copy()
    out.warm_cols_ = getattr(model, "warm_cols_", None)
    wp = getattr(model, "warm_points_", None)
    per = info.pop("warm_points_per_class", None)
    if wp is not None and isinstance(per, list) and len(per) == n_classes:
        start = int(sum(per[:k]))
        if per[k]:
            out.warm_points_ = np.asarray(wp)[start : start + int(per[k])].copy()
    wc = getattr(model, "warm_cut_", None)
    if wc is not None and np.ndim(wc) == 2:
        out.warm_cut_ = np.asarray(wc)[k].copy()
        cuts = info.get("warm_cut")
        if isinstance(cuts, list) and len(cuts) == n_classes:
            out.info["warm_cut"] = cuts[k]
    if model.dual_coef_ is not None and model.support_ is not None:
        coef = np.atleast_2d(np.asarray(model.dual_coef_))[k]
        keep = np.flatnonzero(coef != 0.0)
        out.dual_coef_ = coef[keep].copy()
        out.support_ = np.asarray(model.support_)[keep].copy()
        if model.support_vectors_ is not None:
            import scipy.sparse as sp

            out.support_vectors_ = sp.csr_matrix(model.support_vectors_)[keep]
    return out


# -- dual solvers -------------------------------------------------------------------------------
def dual_start(
    init: Any,
    store: Store,
    engine: Engine,
    solver: str,
    kernel: dict[str, Any],
    pos: float,
    C: float,
    costs: tuple[float, float] | None = None,
    classes: list[float] | None = None,
) -> Model:
    """The ``init`` model with its support vectors located in ``store`` and its α ready:
    ``support_`` = their global rows (sorted), ``dual_coef_`` = yᵢαᵢ·C/C_old clipped to
    each row's bound (``costs``: per-class C) with yᵀα = 0 repaired, and ``info["C"]`` = C
    (the solvers read it as it is). ``init``: a :class:`Start` (or what :func:`start_from`
    takes).

    Rows are found by index when the store's first shards are the model's rows, else by
    fingerprint (one pass); a support vector that is not in the store is refused.
    """
    import scipy.sparse as sp

    meta = store.meta
    start = start_from(init, meta)
    assert start is not None
    where, model = start.where, start.model
    check_model(model, meta, where, classes=classes)
    check_dual_model(model, solver, where, kernel)
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    if coef.ndim != 1:
        raise SolverError(f"{where}: a one-vs-rest model cannot start a binary training")
    gids = np.asarray(model.support_, dtype=np.int64)
    status = start.status
    X = None if model.support_vectors_ is None else sp.csr_matrix(model.support_vectors_)
    if status == "changed" and X is None:
        refuse_changed_rows(model, meta, where)
    if status == "dropped":  # `ooc-svm drop` took the oldest rows: the rest moved down
        gids, coef, X = _after_drop(start.dropped, where, gids, coef, X)
        status = "prefix"
    if status in ("prefix", "unknown") or X is None:
        if gids.size and (gids.min() < 0 or gids.max() >= meta.n_rows):
            raise SolverError(
                f"{where}: support vector row {int(gids.max())} is outside this store "
                f"({meta.n_rows} rows); train without --init (a cold start)"
            )
    else:
        gids, coef, X = _located(store, engine, X, coef, pos, status, where)
    C_old = float(model.info.get("C", C) or C)
    coef = rescale(coef, C, C_old)
    cap = np.full(coef.shape, float(C))
    if costs is not None:
        cap = np.where(coef > 0, costs[1], costs[0])
    a = np.abs(coef)
    a = np.where(a >= cap * (1.0 - 1e-12), cap, a)  # at the old bound -> at the new one
    coef = balance(np.sign(coef) * a)
    order = np.argsort(gids, kind="stable")
    out = _copy_model(model)
    out.support_ = gids[order]
    out.dual_coef_ = coef[order]
    if X is not None:
        Xo = X[order]
        if Xo.shape[1] < meta.n_features:
            Xo = sp.csr_matrix(
                (Xo.data, Xo.indices, Xo.indptr), shape=(Xo.shape[0], meta.n_features)
            )
        Xo.sort_indices()
        out.support_vectors_ = Xo
    out.intercept_ = rescale(float(model.intercept_), C, C_old)
    out.info = {**model.info, "C": float(C)}
    log.debug("%s: warm start from %s: %d support vectors", solver, where, gids.size)
    return out


def _located(store: Store, engine: Engine, X, coef, pos: float, status: str, where: str):
    """The support vectors ``X`` found in ``store`` by fingerprint (one pass): (their rows,
    their coefficients, their rows of ``X``); refused when some are missing from a store
    that changed, put at 0 when the model records no rows."""
    gids, found = locate_rows(store, engine, X, np.sign(coef), pos)
    missing = int(found.size - np.count_nonzero(found))
    if missing and status == "changed":
        raise SolverError(
            f"{where}: {missing} of the model's {found.size} support vectors are not "
            "rows of this store (overwritten or shards removed); train without --init "
            "(a cold start)"
        )
    if missing:  # a model that records no rows: those rows start at 0
        log.info("%s: %d support vectors are not in the store: alpha 0", where, missing)
        coef = np.where(found, coef, 0.0)
    keep = np.flatnonzero(found & (coef != 0.0))
    log.info("%s: %d support vectors found by fingerprint", where, keep.size)
    return gids[keep], coef[keep], X[keep]


def _after_drop(gone: int, where: str, gids, coef, X):
    """The support vectors still in the store after ``ooc-svm drop`` removed the model's
    ``gone`` oldest rows: their rows moved down by the rows dropped, the others left out."""
    kept = gids >= gone
    log.info(
        "%s: %d of the model's oldest rows were dropped from the store, with %d of its "
        "support vectors",
        where,
        gone,
        int(kept.size - np.count_nonzero(kept)),
    )
    return gids[kept] - gone, coef[kept], (None if X is None else X[np.flatnonzero(kept)])


def dual_init(
    params: Any,
    store: Store,
    engine: Engine,
    solver: str,
    costs: tuple[float, float] | None = None,
) -> Model | None:
    """:func:`dual_start` for a dual solver's ``params`` (None without ``init``)."""
    if params.init is None:
        return None
    from ..kernels.kernel_functions import KernelParams
    from . import binary_classes

    meta = store.meta
    neg, pos = binary_classes(meta)
    kp = KernelParams.from_params(params.kernel_dict(), int(meta.n_features))
    kernel = {"kernel": kp.kernel, "gamma": kp.gamma, "degree": kp.degree, "coef0": kp.coef0}
    start = start_from(params.init, meta)
    assert start is not None
    return start.dual(store, engine, solver, kernel, pos, float(params.C), costs, [neg, pos])


def balance(coef: np.ndarray) -> np.ndarray:
    """Restore yᵀα = Σ coef = 0 by shrinking the α of the heavier class (stays inside the
    box; a start that breaks the equality would mislead the dual solvers' KKT checks)."""
    P = float(coef[coef > 0].sum())
    N = float(-coef[coef < 0].sum())
    if P <= 0 or N <= 0:
        return np.zeros_like(coef)
    if abs(P - N) <= 1e-12 * max(P, N):
        return coef
    if P > N:
        return np.where(coef > 0, coef * (N / P), coef)
    return np.where(coef < 0, coef * (P / N), coef)


__all__ = [
    "Start",
    "balance",
    "c_ratio",
    "check_dual_model",
    "check_model",
    "class_model",
    "dual_init",
    "dual_start",
    "init_model",
    "lenient",
    "init_name",
    "locate_rows",
    "row_fingerprints",
    "rows_record",
    "dropped_rows",
    "rescale",
    "rows_status",
    "start_from",
    "trained_rows",
]
