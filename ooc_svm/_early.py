"""Signals of the ``ooc-svm`` process from its first line of ooc-svm code on.

:func:`ooc_svm.cli.main` sets the handlers that end a command with one line (``ooc-svm:
interrupted``, status 130; ``ooc-svm: terminated by SIGTERM``, 143), but it runs only once
``ooc_svm.cli`` is imported: a Ctrl-C during that import (``argparse``, ``logging``, the
numba cache's folder) printed a ``KeyboardInterrupt`` traceback, one that landed in an import
lock's callback was "ignored" and the command went on to exit 0, and a SIGTERM killed the
process without a word. :func:`guard`, called by the package's ``__init__`` before anything
else when the process is the ``ooc-svm`` console script (never when ooc_svm is imported as a
library), sets those handlers at once:

- SIGINT (when Python's default handler is set), SIGTERM and SIGHUP (unless ignored, as under
  ``nohup``) raise :class:`KeyboardInterrupt` / :class:`Terminated` and are recorded in
  :data:`RECEIVED`, so that an error a library made of the interrupt (numpy's C import turns
  it into ``ImportError: PyCapsule_Import could not import module "datetime"``) is still
  reported as the signal (:func:`received`);
- a signal's exception that Python reports as unraisable (raised in a finaliser or a weakref
  callback) is kept in :data:`SWALLOWED` instead of printed, so the command cannot end 0;
- one that reaches the top level before :func:`ooc_svm.cli.main` catches it is one line and
  the signal's status (:func:`_excepthook`).

What runs before this module (the interpreter's own start-up and ``site``) is Python's: a
signal there ends the process as Python does.

This module imports nothing but ``os``, ``signal`` and ``sys`` (all loaded at start-up).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

#: the numbers of the signals this process's handlers received, in order
RECEIVED: list[int] = []
#: the signals' exceptions that Python reported as unraisable (raised in a finaliser, a
#: weakref callback or the interpreter's thread shutdown) and :func:`unraisable` silenced
SWALLOWED: list[KeyboardInterrupt] = []
#: the names ``sys.argv[0]`` has when the process is the console script
SCRIPT_NAMES = ("ooc-svm", "ooc-svm.exe")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwinds like Ctrl-C (every writer removes its temporary files);
    the exit status is 128 + the signal's number, as a shell reports a killed process."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def on_sigint(signum: int, frame: Any) -> None:
    """SIGINT: Python's own behaviour (:class:`KeyboardInterrupt`), recorded."""
    RECEIVED.append(signum)
    raise KeyboardInterrupt


def on_signal(signum: int, frame: Any) -> None:
    """SIGTERM, SIGHUP: :class:`Terminated`, recorded."""
    RECEIVED.append(signum)
    raise Terminated(signum)


def received(since: int = 0) -> KeyboardInterrupt | None:
    """The exception of the first signal this process's handlers received after the first
    ``since`` (``len(RECEIVED)`` at some moment); None if none."""
    if len(RECEIVED) <= since:
        return None
    signum = RECEIVED[since]
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def unraisable(u: Any) -> None:
    """``sys.unraisablehook`` of the ``ooc-svm`` process: a Ctrl-C or SIGTERM that lands in
    a finaliser is not lost in a traceback (the command then ends 130 / 143, never 0)."""
    if isinstance(u.exc_value, KeyboardInterrupt):
        SWALLOWED.append(u.exc_value)
        return
    sys.__unraisablehook__(u)


def install() -> dict[int, Any]:
    """Set :func:`on_sigint` (where Python's default SIGINT handler is set) and
    :func:`on_signal` for SIGTERM and SIGHUP (unless the parent made them ignored: ``nohup``
    ignores SIGHUP), in the main thread only (elsewhere ``signal.signal`` refuses: nothing is
    set); returns the handlers replaced."""
    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            current = signal.getsignal(sig)
            if sig == signal.SIGINT:
                if current is signal.default_int_handler:
                    old[sig] = signal.signal(sig, on_sigint)
            elif current is not signal.SIG_IGN:
                old[sig] = signal.signal(sig, on_signal)
        except (ValueError, OSError, AttributeError):  # not the main thread; not POSIX
            pass
    return old


def line(e: BaseException) -> tuple[str, int]:
    """The line and the exit status of a signal's exception ``e``."""
    if isinstance(e, Terminated):
        return f"ooc-svm: {e}", 128 + e.signum
    return "ooc-svm: interrupted", 130


def _excepthook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
    """A signal's exception that reached the top level (raised while ``ooc_svm.cli`` was
    imported): its line, and the process ends with its status at once (nothing has been
    written yet); any other exception as Python reports it."""
    if not isinstance(value, KeyboardInterrupt):
        sys.__excepthook__(tp, value, tb)
        return
    text, status = line(value)
    try:
        print(text, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
    except Exception:  # pragma: no cover - a closed stream
        pass
    os._exit(status)


def is_console_script() -> bool:
    """Whether this process is the ``ooc-svm`` console script (``sys.argv[0]``)."""
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(str(argv[0])) in SCRIPT_NAMES


def guard() -> None:
    """In the ``ooc-svm`` process only: the handlers of :func:`install`, :func:`unraisable`
    and :func:`_excepthook`, from this moment on (see the module's docstring)."""
    install()
    sys.unraisablehook = unraisable
    sys.excepthook = _excepthook
