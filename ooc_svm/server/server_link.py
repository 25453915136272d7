"""The ``ooc-svm`` process's link to a warm server (``ooc-svm server start``).

A command line pays ~0.5 s of start-up before its first shard is read: numpy, numba and zarr
imports, numba's CPU target, loading the cached kernels (issue 26, goal 4: on a9a that is
three times LIBLINEAR's whole run). A warm server has done all of that once; for each
command it forks a copy of itself, which runs the command with this process's arguments,
working directory, environment, standard input/output/error (the descriptors themselves,
passed over the socket: a terminal stays a terminal), umask, CPU affinity and resource
limits, and this process waits, forwards SIGINT/SIGTERM/SIGHUP to it and exits with its
status. Nothing changes in what a command computes or writes.

A server serves one install, one set of source files and one set of the environment
variables read when numba, OpenMP or BLAS load (``NUMBA_*``, ``OMP_*``, ...): its socket is
named after all three, so a changed checkout or a different ``NUMBA_NUM_THREADS`` finds no
server and runs in this process as before. ``OOC_SVM_SERVER=0`` runs in this process
whatever runs. Only the user who started a server can use it (the socket's folder is
private to the user, and the server checks the peer's uid).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import tempfile
from pathlib import Path

#: environment variables that shape a process when numba, OpenMP, BLAS or Python start
#: (a server started with other values would not run a command as a fresh process would)
_STARTUP_ENV = ("NUMBA_", "OMP_", "KMP_", "OPENBLAS_", "MKL_", "GOMP_", "PYTHON", "XDG_CACHE_HOME")
#: commands that always run in this process
_LOCAL = {"server"}
#: seconds to wait for a server to accept a command before running it here
HANDSHAKE_S = 10.0


def socket_dir() -> Path:
    """The user's private folder of server sockets: ``$XDG_RUNTIME_DIR/ooc-svm`` or
    ``/tmp/ooc-svm-<uid>``."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return Path(run) / "ooc-svm"
    return Path(tempfile.gettempdir()) / f"ooc-svm-{os.getuid()}"


def server_key() -> str:
    """Name of the server that can run this process's commands: install folder, source files
    (the numba cache's key), Python, and the start-up environment variables."""
    from .. import _numba_cache

    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{root}\n{_numba_cache.sources_key(root)}\n{sys.executable}\n".encode())
    for k in sorted(os.environ):
        if k.startswith(_STARTUP_ENV):
            h.update(f"{k}={os.environ[k]}\n".encode())
    return h.hexdigest()


def socket_path(key: str | None = None) -> Path:
    return socket_dir() / f"{key or server_key()}.sock"


def send_message(sock: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    """One length-prefixed JSON message, with descriptors attached when given."""
    data = json.dumps(obj).encode()
    head = struct.pack("!I", len(data))
    if fds:
        socket.send_fds(sock, [head + data], fds)
    else:
        sock.sendall(head + data)


def recv_message(sock: socket.socket, maxfds: int = 0) -> tuple[dict, list[int]]:
    """The message :func:`send_message` sent and the descriptors attached to it."""
    if maxfds:
        buf, fds, _, _ = socket.recv_fds(sock, 1 << 16, maxfds)
    else:
        buf, fds = sock.recv(1 << 16), []
    if len(buf) < 4:
        raise ConnectionError("short message")
    (n,) = struct.unpack("!I", buf[:4])
    buf = buf[4:]
    while len(buf) < n:
        more = sock.recv(n - len(buf))
        if not more:
            raise ConnectionError("message cut short")
        buf += more
    return json.loads(buf[:n]), list(fds)


def _request(argv: list[str]) -> dict:
    import resource

    limits = {}
    for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_NOFILE", "RLIMIT_CPU"):
        if hasattr(resource, name):
            limits[name] = resource.getrlimit(getattr(resource, name))[0]
    umask = os.umask(0)
    os.umask(umask)
    return {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": umask,
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "limits": limits,
    }


def forward(argv: list[str]) -> int | None:
    """Run ``ooc-svm ARGV`` in a warm server when one serves this process; its exit status,
    or None when there is none (or it cannot take the command): then run it here."""
    if os.environ.get("OOC_SVM_SERVER", "1") == "0" or not argv:
        return None
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is None or command in _LOCAL:
        return None
    if not socket_dir().is_dir():  # no server was ever started: the common case, one stat
        return None
    path = socket_path()
    if not path.exists():
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:  # a closed standard descriptor cannot be passed on
        return None
    relay = _Relay()  # from the connection on: a Ctrl-C is never lost or half-handled
    old = relay.install()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HANDSHAKE_S)
        sock.connect(str(path))
        send_message(sock, _request(argv), [0, 1, 2])
        hello, _ = recv_message(sock)
        relay.started(int(hello["pid"]))  # signals that came meanwhile go to it now
    except (OSError, ValueError, KeyError, ConnectionError):
        sock.close()
        relay.restore(old)
        if relay.pending:  # interrupted before any command started: nothing ran
            print("ooc-svm: interrupted", file=sys.stderr)
            return 130
        return None  # no server, a stale socket, or a server that did not answer: run here
    sock.settimeout(None)
    try:
        return _wait(sock)
    finally:
        relay.restore(old)


class _Relay:
    """Signal handlers of the waiting ``ooc-svm`` process: SIGINT, SIGTERM, SIGHUP and
    SIGQUIT go to the command's process; those that come before its pid is known are kept
    and sent when it is."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []

    def install(self) -> dict:
        old = {}
        for sig in self.SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
                old[sig] = signal.signal(sig, self)
        return old

    def restore(self, old: dict) -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def __call__(self, signum: int, frame: object) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def started(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            self._send(signum)

    def _send(self, signum: int) -> None:
        try:
            os.kill(int(self.pid or 0), signum)
        except ProcessLookupError:
            pass


def _wait(sock: socket.socket) -> int:
    """The command's exit status, when the server reports its end."""
    try:
        end, _ = recv_message(sock)
    except (OSError, ConnectionError, ValueError):
        print(
            "ooc-svm: error: the warm server ended without the command's exit status "
            "(see ooc-svm server status)",
            file=sys.stderr,
        )
        return 1
    finally:
        sock.close()
    if "signal" in end:  # killed: end the same way, so a shell reports the same
        signum = int(end["signal"])
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return int(end["exit"])
