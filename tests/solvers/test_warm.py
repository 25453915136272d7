"""Warm starts (``train --init MODEL``, ``ooc_svm.train(store, init=model)``, the estimators'
``warm_start``): a store grown by an append, trained from the model of its first rows,
reaches the cold start's optimum (within the solvers' guarantees), and models that cannot
start a training are refused with the fix."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import kernel_solvers
from conftest import load_svmlight_int32 as _load
from sklearn.datasets import make_classification

import ooc_svm
from ooc_svm.solvers import SolverError
from ooc_svm.store import StoreWriter, csr_to_shards, open_store, write_store


def _write(path, X, y, shard_rows):
    X = sp.csr_matrix(X, dtype=np.float32)
    write_store(str(path), csr_to_shards(X, y, shard_rows=shard_rows), n_features=X.shape[1])
    return str(path)


def _append(path, X, y, shard_rows):
    with StoreWriter(str(path), append=True) as w:
        for s in csr_to_shards(sp.csr_matrix(X, dtype=np.float32), y, shard_rows=shard_rows):
            w.add(s)
        w.commit()
    return open_store(str(path))


@pytest.fixture(scope="module")
def linear_data():
    X, y = make_classification(
        n_samples=2400, n_features=30, n_informative=12, flip_y=0.08, random_state=3
    )
    return X, np.where(y > 0, 1.0, -1.0)


@pytest.fixture
def grown(tmp_path, linear_data):
    """(store of the first 2160 rows, then grown by 240 appended rows; model of the first)."""
    X, y = linear_data
    path = _write(tmp_path / "g.zarr", X[:2160], y[:2160], 540)

    def grow():
        return _append(path, X[2160:], y[2160:], 540)

    return path, grow


@pytest.mark.parametrize("variant", ["accelerated", "paper", "selective", "svmperf"])
def test_perf_warm_equals_cold(grown, variant):
    path, grow = grown
    eps = 1e-4
    first = ooc_svm.train(path, "perf", C=1.0, eps=eps, variant=variant)
    st = grow()
    cold = ooc_svm.train(st, "perf", C=1.0, eps=eps, variant=variant)
    warm = ooc_svm.train(st, "perf", C=1.0, eps=eps, variant=variant, init=first.model)
    # both are within eps·C·n of the optimum (the guarantee): so within it of each other
    assert abs(warm.objective - cold.objective) <= eps * st.meta.n_rows
    assert warm.converged and cold.converged
    assert warm.model.info["rows"]["n_rows"] == st.meta.n_rows
    if variant in ("accelerated", "paper"):
        assert first.model.warm_points_ is not None and first.model.warm_cut_ is not None
        assert warm.passes < cold.passes, (warm.passes, cold.passes)


def test_perf_warm_on_same_rows_certifies_in_one_pass(grown):
    path, _ = grown
    first = ooc_svm.train(path, "perf", C=1.0, eps=1e-3)
    again = ooc_svm.train(path, "perf", C=1.0, eps=1e-3, init=first.model)
    assert again.passes == 1 and again.converged
    assert again.objective <= first.objective + 1e-3 * 2160


def test_perf_warm_one_vs_rest_and_ranking(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1500, 12))
    W = rng.normal(size=(12, 3))
    y = np.argmax(X @ W + 0.3 * rng.normal(size=(1500, 3)), axis=1).astype(np.float64)
    path = _write(tmp_path / "mc.zarr", X[:1350], y[:1350], 450)
    first = ooc_svm.train(path, "perf", C=1.0, eps=1e-4)
    assert first.model.warm_points_ is not None
    st = _append(path, X[1350:], y[1350:], 450)
    cold = ooc_svm.train(st, "perf", C=1.0, eps=1e-4)
    warm = ooc_svm.train(st, "perf", C=1.0, eps=1e-4, init=first.model)
    assert abs(warm.objective - cold.objective) <= 3 * 1e-4 * 1500
    assert warm.passes < cold.passes
    # ranks (--loss ordinal) with query ids: w and the aggregated plane
    ranks = np.digitize(X @ W[:, 0], [-1.0, 0.0, 1.0]).astype(np.float64)
    qid = np.repeat(np.arange(150), 10)
    rp = str(tmp_path / "r.zarr")
    write_store(
        rp, csr_to_shards(sp.csr_matrix(X[:1350]), ranks[:1350], qid=qid[:1350], shard_rows=450)
    )
    r1 = ooc_svm.train(rp, "perf", C=1.0, eps=1e-4, loss="ordinal")
    with StoreWriter(rp, append=True) as w:
        for s in csr_to_shards(
            sp.csr_matrix(X[1350:]), ranks[1350:], qid=qid[1350:], shard_rows=450
        ):
            w.add(s)
        w.commit()
    rc = ooc_svm.train(rp, "perf", C=1.0, eps=1e-4, loss="ordinal")
    rw = ooc_svm.train(rp, "perf", C=1.0, eps=1e-4, loss="ordinal", init=r1.model)
    m = rc.summary["n_pairs"]
    assert abs(rw.objective - rc.objective) <= 1e-4 * m
    assert rw.passes < rc.passes


def _wide(n=2400, width=400_000, held=3000, k=15, seed=4):
    """Rows of ``k`` non-zeros over ``held`` columns spread across ``width`` (a wide
    hashed store's shape), labels of a hidden w plus noise."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(width, held, replace=False))
    idx = np.sort(rng.choice(held, size=(n, k)), axis=1)
    X = sp.csr_matrix((np.ones(n * k), cols[idx].ravel(), np.arange(n + 1) * k), shape=(n, width))
    X.sum_duplicates()
    w = rng.normal(size=width)
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, np.unique(X.indices).shape[0]


def test_perf_model_of_a_wide_store_is_the_size_of_what_it_means(tmp_path, monkeypatch):
    """A perf model over a wide store kept its warm-start state dense over every
    column (32 plane points and the plane: 1.13 GB of a 1.46 GB model where LIBLINEAR's is
    80 MB). Now: at most 2x LIBLINEAR's model file plus the warm state over the columns the
    rows hold; --no-warm-state (``warm_state=False``) writes w and b alone, and a warm start
    from the saved model runs as from the model in memory."""
    from ooc_svm.interop import liblinear
    from ooc_svm.model.model import load_model
    from ooc_svm.solvers import perf
    from ooc_svm.solvers.perf.warm import WARM_POINTS_USED

    monkeypatch.setattr(perf, "REMAP_MIN_DIM", 50_000, raising=False)
    X, y, held = _wide()
    v = "accelerated"  # the variant that keeps warm-start state (auto may pick dcd here)
    path = _write(tmp_path / "w.zarr", X[:2160], y[:2160], 540)
    first = ooc_svm.train(path, "perf", C=1.0, eps=1e-4, variant=v)
    lean = ooc_svm.train(path, "perf", C=1.0, eps=1e-4, variant=v, warm_state=False)
    ll = str(tmp_path / "ll.model")
    liblinear.write(first.model, ll)
    ll_size = os.path.getsize(ll)
    sizes = {}
    dcd = ooc_svm.train(path, "perf", C=1.0, eps=1e-4, variant="dcd")  # keeps no warm state
    for name, res in (("warm", first), ("lean", lean), ("dcd", dcd)):
        res.model.save(str(tmp_path / name))
        sizes[name] = os.path.getsize(tmp_path / name / "arrays.npz")
    m = load_model(str(tmp_path / "warm"))
    assert m.warm_points_ is not None and m.warm_points_.shape[0] <= WARM_POINTS_USED
    assert m.warm_cut_ is not None and m.warm_cols_.shape[0] <= held + 1
    np.testing.assert_array_equal(m.coef_, first.model.coef_)
    warm_bytes = (8 + 4 + 4 * WARM_POINTS_USED) * (held + 1)  # plane, columns, points
    assert sizes["warm"] <= 2 * ll_size + warm_bytes, (sizes, ll_size)
    assert sizes["lean"] <= 2 * ll_size and sizes["dcd"] <= 2 * ll_size, (sizes, ll_size)
    lm = load_model(str(tmp_path / "lean"))
    assert lm.warm_cut_ is None and lm.warm_points_ is None and lm.warm_cols_ is None
    st = _append(path, X[2160:], y[2160:], 540)
    cold = ooc_svm.train(st, "perf", C=1.0, eps=1e-4, variant=v)
    warm = ooc_svm.train(st, "perf", C=1.0, eps=1e-4, variant=v, init=m)
    assert warm.converged and abs(warm.objective - cold.objective) <= 1e-4 * st.meta.n_rows
    # the model read back starts the run as the one in memory did (same state, same run)
    again = ooc_svm.train(st, "perf", C=1.0, eps=1e-4, variant=v, init=first.model)
    assert (warm.passes, warm.objective) == (again.passes, again.objective)


@pytest.fixture(scope="module")
def a9a_small():
    """700 distinct rows of a9a (a9a repeats rows; α may then be split between copies in
    many ways, and the support vectors would not be unique)."""
    X, y = _load("a9a/a9a", 1200, n_features=123)
    keys = [(X[i].indices.tobytes(), y[i]) for i in range(X.shape[0])]
    first = sorted({k: i for i, k in reversed(list(enumerate(keys)))}.values())[:700]
    return X[first], y[first]


@pytest.mark.parametrize("solver", [*kernel_solvers(), "smo-decomposition"])
def test_dual_warm_equals_cold(tmp_path, a9a_small, solver):
    X, y = a9a_small
    path = _write(tmp_path / "d.zarr", X[:630], y[:630], 210)
    kw = {"C": 1.0, "gamma": 0.05, "tol": 1e-6}
    if solver == "irwls":
        kw["working_set"] = 100
    if solver == "smo-decomposition":  # out of core: 200 of the 700 rows in memory
        solver, kw["working_rows"] = "smo", 200
    first = ooc_svm.train(path, solver, **kw)
    st = _append(path, X[630:], y[630:], 210)
    cold = ooc_svm.train(st, solver, **kw)
    warm = ooc_svm.train(st, solver, init=first.model, **kw)
    assert warm.dual_objective == pytest.approx(cold.dual_objective, rel=1e-6)
    # the same support vectors: rows whose α is beyond what the KKT tolerance leaves open
    np.testing.assert_array_equal(_svs(warm.model), _svs(cold.model))
    assert warm.summary.get("kkt_ok", True)


def _svs(model, floor=1e-4):
    return np.sort(model.support_[np.abs(model.dual_coef_) > floor])


def test_dual_warm_finds_rows_of_a_rebuilt_store(tmp_path, a9a_small):
    """Re-ingested with other shard sizes and rows in another order: the row indices of the
    model are wrong, its support vectors are found by fingerprint."""
    X, y = a9a_small
    kw = {"C": 1.0, "gamma": 0.05, "tol": 1e-6}
    first = ooc_svm.train(_write(tmp_path / "a.zarr", X[:630], y[:630], 210), "active-set", **kw)
    perm = np.random.default_rng(0).permutation(700)
    rebuilt = _write(tmp_path / "b.zarr", X[perm], y[perm], 333)
    cold = ooc_svm.train(rebuilt, "smo", **kw)
    warm = ooc_svm.train(rebuilt, "smo", init=first.model, **kw)
    assert warm.dual_objective == pytest.approx(cold.dual_objective, rel=1e-6)


def test_refusals_name_the_fix(tmp_path, linear_data, a9a_small):
    X, y = linear_data
    path = _write(tmp_path / "r.zarr", X[:600], y[:600], 300)
    lin = ooc_svm.train(path, "perf", C=1.0)
    # another feature space
    narrow = _write(tmp_path / "n.zarr", X[:600, :10], y[:600], 300)
    with pytest.raises(SolverError, match="features.*another feature space.*without --init"):
        ooc_svm.train(narrow, "perf", init=lin.model)
    # another label set
    other = _write(tmp_path / "l.zarr", X[:600], np.where(y > 0, 2.0, 1.0), 300)
    with pytest.raises(SolverError, match=r"labels \[-1, 1\] are not this store's \[1, 2\]"):
        ooc_svm.train(other, "perf", init=lin.model)
    # another loss
    with pytest.raises(SolverError, match="--loss error.*--loss roc; give --loss error"):
        ooc_svm.train(path, "perf", loss="roc", init=lin.model)
    # a perf model cannot start a dual solver
    with pytest.raises(SolverError, match="keeps no dual coefficients"):
        ooc_svm.train(path, "smo", kernel="linear", init=lin.model)
    # the store was overwritten: its first rows are not the model's
    shutil.rmtree(path)
    _write(path, X[600:1200], y[600:1200], 300)
    with pytest.raises(SolverError, match="rows are not the model's 600 rows.*without --init"):
        ooc_svm.train(path, "perf", init=lin.model)
    # shards removed
    Xa, ya = a9a_small
    dp = _write(tmp_path / "k.zarr", Xa[:600], ya[:600], 200)
    ker = ooc_svm.train(dp, "smo", C=1.0, gamma=0.05)
    with pytest.raises(SolverError, match="rbf kernel model cannot start perf"):
        ooc_svm.train(dp, "perf", init=ker.model)
    with pytest.raises(SolverError, match="kernel has gamma 0.05.*give --gamma 0.05"):
        ooc_svm.train(dp, "smo", C=1.0, gamma=0.5, init=ker.model)
    with pytest.raises(SolverError, match="kernel is rbf.*give --kernel rbf"):
        ooc_svm.train(dp, "smo", C=1.0, kernel="poly", init=ker.model)
    shutil.rmtree(dp)
    _write(dp, Xa[:400], ya[:400], 200)
    with pytest.raises(SolverError, match="has 400 rows, the model was trained on 600|not rows of"):
        ooc_svm.train(dp, "smo", C=1.0, gamma=0.05, init=ker.model)


def test_resume_a_warm_run_from_its_checkpoint(grown, tmp_path):
    path, grow = grown
    first = ooc_svm.train(path, "perf", C=1.0, eps=1e-5)
    st = grow()
    full = ooc_svm.train(st, "perf", C=1.0, eps=1e-5, init=first.model)
    assert full.iterations >= 4
    ck = str(tmp_path / "ck")

    def stop(rec):
        if rec.get("iteration", 0) >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ooc_svm.train(st, "perf", C=1.0, eps=1e-5, init=first.model, checkpoint=ck, callback=stop)
    resumed = ooc_svm.train(
        st, "perf", C=1.0, eps=1e-5, init=first.model, checkpoint=ck, resume=True
    )
    np.testing.assert_allclose(resumed.model.coef_, full.model.coef_, rtol=1e-10, atol=1e-12)
    assert resumed.objective == pytest.approx(full.objective, rel=1e-12)


def test_estimators_warm_start(linear_data, a9a_small):
    X, y = linear_data
    cold = ooc_svm.LinearSVC(C=1.0, tol=1e-4).fit(X, y)
    est = ooc_svm.LinearSVC(C=1.0, tol=1e-4, warm_start=True).fit(X[:2000], y[:2000])
    est.fit(X, y)  # starts from the first fit's solution
    assert est.model_.info.get("warm_start")
    assert abs(est.objective_ - cold.objective_) <= 1e-4 * 2400
    assert est.n_iter_ < cold.n_iter_
    Xa, ya = a9a_small
    svc = ooc_svm.SVC(C=1.0, gamma=0.05, tol=1e-6, warm_start=True).fit(Xa[:600], ya[:600])
    svc.fit(Xa, ya)
    ref = ooc_svm.SVC(C=1.0, gamma=0.05, tol=1e-6).fit(Xa, ya)
    assert svc.dual_objective_ == pytest.approx(ref.dual_objective_, rel=1e-6)
