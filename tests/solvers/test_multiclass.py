"""One-vs-rest: store views on every engine, and against scikit-learn on real data."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs

from ooc_svm.api import train
from ooc_svm.engine import LocalEngine
from ooc_svm.store import csr_to_shards, open_store, write_store
from ooc_svm.store.views import BinaryView


@pytest.fixture(scope="module")
def blobs_store(tmp_path_factory):
    X, y = make_blobs(n_samples=600, centers=4, n_features=6, random_state=2)
    X = (X - X.mean(0)) / X.std(0)
    path = str(tmp_path_factory.mktemp("mc") / "blobs.zarr")
    write_store(
        path, csr_to_shards(sp.csr_matrix(X), y + 1.0, shard_rows=100), label_kind="multiclass"
    )
    return path, X, y + 1.0


def test_binary_view_labels(blobs_store):
    path, _, y = blobs_store
    st = open_store(path)
    v = BinaryView(st, 3.0)
    assert v.meta.label_kind == "binary" and st.meta.label_kind == "multiclass"
    ys = np.concatenate([v.read_shard(i).y for i in range(v.n_shards)])
    np.testing.assert_array_equal(ys, (y == 3.0).astype(float))


@pytest.mark.parametrize("variant", ["accelerated", "paper"])
def test_ovr_perf_local(blobs_store, variant):
    """perf one-vs-rest fuses every class's pass into one: the same per-class models as
    training each binary problem alone, in max (not the sum) of their passes."""
    path, X, y = blobs_store
    with LocalEngine(n_threads=2) as eng:
        res = train(path, "perf", engine=eng, C=1.0, eps=1e-5, variant=variant)
        assert eng.passes == res.passes
    m = res.model
    assert m.coef_.shape == (4, 6) and m.classes == [1.0, 2.0, 3.0, 4.0]
    assert res.summary["shared_passes"] and res.summary["converged"]
    assert (m.predict(X) == y).mean() > 0.9
    alone = []
    for k, c in enumerate(m.classes):
        with LocalEngine(n_threads=1) as eng:
            r = train(
                BinaryView(open_store(path), c),
                "perf",
                engine=eng,
                C=1.0,
                eps=1e-5,
                variant=variant,
            )
        np.testing.assert_allclose(m.coef_[k], r.model.coef_, rtol=1e-9, atol=1e-12)
        assert m.intercept_[k] == pytest.approx(r.model.intercept_, rel=1e-9, abs=1e-12)
        assert res.summary["per_class_objective"][k] == pytest.approx(r.objective, rel=1e-12)
        alone.append(r.passes)
    # passes per round do not grow with the classes: one pass serves all of them
    assert res.passes == max(alone) < sum(alone)


@pytest.mark.cluster
def test_ovr_same_model_on_dask(blobs_store):
    pytest.importorskip("distributed")
    from ooc_svm.engine import make_engine

    path, X, y = blobs_store
    with LocalEngine(n_threads=2) as eng:
        local = train(path, "perf", engine=eng, C=1.0, eps=1e-5).model
    with make_engine("processes", n_workers=2, threads_per_worker=1) as eng:
        dask = train(path, "perf", engine=eng, C=1.0, eps=1e-5).model
    np.testing.assert_allclose(dask.coef_, local.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(dask.intercept_, local.intercept_, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("solver", ["perf", "smo"])
def test_ovr_on_a_ranking_store_is_refused_at_train_time(tmp_path, solver):
    """predict / evaluate refuse a one-vs-rest model on a store of ranks within qids; train
    used to make one anyway (exit 0)."""
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "ooc_svm", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )

    synth = ("--rows", "300", "--features", "20", "--nnz-per-row", "5", "--seed", "1")
    r = cli("synth", "r.zarr", *synth, "--ranks", "3", "--qid-size", "20")
    assert r.returncode == 0, r.stderr
    r = cli("train", "r.zarr", "--solver", solver, "--multiclass", "ovr", "-o", "m")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("ooc-svm: error:")]
    assert len(err) == 1 and "ranking store" in err[0] and "--label-kind multiclass" in err[0]
    assert not (tmp_path / "m").exists()
