"""Shared fixtures: the real datasets in ../shared/data (or $OOC_SVM_DATA), skipped when absent."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from ooc_svm.store.backends import backends

ROOT = Path(__file__).resolve().parents[1]

#: the store formats of the registry (:mod:`ooc_svm.store.backends`), by name and by usual
#: suffix: a test that runs on every format takes them from here
STORE_FORMATS = [b.name for b in backends()]
STORE_SUFFIXES = [b.suffixes[0] for b in backends()]


def data_dir() -> Path | None:
    env = os.environ.get("OOC_SVM_DATA")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


def dataset(rel: str) -> Path:
    """Path of a dataset file under the data directory, or skip the test with the reason."""
    d = data_dir()
    if d is None:
        pytest.skip("real datasets not found: set $OOC_SVM_DATA or put them in ../shared/data")
    p = d / rel
    if not p.exists():
        pytest.skip(f"dataset {rel} not found under {d}")
    return p


@pytest.fixture(autouse=True)
def _fresh_memory_budget():
    """Every test measures the process's memory budget afresh: an explicit budget one test
    set (``--memory-mb`` in-process) is not the next test's."""
    yield
    from ooc_svm import memory_budget

    memory_budget.set_explicit(None)


@pytest.fixture
def data_path():
    return dataset


def kernel_solvers() -> list[str]:
    """The ``--solver`` names of the registry's kernel solvers (their parameters have a
    kernel: smo, active-set, irwls), in its order: tests take them from here, not a list."""
    from ooc_svm.solvers.contract import solver_specs

    return [s.name for s in solver_specs() if s.kernels]


def build_store(
    path, X, y, qid=None, shard_rows: int = 1000, n_features: int | None = None, **write_kw
):
    """Write ``X`` (dense or sparse), ``y`` (and ``qid``) as a store at ``path`` and open it.

    The backend follows the suffix (``.zarr`` or ``.parquet``); ``shard_rows`` rows per shard.
    ``n_features`` defaults to ``X.shape[1]``; ``n_features=0`` leaves it to the data (the
    largest column used + 1). Other keywords (e.g. ``label_kind``) go to ``write_store``.
    """
    import numpy as np
    import scipy.sparse as sp

    from ooc_svm.store import open_store
    from ooc_svm.store.writer import csr_to_shards, write_store

    X = sp.csr_matrix(X, dtype=np.float32)
    n_features = X.shape[1] if n_features is None else n_features
    write_store(
        str(path),
        csr_to_shards(X, y, qid=qid, shard_rows=shard_rows),
        n_features=n_features,
        **write_kw,
    )
    return open_store(str(path))


@pytest.fixture
def make_store(tmp_path):
    """Factory fixture: ``make_store(X, y, qid=None, shard_rows=1000, name="s.zarr", ...)``
    writes a real store under the test's ``tmp_path`` (see :func:`build_store`) and returns it
    opened."""

    def make(X, y, qid=None, shard_rows: int = 1000, name: str = "s.zarr", n_features=None, **kw):
        return build_store(tmp_path / name, X, y, qid, shard_rows, n_features, **kw)

    return make


def ooc_cmd(*args: str) -> list[str]:
    """The command line that runs ``ooc-svm ARGS`` with this interpreter (no venv path)."""
    import sys

    return [sys.executable, "-m", "ooc_svm", *map(str, args)]


# ------------------------------------------------------------------------------------------
# Dask clusters started from the command line (`dask scheduler`, `dask worker`)
# ------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_workers(address: str, n: int, timeout: float = 300.0) -> None:
    """Block until the scheduler at ``address`` has ``n`` workers (``timeout``: a hang guard,
    generous: a loaded machine takes long to import Dask in each process)."""
    from distributed import Client

    with Client(address, timeout=timeout) as c:
        c.wait_for_workers(n, timeout=timeout)


def stop_procs(procs) -> None:
    """SIGTERM every process still running, then wait (15 s each) and kill what is left."""
    import signal
    import subprocess

    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


@contextlib.contextmanager
def dask_cli_cluster(n_workers: int = 2, cwd=None, scheduler_file=None):
    """`dask scheduler` + ``n_workers`` `dask worker` processes (one thread each, no nanny,
    output discarded) started in ``cwd``, as a user starts them from the command line.

    Yields ``(address, procs)`` once the workers are connected (``procs[0]`` is the
    scheduler); stops every process on exit (:func:`stop_procs`).
    """
    import subprocess
    import sys
    import time

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": cwd}
    sched = [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
    if scheduler_file is not None:
        sched += ["--scheduler-file", str(scheduler_file)]
    procs = [subprocess.Popen(sched, **quiet)]
    try:
        time.sleep(1.0)
        for k in range(n_workers):
            procs.append(
                subprocess.Popen(
                    [*dask, "worker", address, "--nthreads", "1", "--no-nanny"]
                    + ["--no-dashboard", "--name", f"w{k}"],
                    **quiet,
                )
            )
        wait_workers(address, n_workers)
        yield address, procs
    finally:
        stop_procs(procs)


# ------------------------------------------------------------------------------------------
# the CLI, real data and references shared by several test files
# ------------------------------------------------------------------------------------------


def run_ooc(*args: str, cwd=None, timeout: float = 300):
    """Run ``ooc-svm ARGS`` (this interpreter, stdin closed); the completed process, output
    captured as text."""
    import subprocess

    return subprocess.run(
        ooc_cmd(*args),
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def load_svmlight_int32(rel: str, n=None, n_features=None):
    """The first ``n`` rows of dataset ``rel`` (:func:`dataset`) as CSR with int32 indices
    (scikit-learn's SVC refuses int64 ones), and their labels."""
    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(dataset(rel)), n_features=n_features, zero_based=False)
    if n is not None:
        X, y = X[:n], y[:n]
    X = sp.csr_matrix(X)
    X.indices = X.indices.astype(np.int32)  # SVC refuses int64 indices
    X.indptr = X.indptr.astype(np.int32)
    return X, y


def sklearn_kernel(X, Y, kernel: str, gamma: float, degree: int = 3, coef0: float = 0.0):
    """The kernel matrix K(X, Y) by scikit-learn (the reference of the numba kernels)."""
    from sklearn.metrics import pairwise

    if kernel == "linear":
        return pairwise.linear_kernel(X, Y)
    if kernel == "rbf":
        return pairwise.rbf_kernel(X, Y, gamma=gamma)
    if kernel == "poly":
        return pairwise.polynomial_kernel(X, Y, degree=degree, gamma=gamma, coef0=coef0)
    return pairwise.sigmoid_kernel(X, Y, gamma=gamma, coef0=coef0)


def latest_checkpoint_iteration(ckpt) -> int:
    """The iteration of the newest checkpoint in directory ``ckpt`` (-1: none yet)."""
    try:
        name = (Path(ckpt) / "LATEST").read_text().strip()
    except OSError:
        return -1
    return int(name.split("-")[1])


_SIGNAL_AT_CHECKPOINT = """
import os, sys
from ooc_svm import checkpoint
at, signum, suffix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
save = checkpoint.Checkpointer.save
def save_then_signal(self, iteration, *args, **kwargs):
    path = save(self, iteration, *args, **kwargs)
    if iteration >= at and self.directory.endswith(suffix):
        os.kill(os.getpid(), signum)
    return path
checkpoint.Checkpointer.save = save_then_signal
from ooc_svm.cli import main
sys.exit(main(sys.argv[4:]))
"""


def signal_at_checkpoint(args, iteration: int, signum: int, directory_suffix: str = "") -> list:
    """The command line ``args`` (``[python, "-m", "ooc_svm", ...]``) made to send itself
    ``signum`` right after it wrote its first checkpoint of iteration >= ``iteration`` (in a
    checkpoint directory whose path ends with ``directory_suffix``): a kill at a point fixed
    by the run itself, not by a timer racing the training (a loaded machine made the run end
    before the test's poll saw a checkpoint)."""
    assert list(args[1:3]) == ["-m", "ooc_svm"], args
    sig = int(signum)
    return [args[0], "-c", _SIGNAL_AT_CHECKPOINT, str(iteration), str(sig), directory_suffix] + [
        str(a) for a in args[3:]
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (all its threads), from
    /proc: reaction times measured in CPU time do not grow with the machine's load."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_cpu_seconds(p, timeout: float = 120.0) -> float:
    """Wait for ``subprocess.Popen`` ``p`` to exit (killing it after ``timeout`` s) and
    return its total CPU seconds (``os.wait4``); sets ``p.returncode``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.01)
    p.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def default_sigint() -> None:
    """``preexec_fn`` of a child that must stop on SIGINT: a test run started in the
    background inherits SIGINT ignored; Ctrl-C needs the default."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fake_memory_budget(monkeypatch, nbytes: int):
    """Make the process's memory budget ``nbytes`` (as ``--memory-mb`` would, with no reserve
    and ooc-svm's code already loaded) for one test; returns the budget."""
    from ooc_svm import memory_budget as mb

    lim = mb.Limit("--memory-mb", int(nbytes), 0, "test")
    budget = mb.MemoryBudget((lim,), lim, int(nbytes), rss=int(mb.CODE_MB * 2**20))
    monkeypatch.setattr(mb, "_CURRENT", [budget])
    return budget


# ------------------------------------------------------------------------------------------
# Generated tables in the docs (docs/BENCHMARKS.md, docs/REPRODUCTION.md)
# ------------------------------------------------------------------------------------------
#: ``<!-- generated: python SCRIPT --render FILES -->`` TEXT ``<!-- end generated -->``
GENERATED_BLOCK = (
    r"<!-- generated: python (scripts/[\w/]+\.py) --render ([^>]+?) -->\n"
    r"(.*?)\n<!-- end generated -->"
)


def generated_blocks(doc) -> list[tuple[str, list[str], str]]:
    """``(script, files, text)`` of every generated block of the document ``doc``."""
    import re
    import shlex

    return [
        (m[1], shlex.split(m[2]), m[3].strip())
        for m in re.finditer(GENERATED_BLOCK, Path(doc).read_text(), re.S)
    ]


def render_block(root, script: str, files: list[str]) -> str:
    """What ``python SCRIPT --render FILES`` prints (its ``render`` function, imported)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(script).stem, Path(root) / script)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.render([str(Path(root) / f) for f in files]).strip()
