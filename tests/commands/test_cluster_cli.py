"""A real cluster on loopback: `dask scheduler` + two `dask worker` processes started by the
CLI, reached by address from `ooc-svm train --scheduler tcp://127.0.0.1:PORT`; faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import free_port, ooc_cmd, stop_procs, wait_workers

from ooc_svm.model.model import load_model
from ooc_svm.store import csr_to_shards, open_store, write_store

pytestmark = pytest.mark.cluster

OOC = ooc_cmd()
DASK = [sys.executable, "-m", "dask"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Scheduler and two single-process workers (no nanny, so a kill is a real loss)."""
    tmp = tmp_path_factory.mktemp("cluster")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [
        subprocess.Popen(
            [
                *DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
                "--scheduler-file",
                str(tmp / "sched.json"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    workers = []
    try:
        time.sleep(1.0)
        for k in range(2):
            w = subprocess.Popen(
                [
                    *DASK,
                    "worker",
                    address,
                    "--nworkers",
                    "1",
                    "--nthreads",
                    "1",
                    "--memory-limit",
                    "2GB",
                    "--no-nanny",
                    "--no-dashboard",
                    "--name",
                    f"w{k}",
                    "--local-directory",
                    str(tmp / f"w{k}"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            workers.append(w)
        procs += workers
        wait_workers(address, 2)
        yield {
            "address": address,
            "scheduler_file": str(tmp / "sched.json"),
            "workers": workers,
            "tmp": tmp,
        }
    finally:
        stop_procs(procs)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(5)
    n, d = 6000, 300
    X = sp.random(n, d, density=0.05, format="csr", random_state=5, dtype=np.float32)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("cstore") / "s.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=1000))
    return path


def _train(store, out, *extra, check=True):
    # A hung training is aborted with SIGABRT so that faulthandler prints every thread's
    # stack into the failure message (instead of a bare timeout).
    proc = subprocess.Popen(
        [
            *OOC,
            "train",
            "--solver",
            "perf",
            store,
            "-o",
            out,
            "--C",
            "1",
            "--eps",
            "1e-4",
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        stdout, stderr = proc.communicate()
        pytest.fail(f"training hung for 300 s; its threads:\n{stderr[-6000:]}")
    r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def local_model(store, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("local") / "model")
    _train(store, out)
    return load_model(out)


def test_loopback_cluster_same_model(cluster, store, local_model, tmp_path):
    r = _train(store, str(tmp_path / "dask"), "--scheduler", cluster["address"])
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["passes"] > 1
    a, b = local_model, load_model(str(tmp_path / "dask"))
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-6, atol=1e-10)


def test_worker_killed_mid_training(cluster, store, local_model, tmp_path):
    """SIGKILL one worker while training runs (reached through the scheduler file this time):
    training completes with the same model."""
    from distributed import Client

    with Client(cluster["address"], timeout=30) as c:
        pids = c.run(os.getpid)
    assert len(pids) == 2
    victim = sorted(pids.values())[0]
    killed = []

    def kill_later():
        time.sleep(2.0)
        try:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        except ProcessLookupError:
            pass

    t = threading.Thread(target=kill_later)
    t.start()
    r = _train(store, str(tmp_path / "dask"), "--scheduler", cluster["scheduler_file"])
    t.join()
    assert killed, "the worker was not killed during training"
    b = load_model(str(tmp_path / "dask"))
    np.testing.assert_allclose(b.coef_, local_model.coef_, rtol=1e-6, atol=1e-10)
    assert json.loads(r.stdout.strip().splitlines()[-1])["passes"] > 2


def test_unreachable_scheduler_fails_fast(store, tmp_path):
    port = free_port()
    t0 = time.perf_counter()
    r = _train(store, str(tmp_path / "m"), "--scheduler", f"tcp://127.0.0.1:{port}", check=False)
    assert r.returncode != 0
    assert time.perf_counter() - t0 < 90
    assert "ooc-svm: error:" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


def test_corrupted_shard_stops_training(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(3000, 50, density=0.2, format="csr", random_state=0, dtype=np.float32)
    y = rng.choice([-1.0, 1.0], 3000)
    path = str(tmp_path / "s.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=1000), compression="zstd")
    name = open_store(path).meta.shards[1].name
    chunk = Path(path) / name / "indices" / "c" / "0"
    raw = chunk.read_bytes()
    chunk.write_bytes(raw[: len(raw) // 2])  # truncated
    v = subprocess.run([*OOC, "verify", path], capture_output=True, text=True)
    assert v.returncode != 0 and name in v.stderr
    r = _train(path, str(tmp_path / "m"), check=False)
    assert r.returncode != 0, r.stdout
    assert name in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()
