"""``train --probability`` / ``predict --probability`` end to end.

The CLI runs as a user would (``python -m ooc_svm``, relative paths in a temporary working
directory) on a small store made of the first 4,000 rows of a9a (8 shards of 500 rows), and
the sigmoid stored in the model is checked against
:func:`ooc_svm.evaluation.cross_validation.fit_platt` on the same shard folds called directly.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ooc_svm.api import train
from ooc_svm.evaluation.cross_validation import cross_val_decision_values, fit_platt

ROWS, SHARD_ROWS, FOLDS, SEED = 4000, 500, 4, 3


def _cli(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def a9a_small(tmp_path, data_path):
    from sklearn.datasets import load_svmlight_file

    from ooc_svm.store import csr_to_shards, write_store

    X, y = load_svmlight_file(str(data_path("a9a/a9a")), n_features=123)
    X, y = X[:ROWS].astype(np.float32), y[:ROWS]
    write_store(str(tmp_path / "a9a.zarr"), csr_to_shards(X, y, shard_rows=SHARD_ROWS))
    return tmp_path


def _read(path):
    import pyarrow.parquet as pq

    return pq.read_table(str(path)).to_pydict()


def test_train_predict_probability_round_trip(a9a_small):
    cwd = a9a_small
    r = _cli(
        cwd,
        "train",
        "--solver",
        "perf",
        "a9a.zarr",
        "-o",
        "m",
        "--C",
        "1",
        "--probability",
        "--probability-folds",
        str(FOLDS),
        "--seed",
        str(SEED),
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((cwd / "m" / "model.json").read_text())
    p = meta["probability"]
    assert p["method"] == "platt" and len(p["probA"]) == 1 and p["probA"][0] < 0
    assert meta["info"]["probability"]["folds"] == FOLDS
    assert meta["info"]["probability"]["seed"] == SEED

    # the stored sigmoid is fit_platt on the same shard folds, called directly
    cv = cross_val_decision_values(
        str(cwd / "a9a.zarr"), FOLDS, SEED, train=train, solver="perf", C=1.0
    )
    A, B = fit_platt(cv)
    assert p["probA"][0] == pytest.approx(A[0], rel=1e-9, abs=1e-12)
    assert p["probB"][0] == pytest.approx(B[0], rel=1e-9, abs=1e-12)

    r = _cli(cwd, "predict", "m", "a9a.zarr", "-o", "p.parquet", "--probability")
    assert r.returncode == 0, r.stderr
    out = _read(cwd / "p.parquet")
    s, prob = np.array(out["score"]), np.array(out["probability"])
    assert prob.shape == (ROWS,)
    assert np.all((prob >= 0) & (prob <= 1))
    order = np.argsort(s, kind="stable")
    assert np.all(np.diff(prob[order]) >= 0), "P(y=1|x) must rise with the decision value"
    assert prob[order[0]] < 0.2 and prob[order[-1]] > 0.8
    # the probability is the stored sigmoid of the score (LIBSVM's clipping to [1e-7, 1-1e-7])
    want = np.clip(1 / (1 + np.exp(p["probA"][0] * s + p["probB"][0])), 1e-7, 1 - 1e-7)
    np.testing.assert_allclose(prob, want, rtol=1e-12, atol=1e-15)
    # and Model.predict_proba gives the same, from a matrix and from the store
    from ooc_svm.model.model import load_model

    model = load_model(str(cwd / "m"))
    np.testing.assert_allclose(model.predict_proba(str(cwd / "a9a.zarr")), prob, rtol=1e-12)
    # calibration on the training rows is sane (a9a: Brier ~0.11 for a linear SVM)
    y = np.array(out["label"]) > 0
    assert np.mean((prob - y) ** 2) < 0.15

    # text output: the same column
    r = _cli(cwd, "predict", "m", "a9a.zarr", "-o", "p.txt", "--probability")
    assert r.returncode == 0, r.stderr
    header = (cwd / "p.txt").read_text().splitlines()[0].split("\t")
    assert header == ["label", "score", "prediction", "probability"]


def test_predict_probability_refused_without_sigmoid(a9a_small):
    cwd = a9a_small
    r = _cli(cwd, "train", "--solver", "perf", "a9a.zarr", "-o", "m", "--C", "1")
    assert r.returncode == 0, r.stderr
    assert "probability" not in json.loads((cwd / "m" / "model.json").read_text())
    r = _cli(cwd, "predict", "m", "a9a.zarr", "-o", "p.parquet", "--probability")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ooc-svm: error: ") and "--probability" in lines[0]
    assert "no probability sigmoid" in lines[0]
    assert not (cwd / "p.parquet").exists()
    assert sorted(p.name for p in cwd.iterdir()) == ["a9a.zarr", "m"]
    # without --probability the same model predicts as before
    r = _cli(cwd, "predict", "m", "a9a.zarr", "-o", "p.parquet")
    assert r.returncode == 0, r.stderr
    assert "probability" not in _read(cwd / "p.parquet")


def test_train_probability_refusals(a9a_small):
    cwd = a9a_small
    # more folds than shards: folds of rows within shards (see the test below); more folds
    # than half the rows cannot be
    r = _cli(cwd, "train", "a9a.zarr", "-o", "m", "--probability", "--probability-folds", "2001")
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("ooc-svm: error: ") and line.endswith(
        "a9a.zarr: --probability-folds 2001 needs at least 4002 rows, the store has 4000; use "
        "fewer folds"
    )
    assert not (cwd / "m").exists()
    r = _cli(cwd, "train", "a9a.zarr", "-o", "m", "--probability", "--probability-folds", "1")
    assert r.returncode == 1 and "--probability-folds must be an integer >= 2" in r.stderr
    assert not (cwd / "m").exists()


def test_probability_model_field_validated_on_load(tmp_path):
    from ooc_svm.model.model import Model, ModelError, load_model

    m = Model(kind="linear", n_features=3, classes=[-1.0, 1.0], coef_=np.ones(3), intercept_=0.5)
    m.save(str(tmp_path / "old"))
    old = load_model(str(tmp_path / "old"))  # a model without a sigmoid loads unchanged
    assert old.probA_ is None and old.probability_method is None
    with pytest.raises(ModelError, match="no probability sigmoid.*--probability"):
        old.predict_proba(np.eye(3))
    m.set_probability([-2.0], [0.25])
    m.save(str(tmp_path / "new"))
    new = load_model(str(tmp_path / "new"))
    assert new.probability_method == "platt"
    assert new.probA_.tolist() == [-2.0] and new.probB_.tolist() == [0.25]
    np.testing.assert_allclose(
        new.predict_proba(np.eye(3)), 1 / (1 + np.exp(-2.0 * 1.5 + 0.25)), rtol=1e-12
    )
    path = tmp_path / "new" / "model.json"
    good = json.loads(path.read_text())
    for bad, msg in [
        ({"method": "platt", "probA": [-2.0, 1.0], "probB": [0.25]}, "probA has 2 values"),
        ({"method": "platt", "probA": [-2.0], "probB": ["x"]}, "probB must be a list"),
        ({"method": "platt", "probA": [-2.0], "probB": [float("nan")]}, "non-finite"),
        ({"method": "ovr-normalised", "probA": [-2.0], "probB": [0.0]}, "does not fit"),
        ({"method": "magic", "probA": [-2.0], "probB": [0.0]}, "not one of"),
        ([1, 2], "must be a JSON object"),
    ]:
        path.write_text(json.dumps({**good, "probability": bad}))
        with pytest.raises(ModelError, match=msg):
            load_model(str(tmp_path / "new"))


def test_multiclass_probability_columns(tmp_path):
    """One-vs-rest on a 3-class store: one probability column per class, rows sum to 1."""
    import scipy.sparse as sp

    from ooc_svm.store import csr_to_shards, write_store

    rng = np.random.default_rng(5)
    centers = rng.normal(scale=2.0, size=(3, 4))
    lab = rng.integers(0, 3, size=1200)
    X = sp.csr_matrix(centers[lab] + rng.normal(size=(1200, 4)), dtype=np.float32)
    y = (lab + 1).astype(np.float64)
    write_store(
        str(tmp_path / "m.zarr"), csr_to_shards(X, y, shard_rows=150), label_kind="multiclass"
    )
    r = _cli(tmp_path, "train", "m.zarr", "-o", "m", "--probability", "--probability-folds", "3")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["probability"]["method"] == "ovr-normalised"
    assert len(meta["probability"]["probA"]) == 3
    r = _cli(tmp_path, "predict", "m", "m.zarr", "-o", "p.parquet", "--probability")
    assert r.returncode == 0, r.stderr
    out = _read(tmp_path / "p.parquet")
    P = np.column_stack([out[f"probability_{c}"] for c in (1, 2, 3)])
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all((P >= 0) & (P <= 1))
    assert np.mean(np.argmax(P, axis=1) == lab) > 0.8


@pytest.mark.parametrize("k", [2, 3])
def test_imported_libsvm_probabilities_match_svm_predict_b1(tmp_path, k):
    """A LIBSVM model trained with -b 1, imported (its probA/probB kept): `predict
    --probability` gives svm_predict -b 1's probabilities (binary: the sigmoid; 3 classes: the
    one-vs-one pairwise coupling) to 1e-6."""
    svmutil = pytest.importorskip("libsvm.svmutil", reason="libsvm-official not installed")
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(40 + k)
    centers = rng.normal(scale=1.5, size=(k, 3))
    lab = rng.integers(0, k, size=600)
    X = centers[lab] + rng.normal(size=(600, 3))
    y = (lab + 1).astype(np.float64) if k > 2 else np.where(lab == 1, 1.0, -1.0)
    xs = [{j + 1: float(v) for j, v in enumerate(row)} for row in X[:400]]
    model = svmutil.svm_train(list(y[:400]), xs, "-c 1 -g 0.5 -b 1 -q")
    svmutil.svm_save_model(str(tmp_path / "libsvm.model"), model)
    test = [{j + 1: float(v) for j, v in enumerate(row)} for row in X[400:]]
    _, _, ref = svmutil.svm_predict(list(y[400:]), test, model, "-b 1 -q")
    ref = np.array(ref)
    labels = model.get_labels()
    dump_svmlight_file(sp.csr_matrix(X[400:]), y[400:], str(tmp_path / "t.svm"), zero_based=False)
    r = _cli(tmp_path, "import", "libsvm.model", "m", "--n-features", "3")
    assert r.returncode == 0, r.stderr
    r = _cli(tmp_path, "predict", "m", "t.svm", "-o", "p.parquet", "--probability")
    assert r.returncode == 0, r.stderr
    out = _read(tmp_path / "p.parquet")
    if k == 2:
        ours = np.array(out["probability"])  # P(classes[1]) = P(LIBSVM's label[0])
        np.testing.assert_allclose(ours, ref[:, 0], rtol=0, atol=1e-6)
    else:
        ours = np.column_stack([out[f"probability_{int(c)}"] for c in labels])
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


def test_probability_on_a_one_shard_store_uses_row_folds(tmp_path, data_path):
    """a9a ingests as one shard: --probability said "needs at least 5 shards". Folds are now
    rows within shards (seeded: the same sigmoid twice), shown as fold k/5, as LIBSVM -b 1."""
    lines = data_path("a9a/a9a").read_text().splitlines()[:1500]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    assert _cli(tmp_path, "ingest", "a.txt", "a.zarr").returncode == 0
    probs = []
    for m in ("m1", "m2"):
        r = _cli(tmp_path, "train", "a.zarr", "-o", m, "--probability")
        assert r.returncode == 0, r.stderr[-2000:]
        for k in range(1, 6):
            assert f"probability: fold {k}/5: training on 1200 rows" in r.stderr, r.stderr
        assert "(+ 5 probability folds," in r.stdout, r.stdout
        meta = json.loads((tmp_path / m / "model.json").read_text())
        p = meta["probability"]
        assert p["method"] == "platt" and p["probA"][0] < 0
        probs.append((p["probA"], p["probB"]))
    assert probs[0] == probs[1]
    r = _cli(tmp_path, "predict", "m1", "a.zarr", "-o", "p.txt", "--probability")
    assert r.returncode == 0, r.stderr
