"""The dense simplex QP of the cutting-plane solver, and the perf kernels, against references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from ooc_svm.kernels.csr import u32
from ooc_svm.kernels.ranking import count_pairs, rank_loss
from ooc_svm.solvers.perf._numba.cuts import cut_segment, cut_single, rank_cut
from ooc_svm.solvers.perf.qp import qp_objective, solve_simplex_qp


def _scipy_qp(Q, b, s, rng):
    """Best feasible SLSQP solution from a few starts (projected onto the feasible set)."""
    m = b.size
    cons = [{"type": "ineq", "fun": lambda x: s - x.sum(), "jac": lambda x: -np.ones_like(x)}]
    best = np.inf
    for _ in range(3):
        x0 = rng.dirichlet(np.ones(m)) * s * 0.5
        res = minimize(
            lambda x: qp_objective(Q, b, x),
            x0,
            jac=lambda x: Q @ x - b,
            bounds=[(0, None)] * m,
            constraints=cons,
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 2000},
        )
        x = np.maximum(res.x, 0)
        if x.sum() > s:
            x *= s / x.sum()
        best = min(best, qp_objective(Q, b, x))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_qp_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 20))
    d = int(rng.integers(1, 25))  # d < m: singular Gram matrices
    G = rng.normal(size=(d, m))
    Q = G.T @ G
    b = rng.normal(size=m) * rng.uniform(0.1, 10)
    s = float(rng.uniform(0.1, 5))
    r = solve_simplex_qp(Q, b, s)
    ref = _scipy_qp(Q, b, s, rng)
    scale = max(1.0, abs(ref))
    assert r.objective <= ref + 1e-9 * scale
    assert r.x.min() >= 0 and r.x.sum() <= s * (1 + 1e-12)
    assert r.gap <= 1e-9 * scale
    assert r.objective - r.gap <= ref + 1e-9 * scale


def test_qp_warm_start_and_degenerate():
    rng = np.random.default_rng(7)
    # many planes in few dimensions (the cutting-plane situation): rank-deficient Gram matrix
    G = rng.normal(size=(20, 150))
    Q = G.T @ G
    b = rng.uniform(0, 1, 150) * 20
    cold = solve_simplex_qp(Q, b, 50.0)
    assert cold.converged and cold.gap <= 1e-8 * abs(cold.objective)
    # add a plane, warm start from the previous solution
    g = rng.normal(size=20)
    G2 = np.c_[G, g]
    Q2 = G2.T @ G2
    b2 = np.r_[b, 25.0]
    warm = solve_simplex_qp(Q2, b2, 50.0, x0=np.r_[cold.x, 0.0])
    again = solve_simplex_qp(Q2, b2, 50.0)
    assert warm.objective == pytest.approx(again.objective, rel=1e-10)
    assert warm.iterations < again.iterations
    # duplicate constraints and a zero constraint
    Qd = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    r = solve_simplex_qp(Qd, np.array([0.5, 0.5, -1.0]), 1.0)
    assert r.objective == pytest.approx(-0.125)
    assert r.x[2] == 0.0


def test_qp_smo_fallback_agrees():
    rng = np.random.default_rng(8)
    G = rng.normal(size=(10, 40))
    Q = G.T @ G
    b = rng.uniform(0, 5, 40)
    a = solve_simplex_qp(Q, b, 3.0)
    f = solve_simplex_qp(Q, b, 3.0, max_steps=1, tol=1e-13)  # forces the SMO fallback
    assert f.objective == pytest.approx(a.objective, rel=1e-8, abs=1e-9)


# ------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------


def _rows(seed, n=300, d=40):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, random_state=seed, format="csr", dtype=np.float32)
    X.sort_indices()
    y = rng.choice([-1.0, 1.0], n)
    return rng, X, np.asarray(X.indptr, dtype=np.int64), X.indices.astype(np.int32), X.data, y


def test_cut_single_matches_numpy():
    rng, X, ip, ix, dt, y = _rows(0)
    w = rng.normal(size=X.shape[1])
    g = np.zeros(X.shape[1] + 1)
    cnt, hinge = cut_single(ip, u32(ix), u32(ix), dt, y, 1.0, w, 0.3, 2.0, g, X.shape[1])
    m = y * (X.astype(np.float64) @ w + 0.6)
    v = m < 1
    assert cnt == v.sum()
    assert hinge == pytest.approx(np.maximum(0, 1 - m).sum())
    np.testing.assert_allclose(g[:-1], X[v].T.astype(np.float64) @ y[v], atol=1e-10)
    assert g[-1] == pytest.approx(2.0 * y[v].sum())


def test_cut_segment_matches_direct_evaluation():
    rng, X, ip, ix, dt, y = _rows(1)
    d = X.shape[1]
    wb, wc = rng.normal(size=d) * 0.5, rng.normal(size=d)
    tb, tc = 0.1, -0.4
    kv = np.array([0.1, 0.5, 1.0, 2.0])
    kg = np.array([0.1, 0.3, 0.55, 1.0])
    hv = np.zeros(kv.size)
    D = np.zeros((kg.size, d + 1))
    cnt = np.zeros(kg.size, dtype=np.int64)
    w2 = np.ascontiguousarray(np.stack([wb, wc], axis=1))
    cut_segment(ip, u32(ix), u32(ix), dt, y, 1.0, w2, tb, tc, kv, kg, hv, D, cnt, 1.0, d)
    Xd = X.astype(np.float64)
    mb = y * (Xd @ wb + tb)
    mc = y * (Xd @ wc + tc)
    for q, k in enumerate(kv):
        assert hv[q] == pytest.approx(np.maximum(0, 1 - (mb + k * (mc - mb))).sum())
    G = np.cumsum(D, axis=0)
    c = np.cumsum(cnt)
    for p, k in enumerate(kg):
        v = (mb + k * (mc - mb)) < 1
        assert c[p] == v.sum()
        np.testing.assert_allclose(G[p, :d], Xd[v].T @ y[v], atol=1e-9)
        assert G[p, d] == pytest.approx(y[v].sum())


@pytest.mark.parametrize("seed", range(30))
def test_rank_cut_matches_pairs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50))
    R = int(rng.integers(2, 5))
    r = rng.integers(0, R, n).astype(np.int64)
    s = np.round(rng.normal(size=n) * 1.5, 1)  # ties and exact unit differences
    q = rng.integers(0, 3, n) if seed % 2 else np.zeros(n, dtype=np.int64)
    order = np.lexsort((-s, q)).astype(np.int64)
    qs = q[order]
    starts = np.r_[0, np.flatnonzero(np.diff(qs)) + 1, n].astype(np.int64)
    cp = np.zeros(n, np.int64)
    cm = np.zeros(n, np.int64)
    viol, loss = rank_cut(order, s, r, starts, R, cp, cm)
    CP = np.zeros(n, int)
    CM = np.zeros(n, int)
    L = 0.0
    M = 0
    for i, j in itertools.product(range(n), range(n)):
        if q[i] == q[j] and r[i] > r[j]:
            M += 1
            if s[i] - 1.0 < s[j]:
                CP[i] += 1
                CM[j] += 1
                L += 1 - s[i] + s[j]
    np.testing.assert_array_equal(cp, CP)
    np.testing.assert_array_equal(cm, CM)
    assert viol == CP.sum() and loss == pytest.approx(L, abs=1e-9)
    assert rank_loss(order, s, r, starts, R)[1] == pytest.approx(L, abs=1e-9)
    assert count_pairs(order, r, starts, R) == M


def test_smo_fallback_chunked_is_identical(monkeypatch):
    """The SMO fallback runs in numba chunks (Ctrl-C is seen between them); the chunking
    changes nothing: same steps, same solution, bit for bit."""
    from ooc_svm.solvers.perf import qp

    rng = np.random.default_rng(3)
    G = rng.normal(size=(60, 8))
    Q, b = G @ G.T, rng.uniform(0, 1, 60)
    monkeypatch.setattr(qp, "SMO_CHUNK", 10**9)
    a = qp.solve_simplex_qp(Q, b, 50.0, tol=1e-14, max_steps=0)
    monkeypatch.setattr(qp, "SMO_CHUNK", 2000)
    c = qp.solve_simplex_qp(Q, b, 50.0, tol=1e-14, max_steps=0)
    assert a.iterations > 2000
    np.testing.assert_array_equal(a.x, c.x)
    assert a.iterations == c.iterations
