"""Kernel functions on sparse rows against scikit-learn's pairwise kernels."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import sklearn_kernel

from ooc_svm.kernels.kernel_functions import (
    KernelParams,
    csr_parts,
    kernel_block,
    kernel_code,
    kernel_matrix,
    kernel_row,
    kernel_row_subset,
    kernel_scores,
    kernel_scores_csc,
    linear_scores,
    resolve_gamma,
    sq_norms,
)

pairwise = pytest.importorskip("sklearn.metrics.pairwise")


def _rand(n, d, density, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr", dtype=np.float64)
    X.data = rng.normal(size=X.nnz)
    return sp.csr_matrix(X, dtype=dtype)


def _ref(X, Y, kernel, gamma, degree, coef0):
    return sklearn_kernel(X.astype(np.float64), Y.astype(np.float64), kernel, gamma, degree, coef0)


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "sigmoid"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_matrix_matches_sklearn(kernel, dtype):
    X = _rand(37, 50, 0.2, 1, dtype)
    Y = _rand(23, 50, 0.3, 2, dtype)
    K = kernel_matrix(X, Y, kernel, gamma=0.07, degree=3, coef0=0.5)
    ref = _ref(X, Y, kernel, 0.07, 3, 0.5)
    np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-6)


def test_default_gamma_and_shapes():
    X = _rand(10, 40, 0.3, 3)
    Y = _rand(5, 30, 0.3, 4)  # narrower: treated as 40 columns
    K = kernel_matrix(X, Y, "rbf")
    Yw = sp.csr_matrix((Y.data, Y.indices, Y.indptr), shape=(5, 40))
    np.testing.assert_allclose(K, _ref(X, Yw, "rbf", 1 / 40, 3, 0), rtol=1e-5)
    assert resolve_gamma(None, 40) == 1 / 40
    assert resolve_gamma(0.5, 40) == 0.5
    kp = KernelParams.from_params({"kernel": "poly", "gamma": None, "degree": 2}, 8)
    assert kp.args() == (1, 0.125, 2, 0.0)
    with pytest.raises(ValueError):
        kernel_code("laplace")
    assert kernel_matrix(X[:0], Y).shape == (0, 5)


def test_rows_subset_scores():
    X = _rand(60, 25, 0.25, 5)
    ip, ix, dt = csr_parts(X)
    sq = sq_norms(ip, ix, dt)
    np.testing.assert_allclose(sq, np.asarray(X.multiply(X).sum(axis=1)).ravel(), rtol=1e-6)
    kp = KernelParams("rbf", 0.3)
    ref = _ref(X, X, "rbf", 0.3, 3, 0)
    work = np.zeros(25)
    out = np.empty(60)
    kernel_row(ip, ix, dt, sq, 7, ip, ix, dt, sq, *kp.args(), work, out)
    np.testing.assert_allclose(out, ref[7], rtol=1e-6)
    assert not work.any()
    rows = np.array([3, 9, 40], dtype=np.int64)
    out2 = np.full(60, -5.0)
    kernel_row_subset(ip, ix, dt, sq, 11, rows, 2, *kp.args(), work, out2)
    np.testing.assert_allclose(out2[[3, 9]], ref[11, [3, 9]], rtol=1e-6)
    assert out2[40] == -5.0
    coef = np.random.default_rng(0).normal(size=60)
    s = kernel_scores(ip, ix, dt, sq, ip, ix, dt, sq, coef, *kp.args(), work, np.empty(60))
    np.testing.assert_allclose(s, ref @ coef, rtol=1e-6, atol=1e-6)
    T = X.T.tocsr()
    s2 = kernel_scores_csc(
        ip,
        ix,
        dt,
        sq,
        T.indptr.astype(np.int64),
        T.indices.astype(np.int64),
        T.data.astype(np.float64),
        sq,
        coef,
        *kp.args(),
        np.empty(60),
        np.empty(60),
    )
    np.testing.assert_allclose(s2, s, rtol=1e-9, atol=1e-9)
    B = kernel_block(ip, ix, dt, sq, ip, ix, dt, sq, *kp.args(), work, np.empty((60, 60)))
    np.testing.assert_allclose(B, ref, rtol=1e-6)
    w = np.arange(25, dtype=np.float64)
    np.testing.assert_allclose(linear_scores(ip, ix, dt, w, np.empty(60)), X.astype(np.float64) @ w)
