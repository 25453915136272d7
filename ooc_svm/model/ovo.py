"""One-vs-one multiclass kernel models (kind ``"ovo"``), as LIBSVM's C-SVC builds them.

Imported LIBSVM models (:mod:`ooc_svm.interop.libsvm`): pairwise decision values, LIBSVM's
votes and labels. Below the model (:mod:`ooc_svm.model` dispatches to these for
``kind == "ovo"``; the model is only a type here);
:func:`ooc_svm.model.model.validate_ovo` checks the arrays on load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .model_like import ModelLike

#: rows of X scored at once by :func:`ovo_decision_function` (bounds the partial sums)
OVO_BLOCK_ROWS = 256


def ovo_n_support(model: ModelLike) -> np.ndarray:
    """Support vectors per class (LIBSVM's ``nr_sv``), from ``info["n_support"]``."""
    return np.asarray(model.info.get("n_support", []), dtype=np.int64)


def ovo_decision_function(model: ModelLike, X: Any) -> np.ndarray:
    """Pairwise decision values, shape (n, k(k-1)/2), in LIBSVM's pair order.

    Value ``p`` of pair (i, j), i < j, is positive for a vote to class ``classes[i]``.
    Memory: the kernel block of ``OVO_BLOCK_ROWS`` rows against every support vector.
    """
    import scipy.sparse as sp

    from ..kernels.kernel_functions import kernel_matrix

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


def ovo_labels(model: ModelLike, dec: np.ndarray) -> np.ndarray:
    """Labels from pairwise decision values (n, k(k-1)/2) by voting; ties go to the class
    listed first (smaller index), as in LIBSVM's ``svm_predict``. For streamed scoring:
    score a shard with :func:`ovo_decision_function`, then label it with this."""
    votes = ovo_votes(len(model.classes), np.atleast_2d(dec))
    return np.asarray(model.classes, dtype=np.float64)[np.argmax(votes, axis=1)]


def ovo_predict(model: ModelLike, X: Any) -> np.ndarray:
    """Labels by one-vs-one voting (see :func:`ovo_labels`)."""
    return ovo_labels(model, ovo_decision_function(model, X))
