"""``perf`` selective variant (:mod:`ooc_svm.solvers.perf.selective`): few full passes, the
same certificate P(w) ≤ P* + C·n·ε against LIBLINEAR's optimum, a bounded and deterministic
selection of in-memory rows, bit-identical results on the local and the Dask engine, and
memory bounded by the selection budget.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import dataset
from sklearn.datasets import load_svmlight_file
from sklearn.svm import LinearSVC

from ooc_svm.engine import LocalEngine, make_engine
from ooc_svm.evaluation.metrics import primal_objective
from ooc_svm.solvers.perf import selection as psel
from ooc_svm.solvers.perf import selective as ps
from ooc_svm.solvers.perf import selective_inner as psi
from ooc_svm.store import csr_to_shards, open_store, write_store

_DATA = {
    "a9a": ("a9a/a9a", 123),
    "w8a": ("w8a/w8a.bz2", 300),
    "ijcnn1": ("ijcnn1/ijcnn1.bz2", 22),
}


def _csr32(X):
    X = sp.csr_matrix(X, dtype=np.float32).astype(np.float64)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X


def _store(path, X, y, shard_rows):
    write_store(str(path), csr_to_shards(X, y, shard_rows=shard_rows), n_features=X.shape[1])
    return open_store(str(path))


def _liblinear(X, y, C, bias=1.0):
    """P* of LIBLINEAR -s 3 -B bias (LinearSVC, hinge, dual CD), as test_perf.py does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LinearSVC(
            C=C,
            loss="hinge",
            dual=True,
            tol=1e-8,
            max_iter=1_000_000,
            intercept_scaling=bias,
            random_state=0,
        ).fit(X, y)
    return primal_objective(
        X, y, m.coef_.ravel(), float(m.intercept_[0]), C, bias=bias, positive=float(np.max(y))
    )


def _check(res, X, y, C, eps, p_ref):
    """The guarantee and the reported figures (as test_perf.check_guarantee)."""
    n = X.shape[0]
    assert res.summary["converged"] and res.stop_value <= eps
    assert res.objective <= p_ref + C * n * eps
    lb = res.summary["lower_bound"]
    assert lb <= p_ref + 1e-9 * abs(p_ref)
    assert res.objective >= lb
    m = res.model
    assert res.objective == pytest.approx(
        primal_objective(X, y, m.coef_, m.intercept_, C, bias=1.0, positive=m.classes[1]),
        rel=1e-9,
    )


# ------------------------------------------------------------------------------------------
# real data vs LIBLINEAR
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a9a", "w8a", "ijcnn1"])
def test_guarantee_and_few_passes_on_real_data(tmp_path, name):
    """With about a fifth of the rows in memory: the guarantee holds and the passes are a
    fraction of the accelerated variant's (a9a 76, w8a 53, ijcnn1 40 at C=1)."""
    rel, nf = _DATA[name]
    X, y = load_svmlight_file(str(dataset(rel)), n_features=nf)
    X = _csr32(X)
    st = _store(tmp_path / "s.zarr", X, y, 10_000)
    nnz = X.nnz
    # a fifth of the store's bytes as the selection budget counts them
    mb = (psel.ROW_BYTES * X.shape[0] + psel.NZ_BYTES * nnz) / 5 / 2**20
    eps, C = 1e-3, 1.0
    with LocalEngine() as e:
        res = ps.solve_selective(st, e, {"C": C, "eps": eps, "inner_mb": mb})
    _check(res, X, y, C, eps, _liblinear(X, y, C))
    assert res.summary["selected_mb"] <= mb
    assert 0 < res.summary["selected_rows"] < X.shape[0]
    assert res.passes <= 16
    # everything in memory: one pass to select, one to certify (and maybe one more)
    with LocalEngine() as e:
        full = ps.solve_selective(st, e, {"C": C, "eps": eps})
    assert full.summary["selected_rows"] == X.shape[0]
    _check(full, X, y, C, eps, _liblinear(X, y, C))
    assert full.passes <= 3


# ------------------------------------------------------------------------------------------
# small problems
# ------------------------------------------------------------------------------------------


def _tiny(seed=0, n=3000, d=40):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.25, random_state=seed, format="csr", dtype=np.float64)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.5 + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0)
    return _csr32(X), y


@pytest.mark.parametrize("C", [0.1, 1.0, 10.0])
def test_tight_eps_and_tiny_budget_keep_the_guarantee(tmp_path, C):
    """A budget of a few dozen rows: the lower bound stays below P* (the inner planes with
    the streamed rows' coefficients fixed are valid cuts) and the guarantee holds at ε=1e-5."""
    X, y = _tiny(1)
    st = _store(tmp_path / "s.zarr", X, y, 400)
    eps = 1e-5
    mb = 40 * (psel.ROW_BYTES + psel.NZ_BYTES * 10) / 2**20
    with LocalEngine() as e:
        res = ps.solve_selective(st, e, {"C": C, "eps": eps, "inner_mb": mb})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LinearSVC(C=C, loss="hinge", tol=1e-10, max_iter=10**6, random_state=0).fit(X, y)
    p_ref = primal_objective(X, y, m.coef_.ravel(), float(m.intercept_[0]), C, bias=1.0)
    _check(res, X, y, C, eps, p_ref)
    assert res.summary["selected_rows"] < 60
    assert res.summary["inner_iterations"] > 0


def test_working_set_bounded_during_the_inner_loop(tmp_path, caplog):
    """A --dense-limit-mb that holds only a few dozen planes makes the working
    set drop and aggregate planes (``WorkingSet._bound``) inside the inner loop; the loop's
    gⱼ·w_b must follow (it crashed: "operands could not be broadcast together with shapes
    (17,) (25,)", as ``auto`` under a small --memory-mb did on 16 shards). The run converges
    with the guarantee."""
    rng = np.random.default_rng(0)
    n, d, C, eps = 3000, 2000, 1.0, 1e-3
    X = _csr32(sp.random(n, d, density=0.02, random_state=0, format="csr"))
    y = np.where(X @ rng.normal(size=d) + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0)
    st = _store(tmp_path / "s.zarr", X, y, 250)
    mb = 300 * (psel.ROW_BYTES + psel.NZ_BYTES * 60) / 2**20
    limit = 10.5 * 8 * (d + 1) / 2**20  # the ten dense vectors and no more
    with LocalEngine() as e, caplog.at_level("WARNING"):
        res = ps.solve_selective(
            st, e, {"C": C, "eps": eps, "inner_mb": mb, "dense_limit_mb": limit}
        )
    assert "planes with alpha = 0 are dropped" in caplog.text  # the set was bounded
    assert res.summary["inner_iterations"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LinearSVC(C=C, loss="hinge", tol=1e-10, max_iter=10**6, random_state=0).fit(X, y)
    _check(res, X, y, C, eps, primal_objective(X, y, m.coef_.ravel(), float(m.intercept_[0]), C))


def test_select_rows_takes_the_closest_within_the_budget():
    """A shard over its quota keeps the rows a single sort would: the closest to the margin
    within the byte budget (ties broken by the row hash), with their own CSR slices."""
    rng = np.random.default_rng(3)
    n = 500
    X = _csr32(sp.random(n, 30, density=0.2, random_state=3, format="csr"))
    indptr = X.indptr.astype(np.int64)
    mb = np.round(rng.normal(1.0, 1.0, size=n), 1)  # many ties
    mc = np.round(rng.normal(1.0, 1.0, size=n), 1)
    mc[:50] = mb[:50]
    ys = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    budget = 60 * (psel.ROW_BYTES + psel.NZ_BYTES * 6)

    def sel(a, b):
        ip = indptr[a : b + 1] - indptr[a]
        sl = slice(indptr[a], indptr[b])
        return psel.select_rows(
            ip, X.indices[sl], X.data[sl].astype(np.float32), ys[a:b], mb[a:b], mc[a:b], a, budget
        )

    whole = sel(0, n)
    assert psel.selection_bytes(whole) <= budget
    assert 30 < whole["row"].shape[0] < n
    # the chosen rows are the closest: none left out is closer than one kept
    key, key2 = psel.segment_keys(mb, mc)
    kept = np.zeros(n, bool)
    kept[whole["row"]] = True
    worst = max(zip(key[kept], key2[kept], strict=True))
    best_out = min(zip(key[~kept], key2[~kept], strict=True))
    assert worst <= best_out
    # the CSR slices are the rows' own
    R = sp.csr_matrix(
        (whole["data"], whole["indices"], whole["indptr"]), shape=(len(whole["row"]), 30)
    )
    np.testing.assert_array_equal(R.toarray(), X[whole["row"]].toarray().astype(np.float32))


def test_threshold_rows_and_histogram():
    """A pass copies exactly the rows whose segment key is within the threshold, in shard
    order, with their bytes; its histograms hold every row's bytes, and the threshold they
    give for the next pass (at k = 0, k = 1 or inside the segment) takes at least the budget
    on any next segment starting there — its keys are at most the distances to the margin at
    its start."""
    from ooc_svm.solvers.perf._numba.selective import threshold_rows

    rng = np.random.default_rng(8)
    n = 4000
    indptr = np.concatenate(([0], np.cumsum(rng.integers(0, 30, size=n)))).astype(np.int64)
    mb = rng.normal(1.0, 0.8, size=n)
    mc = mb + rng.normal(0.0, 0.3, size=n)
    nbytes = psel.ROW_BYTES + psel.NZ_BYTES * np.diff(indptr)

    def run(mb, mc, tau):
        hist = np.zeros((3, psel.EDGES.shape[0] + 1), dtype=np.int64)
        out = np.empty(n, dtype=np.int64)
        k, used = threshold_rows(
            indptr, mb, mc, tau, psel.ROW_BYTES, psel.NZ_BYTES, psel.EDGES, hist, out
        )
        return out[:k], used, hist

    key, _ = psel.segment_keys(mb, mc)
    for tau in (0.0, 0.05, 0.3, np.inf):
        rows, used, hist = run(mb, mc, tau)
        np.testing.assert_array_equal(rows, np.flatnonzero(key <= tau))
        assert used == nbytes[key <= tau].sum()
        assert (hist.sum(axis=1) == nbytes.sum()).all()
    total = int(nbytes.sum())
    K = psel.GRID.shape[0]
    for q in (0, 5, K - 1):
        m_new = mb + psel.GRID[q] * (mc - mb)  # margins at the new best point
        for frac in (0.02, 0.1, 0.3, 0.6, 0.95):
            budget = int(frac * total)
            tau = psel.threshold_from_hist(hist, budget, q)
            # any next segment from there, long or short
            for step in (0.0, 0.1, 1.0):
                m_next = m_new + step * rng.normal(0.0, 0.5, size=n)
                assert run(m_new, m_next, tau)[1] >= budget
    assert psel.threshold_from_hist(hist, total + 1, 3) == np.inf


def test_pass_candidates_bounded_for_many_shards(tmp_path, monkeypatch):
    """400 tiny shards and a small budget: the candidate rows the shards send and every
    partial of the reduction holds add up, at any moment of any pass, to at most the
    selection's share of ``inner_mb`` (``SELECTION_SHARE``) — whatever the number of shards
    and the tree; the selection is filled to at least half its target after the first pass
    (the threshold of the previous pass), and the run keeps the guarantee."""
    X, y = _tiny(21, n=8000, d=30)
    st = _store(tmp_path / "many.zarr", X, y, 20)
    assert st.n_shards == 400
    inner_mb = 0.25
    cap = inner_mb * 2**20 * ps.SELECTION_SHARE
    live = {"now": 0, "peak": 0}
    fills = []

    def nbytes(part):
        return sum(psel.selection_bytes(c) for c in part["sel"])

    def track(delta):
        live["now"] += delta
        live["peak"] = max(live["peak"], live["now"])

    real_pass, real_reduce, real_thr = (
        psel.pass_select,
        psel.reduce_select,
        psel.threshold_from_hist,
    )

    def pass_select(shard, bc):
        part = real_pass(shard, bc)
        track(nbytes(part))
        return part

    def reduce_select(a, b):
        out = real_reduce(a, b)
        track(nbytes(out) - nbytes(a) - nbytes(b))
        return out

    def threshold_from_hist(hist, budget, q):
        # called by the driver once the pass's candidates are in: a pass ends here
        fills.append(live["now"] / budget)
        live["now"] = 0
        return real_thr(hist, budget, q)

    monkeypatch.setattr(ps, "pass_select", pass_select)
    monkeypatch.setattr(ps, "reduce_select", reduce_select)
    monkeypatch.setattr(ps, "threshold_from_hist", threshold_from_hist)
    with LocalEngine() as e:
        res = ps.solve_selective(st, e, {"C": 1.0, "eps": 1e-3, "inner_mb": inner_mb})
    assert res.passes >= 3 and len(fills) == res.passes
    assert 0 < live["peak"] <= cap
    assert min(fills[1:]) >= 0.5
    assert 0 < res.summary["selected_rows"] < X.shape[0]
    _check(res, X, y, 1.0, 1e-3, _liblinear(X, y, 1.0))


def test_segment_line_search_is_exact():
    """The inner line search (bisection on the right derivative of F = max(P̃, M)) finds the
    minimum of F on k ≥ 0 to within round-off of a fine grid, including k = 0 and steps
    beyond 1, with and without working-set planes."""
    from ooc_svm.solvers.perf._numba.selective import segment_min

    rng = np.random.default_rng(5)
    for trial in range(30):
        m = 200
        mb = rng.normal(1.0, 1.0, size=m)
        dm = rng.normal(0.0, 1.0, size=m)
        dm[:10] = 0.0
        a0, a1, a2 = 3.0, rng.normal(), abs(rng.normal()) + 0.1
        L0, L1, C, Cp = rng.normal(), rng.normal(), 0.3, 0.3 * m
        nw = trial % 4
        u, v = rng.normal(0.5, 1.0, size=nw), rng.normal(0.0, 1.0, size=nw)

        args = (a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
        k, f = segment_min(*args, psi.LINE_STEPS)
        ks = np.linspace(0, max(4.0, 2 * k), 40001)
        assert k >= 0.0
        assert f <= _segment_F(ks, *args).min() + 1e-7 * abs(f)
        assert f == pytest.approx(_segment_F(np.array([k]), *args)[0], rel=1e-12)


def test_threaded_line_search_is_exact_and_the_same_for_any_threads(monkeypatch):
    """The line search of the inner loop (rows binned on a grid on the pool, rounds of
    narrowing, the last halvings on the few rows left) finds the minimum of F as the
    one-thread bisection does, with the same bits for 1, 2 and 3 threads, and writes dm."""
    from concurrent.futures import ThreadPoolExecutor

    from ooc_svm.solvers.perf._numba.selective import segment_min

    monkeypatch.setattr(psi, "LINE_CHUNK", 37)  # several chunks
    monkeypatch.setattr(psi, "LINE_FEW", 20)  # several rounds of binning
    rng = np.random.default_rng(11)
    pools = [ThreadPoolExecutor(t) for t in (1, 2, 3)]
    try:
        for trial in range(60):
            m = 200 + 7 * trial
            mb = rng.normal(1.0, 1.0, size=m)
            dm = rng.normal(0.0, 1.0, size=m) * 10.0 ** rng.uniform(-3, 2)
            dm[:10] = 0.0
            mc = mb + dm
            dm = mc - mb
            a0, a1, a2 = 3.0, rng.normal(), abs(rng.normal()) + 0.1
            L0, L1, C, Cp = rng.normal(), rng.normal(), 0.3, 0.3 * m
            nw = trial % 4
            u, v = rng.normal(0.5, 1.0, size=nw), rng.normal(0.0, 1.0, size=nw)
            got = []
            for pool in pools:
                out = np.empty(m)
                got.append(psi.segment_min_threaded(pool, a0, a1, a2, L0, L1, C, Cp, mb, mc,
                                                   out, u, v, psi.LINE_STEPS))  # fmt: skip
                np.testing.assert_array_equal(out, dm)
            assert got[0] == got[1] == got[2]
            k, f = got[0]
            args = (a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v)
            ks = np.linspace(0, max(4.0, 2 * k), 40001)
            assert k >= 0.0
            assert f <= _segment_F(ks, *args).min() + 1e-7 * abs(f)
            assert f == pytest.approx(_segment_F(np.array([k]), *args)[0], rel=1e-12)
            assert f <= segment_min(*args, psi.LINE_STEPS)[1] + 1e-9 * abs(f)
    finally:
        for pool in pools:
            pool.shutdown()


def _segment_F(t, a0, a1, a2, L0, L1, C, Cp, mb, dm, u, v):
    """F at every step length of the array ``t`` (the reference of segment_min)."""
    t = t[:, None]
    lt = C * (L0 - t[:, 0] * L1 + np.maximum(0.0, 1.0 - mb - t * dm).sum(axis=1))
    lm = Cp * np.maximum(0.0, (u - t * v).max(axis=1)) if u.shape[0] else 0.0 * lt
    t = t[:, 0]
    return 0.5 * (a0 + 2 * t * a1 + t * t * a2) + np.maximum(lt, lm)


def test_same_model_with_one_or_two_threads(tmp_path):
    X, y = _tiny(7)
    st = _store(tmp_path / "s.zarr", X, y, 300)
    p = {"C": 1.0, "inner_mb": 0.05}
    with LocalEngine(n_threads=1, prefetch=0) as e1, LocalEngine(n_threads=2) as e2:
        a = ps.solve_selective(st, e1, p)
        b = ps.solve_selective(st, e2, p)
    np.testing.assert_array_equal(a.model.coef_, b.model.coef_)
    assert a.objective == b.objective and a.passes == b.passes


@pytest.mark.cluster
def test_local_and_dask_engines_bit_identical(tmp_path):
    """A real 2-process LocalCluster: selection, passes and model identical to the bit."""
    if importlib.util.find_spec("ooc_svm.engine.dask_engine") is None:
        pytest.skip("the Dask engine is not there")
    pytest.importorskip("distributed")
    X, y = _tiny(11, n=4000)
    st = _store(tmp_path / "b.zarr", X, y, 350)
    p = {"C": 0.5, "eps": 1e-4, "inner_mb": 0.06}
    with LocalEngine() as le:
        a = ps.solve_selective(st, le, p)
    with make_engine("processes", n_workers=2, threads_per_worker=1) as de:
        b = ps.solve_selective(st, de, p)
    assert 0 < a.summary["selected_rows"] < X.shape[0]
    assert b.passes == a.passes and b.iterations == a.iterations
    np.testing.assert_array_equal(b.model.coef_, a.model.coef_)
    assert b.model.intercept_ == a.model.intercept_
    assert b.objective == a.objective
    assert [h["objective"] for h in b.history] == [h["objective"] for h in a.history]


# ------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, sys
    from ooc_svm.engine import LocalEngine
    from ooc_svm.solvers import perf
    from ooc_svm.solvers.perf import selective as perf_selective
    from ooc_svm.store import open_store
    store, variant, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    st = open_store(store)
    st.read_shard(0)

    def hwm():
        with open("/proc/self/status") as f:
            return [int(x.split()[1]) / 1024.0 for x in f if x.startswith("VmHWM")][0]

    before = hwm()
    # reset the peak so that it measures the training only (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    with LocalEngine(n_threads=1, prefetch=0) as e:
        if variant == "selective":
            r = perf_selective.solve_selective(st, e, {"C": 1.0, "eps": 0.01, "inner_mb": mb})
            extra = {"selected_mb": r.summary["selected_mb"]}
        else:
            r = perf.solve(st, e, {"C": 1.0, "eps": 0.01, "variant": variant})
            extra = {}
    print(json.dumps({"rss_mb": hwm(), "before_mb": before, "passes": r.passes, **extra}))
    """
)


def test_selection_budget_bounds_memory(tmp_path):
    """Peak RSS during training (VmHWM reset after imports) of a child process on a store
    ~10× larger than the budget: selective with a 4 MiB budget stays within the accelerated
    variant's peak plus a few budgets; with a budget that holds the whole store it grows by
    at least half the store's size — so the measurement does see the selection."""
    n, d, k = 60_000, 2_000, 80
    rng = np.random.default_rng(0)
    indptr = np.arange(n + 1, dtype=np.int64) * k
    indices = np.sort(rng.integers(0, d, size=(n, k)), axis=1).ravel()
    X = sp.csr_matrix((rng.random(n * k) + 0.1, indices, indptr), shape=(n, d))
    X.sum_duplicates()
    w = rng.normal(size=d)
    y = np.where(X @ w - np.median(X @ w) + rng.normal(size=n) > 0, 1.0, -1.0)
    store = str(tmp_path / "big.zarr")
    write_store(store, csr_to_shards(_csr32(X), y, shard_rows=5000), n_features=d)
    whole_mb = (psel.ROW_BYTES * n + psel.NZ_BYTES * X.nnz) / 2**20  # ~40 MiB

    def run(variant, mb):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, store, variant, str(mb)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    acc = run("accelerated", 0)
    small = run("selective", 4.0)
    big = run("selective", 4 * whole_mb)
    assert small["selected_mb"] <= 4.0
    assert big["selected_mb"] >= 0.99 * whole_mb
    # transient copies while a pass merges the candidates: a few budgets (module docstring)
    assert small["rss_mb"] <= acc["rss_mb"] + 3 * 4.0 + 25.0
    # every row selected: the shards' decoded arrays are the selection (no copy), so the
    # growth is their non-zeros and per-row arrays, not quite the 64 B/row counted
    assert big["rss_mb"] >= small["rss_mb"] + 0.5 * whole_mb


# ------------------------------------------------------------------------------------------
# public entry points
# ------------------------------------------------------------------------------------------


def test_train_api_and_cli(tmp_path, monkeypatch):
    """``train(..., variant="selective", inner_mb=...)`` and ``ooc-svm train --variant
    selective --inner-mb`` run this variant; the model's objective is the reported one."""
    from conftest import ooc_cmd

    from ooc_svm.api import train

    X, y = _tiny(13)
    monkeypatch.chdir(tmp_path)
    st = _store("s.zarr", X, y, 500)
    res = train(st, "perf", C=2.0, variant="selective", inner_mb=0.03)
    assert res.summary["variant"] == "selective" and res.summary["selected_mb"] <= 0.03
    assert 0 < res.summary["selected_rows"] < X.shape[0]
    out = subprocess.run(
        ooc_cmd(
            "train",
            "--solver",
            "perf",
            "s.zarr",
            "-o",
            "m",
            "--C",
            "2",
            "--variant",
            "selective",
            "--inner-mb",
            "0.03",
            "--json",
        ),
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["variant"] == "selective" and summary["passes"] == res.passes
    assert summary["objective"] == pytest.approx(res.objective, rel=1e-12)
    from ooc_svm.model.model import load_model

    m = load_model("m")
    p = primal_objective(X, y, m.coef_, m.intercept_, 2.0)
    assert summary["objective"] == pytest.approx(p, rel=1e-9)
    bad = subprocess.run(
        ooc_cmd("train", "--solver", "perf", "s.zarr", "-o", "m2", "--inner-mb", "-1"),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith("ooc-svm: error:") and "--inner-mb" in bad.stderr
    assert not os.path.exists("m2")


# ------------------------------------------------------------------------------------------
# every row in memory; QP stall stop
# ------------------------------------------------------------------------------------------


def test_every_row_in_memory_certifies_in_one_pass(tmp_path):
    """When the selection holds every row, P̃ = P: the inner loop's own value is the exact
    objective, so the run certifies after the single selecting pass (it took two before) and
    the guarantee holds against LIBLINEAR."""
    X, y = _tiny(3)
    st = _store(tmp_path / "s.zarr", X, y, 700)
    with LocalEngine() as e:
        res = ps.solve_selective(st, e, {"C": 1.0, "eps": 1e-4})
    assert res.summary["selected_rows"] == X.shape[0]
    assert res.passes == 1
    _check(res, X, y, 1.0, 1e-4, _liblinear(X, y, 1.0))


def test_qp_stall_stops_the_run(tmp_path, monkeypatch):
    """The working-set QP stall stop of the accelerated variant applies to the inner QPs:
    QPs that use up their step budget end the run with its best point, not converged."""
    from ooc_svm.solvers.perf import working_set

    X, y = _tiny(4)
    st = _store(tmp_path / "s.zarr", X, y, 700)
    monkeypatch.setattr(working_set, "QP_MAX_STEPS", 0)
    monkeypatch.setattr(working_set, "QP_MAX_SMO_STEPS", 0)
    monkeypatch.setattr(working_set, "QP_STALL_FAILS", 1)
    with LocalEngine() as e:
        res = ps.solve_selective(st, e, {"C": 1.0, "inner_mb": 0.05})
    assert not res.converged and res.stop_reason == "stalled"
    assert np.all(np.isfinite(res.model.coef_))


def test_inner_mb_auto_is_a_share_of_available_memory(tmp_path, monkeypatch):
    """``--inner-mb auto`` (the default): half of the memory budget, at most what every row
    needs — so with memory to spare the whole store is selected and one pass certifies,
    and with little available the selection shrinks to that share (never beyond it);
    ``auto:SHARE`` sets the share; anything else but MiB >= 0 is refused."""
    from ooc_svm.solvers import SolverError
    from ooc_svm.solvers.perf import params as pp

    X, y = _tiny(17)
    st = _store(tmp_path / "s.zarr", X, y, 500)
    with LocalEngine() as e:
        full = ps.solve_selective(st, e, {"C": 1.0, "eps": 1e-3})
    assert full.summary["selected_rows"] == X.shape[0] and full.passes == 1
    whole = psel.ROW_BYTES * X.shape[0] + psel.NZ_BYTES * X.nnz
    avail = whole  # half of it: half the store's rows at most
    from conftest import fake_memory_budget

    budget = fake_memory_budget(monkeypatch, avail)
    with LocalEngine() as e:
        part = ps.solve_selective(st, e, {"C": 1.0, "eps": 1e-3})
        quarter = ps.solve_selective(st, e, {"C": 1.0, "eps": 1e-3, "inner_mb": "auto:0.25"})
        # the pass's accumulators are claimed first; the rows take a share of what is left
        left = avail - ps.pass_accumulator_bytes(X.shape[1] + 1, e.n_threads)
    assert part.summary["inner_mb"] == pytest.approx(0.5 * left / 2**20)
    assert 0 < part.summary["selected_mb"] * 2**20 <= 0.5 * left
    assert 0 < part.summary["selected_rows"] < X.shape[0]
    assert quarter.summary["inner_mb"] == pytest.approx(0.25 * left / 2**20)
    assert budget.claims == {}  # the rows' claim ends with the run
    _check(part, X, y, 1.0, 1e-3, _liblinear(X, y, 1.0))
    for bad in ("-1", "auto:0", "auto:2", "lots"):
        with pytest.raises(SolverError, match="--inner-mb"):
            pp.Params(inner_mb=bad)


def test_inner_model_is_a_lower_bound_exact_at_the_pass_point_and_its_cuts_are_valid():
    """P~ of the inner loop (the selected rows exactly, the other violated rows as one
    aggregated row max(0, R − w·G)) equals P at the pass's point w_p, stays ≤ P everywhere,
    is at least the old linear model (R − w·G), and every inner cut is an OP2 constraint:
    r − w·g ≤ ξ(w) for all w."""
    from concurrent.futures import ThreadPoolExecutor

    from ooc_svm.solvers.perf._numba.selective import violated_at

    rng = np.random.default_rng(7)
    n, d, C, bias = 400, 30, 0.7, 1.0
    X = _csr32(sp.random(n, d, density=0.3, random_state=7, format="csr"))
    ys = np.where(rng.random(n) < 0.4, 1.0, -1.0)
    Xt = sp.hstack([X, np.full((n, 1), bias)]).tocsr()

    def margins(w):
        return ys * (Xt @ w)

    def P(w):
        return 0.5 * w @ w + C * np.maximum(0.0, 1.0 - margins(w)).sum()

    w_p = rng.normal(0.0, 0.5, d + 1)
    m_p = margins(w_p)
    viol = violated_at(m_p, m_p, ps.GRID, 0, np.empty(n))
    G_p = Xt.T @ (viol * ys)
    indptr = X.indptr.astype(np.int64)
    sel = psel.select_rows(
        indptr, X.indices, X.data.astype(np.float32), ys, m_p, m_p, 0, 100 * (64 + 8 * 9)
    )
    assert 20 < sel["row"].shape[0] < n
    with ThreadPoolExecutor(2) as pool:
        inner = ps._Inner([sel], ps.GRID, 0, G_p, float(viol.sum()), d, n, bias, pool)
        assert inner.agg == 1
        assert inner.value(w_p, inner.margins(w_p), C) == pytest.approx(P(w_p), rel=1e-9)
        S = sel["row"]
        for t in range(30):
            w = w_p + rng.normal(0.0, 0.3 * (1 + t), d + 1)
            m = inner.margins(w)
            v = inner.value(w, m, C)
            assert v <= P(w) + 1e-9 * abs(P(w))
            hinge_S = np.maximum(0.0, 1.0 - margins(w)[S]).sum()
            linear = 0.5 * w @ w + C * (inner.R - w @ inner.G + hinge_S)
            assert v >= linear - 1e-9 * abs(linear)
            g, r = inner.cut(m, n)
            for u in (w, w_p, rng.normal(0.0, 2.0, d + 1)):
                xi = np.maximum(0.0, 1.0 - margins(u)).sum() / n
                assert r - u @ g <= xi + 1e-9


# ------------------------------------------------------------------------------------------
# wide stores: over the columns the rows hold
# ------------------------------------------------------------------------------------------


def _wide(seed=4, n=1500, used=200, width=100_000):
    rng = np.random.default_rng(seed)
    X = sp.random(n, used, density=0.05, random_state=seed, format="csr", dtype=np.float64)
    X = _csr32(X)
    y = np.where(X @ rng.normal(size=used) + 0.3 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    cols = np.sort(rng.choice(width, used, replace=False))
    return sp.csr_matrix((X.data, cols[X.indices], X.indptr), shape=(n, width)), y, cols


def test_wide_store_within_a_small_dense_limit(make_store, monkeypatch):
    """Above REMAP_MIN_DIM columns selective trains over the held columns: a --dense-limit-mb
    that ten vectors of the store's width exceed is enough, on Zarr and Parquet alike, and
    the model (expanded to the store's width) is LIBLINEAR's within the certificate."""
    from ooc_svm.api import train
    from ooc_svm.solvers import SolverError, perf

    X, y, cols = _wide()
    n = X.shape[0]
    z = make_store(X, y, shard_rows=500, name="w.zarr")
    p = make_store(X, y, shard_rows=500, name="w.parquet")
    with pytest.raises(SolverError, match="perf keeps 10 such vectors"):
        train(z, "perf", variant="selective", eps=1e-4, dense_limit_mb=2.0)
    monkeypatch.setattr(perf, "REMAP_MIN_DIM", 50_000, raising=False)
    a = train(z, "perf", variant="selective", eps=1e-4, dense_limit_mb=2.0)
    b = train(p, "perf", variant="selective", eps=1e-4, dense_limit_mb=2.0)
    np.testing.assert_array_equal(b.model.coef_, a.model.coef_)
    assert a.model.coef_.shape == (100_000,) and a.model.n_features == 100_000
    assert np.all(np.delete(a.model.coef_, cols) == 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ll = LinearSVC(C=1.0, loss="hinge", tol=1e-10, max_iter=10**6, random_state=0).fit(X, y)
    p_ref = primal_objective(X, y, ll.coef_.ravel(), float(ll.intercept_[0]), 1.0)
    assert a.converged and a.objective <= p_ref + n * 1e-4
    assert a.summary["lower_bound"] <= p_ref * (1 + 1e-9)
    m = a.model
    assert a.objective == pytest.approx(
        primal_objective(X, y, m.coef_, m.intercept_, 1.0, positive=m.classes[1]), rel=1e-9
    )


@pytest.mark.cluster
def test_wide_store_same_model_on_processes(make_store, monkeypatch):
    from ooc_svm.api import train
    from ooc_svm.solvers import perf

    pytest.importorskip("distributed")
    X, y, _ = _wide(5, n=800)
    st = make_store(X, y, shard_rows=400)
    monkeypatch.setattr(perf, "REMAP_MIN_DIM", 50_000, raising=False)
    local = train(st, "perf", variant="selective", eps=1e-3, dense_limit_mb=2.0)
    with make_engine("processes", n_workers=2, threads_per_worker=1) as de:
        dask = train(st, "perf", engine=de, variant="selective", eps=1e-3, dense_limit_mb=2.0)
    np.testing.assert_array_equal(dask.model.coef_, local.model.coef_)
    assert dask.objective == local.objective
