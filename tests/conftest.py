"""Shared fixtures: the real datasets in ../shared/data (or $OOC_SVM_DATA), skipped when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path | None:
    env = os.environ.get("OOC_SVM_DATA")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


def dataset(rel: str) -> Path:
    """Path of a dataset file under the data directory, or skip the test with the reason."""
    d = data_dir()
    if d is None:
        pytest.skip("real datasets not found: set $OOC_SVM_DATA or put them in ../shared/data")
    p = d / rel
    if not p.exists():
        pytest.skip(f"dataset {rel} not found under {d}")
    return p


@pytest.fixture
def data_path():
    return dataset


def build_store(
    path, X, y, qid=None, shard_rows: int = 1000, n_features: int | None = None, **write_kw
):
    """Write ``X`` (dense or sparse), ``y`` (and ``qid``) as a store at ``path`` and open it.

    The backend follows the suffix (``.zarr`` or ``.parquet``); ``shard_rows`` rows per shard.
    ``n_features`` defaults to ``X.shape[1]``; ``n_features=0`` leaves it to the data (the
    largest column used + 1). Other keywords (e.g. ``label_kind``) go to ``write_store``.
    """
    import numpy as np
    import scipy.sparse as sp

    from ooc_svm.store import open_store
    from ooc_svm.store.writer import csr_to_shards, write_store

    X = sp.csr_matrix(X, dtype=np.float32)
    n_features = X.shape[1] if n_features is None else n_features
    write_store(
        str(path),
        csr_to_shards(X, y, qid=qid, shard_rows=shard_rows),
        n_features=n_features,
        **write_kw,
    )
    return open_store(str(path))


@pytest.fixture
def make_store(tmp_path):
    """Factory fixture: ``make_store(X, y, qid=None, shard_rows=1000, name="s.zarr", ...)``
    writes a real store under the test's ``tmp_path`` (see :func:`build_store`) and returns it
    opened."""

    def make(X, y, qid=None, shard_rows: int = 1000, name: str = "s.zarr", n_features=None, **kw):
        return build_store(tmp_path / name, X, y, qid, shard_rows, n_features, **kw)

    return make


def ooc_cmd(*args: str) -> list[str]:
    """The command line that runs ``ooc-svm ARGS`` with this interpreter (no venv path)."""
    import sys

    return [sys.executable, "-m", "ooc_svm", *map(str, args)]
