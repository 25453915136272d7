"""``ooc-svm drop``: the oldest shards leave a store atomically, and models trained before
the drop still warm-start (a time window over appended rows)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import ooc_cmd, run_ooc

from ooc_svm.api import train
from ooc_svm.store import StoreError, csr_to_shards, open_store, write_store
from ooc_svm.store.drop import drop_oldest


def _data(seed=1, n=1500, d=60):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, random_state=rng, format="csr", dtype=np.float64)
    w = rng.standard_normal(d)
    y = np.where(X @ w + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _write(path, X, y, shard_rows=500):
    Xs = sp.csr_matrix(X, dtype=np.float32)
    write_store(str(path), csr_to_shards(Xs, y, shard_rows=shard_rows), n_features=X.shape[1])
    return str(path)


def test_drop_renumbers_the_kept_shards_and_trains_as_a_store_of_those_rows(tmp_path):
    """After dropping the oldest shard, the store is the store of the other rows: the same
    shards (bytes, checksums), rows from 0, `verify` clean after `--repair`, and the same
    model bits as a store ingested from those rows alone."""
    X, y = _data()
    path = _write(tmp_path / "s.zarr", X, y)
    alone = _write(tmp_path / "alone.zarr", X[500:], y[500:])
    before = open_store(path).meta
    r = run_ooc("drop", "s.zarr", "--shards", "1", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["shards_dropped"] == 1 and out["rows_dropped"] == 500 and out["rows_left"] == 1000
    assert out["files_left"] == 1 and out["files_removed"] == 0
    meta = open_store(path).meta
    assert meta.n_rows == 1000 and [s.row_start for s in meta.shards] == [0, 500]
    assert [s.checksum for s in meta.shards] == [s.checksum for s in before.shards[1:]]
    assert meta.uuid != before.uuid and meta.sources[-1] == "drop 1 oldest shards (500 rows)"
    assert meta.nnz == open_store(alone).meta.nnz
    a = train(path, "perf", variant="dcd", C=0.5)
    b = train(alone, "perf", variant="dcd", C=0.5)
    assert np.array_equal(a.model.coef_, b.model.coef_) and a.objective == b.objective
    assert run_ooc("verify", "s.zarr", "--repair", cwd=tmp_path).returncode == 0
    assert run_ooc("verify", "s.zarr", cwd=tmp_path).returncode == 0


def test_an_append_after_a_drop_writes_new_shards_beside_the_kept_ones(tmp_path):
    """The next shard is named after the last one, not by the table's length: an append
    after a drop overwrote the kept shard that had the table's new length as its number
    (`verify` then called it damaged)."""
    from ooc_svm.store import StoreWriter

    X, y = _data(n=1500)
    path = _write(tmp_path / "s.zarr", X[:1000], y[:1000])
    drop_oldest(path, shards=1)
    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(sp.csr_matrix(X[1000:], dtype=np.float32), y[1000:], shard_rows=500):
            w.add(s)
        w.commit()
    meta = open_store(path).meta
    assert [s.name for s in meta.shards] == ["s0000001", "s0000002"]
    assert run_ooc("verify", "s.zarr", cwd=tmp_path).returncode == 0
    a = train(path, "perf", variant="dcd", C=0.5)
    b = train(_write(tmp_path / "alone.zarr", X[500:], y[500:]), "perf", variant="dcd", C=0.5)
    assert np.array_equal(a.model.coef_, b.model.coef_)


def test_keep_rows_purge_and_refusals(tmp_path):
    X, y = _data(n=2000)
    path = _write(tmp_path / "s.zarr", X, y)
    res = drop_oldest(path, keep_rows=1200, purge=True)  # whole shards: 1,500 rows stay
    assert (res.shards_dropped, res.rows_left, res.files_removed, res.files_left) == (1, 1500, 1, 0)
    assert not (tmp_path / "s.zarr" / "s0000000").exists()
    assert drop_oldest(path, keep_rows=1500).shards_dropped == 0
    with pytest.raises(StoreError, match="would leave no rows"):
        drop_oldest(path, shards=3)
    with pytest.raises(StoreError, match="--shards K"):
        drop_oldest(path)
    r = run_ooc("drop", "nowhere.zarr", "--shards", "1", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no store there" in r.stderr


READER = r"""
import sys, time
from ooc_svm.store import open_store
path, ready, done = sys.argv[1], sys.argv[2], sys.argv[3]
seen = []
t0 = time.monotonic()
while time.monotonic() - t0 < 600:
    st = open_store(path)
    rows = 0
    for i in range(st.n_shards):
        sh = st.read_shard(i, verify=True)
        assert sh.row_start == st.meta.shards[i].row_start, "row numbers of another table"
        rows += sh.n_rows
    assert rows == st.meta.n_rows, f"{rows} rows read, the table says {st.meta.n_rows}"
    seen.append(rows)
    open(ready, "w").close()
    if rows != seen[0]:
        break
print(" ".join(map(str, seen)))
"""


def test_a_reader_sees_the_store_before_or_after_the_drop_never_a_mix(tmp_path):
    """A second process reads every shard (checksums verified) in a loop while the oldest
    shards are dropped: every pass it makes is a whole store, the old one then the new."""
    X, y = _data(n=3000)
    path = _write(tmp_path / "s.zarr", X, y, shard_rows=250)
    ready, done = tmp_path / "ready", tmp_path / "done"
    p = subprocess.Popen(
        [sys.executable, "-c", READER, path, str(ready), str(done)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        t0 = time.monotonic()
        while not ready.exists() and p.poll() is None and time.monotonic() - t0 < 300:
            time.sleep(0.05)
        drop_oldest(path, shards=4)
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    seen = [int(v) for v in out.split()]
    assert seen[0] == 3000 and seen[-1] == 2000 and set(seen) == {3000, 2000}, seen


def _models(tmp_path, variant_or_solver, **kw):
    """(model trained on 3 shards, the store after `drop --shards 1` and an append)."""
    X, y = _data(n=2000)
    path = _write(tmp_path / "s.zarr", X[:1500], y[:1500])
    solver = "perf" if variant_or_solver in ("dcd", "accelerated") else variant_or_solver
    extra = {"variant": variant_or_solver} if solver == "perf" else {}
    first = train(path, solver, C=0.5, **extra, **kw)
    from ooc_svm.store import StoreWriter

    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(sp.csr_matrix(X[1500:], dtype=np.float32), y[1500:], shard_rows=500):
            w.add(s)
        w.commit()
    drop_oldest(path, shards=1)
    return first, path, solver, extra, X[500:], y[500:]


def test_dcd_keeps_the_alpha_of_the_kept_rows(tmp_path, caplog):
    """dcd's α of the rows the drop kept start the next run (the dropped rows' α leave with
    them, the appended rows start at 0), and it ends on the cold run's certificate."""
    from ooc_svm.solvers.perf.dcd_warm import alpha_start

    first, path, solver, extra, X, y = _models(tmp_path, "dcd")
    meta = open_store(path).meta
    with caplog.at_level("INFO", logger="ooc_svm.solvers.perf.dcd_warm"):
        a = alpha_start(first.model, meta, [-1.0, 1.0], 0.5)
    assert "500 of its oldest rows dropped" in caplog.text
    assert a is not None and a.shape == (1500,)
    assert np.array_equal(a[:1000], first.model.warm_alpha_[500:].astype(np.float64))
    assert not a[1000:].any()
    cold = train(path, solver, C=0.5, **extra)
    warm = train(path, solver, C=0.5, init=first.model, **extra)
    assert warm.summary["warm_start"] and warm.converged and cold.converged
    assert abs(warm.objective - cold.objective) <= 0.5 * 1500 * 1e-3


@pytest.mark.parametrize("solver", ["accelerated", "smo"])
def test_other_solvers_warm_start_after_a_drop(tmp_path, solver, caplog):
    """perf's cutting plane starts from w, smo from the support vectors the store still
    has (their rows moved down by the rows dropped); both were refused before
    ("shards removed")."""
    kw = {"kernel": "linear"} if solver == "smo" else {}
    first, path, s, extra, X, y = _models(tmp_path, solver, **kw)
    with caplog.at_level("INFO", logger="ooc_svm.solvers.warm"):
        warm = train(path, s, C=0.5, init=first.model, **extra, **kw)
    cold = train(path, s, C=0.5, **extra, **kw)
    assert warm.converged
    if solver == "smo":
        assert "oldest rows were dropped" in caplog.text
        tol = 1e-3 * max(1.0, abs(cold.objective))
    else:
        assert warm.model.info.get("warm_start")
        tol = 0.5 * 1500 * 1e-3
    assert abs(warm.objective - cold.objective) <= tol


def test_a_model_of_other_shards_is_still_refused(tmp_path):
    """Only the model's own oldest shards may be gone: a store whose kept shards are not the
    model's is 'changed' (refused for perf, one line)."""
    from ooc_svm.solvers import SolverError

    X, y = _data(n=1500)
    path = _write(tmp_path / "s.zarr", X, y)
    first = train(path, "perf", variant="accelerated", C=0.5)
    other = _write(tmp_path / "o.zarr", X[500:] * 2.0, y[500:])
    with pytest.raises(SolverError, match="store"):
        train(other, "perf", variant="accelerated", C=0.5, init=first.model)


def test_drop_help_says_what_it_does():
    r = subprocess.run(ooc_cmd("drop", "--help"), capture_output=True, text=True)
    assert r.returncode == 0 and "atomic" in r.stdout and "--keep-rows" in r.stdout
