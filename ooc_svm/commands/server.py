"""``ooc-svm server start|stop|status``: a warm server that takes the start-up off every
command (:mod:`ooc_svm.server`, :mod:`ooc_svm.server_link`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..server import server_link

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
command. It exits after --idle-minutes without a command, or with `ooc-svm server stop`."""


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
        type=float,
        default=30.0,
        help="start: exit after this many minutes without a command (default 30)",
    )
    p.add_argument("--json", action="store_true", help="status: one JSON object")
    p.set_defaults(func=run)


def _alive(path: Path) -> dict | None:
    """The pid file's content when the server of ``path`` runs, else None."""
    try:
        info = json.loads(path.with_suffix(".pid").read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return info if path.exists() else None


def run(args: argparse.Namespace) -> int:
    path = server_link.socket_path()
    return {"start": _start, "stop": _stop, "status": _status}[args.action](path, args)


def _start(path: Path, args: argparse.Namespace) -> int:
    if args.idle_minutes <= 0:
        print("ooc-svm server: error: --idle-minutes must be > 0", file=sys.stderr)
        return 1
    if info := _alive(path):
        print(f"ooc-svm server: already running (pid {info['pid']}, {path})")
        return 0
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
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
    while not (path.exists() and _alive(path)):
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
    info = _alive(path)
    if info is None:
        print("ooc-svm server: not running")
        return 0
    pid = int(info["pid"])
    os.kill(pid, 15)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    print(f"ooc-svm server: stopped (pid {pid})")
    return 0


def _status(path: Path, args: argparse.Namespace) -> int:
    info = _alive(path)
    out = {"running": info is not None, "socket": str(path)}
    if info:
        out.update(pid=info["pid"], up_s=round(time.time() - info["started"], 1))
        out["idle_minutes"] = info["idle_s"] / 60
    if args.json:
        print(json.dumps(out))
    elif info:
        print(
            f"ooc-svm server: running (pid {info['pid']}, up {out['up_s']:.0f} s, exits after "
            f"{out['idle_minutes']:g} idle minutes); socket {path}; log "
            f"{path.with_suffix('.log')}"
        )
    else:
        print(f"ooc-svm server: not running (for this install and environment: {path})")
    return 0
