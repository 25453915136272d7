"""Issue 17, engine part: a Dask scheduler killed mid-training is one clear error, in bounded
time (finding 9: it was a raw ``AttributeError`` traceback)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.store import csr_to_shards, write_store

pytestmark = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scheduler_killed_mid_training_is_one_line_error(tmp_path):
    # noisy labels and a tight eps: perf needs many passes, so training outlives the kill
    rng = np.random.default_rng(17)
    n, d = 20000, 400
    X = sp.random(n, d, density=0.05, format="csr", random_state=17, dtype=np.float32)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=2000))
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    sched = subprocess.Popen(
        dask + ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        **quiet,
    )
    procs = [sched]
    try:
        time.sleep(1.0)
        procs.append(
            subprocess.Popen(
                dask + ["worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"],
                **quiet,
            )
        )
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(1, timeout=60)
        train = subprocess.Popen(
            [sys.executable, "-m", "ooc_svm", "-q", "train", "--solver", "perf", "s.zarr"]
            + ["-o", "m", "--C", "100", "--eps", "1e-6", "--max-iter", "100000"]
            + ["--scheduler", address],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(6.0)
        assert train.poll() is None, "training ended before the scheduler was killed"
        sched.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        try:
            _, err = train.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            train.kill()
            pytest.fail("training did not stop within 60 s of losing its scheduler")
        elapsed = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    assert train.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ooc-svm: error: lost the Dask scheduler at {address}"), err
    assert "Traceback" not in err
    assert elapsed < 15 + 10  # the default connect timeout, plus slack for a loaded machine
    assert not (tmp_path / "m").exists()
