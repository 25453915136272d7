"""Model files of LIBLINEAR, LIBSVM and SVMlight/SVMperf: import, export, and decisions
identical to liblinear-official / libsvm-official (PyPI) on the same test file."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import dataset, ooc_cmd

from ooc_svm.interop import FormatError, detect_format, export_model, import_model
from ooc_svm.model.model import Model, ModelError, load_model

RTOL = 1e-6


def _close(a, b, rtol=RTOL):
    """Decision values equal to ~rtol relative (absolute near 0, scaled by the largest)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(b))))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def _random_csr(n, d, density, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data = np.round(X.data * 4 - 2, 3)
    X.eliminate_zeros()
    return X


def _models():
    rng = np.random.default_rng(3)
    d = 40
    sv = _random_csr(25, d, 0.3, 4)
    coef = rng.normal(size=25)
    out = {
        "linear": Model(
            kind="linear",
            n_features=d,
            classes=[-1.0, 1.0],
            coef_=rng.normal(size=d),
            intercept_=0.37,
        ),
        "linear_12": Model(
            kind="linear",
            n_features=d,
            classes=[1.0, 2.0],
            coef_=rng.normal(size=d),
            intercept_=-1.5,
        ),
        "ovr": Model(
            kind="linear",
            n_features=d,
            classes=[1.0, 2.0, 5.0],
            coef_=rng.normal(size=(3, d)),
            intercept_=rng.normal(size=3),
        ),
    }
    for kern, g, deg, c0 in (
        ("rbf", 0.1, 3, 0.0),
        ("poly", 0.2, 2, 1.5),
        ("sigmoid", 0.05, 3, -0.5),
    ):
        out[kern] = Model(
            kind="kernel",
            n_features=d,
            classes=[-1.0, 1.0],
            support_vectors_=sv,
            dual_coef_=coef,
            intercept_=0.2,
            kernel=kern,
            gamma=g,
            degree=deg,
            coef0=c0,
        )
    k = 4
    out["ovo"] = Model(
        kind="ovo",
        n_features=d,
        classes=[3.0, 1.0, 2.0, 7.0],
        support_vectors_=sv,
        dual_coef_=rng.normal(size=(k - 1, 25)),
        intercept_=rng.normal(size=k * (k - 1) // 2),
        kernel="rbf",
        gamma=0.1,
        info={"n_support": [5, 8, 7, 5]},
    )
    return out


#: which formats can hold which model
_WRITABLE = {
    "linear": ("liblinear", "libsvm", "svmlight"),
    "linear_12": ("liblinear", "libsvm", "svmlight"),
    "ovr": ("liblinear",),
    "rbf": ("libsvm", "svmlight"),
    "poly": ("libsvm", "svmlight"),
    "sigmoid": ("libsvm", "svmlight"),
    "ovo": ("libsvm",),
}


@pytest.mark.parametrize("name", sorted(_WRITABLE))
def test_round_trip_same_decisions(tmp_path, name):
    model = _models()[name]
    X = _random_csr(200, model.n_features, 0.3, 9)
    ref = model.decision_function(X)
    for fmt in ("liblinear", "libsvm", "svmlight"):
        out = tmp_path / f"{name}.{fmt}"
        if fmt not in _WRITABLE[name]:
            with pytest.raises(FormatError):
                export_model(model, fmt, str(out))
            assert not out.exists() and os.listdir(tmp_path) == [], "nothing half-written"
            continue
        export_model(model, fmt, str(out))
        assert detect_format(str(out)) == fmt
        back = import_model(str(out), n_features=model.n_features)
        _close(back.decision_function(X), ref, 1e-12)
        if fmt != "svmlight":  # SVMlight models are ±1
            np.testing.assert_array_equal(back.predict(X), model.predict(X))
        # and through a saved ooc-svm model directory
        back.save(str(tmp_path / "m"))
        _close(load_model(str(tmp_path / "m")).decision_function(X), ref, 1e-12)
        for p in (out, tmp_path / "m"):
            os.system(f"rm -rf '{p}'")


def test_ovo_votes_and_ties_like_libsvm():
    """Voting: pair (i, j) positive -> i; the most votes wins, ties to the smaller index."""
    from ooc_svm.model.ovo import ovo_votes

    # 3 classes, pairs (0,1) (0,2) (1,2): a 3-way cycle 0>1, 2>0, 1>2 -> one vote each -> 0
    dec = np.array([[1.0, -1.0, 1.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])
    v = ovo_votes(3, dec)
    assert v.tolist() == [[1, 1, 1], [0, 1, 2], [0, 1, 2]]
    m = _models()["ovo"]
    X = _random_csr(50, m.n_features, 0.3, 1)
    votes = ovo_votes(4, m.decision_function(X))
    assert np.all(
        m.predict(X) == np.asarray(m.classes)[[int(np.flatnonzero(r == r.max())[0]) for r in votes]]
    )


def test_ovo_model_is_validated_on_load(tmp_path):
    m = _models()["ovo"]
    m.info["n_support"] = [5, 8, 7, 4]  # sums to 24, not 25
    m.save(str(tmp_path / "bad"))
    with pytest.raises(ModelError, match="n_support"):
        load_model(str(tmp_path / "bad"))


# ------------------------------------------------------------------------------------------
# bad input: one-line errors with file and line
# ------------------------------------------------------------------------------------------
_LIBSVM_OK = """svm_type c_svc
kernel_type rbf
gamma 0.5
nr_class 2
total_sv 2
rho 0.1
label 1 -1
nr_sv 1 1
SV
0.5 1:1 3:0.5
-0.5 2:1
"""

_LL_OK = "solver_type L2R_L1LOSS_SVC_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1\n2\n"


@pytest.mark.parametrize(
    "text, line, what",
    [
        (_LIBSVM_OK.replace("0.5 1:1", "0.5 1:x"), 10, "not a number"),
        (_LIBSVM_OK.replace("-0.5 2:1", "-0.5 2:1 1:3"), 11, "increasing"),
        (_LIBSVM_OK.rsplit("-0.5", 1)[0], 10, "ends after line 10; expected support vector 2"),
        (_LIBSVM_OK.replace("kernel_type rbf", "kernel_type precomputed"), None, "precomputed"),
        (_LIBSVM_OK.replace("svm_type c_svc", "svm_type epsilon_svr"), 1, "classifiers"),
        (_LIBSVM_OK.replace("rho 0.1", "rho 0.1 0.2"), None, "rho"),
        (
            "solver_type L2R_L1LOSS_SVC_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n"
            "0.5\nfoo\n",
            8,
            "not a number",
        ),
        (
            "solver_type L2R_L2LOSS_SVR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1\n",
            1,
            "only classifiers",
        ),
        ("SVM-light Version V6.02\n9 # kernel type\n", 2, "unknown kernel type"),
        ("hello world\n", 1, "not the start"),
        # a header value names its own line (it named the line 'w' / 'SV' ending the header)
        (_LL_OK.replace("nr_feature 2", "nr_feature x"), 4, "nr_feature 'x' is not an integer"),
        (_LL_OK.replace("label 1 -1", "label a -1"), 3, "label 'a' is not a number"),
        (_LL_OK.replace("bias -1", "bias b"), 5, "bias 'b' is not a number"),
        (_LIBSVM_OK.replace("gamma 0.5", "gamma g"), 3, "gamma 'g' is not a number"),
        (_LIBSVM_OK.replace("nr_sv 1 1", "nr_sv 1 z"), 8, "nr_sv 'z' is not an integer"),
    ],
)
def test_bad_model_files_one_line_error(tmp_path, text, line, what):
    p = tmp_path / "bad.model"
    p.write_text(text)
    with pytest.raises(FormatError) as ei:
        import_model(str(p))
    msg = str(ei.value)
    assert "\n" not in msg and str(p) in msg and what in msg, msg
    if line is not None:
        assert f"line {line}:" in msg or f"after line {line}" in msg, msg


def test_overlong_line_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    from ooc_svm.interop import _io

    p = tmp_path / "long.model"
    p.write_text(
        _LIBSVM_OK.replace("-0.5 2:1", "-0.5 " + " ".join(f"{i}:1" for i in range(2, 5000)))
    )
    monkeypatch.setattr(_io, "MAX_LINE_BYTES", 1000)
    with pytest.raises(FormatError, match="line 11: line longer than 1,000 bytes"):
        import_model(str(p))


def test_compressed_model_file(tmp_path):
    import gzip

    p = tmp_path / "m.model.gz"
    with gzip.open(p, "wt") as f:
        f.write(_LIBSVM_OK)
    m = import_model(str(p))
    assert m.kind == "kernel" and m.classes == [-1.0, 1.0] and m.intercept_ == -0.1


_SVMLIGHT_RBF = """SVM-light Version V6.02
2 # kernel type
3 # kernel parameter -d
0.5 # kernel parameter -g
1 # kernel parameter -s
1 # kernel parameter -r
empty# kernel parameter -u
HIGHEST # highest feature index
10 # number of training documents
3 # number of support vectors plus 1
0.1 # threshold b, each following line is a SV (starting with alpha*y)
0.5 1:1 3:0.5 #
-0.5 2:1 #
"""


#: model files whose every line parses but that no ooc-svm model can be (load_model refuses)
_UNLOADABLE = {
    "svmlight-index-2^40": (
        _SVMLIGHT_RBF.replace("HIGHEST", str(1 << 40)),
        "highest feature index 1,099,511,627,776",
    ),
    "svmlight-linear-index-2^40": (
        _SVMLIGHT_RBF.replace("HIGHEST", str(1 << 40)).replace("2 # kernel", "0 # kernel"),
        "highest feature index 1,099,511,627,776",
    ),
    "liblinear-nr_feature-2^40": (
        f"solver_type L2R_L1LOSS_SVC_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature {1 << 40}\n"
        "bias -1\nw\n0.5\n",
        "nr_feature 1,099,511,627,776",
    ),
    "libsvm-gamma-negative": (_LIBSVM_OK.replace("gamma 0.5", "gamma -1"), "gamma must not be"),
    "libsvm-degree-10^9": (
        _LIBSVM_OK.replace("kernel_type rbf", "kernel_type polynomial\ndegree 1000000000"),
        "degree must be between",
    ),
}


@pytest.mark.parametrize("case", list(_UNLOADABLE))
def test_import_refuses_a_model_its_loader_would_refuse(tmp_path, case):
    """`ooc-svm import` validates as load_model does: one line, exit 1, nothing written."""
    text, what = _UNLOADABLE[case]
    (tmp_path / "bad.model").write_text(text)
    r = subprocess.run(
        ooc_cmd("import", "bad.model", "m"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    err = r.stderr.strip().splitlines()[-1]  # (a warning about the width may precede it)
    assert err.startswith("ooc-svm: error: bad.model: ") and what in err, err
    assert "nothing was imported" in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.model"]


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------
def test_cli_import_export_info(tmp_path):
    os.chdir(tmp_path)
    (tmp_path / "a.model").write_text(_LIBSVM_OK)
    r = subprocess.run(ooc_cmd("import", "a.model", "m", "--json"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "kernel" and d["format"] == "libsvm" and d["n_support_vectors"] == 2
    r = subprocess.run(ooc_cmd("info", "m", "--json"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for key in (
        "kind",
        "solver",
        "C",
        "n_features",
        "n_support_vectors",
        "objective",
        "training_store",
        "kernel",
        "gamma",
    ):
        assert key in info
    assert info["gamma"] == 0.5 and info["n_features"] == 3
    r = subprocess.run(
        ooc_cmd("export", "m", "--format", "svmlight", "b.model"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert detect_format("b.model") == "svmlight"
    # errors: one line, exit 1, nothing left behind
    r = subprocess.run(
        ooc_cmd("export", "m", "--format", "liblinear", "c.model"), capture_output=True, text=True
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("ooc-svm: error: c.model: a rbf kernel model has no LIBLINEAR")
    assert not os.path.exists("c.model") and not [f for f in os.listdir() if f.startswith(".")]
    r = subprocess.run(ooc_cmd("import", "a.model", "m"), capture_output=True, text=True)
    assert r.returncode == 1 and "--overwrite" in r.stderr
    (tmp_path / "bad.model").write_text(_LIBSVM_OK.replace("1:1", "1:nan"))
    r = subprocess.run(ooc_cmd("import", "bad.model", "m2"), capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "line 10" in r.stderr
    assert not os.path.exists("m2")


# ------------------------------------------------------------------------------------------
# exported files read by the reference tools give the same decisions
# ------------------------------------------------------------------------------------------
def _ll_scores(model_file, X):
    ll = pytest.importorskip("liblinear.liblinearutil")
    m = ll.load_model(str(model_file))
    lab, _, dec = ll.predict(np.zeros(X.shape[0]), X, m, "-q")
    return np.asarray(lab), np.asarray(dec)


def _svm_scores(model_file, X):
    sv = pytest.importorskip("libsvm.svmutil")
    m = sv.svm_load_model(str(model_file))
    lab, _, dec = sv.svm_predict(np.zeros(X.shape[0]), X, m, "-q")
    return np.asarray(lab), np.asarray(dec)


def _ours(model, X):
    d = model.decision_function(X)
    return model.predict(X), d[:, None] if d.ndim == 1 else d


def _exported_and_ours(tmp_path, name: str, fmt: str, seed: int):
    """Export model ``name`` as ``fmt``, score 300 random rows with the real LIBLINEAR /
    LIBSVM ``predict`` and with ooc-svm: ``(their labels, their decision values, our
    labels, our decision values)``."""
    model = _models()[name]
    X = _random_csr(300, model.n_features, 0.3, seed)
    export_model(model, fmt, str(tmp_path / "m"))
    lab, dec = (_ll_scores if fmt == "liblinear" else _svm_scores)(tmp_path / "m", X)
    return (lab, dec, *_ours(model, X))


@pytest.mark.parametrize("name", ["linear", "linear_12", "ovr"])
def test_exported_liblinear_read_by_liblinear(tmp_path, name):
    lab, dec, pred, ours = _exported_and_ours(tmp_path, name, "liblinear", 5)
    np.testing.assert_array_equal(lab, pred)
    _close(dec, ours)


@pytest.mark.parametrize("name", ["linear", "rbf", "poly", "sigmoid", "ovo"])
def test_exported_libsvm_read_by_libsvm(tmp_path, name):
    lab, dec, pred, ours = _exported_and_ours(tmp_path, name, "libsvm", 6)
    np.testing.assert_array_equal(lab, pred)
    _close(dec, ours)


# ------------------------------------------------------------------------------------------
# real data: models trained by the reference tools, imported, scored by ooc-svm
# ------------------------------------------------------------------------------------------
def _read(path, n_features=None):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=n_features, dtype=np.float64)
    return sp.csr_matrix(X), y


@pytest.fixture(scope="module")
def a9a():
    Xtr, ytr = _read(dataset("a9a/a9a"))
    Xte, yte = _read(dataset("a9a/a9a.t.gz"), n_features=123)
    return Xtr, ytr, Xte, yte


@pytest.mark.parametrize("s", [3, 2])
def test_a9a_liblinear_identical_decisions(tmp_path, a9a, s):
    ll = pytest.importorskip("liblinear.liblinearutil")
    Xtr, ytr, Xte, yte = a9a
    ref = ll.train(ytr, Xtr, f"-s {s} -c 1 -B 1 -q")
    ll.save_model(str(tmp_path / "a9a.model"), ref)
    lab, dec = _ll_scores(tmp_path / "a9a.model", Xte)
    model = import_model(str(tmp_path / "a9a.model"))
    assert model.kind == "linear" and model.n_features == 123
    pred, ours = _ours(model, Xte)
    np.testing.assert_array_equal(pred, lab)
    _close(ours, dec)
    # export again: LIBLINEAR reads our file and agrees
    export_model(model, "liblinear", str(tmp_path / "again.model"))
    lab2, dec2 = _ll_scores(tmp_path / "again.model", Xte)
    np.testing.assert_array_equal(lab2, lab)
    _close(dec2, dec, 1e-12)


def test_a9a_libsvm_rbf_identical_decisions_streamed(tmp_path, a9a):
    """RBF C-SVC trained by libsvm-official on 2000 rows of a9a; scored by `ooc-svm predict`
    on the a9a test file ingested into a store, and by Model.decision_function."""
    sv = pytest.importorskip("libsvm.svmutil")
    from ooc_svm.store.ingest import ingest

    Xtr, ytr, Xte, yte = a9a
    ref = sv.svm_train(ytr[:2000], Xtr[:2000], "-t 2 -g 0.05 -c 1 -q")
    sv.svm_save_model(str(tmp_path / "rbf.model"), ref)
    lab, dec = _svm_scores(tmp_path / "rbf.model", Xte)
    os.chdir(tmp_path)
    r = subprocess.run(
        ooc_cmd("import", "rbf.model", "m", "--n-features", "123"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    pred, ours = _ours(load_model("m"), Xte)
    np.testing.assert_array_equal(pred, lab)
    _close(ours, dec)
    ingest(str(dataset("a9a/a9a.t.gz")), "test.zarr", n_features=123)
    r = subprocess.run(
        ooc_cmd("predict", "m", "test.zarr", "-o", "p.tsv"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    out = np.loadtxt("p.tsv", skiprows=1)
    _close(out[:, 1], dec[:, 0])
    np.testing.assert_array_equal(out[:, 2], lab)


@pytest.fixture(scope="module")
def sector():
    Xtr, ytr = _read(dataset("sector/sector.scale.bz2"))
    Xte, yte = _read(dataset("sector/sector.t.scale.bz2"), n_features=Xtr.shape[1])
    return Xtr, ytr, Xte, yte


@pytest.mark.slow
def test_sector_liblinear_one_vs_rest_identical_predictions(tmp_path, sector):
    """LIBLINEAR -s 3 on all of sector (105 classes, one-vs-rest w matrix), imported and
    scored: same labels and decision values as liblinear-official's predict."""
    ll = pytest.importorskip("liblinear.liblinearutil")
    Xtr, ytr, Xte, yte = sector
    ref = ll.train(ytr, Xtr, "-s 3 -c 1 -B 1 -q")
    ll.save_model(str(tmp_path / "sector.model"), ref)
    lab, dec = _ll_scores(tmp_path / "sector.model", Xte)
    model = import_model(str(tmp_path / "sector.model"))
    assert model.kind == "linear" and np.shape(model.coef_) == (105, Xtr.shape[1])
    pred, ours = _ours(model, Xte)
    np.testing.assert_array_equal(pred, lab)
    _close(ours, dec)
    assert np.mean(pred == yte) > 0.8


def test_sector_libsvm_one_vs_one_identical_predictions(tmp_path, sector):
    """One-vs-one LIBSVM model on a subset of sector (the rows of 8 of its 105 classes: 28
    pairwise problems; LIBSVM's Python binding needs ~0.3 s per pair here), imported and
    scored."""
    sv = pytest.importorskip("libsvm.svmutil")
    Xtr, ytr, Xte, yte = sector
    tr = np.flatnonzero(ytr <= 8)
    te = np.concatenate([np.flatnonzero(yte <= 8), np.arange(100)])  # + rows of other classes
    ref = sv.svm_train(ytr[tr], Xtr[tr], "-t 2 -g 0.5 -c 10 -q")
    sv.svm_save_model(str(tmp_path / "sector.model"), ref)
    lab, dec = _svm_scores(tmp_path / "sector.model", Xte[te])
    model = import_model(str(tmp_path / "sector.model"), n_features=Xtr.shape[1])
    assert model.kind == "ovo" and len(model.classes) == 8
    model.save(str(tmp_path / "m"))
    model = load_model(str(tmp_path / "m"))
    pred, ours = _ours(model, Xte[te])
    assert dec.shape == ours.shape
    np.testing.assert_array_equal(pred, lab)
    _close(ours, dec)
    inside = yte[te] <= 8
    assert np.mean(pred[inside] == yte[te][inside]) > 0.5  # a real classifier


# ------------------------------------------------------------------------------------------
# predict / evaluate read SVMlight text directly (plain, gz, bz2, xz, stdin)
# ------------------------------------------------------------------------------------------
def _svmlight_text(n=3000, d=50, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        idx = np.sort(rng.choice(d, size=rng.integers(1, 8), replace=False)) + 1
        lab = "+1" if rng.random() < 0.4 else "-1"
        lines.append(lab + "".join(f" {i}:{rng.normal():.4g}" for i in idx) + "\n")
        if rng.random() < 0.01:
            lines.append("# a comment line\n\n")
    return "".join(lines)


@pytest.mark.parametrize("comp", ["plain", "gz", "bz2", "xz"])
def test_text_store_shards_equal_the_ingested_store(tmp_path, comp):
    import bz2
    import gzip
    import lzma

    from ooc_svm.store import open_store
    from ooc_svm.store.ingest import ingest
    from ooc_svm.store.text_view import TextStore, open_input

    text = _svmlight_text().encode()
    opener = {"plain": open, "gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[comp]
    path = tmp_path / f"d.svm.{comp}"
    with opener(path, "wb") as f:
        f.write(text)
    ingest(str(path), str(tmp_path / "s.zarr"))
    ref = open_store(str(tmp_path / "s.zarr"))
    ts = open_input(str(path), n_features=60, shard_mb=0.01)  # ~10 kB of text per shard
    assert isinstance(ts, TextStore) and ts.n_shards > 3
    assert ts.meta.n_rows == ref.meta.n_rows and ts.meta.nnz == ref.meta.nnz
    assert ts.meta.label_kind == "binary" and ts.meta.n_features == 60
    # shards read out of order (compressed: the stream is reopened to go back)
    order = list(range(ts.n_shards))[::-1] + [1, 0, 2]
    parts = {i: ts.read_shard(i) for i in order}
    X = sp.vstack([parts[i].to_scipy(60) for i in range(ts.n_shards)]).tocsr()
    y = np.concatenate([parts[i].y for i in range(ts.n_shards)])
    Xr = sp.vstack([ref.read_shard(i).to_scipy(60) for i in range(ref.n_shards)]).tocsr()
    yr = np.concatenate([ref.read_shard(i).y for i in range(ref.n_shards)])
    assert (X != Xr).nnz == 0 and np.array_equal(y, yr)
    assert [parts[i].row_start for i in range(ts.n_shards)] == [s.row_start for s in ts.meta.shards]
    assert isinstance(open_input(str(tmp_path / "s.zarr")), type(ref))


def test_predict_and_evaluate_read_text_and_stdin(tmp_path):
    os.chdir(tmp_path)
    text = _svmlight_text(seed=1)
    (tmp_path / "t.svm").write_text(text)
    rng = np.random.default_rng(2)
    Model(kind="linear", n_features=50, classes=[-1.0, 1.0], coef_=rng.normal(size=50),
          intercept_=0.1).save("m")  # fmt: skip
    from ooc_svm.store.ingest import ingest

    ingest("t.svm", "t.zarr")
    outs = {}
    for src, stdin in (("t.zarr", None), ("t.svm", None), ("-", text)):
        r = subprocess.run(ooc_cmd("predict", "m", src, "-o", f"p{len(outs)}.tsv"),
                           input=stdin, capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs[src] = open(f"p{len(outs)}.tsv").read()
        r = subprocess.run(ooc_cmd("evaluate", "m", src, "--json"), input=stdin,
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs[src + "e"] = json.loads(r.stdout)
    assert outs["t.svm"] == outs["t.zarr"] == outs["-"]
    assert outs["t.svme"] == outs["t.zarre"] == outs["-e"]
    assert not [f for f in os.listdir(tempfile_dir()) if f.startswith("ooc-svm-stdin-")]
    (tmp_path / "bad.svm").write_text("+1 1:1\n-1 3:1 2:1\n")
    r = subprocess.run(ooc_cmd("evaluate", "m", "bad.svm"), capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("ooc-svm: error: bad.svm: line 2 ")


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


_SVMPERF_LINEAR = """SVM-light Version V6.20
0 # kernel type
3 # kernel parameter -d
1 # kernel parameter -g
1 # kernel parameter -s
1 # kernel parameter -r
empty# kernel parameter -u
4 # highest feature index
100 # number of training documents
2 # number of support vectors plus 1
0.25 # threshold b, each following line is a SV (starting with alpha*y)
1 1:0.5 2:-1.25 4:2 #
"""

_SVMLIGHT_RBF = """SVM-light Version V6.02
2 # kernel type
3 # kernel parameter -d
0.5 # kernel parameter -g
1 # kernel parameter -s
1 # kernel parameter -r
empty# kernel parameter -u
3 # highest feature index
10 # number of training documents
3 # number of support vectors plus 1
-0.1 # threshold b, each following line is a SV (starting with alpha*y)
0.75 1:1 3:0.5 #
-0.5 2:1 #docid 7
"""


def test_svmperf_linear_and_svmlight_rbf_models(tmp_path):
    """f(x) = sum alpha_i y_i K(x_i, x) - b, as svm_classify / svm_perf_classify compute it."""
    X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0, -1.0], [0.0, 3.0, 0.0, 0.5], [0, 0, 0, 0]]))
    (tmp_path / "perf.model").write_text(_SVMPERF_LINEAR)
    m = import_model(str(tmp_path / "perf.model"))
    assert m.kind == "linear" and m.n_features == 4 and m.classes == [-1.0, 1.0]
    w = np.array([0.5, -1.25, 0.0, 2.0])
    _close(m.decision_function(X), X @ w - 0.25, 1e-15)
    (tmp_path / "rbf.model").write_text(_SVMLIGHT_RBF)
    m = import_model(str(tmp_path / "rbf.model"))
    assert m.kind == "kernel" and m.kernel == "rbf" and m.gamma == 0.5
    Xd = X.toarray()[:, :3]
    sv = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.0]])
    K = np.exp(-0.5 * ((Xd[:, None, :] - sv[None]) ** 2).sum(-1))
    _close(m.decision_function(X[:, :3]), K @ np.array([0.75, -0.5]) + 0.1, 1e-15)
