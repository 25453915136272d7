"""Every command does what a LIBSVM / LIBLINEAR / SVMperf user expects.

One test (or a few) per numbered item of the issue, each running the CLI as a user would:
relative paths in a temporary working directory, ``python -m ooc_svm``, a real Dask cluster
where Dask is involved.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, cpu_seconds, dask_cli_cluster, dataset, ooc_cmd, wait_cpu_seconds
from sklearn.datasets import make_classification

from ooc_svm.store import csr_to_shards, write_store

# ------------------------------------------------------------------------------------------
# item 1: Dask with relative store paths; no Dask INFO lines unless -v
# ------------------------------------------------------------------------------------------

#: what Dask's own log lines look like (scheduler, nanny, worker start-up, dashboard)
_DASK_LINE = re.compile(
    r"distributed\.|Scheduler at|Nanny|[Ww]orker|dashboard|State start|jupyter-server-proxy"
    r"|Receive client|established connection"
)


def _item1_store(cwd: Path, rel: str) -> None:
    rng = np.random.default_rng(12)
    n, d = 3000, 60
    X = sp.random(n, d, density=0.1, format="csr", random_state=12, dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) > 0, 1.0, -1.0)
    (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
    write_store(str(cwd / rel), csr_to_shards(X, y, shard_rows=500))


def _item1_train(cwd: Path, store: str, model: str, scheduler: str, *extra: str):
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", store, "-o", model]
        + ["--scheduler", scheduler, *extra],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _item1_no_dask_lines(stderr: str) -> None:
    bad = [line for line in stderr.splitlines() if _DASK_LINE.search(line)]
    assert not bad, "Dask log lines on stderr:\n" + "\n".join(bad[:10])


@pytest.mark.cluster
def test_relative_paths_on_a_local_process_cluster(tmp_path):
    _item1_store(tmp_path, "data/a.zarr")
    r = _item1_train(tmp_path, "data/a.zarr", "models/m", "processes")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "models" / "m" / "model.json").is_file()
    _item1_no_dask_lines(r.stderr)


@pytest.mark.cluster
def test_relative_paths_from_python_on_threads(tmp_path, monkeypatch):
    import ooc_svm

    _item1_store(tmp_path, "a.zarr")
    monkeypatch.chdir(tmp_path)
    res = ooc_svm.train("a.zarr", solver="perf", scheduler="threads", C=1.0)
    assert res.passes > 1


@pytest.mark.cluster
def test_relative_paths_on_a_cli_started_cluster(tmp_path):
    """`dask scheduler` + 2 `dask worker` started from the command line in ANOTHER working
    directory; the client trains a relative store to a relative model path, by address and
    by a relative scheduler file."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _item1_store(work, "data/a.zarr")
    with dask_cli_cluster(2, cwd=elsewhere, scheduler_file=work / "sched.json") as (address, _):
        r = _item1_train(work, "data/a.zarr", "models/m1", address)
        assert r.returncode == 0, r.stderr
        assert (work / "models" / "m1" / "model.json").is_file()
        _item1_no_dask_lines(r.stderr)
        r = _item1_train(work, "data/a.zarr", "m2", "sched.json")
        assert r.returncode == 0, r.stderr
        assert (work / "m2" / "model.json").is_file()
        _item1_no_dask_lines(r.stderr)


def test_worker_that_sees_another_store_names_the_cause(tmp_path):
    """The identity check stays; its message names the real cause."""
    from ooc_svm.engine.base import EngineError
    from ooc_svm.engine.dask_worker import _worker_store

    _item1_store(tmp_path, "a.zarr")
    path = os.path.join(tmp_path, "a.zarr")
    with pytest.raises(EngineError, match="workers see a different store at .*shared file"):
        _worker_store(path, "0123456789abcdef01234567|" + path, True)


# ------------------------------------------------------------------------------------------
# item 8: Ctrl-C within a second (perf: every loss and variant)
# ------------------------------------------------------------------------------------------


def _item8_perf_stores(cwd: Path) -> None:
    rng = np.random.default_rng(8)
    n, d = 20000, 40
    X = sp.random(n, d, density=0.5, random_state=8, format="csr", dtype=np.float64)
    s = X @ rng.normal(size=d) + 0.8 * rng.normal(size=n)
    yb = np.where(s > np.median(s), 1.0, -1.0)
    yr = np.digitize(s, np.quantile(s, [0.33, 0.66])) + 1.0
    write_store(str(cwd / "b.zarr"), csr_to_shards(X, yb, shard_rows=2000))
    qid = np.repeat(np.arange(n // 500), 500)
    write_store(
        str(cwd / "r.zarr"), csr_to_shards(X, yr, qid=qid, shard_rows=2000), label_kind="ordinal"
    )


@pytest.mark.parametrize(
    "store,flags",
    [
        ("b.zarr", ["--variant", "paper"]),
        ("b.zarr", ["--variant", "accelerated"]),
        ("b.zarr", ["--loss", "roc", "--variant", "paper"]),
        ("b.zarr", ["--loss", "roc", "--variant", "accelerated"]),
        ("r.zarr", ["--loss", "ordinal", "--variant", "paper"]),
        ("r.zarr", ["--loss", "ordinal", "--variant", "accelerated"]),
        ("b.zarr", ["--C", "1e9"]),
    ],
    ids=["error-paper", "error-acc", "roc-paper", "roc-acc", "ord-paper", "ord-acc", "C1e9"],
)
def test_perf_stops_on_ctrl_c_within_a_second(tmp_path, store, flags):
    """SIGINT while perf iterates: "ooc-svm: interrupted" within 1 s, exit status 130, no
    model left; the exit itself follows after the interpreter's teardown."""
    _item8_perf_stores(tmp_path)
    extra = flags if "--C" in flags else ["--C", "10", *flags]
    p = subprocess.Popen(
        [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", store, "-o", "m.json"]
        + ["--eps", "1e-12", "--max-iter", "100000", "--history", "h.jsonl", *extra],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    hist = tmp_path / "h.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if hist.exists() and len(hist.read_text().splitlines()) >= 4:
            break
        time.sleep(0.01)
    assert p.poll() is None, "training ended before it could be interrupted"
    time.sleep(0.5)
    # reaction times in CPU seconds of the run (wall seconds grow with the machine's load)
    t = cpu_seconds(p.pid)
    p.send_signal(signal.SIGINT)
    said = None
    for line in p.stderr:
        if line.startswith("ooc-svm: interrupted"):
            said = _cpu_or_none(p.pid)
            said = None if said is None else said - t
    gone = wait_cpu_seconds(p, timeout=60) - t
    assert p.returncode == 130
    assert said is not None and said < 1.0, said
    assert gone < 3.0, gone
    assert not (tmp_path / "m.json").exists()


# items 2, 4, 5, 6, 9 (scoring): helpers
# ------------------------------------------------------------------------------------------


def _run(cwd, *args, **kw):
    kw.setdefault("timeout", 600)
    return subprocess.run(ooc_cmd(*args), cwd=cwd, capture_output=True, text=True, **kw)


def _svmlight_head(src, dst, n, keep=None):
    """The first ``n`` lines of a (possibly compressed) SVMlight file whose label passes
    ``keep``, written as plain text."""
    import bz2
    import gzip

    opener = (
        bz2.open if str(src).endswith(".bz2") else gzip.open if str(src).endswith(".gz") else open
    )
    out = []
    with opener(src, "rt") as f:
        for line in f:
            if keep is None or keep(float(line.split(None, 1)[0])):
                out.append(line)
            if len(out) >= n:
                break
    with open(dst, "w") as f:
        f.writelines(out)


# --------------------------------------------------------------------------------------------
# item 2: standard output, special files, closed pipes
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A 6,000-row binary store and a linear model, relative paths under one directory."""
    tmp = tmp_path_factory.mktemp("item2")
    rng = np.random.default_rng(0)
    X = sp.random(6000, 12, density=0.5, random_state=0, format="csr", dtype=np.float32)
    y = np.where(X @ rng.normal(size=12) > 0, 1.0, -1.0)
    build_store(tmp / "s.zarr", X, y, shard_rows=1000)
    r = _run(tmp, "train", "--solver", "perf", "s.zarr", "-o", "m")
    assert r.returncode == 0, r.stderr
    r = _run(tmp, "predict", "m", "s.zarr", "-o", "ref.tsv")
    assert r.returncode == 0, r.stderr
    return tmp


def test_predict_dash_writes_to_stdout(scored):
    r = _run(scored, "predict", "m", "s.zarr", "-o", "-")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (scored / "ref.tsv").read_text()
    assert not (scored / "-").exists()
    assert "6000 rows -> standard output" in r.stderr


def test_dev_stdout_is_written_in_place(scored):
    """``-o /dev/stdout``: written through, never replaced by a rename. The test uses its own
    link made like /dev/stdout (-> /proc/self/fd/1), so that a regression (or old code) cannot
    replace the system's /dev/stdout while the test runs as root."""
    link = scored / "stdout-link"
    if not link.is_symlink():
        os.symlink("/proc/self/fd/1", link)
    r = _run(scored, "predict", "m", "s.zarr", "-o", "stdout-link")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (scored / "ref.tsv").read_text()
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert "6000 rows -> stdout-link" in r.stderr  # the summary does not mix with the data


def test_predict_to_dev_null_and_a_fifo(scored):
    r = _run(scored, "predict", "m", "s.zarr", "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = scored / "pipe.tsv"
    os.mkfifo(fifo)
    with open(scored / "from_fifo.tsv", "wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        r = _run(scored, "predict", "m", "s.zarr", "-o", "pipe.tsv", timeout=300)
        reader.wait(timeout=120)
    got = (scored / "from_fifo.tsv").read_text()
    assert r.returncode == 0, r.stderr
    assert got == (scored / "ref.tsv").read_text()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not replaced by a file
    assert not [p for p in os.listdir(scored) if p.startswith(".predict")]


def test_closed_pipe_ends_quietly(scored):
    """``ooc-svm predict ... -o - | head -1``: exit status 141 (128 + SIGPIPE, what a shell
    reports for cat/grep/sort in the same place) and nothing on stderr."""
    p = subprocess.Popen(
        ooc_cmd("predict", "m", "s.zarr", "-o", "-"),
        cwd=scored,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = p.stdout.readline()
    p.stdout.close()  # what `head -1` does after its line
    err = p.stderr.read().decode()
    rc = p.wait(timeout=300)
    assert first.startswith(b"label\tscore")
    assert rc == 141, err
    assert err == ""
    # the same through a real shell pipeline
    sh = subprocess.run(
        [
            "bash",
            "-c",
            "set -o pipefail; "
            + " ".join(ooc_cmd("predict", "m", "s.zarr", "-o", "-"))
            + " | head -1",
        ],
        cwd=scored,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sh.stdout.startswith("label\tscore") and sh.stdout.count("\n") == 1
    assert sh.returncode == 141 and sh.stderr == ""


# --------------------------------------------------------------------------------------------
# item 4: one-vs-rest kernel models score (local and Dask)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ovr_kernel(tmp_path_factory):
    """3-class store, an RBF one-vs-rest model trained by smo, relative paths."""
    tmp = tmp_path_factory.mktemp("item4")
    rng = np.random.default_rng(4)
    centers = rng.normal(scale=2.0, size=(3, 8))
    lab = rng.integers(0, 3, 240)
    X = sp.csr_matrix((centers[lab] + rng.normal(size=(240, 8))).astype(np.float32))
    from ooc_svm.store import csr_to_shards, write_store

    write_store(
        str(tmp / "mc.zarr"),
        csr_to_shards(X, lab + 1.0, shard_rows=50),
        n_features=8,
        label_kind="multiclass",
    )
    r = _run(
        tmp, "train", "--solver", "smo", "--kernel", "rbf", "--gamma", "0.2", "mc.zarr", "-o", "rbf"
    )
    assert r.returncode == 0, r.stderr
    return tmp, X, lab + 1.0


def test_ovr_kernel_model_predicts_and_evaluates_locally(ovr_kernel):
    from ooc_svm.model.model import load_model

    tmp, X, y = ovr_kernel
    model = load_model(str(tmp / "rbf"))
    assert model.kind == "kernel" and np.ndim(model.intercept_) == 1
    r = _run(tmp, "predict", "rbf", "mc.zarr", "-o", "p.csv")
    assert r.returncode == 0, r.stderr
    with open(tmp / "p.csv") as f:
        header = f.readline().strip().split(",")
    assert header == ["label", "score_1", "score_2", "score_3", "prediction"]
    arr = np.loadtxt(tmp / "p.csv", delimiter=",", skiprows=1)
    S = model.decision_function(X)  # in memory, the dense kernel matrix
    np.testing.assert_allclose(arr[:, 1:4], S, rtol=1e-6, atol=1e-6)  # float32 store data
    np.testing.assert_array_equal(arr[:, 4], model.predict(X))
    r = _run(tmp, "evaluate", "rbf", "mc.zarr", "--json")
    assert r.returncode == 0, r.stderr
    import json

    ev = json.loads(r.stdout)
    assert ev["n"] == 240
    assert ev["accuracy"] == pytest.approx(np.mean(model.predict(X) == y))
    assert ev["accuracy"] > 0.8


@pytest.mark.cluster
def test_ovr_kernel_model_scores_on_dask_processes(ovr_kernel):
    """The same scores through a 2-worker process cluster (``--scheduler processes``)."""
    pytest.importorskip("distributed")
    tmp, _, _ = ovr_kernel
    ref = _run(tmp, "predict", "rbf", "mc.zarr", "-o", "local.tsv")
    assert ref.returncode == 0, ref.stderr
    r = _run(
        tmp,
        "predict",
        "rbf",
        "mc.zarr",
        "-o",
        "dask.tsv",
        "--scheduler",
        "processes",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp / "dask.tsv").read_bytes() == (tmp / "local.tsv").read_bytes()
    r = _run(
        tmp,
        "evaluate",
        "rbf",
        "mc.zarr",
        "--json",
        "--scheduler",
        "processes",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr


def test_ovr_kernel_scoring_memory_is_bounded(ovr_kernel):
    """Scores are computed per shard: the pass never holds more than one shard's kernel
    values per thread (checked by scoring shard by shard equals scoring all rows)."""
    from ooc_svm.engine import LocalEngine
    from ooc_svm.model.model import load_model
    from ooc_svm.model.shard_scores import iter_scored
    from ooc_svm.store import open_store

    tmp, X, _ = ovr_kernel
    model = load_model(str(tmp / "rbf"))
    st = open_store(str(tmp / "mc.zarr"))
    with LocalEngine(n_threads=2) as eng:
        batches = list(iter_scored(st, eng, model, max_rows=50))
    assert len(batches) == st.n_shards and max(b[1].shape[0] for b in batches) <= 50
    np.testing.assert_allclose(
        np.vstack([b[1] for b in batches]), model.decision_function(X), rtol=1e-6, atol=1e-6
    )


# --------------------------------------------------------------------------------------------
# item 5: model and data must match (real data)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Small real stores: a9a, a9a.t, w8a, sector (classes 1-3) and sector test; models."""
    a9a = dataset("a9a/a9a")
    a9at = dataset("a9a/a9a.t.gz")
    w8a = dataset("w8a/w8a.bz2")
    sec = dataset("sector/sector.scale.bz2")
    sect = dataset("sector/sector.t.scale.bz2")
    tmp = tmp_path_factory.mktemp("item5")
    _svmlight_head(a9a, tmp / "a9a.txt", 2000)
    _svmlight_head(a9at, tmp / "a9at.txt", 1000)
    _svmlight_head(w8a, tmp / "w8a.txt", 1000)
    _svmlight_head(sec, tmp / "sector.txt", 200, keep=lambda c: c <= 3)
    _svmlight_head(sect, tmp / "sectort.txt", 300)
    for src, dst, extra in [
        ("a9a.txt", "a9a.zarr", ["--n-features", "123"]),
        ("a9at.txt", "a9at.zarr", []),
        ("w8a.txt", "w8a.zarr", []),
        ("sector.txt", "sector.zarr", ["--label-kind", "multiclass", "--n-features", "55197"]),
        ("sectort.txt", "sectort.zarr", ["--label-kind", "multiclass", "--n-features", "55197"]),
        ("a9at.txt", "a9at122.zarr", ["--n-features", "122"]),
    ]:
        r = _run(tmp, "ingest", src, dst, *extra)
        assert r.returncode == 0, r.stderr
    for args in [
        ("--solver", "perf", "a9a.zarr", "-o", "a9a.model"),
        ("--solver", "perf", "sector.zarr", "-o", "sector.model"),
        ("--solver", "smo", "--kernel", "rbf", "a9at122.zarr", "-o", "rbf122.model"),
        ("--solver", "perf", "--loss", "roc", "a9a.zarr", "-o", "roc.model"),
    ]:
        r = _run(tmp, "train", *args)
        assert r.returncode == 0, r.stderr
    return tmp


def _one_error_line(r):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1 and lines[0].startswith("ooc-svm: error: "), r.stderr
    return lines[0]


def test_sector_model_on_a9a_test_is_refused(real):
    for cmd in ("evaluate", "predict"):
        extra = ["-o", "x.tsv"] if cmd == "predict" else []
        line = _one_error_line(_run(real, cmd, "sector.model", "a9at.zarr", *extra))
        assert "sector.model" in line and "a9at.zarr" in line and "-1" in line
    assert not (real / "x.tsv").exists()


def test_a9a_model_on_sector_test_is_refused(real):
    for cmd in ("evaluate", "predict"):
        extra = ["-o", "x.tsv"] if cmd == "predict" else []
        line = _one_error_line(_run(real, cmd, "a9a.model", "sectort.zarr", *extra))
        assert "binary classifier" in line and "sectort.zarr" in line
    assert not (real / "x.tsv").exists()


def test_ranking_model_on_class_labels_is_refused(real):
    line = _one_error_line(_run(real, "evaluate", "roc.model", "sectort.zarr"))
    assert "ranking model" in line and "class labels" in line


def test_store_with_more_features_warns_once(real):
    from ooc_svm.model.model import load_model

    assert load_model(str(real / "rbf122.model")).n_features == 122
    # 146 % wider than the model: refused in one line ...
    r = _run(real, "evaluate", "rbf122.model", "w8a.zarr")
    assert r.returncode == 1 and "--allow-wider" in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr
    # ... and scored with one warning when the user says so
    r = _run(real, "evaluate", "rbf122.model", "w8a.zarr", "--allow-wider")
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warn) == 1 and "w8a.zarr has 300 features" in warn[0] and "122" in warn[0]


def test_store_with_fewer_features_is_scored(real):
    """a9a.t (122 features used) against the 123-feature a9a model, as in LIBLINEAR."""
    r = _run(real, "evaluate", "a9a.model", "a9at.zarr", "--json")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    import json

    assert json.loads(r.stdout)["accuracy"] > 0.8


# --------------------------------------------------------------------------------------------
# item 6: scoring stores from Python, streamed
# --------------------------------------------------------------------------------------------


def test_estimators_and_model_score_stores(tmp_path, monkeypatch):
    from ooc_svm import SVC, LinearSVC, load_model
    from ooc_svm.store import open_store

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(6)
    X = sp.random(900, 10, density=0.5, random_state=6, format="csr", dtype=np.float32)
    y = np.where(X @ rng.normal(size=10) > 0.1, 1.0, -1.0)
    build_store("tr.zarr", X[:600], y[:600], shard_rows=100)
    build_store("te.zarr", X[600:], y[600:], shard_rows=64)
    Xte = sp.csr_matrix(X[600:], dtype=np.float64)
    for est in (LinearSVC(C=1.0), SVC(C=1.0, gamma=0.5)):
        est.fit("tr.zarr")
        for store in ("te.zarr", open_store("te.zarr")):
            # (the in-memory kernel matrix and the streamed expansion round differently)
            s_mem = est.decision_function(Xte)
            np.testing.assert_allclose(est.decision_function(store), s_mem, rtol=1e-6, atol=1e-6)
            sure = np.abs(s_mem) > 1e-5
            np.testing.assert_array_equal(est.predict(store)[sure], est.predict(Xte)[sure])
            assert est.score(store) == pytest.approx(est.score(Xte, y[600:]))
        est.model_.save("m")
        m = load_model("m")
        s_mem = m.decision_function(Xte)
        sure = np.abs(s_mem) > 1e-5
        np.testing.assert_array_equal(m.predict("te.zarr")[sure], m.predict(Xte)[sure])
        np.testing.assert_allclose(
            m.decision_function(open_store("te.zarr")), s_mem, rtol=1e-6, atol=1e-6
        )


def test_store_is_scored_shard_by_shard(tmp_path, monkeypatch):
    """No whole-store load: the estimator scores the store one shard at a time (every shard
    once, never more rows at once than a shard holds)."""
    import ooc_svm.model.shard_scores as scoring
    from ooc_svm import LinearSVC
    from ooc_svm.store import open_store

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    X = sp.random(500, 6, density=0.6, random_state=7, format="csr", dtype=np.float32)
    y = np.where(X @ rng.normal(size=6) > 0.1, 1.0, -1.0)
    build_store("s.zarr", X, y, shard_rows=50)
    est = LinearSVC().fit("s.zarr")
    st = open_store("s.zarr")
    seen = []
    orig = scoring.score_shard

    def spy(shard, bc):
        seen.append((shard.row_start, shard.n_rows))
        return orig(shard, bc)

    monkeypatch.setattr(scoring, "score_shard", spy)
    pred = est.predict("s.zarr")
    assert sorted(seen) == [(50 * i, 50) for i in range(st.n_shards)]
    assert pred.shape == (500,)


# --------------------------------------------------------------------------------------------
# item 9: outputs follow the process umask
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_outputs_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    rng = np.random.default_rng(9)
    X = sp.random(200, 5, density=0.6, random_state=9, format="csr", dtype=np.float32)
    y = np.where(X @ rng.normal(size=5) > 0.1, 1.0, -1.0)
    build_store(tmp_path / "s.zarr", X, y, shard_rows=100)
    kw = {"umask": umask, "timeout": 300}
    assert _run(tmp_path, "train", "--solver", "perf", "s.zarr", "-o", "m", **kw).returncode == 0
    assert _run(tmp_path, "predict", "m", "s.zarr", "-o", "p.tsv", **kw).returncode == 0
    assert _run(tmp_path, "predict", "m", "s.zarr", "-o", "p.parquet", **kw).returncode == 0
    assert stat.S_IMODE(os.stat(tmp_path / "m").st_mode) == dir_mode
    for f in ("m/model.json", "m/arrays.npz", "p.tsv", "p.parquet"):
        assert stat.S_IMODE(os.stat(tmp_path / f).st_mode) == file_mode, f
    # replacing an existing output keeps following the umask
    assert _run(tmp_path, "predict", "m", "s.zarr", "-o", "p.tsv", **kw).returncode == 0
    assert stat.S_IMODE(os.stat(tmp_path / "p.tsv").st_mode) == file_mode


# ------------------------------------------------------------------------------------------
# item 7 (checkpoints that cannot mislead) and item 8 (Ctrl-C within a second: smo)
# ------------------------------------------------------------------------------------------
def _item7_run(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _item7_store(cwd: Path, name: str, seed: int, n: int = 600) -> str:
    X, y = make_classification(
        n_samples=n, n_features=10, n_informative=5, flip_y=0.05, random_state=seed
    )
    write_store(str(cwd / name), csr_to_shards(sp.csr_matrix(X), y, shard_rows=200))
    return name


def test_resume_on_another_store_is_a_one_line_error(tmp_path):
    """Same feature count, other data: refused naming both stores (was a silent resume)."""
    a = _item7_store(tmp_path, "a.zarr", 0)
    b = _item7_store(tmp_path, "b.zarr", 1)
    flags = ["--solver", "perf", "--checkpoint", "ck", "--json"]
    r = _item7_run(tmp_path, "train", a, "-o", "ma", *flags)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ck" / "LATEST").exists()
    r = _item7_run(tmp_path, "train", b, "-o", "mb", *flags, "--resume")
    assert r.returncode == 1, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ooc-svm: error:"), r.stderr
    assert "a.zarr" in err[0] and "b.zarr" in err[0], err[0]
    assert not (tmp_path / "mb").exists()


def test_resume_with_other_parameters_names_both_values(tmp_path):
    a = _item7_store(tmp_path, "a.zarr", 0)
    flags = ["--solver", "perf", "--checkpoint", "ck"]
    assert _item7_run(tmp_path, "train", a, "-o", "m1", *flags, "--C", "2").returncode == 0
    r = _item7_run(tmp_path, "train", a, "-o", "m2", *flags, "--C", "3", "--resume")
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("ooc-svm: error:") and "2.0" in line and "3.0" in line, line
    assert "Traceback" not in r.stderr


def test_resume_without_a_checkpoint_starts_fresh(tmp_path):
    a = _item7_store(tmp_path, "a.zarr", 0)
    r = _item7_run(
        tmp_path,
        "train",
        a,
        "-o",
        "m",
        "--solver",
        "smo",
        "--kernel",
        "linear",
        "--checkpoint",
        "ck",
        "--resume",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert "no checkpoint found in" in r.stderr and "starting fresh" in r.stderr
    assert (tmp_path / "m").exists()


def test_refused_checkpoint_leaves_no_directory(tmp_path):
    a = _item7_store(tmp_path, "a.zarr", 0)
    for i, extra in enumerate(
        (
            ["--solver", "smo", "--selection", "platt"],  # refused by the solver
            ["--solver", "smo", "--C", "-1"],  # bad parameters
            ["--solver", "perf", "--variant", "selective"],  # variant without checkpoints
        )
    ):
        r = _item7_run(tmp_path, "train", a, "-o", f"m{i}", *extra, "--checkpoint", f"ck{i}")
        assert r.returncode == 1, (extra, r.stderr)
        assert r.stderr.strip().splitlines()[-1].startswith("ooc-svm: error:")
        assert not (tmp_path / f"ck{i}").exists(), extra
        assert not (tmp_path / f"m{i}").exists()


def _cpu_or_none(pid: int) -> float | None:
    """CPU seconds of ``pid`` so far, None once it is gone."""
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return None


def _item8_default_sigint() -> None:
    # a test run started in the background inherits SIGINT ignored; Ctrl-C needs the default
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _item8_interrupt(cwd: Path, args: list[str], started) -> tuple[int, str, float]:
    """Start ``ooc-svm args``, send SIGINT once ``started()`` holds; (rc, stderr, seconds
    from the signal to the exit)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "ooc_svm", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_item8_default_sigint,
    )
    t_start = time.time()
    while p.poll() is None and not started(time.time() - t_start):
        time.sleep(0.01)
    assert p.poll() is None, "training ended before the signal: " + p.stderr.read()
    # reaction times in CPU seconds of the run (wall seconds grow with the machine's load)
    t_sig = cpu_seconds(p.pid)
    p.send_signal(signal.SIGINT)
    # the reaction is the "ooc-svm: interrupted" line (then the interpreter tears down,
    # bounded separately by the exit check)
    said, lines = None, []
    for line in p.stderr:
        lines.append(line)
        if said is None and line.startswith("ooc-svm: interrupted"):
            said = _cpu_or_none(p.pid)
            said = None if said is None else said - t_sig
    gone = wait_cpu_seconds(p, timeout=60) - t_sig
    assert gone < 3.0, f"used {gone:.2f} CPU s after the signal"
    return p.returncode, "".join(lines), said if said is not None else gone


def test_smo_stops_on_ctrl_c_within_a_second(tmp_path):
    """An RBF smo run reacts to Ctrl-C within a second (it used to finish its numba call:
    10-16 s); with --checkpoint the last checkpoint stays intact and resumable."""
    from ooc_svm.checkpoint import Checkpointer

    store = _item7_store(tmp_path, "s.zarr", 3, n=4000)
    base = ["train", store, "--solver", "smo", "--kernel", "rbf", "--gamma", "0.05"]
    base += ["--C", "1000", "--tol", "1e-5"]

    # without checkpoints: the signal arrives while the solver iterates (after 4 s)
    hist = tmp_path / "h1.jsonl"
    rc, err, waited = _item8_interrupt(
        tmp_path,
        [*base, "-o", "m1", "--history", "h1.jsonl"],
        lambda t: hist.exists() and hist.stat().st_size > 0 and t > 1.0,
    )
    assert rc == 130 and "interrupted" in err and "Traceback" not in err, err
    assert waited < 1.0, f"used {waited:.2f} CPU s to stop"
    assert not (tmp_path / "m1").exists()

    # with checkpoints: once a checkpoint exists (it iterates), Ctrl-C
    ck = tmp_path / "ck"
    args = [*base, "-o", "m2", "--checkpoint", "ck", "--checkpoint-seconds", "0.3"]
    rc, err, waited = _item8_interrupt(
        tmp_path, args, lambda t: (ck / "LATEST").exists() and t > 2.0
    )
    assert rc == 130 and "interrupted" in err and "Traceback" not in err, err
    assert waited < 1.0, f"used {waited:.2f} CPU s to stop"
    data = Checkpointer(str(ck), "smo", resume=True).load(check_params=False)
    assert data is not None and data.arrays["alpha"].shape == (4000,)
    assert not [n for n in (ck).iterdir() if n.name.startswith(".")]


@pytest.mark.cluster
def test_ovr_kernel_model_scores_on_a_cli_started_cluster(ovr_kernel):
    """One-vs-rest kernel scores through `dask scheduler` + 2 `dask worker` processes started
    from the command line (as the README shows): byte-identical to the local engine."""
    tmp, _, _ = ovr_kernel
    ref = _run(tmp, "predict", "rbf", "mc.zarr", "-o", "local4.tsv")
    assert ref.returncode == 0, ref.stderr
    with dask_cli_cluster(2, cwd=tmp.parent) as (address, _):
        r = _run(tmp, "predict", "rbf", "mc.zarr", "-o", "cli4.tsv", "--scheduler", address)
        assert r.returncode == 0, r.stderr
        assert (tmp / "cli4.tsv").read_bytes() == (tmp / "local4.tsv").read_bytes()
        r = _run(tmp, "evaluate", "rbf", "mc.zarr", "--json", "--scheduler", address)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["n"] == 240


def test_label_kinds_as_libsvm_and_svmrank_users_expect(tmp_path):
    """Integer labels with more than two values and no qid are classes (one-vs-rest); with
    qid: ranks; --label-kind ordinal asks for ordinal regression; the dual solvers point rank
    data to --solver perf; --loss ordinal on a binary store says to use --loss roc."""
    rows = ["1 1:1 2:0.5", "2 1:0.2 3:1", "3 2:1 3:0.3", "1 1:0.9", "2 3:0.8", "3 2:0.7"]
    (tmp_path / "mc.svm").write_text("\n".join(rows * 10) + "\n")
    qrows = [
        f"{r.split()[0]} qid:{i // 6 + 1} {' '.join(r.split()[1:])}"
        for i, r in enumerate(rows * 10)
    ]
    (tmp_path / "rk.svm").write_text("\n".join(qrows) + "\n")
    (tmp_path / "bin.svm").write_text("\n".join(["1 1:1", "-1 2:1"] * 20) + "\n")
    for src, dst, extra in (
        ("mc.svm", "mc.zarr", []),
        ("rk.svm", "rk.zarr", []),
        ("mc.svm", "ord.zarr", ["--label-kind", "ordinal"]),
        ("bin.svm", "bin.zarr", []),
    ):
        r = _run(tmp_path, "ingest", src, dst, *extra)
        assert r.returncode == 0, r.stderr
    kinds = {}
    for name in ("mc.zarr", "rk.zarr", "ord.zarr", "bin.zarr"):
        r = _run(tmp_path, "info", name, "--json")
        assert r.returncode == 0, r.stderr
        kinds[name] = json.loads(r.stdout)["label_kind"]
    assert kinds["mc.zarr"] == "multiclass" and kinds["bin.zarr"] == "binary"
    assert kinds["ord.zarr"] == "ordinal" and kinds["rk.zarr"] != "multiclass"
    r = _run(tmp_path, "info", "mc.zarr")
    assert "multiclass" in r.stdout and "--label-kind ordinal" in r.stdout
    r = _run(tmp_path, "train", "--solver", "smo", "rk.zarr", "-o", "m1")
    assert r.returncode == 1 and "--solver perf" in r.stderr, r.stderr
    r = _run(tmp_path, "train", "--solver", "perf", "bin.zarr", "-o", "m2", "--loss", "ordinal")
    assert r.returncode == 1 and "--loss roc" in r.stderr, r.stderr
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m2").exists()


def test_parameter_checks_as_libsvm_does_them(tmp_path):
    """LIBSVM-style parameter checks: a bad --gamma is refused (not replaced), --C with
    --c-perf is refused, a misplaced --tol / --eps names the right flag, and reaching
    --max-iter is reported as not converged."""
    (tmp_path / "b.svm").write_text(
        "\n".join(f"{1 if i % 3 else -1} 1:{i % 7 / 7:.3f} 2:{i % 5 / 5:.3f}" for i in range(200))
        + "\n"
    )
    assert _run(tmp_path, "ingest", "b.svm", "b.zarr").returncode == 0
    cases = [
        (["--solver", "smo", "--gamma", "-1"], "--gamma must be positive"),
        (["--solver", "perf", "--C", "1", "--c-perf", "0.1"], "not both"),
        (["--solver", "perf", "--tol", "0.1"], "--eps"),
        (["--solver", "smo", "--eps", "0.1"], "--tol"),
    ]
    for extra, words in cases:
        r = _run(tmp_path, "train", "b.zarr", "-o", "m", *extra)
        assert r.returncode == 1, (extra, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (extra, r.stderr)
        assert not (tmp_path / "m").exists()
    r = _run(
        tmp_path,
        "train",
        "b.zarr",
        "-o",
        "m",
        "--solver",
        "perf",
        "--max-iter",
        "2",
        "--eps",
        "1e-9",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["converged"] is False
