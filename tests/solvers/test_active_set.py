"""``--solver active-set`` (Scheinberg 2006 SVM-QP) against LIBSVM at tol=1e-8.

Acceptance: dual objective within 1e-6 relative of LIBSVM's (scikit-learn SVC,
tol=1e-8; its dual is computed here from ``dual_coef_`` and the kernel matrix) and every row
within ``tol`` of its KKT condition in an independent check pass, for a9a (first 5,000
rows, RBF γ=0.05, C=1 and 100), mushrooms (linear), duplicate rows with opposite labels and
a linear problem with more margin SVs than features; warm start C=1 → 2 and after appended
rows in ≤ 30 % of the cold-start iterations; the same model on a 2-worker LocalCluster.
"""

from __future__ import annotations

import importlib.util
import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store
from conftest import load_svmlight_int32 as _load
from history_checks import assert_history_timed

from ooc_svm.engine import LocalEngine
from ooc_svm.kernels.kernel_functions import kernel_matrix
from ooc_svm.model.model import Model, load_model
from ooc_svm.solvers import SolverError, active_set
from ooc_svm.solvers.active_set.cholesky import ActiveFactor
from ooc_svm.solvers.active_set.working_set import WorkingSet
from ooc_svm.solvers.dual import (
    apply_alpha_updates,
    init_alpha_state,
    kkt_violation_pass,
    make_expansion,
    shard_rows,
)
from ooc_svm.store import StoreWriter, csr_to_shards, open_store, write_store

svm = pytest.importorskip("sklearn.svm")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _dual(Xsv, coef, kernel, gamma):
    """½ cᵀKc − Σ|c| over support vectors with coefficients c = yα (LIBSVM sign)."""
    K = kernel_matrix(
        sp.csr_matrix(Xsv, dtype=np.float64), sp.csr_matrix(Xsv, dtype=np.float64), kernel, gamma
    )
    coef = np.asarray(coef, dtype=np.float64).ravel()
    return float(0.5 * coef @ K @ coef - np.abs(coef).sum())


def _libsvm(X, y, C, kernel, gamma):
    clf = svm.SVC(C=C, kernel=kernel, gamma=gamma or "scale", tol=1e-8, cache_size=500).fit(X, y)
    c = np.asarray(
        clf.dual_coef_.todense() if sp.issparse(clf.dual_coef_) else clf.dual_coef_
    ).ravel()
    return clf, _dual(X[clf.support_], c, kernel, gamma)


def _our_dual(model, kernel, gamma):
    return _dual(model.support_vectors_, model.dual_coef_, kernel, gamma)


def _independent_kkt(store, res, C, kernel, gamma, tol):
    """KKT of every row from the model alone: α rebuilt from (support_, dual_coef_)."""
    m = res.model
    eng = LocalEngine()
    st = init_alpha_state(eng, store)
    gids = np.asarray(m.support_, dtype=np.int64)
    apply_alpha_updates(store, eng, st, gids, np.abs(np.asarray(m.dual_coef_)))
    parts = eng.map_reduce(
        store, _rows_fn, (gids, float(store.meta.labels[1])), reduce=lambda a, b: a + b
    )
    from ooc_svm.solvers.dual import WorkingRows

    rows = WorkingRows.concat(parts)
    rows.alpha = np.abs(np.asarray(m.dual_coef_))[np.searchsorted(gids, rows.gids)]
    kp = active_set.KernelParams(kernel, gamma if gamma else 1.0 / store.meta.n_features)
    exp = make_expansion(kp, store.meta.n_features, rows, rows.y * rows.alpha)
    return kkt_violation_pass(
        store, eng, st, exp, float(m.intercept_), C, float(store.meta.labels[1]), tol
    )


def _rows_fn(shard, bc):
    gids, positive = bc
    lo, hi = np.searchsorted(gids, [shard.row_start, shard.row_start + shard.n_rows])
    if hi == lo:
        return []
    return [shard_rows(shard, gids[lo:hi] - shard.row_start, positive)]


def _solve(store, **params):
    return active_set.solve(store, LocalEngine(), params)


def _check_against_libsvm(store, X, y, C, kernel, gamma, tol=1e-5, **params):
    res = _solve(store, C=C, kernel=kernel, gamma=gamma, tol=tol, **params)
    clf, ref = _libsvm(X, y, C, kernel, gamma)
    ours = _our_dual(res.model, kernel, gamma)
    assert abs(ours - ref) <= 1e-6 * abs(ref), (ours, ref)
    assert abs(res.dual_objective - ref) <= 1e-6 * abs(ref)
    chk = _independent_kkt(store, res, C, kernel, gamma, tol)
    print(
        f"[{kernel} C={C} n={store.meta.n_rows}] dual {ours:.12g} vs LIBSVM {ref:.12g} "
        f"(rel {(ours - ref) / abs(ref):+.2e}); KKT max violation {chk['max_violation']:.2e}"
        f" (tol {tol:g}); n_s {res.summary['n_s']}, n_c {res.summary['n_c']}, "
        f"{res.iterations} minor / {res.summary['major_iterations']} major iterations, "
        f"max dependent {res.summary['max_dependent']}"
    )
    assert chk["max_violation"] <= tol, chk
    assert res.summary["kkt_ok"]
    assert res.summary["converged"]
    return res, clf


# --------------------------------------------------------------------------------------------
# tiny problems
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,gamma", [("linear", None), ("rbf", 0.5), ("poly", 0.3)])
def test_tiny_vs_libsvm(tmp_path, kernel, gamma, make_store):
    rng = np.random.default_rng(1)
    X = sp.csr_matrix(rng.normal(size=(150, 5)).astype(np.float32))
    y = np.where(X @ rng.normal(size=5) + 0.5 * rng.normal(size=150) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=40, n_features=0)
    X = sp.csr_matrix(X, dtype=np.float64)
    for C in (0.5, 20.0):
        _check_against_libsvm(st, X, y, C, kernel, gamma, sprint_size=30)


def test_duplicate_rows_with_opposite_labels(tmp_path, make_store):
    """Identical points with opposite labels make Q_ss singular (§2.1)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 0.0]) > 0, 1.0, -1.0)
    dup = rng.choice(200, 25, replace=False)
    X = np.vstack([X, X[dup]])
    y = np.concatenate([y, -y[dup]])
    perm = rng.permutation(X.shape[0])
    X, y = sp.csr_matrix(X[perm]), y[perm]
    st = make_store(X, y, shard_rows=64, n_features=0)
    X = sp.csr_matrix(X, dtype=np.float64)
    for kernel, gamma in (("rbf", 0.5), ("linear", None)):
        res, _ = _check_against_libsvm(st, X, y, 1.0, kernel, gamma, sprint_size=50)
        assert res.summary["max_dependent"] >= 1
        # no f(x) gives both copies margin >= 1: one of each pair is at the upper bound
        m = res.model
        a = dict(zip(m.support_.tolist(), np.abs(m.dual_coef_).tolist(), strict=True))
        inv = np.argsort(perm)
        for k, i in enumerate(dup):
            pair = [a.get(int(inv[i]), 0.0), a.get(int(inv[200 + k]), 0.0)]
            assert max(pair) == pytest.approx(1.0)


def test_linear_more_margin_svs_than_features(tmp_path, make_store):
    """Three features, dozens of points exactly on the margins: Q_ss has rank ≤ 3."""
    rng = np.random.default_rng(3)
    n = 240
    Z = rng.uniform(-3, 3, size=(n, 2))
    side = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    far = rng.random(n) < 0.5
    third = side * np.where(far, 1.0 + rng.uniform(0.5, 2.0, n), 1.0)  # |x3| = 1 on the margin
    X = sp.csr_matrix(np.column_stack([Z * 0.01, third]).astype(np.float32))
    y = side
    st = make_store(X, y, shard_rows=50, n_features=0)
    X = sp.csr_matrix(X, dtype=np.float64)
    res, clf = _check_against_libsvm(st, X, y, 10.0, "linear", None, sprint_size=60)
    c = np.asarray(clf.dual_coef_.todense()).ravel()
    assert (np.abs(c) < 10.0 * (1 - 1e-9)).sum() > 3  # LIBSVM: > n_features margin SVs
    assert res.summary["max_dependent"] >= 1  # we met a singular Q_ss
    wf = np.asarray(res.model.coef_)
    assert wf[2] == pytest.approx(1.0, rel=1e-6)


# --------------------------------------------------------------------------------------------
# real data
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def a9a5000(tmp_path_factory):
    X, y = _load("a9a/a9a", 5000, n_features=123)
    st = build_store(tmp_path_factory.mktemp("a9a") / "s.zarr", X, y, shard_rows=1000, n_features=0)
    return st, sp.csr_matrix(X, dtype=np.float64), y


@pytest.mark.parametrize("C", [1.0, pytest.param(100.0, marks=pytest.mark.slow)])
def test_a9a_5000_rbf(a9a5000, C):
    st, X, y = a9a5000
    res, _ = _check_against_libsvm(st, X, y, C, "rbf", 0.05)
    assert res.summary["major_iterations"] >= 2


def test_a9a_small_rbf_C100(tmp_path, make_store):
    """CI stand-in for C=100 (many free SVs): first 1,500 rows."""
    X, y = _load("a9a/a9a", 1500, n_features=123)
    st = make_store(X, y, shard_rows=500, n_features=0)
    res, _ = _check_against_libsvm(st, sp.csr_matrix(X, dtype=np.float64), y, 100.0, "rbf", 0.05)
    assert res.summary["n_s"] > 300


def test_mushrooms_linear(tmp_path, make_store):
    X, y = _load("mushrooms/mushrooms", n_features=112)
    st = make_store(X, y, shard_rows=2000, n_features=0)
    res, _ = _check_against_libsvm(st, sp.csr_matrix(X, dtype=np.float64), y, 1.0, "linear", None)
    assert res.model.kind == "linear"
    assert res.model.support_ is not None  # dual coefficients kept for warm starts


def test_pricing_strategies_and_tiny_cache_agree(tmp_path, make_store):
    X, y = _load("a9a/a9a", 2500, n_features=123)
    st = make_store(X, y, shard_rows=500, n_features=0)
    base = _solve(st, C=1.0, gamma=0.05, tol=1e-5)
    shr = _solve(st, C=1.0, gamma=0.05, tol=1e-5, pricing="shrinking", shrink_after=20)
    tiny = _solve(st, C=1.0, gamma=0.05, tol=1e-5, cache_mb=0.1)
    for r in (shr, tiny):
        assert r.dual_objective == pytest.approx(base.dual_objective, rel=1e-9)
        assert r.summary["kkt_ok"]
    assert shr.summary["shrunk"] > 0
    assert tiny.summary["major_iterations"] > base.summary["major_iterations"]
    w_tiny = max(h["working_set"] for h in tiny.history)
    w_base = max(h["working_set"] for h in base.history)
    assert w_tiny < w_base


# --------------------------------------------------------------------------------------------
# factor accuracy inside the solver
# --------------------------------------------------------------------------------------------
def test_lost_factor_accuracy_is_detected_and_repaired(tmp_path, monkeypatch, make_store):
    X, y = _load("a9a/a9a", 1500, n_features=123)
    st = make_store(X, y, shard_rows=500, n_features=0)
    clean = _solve(st, C=10.0, gamma=0.05, tol=1e-5)
    orig = ActiveFactor.append
    calls = {"n": 0}

    def drifting_append(self, key, yk, col, g=None):
        out = orig(self, key, yk, col, g)
        calls["n"] += 1
        if calls["n"] % 150 == 0 and self.nb > 3:
            self.R[1, 2] += 1e-4 * self.R[1, 1]  # simulate rounding drift of the updates
        return out

    monkeypatch.setattr(ActiveFactor, "append", drifting_append)
    # the compiled minor loop (_numba/sprint.py) appends without ActiveFactor.append: the same drift
    # after each of its calls in which the 150th, 300th, … row entered
    orig_sprint = WorkingSet._sprint

    def drifting_sprint(self, phase, st, fl):
        before = self.c.entered
        code = orig_sprint(self, phase, st, fl)
        if self.c.entered // 150 > before // 150 and self.factor.nb > 3:
            self.factor.R[1, 2] += 1e-4 * self.factor.R[1, 1]
        return code

    monkeypatch.setattr(WorkingSet, "_sprint", drifting_sprint)
    bad = _solve(st, C=10.0, gamma=0.05, tol=1e-5)
    assert bad.summary["refactorisations"] >= 1
    assert bad.dual_objective == pytest.approx(clean.dual_objective, rel=1e-7)
    assert bad.summary["kkt_ok"]


# --------------------------------------------------------------------------------------------
# warm starts (§4.3–4.4)
# --------------------------------------------------------------------------------------------
def test_warm_start_new_C(a9a5000, tmp_path):
    st, _, _ = a9a5000
    r1 = _solve(st, C=1.0, gamma=0.05)
    path = str(tmp_path / "m1")
    r1.model.save(path)
    cold = _solve(st, C=2.0, gamma=0.05)
    warm = _solve(st, C=2.0, gamma=0.05, init=path)
    assert warm.summary["warm_start"]
    assert warm.dual_objective == pytest.approx(cold.dual_objective, rel=1e-8)
    assert warm.summary["kkt_ok"]
    ratio = warm.iterations / cold.iterations
    print(
        f"warm C=1->2: {warm.iterations} vs cold {cold.iterations} minor iterations "
        f"({ratio:.1%}), majors {warm.summary['major_iterations']} vs "
        f"{cold.summary['major_iterations']}"
    )
    assert ratio <= 0.30


def test_warm_start_after_appended_rows(tmp_path):
    X, y = _load("a9a/a9a", 5000, n_features=123)
    path = str(tmp_path / "grow.zarr")
    write_store(
        path, csr_to_shards(sp.csr_matrix(X[:4500], dtype=np.float32), y[:4500], shard_rows=1000)
    )
    first = _solve(open_store(path), C=1.0, gamma=0.05)
    mpath = str(tmp_path / "m")
    first.model.save(mpath)
    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(
            sp.csr_matrix(X[4500:], dtype=np.float32), y[4500:], shard_rows=1000
        ):
            w.add(s)
        w.commit()
    st = open_store(path)
    assert st.meta.n_rows == 5000
    cold = _solve(st, C=1.0, gamma=0.05)
    warm = _solve(st, C=1.0, gamma=0.05, init=mpath)
    assert warm.dual_objective == pytest.approx(cold.dual_objective, rel=1e-8)
    ratio = warm.iterations / cold.iterations
    print(f"warm +500 rows: {warm.iterations} vs cold {cold.iterations} ({ratio:.1%})")
    assert ratio <= 0.30


def test_warm_start_restores_equality_constraint(tmp_path, make_store):
    """A starting α with yᵀα ≠ 0 (an edited model) is repaired before the first step."""
    X, y = _load("a9a/a9a", 1000, n_features=123)
    st = make_store(X, y, shard_rows=400, n_features=0)
    r = _solve(st, C=1.0, gamma=0.05, tol=1e-5)
    m = r.model
    c = m.dual_coef_.copy()
    free = np.flatnonzero(np.abs(c) < 1 - 1e-9)
    c[free[:10]] *= 0.5
    assert abs(c.sum()) > 0.1
    m.dual_coef_ = c
    path = str(tmp_path / "broken")
    m.save(path)
    w = _solve(st, C=1.0, gamma=0.05, tol=1e-5, init=path)
    assert w.dual_objective == pytest.approx(r.dual_objective, rel=1e-9)
    assert w.summary["kkt_ok"]
    assert abs(float(np.sum(w.model.dual_coef_))) < 1e-9


def test_warm_start_from_singular_libsvm_solution(tmp_path, make_store):
    """LIBSVM's mushrooms solution has 300+ free SVs on 112 features. Warm-starting C=2 from
    it (α rescaled) begins with a Q_ss of rank ≤ 112: Case 3 of §2.1."""
    X, y = _load("mushrooms/mushrooms", n_features=112)
    st = make_store(X, y, shard_rows=2000, n_features=0)
    Xd = sp.csr_matrix(X, dtype=np.float64)
    clf, _ = _libsvm(Xd, y, 1.0, "linear", None)
    c = np.asarray(clf.dual_coef_.todense()).ravel()
    assert int((np.abs(c) < 1 - 1e-9).sum()) > 112
    # scikit-learn's binary dual_coef_ is y α with y = +1 for classes_[1] (the label 2)
    coef = clf.coef_.toarray()[0] if sp.issparse(clf.coef_) else clf.coef_[0]
    m = Model(
        kind="linear",
        n_features=112,
        classes=[1.0, 2.0],
        coef_=coef,
        intercept_=float(clf.intercept_[0]),
        support_vectors_=Xd[clf.support_],
        dual_coef_=c,
        support_=clf.support_,
        kernel="linear",
        info={"C": 1.0},
    )
    path = str(tmp_path / "libsvm-model")
    m.save(path)
    res = _solve(st, C=2.0, kernel="linear", tol=1e-5, init=path)
    assert res.summary["max_dependent"] > 2  # Case 3: many dependent columns
    _, ref2 = _libsvm(Xd, y, 2.0, "linear", None)
    assert _our_dual(res.model, "linear", None) == pytest.approx(ref2, rel=1e-6)
    assert res.summary["kkt_ok"]


# --------------------------------------------------------------------------------------------
# parameters, CLI, cluster
# --------------------------------------------------------------------------------------------
def test_params_and_init_errors(tmp_path, make_store):
    rng = np.random.default_rng(5)
    X = sp.csr_matrix(rng.normal(size=(60, 3)).astype(np.float32))
    y = np.where(rng.random(60) < 0.5, 1.0, -1.0)
    st = make_store(X, y, shard_rows=30, n_features=0)
    with pytest.raises(SolverError, match="pricing"):
        _solve(st, pricing="greedy")
    with pytest.raises(SolverError, match="C must be positive"):
        _solve(st, C=0.0)
    r = _solve(st, C=1.0, gamma=0.5)
    path = str(tmp_path / "m")
    r.model.save(path)
    flipped = make_store(X, -y, name="flip.zarr", shard_rows=30, n_features=0)
    with pytest.raises(SolverError, match="opposite label"):
        _solve(flipped, C=1.0, gamma=0.5, init=path)
    short = make_store(X[:10], y[:10], name="short.zarr", shard_rows=30, n_features=0)
    if r.model.support_.max() >= 10:
        with pytest.raises(SolverError, match="outside this store"):
            _solve(short, C=1.0, gamma=0.5, init=path)


def _cli_train(store: str, out: str, *flags: str):
    """``ooc-svm -q train --solver active-set STORE -o OUT --gamma 0.05 FLAGS --json`` in this
    process: ``(exit status, the JSON summary)``."""
    from ooc_svm.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(
            ["-q", "train", "--solver", "active-set", store, "-o", out, "--gamma", "0.05"]
            + [*flags, "--json"]
        )
    return rc, json.loads(buf.getvalue().strip().splitlines()[-1])


def test_cli_json_and_init(tmp_path, make_store):
    X, y = _load("a9a/a9a", 1200, n_features=123)
    st = make_store(X, y, shard_rows=400, n_features=0)
    m1 = str(tmp_path / "m1")
    rc, out = _cli_train(st.path, m1, "--C", "1", "--sprint-size", "300")
    assert rc == 0
    for k in (
        "solver",
        "objective",
        "dual_objective",
        "iterations",
        "passes",
        "seconds",
        "n_s",
        "n_c",
        "major_iterations",
        "minor_iterations",
        "refactorisations",
    ):
        assert k in out
    assert out["solver"] == "active-set"
    model = load_model(m1)
    assert model.kind == "kernel" and model.support_ is not None
    rc, out2 = _cli_train(
        st.path, str(tmp_path / "m2"), "--C", "2", "--init", m1, "--pricing", "shrinking"
    )
    assert rc == 0
    assert out2["warm_start"] is True
    assert out2["iterations"] < out["iterations"]


@pytest.mark.cluster
def test_same_model_on_local_cluster(tmp_path, make_store):
    if importlib.util.find_spec("ooc_svm.engine.dask_engine") is None:
        pytest.skip("the Dask engine (ooc_svm.engine.dask_engine) is not available yet")
    from ooc_svm.engine import make_engine

    X, y = _load("a9a/a9a", 2000, n_features=123)
    st = make_store(X, y, shard_rows=300, n_features=0)
    params = dict(C=1.0, kernel="rbf", gamma=0.05, sprint_size=200)
    local = active_set.solve(st, LocalEngine(), dict(params))
    with make_engine("processes", n_workers=2, threads_per_worker=1) as eng:
        dist = active_set.solve(st, eng, dict(params))
    assert dist.iterations == local.iterations
    assert dist.dual_objective == pytest.approx(local.dual_objective, rel=1e-12)
    np.testing.assert_array_equal(dist.model.support_, local.model.support_)
    np.testing.assert_allclose(
        dist.model.dual_coef_, local.model.dual_coef_, rtol=1e-10, atol=1e-12
    )
    assert dist.model.intercept_ == pytest.approx(local.model.intercept_, abs=1e-10)


def test_history_records_carry_seconds_and_passes(tmp_path, make_store):
    """Every history record has elapsed ``seconds`` and streamed ``passes``."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=400) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=100, n_features=0)
    res = _solve(st, C=10.0, kernel="rbf", gamma=0.5, sprint_size=40)
    assert_history_timed(res)
