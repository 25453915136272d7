"""Model files read without trusting them: bounded reads and complete validation.

``model.json`` and ``arrays.npz`` (no pickle) are checked before any kernel sees them:
regular files only, sizes declared in the zip checked against the file and against what
``model.json`` implies (a zip bomb is refused unread), each array's header, dtypes, shapes,
index ranges, finite values and the class list. :class:`ModelError` is the one error;
:func:`ooc_svm.model.model.load_model` builds the model from what these checks return, and the
solver checkpoints (:mod:`ooc_svm.checkpoint`) read their arrays with :func:`read_npy_member`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import zipfile


class ModelError(Exception):
    """A model file cannot be read."""


# --------------------------------------------------------------------------------------------
# loading: bounded reads, complete validation
# --------------------------------------------------------------------------------------------

#: arrays a model may hold (``arrays.npz`` members, without ``.npy``)
_ARRAY_NAMES = (
    "coef",
    "intercept",
    "sv_indptr",
    "sv_indices",
    "sv_data",
    "dual_coef",
    "support",
    "warm_cut",
    "warm_points",
    "warm_cols",
    "warm_alpha",
)
#: perf models keep at most this many points of cutting planes per class (warm starts)
WARM_POINTS_MAX = 32
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
        "warm_cut": 16 * k * (nf + 1) + hdr,
        "warm_points": 16 * WARM_POINTS_MAX * k * (nf + 1) + hdr,
        "warm_cols": 16 * (nf + 1) + hdr,
        "warm_alpha": 16 * _alpha_rows(m) + hdr,
    }


#: the model.json fields each member's bound (:func:`_size_bounds`) is computed from
_BOUND_FIELDS = {
    "coef": "n_features and classes",
    "intercept": "classes",
    "sv_indptr": "n_support_vectors",
    "sv_indices": "n_support_vectors and n_features",
    "sv_data": "n_support_vectors and n_features",
    "dual_coef": "n_support_vectors and classes",
    "support": "n_support_vectors",
    "warm_cut": "n_features and classes",
    "warm_points": "n_features and classes",
    "warm_cols": "n_features",
    "warm_alpha": "info.warm_alpha.n_rows",
}


def _alpha_rows(m: dict) -> int:
    """Rows of dcd's dual variables that model.json declares (``info.warm_alpha.n_rows``)."""
    spec = m["info"].get("warm_alpha")
    return int(spec.get("n_rows", 0)) if isinstance(spec, dict) else 0


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
                    f"{info.compress_size} compressed, more than model.json's "
                    f"{_BOUND_FIELDS[name]} allow (a zip bomb, or model.json was changed); "
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


def _check_warm(where: str, m: dict, arrays: dict[str, np.ndarray], out: dict) -> None:
    """perf's warm-start state: ``warm_cols`` (sorted distinct columns in [0, n_features],
    n_features the bias entry; absent: all of them) and, over those, the aggregated plane
    ``warm_cut`` and the plane points ``warm_points``."""
    nf, k = m["n_features"], len(m["classes"])
    out["warm_cols"] = None
    width = nf + 1
    if "warm_cols" in arrays:
        wcols = arrays["warm_cols"]
        if (
            m["kind"] != "linear"
            or wcols.ndim != 1
            or wcols.dtype.kind not in "iu"
            or wcols.shape[0] > nf + 1
            or ("warm_cut" not in arrays and "warm_points" not in arrays)
        ):
            raise _fail(where, "warm_cols", f"has shape {wcols.shape} and dtype {wcols.dtype}")
        wcols = wcols.astype(np.int64)
        if wcols.size and (wcols[0] < 0 or wcols[-1] > nf or np.any(np.diff(wcols) <= 0)):
            raise _fail(where, "warm_cols", f"must be increasing columns in [0, {nf}]")
        out["warm_cols"], width = wcols, int(wcols.shape[0])
    out["warm_cut"] = None
    if "warm_cut" in arrays:  # perf's aggregated cutting plane (warm starts)
        wc = _real_array(where, arrays, "warm_cut", (1,) if m["scalar"] else (2,))
        want_wc = (width,) if m["scalar"] else (k, width)
        if m["kind"] != "linear" or wc.shape != want_wc:
            raise _fail(where, "warm_cut", f"has shape {wc.shape}; expected {want_wc}")
        out["warm_cut"] = wc
    out["warm_points"] = None
    if "warm_points" in arrays:  # perf: the points of its last planes (warm starts)
        wp = _real_array(where, arrays, "warm_points", (2,))
        if m["kind"] != "linear" or wp.shape[1] != width or wp.shape[0] > WARM_POINTS_MAX * k:
            raise _fail(
                where,
                "warm_points",
                f"has shape {wp.shape}; expected (<= {WARM_POINTS_MAX * k}, {width})",
            )
        out["warm_points"] = wp
    out["warm_alpha"] = None
    if "warm_alpha" in arrays:  # dcd: its dual variables, one per training row
        wa = _real_array(where, arrays, "warm_alpha", (1,))
        n = _alpha_rows(m)
        if m["kind"] != "linear" or not m["scalar"] or wa.shape != (n,):
            raise _fail(
                where,
                "warm_alpha",
                f"has shape {wa.shape}; expected ({n},) (info.warm_alpha.n_rows)",
            )
        if wa.size and float(wa.min()) < 0.0:
            raise _fail(where, "warm_alpha", "must not be negative")
        out["warm_alpha"] = wa


def read_npy_member(
    where: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str
) -> np.ndarray:
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
    _check_info(where, info)
    out["info"] = info
    p = meta.get("probability")
    if p is not None and not isinstance(p, dict):
        raise _fail(where, "probability", f"must be a JSON object, not {_shown(p)}")
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


def _shown(v: Any) -> str:
    """A JSON value as a message shows it (shortened)."""
    import json

    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


#: what the readers of a model (``train --init``, ``predict``, ``evaluate``, ``info``,
#: ``export``) take from ``info``: field -> (test, what it must be). A field may be absent;
#: null only where the test allows it.
_INFO_FIELDS: dict[str, tuple[Any, str]] = {
    "C": (lambda v: _is_number(v) and v > 0, "a positive number"),
    "bias": (lambda v: v is None or _is_number(v), "a number"),
    "loss": (lambda v: isinstance(v, str), "a string"),
    "solver": (lambda v: isinstance(v, str), "a string"),
    "multiclass": (lambda v: v is None or isinstance(v, str), "a string"),
    "rows": (lambda v: isinstance(v, dict), "a JSON object"),
    "warm_points_per_class": (
        lambda v: isinstance(v, list) and all(_is_count(x) for x in v),
        "a list of non-negative integers",
    ),
    "n_support": (
        lambda v: isinstance(v, list) and all(_is_count(x) for x in v),
        "a list of non-negative integers",
    ),
    "hashing": (lambda v: v is None or isinstance(v, dict), "a JSON object"),
    # ``export``: an imported LIBLINEAR model's solver, SVMlight's "number of training documents"
    "liblinear_solver": (lambda v: v is None or isinstance(v, str), "a string"),
    "n_rows": (lambda v: v is None or _is_count(v), "a non-negative integer"),
}
#: ``info.rows`` (:func:`ooc_svm.solvers.warm.rows_record`)
_ROWS_FIELDS: dict[str, tuple[Any, str]] = {
    "n_rows": (_is_count, "a non-negative integer"),
    "n_shards": (_is_count, "a non-negative integer"),
    "n_features": (_is_count, "a non-negative integer"),
    "shards_sha256": (lambda v: isinstance(v, str), "a string"),
    "fingerprint": (lambda v: isinstance(v, str), "a string"),
    "any": (lambda v: isinstance(v, bool), "true or false"),
    "shards": (
        lambda v: (
            isinstance(v, list)
            and all(
                isinstance(e, list)
                and len(e) == 3
                and _is_count(e[0])
                and _is_count(e[1])
                and isinstance(e[2], str)
                for e in v
            )
        ),
        "a list of [rows, non-zeros, checksum] entries",
    ),
}
#: ``info.warm_alpha`` (dcd's dual variables: their rows, C and hinge)
_ALPHA_FIELDS: dict[str, tuple[Any, str]] = {
    "n_rows": (_is_count, "a non-negative integer"),
    "C": (_is_number, "a number"),
    "hinge": (lambda v: v in ("l1", "l2"), "l1 or l2"),
}
#: ``info.warm_cut`` (perf's aggregated plane; a list of them, one per class, one-vs-rest)
_CUT_FIELDS: dict[str, tuple[Any, str]] = {
    "r": (_is_number, "a number"),
    "count": (_is_count, "a non-negative integer"),
    "bias": (_is_number, "a number"),
    "weights": (
        lambda v: isinstance(v, list) and len(v) == 2 and all(_is_number(x) for x in v),
        "a list of two numbers",
    ),
}


def _check_fields(where: str, prefix: str, obj: dict, fields: dict) -> None:
    for key, (ok, what) in fields.items():
        if key in obj and not ok(obj[key]):
            raise _fail(where, f"{prefix}{key}", f"must be {what}, not {_shown(obj[key])}")


def _check_info(where: str, info: dict) -> None:
    """Types of the ``info`` fields that a warm start or scoring reads (a hand-edited
    ``"C": "abc"`` ended in a ValueError traceback): one line naming the field."""
    _check_fields(where, "info.", info, _INFO_FIELDS)
    if isinstance(info.get("rows"), dict):
        _check_fields(where, "info.rows.", info["rows"], _ROWS_FIELDS)
    alpha = info.get("warm_alpha")
    if alpha is not None:
        if not isinstance(alpha, dict):
            raise _fail(where, "info.warm_alpha", f"must be a JSON object, not {_shown(alpha)}")
        _check_fields(where, "info.warm_alpha.", alpha, _ALPHA_FIELDS)
    cuts = info.get("warm_cut")
    if cuts is None:
        return
    for k, cut in enumerate(cuts if isinstance(cuts, list) else [cuts]):
        name = f"info.warm_cut[{k}]" if isinstance(cuts, list) else "info.warm_cut"
        if not isinstance(cut, dict):
            raise _fail(where, name, f"must be a JSON object, not {_shown(cut)}")
        _check_fields(where, f"{name}.", cut, _CUT_FIELDS)


def _check_arrays(where: str, m: dict, arrays: dict) -> dict:
    """Shapes, dtypes, index ranges and finiteness of the arrays against model.json."""
    nf, k = m["n_features"], len(m["classes"])
    ovo = m["kind"] == "ovo"
    n_out = 1 if m["scalar"] else (k * (k - 1) // 2 if ovo else k)
    out: dict[str, Any] = {}
    b = _real_array(where, arrays, "intercept", (1,))
    if b.shape[0] != n_out:
        raise _fail(where, "intercept", f"has {b.shape[0]} values; expected {n_out}")
    out["intercept"] = float(b[0]) if m["scalar"] else b
    _check_warm(where, m, arrays, out)
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
        import scipy.sparse as sp  # here: a linear model without SVs never needs scipy

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
