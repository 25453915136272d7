"""SVMlight / SVMperf model files (``svm_learn``, ``svm_perf_learn``).

Layout, as SVMlight's ``write_model`` writes it (text after ``#`` is a comment)::

    SVM-light Version V6.02
    2 # kernel type                         0 linear, 1 poly, 2 rbf, 3 sigmoid, 4 custom
    3 # kernel parameter -d                 degree
    0.5 # kernel parameter -g               rbf gamma
    1 # kernel parameter -s                 poly / sigmoid scale (LIBSVM's gamma)
    1 # kernel parameter -r                 poly / sigmoid constant (LIBSVM's coef0)
    empty# kernel parameter -u
    9947 # highest feature index
    2000 # number of training documents
    879 # number of support vectors plus 1
    -0.10659 # threshold b, each following line is a SV (starting with alpha*y)
    0.0123 1:0.5 3:0.2 #                    alpha_i y_i, then the support vector

Decision value: f(x) = Σ alpha_i y_i K(x_i, x) - b, positive → class +1. SVMperf writes its
linear models in the same format with one "support vector" holding w (coefficient 1).

Mapping to ooc-svm: linear kernel → ``kind="linear"`` with ``w = Σ alpha_i y_i x_i``
(one SV: w itself), ``intercept_ = -b``; other kernels → ``kind="kernel"``. Classes are
``[-1, +1]``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..model.model import Model
from ..store.format import MAX_FEATURES
from ._io import (
    FormatError,
    GrowingRows,
    LineReader,
    SparseRows,
    atomic_text,
    check_finite,
    check_width,
    fmt,
    linear_weights,
    sparse_row_text,
    to_float,
    to_int,
)

KERNELS = {0: "linear", 1: "poly", 2: "rbf", 3: "sigmoid"}
_CODES = {v: k for k, v in KERNELS.items()}
VERSION = "V6.02"


#: a "highest feature index" beyond the support vectors' width is kept up to this width
#: (or twice theirs); beyond it the model has the support vectors' width (the features
#: beyond weigh 0 anyway): a header line alone does not justify a dense weight vector
CLAIMED_WIDTH_LIMIT = 1 << 24


def _value(r: LineReader, what: str) -> str:
    line = r.need(f"the header line '{what}'")
    v = line.split("#", 1)[0].strip()
    if not v and what != "kernel parameter -u":
        raise r.error(f"expected a value for '{what}', found {line[:60]!r}")
    return v


def read(path: str, n_features: int | None = None) -> Model:
    """Read an SVMlight / SVMperf model file (plain or compressed)."""
    with LineReader(path) as r:
        first = r.need("'SVM-light Version ...'")
        if not first.startswith("SVM-light Version"):
            raise r.error(
                f"starts with {first[:40]!r}, not 'SVM-light Version'; not an SVMlight model "
                "(LIBSVM models start with 'svm_type', LIBLINEAR models with 'solver_type')"
            )
        code = to_int(r, _value(r, "kernel type"), "kernel type")
        if code == 4:
            raise r.error("kernel type 4 (user-defined kernel) cannot be imported")
        if code not in KERNELS:
            raise r.error(f"unknown kernel type {code}")
        degree = to_int(r, _value(r, "kernel parameter -d"), "degree")
        rbf_gamma = to_float(r, _value(r, "kernel parameter -g"), "gamma")
        coef_lin = to_float(r, _value(r, "kernel parameter -s"), "-s")
        coef_const = to_float(r, _value(r, "kernel parameter -r"), "-r")
        _value(r, "kernel parameter -u")
        totwords = to_int(r, _value(r, "highest feature index"), "highest feature index")
        totdoc = to_int(r, _value(r, "number of training documents"), "number of documents")
        sv_num = to_int(r, _value(r, "number of support vectors plus 1"), "SV count", 1)
        b = to_float(r, _value(r, "threshold b"), "threshold b")
        n_sv = sv_num - 1
        if totwords > MAX_FEATURES:
            raise r.error(
                f"highest feature index {totwords:,} is beyond the {MAX_FEATURES:,} features "
                "a model may have; nothing was imported"
            )
        grown = GrowingRows(n_sv, 1)  # grows with the lines read, not with the count claimed
        rows = SparseRows()
        for s in range(n_sv):
            line = r.need(f"support vector {s + 1} of {n_sv} (number of support vectors)")
            toks = line.split("#", 1)[0].split()
            if not toks:
                raise r.error("empty support vector line")
            grown.row()[0] = to_float(r, toks[0], "alpha*y")
            rows.add(r, toks[1:])
        alpha = grown.array()[:, 0].copy()
        for line in r:
            if line.split("#", 1)[0].strip():
                raise r.error(f"text after the {n_sv} support vectors")
    width = check_width(path, max(rows.max_col + 1, int(n_features or 0), 1))
    if totwords > width and totwords <= max(2 * width, CLAIMED_WIDTH_LIMIT):
        width = totwords  # the header's width, when the file's contents justify it
    sv = rows.matrix(width)
    kernel = KERNELS[code]
    info = {
        "solver": "svmlight",
        "imported_from": str(path),
        "format": "svmlight",
        "n_rows": totdoc,
        "version": first[len("SVM-light Version") :].strip(),
    }
    if kernel == "linear":
        w = np.asarray(sv.T @ alpha).ravel() if n_sv else np.zeros(width)
        return Model(
            kind="linear", n_features=width, classes=[-1.0, 1.0], coef_=w, intercept_=-b, info=info
        )
    gamma = rbf_gamma if kernel == "rbf" else coef_lin
    return Model(
        kind="kernel",
        n_features=width,
        classes=[-1.0, 1.0],
        support_vectors_=sv,
        dual_coef_=alpha,
        intercept_=-b,
        kernel=kernel,
        gamma=gamma,
        degree=degree,
        coef0=coef_const if kernel in ("poly", "sigmoid") else 0.0,
        info=info,
    )


def write(model: Model, out: str) -> None:
    """Write a binary model as an SVMlight model file (atomically). Linear models are
    written as SVMperf writes them: one support vector holding w."""
    check_finite(model, out)
    if model.kind == "ovo" or np.ndim(model.intercept_) != 0 or len(model.classes) != 2:
        raise FormatError(
            f"{out}: SVMlight models are binary; this is a {len(model.classes)}-class model "
            "(export it with --format liblinear or --format libsvm)"
        )
    kernel = "linear" if model.kind == "linear" else model.kernel
    if kernel not in _CODES:
        raise FormatError(f"{out}: kernel {kernel!r} has no SVMlight equivalent")
    gamma = float(model.gamma) or 1.0 / max(int(model.n_features), 1)
    if kernel == "linear":
        w = linear_weights(model)
        nz = np.flatnonzero(w)
        sv = sp.csr_matrix((w[nz], nz, [0, nz.size]), shape=(1, w.shape[0]))
        alpha = np.ones(1)
    else:
        sv = sp.csr_matrix(model.support_vectors_)
        alpha = np.asarray(model.dual_coef_, dtype=np.float64).ravel()
    sv.sort_indices()
    with atomic_text(out) as f:
        f.write(f"SVM-light Version {VERSION}\n")
        f.write(f"{_CODES[kernel]} # kernel type\n")
        f.write(f"{int(model.degree)} # kernel parameter -d \n")
        f.write(f"{fmt(gamma if kernel == 'rbf' else 1.0)} # kernel parameter -g \n")
        f.write(f"{fmt(gamma if kernel in ('poly', 'sigmoid') else 1.0)} # kernel parameter -s \n")
        f.write(
            f"{fmt(model.coef0 if kernel in ('poly', 'sigmoid') else 1.0)} # kernel parameter -r \n"
        )
        f.write("empty# kernel parameter -u \n")
        f.write(f"{int(model.n_features)} # highest feature index \n")
        f.write(f"{int(model.info.get('n_rows', 0) or 0)} # number of training documents \n")
        f.write(f"{sv.shape[0] + 1} # number of support vectors plus 1 \n")
        f.write(
            f"{fmt(-float(model.intercept_))} # threshold b, each following line is a SV "
            "(starting with alpha*y)\n"
        )
        for s in range(sv.shape[0]):
            a, e = sv.indptr[s], sv.indptr[s + 1]
            f.write(f"{fmt(alpha[s])} {sparse_row_text(sv.indices[a:e], sv.data[a:e])} #\n")
