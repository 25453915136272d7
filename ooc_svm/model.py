"""Trained models: save / load without pickle, decision_function, predict.

A model is a directory holding ``model.json`` (metadata) and ``arrays.npz`` (read with
``allow_pickle=False``). Loading a model never executes code.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._util import json_default

MODEL_FORMAT = "ooc-svm-model"
MODEL_VERSION = 1


class ModelError(Exception):
    """A model file cannot be read."""


def _as_csr(X, n_features: int) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float64)
    if X.shape[1] < n_features:
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    elif X.shape[1] > n_features:
        X = X[:, :n_features]
    return X


@dataclass
class Model:
    """A binary (or one-vs-rest multiclass) SVM.

    Attributes
    ----------
    kind : {"linear", "kernel"}
    classes : list of float
        Original label values; ``classes[0]`` is the negative class, ``classes[1]`` the
        positive one. For one-vs-rest models, one entry per class (one row of ``coef_`` each).
    coef_ : ndarray (n_features,) or (n_classes, n_features) for linear models.
    intercept_ : float or ndarray (n_classes,)
    support_vectors_, dual_coef_ : for kernel models (CSR, yᵢαᵢ per support vector).
    kernel, gamma, degree, coef0 : kernel parameters.
    info : dict
        Solver, C, loss, objective and anything else worth keeping (JSON-serialisable).
    """

    kind: str
    n_features: int
    classes: list[float]
    coef_: np.ndarray | None = None
    intercept_: Any = 0.0
    support_vectors_: sp.csr_matrix | None = None
    dual_coef_: np.ndarray | None = None
    support_: np.ndarray | None = None
    kernel: str = "linear"
    gamma: float = 0.0
    degree: int = 3
    coef0: float = 0.0
    info: dict = field(default_factory=dict)

    # -- prediction -----------------------------------------------------------------------
    def decision_function(self, X) -> np.ndarray:
        """Scores ``f(x)`` (positive → ``classes[1]``); shape (n,) or (n, n_classes) for OvR."""
        if self.kind == "ovo":
            return ovo_decision_function(self, X)
        X = _as_csr(X, self.n_features)
        if self.kind == "linear":
            coef = np.asarray(self.coef_, dtype=np.float64)
            return np.asarray(X @ coef.T) + self.intercept_
        from .kernels.kernel_functions import kernel_matrix

        K = kernel_matrix(
            X, self.support_vectors_, self.kernel, self.gamma, self.degree, self.coef0
        )
        return K @ np.asarray(self.dual_coef_, dtype=np.float64).T + self.intercept_

    def predict(self, X) -> np.ndarray:
        """Predicted labels in the original label values."""
        if self.kind == "ovo":
            return ovo_predict(self, X)
        s = self.decision_function(X)
        classes = np.asarray(self.classes, dtype=np.float64)
        if s.ndim == 2:
            return classes[np.argmax(s, axis=1)]
        return np.where(s > 0, classes[-1], classes[0])

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the model directory atomically (temporary directory, then rename)."""
        path = os.path.abspath(str(path))
        parent = os.path.dirname(path) or "."
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".model-", dir=parent)
        try:
            arrays: dict[str, np.ndarray] = {}
            if self.coef_ is not None:
                arrays["coef"] = np.asarray(self.coef_, dtype=np.float64)
            arrays["intercept"] = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
            if self.support_vectors_ is not None:
                sv = sp.csr_matrix(self.support_vectors_)
                arrays["sv_indptr"] = sv.indptr.astype(np.int64)
                arrays["sv_indices"] = sv.indices.astype(np.int32)
                arrays["sv_data"] = sv.data.astype(np.float64)
                arrays["dual_coef"] = np.asarray(self.dual_coef_, dtype=np.float64)
            if self.support_ is not None:
                arrays["support"] = np.asarray(self.support_, dtype=np.int64)
            np.savez(os.path.join(tmp, "arrays.npz"), **arrays)
            meta = {
                "format": MODEL_FORMAT,
                "version": MODEL_VERSION,
                "kind": self.kind,
                "n_features": int(self.n_features),
                "classes": [float(c) for c in self.classes],
                "intercept_is_scalar": bool(np.ndim(self.intercept_) == 0),
                "kernel": self.kernel,
                "gamma": float(self.gamma),
                "degree": int(self.degree),
                "coef0": float(self.coef0),
                "n_support_vectors": int(
                    0 if self.support_vectors_ is None else self.support_vectors_.shape[0]
                ),
                "info": self.info,
            }
            with open(os.path.join(tmp, "model.json"), "w") as f:
                json.dump(meta, f, indent=1, default=json_default)
            if os.path.isdir(path):
                old = path + ".old-" + os.path.basename(tmp)
                os.rename(path, old)
                os.rename(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            elif os.path.exists(path):
                raise ModelError(f"{path}: exists and is not a model directory; not overwriting")
            else:
                os.rename(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def load_model(path: str) -> Model:
    """Load a model directory written by :meth:`Model.save` (never unpickles anything)."""
    path = str(path)
    try:
        with open(os.path.join(path, "model.json")) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise ModelError(f"{path}: not an ooc-svm model (no model.json)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: unreadable model.json ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ModelError(f"{path}: not an ooc-svm model")
    if int(meta.get("version", 0)) > MODEL_VERSION:
        raise ModelError(
            f"{path}: model format version {meta.get('version')} is newer than this ooc-svm "
            "supports; upgrade ooc-svm"
        )
    try:
        with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: unreadable arrays.npz ({e})") from None
    n_features = int(meta["n_features"])
    intercept = arrays["intercept"]
    intercept = float(intercept[0]) if meta.get("intercept_is_scalar", True) else intercept
    sv = None
    if "sv_indptr" in arrays:
        sv = sp.csr_matrix(
            (arrays["sv_data"], arrays["sv_indices"], arrays["sv_indptr"]),
            shape=(len(arrays["sv_indptr"]) - 1, n_features),
        )
    model = Model(
        kind=str(meta["kind"]),
        n_features=n_features,
        classes=[float(c) for c in meta["classes"]],
        coef_=arrays.get("coef"),
        intercept_=intercept,
        support_vectors_=sv,
        dual_coef_=arrays.get("dual_coef"),
        support_=arrays.get("support"),
        kernel=str(meta.get("kernel", "linear")),
        gamma=float(meta.get("gamma", 0.0)),
        degree=int(meta.get("degree", 3)),
        coef0=float(meta.get("coef0", 0.0)),
        info=dict(meta.get("info", {})),
    )
    if model.kind == "ovo":
        validate_ovo(model, path)
    return model


# ------------------------------------------------------------------------------------------
# One-vs-one multiclass kernel models (kind "ovo"), as LIBSVM's C-SVC builds them.
# Additive block (interop): imported LIBSVM models; nothing above depends on it except the
# two dispatch lines in decision_function / predict and the check in load_model.
# ------------------------------------------------------------------------------------------
#: rows of X scored at once by :func:`ovo_decision_function` (bounds the partial sums)
OVO_BLOCK_ROWS = 256


def ovo_n_support(model: Model) -> np.ndarray:
    """Support vectors per class (LIBSVM's ``nr_sv``), from ``info["n_support"]``."""
    return np.asarray(model.info.get("n_support", []), dtype=np.int64)


def validate_ovo(model: Model, where: str = "model") -> None:
    """Check the arrays of a one-vs-one model (LIBSVM layout); raise ModelError otherwise.

    Layout: ``classes`` in LIBSVM's label order (k classes); ``support_vectors_`` (l rows)
    grouped by class, ``info["n_support"]`` rows per class; ``dual_coef_`` (k-1, l) as
    LIBSVM's ``sv_coef``; ``intercept_`` (k(k-1)/2,) = -rho, pairs (0,1), (0,2), …, (1,2), ….
    """
    k = len(model.classes)
    nsv = ovo_n_support(model)
    if k < 2:
        raise ModelError(f"{where}: a one-vs-one model needs at least two classes")
    if model.support_vectors_ is None or model.dual_coef_ is None:
        raise ModelError(f"{where}: one-vs-one model without support vectors")
    n_sv = model.support_vectors_.shape[0]
    coef = np.asarray(model.dual_coef_)
    b = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
    if nsv.shape != (k,) or np.any(nsv < 0) or int(nsv.sum()) != n_sv:
        raise ModelError(
            f"{where}: n_support {nsv.tolist()} does not give {n_sv} support vectors for "
            f"{k} classes"
        )
    if coef.shape != (k - 1, n_sv):
        raise ModelError(f"{where}: dual_coef_ has shape {coef.shape}, expected {(k - 1, n_sv)}")
    if b.shape != (k * (k - 1) // 2,):
        raise ModelError(
            f"{where}: {b.shape[0]} intercepts for {k} classes, expected {k * (k - 1) // 2}"
        )


def ovo_decision_function(model: Model, X) -> np.ndarray:
    """Pairwise decision values, shape (n, k(k-1)/2), in LIBSVM's pair order.

    Value ``p`` of pair (i, j), i < j, is positive for a vote to class ``classes[i]``.
    Memory: the kernel block of ``OVO_BLOCK_ROWS`` rows against every support vector.
    """
    from .kernels.kernel_functions import kernel_matrix

    k = len(model.classes)
    X = sp.csr_matrix(X, dtype=np.float64)
    sv = sp.csr_matrix(model.support_vectors_)
    width = max(X.shape[1], sv.shape[1], int(model.n_features))
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], width))
    sv = sp.csr_matrix((sv.data, sv.indices, sv.indptr), shape=(sv.shape[0], width))
    coef = np.asarray(model.dual_coef_, dtype=np.float64)
    b = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
    start = np.concatenate([[0], np.cumsum(ovo_n_support(model))])
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    out = np.empty((X.shape[0], len(pairs)))
    for r0 in range(0, X.shape[0], OVO_BLOCK_ROWS):
        r1 = min(r0 + OVO_BLOCK_ROWS, X.shape[0])
        K = kernel_matrix(X[r0:r1], sv, model.kernel, model.gamma, model.degree, model.coef0)
        # part[c][:, m] = Σ over class c's support vectors of coef[m, s] K[:, s]
        part = [
            K[:, start[c] : start[c + 1]] @ coef[:, start[c] : start[c + 1]].T for c in range(k)
        ]
        for p, (i, j) in enumerate(pairs):
            out[r0:r1, p] = part[i][:, j - 1] + part[j][:, i] + b[p]
    return out


def ovo_votes(k: int, dec: np.ndarray) -> np.ndarray:
    """Votes per class (n, k) from pairwise decision values, as LIBSVM counts them
    (value > 0: a vote to the first class of the pair, else to the second)."""
    votes = np.zeros((dec.shape[0], k), dtype=np.int64)
    p = 0
    for i in range(k):
        for j in range(i + 1, k):
            pos = dec[:, p] > 0
            votes[:, i] += pos
            votes[:, j] += ~pos
            p += 1
    return votes


def ovo_labels(model: Model, dec: np.ndarray) -> np.ndarray:
    """Labels from pairwise decision values (n, k(k-1)/2) by voting; ties go to the class
    listed first (smaller index), as in LIBSVM's ``svm_predict``. For streamed scoring:
    score a shard with :func:`ovo_decision_function`, then label it with this."""
    votes = ovo_votes(len(model.classes), np.atleast_2d(dec))
    return np.asarray(model.classes, dtype=np.float64)[np.argmax(votes, axis=1)]


def ovo_predict(model: Model, X) -> np.ndarray:
    """Labels by one-vs-one voting (see :func:`ovo_labels`)."""
    return ovo_labels(model, ovo_decision_function(model, X))
