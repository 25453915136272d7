"""Model files of the tools users already have: LIBLINEAR, LIBSVM, SVMlight / SVMperf.

``import_model(path)`` reads any of them (the format is recognised from the first line) into
an ooc-svm :class:`~ooc_svm.model.model.Model`; ``export_model(model, fmt, out)`` writes one.
Decision values are preserved both ways (up to float64 summation order). See the modules
for the layouts and how classes map:

- :mod:`ooc_svm.interop.liblinear` — ``solver_type ...`` linear models (binary, one-vs-rest,
  Crammer-Singer);
- :mod:`ooc_svm.interop.libsvm` — ``svm_type c_svc`` kernel models, one-vs-one multiclass
  (ooc-svm ``kind="ovo"``);
- :mod:`ooc_svm.interop.svmlight` — ``SVM-light Version ...`` linear and kernel models
  (SVMperf's linear models included).
"""

from __future__ import annotations

import os

from ..model.model import Model, ModelError, check_model
from . import liblinear, libsvm, svmlight
from ._io import FormatError, LineReader

FORMATS = ("liblinear", "libsvm", "svmlight")
_MODULES = {"liblinear": liblinear, "libsvm": libsvm, "svmlight": svmlight}


def detect_format(path: str) -> str:
    """``"liblinear"``, ``"libsvm"`` or ``"svmlight"`` from the first line of a model file."""
    with LineReader(path) as r:
        first = r.readline()
    if first is None:
        raise FormatError(f"{path}: empty file; not a model")
    head = first.strip()
    if head.startswith("solver_type"):
        return "liblinear"
    if head.startswith("svm_type"):
        return "libsvm"
    if head.startswith("SVM-light Version"):
        return "svmlight"
    raise FormatError(
        f"{path}: line 1: {head[:40]!r} is not the start of a LIBLINEAR ('solver_type'), LIBSVM "
        "('svm_type') or SVMlight ('SVM-light Version') model"
    )


def import_model(path: str, fmt: str | None = None, n_features: int | None = None) -> Model:
    """Read a LIBLINEAR / LIBSVM / SVMlight model file (format detected unless given)."""
    fmt = fmt or detect_format(path)
    if fmt not in _MODULES:
        raise FormatError(f"unknown model format {fmt!r}; use one of {', '.join(FORMATS)}")
    model = _MODULES[fmt].read(path, n_features=n_features)
    model.info["imported_from"] = os.path.abspath(str(path))
    try:  # what load_model would refuse is not imported
        check_model(model, str(path))
    except ModelError as e:
        raise ModelError(f"{e}; ooc-svm cannot use this model, nothing was imported") from None
    return model


def export_model(model: Model, fmt: str, out: str) -> None:
    """Write ``model`` in a foreign format (atomically: nothing is left on failure)."""
    if fmt not in _MODULES:
        raise FormatError(f"unknown model format {fmt!r}; use one of {', '.join(FORMATS)}")
    _MODULES[fmt].write(model, out)


__all__ = ["FORMATS", "FormatError", "detect_format", "export_model", "import_model"]
