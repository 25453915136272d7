"""``--solver irwls``: the IRWLS-SVC working-set solver against a brute-force QP, the chunked
solver against LIBSVM (scikit-learn ``SVC`` at tol 1e-6) on real data, engine independence."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, dataset
from history_checks import assert_history_timed
from scipy.optimize import minimize

from ooc_svm.api import train
from ooc_svm.engine import LocalEngine
from ooc_svm.kernels.kernel_functions import kernel_matrix
from ooc_svm.solvers import SolverError
from ooc_svm.solvers.irwls import irwls_working_set


# --------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------
def qp_dual(K, y, C, g_out=None, lam=0.0):
    """Brute force: min ½βᵀHβ + Σβᵢ(yᵢg_outᵢ − 1), 0 ≤ β ≤ C, yᵀβ = λ (SLSQP, tiny problems)."""
    n = y.size
    g_out = np.zeros(n) if g_out is None else g_out
    H = K * np.outer(y, y)
    lin = y * g_out - 1.0

    def f(b):
        return 0.5 * b @ H @ b + lin @ b, H @ b + lin

    x0 = np.full(n, 0.0)
    if lam:
        x0 = np.clip(lam * y / n, 0, C)
    res = minimize(
        f,
        x0,
        jac=True,
        method="SLSQP",
        bounds=[(0, C)] * n,
        constraints=[{"type": "eq", "fun": lambda b: y @ b - lam, "jac": lambda b: y}],
        options={"ftol": 1e-14, "maxiter": 2000},
    )
    return res.fun, res.x


def dual_value(K, y, beta, g_out=None):
    g_out = np.zeros(y.size) if g_out is None else g_out
    by = beta * y
    return 0.5 * by @ K @ by + beta @ (y * g_out - 1.0)


def libsvm_dual(X, y, C, kernel, gamma):
    """LIBSVM's optimum (sklearn SVC, tol 1e-6): (dual objective, fitted SVC)."""
    from sklearn.svm import SVC

    clf = SVC(C=C, kernel=kernel, gamma=gamma, tol=1e-6, cache_size=500).fit(X, y)
    coef = clf.dual_coef_
    coef = np.asarray(coef.toarray() if sp.issparse(coef) else coef).ravel()
    sv = X[clf.support_]
    K = kernel_matrix(sv, sv, kernel, gamma)
    return float(0.5 * coef @ K @ coef - np.abs(coef).sum()), clf


def tiny_problem(seed, n=40, d=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.7 * X[:, 1] + 0.8 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X.astype(np.float32), y


# --------------------------------------------------------------------------------------------
# the working-set solver (Table 1) on tiny problems
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly"])
@pytest.mark.parametrize("C", [0.1, 1.0, 10.0])
def test_working_set_solver_matches_brute_force_qp(kernel, C):
    X, y = tiny_problem(1)
    K = kernel_matrix(sp.csr_matrix(X), sp.csr_matrix(X), kernel, 0.3, 2, 1.0)
    ref, _ = qp_dual(K, y, C)
    r = irwls_working_set(K, y, np.zeros(y.size), 0.0, np.zeros(y.size), C, inner_tol=1e-6)
    assert r.converged
    if kernel == "rbf":  # full-rank K: the IRWLS iteration itself meets the tolerance
        assert r.smo_steps == 0
    assert np.all(r.beta >= 0) and np.all(r.beta <= C)
    assert abs(y @ r.beta) < 1e-9 * C * y.size
    d = dual_value(K, y, r.beta)
    assert d <= ref + 1e-7 * abs(ref)
    assert d == pytest.approx(ref, rel=1e-6)


def test_working_set_solver_with_outside_contributions():
    """A working set of a larger problem: G_in (g_out) and G_bin (λ ≠ 0) on the right-hand side."""
    X, y = tiny_problem(2, n=60)
    K = kernel_matrix(sp.csr_matrix(X), sp.csr_matrix(X), "rbf", 0.3)
    C = 2.0
    rng = np.random.default_rng(0)
    beta_all = rng.uniform(0, C, size=y.size) * (rng.random(y.size) < 0.5)
    W = np.arange(25)
    N = np.arange(25, 60)
    beta_all[W] = 0.0
    g_out = K[np.ix_(W, N)] @ (beta_all[N] * y[N])
    lam = -float(y[N] @ beta_all[N])
    # a feasible start on W with y_Wᵀβ_W = λ
    b0 = np.zeros(W.size)
    side = y[W] == np.sign(lam)
    b0[side] = abs(lam) / side.sum()
    assert np.all(b0 <= C)
    ref, _ = qp_dual(K[np.ix_(W, W)], y[W], C, g_out, lam)
    r = irwls_working_set(K[np.ix_(W, W)], y[W], b0, 0.0, g_out, C, inner_tol=1e-6)
    assert r.converged
    assert y[W] @ r.beta == pytest.approx(lam, abs=1e-9)
    d = dual_value(K[np.ix_(W, W)], y[W], r.beta, g_out)
    assert d == pytest.approx(ref, rel=1e-6)
    assert d <= dual_value(K[np.ix_(W, W)], y[W], b0, g_out)


def test_working_set_solver_keeps_the_equality_from_a_start_at_the_bounds():
    """A start with most β at C (a C sweep's warm start: α·C/C_old) and a large b: IRWLS
    empties S₁, and the vertex S₂ = 0, S₃ = C breaks yᵀβ = λ. It used to be accepted as a
    feasible point (λ then lost for good: an a9a sweep ended "converged" with yᵀβ = −2.85);
    every result keeps λ and reaches the optimum of the working-set problem."""
    broken = []
    for seed in range(12):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(10, 3))
        K = kernel_matrix(sp.csr_matrix(X), sp.csr_matrix(X), "rbf", 0.5)
        y = np.where(rng.random(10) < 0.5, -1.0, 1.0)
        beta = np.where(rng.random(10) < 0.7, 1.0, rng.random(10))
        g_out = rng.normal(scale=3.0, size=10)
        b = float(rng.normal(scale=3.0))
        lam = float(y @ beta)
        r = irwls_working_set(K, y, beta, b, g_out, 1.0, inner_tol=1e-6)
        if abs(y @ r.beta - lam) > 1e-9:
            broken.append((seed, float(y @ r.beta), lam))
            continue
        ref, _ = qp_dual(K, y, 1.0, g_out, lam)
        assert dual_value(K, y, r.beta, g_out) <= ref + 1e-6 * max(1.0, abs(ref)), seed
    assert not broken


def test_working_set_solver_degenerate_linear_kernel():
    """Duplicated rows with conflicting labels and more samples than rank(K)."""
    rng = np.random.default_rng(5)
    X = (rng.random((30, 4)) < 0.4).astype(np.float32)
    X = np.vstack([X, X[:10]])
    y = np.where(rng.random(40) < 0.5, 1.0, -1.0)
    K = X @ X.T.astype(np.float64)
    ref, _ = qp_dual(K, y, 5.0)
    r = irwls_working_set(K, y, np.zeros(40), 0.0, np.zeros(40), 5.0, inner_tol=1e-5)
    assert dual_value(K, y, r.beta) == pytest.approx(ref, rel=1e-5, abs=1e-6)


# --------------------------------------------------------------------------------------------
# chunking on tiny stores vs the brute-force QP of the whole problem
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["random", "largest", "smallest"])
@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_chunking_matches_brute_force_qp(tmp_path, strategy, kernel, make_store):
    X, y = tiny_problem(3, n=50)
    st = make_store(X, y, shard_rows=13, n_features=0)
    C = 1.0
    K = kernel_matrix(sp.csr_matrix(X), sp.csr_matrix(X), kernel, 0.3)
    ref, _ = qp_dual(K, y, C)
    r = train(
        st,
        "irwls",
        C=C,
        kernel=kernel,
        gamma=0.3,
        working_set=8,
        strategy=strategy,
        tol=1e-5,
        seed=1,
    )
    assert r.summary["converged"] and r.summary["kkt_ok"]
    assert r.dual_objective == pytest.approx(ref, rel=1e-5)
    m = r.model
    beta = np.zeros(y.size)
    coef = np.asarray(m.dual_coef_).ravel()
    beta[m.support_] = np.abs(coef)
    assert dual_value(K, y, beta) == pytest.approx(ref, rel=1e-5)
    assert abs(coef.sum()) < 1e-9
    # f(x) of the model equals the solver's view: free SVs sit on the margin
    f = m.decision_function(X)
    free = (beta > 1e-8) & (beta < C - 1e-8)
    if free.any():
        assert np.max(np.abs(y[free] * f[free] - 1)) < 1e-4


def test_seed_and_thread_count_do_not_change_the_model(tmp_path, make_store):
    X, y = tiny_problem(4, n=120)
    st = make_store(X, y, shard_rows=17, n_features=0)
    out = []
    for threads in (1, 2):
        with LocalEngine(n_threads=threads, prefetch=threads) as eng:
            out.append(train(st, "irwls", engine=eng, C=3.0, gamma=0.5, working_set=10, seed=7))
    a, b = out
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.model.support_, b.model.support_)
    np.testing.assert_array_equal(a.model.dual_coef_, b.model.dual_coef_)
    assert a.model.intercept_ == b.model.intercept_
    c = train(st, "irwls", C=3.0, gamma=0.5, working_set=10, seed=8)
    assert c.dual_objective == pytest.approx(a.dual_objective, rel=1e-4)
    # the kernel column cache changes where K(xᵢ, xⱼ) comes from, not the iterates
    assert a.summary["cache_hits"] > 0
    d = train(st, "irwls", C=3.0, gamma=0.5, working_set=10, seed=7, cache_mb=0)
    assert d.summary["cache_hits"] == d.summary["cache_misses"] == 0
    assert d.iterations == a.iterations
    np.testing.assert_array_equal(d.model.support_, a.model.support_)
    assert d.dual_objective == pytest.approx(a.dual_objective, rel=1e-9)


def test_bad_parameters(tmp_path, make_store):
    X, y = tiny_problem(5, n=20)
    st = make_store(X, y, shard_rows=20, n_features=0)
    with pytest.raises(SolverError, match="strategy"):
        train(st, "irwls", strategy="best")
    with pytest.raises(SolverError, match="working-set"):
        train(st, "irwls", working_set=1)
    with pytest.raises(SolverError, match="C must be positive"):
        train(st, "irwls", C=0.0)
    yy = np.arange(20.0) % 3
    # ordinal (ranks): irwls needs binary labels (a multiclass store would train one-vs-rest)
    st3 = make_store(X, yy, shard_rows=20, name="m.zarr", label_kind="ordinal", n_features=0)
    with pytest.raises(SolverError, match="binary"):
        train(st3, "irwls")


def test_cli_train_json(tmp_path, capsys, make_store):
    from ooc_svm.cli import main
    from ooc_svm.model.model import load_model

    X, y = tiny_problem(6, n=60)
    make_store(X, y, shard_rows=25, n_features=0)
    out = tmp_path / "model"
    rc = main(
        [
            "train",
            "--solver",
            "irwls",
            str(tmp_path / "s.zarr"),
            "-o",
            str(out),
            "--C",
            "2",
            "--gamma",
            "0.4",
            "--working-set",
            "12",
            "--strategy",
            "largest",
            "--json",
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for k in ("solver", "objective", "dual_objective", "iterations", "passes", "seconds"):
        assert k in summary
    assert summary["solver"] == "irwls" and summary["strategy"] == "largest"
    assert summary["dual_objective"] < 0 and summary["kkt_ok"]
    m = load_model(str(out))
    assert m.kind == "kernel" and m.support_vectors_.shape[0] == m.dual_coef_.size
    assert m.info["solver"] == "irwls"


# --------------------------------------------------------------------------------------------
# real data against LIBSVM
# --------------------------------------------------------------------------------------------
def _load(rel, n=None):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(dataset(rel)))
    if n is not None:
        X, y = X[:n], y[:n]
    X = sp.csr_matrix(X)
    # LIBSVM (through scikit-learn) takes 32-bit sparse indices only
    return sp.csr_matrix(
        (X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape
    ), y


def _check_against_libsvm(tmp_path, X, y, C, kernel, gamma, shard_rows, **kw):
    ref, clf = libsvm_dual(X, y, C, kernel, gamma)
    ref_pred = clf.predict(X)
    st = build_store(tmp_path / "s.zarr", X.copy(), y, shard_rows=shard_rows, n_features=0)
    r = train(st, "irwls", C=C, kernel=kernel, gamma=gamma, **kw)
    assert r.summary["converged"], r.summary
    rel = (r.dual_objective - ref) / abs(ref)
    assert abs(rel) <= 1e-3, (r.dual_objective, ref)
    agree = float(np.mean(r.model.predict(X) == ref_pred))
    assert agree >= 0.995, agree
    return r, rel, agree


def test_a9a_rbf_c1_against_libsvm(tmp_path):
    X, y = _load("a9a/a9a", 5000)
    _check_against_libsvm(tmp_path, X, y, 1.0, "rbf", 0.05, 2000, working_set=150)


@pytest.mark.slow
def test_a9a_rbf_c100_against_libsvm(tmp_path):
    # the paper's random selection; largest |e| oscillates at this C (as section 3 warns) and
    # needs thousands of passes
    X, y = _load("a9a/a9a", 5000)
    _check_against_libsvm(tmp_path, X, y, 100.0, "rbf", 0.05, 2000, working_set=150)


def test_mushrooms_linear_against_libsvm(tmp_path):
    X, y = _load("mushrooms/mushrooms")
    assert set(np.unique(y)) == {1.0, 2.0}
    r, _, _ = _check_against_libsvm(tmp_path, X, y, 1.0, "linear", 1.0, 3000)
    assert r.model.kind == "linear" and r.model.classes == [1.0, 2.0]
    assert r.model.support_vectors_.shape[0] == r.summary["n_sv"]


def test_reuters_acq_linear_against_libsvm(tmp_path):
    X, y = _load("reuters_acq/train.dat")
    _check_against_libsvm(tmp_path, X, y, 1.0, "linear", 1.0, 700, working_set=150)


# --------------------------------------------------------------------------------------------
# engines
# --------------------------------------------------------------------------------------------
@pytest.mark.cluster
def test_local_engine_and_two_worker_cluster_give_the_same_model(tmp_path, make_store):
    from ooc_svm.engine import make_engine

    X, y = _load("a9a/a9a", 800)
    st = make_store(X, y, shard_rows=250, n_features=0)
    params = dict(C=1.0, gamma=0.05, working_set=150, seed=3)
    a = train(st, "irwls", **params)
    with make_engine("processes", n_workers=2, threads_per_worker=1) as eng:
        b = train(st, "irwls", engine=eng, **params)
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.model.support_, b.model.support_)
    np.testing.assert_allclose(a.model.dual_coef_, b.model.dual_coef_, rtol=1e-12, atol=1e-12)
    assert a.model.intercept_ == pytest.approx(b.model.intercept_, abs=1e-12)
    assert a.dual_objective == pytest.approx(b.dual_objective, rel=1e-12)


def test_conf_file_matches_defaults():
    import tomllib
    from pathlib import Path

    from ooc_svm.solvers import irwls

    with open(Path(__file__).resolve().parents[2] / "conf" / "irwls.toml", "rb") as f:
        conf = tomllib.load(f)
    # parameters whose default is None (gamma, class_weight) cannot be written in TOML
    assert set(conf) == {k for k, v in irwls.DEFAULTS.items() if v is not None}
    for k, v in conf.items():
        assert irwls.DEFAULTS[k] == v, k


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_history_records_carry_seconds_and_passes(tmp_path, kernel, make_store):
    """Every history record has elapsed ``seconds`` and streamed ``passes``
    (non-decreasing; the last equals the result's passes before the final model passes)."""
    X, y = tiny_problem(7, n=300)
    st = make_store(X, y, shard_rows=60, n_features=0)
    res = train(st, "irwls", C=10.0, kernel=kernel, gamma=0.5, working_set=20)
    assert_history_timed(res)
    recs = res.history
    assert recs[-1]["seconds"] <= res.seconds


def test_large_system_factor_on_threads_is_bit_identical_and_matches_the_serial_one(monkeypatch):
    """The system (3) above ``_NUMBA_CHOL_MAX`` rows is factored by the numba
    Cholesky on all threads (was LAPACK, whose spinning threads made a 600-row factor take
    0.26 s on a loaded 2-core machine): the same bits for 1, 2 and 3 threads, and the values
    of the serial Cholesky to rounding."""
    import numba

    from ooc_svm.solvers.irwls._numba import _schur_solve, _schur_solve_par

    rng = np.random.default_rng(3)
    n = 301
    A = rng.normal(size=(n, n))
    M = A @ A.T / n + np.eye(n)
    y1 = np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    r = rng.normal(size=n)
    ok, beta, b = _schur_solve(M, y1, r, 0.25, np.zeros((n, n)))
    assert ok
    outs = []
    for t in range(1, min(3, numba.config.NUMBA_NUM_THREADS) + 1):
        monkeypatch.setenv("OOC_SVM_KERNEL_THREADS", str(t))  # thread_share's cap
        outs.append(_schur_solve_par(M, y1, r, 0.25))
    for ok_t, beta_t, b_t in outs:
        assert ok_t
        np.testing.assert_array_equal(beta_t, outs[0][1])
        assert b_t == outs[0][2]
    np.testing.assert_allclose(outs[0][1], beta, rtol=0, atol=1e-10)
    assert abs(outs[0][2] - b) <= 1e-10
    # not positive definite: reported, not factored
    assert not _schur_solve_par(-M, y1, r, 0.25)[0]


def test_missing_columns_in_small_blocks_give_the_same_model(tmp_path, make_store, monkeypatch):
    """The error pass computes a shard's missing kernel columns in blocks of at most
    ``_BLOCK_BYTES`` (a 100k-row shard at q = 600 peaked at 1.2 GB); blocks of 3 columns give
    the model of one block, bit for bit (the same sums in the same order)."""
    from ooc_svm.solvers.irwls import passes

    X, y = tiny_problem(4, n=120)
    st = make_store(X, y, shard_rows=40, n_features=0)
    kw = dict(C=3.0, gamma=0.5, working_set=30, seed=7, cache_mb=0.002)
    a = train(st, "irwls", **kw)
    monkeypatch.setattr(passes, "_BLOCK_BYTES", 3 * 8 * 40)
    b = train(st, "irwls", **kw)
    assert a.summary["cache_misses"] > 3 * a.iterations  # several blocks per shard and pass
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.model.support_, b.model.support_)
    np.testing.assert_array_equal(a.model.dual_coef_, b.model.dual_coef_)
    assert a.model.intercept_ == b.model.intercept_


def _assemble_reference(K, y, g_out, sets, inv_a, C, lam):
    """System (3) by plain loops: the lower triangle from K[i, j] mirrored, r's S₃ sum over
    every sample in order."""
    i1 = np.flatnonzero(sets == 1)
    n1 = i1.size
    M = np.empty((n1, n1))
    r = np.empty(n1)
    c = lam
    for t in range(y.size):
        if sets[t] == 3:
            c -= C[t] * y[t]
    for a, i in enumerate(i1):
        s = g_out[i]
        for t in range(y.size):
            if sets[t] == 3:
                s += C[t] * K[i, t] * y[t]
        r[a] = 1.0 - y[i] * s
        for bb in range(a + 1):
            j = i1[bb]
            M[a, bb] = M[bb, a] = y[i] * y[j] * K[i, j]
        M[a, a] += inv_a[i]
    return i1, M, y[i1], r, c


@pytest.mark.parametrize("q", [40, 300])
def test_system_assembly_on_threads_is_bit_identical_to_plain_loops(q, monkeypatch):
    """System (3)'s assembly (serial below ``PAR_MIN_WORK`` entries, one thread per row above:
    q = 300 has ~180 S₁ rows) gives the bits of plain loops in M's lower triangle (all the
    factorisations read), y₁, r and c, for 1 and 2 threads, with a kernel matrix that is not
    exactly symmetric (the lower triangle comes from K[i, j], i after j)."""
    from ooc_svm.solvers.irwls._numba import _assemble

    rng = np.random.default_rng(5)
    K = rng.normal(size=(q, q))
    y = np.where(rng.normal(size=q) > 0, 1.0, -1.0)
    g_out = rng.normal(size=q)
    sets = rng.choice([1, 1, 1, 2, 3], size=q)
    inv_a = rng.uniform(0.1, 2.0, size=q)
    C = rng.uniform(0.5, 2.0, size=q)
    ref = _assemble_reference(K, y, g_out, sets, inv_a, C, 0.3)
    for t in (1, 2):
        monkeypatch.setenv("OOC_SVM_KERNEL_THREADS", str(t))
        from ooc_svm.kernels.parallel import thread_share

        with thread_share():
            got = _assemble(K, y, g_out, sets, inv_a, C, 0.3)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(np.tril(got[1]), np.tril(ref[1]))
        np.testing.assert_array_equal(got[2], ref[2])
        np.testing.assert_array_equal(got[3], ref[3])
        assert got[4] == ref[4]
