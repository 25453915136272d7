"""``describe_model(path)``: what a model is, for ``ooc-svm info MODEL``."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._util import json_text
from ..model.model import Model, load_model

#: info keys that name the training store, in order of preference
_STORE_KEYS = ("store", "training_store", "train_store", "store_path")


def is_model_dir(path: str) -> bool:
    """True when ``path`` is an ooc-svm model directory (has ``model.json``)."""
    return os.path.isfile(os.path.join(str(path), "model.json"))


def model_summary(model: Model) -> dict[str, Any]:
    """Kind, classes, solver, C, features, support vectors, objective, provenance."""
    info = model.info or {}
    n_sv = 0 if model.support_vectors_ is None else int(model.support_vectors_.shape[0])
    d: dict[str, Any] = {
        "kind": model.kind,
        "n_classes": len(model.classes),
        "classes": [float(c) for c in model.classes],
        "multiclass": info.get("multiclass")
        or ("ovo" if model.kind == "ovo" else "ovr" if np.ndim(model.intercept_) else None),
        "solver": info.get("solver"),
        "C": info.get("C"),
        "loss": info.get("loss"),
        "kernel": "linear" if model.kind == "linear" else model.kernel,
        "n_features": int(model.n_features),
        "n_support_vectors": n_sv,
        "objective": info.get("objective"),
        "converged": info.get("converged"),
        "iterations": info.get("iterations"),
        "format": info.get("format", "ooc-svm"),
    }
    if d["kernel"] in ("rbf", "poly", "sigmoid"):
        d["gamma"] = float(model.gamma)
    if d["kernel"] == "poly":
        d["degree"] = int(model.degree)
    if d["kernel"] in ("poly", "sigmoid"):
        d["coef0"] = float(model.coef0)
    if model.kind == "linear":
        coef = np.asarray(model.coef_)
        d["nonzero_weights"] = int(np.count_nonzero(coef))
    store = next((info[k] for k in _STORE_KEYS if info.get(k)), None)
    d["training_store"] = store
    if info.get("imported_from"):
        d["imported_from"] = info["imported_from"]
    if info.get("hashing"):
        d["hashing"] = info["hashing"]
    return d


def describe_model(path: str) -> dict[str, Any]:
    """Summary of the model directory ``path`` (see :func:`model_summary`), plus its path."""
    return {"path": str(path), **model_summary(load_model(path))}


def print_model_info(path: str, as_json: bool = False) -> int:
    """``ooc-svm info MODEL``: print :func:`describe_model` as JSON or ``key value`` lines."""

    d = describe_model(path)
    if as_json:
        print(json_text(d))
        return 0
    for k, v in d.items():
        if v is None:
            continue
        if k == "classes" and len(v) > 20:
            v = f"{v[:20]} … ({len(v)} values)"
        if k == "hashing":
            v = f"--hash-bits {v.get('bits')} ({v.get('hash')}, signed): hash text input alike"
        print(f"{k:18s} {v}")
    return 0
