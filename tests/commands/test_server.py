"""``ooc-svm server``: a warm server runs the commands of its install with the caller's
arguments, working directory, environment and standard streams, and the same results.
The processes are real: ``ooc-svm server start`` in the background,
``ooc-svm`` console processes in an empty directory with relative paths and no terminal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
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
    # names that are not UTF-8: the same bytes and status
    odd = os.fsdecode(b"s\xff\xfe.zarr")
    shutil.copytree(work / "s.zarr", work / odd)
    n = _log(env).count(" started: ")
    _same(["info", odd], work, env)
    assert _log(env).count(" started: ") == n + 1  # the server ran it
    # standard output closed before the command writes (`| head` that quit): as unserved
    p = subprocess.Popen(
        [EXE, "info", "s.zarr"], cwd=work, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    p.stdout.close()
    assert (p.wait(timeout=300), p.stderr.read()) == (141, b"")  # cli._broken_pipe's
    p.stderr.close()
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
    # the server logs each command when it forks it; from then on a Ctrl-C at any moment
    # (before or after the command's "go", during its start-up or its read) ends it the same
    _served_pid(env, '"ingest", "-", "u.zarr"')
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert not (tmp_path / "u.zarr").exists()
    # the server ran it (the caller did not give up waiting and run it itself)
    assert "not started" not in _log(env) and '"exit": 130' in _log(env), _log(env)

    # the client killed with SIGKILL: its command goes too, and leaves the caller's pipes
    p = subprocess.Popen(
        [EXE, "ingest", "-", "k.zarr"], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: os.umask(0o067),
    )  # fmt: skip
    pid = _served_pid(env, '"ingest", "-", "k.zarr"')
    # the server logs the fork before the client's "go": a client killed before it leaves
    # a command that never starts ("not started"); wait for the "go" (the command then
    # takes on the caller's umask, 067 here), so that the kill is the one of a started one
    t0 = time.monotonic()
    while _umask(pid) != "0067":
        assert time.monotonic() - t0 < 600, "the command never started"  # a hang guard
        time.sleep(0.02)
    assert os.path.exists(f"/proc/{pid}")  # waiting for its input, which never comes
    p.kill()
    p.wait()
    assert _gone(pid), f"the command {pid} outlived its client"
    assert p.stdout.read() == b""  # end of file: no process holds the pipe any more
    for f in (p.stdin, p.stdout, p.stderr):
        f.close()
    assert not (tmp_path / "k.zarr").exists()
    assert "its caller went away: killed" in _log(env)

    # stop: a pid file that names another process does not make it the server
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        pidfile = next((Path(env["XDG_RUNTIME_DIR"]) / "ooc-svm").glob("*.pid"))
        real = json.loads(pidfile.read_text())["pid"]
        pidfile.write_text(json.dumps({"pid": sleeper.pid, "started": 0, "idle_s": 60}))
        assert f"pid {real}" in _ooc(["server", "status"], tmp_path, env).stdout
        stop = _ooc(["server", "stop"], tmp_path, env)
        assert stop.returncode == 0 and f"stopped (pid {real})" in stop.stdout, stop.stderr
        assert _gone(real) and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


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


def test_a_slow_server_on_a_loaded_machine_is_waited_for(tmp_path, monkeypatch):
    """The caller waits for a server's answer longer on a loaded machine: a fixed 10 s made a
    suite at nice 19 (load 26) give up on a server that was only slow, run the command
    itself and leave the server's fork unconfirmed."""
    import threading

    from ooc_svm.server import server_link

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("OOC_SVM_SERVER", raising=False)
    monkeypatch.setattr(server_link, "HANDSHAKE_S", 0.2)
    ncpu = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "getloadavg", lambda: (40.0 * ncpu, 0.0, 0.0))  # 40 per CPU
    assert server_link.handshake_seconds() == pytest.approx(8.0)
    folder = tmp_path / "ooc-svm"
    folder.mkdir(mode=0o700)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(server_link.socket_path()))
    srv.listen(1)
    got: list = []

    def slow_server() -> None:  # answers after 1 s, 5 times the unscaled wait
        conn = srv.accept()[0]
        request, fds = server_link.recv_message(conn, maxfds=3)
        for fd in fds:
            os.close(fd)
        time.sleep(1.0)
        server_link.send_message(conn, {"pid": 2**22 + 1})  # no such process: no signal sent
        got.append((request["argv"], server_link.recv_message(conn)[0]))
        server_link.send_message(conn, {"exit": 7})
        conn.close()

    t = threading.Thread(target=slow_server, daemon=True)
    t.start()
    try:
        assert server_link.forward(["info", "s.zarr"]) == 7  # served, not run here
    finally:
        t.join(60)
        srv.close()
    assert got == [(["info", "s.zarr"], {"go": True})]


# ------------------------------------------------------------------------------------------
# trust: a server is used only when it is provably this user's
# ------------------------------------------------------------------------------------------

ROOT = os.geteuid() == 0
OTHER_UID = 65534  # nobody
needs_root = pytest.mark.skipif(not ROOT, reason="a second uid needs root (setuid in a child)")


@pytest.fixture
def shared_tmp():
    """A sticky world-writable folder like /tmp (pytest's tmp_path is private to us)."""
    d = tempfile.mkdtemp(prefix="ooc-svm-test-")
    os.chmod(d, 0o1777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _fake_server(sock_path: Path, folder_mode: int | None, uid: int | None):
    """Fork a process (as ``uid`` when given) that listens at ``sock_path`` (creating its
    folder with ``folder_mode`` when given) and records how many bytes clients send it.
    Returns ``(pid, read_result)``; ``read_result()`` ends it and returns the byte count."""
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(ready_r)
            os.close(out_r)
            os.close(stop_w)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            if folder_mode is not None:
                sock_path.parent.mkdir(exist_ok=True)
                os.chmod(sock_path.parent, folder_mode)
            srv = socket.socket(socket.AF_UNIX)
            srv.bind(str(sock_path))
            os.chmod(sock_path, 0o777)
            srv.listen(8)
            os.write(ready_w, b"r")
            got = 0
            srv.setblocking(False)
            conns = []
            import select

            while True:
                r, _, _ = select.select([srv, stop_r, *conns], [], [], 60)
                if stop_r in r or not r:
                    break
                if srv in r:
                    conns.append(srv.accept()[0])
                for c in [c for c in conns if c in r]:
                    data = c.recv(1 << 16)
                    got += len(data)
                    if not data:
                        conns.remove(c)
            os.write(out_w, str(got).encode())
        finally:
            os._exit(0)
    for fd in (ready_w, out_w, stop_r):
        os.close(fd)
    assert os.read(ready_r, 1) == b"r"
    os.close(ready_r)

    def result() -> int:
        os.close(stop_w)
        got = int(os.read(out_r, 64))
        os.close(out_r)
        os.waitpid(pid, 0)
        return got

    return pid, result


def test_private_folder_checks(tmp_path):
    from ooc_svm._private_folder import make_private_folder, open_private_folder

    good = tmp_path / "good"
    os.close(make_private_folder(good))
    assert stat.S_IMODE(good.stat().st_mode) == 0o700
    os.close(open_private_folder(good))
    with pytest.raises(FileNotFoundError):
        open_private_folder(tmp_path / "none")
    loose = tmp_path / "loose"
    loose.mkdir()
    for mode in (0o777, 0o770, 0o707, 0o750, 0o701):  # any group or other bit
        os.chmod(loose, mode)
        with pytest.raises(PermissionError, match=f"mode {mode:04o}"):
            open_private_folder(loose)
    (loose / "x.pid").symlink_to(tmp_path / "target")  # planted while it was open
    (loose / "mine.log").write_text("kept")
    if ROOT:
        (loose / "theirs").mkdir()
        os.chown(loose / "theirs", OTHER_UID, OTHER_UID)
    os.close(make_private_folder(loose))  # ours: made private, and cleared of the rest
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    assert sorted(p.name for p in loose.iterdir()) == ["mine.log"]
    link = tmp_path / "link"
    link.symlink_to(good)  # a link to a good folder is still refused
    for check in (open_private_folder, make_private_folder):
        with pytest.raises(PermissionError, match="symbolic link"):
            check(link)
    (tmp_path / "file").write_text("")
    with pytest.raises(PermissionError):
        open_private_folder(tmp_path / "file")
    if ROOT:  # another user's folder: refused, and never changed
        other = tmp_path / "other"
        other.mkdir()
        os.chmod(other, 0o777)
        os.chown(other, OTHER_UID, OTHER_UID)
        for check in (open_private_folder, make_private_folder):
            with pytest.raises(PermissionError, match=f"owned by uid {OTHER_UID}"):
                check(other)
        assert stat.S_IMODE(other.stat().st_mode) == 0o777
        assert other.stat().st_uid == OTHER_UID


@pytest.mark.parametrize("case", ["world-writable", "group-writable", "symlink", "owner"])
def test_client_sends_nothing_to_an_untrusted_folder(tmp_path, monkeypatch, capsys, case):
    from ooc_svm.server import server_link

    if case == "owner" and not ROOT:
        pytest.skip("another user's folder needs root (chown)")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("OOC_SVM_SERVER", raising=False)
    folder = tmp_path / "ooc-svm"
    real = tmp_path / "real" if case == "symlink" else folder
    real.mkdir(mode=0o700)
    if case == "symlink":
        folder.symlink_to(real)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(real / server_link.socket_path().name))
    sock.listen(1)
    sock.setblocking(False)
    if case == "world-writable":
        os.chmod(real, 0o777)
    elif case == "group-writable":
        os.chmod(real, 0o770)
    elif case == "owner":
        os.chown(real, OTHER_UID, OTHER_UID)
    assert server_link.forward(["info", "s.zarr"]) is None  # runs here
    assert server_link.forward(["-v", "info", "s.zarr"]) is None
    assert "warm server not used" in capsys.readouterr().err  # one line under -v
    with pytest.raises(BlockingIOError):
        sock.accept()  # nobody connected: not a byte was sent
    sock.close()


@needs_root
def test_client_checks_the_servers_uid(tmp_path, shared_tmp, monkeypatch):
    """Folder and socket file are ours (root moved another user's socket in): only the
    server's uid, read from the connection, tells; nothing may be sent."""
    from ooc_svm.server import server_link

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("OOC_SVM_SERVER", raising=False)
    target = server_link.socket_path()
    target.parent.mkdir(mode=0o700)
    theirs = shared_tmp / "theirs.sock"
    _, result = _fake_server(theirs, None, OTHER_UID)
    os.rename(theirs, target)
    os.chown(target, 0, 0)
    assert server_link.forward(["info", "s.zarr"]) is None
    assert result() == 0


@needs_root
def test_squatted_socket_folder_gets_nothing(tmp_path, shared_tmp, make_store):
    """Another user creates /tmp/ooc-svm-<uid> (0777) first and listens there under this
    user's key: this user's commands run in their own process and send it nothing;
    `server start` refuses the folder and leaves it as it is."""
    from ooc_svm.server import server_link

    rng = np.random.default_rng(0)
    X = sp.random(50, 8, density=0.5, random_state=1, format="csr")
    make_store(X, np.where(rng.standard_normal(50) > 0, 1, -1), name="s.zarr")
    env = {**os.environ, "TMPDIR": str(shared_tmp), "SECRET": "victim-secret"}
    for k in ("XDG_RUNTIME_DIR", "OOC_SVM_SERVER"):
        env.pop(k, None)
    folder = shared_tmp / f"ooc-svm-{os.getuid()}"
    sock_path = folder / f"{server_link.server_key()}.sock"
    _, result = _fake_server(sock_path, 0o777, OTHER_UID)
    alone = _ooc(["info", "s.zarr"], tmp_path, {**env, "OOC_SVM_SERVER": "0"})
    r = _ooc(["info", "s.zarr"], tmp_path, env, stdin=subprocess.DEVNULL)
    assert (r.returncode, r.stdout, r.stderr) == (0, alone.stdout, alone.stderr)
    v = _ooc(["-v", "info", "s.zarr"], tmp_path, env, stdin=subprocess.DEVNULL)
    assert v.returncode == 0 and f"owned by uid {OTHER_UID}" in v.stderr
    start = _ooc(["server", "start"], tmp_path, env, stdin=subprocess.DEVNULL)
    assert start.returncode == 1 and f"owned by uid {OTHER_UID}" in start.stderr
    status = _ooc(["server", "status"], tmp_path, env)
    assert "not running" in status.stdout and "not this user's" in status.stdout
    assert result() == 0  # the squatter received nothing
    st = folder.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (OTHER_UID, 0o777)  # never changed


def test_framing_two_messages_in_one_read():
    from ooc_svm.server.server_link import recv_message, send_message

    a, b = socket.socketpair()
    with a, b:
        send_message(a, {"pid": 12})
        send_message(a, {"exit": 3})  # both are in b's buffer before the first read
        a.sendall(b'\x00\x00\x00\x10{"exit')  # and a third, cut short
        a.shutdown(socket.SHUT_WR)
        assert recv_message(b) == ({"pid": 12}, [])
        assert recv_message(b) == ({"exit": 3}, [])
        with pytest.raises(ConnectionError, match="cut short"):
            recv_message(b)
        with pytest.raises(ConnectionError):
            recv_message(b)
    a, b = socket.socketpair()
    with a, b:  # names that are not UTF-8 (surrogate escapes) pass unchanged
        name = os.fsdecode(b"s\xff\xfe.zarr")
        send_message(a, {"argv": ["info", name]})
        assert recv_message(b)[0] == {"argv": ["info", name]}


def test_stop_never_signals_a_stale_pid(tmp_path, env):
    """A server killed with -9 leaves its socket and pid file; the pid is reused by another
    process: `stop` and `status` must not take that process for the server."""
    from ooc_svm.server import server_link

    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        folder = Path(env["XDG_RUNTIME_DIR"]) / "ooc-svm"
        folder.mkdir(mode=0o700)
        path = folder / f"{server_link.server_key()}.sock"
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(path))  # a socket nobody listens on any more
        dead.close()
        path.with_suffix(".pid").write_text(
            json.dumps({"pid": sleeper.pid, "started": time.time(), "idle_s": 60})
        )
        for action in ("status", "stop"):
            r = _ooc(["server", action], tmp_path, env)
            assert r.returncode == 0 and "not running" in r.stdout, r
        assert sleeper.poll() is None  # alive: never signalled
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------------------------------
# served runs: the same bytes and statuses; a command ends with its client
# ------------------------------------------------------------------------------------------


def _served_pid(env, marker: str, deadline_s: float = 600) -> int:
    """The pid of the command the server logged as started with ``marker`` in its argv."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        for line in _log(env).splitlines():
            if marker in line and " started: " in line:
                return int(line.split(" pid ")[1].split()[0])
        time.sleep(0.05)
    raise AssertionError(f"the server never started {marker}: {_log(env)}")


def _umask(pid: int) -> str | None:
    """The umask of process ``pid`` (``/proc/PID/status``), e.g. ``"0022"``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return line.split()[1]
    except OSError:
        pass
    return None


def _gone(pid: int, deadline_s: float = 300) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.05)
    return False


def _same(args, cwd, env) -> subprocess.CompletedProcess:
    """Run ``ooc-svm ARGS`` (bytes allowed) unserved and served; assert the same status,
    standard output and error bytes; the served run."""
    runs = [
        subprocess.run(
            [os.fsencode(EXE), *map(os.fsencode, args)],
            cwd=cwd,
            env=e,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )  # fmt: skip
        for e in ({**env, "OOC_SVM_SERVER": "0"}, env)
    ]
    alone, served = ((r.returncode, r.stdout, r.stderr) for r in runs)
    assert served == alone, (args, alone, served)
    return runs[1]


@pytest.mark.slow
def test_forty_concurrent_served_commands(tmp_path, env, make_store):
    """40 short commands at once (successes, failures, JSON): 40 exact statuses and outputs."""
    rng = np.random.default_rng(0)
    X = sp.random(100, 10, density=0.3, random_state=1, format="csr")
    make_store(X, np.where(rng.standard_normal(100) > 0, 1, -1), name="s.zarr")
    assert _ooc(["server", "start", "--idle-minutes", "5"], tmp_path, env).returncode == 0
    kinds = [["info", "s.zarr"], ["info", "nope.zarr"], ["info", "s.zarr", "--json"], ["--version"]]
    ref = {tuple(c): _same(c, tmp_path, env) for c in kinds}
    n = _log(env).count(" started: ")
    cmds = [kinds[i % len(kinds)] for i in range(40)]
    procs = [
        (c, subprocess.Popen([EXE, *c], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for c in cmds
    ]  # fmt: skip
    wrong = []
    for c, p in procs:
        out, err = p.communicate(timeout=600)
        r = ref[tuple(c)]
        if (p.returncode, out, err) != (r.returncode, r.stdout, r.stderr):
            wrong.append((c, p.returncode, err))
    assert not wrong, wrong
    assert _log(env).count(" started: ") == n + 30  # --version runs in its own process


@pytest.mark.slow
def test_served_train_dies_with_its_sigkilled_client(tmp_path, env, make_store):
    """`timeout -s KILL`, `kill -9`, the OOM killer: a training whose client dies is killed
    by the server, writes no model and leaves the caller's pipes (it used to run on)."""
    rng = np.random.default_rng(0)
    X = sp.random(200, 10, density=0.3, random_state=1, format="csr")
    make_store(X, np.where(rng.standard_normal(200) > 0, 1, -1), name="s.zarr")
    assert _ooc(["server", "start", "--idle-minutes", "5"], tmp_path, env).returncode == 0
    silent = socket.socket()  # a "scheduler" that accepts and never answers: train waits
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    try:
        p = subprocess.Popen(
            [EXE, "train", "s.zarr", "-o", "m", "--scheduler", address], cwd=tmp_path,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        pid = _served_pid(env, '"train", "s.zarr", "-o", "m"')
        p.kill()
        p.wait()
        assert _gone(pid), f"the training {pid} outlived its client"
        assert p.stdout.read() == b"" and p.stderr.read() == b""  # pipes at end of file
        for f in (p.stdout, p.stderr):
            f.close()
        ends = [line for line in _log(env).splitlines() if f"pid {pid} {{" in line]
        assert ends and "its caller went away: killed" in ends[0], ends  # not its own end
        assert not (tmp_path / "m").exists()
    finally:
        silent.close()
