"""The updatable Cholesky factor of Q_ss (Scheinberg 2006 §2.1–2.2) against fresh factorisations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ooc_svm.solvers.active_set.cholesky import ActiveFactor


def _psd(n: int, rank: int, seed: int, duplicates: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Q = Y A Aᵀ Y with A n × rank (singular when rank < n), optionally with duplicated rows."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, rank))
    for k in range(duplicates):  # exact copies of earlier points
        A[n - 1 - k] = A[k]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    Q = (y[:, None] * (A @ A.T)) * y[None, :]
    return Q, y


def _check_factor(f: ActiveFactor, Q: np.ndarray, members: list[int]) -> None:
    keys = f.keys()
    assert sorted(keys.tolist()) == sorted(members)
    if not len(keys):
        return
    F = f.dense_factor()
    Qs = Q[np.ix_(keys, keys)]
    scale = max(1.0, float(np.abs(np.diag(Qs)).max()) if len(keys) else 1.0)
    assert np.abs(F @ F.T - Qs).max() <= 1e-8 * scale
    B = f.basis_keys()
    if B.size:
        # the basis block is positive definite and its factor equals a fresh Cholesky
        L = np.linalg.cholesky(Q[np.ix_(B, B)])
        R = f.R[: f.nb, : f.nb]
        cond = np.linalg.cond(Q[np.ix_(B, B)])
        assert np.allclose(R.T, L, atol=1e-12 * cond * scale, rtol=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(3, 24),
    rank_frac=st.floats(0.2, 1.0),
    seed=st.integers(0, 2**31 - 1),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=60),
    dups=st.integers(0, 2),
)
def test_updates_match_fresh_factorisation(n, rank_frac, seed, ops, dups):
    rank = max(1, int(round(rank_frac * n)))
    Q, y = _psd(n, rank, seed, duplicates=min(dups, n // 2))
    f = ActiveFactor(capacity=4)
    members: list[int] = []

    def col(k):
        return Q[:, k]

    for add, pick in ops:
        outside = [i for i in range(n) if i not in members]
        if (add and outside) or not members:
            k = outside[pick % len(outside)]
            f.append(k, y[k], Q[:, k])
            members.append(k)
        else:
            k = members.pop(pick % len(members))
            f.remove(k, col)
        _check_factor(f, Q, members)
        # the dependent count is the nullity of Q_ss
        if members:
            Qs = Q[np.ix_(members, members)]
            ev = np.linalg.eigvalsh(Qs)
            nullity = int((ev <= 1e-9 * max(1.0, ev.max())).sum())
            assert f.nd == nullity
        # fresh pivoted factorisation gives the same product
        if not members:
            continue
        g = ActiveFactor()
        g.refactor(np.array(members, dtype=np.int64), y[members], Q[np.ix_(members, members)])
        G = g.dense_factor()
        kk = g.keys()
        assert np.abs(G @ G.T - Q[np.ix_(kk, kk)]).max() <= 1e-8 * max(1.0, np.abs(Q).max())


def _system_check(f, Q, y, g):
    finite, db, dd, beta = f.direction(g)
    keys = f.keys()
    d = np.concatenate([db, dd])
    Qs = Q[np.ix_(keys, keys)]
    ys = y[keys]
    assert abs(ys @ d) <= 1e-9 * (1 + np.abs(d).max())
    if finite:
        # system (5): Q_ss d − β y_s = −g_s
        assert np.abs(Qs @ d - beta * ys + g[keys]).max() <= 1e-8 * (1 + np.abs(g).max())
    else:
        assert np.abs(d).max() > 0
        assert np.abs(Qs @ d).max() <= 1e-8 * np.abs(d).max() * max(1.0, np.abs(Qs).max())
        assert g[keys] @ d <= 1e-12
    return finite


@pytest.mark.parametrize(
    "n,rank,m,expect_finite",
    [
        (10, 10, 6, True),  # positive definite
        (10, 5, 6, None),  # one dependent index: Case 1(a) or 1(b)
        (10, 5, 7, False),  # two dependent: Case 2
        (12, 5, 10, False),  # five dependent: Case 3 (warm start)
    ],
)
def test_direction_cases(n, rank, m, expect_finite):
    Q, y = _psd(n, rank, seed=n * 100 + m)
    g = np.random.default_rng(m).standard_normal(n)
    f = ActiveFactor()
    for k in range(m):
        f.append(k, y[k], Q[:, k])
    assert f.nd == max(0, m - rank)
    finite = _system_check(f, Q, y, g)
    if expect_finite is not None:
        assert finite == expect_finite


def test_opposite_label_duplicates_give_infinite_descent():
    """Two identical points with opposite labels: Q_ss singular, d = (1, 1) descends (§2.1)."""
    x = np.array([[1.0, 2.0], [1.0, 2.0], [0.5, -1.0]])
    y = np.array([1.0, -1.0, 1.0])
    K = np.exp(-0.5 * ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    Q = y[:, None] * K * y[None, :]
    f = ActiveFactor()
    f.append(0, 1.0, Q[:, 0])
    f.append(1, -1.0, Q[:, 1])
    assert (f.nb, f.nd) == (1, 1)
    g = np.array([-1.0, -1.0, -1.0])  # G = Qα − e at α = 0
    finite, db, dd, _ = f.direction(g)
    assert not finite
    d = np.concatenate([db, dd])
    assert np.allclose(d / d[0], [1.0, 1.0])
    assert d[0] > 0


def test_case_1a_unique_solution():
    """One dependent column but y_s outside the range of Q_ss: system (5) still solvable."""
    # linear kernel, 1 feature, three points: rank 1, two dependent
    x = np.array([1.0, 2.0, -1.0])
    y = np.array([1.0, 1.0, -1.0])
    Q = (y * x)[:, None] * (y * x)[None, :]
    f = ActiveFactor()
    f.append(0, y[0], Q[:, 0])
    f.append(1, y[1], Q[:, 1])
    assert (f.nb, f.nd) == (1, 1)
    finite = _system_check(f, Q, y, np.array([-1.0, -1.5, -1.0]))
    assert finite


def test_probe_detects_lost_accuracy_and_refactor_restores():
    Q, y = _psd(40, 40, seed=3)
    f = ActiveFactor()
    for k in range(30):
        f.append(k, y[k], Q[:, k])

    def mv(keys, v):
        return Q[np.ix_(keys, keys)] @ v

    assert f.probe_error(mv) < 1e-12
    f.R[3, 7] += 1e-5 * abs(f.R[3, 3])  # simulate drift of the updated factor
    err = f.probe_error(mv)
    assert err > 1e-8
    keys = f.keys()
    f.refactor(keys, y[keys], Q[np.ix_(keys, keys)])
    assert f.refactorisations == 1
    assert f.probe_error(mv) < 1e-12
    # after refactorisation the factor keeps updating correctly
    f.remove(int(keys[5]), lambda k: Q[:, k])
    f.append(35, y[35], Q[:, 35])
    members = [int(k) for k in keys if k != keys[5]] + [35]
    _check_factor(f, Q, members)


def test_long_update_sequence_accuracy():
    """Hundreds of updates on an ill-conditioned RBF block stay accurate (no refactorisation)."""
    rng = np.random.default_rng(7)
    X = rng.random((120, 3))
    y = np.where(rng.random(120) < 0.5, 1.0, -1.0)
    K = np.exp(-2.0 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    Q = y[:, None] * K * y[None, :]
    f = ActiveFactor()
    members: list[int] = []
    for _ in range(1500):
        if members and (rng.random() < 0.5 or len(members) > 60):
            k = members.pop(int(rng.integers(len(members))))
            f.remove(k, lambda j: Q[:, j])
        else:
            k = int(rng.choice([i for i in range(120) if i not in members]))
            f.append(k, y[k], Q[:, k])
            members.append(k)

    def mv(keys, v):
        return Q[np.ix_(keys, keys)] @ v

    assert f.probe_error(mv) < 1e-9
