"""scikit-learn estimators: check_estimator, store input, one-vs-rest correctness."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs
from sklearn.utils.estimator_checks import check_estimator

from ooc_svm.estimators import SVC, LinearSVC, OrdinalSVM
from ooc_svm.solvers import available_solvers
from ooc_svm.store import StoreWriter, csr_to_shards

SOLVERS = available_solvers()


def _run_checks(est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, on_fail=None)
    failed = [
        (r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"
    ]
    assert not failed, failed
    assert len([r for r in results if r["status"] == "passed"]) > 40


@pytest.mark.parametrize("solver", SOLVERS)
def test_check_estimator_linear(solver):
    # Every check applies; none is expected to fail (sample weights are not a fit parameter,
    # so the sample-weight checks are not run by scikit-learn at all).
    _run_checks(LinearSVC(solver=solver))


@pytest.mark.parametrize("solver", [s for s in SOLVERS if s != "perf"])
def test_check_estimator_kernel(solver):
    _run_checks(SVC(solver=solver))


def test_ovr_matches_binary_problems(tmp_path):
    """Each OvR row equals training 'class k vs rest' as its own binary problem."""
    X, y = make_blobs(n_samples=300, centers=3, random_state=0)
    X = (X - X.mean(0)) / X.std(0)
    ovr = LinearSVC(C=1.0, tol=1e-6).fit(X, y)
    assert ovr.coef_.shape == (3, 2) and ovr.intercept_.shape == (3,)
    assert (ovr.predict(X) == y).mean() > 0.9
    for k in range(3):
        b = LinearSVC(C=1.0, tol=1e-6).fit(X, (y == k).astype(int))
        np.testing.assert_allclose(ovr.coef_[k], b.coef_[0], rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(ovr.intercept_[k], b.intercept_[0], rtol=1e-6, atol=1e-8)


def test_fit_on_store_and_string_labels(tmp_path):
    X, y = make_blobs(n_samples=200, centers=2, random_state=1)
    path = str(tmp_path / "s.zarr")
    with StoreWriter(path) as w:
        for s in csr_to_shards(sp.csr_matrix(X), np.where(y == 1, 1.0, -1.0), shard_rows=64):
            w.add(s)
        w.commit()
    a = LinearSVC(tol=1e-6).fit(path)
    b = LinearSVC(tol=1e-6).fit(X, np.where(y == 1, "yes", "no"))
    assert list(b.classes_) == ["no", "yes"]
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6, atol=1e-9)
    assert set(b.predict(X)) <= {"yes", "no"}
    with pytest.raises(ValueError, match="y must be None"):
        LinearSVC().fit(path, y)


def test_ordinal_svm_orders_ranks():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    score = X @ np.array([1.0, -2.0, 0.5, 0.0])
    y = np.digitize(score, np.quantile(score, [0.33, 0.66])) + 1
    est = OrdinalSVM(C=1.0).fit(X, y)
    assert est.score(X, y) > 0.9
    assert est.n_iter_ > 0 and est.objective_ is not None
