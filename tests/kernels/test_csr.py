"""CSR kernels against scipy / numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.kernels.csr import (
    csr_matvec,
    csr_matvec_rows,
    csr_rmatvec_add,
    csr_rmatvec_rows_add,
    csr_rows_dot,
    csr_take_rows,
    dot_work,
    hinge_violated,
    merge_dot,
    u32,
)


def _X(n=300, d=120, density=0.07, seed=0, empty_rows=True):
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=np.float32)
    X.data = (X.data - 0.5).astype(np.float32)
    if empty_rows:
        X = X.tolil()
        X[3, :] = 0
        X[n - 1, :] = 0
        X = X.tocsr()
    X.sort_indices()
    X.indptr = X.indptr.astype(np.int64)
    X.indices = X.indices.astype(np.int32)
    return X


def _arr(X):
    return X.indptr, u32(X.indices), X.data


@pytest.fixture
def X():
    return _X()


def _ro(*arrs):
    """Read-only copies (engines hand out read-only shard arrays)."""
    out = []
    for a in arrs:
        a = a.copy()
        a.flags.writeable = False
        out.append(a)
    return out


def test_matvec(X):
    rng = np.random.default_rng(1)
    w = rng.normal(size=X.shape[1])
    ref = X.astype(np.float64) @ w + 0.25
    out = csr_matvec(*_arr(X), w, 0.25, np.empty(X.shape[0]))
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    ip, ix, da = _ro(X.indptr, X.indices, X.data)
    out2 = csr_matvec(ip, u32(ix), da, w, 0.25, np.empty(X.shape[0]))
    np.testing.assert_array_equal(out, out2)


def test_matvec_rows(X):
    rng = np.random.default_rng(2)
    w = rng.normal(size=X.shape[1])
    rows = np.array([5, 0, 3, 299, 5], dtype=np.int64)
    out = csr_matvec_rows(*_arr(X), rows, w, -1.0, np.empty(rows.size))
    np.testing.assert_allclose(out, X[rows].astype(np.float64) @ w - 1.0, rtol=1e-12, atol=1e-12)


def test_rmatvec_variants(X):
    rng = np.random.default_rng(3)
    d = X.shape[1]
    v = rng.normal(size=X.shape[0])
    Xd = X.astype(np.float64)
    out = csr_rmatvec_add(*_arr(X), v, np.ones(d))
    np.testing.assert_allclose(out, 1.0 + Xd.T @ v, rtol=1e-12, atol=1e-12)
    rows = np.array([7, 7, 1, 250], dtype=np.int64)
    vr = np.array([1.0, 2.0, -0.5, 0.0])
    out = csr_rmatvec_rows_add(*_arr(X), rows, vr, np.zeros(d))
    np.testing.assert_allclose(out, Xd[rows].T @ vr, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias_value,w_bias", [(0.0, 0.0), (1.0, 0.3), (2.5, -0.7)])
def test_hinge_violated(X, bias_value, w_bias):
    rng = np.random.default_rng(4)
    n, d = X.shape
    y = rng.choice([-1.0, 1.0], n)
    w = rng.normal(size=d) * 2
    Xd = X.astype(np.float64)
    m_ref = y * (Xd @ w + w_bias * bias_value)
    viol = m_ref < 1
    g = np.zeros(d)
    m = np.empty(n)
    cnt, hinge, gb = hinge_violated(*_arr(X), y, w, bias_value, w_bias, g, m)
    assert 0 < cnt < n
    assert cnt == viol.sum()
    np.testing.assert_allclose(m, m_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hinge, np.maximum(0, 1 - m_ref).sum(), rtol=1e-12)
    np.testing.assert_allclose(g, Xd[viol].T @ y[viol], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, y[viol].sum() * bias_value, rtol=1e-12, atol=1e-12)
    # margins computed exactly like csr_matvec
    mv = csr_matvec(*_arr(X), w, 0.0, np.empty(n))
    np.testing.assert_array_equal(m, y * (mv + w_bias * bias_value))


def test_take_rows(X):
    rows = np.array([10, 3, 10, 0], dtype=np.int64)
    ip, ix, da = csr_take_rows(X.indptr, X.indices, X.data, rows)
    assert ix.dtype == np.int32 and ip.dtype == np.int64 and da.dtype == np.float32
    Y = sp.csr_matrix((da, ix, ip), shape=(rows.size, X.shape[1]))
    assert (Y != X[rows]).nnz == 0
    ip, ix, da = csr_take_rows(X.indptr, X.indices, X.data, np.zeros(0, np.int64))
    assert ip.tolist() == [0] and ix.size == 0


@pytest.mark.parametrize("dense", [True, False])
def test_rows_dot(dense):
    A = _X(60, 500, 0.05, seed=5)
    B = _X(40, 500, 0.08, seed=6)
    rows = np.array([0, 3, 59, 17, 17], dtype=np.int64)
    work = dot_work(500, dense=dense)
    out = csr_rows_dot(*_arr(A), rows, *_arr(B), np.empty((rows.size, B.shape[0])), work)
    ref = (A[rows].astype(np.float64) @ B.astype(np.float64).T).toarray()
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    assert not work.any()  # the dense scratch is left zero-filled
    # both strategies agree bit for bit
    other = csr_rows_dot(*_arr(A), rows, *_arr(B), np.empty_like(out), dot_work(500, not dense))
    np.testing.assert_array_equal(out, other)
    # a single pair through the sorted merge
    i, j = 17, 5
    a0, a1 = A.indptr[i], A.indptr[i + 1]
    b0, b1 = B.indptr[j], B.indptr[j + 1]
    s = merge_dot(A.indices, A.data, a0, a1, B.indices, B.data, b0, b1)
    assert s == out[3, j]


def test_rows_dot_self_gram():
    A = _X(30, 80, 0.2, seed=7, empty_rows=False)
    rows = np.arange(30, dtype=np.int64)
    K = csr_rows_dot(*_arr(A), rows, *_arr(A), np.empty((30, 30)), dot_work(80))
    np.testing.assert_allclose(K, K.T, rtol=0, atol=0)
    np.testing.assert_allclose(
        np.diag(K), np.asarray(A.astype(np.float64).power(2).sum(axis=1)).ravel(), rtol=1e-12
    )
