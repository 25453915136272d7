"""Extreme C, class weights and feature values: refused up front with one line naming the
real cause (the feature values, C or the class weight), and perf's stops that count work,
never seconds (a working-set QP, the cutting-plane loop)."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.api import train
from ooc_svm.solvers import SolverError


def _data(n=120, d=6, seed=0, big=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    if big is not None:
        X[::3, 0] = big
    return sp.csr_matrix(X.astype(np.float32)), y


@pytest.mark.parametrize("solver", ["active-set", "perf", "irwls"])
def test_huge_class_weight_is_refused_naming_it(make_store, solver):
    """pos=1e308 ran with objective inf (active-set) or ended in numpy's 'SVD did not
    converge' traceback (perf)."""
    st = make_store(*_data(), shard_rows=40)
    with pytest.raises(SolverError, match=r"--class-weight pos=1e\+308 is too large"):
        train(st, solver, C=1.0, class_weight="pos=1e308")


@pytest.mark.parametrize("solver", ["active-set", "perf"])
def test_tiny_class_weight_is_blamed_not_the_features(make_store, solver):
    st = make_store(*_data(), shard_rows=40)
    with pytest.raises(SolverError, match=r"--class-weight pos=1e-300 is too small") as e:
        train(st, solver, C=1.0, class_weight="pos=1e-300")
    assert "feature" not in str(e.value)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"C": 1e308}, r"--C 1e\+308 is too large: C x rows = inf"),
        ({"C": 1e99}, r"--C 1e\+99 is too large"),
        ({"C": 1e-200}, r"--C 1e-200 is too small"),
        ({"c_perf": 1e300}, r"--c-perf 1e\+300 \(C = [0-9.e+]+\) is too large"),
    ],
)
def test_extreme_C_is_refused_naming_C(make_store, params, match):
    st = make_store(*_data(), shard_rows=40)
    with pytest.raises(SolverError, match=match):
        train(st, "perf", **params)


def test_extreme_C_with_folds_ends_with_one_line(tmp_path, make_store):
    """``perf --C 1e308 --folds 3`` did not end."""
    make_store(*_data(), shard_rows=40)
    r = subprocess.run(
        [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", "s.zarr", "-o", "m"]
        + ["--C", "1e308", "--folds", "3"],
        cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("ooc-svm: error: ") and "--C 1e+308 is too large" in lines[-1]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("loss", ["error", "roc"])
def test_perf_refuses_feature_values_near_the_float32_limit(make_store, loss):
    """Values of 3.4e38 ran 430+ iterations with the gap stuck at 0.967."""
    st = make_store(*_data(big=3.4e38), shard_rows=40)
    with pytest.raises(SolverError, match=r"feature values are too large.*squared norm"):
        train(st, "perf", C=1.0, loss=loss)


def test_perf_stops_without_progress_by_count(make_store, monkeypatch, caplog):
    """The cutting-plane loop stops (best point kept, not converged) when its certified gap
    does not shrink over a number of iterations: a count, not seconds."""
    from ooc_svm.solvers.perf import common

    monkeypatch.setattr(common, "NO_PROGRESS_ITERATIONS", 3)
    monkeypatch.setattr(common, "NO_PROGRESS_FACTOR", 1e-12)  # no gap shrinks this fast
    st = make_store(*_data(), shard_rows=40)
    runs = []
    for _ in range(2):
        with caplog.at_level(logging.WARNING):
            runs.append(train(st, "perf", C=10.0, eps=1e-9))
    a, b = runs
    assert not a.converged and a.stop_reason == "stalled"
    assert a.iterations == b.iterations and a.iterations <= 10
    np.testing.assert_array_equal(a.model.coef_, b.model.coef_)
    assert "no progress: the certified gap" in caplog.text


def test_qp_active_set_hands_over_by_count(monkeypatch):
    """The active-set method of a working-set QP gives up after a bounded amount of work
    (dense solves counted, never timed) and SMO finishes to the same certified optimum."""
    from ooc_svm.solvers.perf import qp

    rng = np.random.default_rng(0)
    G = rng.normal(size=(60, 8))
    Q, b = G @ G.T, rng.random(60)
    full = qp.solve_simplex_qp(Q, b, 10.0, atol=1e-9)
    monkeypatch.setattr(qp, "ACTIVE_SET_MAX_WORK", 10.0)
    capped = qp.solve_simplex_qp(Q, b, 10.0, atol=1e-9)
    assert full.converged and not capped.converged and not capped.exhausted
    assert capped.objective == pytest.approx(full.objective, abs=1e-6)
    assert capped.gap <= 1e-5


def test_qp_refuses_non_finite_entries():
    from ooc_svm.solvers.perf import qp

    with pytest.raises(ValueError, match="non-finite entries"):
        qp.solve_simplex_qp(np.array([[np.inf]]), np.array([1.0]), 1.0)
