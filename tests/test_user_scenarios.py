"""Issue 12: every command does what a LIBSVM / LIBLINEAR / SVMperf user expects.

One test (or a few) per numbered item of the issue, each running the CLI as a user would:
relative paths in a temporary working directory, ``python -m ooc_svm``, a real Dask cluster
where Dask is involved.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

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
def test_item1_relative_paths_local_cluster_processes(tmp_path):
    _item1_store(tmp_path, "data/a.zarr")
    r = _item1_train(tmp_path, "data/a.zarr", "models/m", "processes")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "models" / "m" / "model.json").is_file()
    _item1_no_dask_lines(r.stderr)


@pytest.mark.cluster
def test_item1_relative_paths_python_api_threads(tmp_path, monkeypatch):
    import ooc_svm

    _item1_store(tmp_path, "a.zarr")
    monkeypatch.chdir(tmp_path)
    res = ooc_svm.train("a.zarr", solver="perf", scheduler="threads", C=1.0)
    assert res.passes > 1


def _item1_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.cluster
def test_item1_relative_paths_cli_started_cluster(tmp_path):
    """`dask scheduler` + 2 `dask worker` started from the command line in ANOTHER working
    directory; the client trains a relative store to a relative model path, by address and
    by a relative scheduler file."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _item1_store(work, "data/a.zarr")
    port = _item1_free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": elsewhere}
    procs = [
        subprocess.Popen(
            dask
            + ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
            + ["--scheduler-file", str(work / "sched.json")],
            **quiet,
        )
    ]
    try:
        time.sleep(1.0)
        for k in range(2):
            procs.append(
                subprocess.Popen(
                    dask
                    + ["worker", address, "--nthreads", "1", "--no-nanny"]
                    + ["--no-dashboard", "--name", f"w{k}"],
                    **quiet,
                )
            )
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=60)
        r = _item1_train(work, "data/a.zarr", "models/m1", address)
        assert r.returncode == 0, r.stderr
        assert (work / "models" / "m1" / "model.json").is_file()
        _item1_no_dask_lines(r.stderr)
        r = _item1_train(work, "data/a.zarr", "m2", "sched.json")
        assert r.returncode == 0, r.stderr
        assert (work / "m2" / "model.json").is_file()
        _item1_no_dask_lines(r.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def test_item1_worker_sees_another_store_names_the_cause(tmp_path):
    """The identity check stays; its message names the real cause."""
    from ooc_svm.engine.base import EngineError
    from ooc_svm.engine.dask_engine import _worker_reader

    _item1_store(tmp_path, "a.zarr")
    path = os.path.join(tmp_path, "a.zarr")
    with pytest.raises(EngineError, match="workers see a different store at .*shared file"):
        _worker_reader(path, "0123456789abcdef01234567|" + path, True)


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
def test_item8_perf_ctrl_c_within_a_second(tmp_path, store, flags):
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
    t = time.time()
    p.send_signal(signal.SIGINT)
    said = None
    for line in p.stderr:
        if line.startswith("ooc-svm: interrupted"):
            said = time.time() - t
    p.wait(timeout=60)
    gone = time.time() - t
    assert p.returncode == 130
    assert said is not None and said < 1.0, said
    assert gone < 3.0, gone
    assert not (tmp_path / "m.json").exists()
