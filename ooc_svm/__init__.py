"""ooc-svm: out-of-core linear and kernel SVM training on sparse data larger than memory.

Public API (imported lazily so the command line starts fast)::

    ooc_svm.ingest(inputs, store, **options)   # SVMlight text -> store
    ooc_svm.open_store(path)                   # -> Store (.meta, .n_shards, .read_shard(i))
    ooc_svm.train(store, solver="perf", **params) -> Result
    ooc_svm.load_model(path)                   # -> Model (.decision_function, .predict)
    ooc_svm.LinearSVC, ooc_svm.SVC, ooc_svm.OrdinalSVM   # scikit-learn estimators
"""

from __future__ import annotations

from . import _early

if _early.is_console_script():  # the ooc-svm process: a signal from here on is one line
    _early.guard()

import importlib

from ._numba_cache import configure as _configure_numba_cache

__version__ = "0.1.0"

_configure_numba_cache()  # before any kernel module imports numba

_LAZY = {
    "open_store": "ooc_svm.store",
    "Shard": "ooc_svm.store",
    "StoreError": "ooc_svm.store",
    "ingest": "ooc_svm.store.ingest",
    "train": "ooc_svm.api",
    "Result": "ooc_svm.solvers",
    "load_model": "ooc_svm.model.model",
    "Model": "ooc_svm.model.model",
    "make_engine": "ooc_svm.engine",
    "LinearSVC": "ooc_svm.estimators",
    "SVC": "ooc_svm.estimators",
    "OrdinalSVM": "ooc_svm.estimators",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ooc_svm' has no attribute {name!r}")
