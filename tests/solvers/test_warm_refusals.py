"""``train --init``: a re-ingest of the same rows with other shard sizes still starts perf
(the rows are matched by their fingerprint, recorded by ingest in the store's metadata),
each refusal names the actual mismatch (other rows, fewer rows), and a model.json field of
the wrong type is a one-line refusal naming the field, never a traceback."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import run_ooc
from sklearn.datasets import make_classification

import ooc_svm
from ooc_svm.solvers import SolverError
from ooc_svm.store import StoreWriter, csr_to_shards, open_store, write_store


def _write(path, X, y, shard_rows):
    X = sp.csr_matrix(X, dtype=np.float32)
    write_store(str(path), csr_to_shards(X, y, shard_rows=shard_rows), n_features=X.shape[1])
    return str(path)


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(
        n_samples=900, n_features=12, n_informative=6, flip_y=0.05, random_state=3
    )
    return X, np.where(y > 0, 1.0, -1.0)


def test_fingerprints_do_not_depend_on_the_shards(tmp_path, data):
    X, y = data
    a = open_store(_write(tmp_path / "a.zarr", X[:600], y[:600], 100)).meta
    b = open_store(_write(tmp_path / "b.zarr", X[:600], y[:600], 257)).meta
    assert a.fingerprints == b.fingerprints and a.fingerprints[0][0] == 600
    # an append continues the fingerprint: 600 + 300 rows as 900 rows ingested at once
    _write(tmp_path / "c.zarr", X[:600], y[:600], 333)
    with StoreWriter(str(tmp_path / "c.zarr"), append=True) as w:
        for s in csr_to_shards(sp.csr_matrix(X[600:], dtype=np.float32), y[600:], shard_rows=64):
            w.add(s)
        w.commit()
    c = open_store(str(tmp_path / "c.zarr")).meta
    d = open_store(_write(tmp_path / "d.zarr", X, y, 450)).meta
    assert c.fingerprints == [a.fingerprints[0], d.fingerprints[0]]
    # other rows, labels or order: other fingerprints
    e = open_store(_write(tmp_path / "e.zarr", X[:600], -y[:600], 100)).meta
    f = open_store(_write(tmp_path / "f.zarr", X[:600][::-1], y[:600][::-1], 100)).meta
    assert len({a.fingerprints[0][1], e.fingerprints[0][1], f.fingerprints[0][1]}) == 3


def test_perf_starts_from_a_store_reingested_with_other_shards(tmp_path, data):
    """It was refused: "the store's first 600 rows are no longer the model's ... overwritten,
    re-ingested or lost shards"."""
    X, y = data
    first = ooc_svm.train(_write(tmp_path / "a.zarr", X[:600], y[:600], 100), "perf", C=1.0)
    again = _write(tmp_path / "b.zarr", X[:600], y[:600], 257)
    cold = ooc_svm.train(again, "perf", C=1.0, eps=1e-4)
    warm = ooc_svm.train(again, "perf", C=1.0, eps=1e-4, init=first.model)
    assert warm.iterations < cold.iterations
    assert warm.objective == pytest.approx(cold.objective, rel=1e-3)
    # re-ingested with other shards, then appended to: its first rows are the model's
    grown = str(tmp_path / "b.zarr")
    with StoreWriter(grown, append=True) as w:
        for s in csr_to_shards(sp.csr_matrix(X[600:], dtype=np.float32), y[600:], shard_rows=90):
            w.add(s)
        w.commit()
    assert len(open_store(grown).meta.fingerprints) == 2
    ooc_svm.train(grown, "perf", C=1.0, init=first.model)


def test_refusals_name_the_mismatch(tmp_path, data):
    X, y = data
    first = ooc_svm.train(_write(tmp_path / "a.zarr", X[:600], y[:600], 100), "perf", C=1.0)
    # (a store that begins with the model's later shards, byte for byte, is the model's store
    # after `ooc-svm drop`: accepted, tests/store/test_drop.py; these rows are cut elsewhere)
    other = _write(tmp_path / "o.zarr", X[250:850], y[250:850], 100)
    with pytest.raises(SolverError, match=r"store's rows are not the model's 600 rows \(other"):
        ooc_svm.train(other, "perf", init=first.model)
    fewer = _write(tmp_path / "f.zarr", X[:400], y[:400], 100)
    with pytest.raises(SolverError, match="store has 400 rows, the model was trained on 600"):
        ooc_svm.train(fewer, "perf", init=first.model)
    more = _write(tmp_path / "m.zarr", X[50:], y[50:], 100)
    with pytest.raises(
        SolverError, match="does not begin with the model's 600 rows .*at 850 rows, never at 600"
    ):
        ooc_svm.train(more, "perf", init=first.model)
    # a store that keeps no fingerprints (written before them) says what it cannot tell
    old = open_store(_write(tmp_path / "p.zarr", X[:600], y[:600], 257))
    old.meta.fingerprints = []
    with pytest.raises(SolverError, match="re-ingested with other shard sizes"):
        ooc_svm.train(old, "perf", init=first.model)


@pytest.fixture(scope="module")
def models(tmp_path_factory, data):
    X, y = data
    tmp = tmp_path_factory.mktemp("fields")
    _write(tmp / "s.zarr", X[:300], y[:300], 100)
    for solver in ("perf", "smo"):
        r = run_ooc("train", "--solver", solver, "s.zarr", "-o", solver, "-q", cwd=tmp)
        assert r.returncode == 0, r.stderr
    return tmp


@pytest.mark.parametrize("solver", ["perf", "smo"])
@pytest.mark.parametrize(
    "field, value",
    [
        ("C", "abc"),
        ("rows.n_rows", "x"),
        ("rows.n_shards", None),
        ("bias", "b"),
        ("rows", [1]),
        ("loss", 3),
        ("warm_cut.r", "r"),
    ],
)
def test_a_model_field_of_the_wrong_type_is_one_line(models, solver, field, value):
    """They ended in ValueError / TypeError tracebacks (perf and smo)."""
    tmp = models
    bad = tmp / f"bad_{solver}_{field}"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(tmp / solver, bad)
    doc = json.loads((bad / "model.json").read_text())
    *parents, key = ["info", *field.split(".")]
    obj = doc
    for p in parents:
        obj = obj.setdefault(p, {})
    obj[key] = value
    (bad / "model.json").write_text(json.dumps(doc))
    for args in (
        ["train", "--solver", solver, "s.zarr", "-o", "out", "--init", bad.name],
        ["predict", bad.name, "s.zarr", "-o", "p.tsv"],
    ):
        r = run_ooc(*args, cwd=tmp)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"invalid model: info.{field} must be" in lines[0], lines[0]
        assert not (tmp / "out").exists() and not (tmp / "p.tsv").exists()


@pytest.mark.parametrize(
    "field, value, fmt",
    [("liblinear_solver", [1], "liblinear"), ("n_rows", "x", "svmlight")],
)
def test_a_field_export_reads_is_checked_too(models, field, value, fmt):
    """``export`` read ``info.liblinear_solver`` (an imported LIBLINEAR model's solver) and
    ``info.n_rows`` (SVMlight's "number of training documents") unchecked: a TypeError /
    ValueError traceback."""
    bad = models / f"bad_export_{field}"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(models / "perf", bad)
    doc = json.loads((bad / "model.json").read_text())
    doc["info"][field] = value
    (bad / "model.json").write_text(json.dumps(doc))
    r = run_ooc("export", bad.name, "e.txt", "--format", fmt, cwd=models)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"invalid model: info.{field} must be" in lines[0], lines[0]
    assert not (models / "e.txt").exists()


@pytest.mark.parametrize("n_rows", [3, 1000])
def test_warm_alpha_rows_that_disagree_with_the_array_name_the_field(tmp_path, data, n_rows):
    """A model.json whose ``info.warm_alpha.n_rows`` disagrees with dcd's α array was refused
    as "more than model.json allows (a zip bomb?)" (3) or "warm_alpha has shape (3600,);
    expected (1000,)" (1000), naming no field of model.json."""
    from ooc_svm.model.model import ModelError, load_model

    X, y = data
    X, y = np.vstack([X] * 4), np.concatenate([y] * 4)
    res = ooc_svm.train(_write(tmp_path / "a.zarr", X, y, 900), "perf", C=1.0, variant="dcd")
    assert res.model.warm_alpha_ is not None and res.model.warm_alpha_.shape == (3600,)
    res.model.save(str(tmp_path / "m"))
    doc = json.loads((tmp_path / "m" / "model.json").read_text())
    doc["info"]["warm_alpha"]["n_rows"] = n_rows
    (tmp_path / "m" / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=r"info\.warm_alpha\.n_rows") as e:
        load_model(str(tmp_path / "m"))
    assert "\n" not in str(e.value)
