"""``ooc-svm predict`` / ``ooc-svm evaluate``: streamed scores equal in-memory ones, metrics equal
scikit-learn's, outputs are complete (Parquet and text)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from conftest import build_store
from sklearn import metrics as skm

from ooc_svm.api import train
from ooc_svm.cli import main
from ooc_svm.engine import LocalEngine
from ooc_svm.evaluation.evaluation import evaluate_model
from ooc_svm.evaluation.metrics import kendall_tau, ndcg_at_k, pairwise_accuracy
from ooc_svm.evaluation.scoring import predict_to_file
from ooc_svm.model.model import Model, load_model
from ooc_svm.model.shard_scores import shard_batches


def _data(seed=0, n=500, d=20, labels=(-1.0, 1.0)):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X, dtype=np.float64)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.3 * rng.normal(size=n) > 0.2, labels[1], labels[0])
    return X, y


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pe")
    X, y = _data(0, labels=(1.0, 2.0))
    st = build_store(tmp / "s.zarr", X, y, shard_rows=64)
    res = train(st, "perf", C=1.0)
    mpath = tmp / "model"
    res.model.save(str(mpath))
    return tmp, X, y, st, load_model(str(mpath)), str(mpath)


def _predicted(model, st, out) -> dict:
    """``predict_to_file`` into Parquet file ``out`` (local engine); its columns."""
    with LocalEngine() as eng:
        predict_to_file(model, st, eng, str(out))
    return pq.read_table(str(out)).to_pydict()


@pytest.mark.parametrize("suffix", [".parquet", ".tsv"])
def test_predict_matches_decision_function(binary, suffix):
    tmp, X, y, st, model, _ = binary
    out = str(tmp / f"pred{suffix}")
    with LocalEngine(n_threads=2) as eng:
        info = predict_to_file(model, st, eng, out, max_rows=150)  # several batches
    assert info["rows"] == X.shape[0]
    assert len(shard_batches(st, 150)) > 1
    if suffix == ".parquet":
        t = pq.read_table(out).to_pydict()
        label, score, pred = (np.asarray(t[k]) for k in ("label", "score", "prediction"))
    else:
        with open(out) as f:
            assert f.readline().strip().split("\t") == ["label", "score", "prediction"]
        arr = np.loadtxt(out, skiprows=1, delimiter="\t")
        label, score, pred = arr[:, 0], arr[:, 1], arr[:, 2]
    np.testing.assert_array_equal(label, y)
    np.testing.assert_allclose(score, model.decision_function(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pred, model.predict(X))
    assert not [p for p in tmp.iterdir() if p.name.startswith(".predict-")]


def test_evaluate_binary_matches_sklearn(binary, capsys):
    tmp, X, y, st, model, mpath = binary
    s = model.decision_function(X)
    pred = model.predict(X)
    with LocalEngine() as eng:
        res = evaluate_model(model, st, eng)
    assert res["n"] == X.shape[0]
    assert res["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
    assert res["precision"] == pytest.approx(skm.precision_score(y, pred, pos_label=2.0))
    assert res["recall"] == pytest.approx(skm.recall_score(y, pred, pos_label=2.0))
    assert res["f1"] == pytest.approx(skm.f1_score(y, pred, pos_label=2.0))
    assert res["auc"] == pytest.approx(skm.roc_auc_score(y == 2.0, s), abs=1e-6)
    k = int((y == 2.0).sum())
    assert res["prbep"] == pytest.approx((y[np.argsort(-s)[:k]] == 2.0).mean(), abs=1e-9)
    # the CLI prints the same numbers
    assert main(["evaluate", mpath, st.path, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("n", "accuracy", "auc", "prbep", "precision", "recall", "f1"):
        assert cli[key] == pytest.approx(res[key])


def test_cli_predict(binary, capsys):
    tmp, X, y, st, model, mpath = binary
    out = tmp / "cli.parquet"
    assert main(["predict", mpath, st.path, "-o", str(out), "--batch-rows", "100"]) == 0
    t = pq.read_table(str(out))
    assert t.num_rows == X.shape[0] and set(t.column_names) == {"label", "score", "prediction"}
    assert main(["predict", str(tmp / "nope"), st.path, "-o", str(out)]) == 1
    assert "not an ooc-svm model" in capsys.readouterr().err


def test_ranking_with_qids(tmp_path, make_store):
    rng = np.random.default_rng(3)
    n, d = 240, 8
    X = sp.csr_matrix(
        sp.random(n, d, density=0.7, random_state=3, format="csr", dtype=np.float32),
        dtype=np.float64,
    )
    s_true = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    y = np.digitize(s_true, [-0.3, 0.4]).astype(float)
    qid = np.sort(rng.integers(0, 12, n))
    st = make_store(X, y, qid=qid, shard_rows=50)
    res = train(st, "perf", C=0.01)
    model = res.model
    assert model.info["loss"] == "ordinal"
    s = model.decision_function(X)
    with LocalEngine() as eng:
        ev = evaluate_model(model, st, eng)
        out = str(tmp_path / "r.parquet")
        predict_to_file(model, st, eng, out, max_rows=100)
    assert ev["pairwise_accuracy"] == pytest.approx(pairwise_accuracy(y, s, qid), abs=1e-6)
    assert ev["kendall_tau"] == pytest.approx(kendall_tau(y, s, qid), abs=1e-6)
    assert ev["ndcg@10"] == pytest.approx(ndcg_at_k(y, s, qid, 10), abs=1e-6)
    t = pq.read_table(out).to_pydict()
    assert "prediction" not in t  # ranking models only order rows
    np.testing.assert_array_equal(t["qid"], qid)
    np.testing.assert_allclose(t["score"], s, rtol=1e-12, atol=1e-12)


def test_one_vs_rest_linear_model(tmp_path, make_store):
    rng = np.random.default_rng(4)
    X = sp.csr_matrix(rng.normal(size=(90, 4)).astype(np.float32).astype(np.float64))
    y = rng.integers(0, 3, 90).astype(float) + 1.0
    st = make_store(X, y, shard_rows=64)
    model = Model(
        kind="linear",
        n_features=4,
        classes=[1.0, 2.0, 3.0],
        coef_=rng.normal(size=(3, 4)),
        intercept_=rng.normal(size=3),
    )
    out = str(tmp_path / "o.parquet")
    with LocalEngine() as eng:
        predict_to_file(model, st, eng, out)
        ev = evaluate_model(model, st, eng)
    t = pq.read_table(out).to_pydict()
    S = model.decision_function(X)
    for k in range(3):  # columns named by class label: score_1 .. score_3
        np.testing.assert_allclose(t[f"score_{k + 1}"], S[:, k], rtol=1e-12)
    np.testing.assert_array_equal(t["prediction"], model.predict(X))
    assert ev["accuracy"] == pytest.approx(np.mean(model.predict(X) == y))


def test_kernel_model_streamed(tmp_path, make_store):
    if importlib.util.find_spec("ooc_svm.solvers.dual") is None:
        pytest.skip("kernel scoring (ooc_svm.solvers.dual) is not there yet")
    pytest.importorskip("ooc_svm.kernels.kernel_functions")
    X, y = _data(5, n=120, d=6)
    st = make_store(X, y, shard_rows=64)
    sv = sp.csr_matrix(X[:10])
    model = Model(
        kind="kernel",
        n_features=6,
        classes=[-1.0, 1.0],
        support_vectors_=sv,
        dual_coef_=np.linspace(-1, 1, 10),
        intercept_=0.2,
        kernel="rbf",
        gamma=0.5,
    )
    t = _predicted(model, st, tmp_path / "k.parquet")
    # the kernel expansion may round through float32 (the store's precision)
    np.testing.assert_allclose(t["score"], model.decision_function(X), rtol=1e-6, atol=1e-7)


def test_store_with_more_features_than_model(binary, tmp_path, make_store):
    _, X, y, _, model, _ = binary
    Xw = sp.hstack([X, sp.random(X.shape[0], 5, density=0.5, random_state=1)]).tocsr()
    st = make_store(Xw, y, name="wide.zarr", shard_rows=64)
    t = _predicted(model, st, tmp_path / "w.parquet")
    np.testing.assert_allclose(t["score"], model.decision_function(X), rtol=1e-12, atol=1e-12)


# --- ranking models, class-label columns, CSV -------------------------------


def test_ranking_model_evaluate_says_threshold_not_trained(tmp_path, capsys, make_store):
    X, y = _data(7, labels=(-1.0, 1.0))
    st = make_store(X, y, shard_rows=64)
    res = train(st, "perf", C=1.0, loss="roc")
    mpath = str(tmp_path / "roc")
    res.model.save(mpath)
    with LocalEngine() as eng:
        ev = evaluate_model(res.model, st, eng)
    keys = list(ev)
    assert ev["threshold_trained"] is False
    assert keys[:3] == ["n", "prbep", "auc"]  # threshold-free metrics first
    assert main(["evaluate", mpath, st.path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("note: ") and "threshold is not trained" in out[0]
    assert [ln.split()[0] for ln in out[1:4]] == ["n", "prbep", "auc"]
    # a classifier keeps its order and has no note
    clf = train(st, "perf", C=1.0).model
    with LocalEngine() as eng:
        ev = evaluate_model(clf, st, eng)
    assert "threshold_trained" not in ev and list(ev)[:2] == ["n", "accuracy"]


def test_multiclass_columns_by_label_and_csv(tmp_path, make_store):
    rng = np.random.default_rng(8)
    X = sp.csr_matrix(rng.normal(size=(60, 4)).astype(np.float32).astype(np.float64))
    y = np.array([-1.0, 5.0, 105.0])[rng.integers(0, 3, 60)]
    st = make_store(X, y, shard_rows=64)
    model = Model(
        kind="linear",
        n_features=4,
        classes=[-1.0, 5.0, 105.0],
        coef_=rng.normal(size=(3, 4)),
        intercept_=rng.normal(size=3),
    )
    out = str(tmp_path / "o.csv")
    with LocalEngine() as eng:
        predict_to_file(model, st, eng, out)
    with open(out) as f:
        header = f.readline().strip()
    assert header == "label,score_-1,score_5,score_105,prediction"
    arr = np.loadtxt(out, delimiter=",", skiprows=1)
    np.testing.assert_allclose(arr[:, 1:4], model.decision_function(X), rtol=1e-12)


def test_ovr_kernel_model_streamed_equals_in_memory(tmp_path, make_store):
    """One-vs-rest kernel models: the streamed multi-class expansion gives
    each class the same value as that class's binary expansion, bit for bit."""
    from ooc_svm.model.expansion import score_shard, scoring_broadcast

    X, _ = _data(9, n=150, d=7)
    y = np.array([1.0, 2.0, 3.0])[np.random.default_rng(9).integers(0, 3, 150)]
    st = make_store(X, y, shard_rows=40)
    rng = np.random.default_rng(10)
    coef = rng.normal(size=(3, 12))
    model = Model(
        kind="kernel",
        n_features=7,
        classes=[1.0, 2.0, 3.0],
        support_vectors_=sp.csr_matrix(X[:12]),
        dual_coef_=coef,
        intercept_=rng.normal(size=3),
        kernel="rbf",
        gamma=0.3,
    )
    with LocalEngine(n_threads=2) as eng:
        ev = evaluate_model(model, st, eng)
        out = str(tmp_path / "k.parquet")
        predict_to_file(model, st, eng, out, max_rows=50)
    t = pq.read_table(out).to_pydict()
    S = model.decision_function(X)
    for k, c in enumerate((1, 2, 3)):
        np.testing.assert_allclose(t[f"score_{c}"], S[:, k], rtol=1e-6, atol=1e-7)
        binary = Model(
            kind="kernel",
            n_features=7,
            classes=[0.0, 1.0],
            support_vectors_=sp.csr_matrix(X[:12]),
            dual_coef_=coef[k],
            intercept_=float(model.intercept_[k]),
            kernel="rbf",
            gamma=0.3,
        )
        bb = scoring_broadcast(binary)
        col = np.concatenate([score_shard(st.read_shard(i), bb) for i in range(st.n_shards)])
        np.testing.assert_array_equal(t[f"score_{c}"], col)
    pred = np.asarray(t["prediction"])
    assert ev["accuracy"] == pytest.approx(np.mean(pred == y))


def test_ovo_model_streamed_equals_in_memory(tmp_path, make_store):
    """One-vs-one models (LIBSVM's layout, e.g. imported): predict / evaluate stream them, with
    one score column per class pair and LIBSVM's voting."""
    rng = np.random.default_rng(11)
    X, _ = _data(11, n=130, d=6)
    y = np.array([1.0, 2.0, 3.0])[rng.integers(0, 3, 130)]
    st = make_store(X, y, shard_rows=40)
    model = Model(
        kind="ovo",
        n_features=6,
        classes=[1.0, 2.0, 3.0],
        support_vectors_=sp.csr_matrix(X[:9]),
        dual_coef_=rng.normal(size=(2, 9)),
        intercept_=rng.normal(size=3),
        kernel="rbf",
        gamma=0.4,
        info={"n_support": [3, 4, 2]},
    )
    model.save(str(tmp_path / "ovo"))
    model = load_model(str(tmp_path / "ovo"))
    out = str(tmp_path / "ovo.parquet")
    with LocalEngine(n_threads=2) as eng:
        predict_to_file(model, st, eng, out, max_rows=50)
        ev = evaluate_model(model, st, eng)
    t = pq.read_table(out).to_pydict()
    D = model.decision_function(X)
    for p, name in enumerate(("score_1_2", "score_1_3", "score_2_3")):
        np.testing.assert_allclose(t[name], D[:, p], rtol=1e-6, atol=1e-7)
    sure = np.min(np.abs(D), axis=1) > 1e-5
    np.testing.assert_array_equal(np.asarray(t["prediction"])[sure], model.predict(X)[sure])
    np.testing.assert_array_equal(model.predict(st), np.asarray(t["prediction"]))
    assert ev["accuracy"] == pytest.approx(np.mean(np.asarray(t["prediction"]) == y))
