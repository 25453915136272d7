"""scikit-learn compatible estimators over the same solvers as the CLI.

``fit`` takes an in-memory array / scipy sparse matrix (written to a temporary store, which
is removed afterwards) **or** a store path / opened store (then ``y`` must be ``None``: the
labels are the store's). ``predict``, ``decision_function`` and ``score`` take the same: an
in-memory matrix, or a store that is scored shard by shard (never loaded whole).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .api import get_solver, train
from .solvers.contract import solver_specs
from .store import StoreWriter, csr_to_shards, open_store

__all__ = ["LinearSVC", "SVC", "OrdinalSVM"]

_TMP_SHARD_ROWS = 20_000


def _is_store(X) -> bool:
    return isinstance(X, (str, os.PathLike)) or hasattr(X, "read_shard")


def _open(X):
    """An opened store from a path or a store."""
    return X if hasattr(X, "read_shard") else open_store(X)


class _StoreFromArrays:
    """Context manager: write X, y (and qid) into a temporary store, remove it afterwards."""

    def __init__(self, X, y, label_kind: str | None, qid=None):
        self.X, self.y, self.kind, self.qid = X, y, label_kind, qid

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="ooc-svm-fit-")
        path = os.path.join(self.dir, "train.zarr")
        X = sp.csr_matrix(self.X, dtype=np.float32)
        with StoreWriter(
            path, compression="none", label_kind=self.kind, n_features=X.shape[1]
        ) as w:
            for s in csr_to_shards(X, self.y, self.qid, shard_rows=_TMP_SHARD_ROWS):
                w.add(s, n_features=X.shape[1])
            w.commit()
        return open_store(path)

    def __exit__(self, *exc):
        shutil.rmtree(self.dir, ignore_errors=True)


class _OocSVMBase(ClassifierMixin, BaseEstimator):
    """Shared fit / predict logic; subclasses set the solver parameters."""

    _kernel_capable = True

    def __init__(self, C, solver, tol, max_iter, random_state, solver_params):
        # the parameters every estimator shares, stored unchanged (scikit-learn's contract)
        self.C, self.solver, self.tol = C, solver, tol
        self.max_iter, self.random_state, self.solver_params = max_iter, random_state, solver_params

    def _solver_params(self, n_features: int, X=None) -> dict[str, Any]:
        raise NotImplementedError

    def _with_common(self, p: dict[str, Any]) -> dict[str, Any]:
        """Add tol (as the solver's tolerance parameter: ``eps`` for perf), max_iter, seed and
        ``solver_params`` to ``p``."""
        if self.tol is not None:
            p[get_solver(self.solver).tolerance] = float(self.tol)
        if self.max_iter is not None:
            p["max_iter"] = int(self.max_iter)
        if self.random_state is not None:
            p["seed"] = int(self.random_state)
        p.update(self.solver_params or {})
        return p

    def fit(self, X, y=None):
        """Fit on an array / sparse matrix with labels ``y``, or on a store (``y=None``)."""
        if _is_store(X):
            if y is not None:
                raise ValueError("when fitting on a store, y must be None (the store has labels)")
            store = open_store(X) if not hasattr(X, "read_shard") else X
            self.classes_ = np.asarray(store.meta.labels or [], dtype=np.float64)
            self.n_features_in_ = store.meta.n_features
            params = self._solver_params(store.meta.n_features)
            result = train(
                store,
                self.solver,
                probability=self._probability(),
                **params,
                **self._warm_init(store),
            )
            self._label_map = None
        else:
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32])
            check_classification_targets(y)
            self.classes_, y_idx = np.unique(y, return_inverse=True)
            if len(self.classes_) < 2:
                raise ValueError(
                    f"The number of classes has to be greater than one; got {len(self.classes_)}"
                    " class"
                )
            kind = "binary" if len(self.classes_) == 2 else "multiclass"
            params = self._solver_params(X.shape[1], X)
            with _StoreFromArrays(X, y_idx.astype(np.float64), kind) as store:
                result = train(
                    store,
                    self.solver,
                    probability=self._probability(),
                    **params,
                    **self._warm_init(store),
                )
        self.model_ = result.model
        self.result_ = result
        self.n_iter_ = int(result.iterations)
        self.objective_ = result.objective
        self.dual_objective_ = result.dual_objective
        self._set_attributes()
        return self

    def _warm_init(self, store) -> dict[str, Any]:
        """``{"init": the last model}`` with ``warm_start`` after a ``fit`` (scikit-learn's
        convention: the next fit starts from the last solution, whatever its rows)."""
        model = getattr(self, "model_", None)
        if not getattr(self, "warm_start", False) or model is None:
            return {}
        from .solvers.warm import start_from

        return {"init": start_from(model, store.meta, lenient=True)}

    def _set_attributes(self) -> None:
        m = self.model_
        if m.kind == "linear":
            coef = np.asarray(m.coef_, dtype=np.float64)
            self.coef_ = coef.reshape(1, -1) if coef.ndim == 1 else coef
            self.intercept_ = np.atleast_1d(np.asarray(m.intercept_, dtype=np.float64))
        else:
            self.intercept_ = np.atleast_1d(np.asarray(m.intercept_, dtype=np.float64))
        if m.support_vectors_ is not None:
            self.support_vectors_ = m.support_vectors_
            dc = np.asarray(m.dual_coef_, dtype=np.float64)
            self.dual_coef_ = dc.reshape(1, -1) if dc.ndim == 1 else dc
        if m.support_ is not None:
            self.support_ = np.asarray(m.support_, dtype=np.int64)

    def decision_function(self, X):
        """Signed distance to the hyperplane; (n,) for binary, (n, n_classes) for OvR.

        ``X``: an array / sparse matrix, or a store path / opened store (streamed)."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            from .model.shard_scores import score_store

            return score_store(self.model_, _open(X))
        X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32])
        return self.model_.decision_function(sp.csr_matrix(X))

    def _probability(self) -> bool:
        return bool(getattr(self, "probability", False))

    @available_if(lambda self: bool(getattr(self, "probability", False)))
    def predict_proba(self, X):
        """Class probabilities, shape (n, n_classes) in the order of ``classes_`` (as
        scikit-learn's): Platt's sigmoid fitted by cross-validation in ``fit``; needs
        ``probability=True``. ``X`` as for :meth:`decision_function`."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            p = self.model_.predict_proba(_open(X))
        else:
            X = validate_data(
                self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32]
            )
            p = self.model_.predict_proba(sp.csr_matrix(X))
        p = np.asarray(p, dtype=np.float64)
        return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p

    @available_if(lambda self: bool(getattr(self, "probability", False)))
    def predict_log_proba(self, X):
        """``log(predict_proba(X))``."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def _labels(self, s: np.ndarray) -> np.ndarray:
        if s.ndim == 2:
            return self.classes_[np.argmax(s, axis=1)]
        return self.classes_[(s > 0).astype(int)]

    def predict(self, X):
        """Predicted class labels (the labels seen in ``fit``); ``X`` as for
        :meth:`decision_function`."""
        return self._labels(self.decision_function(X))

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy on ``X, y``, or on a store (``y=None``: the store's labels), streamed
        batch by batch: only counts are kept."""
        if not _is_store(X):
            return super().score(X, y, sample_weight=sample_weight)
        if y is not None or sample_weight is not None:
            raise ValueError("when scoring a store, y and sample_weight must be None")
        check_is_fitted(self, "model_")
        from .engine import make_engine
        from .model.shard_scores import iter_scored

        store = _open(X)
        correct = n = 0
        with make_engine(None) as engine:
            for yb, s, _ in iter_scored(store, engine, self.model_, 1_000_000, with_qid=False):
                correct += int(np.count_nonzero(self._labels(s) == yb))
                n += yb.shape[0]
        return correct / n if n else float("nan")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class LinearSVC(_OocSVMBase):
    """Linear SVM, ½‖w‖² + C Σ max(0, 1 − yᵢ(w·xᵢ + b)), trained out of core.

    Parameters
    ----------
    C : float
        LIBLINEAR's C.
    solver : {"perf", "smo", "active-set", "irwls"}
    tol : float or None
        Stopping tolerance (``eps`` for perf, KKT ``tol`` for the dual solvers); None = the
        solver's default.
    max_iter : int or None
    random_state : int or None
    solver_params : dict or None
        Further solver parameters (see ``ooc-svm train --help``).
    probability : bool
        Fit Platt's sigmoid by 5-fold cross-validation (``train --probability``) so that
        :meth:`predict_proba` works, as scikit-learn's ``SVC(probability=True)``.
    warm_start : bool
        Start the next ``fit`` from the last solution (scikit-learn's convention): perf from
        its w and cutting planes, the dual solvers from its α (``train --init``).
    """

    def __init__(
        self,
        C: float = 1.0,
        solver: str = "perf",
        tol: float | None = None,
        max_iter: int | None = None,
        random_state: int | None = None,
        solver_params: dict[str, Any] | None = None,
        warm_start: bool = False,
        probability: bool = False,
    ) -> None:
        super().__init__(C, solver, tol, max_iter, random_state, solver_params)
        self.warm_start = warm_start
        self.probability = probability

    def _solver_params(self, n_features, X=None):
        p: dict[str, Any] = {"C": float(self.C)}
        if get_solver(self.solver).kernels:  # a kernel solver trains the linear kernel
            p["kernel"] = "linear"
        return self._with_common(p)


class SVC(_OocSVMBase):
    """Kernel SVM (LIBSVM's C-SVC dual) trained out of core by smo, active-set or irwls.

    Parameters
    ----------
    C : float
    kernel : {"rbf", "linear", "poly", "sigmoid"}
    gamma : float, "scale" or "auto"
        "scale" = 1 / (n_features · X.var()) as in scikit-learn (in-memory data only),
        "auto" = 1 / n_features.
    degree, coef0 : kernel parameters.
    solver : {"smo", "active-set", "irwls"}
    tol, max_iter, random_state, solver_params, warm_start, probability : as for :class:`LinearSVC`.
    """

    def __init__(
        self,
        C: float = 1.0,
        kernel: str = "rbf",
        gamma: float | str = "scale",
        degree: int = 3,
        coef0: float = 0.0,
        solver: str = "smo",
        tol: float | None = None,
        max_iter: int | None = None,
        random_state: int | None = None,
        solver_params: dict[str, Any] | None = None,
        warm_start: bool = False,
        probability: bool = False,
    ) -> None:
        super().__init__(C, solver, tol, max_iter, random_state, solver_params)
        self.warm_start = warm_start
        self.probability = probability
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0

    def _solver_params(self, n_features, X=None):
        if not get_solver(self.solver).kernels:
            kernel_solvers = [s.name for s in solver_specs() if s.kernels]
            raise ValueError(f"SVC needs a kernel solver: {', '.join(kernel_solvers)}")
        gamma = self.gamma
        if gamma == "scale":
            if X is None:
                raise ValueError("gamma='scale' needs in-memory data; give a float for a store")
            Xs = sp.csr_matrix(X)
            mean = Xs.mean()
            var = Xs.multiply(Xs).mean() - mean**2
            gamma = 1.0 / (n_features * var) if var > 0 else 1.0
        elif gamma == "auto":
            gamma = 1.0 / max(n_features, 1)
        return self._with_common(
            {
                "C": float(self.C),
                "kernel": self.kernel,
                "gamma": float(gamma),
                "degree": int(self.degree),
                "coef0": float(self.coef0),
            }
        )


class OrdinalSVM(BaseEstimator):
    """Ordinal regression / ranking SVM (Joachims 2006, OP5) via the ``perf`` solver.

    ``fit(X, y, qid=None)`` with integer ranks ``y`` (pairs are formed within a query when
    ``qid`` is given); ``predict`` returns scores (higher = better rank); ``score`` is the
    pairwise accuracy. With two ranks this is the ROC-area SVM.
    """

    def __init__(
        self,
        C: float = 1.0,
        tol: float | None = None,
        max_iter: int | None = None,
        solver_params: dict[str, Any] | None = None,
    ) -> None:
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.solver_params = solver_params

    def fit(self, X: Any, y: Any = None, qid: Any = None) -> OrdinalSVM:
        p: dict[str, Any] = {"C": float(self.C)}
        if self.tol is not None:
            p["eps"] = float(self.tol)
        if self.max_iter is not None:
            p["max_iter"] = int(self.max_iter)
        p.update(self.solver_params or {})
        if _is_store(X):
            store = open_store(X) if not hasattr(X, "read_shard") else X
            self.n_features_in_ = store.meta.n_features
            p.setdefault("loss", "roc" if store.meta.label_kind == "binary" else "ordinal")
            result = train(store, "perf", **p)
        else:
            X, y = validate_data(
                self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], y_numeric=True
            )
            ranks = np.unique(y)
            if len(ranks) < 2:
                raise ValueError("ordinal regression needs at least two distinct ranks")
            kind = "binary" if len(ranks) == 2 else "ordinal"
            p.setdefault("loss", "roc" if kind == "binary" else "ordinal")
            with _StoreFromArrays(X, np.asarray(y, dtype=np.float64), kind, qid=qid) as store:
                result = train(store, "perf", **p)
        self.model_ = result.model
        self.coef_ = np.asarray(result.model.coef_, dtype=np.float64)
        self.n_iter_ = int(result.iterations)
        self.objective_ = result.objective
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Ranking scores w·x (higher ranks score higher); ``X`` may be a store (streamed)."""
        check_is_fitted(self, "model_")
        if _is_store(X):
            from .model.shard_scores import score_store

            return score_store(self.model_, _open(X)) - float(self.model_.intercept_)
        X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32])
        return np.asarray(sp.csr_matrix(X) @ self.coef_).ravel()

    def score(self, X: Any, y: Any, qid: Any = None) -> float:
        """Pairwise accuracy: the fraction of pairs (within queries) ordered correctly."""
        from .evaluation.metrics import pairwise_accuracy

        return float(pairwise_accuracy(np.asarray(y, dtype=np.float64), self.predict(X), qid))
