"""A Dask scheduler killed mid-training is one clear error, in bounded
time (finding 9: it was a raw ``AttributeError`` traceback)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import dask_cli_cluster

from ooc_svm.store import csr_to_shards, write_store

pytestmark = pytest.mark.cluster


def test_scheduler_killed_mid_training_is_one_line_error(tmp_path):
    # noisy labels and a tight eps: perf needs many passes, so training outlives the kill
    rng = np.random.default_rng(17)
    n, d = 20000, 400
    X = sp.random(n, d, density=0.05, format="csr", random_state=17, dtype=np.float32)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=2000))
    with dask_cli_cluster(1) as (address, procs):
        sched = procs[0]
        train = subprocess.Popen(
            [sys.executable, "-m", "ooc_svm", "-q", "train", "--solver", "perf", "s.zarr"]
            + ["-o", "m", "--C", "100", "--eps", "1e-6", "--max-iter", "100000"]
            + ["--scheduler", address, "--history", "h.jsonl"],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_iterating(train, tmp_path / "h.jsonl")
        assert train.poll() is None, "training ended before the scheduler was killed"
        sched.send_signal(signal.SIGKILL)
        try:  # a hang guard: the detection itself rests on the client's 15 s timeout
            _, err = train.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            train.kill()
            pytest.fail("training did not stop within 180 s of losing its scheduler")
    assert train.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ooc-svm: error: lost the Dask scheduler at {address}"), err
    assert "Traceback" not in err
    assert not (tmp_path / "m").exists()


def _wait_iterating(p: subprocess.Popen, hist) -> None:
    """Until the run's history has two records (it iterates on the cluster) or it ended."""
    deadline = time.monotonic() + 300  # a hang guard, not a measurement
    while p.poll() is None and time.monotonic() < deadline:
        if hist.exists() and len(hist.read_text().splitlines()) >= 3:
            return
        time.sleep(0.05)


def _frozen_store(tmp_path):
    rng = np.random.default_rng(17)
    n, d = 6000, 200
    X = sp.random(n, d, density=0.05, format="csr", random_state=17, dtype=np.float32)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=1000))


def _one_line(err: str, start: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), err
    assert "Traceback" not in err


def test_scheduler_stopped_mid_training_ends_within_its_timeout(tmp_path):
    """A scheduler that stops answering (SIGSTOP) kept `train --scheduler` waiting for
    ever (still waiting after 240 s): with --scheduler-timeout 5 the run ends with one line
    saying so. The signal is sent once the run iterates (its history has two records)."""
    _frozen_store(tmp_path)
    with dask_cli_cluster(1) as (address, procs):
        sched = procs[0]
        train = subprocess.Popen(
            [sys.executable, "-m", "ooc_svm", "-q", "train", "--solver", "perf", "s.zarr"]
            + ["-o", "m", "--C", "100", "--eps", "1e-9", "--max-iter", "100000"]
            + ["--history", "h.jsonl", "--scheduler", address, "--scheduler-timeout", "5"],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_iterating(train, tmp_path / "h.jsonl")
            assert train.poll() is None, "training ended before the scheduler was stopped"
            sched.send_signal(signal.SIGSTOP)
            try:
                _, err = train.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                train.kill()
                pytest.fail("training still waits on the stopped scheduler after 180 s")
        finally:
            sched.send_signal(signal.SIGCONT)
    assert train.returncode == 1, err
    _one_line(err, f"ooc-svm: error: the Dask scheduler at {address} did not answer for 5 s")
    assert not (tmp_path / "m").exists()


def test_stopped_scheduler_refuses_the_connection_within_its_timeout(tmp_path):
    _frozen_store(tmp_path)
    with dask_cli_cluster(1) as (address, procs):
        sched = procs[0]
        sched.send_signal(signal.SIGSTOP)
        try:
            r = subprocess.run(
                [sys.executable, "-m", "ooc_svm", "train", "s.zarr", "-o", "m"]
                + ["--scheduler", address, "--scheduler-timeout", "5"],
                cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=180,
            )  # fmt: skip
        finally:
            sched.send_signal(signal.SIGCONT)
    assert r.returncode == 1, r.stderr
    _one_line(r.stderr, f"ooc-svm: error: the Dask scheduler at {address} accepted the connection")
    assert "within 5 s" in r.stderr and not (tmp_path / "m").exists()
