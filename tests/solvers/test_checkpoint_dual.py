"""Checkpoint / resume and Ctrl-C of the dual solvers ``active-set`` and ``irwls``: a training
process SIGKILLed mid-run and resumed with ``--resume``
ends with the same model as the uninterrupted run (same support vectors, dual coefficients,
intercept and dual objective to 1e-12 relative); SIGINT stops a running RBF training within a
second with exit status 130."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import cpu_seconds, signal_at_checkpoint, wait_cpu_seconds
from conftest import default_sigint as _default_sigint
from conftest import latest_checkpoint_iteration as _latest_iteration
from sklearn.datasets import make_classification

from ooc_svm.model.model import load_model
from ooc_svm.store import csr_to_shards, write_store

# case -> (solver, flags making many small checkpointed steps)
CASES = {
    "active-set-rbf": (
        "active-set",
        ["--kernel", "rbf", "--gamma", "0.05", "--C", "10", "--sprint-size", "100"],
    ),
    "active-set-linear": ("active-set", ["--C", "1", "--sprint-size", "100"]),
    "irwls-rbf": (
        "irwls",
        ["--kernel", "rbf", "--gamma", "0.05", "--C", "10", "--working-set", "60"],
    ),
    "irwls-rbf-nocache": (
        "irwls",
        ["--kernel", "rbf", "--gamma", "0.05", "--C", "10", "--working-set", "60"]
        + ["--cache-mb", "0"],
    ),
    "irwls-linear": ("irwls", ["--C", "1", "--working-set", "60"]),
}


def _store_dir(tmp_path_factory, name: str, n_samples: int, shard_rows: int):
    """A directory holding ``s.zarr``: ``n_samples`` rows of a 20-feature binary problem."""
    X, y = make_classification(
        n_samples=n_samples, n_features=20, n_informative=10, flip_y=0.1, random_state=0
    )
    d = tmp_path_factory.mktemp(name)
    write_store(str(d / "s.zarr"), csr_to_shards(sp.csr_matrix(X), y, shard_rows=shard_rows))
    return d


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return _store_dir(tmp_path_factory, "ckd", 1500, 250)


def _args(case, out, ckpt):
    """The training of ``case``, saving a checkpoint after every iteration: with the default
    clock (saves when enough wall time has passed) a loaded machine made the killed run save
    at other iterations than the full one, and none at or past the one the kill waited for."""
    solver, flags = CASES[case]
    cmd = [sys.executable, "-m", "ooc_svm", "train", "--solver", solver, "s.zarr", "-o", out]
    return cmd + ["--json", "--checkpoint", ckpt, "--checkpoint-seconds", "1e-9", *flags]


def _start(args, cwd) -> subprocess.Popen:
    """Start ``args`` in ``cwd`` (output piped, text), stoppable by SIGINT."""
    return subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _run(args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("case", list(CASES))
def test_kill_and_resume_same_model(case, store):
    full = _run(_args(case, "full_" + case, "ck_full_" + case), store)
    assert full.returncode == 0, full.stderr
    n_ckpt = _latest_iteration(store / ("ck_full_" + case))
    assert n_ckpt >= 4, f"too few checkpoints ({n_ckpt}) to interrupt the run"

    ck = store / ("ck_" + case)
    out = "m_" + case
    # the run kills itself right after its first checkpoint at or past the middle
    p = _start(signal_at_checkpoint(_args(case, out, ck.name), n_ckpt // 2, signal.SIGKILL), store)
    p.communicate(timeout=600)
    assert p.returncode == -signal.SIGKILL, "training ended before it could be killed"
    assert not (store / out).exists()
    at = _latest_iteration(ck)
    assert at >= 1

    hist = store / ("resumed_" + case + ".jsonl")
    resumed = _run(_args(case, out, ck.name) + ["--resume", "--history", hist.name], store)
    assert resumed.returncode == 0, resumed.stderr
    # it really continued after the checkpoint, not from the start
    recs = [json.loads(x) for x in hist.read_text().splitlines() if '"header"' not in x]
    assert recs and min(r["iteration"] for r in recs) == at + 1
    a, b = load_model(str(store / ("full_" + case))), load_model(str(store / out))
    np.testing.assert_array_equal(b.support_, a.support_)
    np.testing.assert_allclose(b.dual_coef_, a.dual_coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-12, atol=1e-14)
    if a.coef_ is not None:
        np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-12, atol=1e-14)
    sa = json.loads(full.stdout.strip().splitlines()[-1])
    sb = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert sb["dual_objective"] == pytest.approx(sa["dual_objective"], rel=1e-12)
    assert sb["objective"] == pytest.approx(sa["objective"], rel=1e-12)
    assert sb["iterations"] == sa["iterations"]
    assert sb["passes"] == sa["passes"]


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    return _store_dir(tmp_path_factory, "ckd_int", 5000, 1000)


@pytest.mark.parametrize("solver", ["active-set", "irwls"])
@pytest.mark.parametrize("after", [0.0, 1.0])
def test_ctrl_c_within_a_second(solver, after, big_store):
    """SIGINT to a running RBF training: exit 130 with one 'interrupted' line within 1 CPU s
    (it took 1-2.5 s, or was swallowed by llvmlite and the run went on, or ended in a
    SystemError traceback from numba's dispatcher). ``after``: seconds after the second
    history record (the solver iterates)."""
    hist = big_store / f"h_{solver}_{after}.jsonl"
    out = big_store / f"m_{solver}_{after}"
    args = [sys.executable, "-m", "ooc_svm", "train", "--solver", solver, "s.zarr"]
    args += ["-o", out.name, "--kernel", "rbf", "--gamma", "0.05", "--C", "100"]
    args += ["--tol", "1e-6", "--history", hist.name]
    p = _start(args, big_store)
    deadline = time.time() + 300
    while p.poll() is None and time.time() < deadline:
        if hist.exists() and len(hist.read_text().splitlines()) >= 3:  # header + 2 records
            break
        time.sleep(0.005)
    time.sleep(after)
    assert p.poll() is None, "training ended before the signal: " + p.stderr.read()
    before = cpu_seconds(p.pid)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    used = wait_cpu_seconds(p, timeout=60) - before
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "ooc-svm: interrupted" and "Traceback" not in err
    # CPU seconds from the signal to the exit (wall seconds grow with the machine's load)
    assert used < 1.0, f"used {used:.2f} CPU s to stop"
    assert not out.exists()
