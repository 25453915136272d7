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
    assert train.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ooc-svm: error: lost the Dask scheduler at {address}"), err
    assert "Traceback" not in err
    assert elapsed < 15 + 10  # the default connect timeout, plus slack for a loaded machine
    assert not (tmp_path / "m").exists()
