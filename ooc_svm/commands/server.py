"""``ooc-svm server start|stop|status``: a warm server that takes the start-up off every
command (:mod:`ooc_svm.server`, :mod:`ooc_svm.server.server_link`)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._private_folder import make_private_folder
from ..server import server_link
from ._common import FLOAT

if TYPE_CHECKING:
    import argparse

_DESCRIPTION = """\
Keep ooc-svm's start-up (imports, numba's kernels: ~0.5 s of CPU) in a background server,
so that each later command of this user starts in a few milliseconds: the server forks a
warm copy of itself for every ooc-svm command run while it is up, with that command's
arguments, working directory, environment, terminal, CPU affinity and resource limits.
Results are the same as without it. For many short commands (a grid of C values in a shell
loop, small stores); a long training gains only the start-up.

A server serves the checkout or install it was started from, with the NUMBA_*, OMP_*, ...
variables it was started with: after an update, or with other such variables, commands run
in their own process as before (start a new server). OOC_SVM_SERVER=0 bypasses it for one
command. It exits after --idle-minutes without a command, or with `ooc-svm server stop`.

Only this user's server is ever used: its socket folder ($XDG_RUNTIME_DIR/ooc-svm, else
$TMPDIR/ooc-svm-UID) must be a real folder owned by you with mode 0700, and the server must
run as you; otherwise commands run in their own process (-v says why) and `start` refuses.
A command ends with its caller: killing the ooc-svm process (even with kill -9) kills it."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "server",
        help="start/stop a warm server that takes the start-up off every command",
        description=_DESCRIPTION,
        epilog="examples:\n  ooc-svm server start\n  for c in 0.1 1 10; do ooc-svm train "
        "a9a.zarr --C $c -o m$c; done\n  ooc-svm server status\n  ooc-svm server stop",
        formatter_class=HelpFormatter,
    )
    p.add_argument("action", choices=["start", "stop", "status"], help="what to do")
    p.add_argument(
        "--idle-minutes",
        type=FLOAT,
        default=30.0,
        help="start: exit after this many minutes without a command (default 30)",
    )
    p.add_argument("--json", action="store_true", help="status: one JSON object")
    p.set_defaults(func=run)


def _pid_file(path: Path) -> dict:
    try:
        info = json.loads(path.with_suffix(".pid").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _find(path: Path) -> tuple[dict | None, int | None]:
    """The server listening at ``path``: ``({"pid": ..., pid file's fields}, pidfd)``, or
    ``(None, None)`` when none answers. Its pid is the one the kernel reports for the
    socket's listener (never the pid file's alone), and the pidfd, opened while connected,
    names that process only: a signal sent through it can reach no other.

    Raises
    ------
    PermissionError
        The socket's folder, the socket or the server is not this user's.
    """
    try:
        sock = server_link.connect_trusted(path, timeout=10.0)
    except PermissionError:
        raise
    except OSError:  # no answer within the timeout (a server stopped with SIGSTOP, say)
        return None, None
    if sock is None:
        return None, None
    try:
        pid, _ = server_link.peer_ids(sock)
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # Linux before 5.3: the start time below
            pidfd = None
    finally:
        sock.close()
    info: dict = {"pid": pid}
    recorded = _pid_file(path)
    if recorded.get("pid") == pid:
        start = recorded.get("start_ticks")
        if start is not None and start != server_link.proc_start_time(pid):
            if pidfd is not None:
                os.close(pidfd)
            return None, None  # it ended since: that pid is another process's now
        info.update(recorded)
    if pidfd is None and server_link.proc_start_time(pid) is None:
        return None, None
    return info, pidfd


def _refused(e: OSError) -> str:
    return (
        f"{e}: not this user's, so not used (commands run in their own process); remove it, "
        "or set XDG_RUNTIME_DIR to a private folder"
    )


def run(args: argparse.Namespace) -> int:
    path = server_link.socket_path()
    return {"start": _start, "stop": _stop, "status": _status}[args.action](path, args)


def _start(path: Path, args: argparse.Namespace) -> int:
    if args.idle_minutes <= 0:
        print("ooc-svm server: error: --idle-minutes must be > 0", file=sys.stderr)
        return 1
    try:
        os.close(make_private_folder(path.parent))  # never someone else's folder
        info, pidfd = _find(path)
    except PermissionError as e:
        print(f"ooc-svm server: error: {_refused(e)}", file=sys.stderr)
        return 1
    if pidfd is not None:
        os.close(pidfd)
    if info:
        print(f"ooc-svm server: already running (pid {info['pid']}, {path})")
        return 0
    # not ``-m``: the module runs under its own name (its logger's)
    code = "import sys; from ooc_svm.server.server import main; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "--socket", str(path)]
    cmd += ["--idle", str(args.idle_minutes * 60)]
    with open(path.with_suffix(".log"), "a") as logf:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
            env={**os.environ, "OOC_SVM_SERVER": "0"},
        )  # fmt: skip
    t0 = time.monotonic()
    while True:
        if path.exists():
            info, pidfd = _find(path)
            if pidfd is not None:
                os.close(pidfd)
            if info and info["pid"] == proc.pid:
                break
        if proc.poll() is not None:
            print(
                f"ooc-svm server: error: the server ended at start-up (status "
                f"{proc.returncode}); see {path.with_suffix('.log')}",
                file=sys.stderr,
            )
            return 1
        if time.monotonic() - t0 > 300:
            proc.terminate()
            print("ooc-svm server: error: not ready after 300 s; stopped", file=sys.stderr)
            return 1
        time.sleep(0.05)
    print(
        f"ooc-svm server: ready in {time.monotonic() - t0:.1f} s (pid {proc.pid}, {path}); "
        f"ooc-svm commands now start warm; `ooc-svm server stop` ends it"
    )
    return 0


def _stop(path: Path, args: argparse.Namespace) -> int:
    try:
        info, pidfd = _find(path)
    except PermissionError as e:
        print(f"ooc-svm server: error: {_refused(e)}", file=sys.stderr)
        return 1
    if info is None:  # a pid file left by a killed server names nobody we may signal
        print("ooc-svm server: not running")
        return 0
    pid = int(info["pid"])
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            gone = bool(select.select([pidfd], [], [], 30.0)[0])  # readable once it ended
        else:
            os.kill(pid, signal.SIGTERM)
            gone = _gone_within(pid, info.get("start_ticks"), 30.0)
    except ProcessLookupError:
        gone = True
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if not gone:
        print(
            f"ooc-svm server: error: pid {pid} still runs 30 s after SIGTERM "
            f"(stopped with SIGSTOP?); `kill -9 {pid}` ends it",
            file=sys.stderr,
        )
        return 1
    print(f"ooc-svm server: stopped (pid {pid})")
    return 0


def _gone_within(pid: int, start: int | None, seconds: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        now = server_link.proc_start_time(pid)
        if now is None or (start is not None and now != start):
            return True
        time.sleep(0.05)
    return False


def _status(path: Path, args: argparse.Namespace) -> int:
    try:
        info, pidfd = _find(path)
        problem = None
    except PermissionError as e:
        info, pidfd, problem = None, None, _refused(e)
    if pidfd is not None:
        os.close(pidfd)
    out = {"running": info is not None, "socket": str(path)}
    if info and "started" in info:
        out.update(pid=info["pid"], up_s=round(time.time() - info["started"], 1))
        out["idle_minutes"] = info["idle_s"] / 60
    elif info:
        out["pid"] = info["pid"]
    if problem:
        out["problem"] = problem
    if args.json:
        print(json.dumps(out))
    elif info and "started" in info:
        print(
            f"ooc-svm server: running (pid {info['pid']}, up {out['up_s']:.0f} s, exits after "
            f"{out['idle_minutes']:g} idle minutes); socket {path}; log "
            f"{path.with_suffix('.log')}"
        )
    elif info:
        print(f"ooc-svm server: running (pid {info['pid']}); socket {path}")
    elif problem:
        print(f"ooc-svm server: not running: {problem}")
    else:
        print(f"ooc-svm server: not running (for this install and environment: {path})")
    return 0
