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

from ._util import json_default
from .ovo import ovo_decision_function, ovo_labels, ovo_n_support, ovo_predict

if TYPE_CHECKING:  # scipy is imported where it is used: a linear model never needs it
    import scipy.sparse as sp

MODEL_FORMAT = "ooc-svm-model"
MODEL_VERSION = 1


class ModelError(Exception):
    """A model file cannot be read."""


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

    # -- probabilities --------------------------------------------------------------------
    def set_probability(self, probA, probB) -> None:
        """Attach fitted sigmoid parameters (from :func:`ooc_svm.probability.fit_platt`,
        or LIBSVM's ``probA``/``probB``); the method follows the kind of model."""
        self.probA_, self.probB_, self.probability_method = check_probability(
            self, probA, probB, probability_method_for(self)
        )

    def predict_proba(self, X) -> np.ndarray:
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
    def decision_function(self, X) -> np.ndarray:
        """Scores ``f(x)`` (positive → ``classes[1]``); shape (n,) or (n, n_classes) for OvR.

        ``X`` is a scipy / numpy matrix, or a store (path or opened store): then the store is
        scored shard by shard (:func:`ooc_svm.shard_scores.score_store`), never loaded whole.
        """
        if _is_store(X):
            from .shard_scores import score_store
            from .store import open_store

            return score_store(self, X if hasattr(X, "read_shard") else open_store(X))
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
        for name in ("coef", "intercept", "sv_data", "dual_coef"):
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
        from ._util import atomic_dir

        path = str(path)  # atomic_dir makes it absolute; messages name it as given
        meta, arrays = self._persisted()
        try:
            with atomic_dir(path, prefix="model") as tmp:
                # numeric arrays only: no pickle is ever written (load_model refuses one)
                np.savez(os.path.join(tmp, "arrays.npz"), allow_pickle=False, **arrays)
                with open(os.path.join(tmp, "model.json"), "w") as f:
                    json.dump(meta, f, indent=1, default=json_default)
        except FileExistsError:
            raise ModelError(
                f"{path}: exists and is not a model directory; not overwriting"
            ) from None


# --------------------------------------------------------------------------------------------
# loading: bounded reads, complete validation
# --------------------------------------------------------------------------------------------

#: arrays a model may hold (``arrays.npz`` members, without ``.npy``)
_ARRAY_NAMES = ("coef", "intercept", "sv_indptr", "sv_indices", "sv_data", "dual_coef", "support")
#: largest model.json read (bytes)
MAX_META_BYTES = 64 << 20
#: largest declared (uncompressed) size of all arrays together (bytes)
MAX_ARRAY_BYTES = 16 << 30
#: largest polynomial degree accepted (the kernel loops ``degree`` times per value)
MAX_DEGREE = 1000
_KERNELS = ("linear", "poly", "rbf", "sigmoid")


def _regular_file(path: str, what: str) -> int:
    """Size of ``path`` if it is a regular file (symlinks followed); ModelError otherwise."""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelError(f"{os.path.dirname(path)}: not an ooc-svm model (no {what})") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read {what} ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{path}: {what} is not a regular file; refusing to read it")
    return int(st.st_size)


def _size_bounds(m: dict) -> dict[str, int]:
    """Largest plausible byte size of each array member, from model.json (16-byte items)."""
    nf, k, n_sv = m["n_features"], len(m["classes"]), m["n_sv"]
    hdr = 4096
    return {
        "coef": 16 * k * nf + hdr,
        "intercept": 16 * k * k + hdr,
        "sv_indptr": 16 * (n_sv + 1) + hdr,
        "sv_indices": 16 * n_sv * nf + hdr,
        "sv_data": 16 * n_sv * nf + hdr,
        "dual_coef": 16 * k * n_sv + hdr,
        "support": 16 * n_sv + hdr,
    }


def _read_arrays(where: str, path: str, bounds: dict[str, int]) -> dict[str, np.ndarray]:
    """Read ``arrays.npz`` without trusting it: only known members, declared sizes checked
    against the file, against what model.json implies (``bounds``) and against each array's
    header before anything is decompressed (a zip bomb is refused unread)."""
    import zipfile

    size = _regular_file(path, "arrays.npz")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise ModelError(f"{where}: arrays.npz is not a valid npz file ({e})") from None
    arrays: dict[str, np.ndarray] = {}
    with zf:
        infos = zf.infolist()
        if len(infos) > 2 * len(_ARRAY_NAMES):
            raise ModelError(f"{where}: arrays.npz has {len(infos)} members; not a model")
        total = 0
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in _ARRAY_NAMES:
                raise ModelError(f"{where}: arrays.npz has an unknown member {info.filename!r}")
            if name in arrays:
                raise ModelError(f"{where}: arrays.npz has {name!r} twice")
            if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
                raise ModelError(f"{where}: arrays.npz member {name!r} has inconsistent sizes")
            if (
                info.compress_size > size
                or info.file_size > 1100 * info.compress_size + 4096
                or info.file_size > bounds[name]
            ):
                raise ModelError(
                    f"{where}: arrays.npz member {name!r} declares {info.file_size} bytes from "
                    f"{info.compress_size} compressed, more than model.json allows (a zip bomb?); "
                    "refusing to read it"
                )
            total += info.file_size
            if total > MAX_ARRAY_BYTES:
                raise ModelError(
                    f"{where}: arrays.npz declares more than {MAX_ARRAY_BYTES >> 30} GiB of "
                    "arrays; refusing to read it"
                )
            arrays[name] = read_npy_member(where, zf, info, name)
    return arrays


def read_npy_member(where: str, zf, info, name: str) -> np.ndarray:
    """One array of an open ``.npz`` (:class:`zipfile.ZipFile` ``zf``, member ``info``) read
    without trusting it: real numbers only (never a pickle), the shape its header declares
    checked against the bytes stored before anything is read, the member's CRC checked.
    Raises :class:`ModelError` (``where``: what to name in the message)."""
    import zipfile

    fmt = np.lib.format
    try:
        with zf.open(info) as f:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            if dtype.hasobject or dtype.kind not in "biuf" or dtype.fields is not None:
                raise _fail(where, repr(name), f"has dtype {dtype}; expected real numbers")
            count = int(np.prod(shape, dtype=object)) if shape else 1
            if count * dtype.itemsize > info.file_size:
                raise ModelError(
                    f"{where}: field {name!r} declares shape {tuple(shape)}, more than the "
                    f"{info.file_size} bytes stored"
                )
            data = f.read(count * dtype.itemsize)
            if len(data) != count * dtype.itemsize:
                raise ModelError(f"{where}: field {name!r} is truncated")
            f.read(1)  # to the member's end: its CRC is checked there
            a = np.frombuffer(data, dtype=dtype)
            a = a.reshape(shape, order="F" if fortran else "C")
            return np.array(a, dtype=dtype.newbyteorder("=") if dtype.kind != "b" else dtype)
    except ModelError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError) as e:
        raise ModelError(f"{where}: unreadable field {name!r} in arrays.npz ({e})") from None


def _fail(where: str, field_: str, why: str) -> ModelError:
    return ModelError(f"{where}: invalid model: {field_} {why}")


def _meta_number(where: str, meta: dict, key: str, kind: type, default=None):
    v = meta.get(key, default)
    ok = isinstance(v, (int, float) if kind is float else int) and not isinstance(v, bool)
    if not ok:
        raise _fail(where, key, f"must be {'a number' if kind is float else 'an integer'}")
    v = kind(v)
    if kind is float and not np.isfinite(v):
        raise _fail(where, key, "must be finite")
    return v


def _real_array(where: str, arrays: dict, name: str, ndim: tuple[int, ...]) -> np.ndarray:
    if name not in arrays:
        raise _fail(where, name, "is missing from arrays.npz")
    a = arrays[name]
    if a.dtype.kind not in "iuf" or a.ndim not in ndim:
        raise _fail(where, name, f"must be a {'/'.join(map(str, ndim))}-D real array")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise _fail(where, name, "has non-finite values")
    return a


def _int_array(where: str, arrays: dict, name: str) -> np.ndarray:
    if name not in arrays:
        raise _fail(where, name, "is missing from arrays.npz")
    a = arrays[name]
    if a.dtype.kind not in "iu" or a.ndim != 1:
        raise _fail(where, name, "must be a 1-D integer array")
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise _fail(where, name, "has values out of range")
    return a.astype(np.int64)


def _check_meta(where: str, meta: dict) -> dict:
    """Types and ranges of model.json; returns the normalised fields."""
    out: dict[str, Any] = {}
    kind = meta.get("kind")
    if kind not in ("linear", "kernel", "ovo"):
        raise _fail(where, "kind", f"must be 'linear', 'kernel' or 'ovo', not {kind!r}")
    out["kind"] = kind
    nf = _meta_number(where, meta, "n_features", int)
    if not (1 <= nf <= (1 << 31)):
        raise _fail(where, "n_features", f"{nf} is out of range")
    out["n_features"] = nf
    classes = meta.get("classes")
    if not isinstance(classes, list) or not all(
        isinstance(c, (int, float)) and not isinstance(c, bool) for c in classes
    ):
        raise _fail(where, "classes", "must be a list of numbers")
    classes = [float(c) for c in classes]
    if len(classes) < 2 or not np.all(np.isfinite(classes)) or len(set(classes)) != len(classes):
        raise _fail(where, "classes", "must hold at least two distinct finite values")
    out["classes"] = classes
    scalar = meta.get("intercept_is_scalar", True)
    if not isinstance(scalar, bool):
        raise _fail(where, "intercept_is_scalar", "must be true or false")
    out["scalar"] = scalar
    kernel = meta.get("kernel", "linear")
    if kernel not in _KERNELS:
        raise _fail(where, "kernel", f"must be one of {', '.join(_KERNELS)}, not {kernel!r}")
    out["kernel"] = kernel
    out["gamma"] = _meta_number(where, meta, "gamma", float, 0.0)
    if out["gamma"] < 0:
        raise _fail(where, "gamma", "must not be negative")
    out["degree"] = _meta_number(where, meta, "degree", int, 3)
    if not (0 <= out["degree"] <= MAX_DEGREE):
        raise _fail(where, "degree", f"must be between 0 and {MAX_DEGREE}")
    out["coef0"] = _meta_number(where, meta, "coef0", float, 0.0)
    info = meta.get("info", {})
    if not isinstance(info, dict):
        raise _fail(where, "info", "must be a JSON object")
    out["info"] = info
    loss = info.get("loss")
    if kind == "ovo" and scalar:
        raise _fail(where, "intercept_is_scalar", "must be false for a one-vs-one model")
    if scalar and len(classes) != 2 and loss != "ordinal":
        raise _fail(
            where, "classes", f"has {len(classes)} values but the model is binary (one intercept)"
        )
    if not scalar and loss in ("roc", "ordinal"):
        raise _fail(where, "intercept_is_scalar", f"must be true for a {loss} ranking model")
    n_sv = meta.get("n_support_vectors", 0)
    if not isinstance(n_sv, int) or isinstance(n_sv, bool) or n_sv < 0:
        raise _fail(where, "n_support_vectors", "must be a non-negative integer")
    out["n_sv"] = n_sv
    return out


def _check_arrays(where: str, m: dict, arrays: dict) -> dict:
    """Shapes, dtypes, index ranges and finiteness of the arrays against model.json."""
    import scipy.sparse as sp

    nf, k = m["n_features"], len(m["classes"])
    ovo = m["kind"] == "ovo"
    n_out = 1 if m["scalar"] else (k * (k - 1) // 2 if ovo else k)
    out: dict[str, Any] = {}
    b = _real_array(where, arrays, "intercept", (1,))
    if b.shape[0] != n_out:
        raise _fail(where, "intercept", f"has {b.shape[0]} values; expected {n_out}")
    out["intercept"] = float(b[0]) if m["scalar"] else b
    if m["kind"] == "linear":
        coef = _real_array(where, arrays, "coef", (1,) if m["scalar"] else (2,))
        want = (nf,) if m["scalar"] else (k, nf)
        if coef.shape != want:
            raise _fail(where, "coef", f"has shape {coef.shape}; expected {want} (n_features)")
        out["coef"] = coef
        kept = ("sv_indptr", "sv_indices", "sv_data", "dual_coef", "support")
        if not any(a in arrays for a in kept):
            out["sv"], out["dual_coef"], out["support"] = None, None, None
            return out
        # a linear model may keep its SVs and yα (dual solvers, for warm starts): check them
    elif "coef" in arrays:
        raise _fail(where, "coef", "is present in a kernel model")
    n_sv = m["n_sv"]
    have_sv = any(a in arrays for a in ("sv_indptr", "sv_indices", "sv_data"))
    if not have_sv:
        if n_sv != 0:
            raise _fail(where, "sv_indptr", "is missing from arrays.npz")
        out["sv"] = None
    else:
        indptr = _int_array(where, arrays, "sv_indptr")
        indices = _int_array(where, arrays, "sv_indices")
        data = _real_array(where, arrays, "sv_data", (1,))
        if indptr.shape[0] != n_sv + 1:
            raise _fail(
                where, "sv_indptr", f"has {indptr.shape[0]} entries; expected n_SV + 1 = {n_sv + 1}"
            )
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.shape[0]:
            raise _fail(where, "sv_indptr", "must rise monotonically from 0 to nnz")
        if data.shape[0] != indices.shape[0]:
            n_ix = indices.shape[0]
            raise _fail(where, "sv_data", f"has {data.shape[0]} values for {n_ix} indices")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= nf):
            raise _fail(where, "sv_indices", f"must lie in 0 <= index < n_features = {nf}")
        out["sv"] = sp.csr_matrix((data, indices.astype(np.int32), indptr), shape=(n_sv, nf))
    dc = _real_array(where, arrays, "dual_coef", (1,) if m["scalar"] else (2,))
    want = (n_sv,) if m["scalar"] else ((k - 1) if ovo else k, n_sv)
    if dc.shape != want:
        raise _fail(where, "dual_coef", f"has shape {dc.shape}; expected {want} (n_SV)")
    out["dual_coef"] = dc
    out["support"] = None
    if "support" in arrays:
        sup = _int_array(where, arrays, "support")
        if sup.shape[0] != n_sv or (sup.size and int(sup.min()) < 0):
            raise _fail(where, "support", f"must hold {n_sv} non-negative row indices")
        out["support"] = sup
    return out


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


def check_probability(model: Model, probA, probB, method, where: str = "model") -> tuple:
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


def probabilities(model: Model, dec) -> np.ndarray:
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
