"""``--solver smo`` against LIBSVM (scikit-learn SVC at tol=1e-6) and a brute-force QP.

Acceptance: dual objective within 1e-3 relative of LIBSVM's optimum and >= 99.5 %
identical predictions, both selection rules, on a9a (5,000 rows, RBF γ=0.05, C=1 and 10),
mushrooms (linear, C=1, labels 1/2), w8a (10,000 rows, linear, C=1) and reuters_acq (RBF);
the same model from the local engine and a 2-worker LocalCluster.

The reference dual is computed here from SVC's ``dual_coef_`` and scikit-learn's own kernel
functions: ½ Σ_ij cᵢcⱼK(xᵢ, xⱼ) − Σ|cᵢ| over its support vectors (cᵢ = yᵢαᵢ).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, sklearn_kernel
from conftest import load_svmlight_int32 as _load

from ooc_svm.engine import LocalEngine
from ooc_svm.model.model import load_model
from ooc_svm.solvers import SolverError, smo
from ooc_svm.solvers.dual import kernel_scores_pass
from ooc_svm.store import csr_to_shards, open_store, write_store

svm = pytest.importorskip("sklearn.svm")
pairwise = pytest.importorskip("sklearn.metrics.pairwise")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _kernel(X, Y, kernel, gamma, degree=3, coef0=0.0):
    X = sp.csr_matrix(X, dtype=np.float64)
    Y = sp.csr_matrix(Y, dtype=np.float64)
    return sklearn_kernel(X, Y, kernel, gamma, degree, coef0)


def _libsvm(X, y, C, kernel, gamma, degree=3, coef0=0.0):
    """(SVC, its dual objective in LIBSVM sign)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    clf = svm.SVC(
        C=C, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, tol=1e-6, cache_size=500
    ).fit(X, y)
    c = np.asarray(
        clf.dual_coef_.todense() if sp.issparse(clf.dual_coef_) else clf.dual_coef_
    ).ravel()
    Xs = X[clf.support_]
    dual = 0.5 * c @ _kernel(Xs, Xs, kernel, gamma, degree, coef0) @ c - np.abs(c).sum()
    return clf, float(dual)


def _check(res, X, y, clf, ref_dual, C):
    rel = abs(res.dual_objective - ref_dual) / abs(ref_dual)
    Xf = sp.csr_matrix(X, dtype=np.float32)
    agree = float(np.mean(res.model.predict(Xf) == clf.predict(sp.csr_matrix(X))))
    assert rel <= 1e-3, (res.dual_objective, ref_dual, rel)
    assert agree >= 0.995, agree
    assert res.summary["kkt_ok"], res.summary
    assert set(np.unique(res.model.predict(Xf))) <= set(np.unique(y))
    return rel, agree


def _sols(engine=None):
    return engine or LocalEngine(n_threads=2)


# --------------------------------------------------------------------------------------------
# tiny problems: brute-force QP
# --------------------------------------------------------------------------------------------
def _brute_force_dual(X, y, C, kernel, gamma, degree=3, coef0=0.0):
    from scipy.optimize import minimize

    K = _kernel(X, X, kernel, gamma, degree, coef0)
    Q = K * np.outer(y, y)
    n = len(y)

    def f(a):
        return 0.5 * a @ Q @ a - a.sum(), Q @ a - 1.0

    a0 = np.full(n, min(C, 1.0) * 0.5)
    a0 -= y * (y @ a0) / n
    a0 = np.clip(a0, 0, C)
    r = minimize(
        f,
        a0,
        jac=True,
        method="SLSQP",
        bounds=[(0, C)] * n,
        constraints=[{"type": "eq", "fun": lambda a: y @ a, "jac": lambda a: y}],
        options={"ftol": 1e-12, "maxiter": 2000},
    )
    return float(r.fun)


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "sigmoid"])
@pytest.mark.parametrize("selection", ["wss2", "platt"])
def test_tiny_vs_brute_force_qp(tmp_path, kernel, selection, make_store):
    """PSD kernels: the global optimum. sigmoid is not PSD (the dual is non-convex, SMO and a
    local QP solver may stop at different KKT points): only the KKT check is asserted."""
    rng = np.random.default_rng(5)
    n, d = 40, 6
    X = sp.csr_matrix(rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.6), dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    coef0 = -0.3 if kernel == "sigmoid" else 1.0
    st = make_store(X, y, shard_rows=15, n_features=0)
    res = smo.solve(
        st,
        _sols(),
        dict(kernel=kernel, gamma=0.3, coef0=coef0, C=2.0, selection=selection, tol=1e-5),
    )
    assert res.summary["kkt_ok"]
    if kernel == "sigmoid":
        return
    ref = _brute_force_dual(X.astype(np.float64), y, 2.0, kernel, 0.3, 3, coef0)
    assert abs(res.dual_objective - ref) <= 1e-4 * abs(ref) + 1e-6, (res.dual_objective, ref)


def test_decomposition_path_matches_in_memory(tmp_path, make_store):
    """A working budget smaller than the data forces the streamed decomposition."""
    rng = np.random.default_rng(9)
    n, d = 900, 30
    X = sp.random(n, d, density=0.3, format="csr", random_state=9, dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 2.0, 1.0)
    st = make_store(X, y, shard_rows=200, n_features=0)
    for kernel in ("rbf", "linear"):
        clf, ref = _libsvm(X, y, 1.0, kernel, 0.2)
        full = smo.solve(st, _sols(), dict(kernel=kernel, gamma=0.2))
        part = smo.solve(st, _sols(), dict(kernel=kernel, gamma=0.2, working_rows=150))
        assert not part.summary["in_memory"] and part.summary["outer_iterations"] > 1
        assert part.summary["working_rows"] <= 150 + 150 // 4
        for res in (full, part):
            _check(res, X, y, clf, ref, 1.0)
        assert part.model.classes == [1.0, 2.0]


def test_params_and_errors(tmp_path, make_store):
    X = sp.random(30, 5, density=0.5, format="csr", random_state=1, dtype=np.float32)
    y = np.arange(30) % 3
    st = make_store(X, y.astype(float), shard_rows=2000, n_features=0)
    with pytest.raises(SolverError):
        smo.solve(st, _sols(), {})  # three classes
    st2 = make_store(X, (y % 2).astype(float), name="b.zarr", shard_rows=2000, n_features=0)
    with pytest.raises(SolverError):
        smo.solve(st2, _sols(), {"kernel": "laplace"})
    with pytest.raises(SolverError):
        smo.solve(st2, _sols(), {"C": -1})
    with pytest.raises(SolverError):
        smo.solve(st2, _sols(), {"bogus": 1})
    assert smo.DEFAULTS["kernel"] == "rbf" and smo.DEFAULTS["tol"] == 1e-3


def test_model_roundtrip_and_streamed_scores(tmp_path, make_store):
    rng = np.random.default_rng(2)
    X = sp.random(400, 25, density=0.3, format="csr", random_state=2, dtype=np.float32)
    y = np.where(X @ rng.normal(size=25) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=90, n_features=0)
    res = smo.solve(st, _sols(), dict(kernel="rbf", gamma=0.5, C=3.0))
    m = res.model
    assert m.kind == "kernel" and m.support_vectors_.shape[0] == res.summary["n_sv"]
    assert np.all(np.abs(m.dual_coef_) <= 3.0 + 1e-12)
    m.save(str(tmp_path / "model"))
    m2 = load_model(str(tmp_path / "model"))
    s_mem = m2.decision_function(X)
    s_str = kernel_scores_pass(st, _sols(), m2)
    np.testing.assert_allclose(s_str, s_mem, rtol=1e-6, atol=1e-6)
    # linear kernel: kind="linear" with coef_ = Σ yα x (Platt eq. 22)
    lin = smo.solve(st, _sols(), dict(kernel="linear", C=1.0, selection="platt"))
    assert lin.model.kind == "linear" and lin.model.coef_.shape == (25,)
    np.testing.assert_allclose(
        kernel_scores_pass(st, _sols(), lin.model),
        lin.model.decision_function(X),
        rtol=1e-6,
        atol=1e-6,
    )
    json.dumps(res.to_json_dict("smo"))


# --------------------------------------------------------------------------------------------
# real data vs LIBSVM
# --------------------------------------------------------------------------------------------
REAL = {
    # name: (file, rows, n_features, params)
    "a9a-rbf-C1": ("a9a/a9a", 5000, 123, dict(kernel="rbf", gamma=0.05, C=1.0)),
    "a9a-rbf-C10": ("a9a/a9a", 5000, 123, dict(kernel="rbf", gamma=0.05, C=10.0)),
    "mushrooms-linear": ("mushrooms/mushrooms", None, 112, dict(kernel="linear", C=1.0)),
    "w8a-linear": ("w8a/w8a.bz2", 10000, 300, dict(kernel="linear", C=1.0)),
    "reuters-rbf": ("reuters_acq/train.dat", None, None, dict(kernel="rbf", gamma=0.5, C=1.0)),
}

_REF_CACHE: dict = {}


def _real(name, tmp_path_factory):
    if name not in _REF_CACHE:
        rel, n, nf, params = REAL[name]
        X, y = _load(rel, n, nf)
        clf, ref = _libsvm(X, y, params["C"], params["kernel"], params.get("gamma", "scale"))
        st = build_store(
            tmp_path_factory.mktemp(name) / "s.zarr", X, y, shard_rows=3000, n_features=0
        )
        _REF_CACHE[name] = (X, y, clf, ref, st)
    return _REF_CACHE[name]


# (name, selection) pairs kept in CI (< ~20 s each); the rest are marked slow
FAST = {
    ("a9a-rbf-C1", "wss2"),
    ("a9a-rbf-C10", "wss2"),
    ("mushrooms-linear", "wss2"),
    ("reuters-rbf", "wss2"),
    ("reuters-rbf", "platt"),
    ("a9a-rbf-C1", "platt"),
    ("mushrooms-linear", "platt"),
}


def _cases():
    for name in REAL:
        for sel in ("wss2", "platt"):
            marks = [] if (name, sel) in FAST else [pytest.mark.slow]
            yield pytest.param(name, sel, marks=marks, id=f"{name}-{sel}")


@pytest.mark.parametrize("name,selection", list(_cases()))
def test_real_vs_libsvm(name, selection, tmp_path_factory):
    X, y, clf, ref, st = _real(name, tmp_path_factory)
    params = dict(REAL[name][3], selection=selection)
    res = smo.solve(st, _sols(), params)
    _check(res, X, y, clf, ref, params["C"])
    if params["kernel"] == "linear":
        assert res.model.kind == "linear"
        assert res.objective is not None


@pytest.mark.slow
def test_a9a_decomposition_vs_libsvm(tmp_path_factory):
    """Out-of-core path on real data: working set capped at 1,500 of 5,000 rows."""
    X, y, clf, ref, st = _real("a9a-rbf-C1", tmp_path_factory)
    res = smo.solve(st, _sols(), dict(REAL["a9a-rbf-C1"][3], working_rows=2500))
    assert not res.summary["in_memory"]
    _check(res, X, y, clf, ref, 1.0)


# --------------------------------------------------------------------------------------------
# local engine vs a 2-worker LocalCluster
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster_engine():
    if importlib.util.find_spec("ooc_svm.engine.dask_engine") is None:
        pytest.skip("the Dask engine (ooc_svm.engine.dask_engine) is not available yet")
    from ooc_svm.engine.dask_engine import DaskEngine

    with DaskEngine("processes", n_workers=2, threads_per_worker=1) as eng:
        yield eng


@pytest.mark.cluster
@pytest.mark.parametrize("selection", ["wss2", "wss2-decomposition", "platt"])
def test_same_model_on_local_cluster(tmp_path, selection, cluster_engine, make_store):
    rng = np.random.default_rng(4)
    n = 700
    X = sp.random(n, 40, density=0.2, format="csr", random_state=4, dtype=np.float32)
    y = np.where(X @ rng.normal(size=40) + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=250, n_features=0)
    params = dict(kernel="rbf", gamma=0.3, C=2.0, selection=selection.split("-")[0])
    if selection.endswith("decomposition"):
        params["working_rows"] = 250
    local = smo.solve(st, LocalEngine(), dict(params))
    dist = smo.solve(st, cluster_engine, dict(params))
    assert local.summary["in_memory"] == (selection == "wss2")
    assert local.iterations == dist.iterations
    assert local.dual_objective == pytest.approx(dist.dual_objective, rel=1e-12)
    np.testing.assert_array_equal(local.model.support_, dist.model.support_)
    np.testing.assert_allclose(
        local.model.dual_coef_, dist.model.dual_coef_, rtol=1e-12, atol=1e-12
    )
    assert local.model.intercept_ == pytest.approx(dist.model.intercept_, rel=1e-12, abs=1e-12)
    assert dist.summary["kkt_ok"]


def test_history_records_seconds_and_passes(tmp_path, make_store):
    """Every history record carries ``seconds`` and ``passes`` (the plot draws both)."""
    rng = np.random.default_rng(3)
    n, d = 600, 12
    X = sp.random(n, d, density=0.4, format="csr", random_state=3, dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=150, n_features=0)
    for kw in (
        dict(checkpoint_every=50),  # in memory, several chunks
        dict(working_rows=120),  # decomposition
        dict(selection="platt"),
    ):
        res = smo.solve(st, _sols(), dict(kernel="rbf", gamma=0.3, C=10.0, **kw))
        assert len(res.history) >= 2, kw
        for rec in res.history:
            assert isinstance(rec["seconds"], float) and rec["seconds"] >= 0, (kw, rec)
            assert isinstance(rec["passes"], int) and rec["passes"] >= 1, (kw, rec)
        sec = [r["seconds"] for r in res.history]
        pas = [r["passes"] for r in res.history]
        assert sec == sorted(sec) and pas == sorted(pas), kw


def test_progress_inside_a_chunk_same_model(tmp_path, make_store, monkeypatch, caplog):
    """A chunk of SMO steps (here one chunk: the whole solve) reports progress
    while it runs — at 300,000 rows under a small --cache-mb one chunk took 400+ s without a
    line. With a record after every slice (``PROGRESS_SECONDS`` = 0) the command logs more
    than one line, each with the steps so far and the cache hit rate; the model is the same
    to the bit as without them (in memory and in the decomposition)."""
    import logging

    from ooc_svm.cli import main
    from ooc_svm.solvers.smo import working_set as wss2

    rng = np.random.default_rng(5)
    n, d = 1500, 10
    X = sp.random(n, d, density=0.6, format="csr", random_state=5, dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=500, n_features=0)
    kw = dict(kernel="rbf", gamma=2.0, C=10.0, tol=1e-4, checkpoint_every=10**9)
    for extra in ({}, {"working_rows": 700}):
        monkeypatch.setattr(wss2, "PROGRESS_SECONDS", 3600.0, raising=False)
        quiet = smo.solve(st, _sols(), {**kw, **extra})
        monkeypatch.setattr(wss2, "PROGRESS_SECONDS", 0.0, raising=False)
        loud = smo.solve(st, _sols(), {**kw, **extra})
        inside = [r for r in loud.history if r.get("in_chunk")]
        assert len(inside) >= 2, (extra, loud.history)
        steps = [(r["iteration"], r["smo_iterations"]) for r in inside]  # per outer iteration
        assert steps == sorted(steps) and steps[0][1] >= 1, steps
        assert all(0.0 <= r["cache_hit_rate"] <= 1.0 for r in inside)
        assert not any(r.get("in_chunk") for r in quiet.history)
        np.testing.assert_array_equal(loud.model.dual_coef_, quiet.model.dual_coef_)
        np.testing.assert_array_equal(loud.model.support_, quiet.model.support_)
        assert loud.model.intercept_ == quiet.model.intercept_
    # the command line: more than one progress line, with the steps
    monkeypatch.setenv("OOC_SVM_PROGRESS_SECONDS", "0")
    caplog.set_level(logging.INFO, logger="ooc_svm.progress")
    args = ["train", "--solver", "smo", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "m")]
    args += ["--gamma", "2", "--C", "10", "--tol", "1e-4", "--checkpoint-every", "1000000000"]
    assert main(args) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ooc_svm.progress"]
    assert len(lines) >= 3, lines
    assert all(" steps " in ln and "cache hits" in ln for ln in lines[:-1]), lines


# --------------------------------------------------------------------------------------------
# class weights vs libsvm-official -wi
# --------------------------------------------------------------------------------------------
WEIGHTED = {
    # name: (file, rows, n_features, --class-weight, reference weights (None: balanced))
    "w8a-pos10": ("w8a/w8a.bz2", 3000, 300, "pos=10", {1: 10.0}),
    "a9a-balanced": ("a9a/a9a", 2000, 123, "balanced", None),
}


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
@pytest.mark.parametrize("name", list(WEIGHTED))
def test_class_weights_vs_libsvm(name, kernel, tmp_path, make_store):
    """Per-class box bounds C·w_{y_i}: the dual objective of our solution equals LIBSVM's
    (-s 0 -wi, free bias) to its tolerance; the primal with the weighted hinge too."""
    from reference_weights import balanced_weights, libsvm_reference

    rel, n, nf, spec, weights = WEIGHTED[name]
    X, y = _load(rel, n, nf)
    weights = balanced_weights(y) if weights is None else weights
    gamma = 0.05 if kernel == "rbf" else None
    ref = libsvm_reference(X, y, 1.0, weights, kernel=kernel, gamma=gamma, eps=1e-5)
    st = make_store(X, y, shard_rows=1000, n_features=0)
    params = dict(kernel=kernel, C=1.0, class_weight=spec, tol=1e-4)
    if gamma is not None:
        params["gamma"] = gamma
    res = smo.solve(st, _sols(), params)
    costs = res.summary["class_costs"]
    assert costs == pytest.approx([ref["costs"][ref["y"] < 0][0], ref["costs"][ref["y"] > 0][0]])
    assert costs[0] != costs[1]
    # LIBSVM sign: ours is min ½αᵀQα − eᵀα; the reference's dual is Σα − ½αᵀQα
    assert -res.dual_objective == pytest.approx(ref["dual"], rel=1e-6), (res.dual_objective, ref)
    assert res.objective == pytest.approx(ref["primal"], rel=1e-4), (res.objective, ref)
    assert res.summary["kkt_ok"], res.summary
    # unweighted optimum is a different problem: the weights matter
    plain = smo.solve(st, _sols(), {k: v for k, v in params.items() if k != "class_weight"})
    assert abs(plain.dual_objective - res.dual_objective) > 1e-2 * abs(res.dual_objective)


def test_class_weights_refused_where_not_implemented(tmp_path, make_store):
    rng = np.random.default_rng(2)
    X = sp.random(300, 8, density=0.5, format="csr", random_state=2, dtype=np.float32)
    y = np.where(X @ rng.normal(size=8) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=100, n_features=0)
    with pytest.raises(SolverError, match="wss2"):
        smo.solve(st, _sols(), dict(class_weight="pos=2", selection="platt"))
    with pytest.raises(SolverError, match="in memory"):
        smo.solve(st, _sols(), dict(class_weight="pos=2", working_rows=50))


def test_class_weights_one_vs_rest_as_liblinear(tmp_path):
    """One-vs-rest: class c's weight multiplies C on its own rows in its subproblem (the rest
    keep C), as LIBLINEAR's -wi; a label that is not a class is refused."""
    from ooc_svm.api import train
    from ooc_svm.store.views import BinaryView

    rng = np.random.default_rng(4)
    X = sp.random(600, 10, density=0.5, format="csr", random_state=4, dtype=np.float32)
    y = np.argmax(X @ rng.normal(size=(10, 3)) + 0.3 * rng.normal(size=(600, 3)), axis=1) + 1.0
    path = str(tmp_path / "mc.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=200), label_kind="multiclass")
    st = open_store(path)
    kw = dict(kernel="linear", C=1.0)
    res = train(st, "smo", class_weight="2=5", **kw)
    objs = res.summary["per_class_objective"]
    for k, c in enumerate((1.0, 2.0, 3.0)):
        sub = dict(kw, class_weight="pos=5") if c == 2.0 else kw
        one = smo.solve(BinaryView(st, c), _sols(), sub)
        assert objs[k] == pytest.approx(one.objective, rel=1e-12), c
    plain = train(st, "smo", **kw).summary["per_class_objective"]
    assert objs[0] == pytest.approx(plain[0], rel=1e-12) and objs[1] != pytest.approx(plain[1])
    with pytest.raises(SolverError, match="by class label"):
        train(st, "smo", class_weight="7=2", **kw)


# --------------------------------------------------------------------------------------------
# overflow: values near the float32 limit
# --------------------------------------------------------------------------------------------
def _strict_json(text: str):
    """Parse standard JSON only (Python's parser accepts NaN / Infinity, JSON does not)."""

    def refuse(c):
        raise ValueError(f"not standard JSON: {c}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_overflowing_training_exits_1_and_writes_no_model(tmp_path, kernel):
    """Feature values near 3.4e38: smo used to say converged with objective NaN, print
    NaN / -Infinity in --json and write a model its own predict refused."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    lines = [
        f"{1 if i % 2 else -1} 1:{3.3e38 * rng.random():.6g} 2:{3.0e38 * rng.random():.6g} "
        f"3:{rng.random():.4f}"
        for i in range(60)
    ]
    (tmp_path / "big.svm").write_text("\n".join(lines) + "\n")

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "ooc_svm", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )

    assert cli("ingest", "big.svm", "big.zarr").returncode == 0
    r = cli("train", "big.zarr", "--solver", "smo", "--kernel", kernel, "-o", "m", "--json")
    assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("ooc-svm: error:")]
    assert len(err) == 1 and "is nan" in err[0] and "scale the features" in err[0], r.stderr
    if r.stdout.strip():
        _strict_json(r.stdout)
    assert not (tmp_path / "m").exists()


def test_json_text_is_standard_json_for_non_finite_values():
    from ooc_svm._util import json_text

    doc = {"a": float("nan"), "b": [np.float64("-inf"), 1.5], "c": np.array([np.inf, 2.0])}
    assert _strict_json(json_text(doc)) == {"a": None, "b": [None, 1.5], "c": [None, 2.0]}
