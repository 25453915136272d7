"""The ``ooc-svm`` process's link to a warm server (``ooc-svm server start``).

A command line pays ~0.5 s of start-up before its first shard is read: numpy, numba and zarr
imports, numba's CPU target, loading the cached kernels (on a9a that is
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
whatever runs.

Trust, both ways: a command (its arguments, environment and standard streams) goes only to a
server that is provably this user's. The socket's folder must be a real folder (not a
symbolic link), owned by this uid, mode 0700, and the socket in it owned by this uid; after
connecting, the server's uid (``SO_PEERCRED``) must be this uid, checked before a byte is
sent. Anything else (a folder another user made first in a shared ``/tmp``, say) is not
used: the command runs in this process (``-v`` says why). The server checks the client's
uid the same way.

The protocol: the request (with descriptors 0-2 attached), the command process's pid back,
a "go" from this process, and the exit status. The command starts only on "go", so until
then this process may still run it itself (nothing ran in the server); after it, the
command belongs to this process: the server kills it when this process goes away (even
by SIGKILL), and the status is the command's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

# the trust checks of the sockets' folder (numba's cache, below this module, uses them too)
from .._private_folder import open_private_folder

#: environment variables that shape a process when numba, OpenMP, BLAS or Python start
#: (a server started with other values would not run a command as a fresh process would)
_STARTUP_ENV = ("NUMBA_", "OMP_", "KMP_", "OPENBLAS_", "MKL_", "GOMP_", "PYTHON", "XDG_CACHE_HOME")
#: commands that always run in this process
_LOCAL = {"server"}
#: seconds to wait for a server to accept a command before running it here, on an idle
#: machine (:func:`handshake_seconds` scales it with the load)
HANDSHAKE_S = 30.0


def handshake_seconds() -> float:
    """How long to wait for a server's answer: :data:`HANDSHAKE_S` times the load per CPU
    (at least 1). A server niced or sharing the CPUs with many busy processes forks slowly
    (a suite at nice 19 under a load of 26 took more than 10 s); giving up then runs the
    command here after all, so the wait only has to tell a slow server from a hung one."""
    try:
        per_cpu = os.getloadavg()[0] / max(1, len(os.sched_getaffinity(0)))
    except (OSError, AttributeError):  # pragma: no cover - no load average
        per_cpu = 1.0
    return HANDSHAKE_S * max(1.0, per_cpu)


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
    # arguments, paths and environment are decoded with it (a server started under another
    # locale would read the same bytes as other names)
    h.update(f"{sys.getfilesystemencoding()}:{sys.getfilesystemencodeerrors()}\n".encode())
    for k in sorted(os.environ):
        if k.startswith(_STARTUP_ENV):
            h.update(os.fsencode(f"{k}={os.environ[k]}\n"))
    return h.hexdigest()


def socket_path(key: str | None = None) -> Path:
    return socket_dir() / f"{key or server_key()}.sock"


def send_message(sock: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    """One length-prefixed JSON message, with descriptors attached when given. JSON's
    ``\\u`` escapes carry every string as it is, lone surrogates included (the
    ``surrogateescape`` form of arguments, paths and environment values that are not UTF-8)."""
    data = json.dumps(obj, ensure_ascii=True).encode("ascii")
    head = struct.pack("!I", len(data))
    if fds:
        socket.send_fds(sock, [head + data], fds)
    else:
        sock.sendall(head + data)


#: the longest message accepted (a request is the environment and arguments: kilobytes)
MAX_MESSAGE = 64 << 20


def _recv_exact(sock: socket.socket, n: int, maxfds: int = 0) -> tuple[bytes, list[int]]:
    """Exactly ``n`` bytes, and the descriptors attached to them: never a byte of the next
    message (two messages often arrive in one segment)."""
    buf = bytearray()
    fds: list[int] = []
    while len(buf) < n:
        if maxfds and not fds:
            data, got, _, _ = socket.recv_fds(sock, n - len(buf), maxfds)
            fds += got
        else:
            data = sock.recv(n - len(buf))
        if not data:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("connection closed" if not buf else "message cut short")
        buf += data
    return bytes(buf), fds


def recv_message(sock: socket.socket, maxfds: int = 0) -> tuple[dict, list[int]]:
    """The next message :func:`send_message` sent and the descriptors attached to it.

    Raises
    ------
    ConnectionError
        The peer closed the connection (before or within the message), or sent a length no
        message has.
    """
    head, fds = _recv_exact(sock, 4, maxfds)
    (n,) = struct.unpack("!I", head)
    if n > MAX_MESSAGE:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"message of {n} bytes")
    try:
        data, more = _recv_exact(sock, n, maxfds - len(fds) if maxfds else 0)
        obj = json.loads(data)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return obj, fds + more


def proc_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``), or None
    where it cannot be read: with the pid, it names one process, never a later one that
    reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[19])  # field 22, after "comm"
    except (OSError, ValueError, IndexError):
        return None


def peer_ids(sock: socket.socket) -> tuple[int, int]:
    """The (pid, uid) of the process at the other end of a connected Unix socket, as the
    kernel recorded them (``SO_PEERCRED``: when it connected, or listened)."""
    fmt = "3i"
    pid, uid, _ = struct.unpack(
        fmt, sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
    )
    return pid, uid


def _in_folder(fd: int, folder: Path, name: str) -> str:
    """A path to ``name`` in the folder open as ``fd``: through the descriptor (the folder
    that was checked, whatever happens to its path since; and short enough for a socket
    address) where ``/proc`` allows, else through its path."""
    via = f"/proc/self/fd/{fd}/{name}"
    if len(via) < 100 and os.path.isdir(f"/proc/self/fd/{fd}"):
        return via
    return str(folder / name)


def connect_trusted(path: Path, timeout: float) -> socket.socket | None:
    """A connection to the server socket ``path`` when it is provably this user's: its
    folder private (:func:`~ooc_svm._private_folder.open_private_folder`), the socket owned
    by this uid, and the server's uid, read from the connection before anything is sent,
    this uid.
    None when there is no server there (no folder, no socket, nobody listening).

    Raises
    ------
    PermissionError
        Something there is not this user's: nothing may be sent (the message says what).
    """
    if not hasattr(socket, "SO_PEERCRED"):  # cannot tell whose server it is
        raise PermissionError("this system cannot tell a server's user (no SO_PEERCRED)")
    try:
        dfd = open_private_folder(path.parent)
    except FileNotFoundError:  # no server was ever started
        return None
    try:
        try:
            st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            what = f"owned by uid {st.st_uid}" if stat.S_ISSOCK(st.st_mode) else "not a socket"
            raise PermissionError(f"{path}: {what}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(_in_folder(dfd, path.parent, path.name))
            _, uid = peer_ids(sock)
            if uid != os.getuid():
                raise PermissionError(f"{path}: the server runs as uid {uid}, not {os.getuid()}")
        except (ConnectionRefusedError, FileNotFoundError):  # a stale socket
            sock.close()
            return None
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(dfd)


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
        # how this process's standard streams encode: the command's are made the same
        "stdio": [
            [getattr(f, "encoding", None), getattr(f, "errors", None)]
            for f in (sys.stdin, sys.stdout, sys.stderr)
        ],
    }


def _interrupted() -> int:
    print("ooc-svm: interrupted", file=sys.stderr)
    return 130


def _verbose(argv: list[str]) -> bool:
    """Whether ``-v`` / ``--verbose`` is among the options."""
    for a in argv:
        if a == "--":
            break
        if a == "--verbose" or (len(a) > 1 and a[0] == "-" and set(a[1:]) == {"v"}):
            return True
    return False


def forward(argv: list[str]) -> int | None:
    """Run ``ooc-svm ARGV`` in a warm server when one serves this process; its exit status,
    or None when there is none (or it cannot take the command, or it is not provably this
    user's): then run it here."""
    if os.environ.get("OOC_SVM_SERVER", "1") == "0" or not argv:
        return None
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is None or command in _LOCAL:
        return None
    if not os.path.lexists(socket_dir()):  # no server was ever started: the common case
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:  # a closed standard descriptor cannot be passed on
        return None
    relay = _Relay()  # from the connection on: a Ctrl-C is never lost or half-handled
    old = relay.install()
    sock = None
    try:
        sock = connect_trusted(socket_path(), handshake_seconds())
        if sock is None:  # no server: the common case
            relay.restore(old)
            return _interrupted() if relay.pending else None
        send_message(sock, _request(argv), [0, 1, 2])
        hello, _ = recv_message(sock)
        relay.started(int(hello["pid"]))  # signals that came meanwhile go to it now
        send_message(sock, {"go": True})  # from here on the command is the server's to run
    except PermissionError as e:  # not this user's: nothing was sent
        if sock is not None:
            sock.close()
        relay.restore(old)
        if _verbose(argv):
            print(f"ooc-svm: warm server not used: {e}; running in this process", file=sys.stderr)
        return None
    except (OSError, ValueError, KeyError, ConnectionError):
        if sock is not None:
            sock.close()  # a command the server forked waits for "go": it never starts
        relay.restore(old)
        # interrupted before any command started (nothing ran), or a stale socket, a server
        # that did not answer: run here
        return _interrupted() if relay.pending else None
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
