"""The README's quick start, run as written: every shell command of the "Command line" block,
then the "Python" block, then the "On a Dask cluster" block (a scheduler and 2 workers started
by its own `dask` lines on a free loopback port) and the "Probabilities" block, in an empty
directory with the relative paths the README uses (slow: ~6-8 minutes on 2 cores)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README_PORT = "8786"


def _block(section: str, lang: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {section}")
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert m is not None, f"no ```{lang} block under ## {section}"
    return m.group(1)


def _commands(block: str) -> list[str]:
    """The block's commands, comments (`  # ...`) and blank lines removed."""
    return [c for c in (line.split("  #")[0].strip() for line in block.splitlines()) if c]


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_quick_start_blocks_are_found():
    cmds = [c for c in _block("Command line", "sh").splitlines() if c.strip()]
    assert cmds and all(c.startswith("ooc-svm ") for c in cmds)
    assert "ooc_svm.train" in _block("Python", "python")
    dask = _commands(_block("On a Dask cluster", "sh"))
    assert [c.split()[:2] for c in dask if c.endswith("&")] == [
        ["dask", "scheduler"],
        ["dask", "worker"],
    ]
    assert all(README_PORT in c for c in dask), "every Dask line names the README's port"
    assert "--probability" in _block("Probabilities", "sh")
    train = [c for c in dask if c.startswith("ooc-svm train")]
    assert train and all(not a.startswith("/") for c in train for a in shlex.split(c)), (
        "the Dask example trains a relative store path, as a user in the quick start's "
        "directory would"
    )


@pytest.fixture(scope="module")
def quick_start_dir(tmp_path_factory):
    """An empty directory in which the "Command line" block has been run, line by line."""
    cwd = tmp_path_factory.mktemp("readme")
    for cmd in _commands(_block("Command line", "sh")):
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=1200
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    return cwd


@pytest.mark.slow
def test_readme_quick_start_runs_as_written(quick_start_dir):
    tmp_path = quick_start_dir
    for f in (
        "train.zarr",
        "test.parquet",
        "model",
        "scores.parquet",
        "conv.png",
        "roc.png",
        "m3",
        "m4",
    ):
        assert (tmp_path / f).exists(), f
    code = _block("Python", "python")
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    passes, *_ = shlex.split(r.stdout.replace("[", " ").replace("]", " "))
    assert int(passes) > 0


def _wait_for_workers(address: str, n: int, procs: list, timeout: float = 120.0) -> None:
    """Wait until the scheduler at ``address`` has ``n`` workers (what a user does by eye)."""
    from distributed import Client

    deadline = time.monotonic() + timeout
    while True:
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"exited early: {dead}"
        try:
            with Client(address, timeout=10) as c:
                c.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.cluster
def test_readme_dask_section_runs_as_written(quick_start_dir):
    """The Dask block in the quick start's directory: its `dask scheduler` / `dask worker ...
    --nworkers 2` lines started in the background (the port replaced by a free one), then its
    `ooc-svm` lines with their relative store and model paths; everything killed after."""
    cwd = quick_start_dir
    port = str(_free_port())
    address = f"tcp://127.0.0.1:{port}"
    env = _env()
    procs: list[subprocess.Popen] = []
    try:
        for cmd in _commands(_block("On a Dask cluster", "sh")):
            cmd = cmd.replace(README_PORT, port)
            if cmd.endswith("&"):
                procs.append(
                    subprocess.Popen(
                        ["bash", "-c", f"exec {cmd[:-1].strip()}"],
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,  # its own process group: killed as a whole
                    )
                )
                if cmd.startswith("dask worker"):
                    _wait_for_workers(address, 2, procs)
                continue
            r = subprocess.run(
                ["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200
            )
            assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
            assert "distributed." not in r.stderr, f"Dask log lines without -v:\n{r.stderr}"
        assert (cwd / "model-dask" / "model.json").is_file()
        assert (cwd / "scores-dask.parquet").is_file()
        # the Dask model is the local one: the same solver on the same store
        import numpy as np

        from ooc_svm.model.model import load_model

        w_local = load_model(str(cwd / "model")).coef_
        w_dask = load_model(str(cwd / "model-dask")).coef_
        np.testing.assert_allclose(w_dask, w_local, rtol=1e-6, atol=1e-9)
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.mark.slow
def test_readme_probabilities_run_as_written(quick_start_dir):
    """The "Probabilities" block in the quick start's directory; the probabilities it writes
    lie in [0, 1] and rise with the decision value."""
    import numpy as np
    import pyarrow.parquet as pq

    cwd = quick_start_dir
    for cmd in _commands(_block("Probabilities", "sh")):
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=1800
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    t = pq.read_table(str(cwd / "probs.parquet")).to_pydict()
    s, p = np.array(t["score"]), np.array(t["probability"])
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p[np.argsort(s, kind="stable")]) >= 0)
