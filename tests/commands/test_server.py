"""``ooc-svm server``: a warm server runs the commands of its install with the caller's
arguments, working directory, environment and standard streams, and the same results
(issue 26, goal 4). The processes are real: ``ooc-svm server start`` in the background,
``ooc-svm`` console processes in an empty directory with relative paths and no terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

EXE = str(Path(sys.executable).with_name("ooc-svm"))


@pytest.fixture
def env(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    e = {**os.environ, "XDG_RUNTIME_DIR": str(run)}
    e.pop("OOC_SVM_SERVER", None)
    yield e
    subprocess.run([EXE, "server", "stop"], env=e, capture_output=True, timeout=60)


def _ooc(args, cwd, env, **kw):
    return subprocess.run(
        [EXE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw
    )


def _log(env) -> str:
    logs = list((Path(env["XDG_RUNTIME_DIR"]) / "ooc-svm").glob("*.log"))
    return "".join(p.read_text() for p in logs)


def test_server_runs_commands_like_a_fresh_process(tmp_path, env, make_store):
    rng = np.random.default_rng(0)
    X = sp.random(600, 40, density=0.2, random_state=1, format="csr")
    y = np.where(X @ rng.standard_normal(40) > 0, 1, -1)
    make_store(X, y, name="s.zarr")
    work = tmp_path  # the store is tmp_path/s.zarr: every path below is relative
    cold = _ooc(["train", "s.zarr", "-o", "cold", "-q"], work, {**env, "OOC_SVM_SERVER": "0"})
    assert cold.returncode == 0, cold.stderr
    assert "not running" in _ooc(["server", "status"], work, env).stdout

    start = _ooc(["server", "start", "--idle-minutes", "5"], work, env, stdin=subprocess.DEVNULL)
    assert start.returncode == 0 and "ready" in start.stdout, start.stderr
    assert "running" in _ooc(["server", "status"], work, env).stdout

    warm = _ooc(["train", "s.zarr", "-o", "warm", "--json"], work, env, stdin=subprocess.DEVNULL)
    assert warm.returncode == 0, warm.stderr
    assert '"objective"' in warm.stdout.splitlines()[-1]  # standard output reached the caller
    assert "iter 0" in warm.stderr  # and standard error (progress lines)
    arrays = [(work / m / "arrays.npz").read_bytes() for m in ("cold", "warm")]
    assert arrays[0] == arrays[1]
    assert '"train", "s.zarr", "-o", "warm"' in _log(env)  # the server ran it

    # errors: the same message and status as a fresh process
    bad = _ooc(["train", "nope.zarr", "-o", "m"], work, env)
    assert bad.returncode == 1 and "nope.zarr: no such store" in bad.stderr
    assert '"exit": 1' in _log(env)
    # the environment of the caller: OOC_SVM_SERVER=0 runs here, not in the server
    n = _log(env).count("pid ")
    _ooc(["info", "s.zarr"], work, {**env, "OOC_SVM_SERVER": "0"})
    assert _log(env).count("pid ") == n

    stop = _ooc(["server", "stop"], work, env)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not list((Path(env["XDG_RUNTIME_DIR"]) / "ooc-svm").glob("*.sock"))
    again = _ooc(["train", "s.zarr", "-o", "after", "-q"], work, env)  # runs here again
    assert again.returncode == 0, again.stderr


def test_server_passes_stdin_and_relays_ctrl_c(tmp_path, env):
    start = _ooc(["server", "start", "--idle-minutes", "5"], tmp_path, env)
    assert start.returncode == 0, start.stderr
    # ingest from standard input: the command reads the caller's pipe
    r = _ooc(["ingest", "-", "t.zarr", "-q"], tmp_path, env, input="+1 1:0.5 3:1\n-1 2:1\n")
    assert r.returncode == 0, r.stderr
    info = _ooc(["info", "t.zarr", "--json"], tmp_path, env)
    assert '"n_rows": 2' in info.stdout
    # Ctrl-C while the command waits for its input: interrupted, status 130, nothing written
    p = subprocess.Popen(
        [EXE, "ingest", "-", "u.zarr"], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        # a suite run as a background job inherits SIGINT ignored (and so would ooc-svm)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    t0 = time.monotonic()
    while '"ingest", "-", "u.zarr"' not in _log(env) and time.monotonic() - t0 < 60:
        time.sleep(0.1)  # the server logs each command when it starts it
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err
    assert not (tmp_path / "u.zarr").exists()


def test_server_key_follows_startup_environment(monkeypatch):
    from ooc_svm.server import server_link

    base = server_link.server_key()
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    assert server_link.server_key() != base  # another server (or none) for other settings
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    monkeypatch.setenv("OOC_SVM_SOMETHING", "x")
    assert server_link.server_key() == base


def test_no_server_no_forwarding(tmp_path, monkeypatch):
    from ooc_svm.server import server_link

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert server_link.forward(["train", "s.zarr", "-o", "m"]) is None  # no folder
    (tmp_path / "ooc-svm").mkdir()
    server_link.socket_path().write_text("")  # a stale file, not a socket
    assert server_link.forward(["train", "s.zarr", "-o", "m"]) is None
    assert server_link.forward(["server", "status"]) is None
