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
