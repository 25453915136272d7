"""What a newcomer tries first, with LIBLINEAR / LIBSVM / scikit-learn habits: each either
works or ends with one line that says what to type instead."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

from ooc_svm.model.model import Model

ROOT = Path(__file__).resolve().parents[2]


def _cli(monkeypatch, capsys, cwd, *args: str) -> tuple[int, str, str]:
    """``ooc-svm ARGS`` in this process (run in ``cwd``): (status, stdout, stderr)."""
    from ooc_svm.cli import main

    monkeypatch.chdir(cwd)
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:  # argparse's errors
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if "error" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def small(tmp_path, make_store):
    """A one-shard binary store ``s.zarr`` (20 features) and a linear model ``m`` on it."""
    X, y = make_classification(n_samples=200, n_features=20, random_state=0)
    make_store(sp.csr_matrix(X.astype(np.float32)), y, shard_rows=1000)
    rng = np.random.default_rng(0)
    Model(kind="linear", n_features=20, classes=[0.0, 1.0], coef_=rng.normal(size=20)).save(
        str(tmp_path / "m")
    )
    return tmp_path


def test_folds_on_a_one_shard_store_use_row_folds(small):
    """``--folds 5`` on a store ingested with defaults (one shard) was refused ("needs at
    least 5 shards"); it now uses seeded folds of rows, as --probability does: every row is
    held out exactly once."""
    from ooc_svm.api import train_sweep
    from ooc_svm.evaluation.cross_validation import _row_fold_nnz
    from ooc_svm.store import open_store
    from ooc_svm.store.views import RowFoldView

    st = open_store(str(small / "s.zarr"))
    out = train_sweep(st, "perf", [0.1, 1.0], folds=5)
    assert out.folds == 5 and len(out.rows) == 2 and all(len(r["folds"]) == 5 for r in out.rows)
    nnz = _row_fold_nnz(st, 5, 0)
    held = [RowFoldView(st, 5, 0, f, nnz[:, f], held=True) for f in range(5)]
    kept = [RowFoldView(st, 5, 0, f, nnz[:, f]) for f in range(5)]
    assert sum(v.meta.n_rows for v in held) == 200
    for h, k in zip(held, kept, strict=True):
        assert h.meta.n_rows + k.meta.n_rows == 200
        a, b = h.read_shard(0), k.read_shard(0)
        assert a.n_rows == h.meta.n_rows and a.nnz == h.meta.nnz and b.nnz == k.meta.nnz
    ys = np.sort(np.concatenate([v.read_shard(0).y for v in held]))
    np.testing.assert_array_equal(ys, np.sort(st.read_shard(0).y))


def test_a_much_narrower_store_is_refused(small, make_store, monkeypatch, capsys):
    """A model scored on a store from another, narrower feature space passed silently (w8a's
    300-feature model on a9a's 123: exit 0, AUC 0.34)."""
    X, y = make_classification(n_samples=50, n_features=8, random_state=1)
    make_store(sp.csr_matrix(X.astype(np.float32)), y, name="n.zarr")
    rc, _, err = _cli(monkeypatch, capsys, small, "evaluate", "m", "n.zarr")
    line = _error_line(err)
    assert rc == 1 and "n.zarr has 8 features, m was trained on 20 (60% fewer)" in line
    assert "--allow-narrower" in line
    rc, out, _ = _cli(monkeypatch, capsys, small, "evaluate", "m", "n.zarr", "--allow-narrower")
    assert rc == 0 and "accuracy" in out
    # a test split that never uses the last few features stays fine (a9a.t vs a9a)
    make_store(sp.csr_matrix(X.astype(np.float32)), y, name="t.zarr", n_features=19)
    assert _cli(monkeypatch, capsys, small, "evaluate", "m", "t.zarr")[0] == 0


def test_kernel_without_solver_trains_a_kernel_svm(small, monkeypatch, capsys):
    """``--kernel rbf --gamma 0.1`` with the default solver took a second try."""
    from ooc_svm.model.model import load_model

    rc, _, err = _cli(
        monkeypatch, capsys, small, "train", "s.zarr", "-o", "k", "--kernel", "rbf",
        "--gamma", "0.1",
    )  # fmt: skip
    assert rc == 0, err
    m = load_model(str(small / "k"))
    assert m.kind == "kernel" and m.kernel == "rbf" and m.info["solver"] == "smo"


def test_estimators_give_scikit_learn_probabilities():
    from ooc_svm.estimators import SVC, LinearSVC

    X, y = make_classification(n_samples=150, n_features=6, random_state=0)
    est = LinearSVC(probability=True)
    assert est.get_params()["probability"] is True
    p = est.fit(X, y).predict_proba(X[:7])
    assert p.shape == (7, 2) and np.allclose(p.sum(axis=1), 1.0)
    # the column of classes_[1] grows with the decision function
    d = est.decision_function(X[:7])
    assert np.all(np.diff(p[np.argsort(d), 1]) >= -1e-12)
    assert not hasattr(LinearSVC(), "predict_proba")  # as scikit-learn's SVC
    assert "probability" in SVC().get_params()


@pytest.mark.parametrize(
    "args, want",
    [
        (["train", "s.zarr", "-o", "x", "--c", "4"], "--c: did you mean --C?"),
        (["train", "s.zarr", "-o", "x", "--c=4"], "--c: did you mean --C?"),
        (["train", "s.zarr", "-o", "x", "--config", "perff"], "shipped names (active-set, "),
        (["predict", "s.zarr", "m", "-o", "p.txt"], "m is a model: give the model first"),
        (["evaluate", "s.zarr", "m"], "(ooc-svm evaluate MODEL DATA;"),
    ],
)
def test_habits_get_one_line_hints(small, monkeypatch, capsys, args, want):
    rc, _, err = _cli(monkeypatch, capsys, small, *args)
    assert rc in (1, 2) and want in _error_line(err)
    assert not (small / "x").exists() and not (small / "p.txt").exists()


def test_s_hint_names_help_once(small, monkeypatch, capsys):
    _, _, err = _cli(monkeypatch, capsys, small, "train", "s.zarr", "-o", "x", "-s", "2")
    line = _error_line(err)
    assert line.count("see ooc-svm train --help") == 1, line


def test_verify_counts_in_the_singular(small, monkeypatch, capsys):
    rc, out, _ = _cli(monkeypatch, capsys, small, "verify", "s.zarr")
    assert rc == 0 and ": 1 shard, 200 rows, all checksums OK" in out


def test_export_keeps_an_existing_file(small, monkeypatch, capsys):
    (small / "x.model").write_text("keep me\n")
    rc, _, err = _cli(monkeypatch, capsys, small, "export", "m", "--format", "liblinear", "x.model")
    assert rc == 1 and "x.model: exists; pass --overwrite" in _error_line(err)
    assert (small / "x.model").read_text() == "keep me\n"
    args = ["export", "m", "--format", "liblinear", "x.model", "--overwrite"]
    assert _cli(monkeypatch, capsys, small, *args)[0] == 0
    assert (small / "x.model").read_text().startswith("solver_type")


def test_evaluate_prints_the_metrics_before_a_failed_plot(small, monkeypatch, capsys):
    """An unwritable --plot path gave a raw errno and no metrics."""
    pytest.importorskip("matplotlib")
    (small / "f").write_text("a file, not a directory\n")
    rc, out, err = _cli(monkeypatch, capsys, small, "evaluate", "m", "s.zarr", "--plot", "f/r.png")
    assert rc == 1 and "accuracy" in out and "auc" in out
    assert _error_line(err).startswith("ooc-svm: error: --plot f/r.png: cannot write the figure")


def test_readme_dask_block_binds_loopback_only():
    """The README's Dask commands left the dashboard and the workers on 0.0.0.0."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## On a Dask cluster", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    dask = [ln for ln in block.splitlines() if ln.startswith("dask ")]
    assert len(dask) == 2
    for ln in dask:
        assert re.search(r"--host 127\.0\.0\.1\b", ln), ln
        assert re.search(r"--dashboard-address 127\.0\.0\.1:\d+", ln), ln


def _svmlight(path: Path, n: int = 300) -> str:
    X, y = make_classification(n_samples=n, n_features=8, random_state=1)
    lines = [
        f"{2 * int(t) - 1} " + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
        for row, t in zip(X, y, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path.read_text()


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_train_takes_text_as_liblinear_does(tmp_path, source):
    """`train data.svm` and `train -` were refused ("not an ooc-svm store") although predict
    and evaluate take text: the text is trained as its ingested store is, and the temporary
    store is gone afterwards."""
    import json
    import subprocess

    from conftest import ooc_cmd, run_ooc

    text = _svmlight(tmp_path / "d.svm")
    assert run_ooc("ingest", "d.svm", "d.zarr", "-q", cwd=tmp_path).returncode == 0
    ref = run_ooc("train", "d.zarr", "-o", "ref", "--json", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    arg = "d.svm" if source == "file" else "-"
    r = subprocess.run(
        ooc_cmd("train", arg, "-o", "m", "--json"),
        cwd=tmp_path,
        input=text if source == "stdin" else None,
        stdin=subprocess.DEVNULL if source == "file" else None,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    got, want = json.loads(r.stdout), json.loads(ref.stdout)
    assert got["store"] == arg and got["n_rows"] == 300
    assert got["objective"] == want["objective"] and got["iterations"] == want["iterations"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["d.svm", "d.zarr", "m", "ref"], left  # no temporary store left
    ev = run_ooc("evaluate", "m", "d.svm", "--json", cwd=tmp_path)
    assert ev.returncode == 0 and json.loads(ev.stdout)["n_rows"] == 300, ev.stderr
