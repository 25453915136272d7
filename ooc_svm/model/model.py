"""Trained models: save / load without pickle, decision_function, predict.

A model is a directory holding ``model.json`` (metadata) and ``arrays.npz`` (read with
``allow_pickle=False``). Loading a model never executes code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._util import json_default
from .model_files import (
    MAX_META_BYTES,
    ModelError,
    _check_arrays,
    _check_meta,
    _fail,
    _read_arrays,
    _regular_file,
    _size_bounds,
)
from .ovo import ovo_decision_function, ovo_labels, ovo_n_support, ovo_predict

if TYPE_CHECKING:  # scipy is imported where it is used: a linear model never needs it
    import scipy.sparse as sp
    from numpy.typing import ArrayLike

MODEL_FORMAT = "ooc-svm-model"
MODEL_VERSION = 1


def _as_csr(X, n_features: int) -> sp.csr_matrix:
    import scipy.sparse as sp

    X = sp.csr_matrix(X, dtype=np.float64)
    if X.shape[1] < n_features:
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    elif X.shape[1] > n_features:
        X = X[:, :n_features]
    return X


def _is_store(X) -> bool:
    return isinstance(X, (str, os.PathLike)) or hasattr(X, "read_shard")


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
    probA_, probB_ : ndarray of float64, optional
        Platt's sigmoid(s) ``1 / (1 + exp(A f + B))`` of ``train --probability`` (one for a
        binary model, one per class for one-vs-rest, one per pair for one-vs-one); None when
        the model has none (see :meth:`predict_proba`).
    probability_method : {"platt", "ovr-normalised", "ovo-coupling"} or None
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
    probA_: np.ndarray | None = None
    probB_: np.ndarray | None = None
    probability_method: str | None = None
    #: perf: the α-weighted mean of the last working set's cutting planes over the features
    #: and the bias entry (one row per class for one-vs-rest), which a later training on the
    #: grown store starts from (:mod:`ooc_svm.solvers.warm`); None for other models
    warm_cut_: np.ndarray | None = None
    #: perf: the points its last active cutting planes were computed at (rows over the
    #: features and the bias entry; one-vs-rest: the classes' rows one after the other,
    #: ``info["warm_points_per_class"]`` of them each), re-evaluated by a warm start
    warm_points_: np.ndarray | None = None
    #: perf: the columns (sorted; ``n_features`` is the bias entry) that ``warm_cut_`` and
    #: ``warm_points_`` are over — those their planes touch, not the store's width; None:
    #: every column and the bias entry (models written before ooc-svm kept them sparse)
    warm_cols_: np.ndarray | None = None
    #: perf ``--variant dcd``: its dual variables, one per training row in the store's row
    #: order (float32; ``info["warm_alpha"]``: their rows, C, hinge), which a later dcd
    #: training on the grown store starts from (:mod:`ooc_svm.solvers.perf.dcd_warm`)
    warm_alpha_: np.ndarray | None = None

    # -- probabilities --------------------------------------------------------------------
    def set_probability(self, probA: ArrayLike, probB: ArrayLike) -> None:
        """Attach fitted sigmoid parameters (from
        :func:`ooc_svm.evaluation.cross_validation.fit_platt`, or LIBSVM's ``probA``/``probB``);
        the method follows the kind of model."""
        self.probA_, self.probB_, self.probability_method = check_probability(
            self, probA, probB, probability_method_for(self)
        )

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probabilities from the model's Platt sigmoid (``train --probability``).

        ``X`` as for :meth:`decision_function` (a store included: streamed). Binary models:
        shape (n,), P(y = ``classes[1]`` | x). Multiclass: shape (n, n_classes), columns in
        the order of ``classes``, rows summing to 1 — one-vs-rest sigmoids divided by their
        sum, or one-vs-one pairs coupled as LIBSVM does (``probability_method``).
        Raises :class:`ModelError` when the model has no sigmoid.
        """
        require_probability(self)
        return probabilities(self, self.decision_function(X))

    # -- prediction -----------------------------------------------------------------------
    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``f(x)`` (positive → ``classes[1]``); shape (n,) or (n, n_classes) for OvR.

        ``X`` is a scipy / numpy matrix, or a store (path or opened store): then the store is
        scored shard by shard (:func:`ooc_svm.model.shard_scores.score_store`), never loaded
        whole.
        """
        if _is_store(X):
            from ..store import open_store
            from .shard_scores import score_store

            return score_store(self, X if hasattr(X, "read_shard") else open_store(X))
        if self.kind == "ovo":
            return ovo_decision_function(self, X)
        X = _as_csr(X, self.n_features)
        if self.kind == "linear":
            coef = np.asarray(self.coef_, dtype=np.float64)
            return np.asarray(X @ coef.T) + self.intercept_
        from ..kernels.kernel_functions import kernel_matrix

        K = kernel_matrix(
            X, self.support_vectors_, self.kernel, self.gamma, self.degree, self.coef0
        )
        return K @ np.asarray(self.dual_coef_, dtype=np.float64).T + self.intercept_

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels in the original label values (``X`` as for
        :meth:`decision_function`, a store included)."""
        if self.kind == "ovo" and not _is_store(X):
            return ovo_predict(self, X)
        return self.labels_of(self.decision_function(X))

    def labels_of(self, s: np.ndarray) -> np.ndarray:
        """Predicted labels from decision values ``s`` (as :meth:`decision_function` gives
        them): one-vs-one votes, the best one-vs-rest column, or the sign of f(x)."""
        if self.kind == "ovo":
            return ovo_labels(self, s)
        classes = np.asarray(self.classes, dtype=np.float64)
        if s.ndim == 2:
            return classes[np.argmax(s, axis=1)]
        return np.where(s > 0, classes[-1], classes[0])

    # -- persistence ----------------------------------------------------------------------
    def _persisted(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(model.json's content, arrays.npz's arrays)`` as :meth:`save` writes them."""
        arrays: dict[str, np.ndarray] = {}
        if self.coef_ is not None:
            arrays["coef"] = np.asarray(self.coef_, dtype=np.float64)
        arrays["intercept"] = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        if self.support_vectors_ is not None:
            import scipy.sparse as sp

            sv = sp.csr_matrix(self.support_vectors_)
            arrays["sv_indptr"] = sv.indptr.astype(np.int64)
            arrays["sv_indices"] = sv.indices.astype(np.int32)
            arrays["sv_data"] = sv.data.astype(np.float64)
            arrays["dual_coef"] = np.asarray(self.dual_coef_, dtype=np.float64)
        if self.support_ is not None:
            arrays["support"] = np.asarray(self.support_, dtype=np.int64)
        if self.warm_cut_ is not None and self.kind == "linear":
            arrays["warm_cut"] = np.asarray(self.warm_cut_, dtype=np.float64)
        if self.warm_points_ is not None and self.kind == "linear":
            arrays["warm_points"] = np.asarray(self.warm_points_, dtype=np.float32)
        if self.warm_alpha_ is not None and self.kind == "linear":
            arrays["warm_alpha"] = np.asarray(self.warm_alpha_, dtype=np.float32)
        if self.warm_cols_ is not None and ("warm_cut" in arrays or "warm_points" in arrays):
            cols = np.asarray(self.warm_cols_, dtype=np.int64)
            small = int(self.n_features) < np.iinfo(np.int32).max
            arrays["warm_cols"] = cols.astype(np.int32) if small else cols
        names = ("coef", "intercept", "sv_data", "dual_coef", "warm_cut", "warm_points")
        for name in (*names, "warm_alpha"):
            if name in arrays and not np.all(np.isfinite(arrays[name])):
                # load_model refuses it: never write a model that cannot be read back
                raise ModelError(
                    f"the model's {name} has non-finite values (the training overflowed); "
                    "scale the features and train again; nothing was written"
                )
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
        if self.probA_ is not None:
            meta["probability"] = probability_meta(self)
        return meta, arrays

    def save(self, path: str) -> None:
        """Write the model directory atomically (temporary directory, then rename), with the
        process umask (see :func:`ooc_svm._util.atomic_dir`)."""
        from .._util import atomic_dir

        path = str(path)  # atomic_dir makes it absolute; messages name it as given
        meta, arrays = self._persisted()
        try:
            with atomic_dir(path, prefix="model") as tmp:
                # numeric arrays only: no pickle is ever written (load_model refuses one)
                write_npz(os.path.join(tmp, "arrays.npz"), arrays)
                with open(os.path.join(tmp, "model.json"), "w") as f:
                    json.dump(meta, f, indent=1, default=json_default)
        except FileExistsError:
            raise ModelError(
                f"{path}: exists and is not a model directory; not overwriting"
            ) from None


#: arrays of at least this many items whose values are mostly zeros are deflated in the
#: ``.npz`` (a wide store's w: the columns no row of the training holds)
COMPRESS_MIN_ITEMS = 1 << 16


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` of ``arrays`` (no pickle), each member deflated where at least half its
    values are zero (a linear model over a wide store is mostly zeros: 20M columns, 1.2M
    trained), stored as it is otherwise (dense arrays gain little and load faster)."""
    import zipfile

    with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
        for name, arr in arrays.items():
            a = np.asarray(arr)
            sparse = a.size >= COMPRESS_MIN_ITEMS and 2 * np.count_nonzero(a) <= a.size
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if sparse else zipfile.ZIP_STORED
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, a, allow_pickle=False)


def check_model(model: Model, where: str = "model") -> None:
    """Validate ``model`` as :func:`load_model` validates a model directory, before it is
    written: a model this raises :class:`ModelError` for would be refused when loaded.

    For writers of models from outside data (``ooc-svm import``): the JSON of model.json is
    checked after a round trip through the JSON encoder, the arrays as stored.
    """
    meta, arrays = model._persisted()
    meta = json.loads(json.dumps(meta, default=json_default))
    m = _check_meta(where, meta)
    _check_arrays(where, m, arrays)
    if model.kind == "ovo":
        validate_ovo(model, where)
    p = meta.get("probability")
    if p is not None:
        check_probability(model, p.get("probA"), p.get("probB"), p.get("method"), where)


def load_model(path: str) -> Model:
    """Load a model directory written by :meth:`Model.save` (never unpickles anything).

    Everything is validated before use (types, shapes, index ranges, finiteness, the class
    list against the kind of model); any problem is a one-line :class:`ModelError` naming the
    model and the field.
    """
    path = str(path)
    where = path
    mpath = os.path.join(path, "model.json")
    if not os.path.exists(mpath) and not os.path.islink(mpath):
        raise ModelError(f"{path}: not an ooc-svm model (no model.json)")
    size = _regular_file(mpath, "model.json")
    if size > MAX_META_BYTES:
        raise ModelError(f"{path}: model.json is {size} bytes; not a model")
    try:
        with open(mpath, encoding="utf-8") as f:
            meta = json.loads(f.read(MAX_META_BYTES + 1))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: unreadable model.json ({e})") from None
    except RecursionError:
        raise ModelError(f"{path}: unreadable model.json (JSON nested too deeply)") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read model.json ({e.strerror})") from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ModelError(f"{path}: not an ooc-svm model")
    version = meta.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(where, "version", f"{version!r} is not a model format version")
    if version > MODEL_VERSION:
        raise ModelError(
            f"{path}: model format version {meta.get('version')} is newer than this ooc-svm "
            "supports; upgrade ooc-svm"
        )
    m = _check_meta(where, meta)
    arrays = _read_arrays(where, os.path.join(path, "arrays.npz"), _size_bounds(m))
    a = _check_arrays(where, m, arrays)
    model = Model(
        kind=m["kind"],
        n_features=m["n_features"],
        classes=m["classes"],
        coef_=a.get("coef"),
        intercept_=a["intercept"],
        support_vectors_=a["sv"],
        dual_coef_=a["dual_coef"],
        support_=a["support"],
        kernel=m["kernel"],
        gamma=m["gamma"],
        degree=m["degree"],
        coef0=m["coef0"],
        info=dict(m["info"]),
        warm_cut_=a["warm_cut"],
        warm_points_=a["warm_points"],
        warm_cols_=a["warm_cols"],
        warm_alpha_=a["warm_alpha"],
    )
    if model.kind == "ovo":
        validate_ovo(model, path)
    load_probability(model, meta, where)
    return model


# ------------------------------------------------------------------------------------------
# One-vs-one multiclass kernel models (kind "ovo"), as LIBSVM's C-SVC builds them; their
# decision values and votes are in ooc_svm.ovo. Additive block (interop): imported LIBSVM
# models; nothing above depends on it except the two dispatch lines in decision_function /
# predict and the check in load_model.
# ------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------
# Probability outputs (Platt's sigmoid on the decision values; ooc_svm.probability).
# Additive block: stored in model.json under "probability" (old models have none and load
# unchanged); nothing above depends on it except Model's three fields and methods, the line
# in save and the check in load_model.
# ------------------------------------------------------------------------------------------
#: how decision values become probabilities, by kind of model
PROBABILITY_METHODS = {
    "platt": "binary: P(y = classes[1] | x) = 1 / (1 + exp(A f(x) + B))",
    "ovr-normalised": "one-vs-rest: one sigmoid per class, divided by their sum",
    "ovo-coupling": "one-vs-one: one sigmoid per pair, coupled as LIBSVM (Wu, Lin & Weng 2004)",
}


def probability_method_for(model: Model) -> str:
    """The method that fits ``model``'s kind: ``platt`` (binary), ``ovr-normalised``
    (one-vs-rest), ``ovo-coupling`` (one-vs-one)."""
    if model.kind == "ovo":
        return "ovo-coupling"
    return "platt" if np.ndim(model.intercept_) == 0 else "ovr-normalised"


def _n_sigmoids(model: Model, method: str) -> int:
    k = len(model.classes)
    return {"platt": 1, "ovr-normalised": k, "ovo-coupling": k * (k - 1) // 2}[method]


def check_probability(
    model: Model, probA: Any, probB: Any, method: Any, where: str = "model"
) -> tuple:
    """Validate sigmoid parameters against the model; returns ``(A, B, method)`` as float64
    arrays and str, or raises a one-line :class:`ModelError` naming ``where``."""
    if method not in PROBABILITY_METHODS:
        raise ModelError(
            f"{where}: invalid model: probability method {method!r} is not one of "
            f"{', '.join(PROBABILITY_METHODS)}"
        )
    want = probability_method_for(model)
    if method != want:
        raise ModelError(
            f"{where}: invalid model: probability method {method!r} does not fit a "
            f"{want.split('-')[0] if want != 'platt' else 'binary'} model (expected {want!r})"
        )
    n = _n_sigmoids(model, method)
    out = []
    for name, v in (("probA", probA), ("probB", probB)):
        if isinstance(v, list) and not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
        ):
            raise ModelError(f"{where}: invalid model: {name} must be a list of numbers")
        try:
            a = np.atleast_1d(np.asarray(v, dtype=np.float64))
        except (TypeError, ValueError):
            raise ModelError(f"{where}: invalid model: {name} must be a list of numbers") from None
        if a.ndim != 1 or a.shape[0] != n:
            raise ModelError(
                f"{where}: invalid model: {name} has {a.size} values; expected {n} for "
                f"{len(model.classes)} classes ({method})"
            )
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{where}: invalid model: {name} has non-finite values")
        out.append(a)
    return out[0], out[1], method


def probability_meta(model: Model) -> dict | None:
    """The ``probability`` entry of model.json (None when the model has no sigmoid)."""
    if model.probA_ is None or model.probB_ is None:
        return None
    return {
        "method": model.probability_method,
        "probA": [float(a) for a in model.probA_],
        "probB": [float(b) for b in model.probB_],
    }


def load_probability(model: Model, meta: dict, where: str) -> None:
    """Set ``model``'s sigmoid from model.json's ``probability`` entry, validated."""
    p = meta.get("probability")
    if p is None:
        return
    if not isinstance(p, dict):
        raise ModelError(f"{where}: invalid model: probability must be a JSON object")
    A, B, method = check_probability(model, p.get("probA"), p.get("probB"), p.get("method"), where)
    model.probA_, model.probB_, model.probability_method = A, B, method


def require_probability(model: Model, name: str = "the model") -> None:
    """Raise a one-line :class:`ModelError` when ``model`` has no sigmoid."""
    if model.probA_ is None:
        raise ModelError(
            f"{name} has no probability sigmoid; train it with `ooc-svm train --probability` "
            "(or ooc_svm.train(..., probability=True))"
        )


def probabilities(model: Model, dec: np.ndarray) -> np.ndarray:
    """Probabilities from decision values of ``model`` (see :meth:`Model.predict_proba`)."""
    from . import probability as pr

    require_probability(model)
    A, B = model.probA_, model.probB_
    assert A is not None and B is not None  # require_probability refused a model without them
    dec = np.asarray(dec, dtype=np.float64)
    if model.probability_method == "platt":
        if dec.ndim != 1:
            raise ValueError(f"a binary model's decision values are 1-D, got shape {dec.shape}")
        return np.clip(pr.sigmoid_predict(dec, A[0], B[0]), pr.MIN_PROB, 1 - pr.MIN_PROB)
    if dec.shape[0] == 0:
        return np.zeros((0, len(model.classes)))
    if model.probability_method == "ovr-normalised":
        return pr.ovr_probability(dec, A, B)
    return pr.ovo_probability(dec, A, B)
