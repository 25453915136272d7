"""LIBSVM model files (``svm-train`` / ``svm_save_model``), C-SVC and nu-SVC classifiers.

Layout, as LIBSVM writes it::

    svm_type c_svc
    kernel_type rbf                 linear | polynomial | rbf | sigmoid
    degree 3                        polynomial only
    gamma 0.5                       polynomial, rbf, sigmoid
    coef0 0                         polynomial, sigmoid
    nr_class 3
    total_sv 120
    rho r_01 r_02 ... r_12 ...      one per pair of classes (i < j)
    label 1 2 3                     class labels in LIBSVM's order
    probA ... / probB ...           optional (svm-train -b 1): one sigmoid per pair, kept
    nr_sv 40 30 50                  support vectors per class, in label order
    SV
    c_1 ... c_{k-1} idx:val ...     one line per support vector, grouped by class

Decision value of pair (i, j): Σ_{s in class i} sv_coef[j-1][s] K(x_s, x)
+ Σ_{s in class j} sv_coef[i][s] K(x_s, x) - rho_p; positive votes for class i.

Mapping to ooc-svm models:

- two classes → ``kind="kernel"`` with ``classes = [label[1], label[0]]`` (ooc-svm's positive
  class is ``classes[1]``; LIBSVM's is ``label[0]``), ``dual_coef_ = sv_coef[0]``,
  ``intercept_ = -rho``: the decision values are LIBSVM's, bit for bit up to summation order;
- more classes → ``kind="ovo"`` (see :func:`ooc_svm.model.ovo.ovo_decision_function`), voting as
  LIBSVM does.

Writing: binary kernel models, binary linear models (one "support vector" holding w, with
``kernel_type linear``) and one-vs-one models. One-vs-rest models have no LIBSVM form.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..model.model import Model, validate_ovo
from ..model.ovo import ovo_n_support
from ._io import (
    FormatError,
    GrowingRows,
    LineReader,
    SparseRows,
    atomic_text,
    check_finite,
    check_width,
    expect_end,
    fmt,
    linear_weights,
    read_header,
    sparse_row_text,
    to_float,
    to_int,
)

log = logging.getLogger(__name__)

KERNELS = {"linear": "linear", "polynomial": "poly", "rbf": "rbf", "sigmoid": "sigmoid"}
_KERNEL_NAMES = {v: k for k, v in KERNELS.items()}
SVM_TYPES = ("c_svc", "nu_svc")
_OTHER_TYPES = ("one_class", "epsilon_svr", "nu_svr")


_HEADER_KEYS = (
    "svm_type",
    "kernel_type",
    "degree",
    "gamma",
    "coef0",
    "nr_class",
    "total_sv",
    "rho",
    "label",
    "probA",
    "probB",
    "prob_density_marks",
    "nr_sv",
)


def read(path: str, n_features: int | None = None) -> Model:
    """Read a LIBSVM model file.

    Parameters
    ----------
    path : str
        Model file (plain, .gz, .bz2 or .xz).
    n_features : int, optional
        Width of the data the model scores. Default: the largest feature index among the
        support vectors. With the RBF kernel, ooc-svm ignores features beyond the model's
        width while LIBSVM counts them in ‖x - x_s‖²: pass the data's width to get LIBSVM's
        values on such rows.
    """
    with LineReader(path) as r:
        head, lines = read_header(
            r, _HEADER_KEYS, name="LIBSVM", first="svm_type", end="SV", unique=True,
            others="LIBLINEAR models start with 'solver_type', SVMlight models with "
            "'SVM-light Version'",
        )  # fmt: skip
        svm_type = _svm_type(r, head, lines)
        kernel, gamma, degree, coef0 = _kernel_params(r, head, lines)
        k, total, rho, labels, nr_sv = _classes(r, head, lines)
        coef, rows = _support_vectors(r, k, total)
        expect_end(r, f"text after the {total} support vectors")
    width = _width(path, rows.max_col + 1, n_features, kernel)
    sv = rows.matrix(width)
    info: dict[str, Any] = {
        "solver": f"libsvm {svm_type}",
        "imported_from": str(path),
        "format": "libsvm",
    }
    kernel_args: dict[str, Any] = {
        "kernel": kernel,
        "gamma": gamma,
        "degree": degree,
        "coef0": coef0,
    }
    n_pairs = k * (k - 1) // 2
    if k == 2:
        model = Model(
            kind="kernel",
            n_features=width,
            classes=[labels[1], labels[0]],
            support_vectors_=sv,
            dual_coef_=coef[0].copy(),
            intercept_=-rho[0],
            info=info,
            **kernel_args,
        )
        _probability(r, head, lines, model, n_pairs)
        return model
    info["n_support"] = nr_sv
    info["multiclass"] = "ovo"
    model = Model(
        kind="ovo",
        n_features=width,
        classes=labels,
        support_vectors_=sv,
        dual_coef_=coef,
        intercept_=-np.asarray(rho),
        info=info,
        **kernel_args,
    )
    validate_ovo(model, str(path))
    _probability(r, head, lines, model, n_pairs)
    return model


def _svm_type(r: LineReader, head: dict, lines: dict) -> str:
    """The ``svm_type``: a classifier's (c_svc, nu_svc)."""
    svm_type = _one(r, head, lines, "svm_type")
    if svm_type in _OTHER_TYPES:
        raise r.error(
            f"svm_type {svm_type}: only classifiers (c_svc, nu_svc) can be imported",
            lines["svm_type"],
        )
    if svm_type not in SVM_TYPES:
        raise r.error(f"unknown svm_type {svm_type!r}", lines["svm_type"])
    return svm_type


def _kernel_params(r: LineReader, head: dict, lines: dict) -> tuple[str, float, int, float]:
    """(kernel, gamma, degree, coef0) in ooc-svm's names."""
    kt = _one(r, head, lines, "kernel_type")
    if kt == "precomputed":
        raise r.error("kernel_type precomputed: the kernel values are not in the model")
    if kt not in KERNELS:
        raise r.error(f"unknown kernel_type {kt!r}", lines["kernel_type"])
    kernel = KERNELS[kt]
    gamma = (
        to_float(r, _one(r, head, lines, "gamma"), "gamma", lines.get("gamma"))
        if "gamma" in head
        else 0.0
    )
    degree = (
        to_int(r, _one(r, head, lines, "degree"), "degree", 0, lines.get("degree"))
        if "degree" in head
        else 3
    )
    coef0 = (
        to_float(r, _one(r, head, lines, "coef0"), "coef0", lines.get("coef0"))
        if "coef0" in head
        else 0.0
    )
    if kernel in ("poly", "rbf", "sigmoid") and "gamma" not in head:
        raise r.error(f"kernel_type {kt} without a 'gamma' line")
    return kernel, gamma, degree, coef0


def _classes(r: LineReader, head: dict, lines: dict):
    """(nr_class, total_sv, rho, label, nr_sv) of the header, consistent with each other."""
    k = to_int(r, _one(r, head, lines, "nr_class"), "nr_class", 2, lines.get("nr_class"))
    total = to_int(r, _one(r, head, lines, "total_sv"), "total_sv", 0, lines.get("total_sv"))
    for key in ("rho", "label", "nr_sv"):
        if key not in head:
            raise r.error(f"the header has no '{key}' line (needed for a classifier)")
    n_pairs = k * (k - 1) // 2
    rho = [to_float(r, t, "rho", lines.get("rho")) for t in head["rho"]]
    labels = [to_float(r, t, "label", lines.get("label")) for t in head["label"]]
    nr_sv = [to_int(r, t, "nr_sv", 0, lines.get("nr_sv")) for t in head["nr_sv"]]
    if len(rho) != n_pairs:
        raise r.error(f"{len(rho)} rho values for {k} classes, expected {n_pairs}")
    if len(labels) != k or len(nr_sv) != k:
        raise r.error(f"'label' and 'nr_sv' need {k} values each (nr_class {k})")
    if sum(nr_sv) != total:
        raise r.error(f"nr_sv sums to {sum(nr_sv)} but total_sv is {total}")
    return k, total, rho, labels, nr_sv


def _support_vectors(r: LineReader, k: int, total: int) -> tuple[np.ndarray, SparseRows]:
    """The ``total`` support vector lines: their k - 1 coefficients and their rows."""
    coef = GrowingRows(total, k - 1)  # grows with the lines read, not with total_sv
    rows = SparseRows()
    for s in range(total):
        line = r.need(f"support vector {s + 1} of {total} (total_sv)")
        toks = line.split()
        if len(toks) < k - 1:
            raise r.error(f"a support vector line needs {k - 1} coefficients first")
        c = coef.row()
        for m in range(k - 1):
            c[m] = to_float(r, toks[m], "coefficient")
        rows.add(r, toks[k - 1 :])
    return np.ascontiguousarray(coef.array().T), rows


def _width(path: str, sv_width: int, n_features: int | None, kernel: str) -> int:
    """The model's width: the support vectors', or the data's when wider."""
    width = sv_width
    if n_features is not None:
        width = max(width, int(n_features))
    width = check_width(path, max(width, 1), "width")
    if n_features is None and kernel == "rbf":
        log.info(
            "%s: RBF model over features 1..%d (largest index in a support vector); features "
            "beyond it are ignored when scoring: pass n_features to count them as LIBSVM does",
            path,
            width,
        )
    return width


def _probability(r: LineReader, head: dict, lines: dict, model: Model, n_pairs: int) -> None:
    """Keep ``probA``/``probB`` (``svm-train -b 1``): LIBSVM's sigmoids apply to its decision
    values, which are the imported model's (positive = ``label[0]`` = ``classes[1]`` for two
    classes; pairs in LIBSVM's order for one-vs-one), so they are stored as they are."""
    if "probA" not in head and "probB" not in head:
        return
    if "probA" not in head or "probB" not in head:
        raise r.error("'probA' and 'probB' must be given together")
    A = [to_float(r, t, "probA", lines.get("probA")) for t in head["probA"]]
    B = [to_float(r, t, "probB", lines.get("probB")) for t in head["probB"]]
    if len(A) != n_pairs or len(B) != n_pairs:
        raise r.error(f"probA/probB need {n_pairs} values each, got {len(A)}/{len(B)}")
    model.set_probability(A, B)


def _one(r: LineReader, head: dict, lines: dict, key: str) -> str:
    if key not in head:
        raise r.error(f"the header has no '{key}' line")
    v = head[key]
    if len(v) != 1:
        raise r.error(f"'{key}' needs one value", lines[key])
    return v[0]


def write(model: Model, out: str) -> None:
    """Write ``model`` as a LIBSVM model file (atomically)."""
    check_finite(model, out)
    kernel = model.kernel if model.kind != "linear" else "linear"
    if kernel not in _KERNEL_NAMES:
        raise FormatError(f"{out}: kernel {kernel!r} has no LIBSVM equivalent")
    gamma = float(model.gamma) or 1.0 / max(int(model.n_features), 1)
    if model.kind == "ovo":
        labels = [float(c) for c in model.classes]
        nr_sv = ovo_n_support(model).tolist()
        sv = sp.csr_matrix(model.support_vectors_)
        coef = np.asarray(model.dual_coef_, dtype=np.float64)
        rho = -np.asarray(model.intercept_, dtype=np.float64)
    elif np.ndim(model.intercept_) != 0 or len(model.classes) != 2:
        raise FormatError(
            f"{out}: one-vs-rest models have no LIBSVM form (LIBSVM is one-vs-one); export "
            "with --format liblinear (linear models) or one binary model per class"
        )
    elif model.kind == "linear" or (model.kind == "kernel" and kernel == "linear"):
        # one "support vector" holding w, coefficient 1, in the class of LIBSVM's label[0]
        w = linear_weights(model)
        nz = np.flatnonzero(w)
        sv = sp.csr_matrix((w[nz], nz, [0, nz.size]), shape=(1, w.shape[0]))
        labels = [float(model.classes[1]), float(model.classes[0])]
        nr_sv = [1, 0]
        coef = np.ones((1, 1))
        rho = np.array([-float(model.intercept_)])
    else:
        # LIBSVM groups support vectors by class: y = +1 (ooc-svm classes[1]) first
        sv = sp.csr_matrix(model.support_vectors_)
        c = np.asarray(model.dual_coef_, dtype=np.float64).ravel()
        order = np.concatenate([np.flatnonzero(c > 0), np.flatnonzero(c <= 0)])
        sv = sv[order]
        coef = c[order][None, :]
        labels = [float(model.classes[1]), float(model.classes[0])]
        nr_sv = [int(np.count_nonzero(c > 0)), int(np.count_nonzero(c <= 0))]
        rho = np.array([-float(model.intercept_)])
    sv.sort_indices()
    with atomic_text(out) as f:
        f.write("svm_type c_svc\n")
        f.write(f"kernel_type {_KERNEL_NAMES[kernel]}\n")
        if kernel == "poly":
            f.write(f"degree {int(model.degree)}\n")
        if kernel in ("poly", "rbf", "sigmoid"):
            f.write(f"gamma {fmt(gamma)}\n")
        if kernel in ("poly", "sigmoid"):
            f.write(f"coef0 {fmt(model.coef0)}\n")
        f.write(f"nr_class {len(labels)}\n")
        f.write(f"total_sv {sv.shape[0]}\n")
        f.write("rho " + " ".join(fmt(v) for v in rho) + "\n")
        f.write("label " + " ".join(fmt(v) for v in labels) + "\n")
        f.write("nr_sv " + " ".join(str(int(v)) for v in nr_sv) + "\n")
        f.write("SV\n")
        for s in range(sv.shape[0]):
            a, b = sv.indptr[s], sv.indptr[s + 1]
            cs = " ".join(fmt(v) for v in coef[:, s])
            f.write(f"{cs} {sparse_row_text(sv.indices[a:b], sv.data[a:b])}".rstrip() + " \n")
