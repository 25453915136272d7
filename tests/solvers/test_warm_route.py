"""One warm-start route: ``train --init``, the C sweep's warm starts, ``--follow``
and the estimators' ``warm_start`` each build one :class:`ooc_svm.solvers.warm.Start`
(``start_from``) and pass it as ``init=``; the solvers read the model through it (none builds
a start of its own, loads the model again or saves it to a temporary directory), and α is
scaled to the new C in one place (``warm.rescale``)."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

import ooc_svm
from ooc_svm.solvers import warm
from ooc_svm.solvers.perf import warm as perf_warm
from ooc_svm.store import StoreWriter, csr_to_shards, open_store, write_store


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(
        n_samples=500, n_features=12, n_informative=6, flip_y=0.05, random_state=7
    )
    return sp.csr_matrix(X, dtype=np.float32), np.where(y > 0, 1.0, -1.0)


@pytest.fixture
def spy(monkeypatch):
    """Counts: ``built`` Starts (by the type of what they were built from), ``loaded``
    models (``Start.model`` evaluated), ``scaled`` (``warm.rescale`` calls), and the
    ``init`` each solver family's start function was given."""
    seen: dict[str, list] = {"built": [], "loaded": [], "scaled": [], "dual": [], "perf": []}
    init0 = warm.Start.__init__

    def init(self, source, meta, **kw):
        seen["built"].append(type(source).__name__)
        init0(self, source, meta, **kw)

    monkeypatch.setattr(warm.Start, "__init__", init)
    model0 = warm.Start.__dict__["model"].func

    def model(self):
        seen["loaded"].append(self.where)
        return model0(self)

    prop = warm.functools.cached_property(model)
    prop.__set_name__(warm.Start, "model")
    monkeypatch.setattr(warm.Start, "model", prop)
    rescale0 = warm.rescale

    def rescale(values, C, C_old):
        seen["scaled"].append((C, C_old))
        return rescale0(values, C, C_old)

    monkeypatch.setattr(warm, "rescale", rescale)
    dual0 = warm.dual_start

    def dual_start(init, *a, **kw):
        seen["dual"].append(init)
        return dual0(init, *a, **kw)

    monkeypatch.setattr(warm, "dual_start", dual_start)
    perf0 = perf_warm.perf_start

    def perf_start(init, *a, **kw):
        seen["perf"].append(init)
        return perf0(init, *a, **kw)

    monkeypatch.setattr(perf_warm, "perf_start", perf_start)

    def no_tmp(*a, **kw):  # no route passes a model through a temporary directory
        raise AssertionError("a warm start went through a temporary directory")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_tmp)
    return seen


def _store(path, X, y, shard_rows=100):
    write_store(str(path), csr_to_shards(X, y, shard_rows=shard_rows), n_features=X.shape[1])
    return str(path)


def _all_starts(inits):
    return inits and all(isinstance(i, warm.Start) for i in inits)


@pytest.mark.parametrize("solver", ["smo", "active-set", "irwls", "perf"])
def test_init_builds_one_start(tmp_path, data, spy, solver):
    X, y = data
    path = _store(tmp_path / "s.zarr", X, y)
    first = ooc_svm.train(path, solver, C=0.5)
    saved = str(tmp_path / "m")
    first.model.save(saved)
    for init in (saved, first.model):  # `train --init DIR` and `train(init=model)`
        for k in spy:
            spy[k].clear()
        res = ooc_svm.train(path, solver, C=2.0, init=init)
        assert res.converged
        assert spy["built"] == [type(init).__name__], spy["built"]
        assert len(spy["loaded"]) == 1  # read once, through the start
        family = spy["perf"] if solver == "perf" else spy["dual"]
        assert _all_starts(family), family
        if solver != "perf":
            assert spy["scaled"] and spy["scaled"][0] == (2.0, 0.5)


@pytest.mark.parametrize("solver", ["smo", "active-set", "irwls"])
def test_c_sweep_builds_one_start_per_warm_value(tmp_path, data, spy, solver):
    X, y = data
    path = _store(tmp_path / "s.zarr", X, y)
    from ooc_svm.api import train_sweep

    out = train_sweep(path, solver, C=[0.25, 1.0, 4.0], validation=path)
    assert out.mode == "warm"
    assert [r["warm_start"] for r in out.rows] == [False, True, True]
    # the previous value's model, one Start each, given to the solvers as it is
    assert spy["built"] == ["Model", "Model"], spy["built"]
    assert _all_starts(spy["dual"]) and len(spy["dual"]) == 2
    assert {s for s in spy["scaled"] if s[0] != s[1]} == {(1.0, 0.25), (4.0, 1.0)}


def test_follow_refit_builds_one_start(tmp_path, data, spy):
    from ooc_svm.api import solver_params
    from ooc_svm.follow import follow

    X, y = data
    path = _store(tmp_path / "s.zarr", X[:400], y[:400])
    first = ooc_svm.train(path, "smo", C=1.0)
    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(X[400:], y[400:], shard_rows=100):
            w.add(s)
        w.commit()
    for k in spy:
        spy[k].clear()
    params = solver_params("smo", {"C": 1.0})
    n = follow(path, str(tmp_path / "m"), "smo", params, first.model, max_refits=1)
    assert n == 1
    assert spy["built"] == ["Model"], spy["built"]
    assert _all_starts(spy["dual"]) and len(spy["dual"]) == 1
    assert open_store(path).meta.n_rows == 500


@pytest.mark.parametrize("solver", ["perf", "smo"])
def test_estimator_warm_start_builds_one_start(data, spy, solver):
    from ooc_svm.estimators import LinearSVC

    X, y = data
    est = LinearSVC(C=1.0, solver=solver, warm_start=True)
    est.fit(X[:400], y[:400])
    assert spy["built"] == []
    est.fit(X, y)  # other rows: a start for any rows (warm.lenient)
    assert spy["built"] == ["Model"], spy["built"]
    family = spy["perf"] if solver == "perf" else spy["dual"]
    assert _all_starts(family) and all(s.lenient for s in family)
