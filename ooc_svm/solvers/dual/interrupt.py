"""When to save a checkpoint (:class:`CheckpointClock`) and Ctrl-C that stops a solve only at
safe points (:func:`interruptible`, :func:`check_interrupt`)."""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._early import RECEIVED, on_sigint

if TYPE_CHECKING:
    from ...checkpoint import Checkpointer


class CheckpointClock:
    """When a solver that can checkpoint after any iteration should save.

    A save is due when ``seconds`` (``--checkpoint-seconds``) have passed since the last one,
    or earlier when saving is cheap: once ten times the duration of the last save has passed
    (so checkpoints cost at most about a tenth of the run). Saving never changes the solver's
    state, so a resumed run is the same whichever iterations were saved.
    """

    def __init__(self, seconds: float = 60.0, ratio: float = 10.0) -> None:
        self.seconds = float(seconds)
        self.ratio = float(ratio)
        self.last = time.perf_counter()
        self.cost = 0.0

    def due(self) -> bool:
        return time.perf_counter() - self.last >= min(self.seconds, self.ratio * self.cost)

    def maybe_save(self, checkpoint: Checkpointer | None, write: Callable[[], None]) -> None:
        """Call ``write()`` when there is a ``checkpoint`` and a save is due; time it."""
        if checkpoint is None or not self.due():
            return
        started = time.perf_counter()
        write()
        self.saved(started)

    def saved(self, started: float) -> None:
        """Record a save that began at ``started`` (``time.perf_counter()``)."""
        self.last = time.perf_counter()
        self.cost = self.last - started


#: set by the deferred SIGINT handler of :func:`interruptible`; read by :func:`check_interrupt`
#: in the driver loops and in the shard functions (threads of this process)
_INTERRUPT = threading.Event()


def check_interrupt() -> None:
    """Raise :class:`KeyboardInterrupt` when Ctrl-C was pressed during an
    :func:`interruptible` solve (call it at points where stopping is safe and often enough:
    every minor / inner iteration and at the start of every shard function)."""
    if _INTERRUPT.is_set():
        raise KeyboardInterrupt


def _deferred_sigint(signum, frame) -> None:
    RECEIVED.append(signum)
    if _INTERRUPT.is_set():  # a second Ctrl-C: stop wherever we are
        raise KeyboardInterrupt
    _INTERRUPT.set()


def interruptible(solve: Callable) -> Callable:
    """Ctrl-C during ``solve`` stops it at the next :func:`check_interrupt`, as a plain
    :class:`KeyboardInterrupt`.

    Python's own SIGINT handler raises at any bytecode, also inside numba's dispatcher and
    llvmlite's callbacks while a kernel is loaded from the cache: the interrupt then surfaced
    as ``SystemError: ... returned a result with an exception set``, or was swallowed ("Exception
    ignored on calling ctypes callback") and the run went on. While ``solve`` runs in the main
    thread with the default handler (or :func:`ooc_svm._early.on_sigint`, the ``ooc-svm``
    process's), SIGINT only sets a flag (a second Ctrl-C raises at once);
    any remaining ``SystemError`` caused by a KeyboardInterrupt is re-raised as one.
    """

    @functools.wraps(solve)
    def wrapper(*args, **kwargs):
        previous = signal.getsignal(signal.SIGINT)
        install = threading.current_thread() is threading.main_thread() and (
            previous is signal.default_int_handler or previous is on_sigint
        )
        if install:
            _INTERRUPT.clear()
            signal.signal(signal.SIGINT, _deferred_sigint)
        try:
            result = solve(*args, **kwargs)
        except SystemError as e:
            if isinstance(e.__cause__, KeyboardInterrupt) or isinstance(
                e.__context__, KeyboardInterrupt
            ):
                raise KeyboardInterrupt from None
            raise
        finally:
            interrupted = _INTERRUPT.is_set()
            if install:
                signal.signal(signal.SIGINT, previous)
                _INTERRUPT.clear()
        if interrupted:  # Ctrl-C after the last check: the run still stops
            raise KeyboardInterrupt
        return result

    return wrapper
