"""The warm server: ``python -m ooc_svm.server --socket PATH`` (``ooc-svm server start``).

Start-up once, commands many times. The server imports everything a
command needs (numpy, numba and its CPU target, zarr, pyarrow, every ooc-svm module but the
Dask, plotting and scikit-learn ones), loads every kernel numba has cached for these sources
(``Dispatcher.compile`` of each signature in the cache's index: loaded, never run, so no
thread pool starts), freezes its objects out of the garbage collector, and listens on a Unix
socket private to the user. :mod:`ooc_svm.server.server_link` is the other end.

For each command: the server forks a *supervisor*, which checks that the client runs as
this user (``SO_PEERCRED``), reads the request (arguments, working directory, environment,
umask, CPU affinity, resource limits, the standard descriptors and their encodings) and forks
the *command process*, in a process group of its own. The supervisor sends its pid to the
client and starts it on the client's "go" (no "go", the client ran it itself: it never
starts). The command process takes all of that on and runs ``ooc_svm.cli`` as a fresh
process would, in a copy of the warm server; the supervisor waits for its end and sends
its exit status (or the signal that killed it). The command lives no longer than its
client: when the connection closes first (the client killed, even by SIGKILL), the
supervisor kills the command's process group; and the command is killed if its supervisor
dies (``PR_SET_PDEATHSIG``). The server itself never runs a command and never starts a
thread of its own, so each fork starts from the same clean state; numpy's BLAS and
pyarrow's allocator threads are fork-safe (both re-initialise in the child).

Kernels that commands compiled and numba cached since the start are loaded before the next
fork (or within seconds when idle). After ``--idle`` seconds without a command the server exits;
SIGTERM (``ooc-svm server stop``) ends it at once. Its log (one line per command) is
``<socket>.log``; its pid file ``<socket>.pid`` records its pid and start time, which
``ooc-svm server stop`` checks against the pid the socket's connection reports before it
signals anything. The socket's folder is created private (0700) or taken only when it is
already this user's and not a symbolic link; another user's folder is refused, never changed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import logging
import os
import pkgutil
import resource
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from .._private_folder import make_private_folder
from . import server_link

log = logging.getLogger(__name__)

#: ooc-svm modules a server does not import (Dask starts threads; the others are optional)
_SKIP = ("__main__", "server", "estimators", "interop", "dask", "plot", "reports")
#: other libraries a command imports lazily
_EXTRA = ("zarr", "numcodecs", "pyarrow.parquet", "scipy.sparse")
#: seconds between two looks for newly cached kernels while idle
_POLL_S = 5.0
#: signals that stop the server
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def warm_up() -> int:
    """Import what commands need and load every cached kernel; the number of kernels loaded."""
    from ..commands._startup import init_numba_target

    init_numba_target(eager=True)
    import ooc_svm

    for name in _EXTRA:
        importlib.import_module(name)
    for m in pkgutil.walk_packages(ooc_svm.__path__, "ooc_svm."):
        if any(part in _SKIP or part.startswith("dask") for part in m.name.split(".")[1:]):
            continue
        try:
            importlib.import_module(m.name)
        except Exception as e:  # an optional dependency missing: the command will say so
            log.info("not imported: %s (%s)", m.name, e)
    return load_cached_kernels()


def load_cached_kernels() -> int:
    """Load (not run) every signature numba's on-disk cache holds for ooc-svm's kernels and
    this process has not loaded yet; how many were loaded."""
    from numba.core.dispatcher import Dispatcher

    loaded = 0
    seen: set[int] = set()
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("ooc_svm."):
            continue
        for obj in list(vars(mod).values()):
            if not isinstance(obj, Dispatcher) or id(obj) in seen:
                continue
            seen.add(id(obj))
            try:  # numba's cache index, a private structure: skip what does not fit
                keys = obj._cache._cache_file._load_index()  # type: ignore[attr-defined]
            except Exception:
                continue
            have = {tuple(s) for s in obj.signatures}
            for key in keys:
                sig = key[0]
                args = getattr(sig, "args", sig)
                if not isinstance(args, tuple) or tuple(args) in have:
                    continue
                try:
                    obj.compile(sig)
                    loaded += 1
                except Exception as e:
                    log.info("kernel %s%s not loaded: %s", obj.py_func.__name__, sig, e)
    return loaded


def _cache_stamp() -> int:
    """Latest change of numba's cache folders below ``NUMBA_CACHE_DIR`` (a kernel cached, an
    index rewritten: numba writes both in the source package's sub-folder)."""
    top = os.environ.get("NUMBA_CACHE_DIR")
    if not top:
        return 0
    stamp = 0
    for d, _, _ in os.walk(top):
        if d == top:  # every ooc-svm process touches it (ooc_svm._numba_cache): not a change
            continue
        try:
            stamp = max(stamp, os.stat(d).st_mtime_ns)
        except OSError:
            pass
    return stamp


def _listen(path: Path) -> socket.socket:
    """A socket listening at ``path``, in a folder private to this user (made so, or
    refused with PermissionError when it is another user's or a symbolic link)."""
    dfd = make_private_folder(path.parent)
    try:
        tmp = f".{path.name}.{os.getpid()}"
        try:
            os.unlink(tmp, dir_fd=dfd)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(server_link._in_folder(dfd, path.parent, tmp))
        os.chmod(tmp, 0o600, dir_fd=dfd)
        sock.listen(64)
        os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)  # seen once it accepts
    finally:
        os.close(dfd)
    return sock


class _Stop(Exception):
    """SIGTERM or SIGINT in the server."""


def serve(path: Path, idle_s: float) -> int:
    """Warm up, then serve commands on ``path`` until ``idle_s`` seconds pass without one
    (or SIGTERM / SIGINT); returns the exit status."""
    t0 = time.perf_counter()
    n = warm_up()
    log.info("warm in %.2f s: %d cached kernels loaded", time.perf_counter() - t0, n)
    gc.collect()
    gc.freeze()  # every fork shares these pages and never walks them

    stopping = []

    def stop(signum, frame) -> None:
        stopping.append(signum)  # seen at the next turn, should the exception be lost
        raise _Stop  # out of accept() at once (a flag alone would wait for its timeout)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    me = os.getpid()
    sock = _listen(path)
    pidfile = path.with_suffix(".pid")
    pidfile.write_text(
        json.dumps(
            {
                "pid": me,
                "start_ticks": server_link.proc_start_time(me),
                "started": time.time(),
                "idle_s": idle_s,
            }
        )
    )
    log.info("listening on %s (pid %d)", path, os.getpid())
    last = time.monotonic()
    stamp = _cache_stamp()
    try:
        while not stopping:
            sock.settimeout(min(_POLL_S, max(0.1, idle_s - (time.monotonic() - last))))
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                if time.monotonic() - last >= idle_s:
                    log.info("idle for %.0f s: exiting", idle_s)
                    break
                continue
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            finally:  # kernels commands compiled since: every later fork has them
                if (now := _cache_stamp()) != stamp:
                    stamp = now
                    log.info("%d newly cached kernels loaded", load_cached_kernels())
            last = time.monotonic()
            # no SIGTERM during fork(): raised in its after-fork hooks, it would be lost
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                if os.fork() == 0:
                    sock.close()
                    _supervise(conn, path, mask)  # never returns
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending one: raised here
                conn.close()
        if stopping:  # its exception was lost (raised where Python ignores exceptions)
            log.info("stopped by a signal")
    except _Stop:
        if os.getpid() != me:  # a signal in a fork before it set its own handlers
            os._exit(1)
        log.info("stopped by a signal")
    finally:
        sock.close()
        for p in (path, pidfile):
            if os.getpid() != me:
                break
            try:
                if p == path or json.loads(p.read_text()).get("pid") == os.getpid():
                    p.unlink()
            except (OSError, ValueError):
                pass
    return 0


def _log_line(path: Path, text: str) -> None:
    # arguments and paths that are not UTF-8 are written escaped (JSON), never refused
    with open(path.with_suffix(".log"), "a", errors="backslashreplace") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def _supervise(conn: socket.socket, path: Path, mask: set) -> None:
    """In the forked supervisor: take the request, fork the command process, start it on
    the client's "go", report its end (or kill it when the client goes away first).
    ``mask``: the signal mask to restore once its own handlers are set."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # the command process has Python's Ctrl-C handler from its first instruction on (the
        # client relays Ctrl-C to it as soon as it knows its pid)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _, uid = server_link.peer_ids(conn)
        if uid != os.getuid():
            return
        try:
            request, fds = server_link.recv_message(conn, maxfds=3)
        except ConnectionError:  # a probe (`ooc-svm server status`) or a client gone
            status = 0
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            conn.close()
            os.close(go_w)
            _run_command(request, fds, go_r)  # never returns
        os.close(go_r)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # (the child does the same: whichever runs first)
        except OSError:
            pass
        argv = json.dumps(request["argv"])
        _log_line(path, f"pid {pid} started: {argv} in {json.dumps(request['cwd'])}")
        try:
            server_link.send_message(conn, {"pid": pid})
            go, _ = server_link.recv_message(conn)
            if go.get("go") is not True:
                raise ConnectionError("no go")
        except (OSError, ConnectionError, ValueError):
            # the caller went away or runs the command itself: it never starts
            os.close(go_w)
            os.waitpid(pid, 0)
            _log_line(path, f"pid {pid} not started: the caller did not confirm: {argv}")
            status = 0
            return
        try:
            os.write(go_w, b"g")
        except OSError:  # it ended already (a relayed Ctrl-C)
            pass
        os.close(go_w)
        t0 = time.perf_counter()
        end, usage, orphaned = _watch(conn, pid)
        wall = time.perf_counter() - t0
        note = " (its caller went away: killed)" if orphaned else ""
        _log_line(
            path,
            f"pid {pid} {json.dumps(end)}{note} wall {wall:.3f} s "
            f"CPU {usage.ru_utime + usage.ru_stime:.3f} s RSS {usage.ru_maxrss / 1024:.0f} MiB: "
            f"{argv}",
        )
        if not orphaned:
            try:
                server_link.send_message(conn, end)  # after the log line: it is there at exit
            except OSError:  # the caller went away just now
                pass
        status = 0
    except Exception:  # the client falls back or reports a missing status
        traceback.print_exc()
    finally:
        os._exit(status)


def _kill_group(pid: int) -> None:
    """SIGKILL the command ``pid`` and every process of its group (what it started)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _watch(conn: socket.socket, pid: int) -> tuple[dict, resource.struct_rusage, bool]:
    """Wait for the command ``pid`` to end while watching its client's connection: when the
    client goes away first (the connection's end of file: killed, even by SIGKILL), kill
    the command. Returns its end (``{"exit": N}`` or ``{"signal": N}``), its resource usage,
    and whether it was killed for that."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux before 5.3: look every 0.2 s instead
        pidfd = None
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    orphaned = False
    try:
        while True:
            events = poller.poll(None if pidfd is not None else 200)
            for fd, _ in events:
                if fd != conn.fileno():
                    continue
                try:
                    data = conn.recv(1 << 12)  # the client sends nothing more: an end
                except OSError:
                    data = b""
                if not data:
                    orphaned = True
                    _kill_group(pid)
                    poller.unregister(conn.fileno())
            done, wstatus, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if os.WIFSIGNALED(wstatus):
        end = {"signal": os.WTERMSIG(wstatus)}
    else:
        end = {"exit": os.waitstatus_to_exitcode(wstatus)}
    return end, usage, orphaned


def _standard_streams(stdio: list | None = None) -> None:
    """New ``sys.stdin/stdout/stderr`` over descriptors 0-2, buffered as Python would, with
    the client's encodings and error handlers (``stdio``: ``[encoding, errors]`` of each;
    ``surrogateescape`` where Python uses it, for names that are not UTF-8)."""
    enc = sys.stdout.encoding if sys.stdout else "utf-8"
    codecs = [(enc, "strict")] * 3
    for i, (e, r) in enumerate((stdio or [])[:3]):
        codecs[i] = (e or enc, r or "strict")
    (ienc, ierr), (oenc, oerr), (eenc, _) = codecs
    tty = os.isatty(1)
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=ienc, errors=ierr)
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", closefd=False),
        encoding=oenc,
        errors=oerr,
        line_buffering=tty,
        write_through=tty,
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),
        encoding=eenc,
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the supervisor) ends (``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the supervisor's watch is enough
        pass


def _run_command(request: dict, fds: list[int], go: int) -> None:
    """In the command process: become the client's process, wait for "go" (read from the
    pipe ``go``: its end of file means the client did not confirm: exit, nothing done), run
    the command, exit."""
    status = 1
    try:
        supervisor = os.getppid()
        _die_with_parent()
        if os.getppid() != supervisor:  # it died before the line above
            os._exit(1)
        try:
            os.setpgid(0, 0)  # a group of its own: killed whole if the client goes away
        except OSError:
            pass
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        _standard_streams(request.get("stdio"))
        for h in list(log.handlers):
            log.removeHandler(h)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if os.read(go, 1) != b"g":
            os._exit(1)  # nothing was written: no flush
        os.close(go)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(int(request["umask"]))
        os.sched_setaffinity(0, request["affinity"])
        nice = int(request["nice"]) - os.getpriority(os.PRIO_PROCESS, 0)
        if nice > 0:
            os.nice(nice)

        for name, soft in request["limits"].items():
            rid = getattr(resource, name)
            cur, hard = resource.getrlimit(rid)
            if soft != resource.RLIM_INFINITY and (cur == resource.RLIM_INFINITY or soft < cur):
                resource.setrlimit(rid, (soft, hard))
        gc.enable()
        sys.argv = ["ooc-svm", *request["argv"]]
        from ..cli import main

        status = main(list(request["argv"]))
    except KeyboardInterrupt:  # before the command's own handling started
        print("ooc-svm: interrupted", file=sys.stderr)
        status = 130
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        from .._util import flush_and_exit

        flush_and_exit(status)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ooc_svm.server", description=__doc__)
    ap.add_argument("--socket", required=True, help="the Unix socket to listen on")
    ap.add_argument("--idle", type=float, default=1800.0, help="exit after this many idle seconds")
    a = ap.parse_args(argv)
    path = Path(a.socket)
    handler = logging.FileHandler(path.with_suffix(".log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return serve(path, a.idle)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
