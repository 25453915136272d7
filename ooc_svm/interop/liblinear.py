"""LIBLINEAR model files (``train`` / ``save_model``) of linear classifiers.

Layout, as LIBLINEAR writes it::

    solver_type L2R_L1LOSS_SVC_DUAL     -s 3 (L2R_L2LOSS_SVC is -s 2, ...)
    nr_class 2
    label 1 -1                          class labels in LIBLINEAR's order
    nr_feature 123
    bias 1                              -1: no bias feature
    w
    w_1                                 one line per feature (plus one for the bias feature),
    ...                                 nr_w values each: 1 for two classes, else nr_class

Decision values: w·x (+ w_bias · bias). Two classes: positive → ``label[0]``; more classes:
one-vs-rest (``MCSVM_CS``: Crammer-Singer), the largest value wins, ties to the first class.

Mapping to ooc-svm: ``kind="linear"``; two classes → ``classes = [label[1], label[0]]``,
``coef_ = w``, ``intercept_ = w_bias · bias``; more classes → one row of ``coef_`` per class
in LIBLINEAR's label order (argmax, as LIBLINEAR predicts). Regression and one-class solvers
are refused.
"""

from __future__ import annotations

import numpy as np

from ..model.model import Model
from ._io import (
    FormatError,
    GrowingRows,
    LineReader,
    atomic_text,
    check_finite,
    check_width,
    expect_end,
    fmt,
    linear_weights,
    read_header,
    to_float,
    to_int,
)

#: LIBLINEAR's solver_type names of linear classifiers, with their ``-s`` numbers
CLASSIFIERS = {
    "L2R_LR": 0,
    "L2R_L2LOSS_SVC_DUAL": 1,
    "L2R_L2LOSS_SVC": 2,
    "L2R_L1LOSS_SVC_DUAL": 3,
    "MCSVM_CS": 4,
    "L1R_L2LOSS_SVC": 5,
    "L1R_LR": 6,
    "L2R_LR_DUAL": 7,
}
OTHER = ("L2R_L2LOSS_SVR", "L2R_L2LOSS_SVR_DUAL", "L2R_L1LOSS_SVR_DUAL", "ONECLASS_SVM")
_KEYS = ("solver_type", "nr_class", "label", "nr_feature", "bias", "rho")


def read(path: str, n_features: int | None = None) -> Model:
    """Read a LIBLINEAR model file (plain or compressed).

    ``n_features`` widens the model (weights 0) when the data is wider than ``nr_feature``.
    """
    with LineReader(path) as r:
        solver, k, nf, bias, labels = _read_header(r)
        check_width(path, nf, "nr_feature")  # before n weights are allocated
        nr_w = 1 if (k == 2 and solver != "MCSVM_CS") else k
        n = nf + (1 if bias >= 0 else 0)
        w = _read_weights(r, n, nr_w)
        expect_end(r, f"text after the {n} weight lines")
    width = check_width(path, max(nf, int(n_features or 0), 1), "nr_feature")
    coef = np.zeros((nr_w, width))
    coef[:, :nf] = w[:nf].T
    b = w[nf] * bias if bias >= 0 else np.zeros(nr_w)
    info = {
        "solver": f"liblinear {solver}",
        "liblinear_solver": solver,
        "liblinear_s": CLASSIFIERS[solver],
        "bias": bias,
        "imported_from": str(path),
        "format": "liblinear",
    }
    if nr_w == 1:
        return Model(
            kind="linear",
            n_features=width,
            classes=[labels[1], labels[0]],
            coef_=coef[0],
            intercept_=float(b[0]),
            info=info,
        )
    info["multiclass"] = "crammer-singer" if solver == "MCSVM_CS" else "ovr"
    return Model(
        kind="linear", n_features=width, classes=labels, coef_=coef, intercept_=b, info=info
    )


def _read_header(r: LineReader) -> tuple[str, int, int, float, list[float]]:
    """(solver_type, nr_class, nr_feature, bias, labels) of the header, checked."""
    head, lines = read_header(
        r, _KEYS, name="LIBLINEAR", first="solver_type", end="w", end_alone=True,
        others="LIBSVM models start with 'svm_type', SVMlight models with 'SVM-light Version'",
    )  # fmt: skip
    for key in ("solver_type", "nr_class", "nr_feature", "bias"):
        if len(head.get(key, [])) != 1:
            raise r.error(f"the header needs one '{key}' line with one value", lines.get(key))
    solver = head["solver_type"][0]
    if solver in OTHER:
        raise r.error(
            f"solver_type {solver}: only classifiers can be imported", lines["solver_type"]
        )
    if solver not in CLASSIFIERS:
        raise r.error(f"unknown solver_type {solver!r}", lines["solver_type"])
    k = to_int(r, head["nr_class"][0], "nr_class", 2, lines["nr_class"])
    nf = to_int(r, head["nr_feature"][0], "nr_feature", 0, lines["nr_feature"])
    bias = to_float(r, head["bias"][0], "bias", lines["bias"])
    labels = [to_float(r, t, "label", lines.get("label")) for t in head.get("label", [])]
    if len(labels) != k:
        raise r.error(f"'label' needs {k} values (nr_class {k})", lines.get("label"))
    return solver, k, nf, bias, labels


def _read_weights(r: LineReader, n: int, nr_w: int) -> np.ndarray:
    """The ``n`` weight lines of ``nr_w`` finite values each (memory grows with the lines
    read, not with the ``nr_feature`` claimed: a file that ends early fails in one line)."""
    rows = GrowingRows(n, nr_w)
    for i in range(n):
        toks = r.need(f"weight line {i + 1} of {n} (nr_feature)").split()
        if len(toks) != nr_w:
            raise r.error(f"a weight line needs {nr_w} values, found {len(toks)}")
        w = rows.row()
        try:
            w[:] = np.array(toks, dtype=np.float64)
        except ValueError:
            w[:] = [to_float(r, t, "weight") for t in toks]
        if not np.all(np.isfinite(w)):
            raise r.error("a weight is not finite")
    return rows.array()


def write(model: Model, out: str, solver: str | None = None) -> None:
    """Write a linear model as a LIBLINEAR model file (atomically).

    ``solver``: the ``solver_type`` line (default: from the model's info, else
    ``L2R_L1LOSS_SVC_DUAL``, the hinge-loss SVM all ooc-svm solvers train). The intercept
    becomes the weight of a bias feature of value 1 (``bias 1``), or ``bias -1`` when it is 0.
    """
    check_finite(model, out)
    if model.kind == "ovo" or (model.kind == "kernel" and model.kernel != "linear"):
        raise FormatError(
            f"{out}: a {model.kernel} kernel model has no LIBLINEAR form (LIBLINEAR models are "
            "linear); use --format libsvm or --format svmlight"
        )
    if model.kind == "kernel" and np.ndim(model.intercept_) != 0:
        raise FormatError(f"{out}: one-vs-rest kernel models cannot be written for LIBLINEAR")
    solver = solver or model.info.get("liblinear_solver") or "L2R_L1LOSS_SVC_DUAL"
    if solver not in CLASSIFIERS:
        raise FormatError(f"{out}: unknown LIBLINEAR solver_type {solver!r}")
    if np.ndim(model.intercept_) == 0:
        labels = [float(model.classes[1]), float(model.classes[0])]
        W = linear_weights(model)[:, None]
        b = np.array([float(model.intercept_)])
        if solver == "MCSVM_CS":
            solver = "L2R_L1LOSS_SVC_DUAL"
    else:
        labels = [float(c) for c in model.classes]
        W = np.atleast_2d(np.asarray(model.coef_, dtype=np.float64)).T
        b = np.asarray(model.intercept_, dtype=np.float64)
        if len(labels) == 2 and solver != "MCSVM_CS":
            raise FormatError(
                f"{out}: a two-class model with two weight rows is LIBLINEAR's MCSVM_CS only"
            )
    has_bias = bool(np.any(b != 0))
    with atomic_text(out) as f:
        f.write(f"solver_type {solver}\n")
        f.write(f"nr_class {len(labels)}\n")
        f.write("label " + " ".join(fmt(v) for v in labels) + "\n")
        f.write(f"nr_feature {W.shape[0]}\n")
        f.write(f"bias {1 if has_bias else -1}\n")
        f.write("w\n")
        for row in W:
            f.write(" ".join(format(v, ".17g") for v in row) + " \n")
        if has_bias:
            f.write(" ".join(format(v, ".17g") for v in b) + " \n")
