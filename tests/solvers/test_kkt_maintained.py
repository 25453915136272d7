"""The final KKT check from the f the solver maintained, against the independent pass.

smo (in memory), active-set and irwls certify their result from their own f (smo's gradient,
the f / g of the active-set and irwls shard states) plus an exact recomputation of f on a
sample of rows (the most violating rows, the rows of m(α) and M(α), and a hashed random
draw). Checked here: without drift the statistics equal an independent computation (f from
scikit-learn's kernel over the model's support vectors) and no exact pass is made; with drift
injected into the maintained f — a bias over every row, a large error on one row that makes
it a violator, or an error on a few rows that hides nothing (only the random draw sees it) —
the check falls back to the exact pass, whose statistics are the independent ones.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, kernel_solvers, sklearn_kernel

import ooc_svm.solvers.dual.finish as finish_mod
import ooc_svm.solvers.smo.driver as smo_driver
from ooc_svm.api import train
from ooc_svm.engine import LocalEngine
from ooc_svm.kernels.kernel_functions import KernelParams
from ooc_svm.solvers.dual import (
    Expansion,
    apply_alpha_updates,
    init_alpha_state,
    kkt_violation_pass,
)
from ooc_svm.solvers.dual import kkt as kkt_mod

GAMMA, C, TOL = 0.1, 1.0, 1e-3
SOLVERS = kernel_solvers()


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    rng = np.random.default_rng(7)
    n = 2000
    X = rng.normal(size=(n, 8)).astype(np.float32)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] ** 2 - 0.5 + 0.6 * rng.normal(size=n) > 0, 1.0, -1.0)
    store = build_store(tmp_path_factory.mktemp("kkt") / "s.zarr", X, y, shard_rows=500)
    return store, X.astype(np.float64), y


def _reference(result, store, X, y):
    """KKT statistics of the model from the independent pass (f of every row recomputed
    from the model's support vectors; α rebuilt from ``support_`` and ``dual_coef_``), and
    f from scikit-learn's kernel, which the pass's f must match."""
    m = result.model
    eng = LocalEngine()
    st = init_alpha_state(eng, store)
    apply_alpha_updates(store, eng, st, np.asarray(m.support_), np.abs(m.dual_coef_))
    sv = m.support_vectors_
    kp = KernelParams("rbf", GAMMA)
    exp = Expansion.from_csr(kp, X.shape[1], sv.indptr.astype(np.int64), sv.indices,
                             sv.data.astype(np.float32), m.dual_coef_)  # fmt: skip
    g = sklearn_kernel(X, sv.toarray(), "rbf", GAMMA) @ m.dual_coef_
    assert np.abs(exp.scores(*_csr(X)) - g).max() < 1e-6  # float32 data: RBF to ~1e-7
    # the store holds float32 data, as the solver's rows: the same sums as its own pass
    return kkt_violation_pass(store, eng, st, exp, float(m.intercept_), C, 1.0, TOL)


def _csr(X):
    A = sp.csr_matrix(X)
    return A.indptr.astype(np.int64), A.indices.astype(np.uint32), A.data


def _count_exact(monkeypatch):
    calls = []
    real = finish_mod.kkt_violation_pass

    def spy(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(finish_mod, "kkt_violation_pass", spy)
    return calls


def _assert_matches(summary, ref, atol):
    assert abs(summary["kkt_max_violation"] - ref["max_violation"]) <= atol
    assert abs(summary["kkt_gap"] - ref["gap"]) <= 2 * atol
    assert summary["kkt_ok"] == (ref["max_violation"] <= TOL)


@pytest.mark.parametrize("solver", SOLVERS)
def test_check_from_maintained_f_equals_independent_pass(problem, solver, monkeypatch):
    store, X, y = problem
    calls = _count_exact(monkeypatch)
    r = train(store, solver, kernel="rbf", gamma=GAMMA, C=C, tol=TOL)
    assert r.summary["kkt_source"] == "maintained"
    assert not calls  # no independent pass was made
    drift = r.summary["kkt_drift"]
    assert 0.0 <= drift <= 0.1 * TOL
    # smo's gradient is updated from float32 kernel columns (as LIBSVM's): it drifts by
    # ~1e-7; active-set and irwls keep f in float64
    _assert_matches(r.summary, _reference(r, store, X, y), atol=1e-9 + 2 * drift)


def _drift(kind: str, y, a, g, first_gid, intercept):
    """``g`` with drift of the given kind (rows chosen by global index: any engine, any
    shard size gives the same corruption)."""
    g = np.array(g, dtype=np.float64, copy=True)
    gids = np.arange(first_gid, first_gid + g.size)
    if kind == "bias":  # every row off by 0.3·tol: past the accepted drift, no row flagged
        g += 0.3 * TOL * y
    elif kind == "one-row":  # one row pushed far into violation (away from its bound's side)
        i = gids == 1234
        g[i] += np.where(a[i] >= C, 10.0, -10.0) * y[i]
    else:  # "hidden": 3 % of the α = 0 rows pushed further from the margin (no new violator)
        pick = ((gids * 2654435761) % 100 < 3) & (a <= 0)
        g[pick] += 5.0 * y[pick]
    return g


@pytest.mark.parametrize("kind", ["bias", "one-row", "hidden"])
@pytest.mark.parametrize("solver", SOLVERS)
def test_drift_in_maintained_f_falls_back_to_exact_pass(problem, solver, kind, monkeypatch):
    store, X, y = problem
    calls = _count_exact(monkeypatch)
    if solver == "smo":
        real_rows = smo_driver.maintained_kkt_rows

        def corrupt_rows(rows, g, exp, intercept, Cv, tol):
            return real_rows(rows, _drift(kind, rows.y, rows.alpha, g, 0, intercept), exp,
                             intercept, Cv, tol)  # fmt: skip

        monkeypatch.setattr(smo_driver, "maintained_kkt_rows", corrupt_rows)
    else:
        real_pass = finish_mod.maintained_kkt_pass

        def corrupt_pass(store_, engine, state, exp, intercept, Cb, positive, tol):
            def fn(shard, _bc, st):
                ys = np.where(shard.y == positive, 1.0, -1.0)
                a, g = st
                return None, (a, _drift(kind, ys, a, g, shard.row_start, intercept))

            engine.map_reduce(store_, fn, None, state=state)
            return real_pass(store_, engine, state, exp, intercept, Cb, positive, tol)

        monkeypatch.setattr(finish_mod, "maintained_kkt_pass", corrupt_pass)
    r = train(store, solver, kernel="rbf", gamma=GAMMA, C=C, tol=TOL)
    assert r.summary["kkt_source"] == "exact"
    assert len(calls) == 1
    _assert_matches(r.summary, _reference(r, store, X, y), atol=1e-9)


def test_sample_holds_worst_rows_and_extremes():
    rng = np.random.default_rng(3)
    n = 5000
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    a = np.where(rng.random(n) < 0.3, 1.0, 0.0)
    g = rng.normal(size=n)
    gids = np.arange(10_000, 10_000 + n)
    idx = kkt_mod.sample_for_check(gids, y, a, g, 0.1, 1.0, 0.05)
    viol, myg, up, low, *_ = kkt_mod._violations(y, a, g, 0.1, np.full(n, 1.0))
    worst = np.argsort(viol)[-kkt_mod.SAMPLE_WORST :]
    assert set(worst.tolist()) <= set(idx.tolist())
    assert np.flatnonzero(up)[np.argmax(myg[up])] in idx
    assert np.flatnonzero(low)[np.argmin(myg[low])] in idx
    n_random = int((kkt_mod._hash_unit(gids, kkt_mod.SAMPLE_SEED) < 0.05).sum())
    assert 150 < n_random < 350  # about 5 % of the rows
    assert np.all(np.diff(idx) > 0)
