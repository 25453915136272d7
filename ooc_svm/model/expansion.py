"""The support-vector expansion f(x) = Σ_j coef_j K(sv_j, x) + intercept, in one place.

Used by the dual solvers (smo, active-set, irwls: current iterate, KKT passes) and by
scoring (:mod:`ooc_svm.model.shard_scores`: predict, evaluate, the estimators).

- :class:`Expansion` holds the SVs transposed (CSC over features) and their coefficients
  yᵢαᵢ, or a dense ``w`` for the linear kernel; it is picklable, broadcast it. ``coef`` is
  (n_sv,) for a binary model or (n_classes, n_sv) for a one-vs-rest kernel model whose classes
  share one set of support vectors: every kernel value is then computed once per row.
- :func:`make_expansion` builds one from working rows (any object with ``indptr``,
  ``indices``, ``data``, ``n``, ``take`` and ``to_scipy``, e.g. the dual solvers'
  ``WorkingRows``) and coefficients.
- :func:`scoring_broadcast` / :func:`score_shard` score a kernel
  :class:`~ooc_svm.model.model.Model` shard by shard; :func:`kernel_scores_pass` streams a
  whole store through an engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.base import Engine, concat_partials
from ..kernels.csr import kernel_scores_csc_multi
from ..kernels.kernel_functions import (
    KernelParams,
    csr_parts,
    linear_scores,
    row_sq_norms,
)
from ..kernels.parallel import dense_expansion_add_par, kernel_scores_csc_par, thread_share

if TYPE_CHECKING:  # a type only: the expansion sits below the model that it scores
    from ..store.base import Store
    from ..store.format import Shard
    from .model_like import ModelLike

# --------------------------------------------------------------------------------------------
# expansions
# --------------------------------------------------------------------------------------------


@dataclass
class Expansion:
    """f(x) − intercept = Σ_j coef_j K(sv_j, x)  (kernel)  or  w·x  (linear kernel).

    Picklable; broadcast it to shard functions. Build with :func:`make_expansion`.
    ``coef`` may be 2-D (one row per one-vs-rest class); :meth:`scores` then returns
    (n_rows, n_classes).
    """

    kp: KernelParams
    n_features: int
    w: np.ndarray | None = None
    #: the SVs transposed (CSC over features: for feature f, the SVs that have it)
    svt_indptr: np.ndarray | None = None
    svt_indices: np.ndarray | None = None
    svt_data: np.ndarray | None = None
    sv_sq: np.ndarray | None = None
    coef: np.ndarray | None = None
    #: wide stores: the features the SVs use (sorted); ``svt_*`` are then indexed by position
    #: in it, so nothing here grows with ``n_features`` (None: indexed by feature)
    svt_feats: np.ndarray | None = None

    @classmethod
    def from_csr(
        cls,
        kp: KernelParams,
        n_features: int,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        coef: Any,
    ) -> Expansion:
        """Kernel expansion from SV rows in CSR form and their coefficients yᵢαᵢ.

        When ``n_features`` is large against the SVs' non-zeros, the transposed SVs are kept
        over the features the SVs use (``svt_feats``) instead of every feature of the store.
        """
        import scipy.sparse as sp

        n_sv = indptr.shape[0] - 1
        indices = np.asarray(indices)
        feats = None
        width = int(n_features)
        if width > max(COMPACT_MIN_FEATURES, 2 * indices.size):
            feats, inv = np.unique(indices, return_inverse=True)
            indices = inv.astype(np.int32)
            width = int(feats.size)
        X = sp.csr_matrix(
            (np.asarray(data, dtype=np.float64), indices, indptr), shape=(n_sv, width)
        )
        T = X.T.tocsr()  # rows = features
        T.sort_indices()
        sq = row_sq_norms(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices).view(np.uint32),
            data,
            np.empty(n_sv),
        )
        return cls(
            kp,
            n_features,
            svt_indptr=T.indptr.astype(np.int64),
            svt_indices=T.indices.astype(np.int64),
            svt_data=T.data,
            sv_sq=sq,
            coef=np.asarray(coef, dtype=np.float64).copy(),
            svt_feats=None if feats is None else feats.astype(np.int64),
        )

    @property
    def n_outputs(self) -> int:
        """1 for a binary expansion, the number of classes for a one-vs-rest one."""
        return int(self.coef.shape[0]) if self.coef is not None and self.coef.ndim == 2 else 1

    def scores(
        self,
        indptr: np.ndarray,
        indices_u32: np.ndarray,
        data: np.ndarray,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Σ_j coef_j K(sv_j, x_i) for the rows of a CSR block (no intercept)."""
        n = indptr.shape[0] - 1
        if self.coef is not None and self.coef.ndim == 2:
            return self._scores_multi(indptr, indices_u32, data, n)
        out = np.empty(n, dtype=np.float64) if out is None else out
        width = max(self.n_features, _max_col(indices_u32) + 1)
        if self.w is not None:
            w = self.w
            if w.shape[0] < width:  # columns the expansion never saw have weight 0
                w = np.concatenate([w, np.zeros(width - w.shape[0])])
            return linear_scores(indptr, indices_u32, data, w, out)
        if self.coef is None or self.coef.size == 0:
            out[:] = 0.0
            return out
        sq = row_sq_norms(indptr, indices_u32, data, np.empty(n, dtype=np.float64))
        Dt = self._dense_svs(indices_u32)
        if Dt is not None:
            out[:] = 0.0
            with thread_share():
                return dense_expansion_add_par(
                    indptr, indices_u32, data, sq, Dt, self.sv_sq, self.coef, *self.kp.args(), out
                )
        rows = (*self._compact(indptr, indices_u32, data), sq)
        with thread_share():
            return kernel_scores_csc_par(*rows, *self._svs(), self.coef, *self.kp.args(), out)

    def _dense_svs(self, indices_u32) -> np.ndarray | None:
        """The SVs as a dense (features, n_sv) block when they are dense and small enough
        (:data:`DENSE_SV_MIN_DENSITY`, :data:`DENSE_SV_MAX`; e.g. ijcnn1's 22 features):
        every row's dot products then run over contiguous SV values, with the sums of the
        sparse kernel in the same order (a feature an SV lacks adds an exact 0), so the
        scores are the same to the bit. Built on first use, not pickled."""
        if self.svt_feats is not None or self.svt_indptr is None or self.sv_sq is None:
            return None
        nft = self.svt_indptr.shape[0] - 1
        nsv = self.sv_sq.shape[0]
        nnz = int(self.svt_indptr[-1])
        if nft * nsv > DENSE_SV_MAX or nnz < DENSE_SV_MIN_DENSITY * nft * nsv:
            return None
        if indices_u32.size and int(indices_u32.max()) >= nft:
            return None  # a row has a feature no SV has (the sparse kernel skips it)
        Dt = self.__dict__.get("_Dt")
        if Dt is None:
            import scipy.sparse as sp

            T = sp.csr_matrix((self.svt_data, self.svt_indices, self.svt_indptr), shape=(nft, nsv))
            Dt = np.ascontiguousarray(T.toarray(), dtype=np.float64)
            self.__dict__["_Dt"] = Dt
        return Dt

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_Dt", None)  # rebuilt where it is used
        return state

    def _scores_multi(self, indptr, indices_u32, data, n: int) -> np.ndarray:
        coef = np.ascontiguousarray(self.coef)
        out = np.zeros((n, coef.shape[0]), dtype=np.float64)
        if coef.shape[1] == 0:
            return out
        acc = np.empty(coef.shape[1], dtype=np.float64)
        kval = np.empty(coef.shape[1], dtype=np.float64)
        sq = row_sq_norms(indptr, indices_u32, data, np.empty(n, dtype=np.float64))
        rows = (*self._compact(indptr, indices_u32, data), sq)
        return kernel_scores_csc_multi(*rows, *self._svs(), coef, *self.kp.args(), acc, kval, out)

    def _compact(self, indptr, indices_u32, data) -> tuple[Any, Any, Any]:
        """The rows over ``svt_feats`` (features no SV has dropped: they add nothing to a
        dot product with an SV) when the expansion is compact; the squared norms are taken
        from the full rows by the caller."""
        feats = self.svt_feats
        if feats is None:
            return indptr, indices_u32, data
        if feats.size == 0 or indices_u32.size == 0:
            return np.zeros_like(indptr), indices_u32[:0], data[:0]
        lo, hi = int(indptr[0]), int(indptr[-1])
        ix = indices_u32[lo:hi]
        pos = np.searchsorted(feats, ix)
        keep = feats[np.minimum(pos, feats.size - 1)] == ix
        c = np.zeros(ix.size + 1, dtype=np.int64)
        np.cumsum(keep, out=c[1:])
        ip = c[np.asarray(indptr, dtype=np.int64) - lo]
        return ip, pos[keep].astype(np.uint32), data[lo:hi][keep]

    def _svs(self) -> tuple[Any, Any, Any, Any]:
        """The support vectors as the ``kernel_scores_csc*`` kernels take them: transposed
        (CSC), with their squared norms."""
        return self.svt_indptr, self.svt_indices, self.svt_data, self.sv_sq


#: an expansion is kept over the features its SVs use (``svt_feats``) when the store has
#: more than this many features and more than twice the SVs' non-zeros
COMPACT_MIN_FEATURES = 1 << 16
#: SV expansions whose transposed SVs (features × n_sv) have at most this many entries and at
#: least this density are scored on a dense block (:meth:`Expansion._dense_svs`)
DENSE_SV_MAX = 2_000_000  # 16 MB
DENSE_SV_MIN_DENSITY = 0.25
_DENSE_LOCK = threading.Lock()


def _max_col(indices) -> int:
    return int(indices.max()) if indices.size else 0


def make_expansion(
    kp: KernelParams,
    n_features: int,
    rows: Any = None,
    coef: np.ndarray | None = None,
    w: np.ndarray | None = None,
) -> Expansion:
    """Expansion from SV rows and coefficients yᵢαᵢ (zero coefficients dropped), or from w.

    For the linear kernel, rows/coef are folded into w = Σ coefᵢ xᵢ (Platt eq. 22).
    """
    if w is not None:
        return Expansion(kp, n_features, w=np.asarray(w, dtype=np.float64))
    if rows is None or coef is None:
        if kp.kernel == "linear":
            return Expansion(kp, n_features, w=np.zeros(n_features, dtype=np.float64))
        return Expansion.from_csr(
            kp,
            n_features,
            np.zeros(1, np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.float32),
            np.zeros(0),
        )
    coef = np.asarray(coef, dtype=np.float64)
    if kp.kernel == "linear":
        return Expansion(kp, n_features, w=primal_w(rows, coef, n_features))
    nz = np.flatnonzero(coef != 0.0)
    sv = rows.take(nz) if nz.size != rows.n else rows
    return Expansion.from_csr(kp, n_features, sv.indptr, sv.indices, sv.data, coef[nz])


def primal_w(rows: Any, coef: np.ndarray, n_features: int) -> np.ndarray:
    """w = Σ coefᵢ xᵢ (dense, float64)."""
    w = np.zeros(n_features, dtype=np.float64)
    if rows.n:
        X = rows.to_scipy(n_features)
        w += np.asarray(X.T @ np.asarray(coef, dtype=np.float64)).ravel()
    return w


# --------------------------------------------------------------------------------------------
# streamed scoring of a model (predict / evaluate / estimators)
# --------------------------------------------------------------------------------------------


@dataclass
class ScoringBroadcast:
    """What a scoring pass ships to the workers: the expansion and the intercept
    (a float for a binary model, an (n_classes,) array for a one-vs-rest one)."""

    expansion: Expansion
    intercept: Any


def kernel_params_of(model: ModelLike) -> KernelParams:
    """The model's kernel parameters (gamma 0 = LIBSVM's 1 / n_features)."""
    return KernelParams(
        model.kernel,
        float(model.gamma) or 1.0 / max(model.n_features, 1),
        int(model.degree),
        float(model.coef0),
    )


def scoring_broadcast(model: ModelLike) -> ScoringBroadcast:
    """Picklable scoring data for a linear or kernel :class:`~ooc_svm.model.model.Model`
    (binary, or one-vs-rest kernel: the classes share the support vectors, ``dual_coef_`` is
    (n_classes, n_sv))."""
    kp = kernel_params_of(model)
    ovr = np.ndim(model.intercept_) != 0
    if model.kind == "linear":
        if ovr:
            raise ValueError("one-vs-rest linear models are scored by ooc_svm.scoring")
        exp = Expansion(kp, model.n_features, w=np.asarray(model.coef_, dtype=np.float64))
        return ScoringBroadcast(exp, float(model.intercept_))
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    coef = np.atleast_2d(coef) if ovr else coef.ravel()
    if model.support_vectors_ is None:
        import scipy.sparse as sp

        sv = sp.csr_matrix((0, model.n_features))
        coef = np.zeros((coef.shape[0], 0)) if ovr else np.zeros(0)
    else:
        sv = model.support_vectors_
    ip, ix, dt = csr_parts(sv)
    exp = Expansion.from_csr(kp, model.n_features, ip, ix.view(np.int32), dt, coef)
    if ovr:
        return ScoringBroadcast(exp, np.asarray(model.intercept_, dtype=np.float64).ravel())
    return ScoringBroadcast(exp, float(model.intercept_))


def score_shard(shard: Shard, bc: ScoringBroadcast) -> np.ndarray:
    """f(x) for every row of one shard (float64, in row order): (n,), or (n, n_classes) for a
    one-vs-rest kernel model."""
    ip = np.asarray(shard.indptr, dtype=np.int64)
    ix = shard.indices.view(np.uint32)
    data = shard.data
    n_f = bc.expansion.n_features
    if ix.size and int(ix.max()) >= n_f:
        # columns the model never saw are dropped, as Model.decision_function does
        X = shard.to_scipy(int(ix.max()) + 1)[:, :n_f].tocsr()
        X.sort_indices()
        ip, ix, data = csr_parts(X)
    return bc.expansion.scores(ip, ix, data) + bc.intercept


def _score_fn(shard, bc):
    sbc, post = bc
    s = score_shard(shard, sbc)
    if post is None:
        return [s]
    return post(shard, s)


def kernel_scores_pass(
    store: Store,
    engine: Engine,
    model: ModelLike,
    post: Callable[[Any, np.ndarray], Any] | None = None,
    reduce: Callable[[Any, Any], Any] | None = None,
) -> Any:
    """Stream a store against a binary (linear or kernel) model.

    Parameters
    ----------
    store, engine
        As for every pass.
    model : Model
        ``kind="kernel"`` (support vectors + ``dual_coef_``) or ``kind="linear"``.
    post : callable, optional
        Module-level ``post(shard, scores) -> partial`` run next to the data (e.g. confusion
        counts, or (y, scores) for AUC); must be picklable for the Dask engine.
    reduce : callable, optional
        Combines partials (default: element-wise sum, see ``engine.base.add_partials``).

    Returns
    -------
    ndarray or Any
        Without ``post``: the scores f(x) of every row, float64 (n_rows,), in store order.
        With ``post``: the reduced partials.

    Memory: the model's support vectors plus one shard (and its scores) per engine thread;
    the kernel work is O(rows · nnz(SV)).
    """
    if np.ndim(model.intercept_) != 0:
        raise ValueError("kernel_scores_pass scores binary models (one intercept)")
    bc = (scoring_broadcast(model), post)
    if post is None:
        parts = engine.map_reduce(store, _score_fn, bc, reduce=concat_partials)
        return np.concatenate(parts) if parts else np.zeros(0)
    return engine.map_reduce(store, _score_fn, bc, reduce=reduce)


__all__ = [
    "Expansion",
    "ScoringBroadcast",
    "kernel_params_of",
    "kernel_scores_pass",
    "make_expansion",
    "primal_w",
    "score_shard",
    "scoring_broadcast",
]
