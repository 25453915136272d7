"""The warm server: ``python -m ooc_svm.server --socket PATH`` (``ooc-svm server start``).

Start-up once, commands many times (issue 26, goal 4). The server imports everything a
command needs (numpy, numba and its CPU target, zarr, pyarrow, every ooc-svm module but the
Dask, plotting and scikit-learn ones), loads every kernel numba has cached for these sources
(``Dispatcher.compile`` of each signature in the cache's index: loaded, never run, so no
thread pool starts), freezes its objects out of the garbage collector, and listens on a Unix
socket private to the user. :mod:`ooc_svm.server_link` is the other end.

For each command: the server forks a *supervisor*, which reads the request (arguments,
working directory, environment, umask, CPU affinity, resource limits and the standard
descriptors) and forks the *command process*. The command process takes all of that on and
runs ``ooc_svm.cli`` as a fresh process would, in a copy of the warm server; the supervisor
sends its pid to the client, waits for it and sends its exit status (or the signal that
killed it). The server itself never runs a command and never starts a thread of its own, so
each fork starts from the same clean state; numpy's BLAS and pyarrow's allocator threads are
fork-safe (both re-initialise in the child).

Kernels that commands compiled and numba cached since the start are loaded before the next
fork (or within seconds when idle). After ``--idle`` seconds without a command the server exits;
SIGTERM (``ooc-svm server stop``) ends it at once. Its log (one line per command) is
``<socket>.log``.
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
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from . import server_link

log = logging.getLogger(__name__)

#: ooc-svm modules a server does not import (Dask starts threads; the others are optional)
_SKIP = ("__main__", "server", "estimators", "interop", "dask", "plot", "reports")
#: other libraries a command imports lazily
_EXTRA = ("zarr", "numcodecs", "pyarrow.parquet", "scipy.sparse")
#: seconds between two looks for newly cached kernels while idle
_POLL_S = 5.0


def warm_up() -> int:
    """Import what commands need and load every cached kernel; the number of kernels loaded."""
    from ..commands._startup import init_numba_target

    init_numba_target()
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
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp))
    os.chmod(tmp, 0o600)
    sock.listen(64)
    os.replace(tmp, path)  # clients see the socket only once it accepts
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

    def stop(signum, frame) -> None:
        raise _Stop  # out of accept() at once (a flag would wait for its timeout)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    me = os.getpid()
    sock = _listen(path)
    pidfile = path.with_suffix(".pid")
    pidfile.write_text(json.dumps({"pid": os.getpid(), "started": time.time(), "idle_s": idle_s}))
    log.info("listening on %s (pid %d)", path, os.getpid())
    last = time.monotonic()
    stamp = _cache_stamp()
    try:
        while True:
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
            if os.fork() == 0:
                sock.close()
                _supervise(conn, path)  # never returns
            conn.close()
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


def _supervise(conn: socket.socket, path: Path) -> None:
    """In the forked supervisor: take the request, fork the command process, report its end."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # the command process has Python's Ctrl-C handler from its first instruction on (the
        # client relays Ctrl-C to it as soon as it knows its pid)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(creds[4:8], sys.byteorder)
        if uid != os.getuid():
            return
        request, fds = server_link.recv_message(conn, maxfds=3)
        if len(fds) != 3:
            return
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_command(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(path.with_suffix(".log"), "a") as f:
            f.write(f"{stamp} pid {pid} started: {json.dumps(request['argv'])} ")
            f.write(f"in {request['cwd']}\n")
        try:
            server_link.send_message(conn, {"pid": pid})
        except OSError:  # the caller went away (Ctrl-C before the command started)
            os.kill(pid, signal.SIGTERM)
            raise
        t0 = time.perf_counter()
        _, wstatus, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - t0
        if os.WIFSIGNALED(wstatus):
            end = {"signal": os.WTERMSIG(wstatus)}
        else:
            end = {"exit": os.waitstatus_to_exitcode(wstatus)}
        with open(path.with_suffix(".log"), "a") as f:
            f.write(
                f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {pid} {json.dumps(end)} "
                f"wall {wall:.3f} s CPU {usage.ru_utime + usage.ru_stime:.3f} s "
                f"RSS {usage.ru_maxrss / 1024:.0f} MiB: "
                f"{json.dumps(request['argv'])}\n"
            )
        server_link.send_message(conn, end)  # after the log line: it is there at the exit
        status = 0
    except Exception:  # the client falls back or reports a missing status
        traceback.print_exc()
    finally:
        os._exit(status)


def _standard_streams() -> None:
    """New ``sys.stdin/stdout/stderr`` over descriptors 0-2, buffered as Python would."""
    enc = sys.stdout.encoding if sys.stdout else "utf-8"
    tty = os.isatty(1)
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=enc)
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", closefd=False), encoding=enc, line_buffering=tty, write_through=tty
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),
        encoding=enc,
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )


def _run_command(request: dict, fds: list[int]) -> None:
    """In the command process: become the client's process, run the command, exit."""
    status = 1
    try:
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        _standard_streams()
        for h in list(log.handlers):
            log.removeHandler(h)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(int(request["umask"]))
        os.sched_setaffinity(0, request["affinity"])
        nice = int(request["nice"]) - os.getpriority(os.PRIO_PROCESS, 0)
        if nice > 0:
            os.nice(nice)
        import resource

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
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


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
