"""Choosing C in one set of passes: ``train --C 0.01,0.1,1,10``.

perf trains every C together sharing each streamed pass (passes = the slowest C's, not the
sum); the dual solvers go from the smallest C up, warm-started; every per-C model equals the
one trained alone at that C to the solver's tolerance; the best model, a table and a plot
are written.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import build_store, ooc_cmd

import ooc_svm
from ooc_svm.api import train_sweep
from ooc_svm.engine import LocalEngine
from ooc_svm.solvers import SolverError, get_solver
from ooc_svm.solvers.dual import start_point
from ooc_svm.solvers.sweep import parse_c_values, solve_sweep

CS = [0.01, 0.1, 1.0, 10.0]


def _data(n: int, d: int = 30, seed: int = 0):
    """Sparse binary data with label noise (so C matters)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", dtype=np.float64)
    X.data = rng.normal(size=X.nnz)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.8 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A training store (6 shards) and a validation store, written once for the module."""
    base = tmp_path_factory.mktemp("sweep")
    X, y = _data(900)
    train = build_store(base / "train.zarr", X[:600], y[:600], shard_rows=100)
    valid = build_store(base / "valid.zarr", X[600:], y[600:], shard_rows=100)
    return base, train, valid


def test_parse_c_values():
    assert parse_c_values("10,0.1, 1,0.1") == [0.1, 1.0, 10.0]
    assert parse_c_values(2) == [2.0]
    for bad in ("0.1,x", "0,1", "-1", "", "inf"):
        with pytest.raises(SolverError):
            parse_c_values(bad)


def test_perf_sweep_shares_passes_and_matches_alone(stores):
    """passes of the sweep = max over C values (< their sum); every per-C objective within
    eps*C*n of perf trained alone at that C."""
    _, train, valid = stores
    mod = get_solver("perf")
    eng = LocalEngine()
    params = mod.Params.from_mapping({"eps": 1e-3})
    sw = solve_sweep(train, eng, mod, params, CS)
    assert sw.mode == "shared"
    alone = [mod.solve(train, eng, params.replace(C=c)) for c in CS]
    per_c = [r.passes for r in sw.results]
    assert sw.passes == max(per_c)
    assert sw.passes < sum(a.passes for a in alone)
    n = train.meta.n_rows
    for c, r, a in zip(CS, sw.results, alone, strict=True):
        assert r.converged
        assert abs(r.objective - a.objective) <= params.eps * c * n, (c, r.objective, a.objective)
        # each C value needs as many passes as alone (to the variant's cut-grid sharing)
        assert r.passes <= 2 * a.passes + 2
    out = train_sweep(train, "perf", CS, validation=valid, eps=1e-3)
    assert out.passes == sw.passes and out.mode == "shared"
    accs = [r["accuracy"] for r in out.rows]
    assert out.best_C == CS[int(np.argmax(accs))]
    assert out.result.model.info["C"] == out.best_C


@pytest.mark.parametrize(
    "solver,extra",
    [
        ("smo", {}),
        ("active-set", {}),
        ("irwls", {"working_set": 100}),
    ],
)
def test_dual_sweep_warm_starts_match_alone(stores, solver, extra):
    """Ascending C, warm-started from the previous C; the dual objective of every C equals
    the cold run's to the tolerance (relative)."""
    _, train, _ = stores
    mod = get_solver(solver)
    eng = LocalEngine()
    params = mod.Params.from_mapping({"kernel": "linear", "tol": 1e-3, **extra})
    Cs = [0.1, 1.0, 10.0]
    sw = solve_sweep(train, eng, mod, params, Cs)
    assert sw.mode == "warm"
    assert sw.warm_started == [False, True, True]
    alone = [mod.solve(train, eng, params.replace(C=c)) for c in Cs]
    for c, r, a in zip(Cs, sw.results, alone, strict=True):
        assert r.model.info["C"] == c
        assert r.converged
        rel = abs(r.dual_objective - a.dual_objective) / abs(a.dual_objective)
        assert rel <= params.tol, (solver, c, r.dual_objective, a.dual_objective)
    # the engine's count (warm-start passes included) is at least what the solvers report
    assert sw.passes >= sum(r.passes for r in sw.results) - len(Cs)


def test_warm_start_is_feasible_in_the_new_box():
    """α·C/C_old stays in [0, C] with yᵀα = 0 (the heavier class shrunk when it was not):
    the one warm start (warm.Start, dual_start) every route takes, read by the solvers'
    start_point as it is."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    from ooc_svm.model.model import Model
    from ooc_svm.solvers.warm import start_from

    X = sp.csr_matrix(np.eye(4))
    m = Model(
        kind="kernel",
        n_features=4,
        classes=[-1.0, 1.0],
        intercept_=0.5,
        support_vectors_=X,
        dual_coef_=np.array([0.1, -0.1, 0.05, -0.02]),
        support_=np.array([3, 0, 2, 1]),
        kernel="rbf",
        gamma=1.0,
        info={"C": 0.1},
    )
    kernel = {"kernel": "rbf", "gamma": 1.0, "degree": 3, "coef0": 0.0}

    def ready(n_rows):
        meta = SimpleNamespace(n_rows=n_rows, n_features=4, shards=[], hashing=None)
        start = start_from(m, meta)
        return start.dual(SimpleNamespace(meta=meta), None, "smo", kernel, 1.0, 1.0)

    out = ready(4)
    assert out.info["C"] == 1.0
    gids, coef, sv, b = start_point(out, 1.0, 4)
    np.testing.assert_array_equal(gids, [0, 1, 2, 3])
    assert abs(coef.sum()) < 1e-12
    # at the old bound -> exactly at the new one; the heavier (positive) class shrunk
    np.testing.assert_allclose(coef, [-1.0, -0.2, 0.4, 0.8], rtol=1e-12)
    assert coef[0] == -1.0
    assert b == pytest.approx(5.0)
    with pytest.raises(SolverError, match="outside this store"):
        ready(3)  # row 3 is outside a 3-row store
    with pytest.raises(SolverError):
        start_point(out, 1.0, 3)


def test_multiclass_perf_sweep_fuses_classes_and_c_values(tmp_path):
    """Classes x C values in one set of passes: passes = the slowest (class, C) problem's;
    each C's one-vs-rest model as trained alone (objective within eps*C*n per class)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(450, 6))
    y = np.argmax(X[:, :3] + 0.6 * rng.normal(size=(450, 3)), axis=1).astype(float) + 1
    train = build_store(tmp_path / "m.zarr", X[:300], y[:300], shard_rows=100)
    valid = build_store(tmp_path / "mv.zarr", X[300:], y[300:], shard_rows=100)
    assert train.meta.label_kind == "multiclass"
    Cs = [0.1, 1.0]
    out = train_sweep(train, "perf", Cs, validation=valid, eps=1e-3)
    assert out.mode == "shared" and out.metric == "accuracy"
    assert out.passes == max(r["passes"] for r in out.rows)
    total = 0
    for c, r in zip(Cs, out.rows, strict=True):
        alone = ooc_svm.train(train, "perf", C=c, eps=1e-3)
        total += alone.passes
        assert abs(r["objective"] - alone.objective) <= 3 * 1e-3 * c * 300
    assert out.passes < total
    assert [float(c) for c in out.result.model.classes] == [1.0, 2.0, 3.0]


def test_rank_sweep_uses_ndcg(tmp_path):
    """perf --loss ordinal with query ids: one training per C (passes add up), NDCG@10 on
    the validation queries picks the model."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(360, 8))
    qid = np.repeat(np.arange(36), 10)
    y = np.clip(np.round(X[:, 0] + 0.5 * X[:, 1] + 0.7 * rng.normal(size=360)) + 1, 0, 3)
    kw = {"label_kind": "ordinal", "shard_rows": 60}
    train = build_store(tmp_path / "r.zarr", X[:240], y[:240], qid[:240], **kw)
    valid = build_store(tmp_path / "rv.zarr", X[240:], y[240:], qid[240:], **kw)
    out = train_sweep(train, "perf", [0.01, 1.0], validation=valid, loss="ordinal")
    assert out.metric == "ndcg@10" and out.mode == "independent"
    assert out.passes == sum(r["passes"] for r in out.rows)
    vals = [r["ndcg@10"] for r in out.rows]
    assert out.best_C == [0.01, 1.0][int(np.argmax(vals))]


def test_folds_metric_is_the_fold_mean_and_final_model_is_retrained(stores):
    _, train, _ = stores
    out = train_sweep(train, "perf", [0.1, 1.0], folds=3, eps=1e-3, seed=1)
    assert out.folds == 3 and len(out.sweep_passes) == 4  # 3 folds + the final training
    for r in out.rows:
        assert r["accuracy"] == pytest.approx(np.mean(r["folds"]))
    alone = ooc_svm.train(train, "perf", C=out.best_C, eps=1e-3)
    assert out.result.objective == pytest.approx(alone.objective, rel=1e-12)
    assert out.result.model.info["c_sweep"]["folds"] == 3


def test_sweep_refusals(stores):
    _, train, valid = stores
    with pytest.raises(SolverError, match="--validation STORE or --folds K"):
        train_sweep(train, "perf", CS)
    with pytest.raises(SolverError, match="one of them"):
        train_sweep(train, "perf", CS, validation=valid, folds=3)
    with pytest.raises(SolverError, match="ndcg needs query ids"):
        train_sweep(train, "perf", CS, validation=valid, metric="ndcg")


def test_cli_sweep_table_model_and_plot(stores, monkeypatch, capsys):
    """The CLI writes the best model, the table (CSV and JSON) and the plot, from relative
    paths; ``ooc-svm plot`` draws the JSON table."""
    pytest.importorskip("matplotlib")
    base, _, _ = stores
    monkeypatch.chdir(base)
    run = subprocess.run(
        ooc_cmd(
            "train", "train.zarr", "-o", "best", "--C", "0.01,0.1,1", "--validation",
            "valid.zarr", "--sweep-table", "t.csv", "--plot", "sweep.png", "--sweep-metric",
            "auc", "-q",
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(open("t.csv")))
    assert [float(r["C"]) for r in rows] == [0.01, 0.1, 1.0]
    aucs = [float(r["auc"]) for r in rows]
    best = ooc_svm.load_model("best")
    assert best.info["C"] == [0.01, 0.1, 1.0][int(np.argmax(aucs))]
    assert int(max(int(r["passes"]) for r in rows)) == best.info["c_sweep"]["table"][-1]["passes"]
    assert Path("sweep.png").stat().st_size > 1000
    from ooc_svm.cli import main  # the rest in-process (one interpreter start is enough)

    capsys.readouterr()
    assert main(["train", "train.zarr", "-o", "best2", "--C", "0.01,0.1,1", "--validation",
                 "valid.zarr", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert doc["C"] == doc["sweep"]["best_C"]
    assert doc["sweep"]["passes"] == max(r["passes"] for r in doc["sweep"]["table"])
    Path("t.json").write_text(
        json.dumps({"sweep": True, "solver": "perf", "store": "train.zarr", **doc["sweep"]})
    )
    assert main(["plot", "t.json", "-o", "p.png"]) == 0
    assert Path("p.png").stat().st_size > 1000


def test_cli_sweep_errors_are_one_line(stores, monkeypatch, capsys):
    from ooc_svm.cli import main

    base, _, _ = stores
    monkeypatch.chdir(base)
    for args, want in [
        (["--C", "0.1,1"], "--validation STORE or --folds K"),
        (["--C", "1", "--sweep-table", "t.csv"], "belongs to a C sweep"),
        (["--C", "0.1,1", "--folds", "3", "--checkpoint", "ck"], "not supported with a C sweep"),
        # fewer shards than folds: folds of rows; fewer rows than folds cannot be folded
        (["--C", "0.1,1", "--folds", "100000"], "100000 folds need at least 100000 rows"),
    ]:
        assert main(["train", "train.zarr", "-o", "m", *args]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ooc-svm: error: ") and want in err[0], err
        assert not Path("m").exists()
    with pytest.raises(SystemExit):
        main(["train", "train.zarr", "-o", "m", "--C", "0.1,x", "--validation", "valid.zarr"])
    assert "argument --C: invalid float value: '0.1,x'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.cluster
def test_dask_processes_sweep_equals_local(stores):
    """The same sweep on the Dask engine (a LocalCluster of 2 processes) as locally."""
    from ooc_svm.engine import make_engine

    _, train, valid = stores
    local = train_sweep(train, "perf", [0.1, 1.0, 10.0], validation=valid, eps=1e-3)
    with make_engine("processes", n_workers=2, threads_per_worker=1) as eng:
        dist = train_sweep(train, "perf", [0.1, 1.0, 10.0], validation=valid, eps=1e-3, engine=eng)
        dual = train_sweep(
            train, "active-set", [0.1, 1.0], validation=valid, kernel="linear", engine=eng
        )
    assert dist.passes == local.passes
    for a, b in zip(local.rows, dist.rows, strict=True):
        assert a["passes"] == b["passes"]
        assert a["objective"] == pytest.approx(b["objective"], rel=1e-9)
        assert a["accuracy"] == b["accuracy"]
    local_dual = train_sweep(train, "active-set", [0.1, 1.0], validation=valid, kernel="linear")
    for a, b in zip(local_dual.rows, dual.rows, strict=True):
        assert a["objective"] == pytest.approx(b["objective"], rel=1e-9)


@pytest.mark.slow
def test_a9a_perf_sweep_one_set_of_passes(data_path, tmp_path):
    """Full a9a, validated on a9a.t: passes = max over C values; each C's objective within
    eps*C*n of perf alone."""
    import ooc_svm

    a9a = data_path("a9a/a9a")
    a9at = data_path("a9a/a9a.t.gz")
    ooc_svm.ingest(str(a9a), str(tmp_path / "a9a.zarr"), n_features=123)
    ooc_svm.ingest(str(a9at), str(tmp_path / "a9at.zarr"), n_features=123)
    train = ooc_svm.open_store(str(tmp_path / "a9a.zarr"))
    out = train_sweep(train, "perf", CS, validation=str(tmp_path / "a9at.zarr"), bias=1.0)
    mod = get_solver("perf")
    n = train.meta.n_rows
    total = 0
    for c, r in zip(CS, out.rows, strict=True):
        a = mod.solve(train, LocalEngine(), mod.Params.from_mapping({"C": c, "bias": 1.0}))
        total += a.passes
        assert abs(r["objective"] - a.objective) <= a.model.info["eps"] * c * n
    assert out.passes == max(r["passes"] for r in out.rows) < total
    assert 0.84 < max(r["accuracy"] for r in out.rows) < 0.86


@pytest.mark.slow
def test_readme_choosing_c_runs_as_written(data_path, tmp_path):
    """The README's "Choosing C" block, line by line, in an empty directory (the dataset
    directory standing in for ``../shared/data``); the table names the model written."""
    import os
    import re
    import shlex
    import sys

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("## Choosing C")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, start)
    assert m is not None
    data = Path(data_path("a9a/a9a")).parent.parent
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in m.group(1).splitlines():
        cmd = line.split("  #")[0].strip()
        if not cmd:
            continue
        cmd = cmd.replace("../shared/data", shlex.quote(str(data)))
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["passes"] == max(r["passes"] for r in doc["table"])
    assert ooc_svm.load_model(str(tmp_path / "a9a-best")).info["C"] == doc["best_C"]
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert len(rows) == 4 and all(0.85 < float(r["auc"]) < 0.95 for r in rows[1:])
    assert (tmp_path / "sweep.png").stat().st_size > 1000


def test_irwls_kernel_sweep_reaches_the_cold_optimum(tmp_path):
    """irwls with a kernel, warm-started: every C of the sweep has the cold run's dual
    objective and a feasible yᵀβ = 0. The warm start from C=0.01's scaled α ended "converged"
    at C=1 with yᵀβ = −2.85 and a dual above the optimum (infeasible) on these 2,000 a9a rows
    (a working set's S₁ emptied and its vertex, which broke yᵀβ = λ, was taken as feasible)."""
    from conftest import dataset
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(dataset("a9a/a9a")), n_features=123)
    X, y = X[:2000], y[:2000]
    train = build_store(tmp_path / "a.zarr", X, y, shard_rows=2000)
    mod = get_solver("irwls")
    eng = LocalEngine()
    params = mod.Params.from_mapping({"kernel": "rbf", "gamma": 0.05})
    Cs = [0.01, 1.0]
    sw = solve_sweep(train, eng, mod, params, Cs)
    assert sw.warm_started == [False, True]
    for c, r in zip(Cs, sw.results, strict=True):
        alone = mod.solve(train, eng, params.replace(C=c))
        assert abs(r.summary["sum_y_alpha"]) <= 1e-8, (c, r.summary["sum_y_alpha"])
        rel = abs(r.dual_objective - alone.dual_objective) / abs(alone.dual_objective)
        assert rel <= params.tol, (c, r.dual_objective, alone.dual_objective)
