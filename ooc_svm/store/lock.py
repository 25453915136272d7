"""A writer lock inside a store directory, so concurrent ``ingest --append`` runs serialise.

The lock is the file ``STORE/.lock``, created with ``O_CREAT | O_EXCL`` (atomic on local file
systems) and holding ``PID HOST TIME``. A second writer fails at once with a message naming
the holder. A lock left by a process that no longer exists on this host is taken over; one
from another host is left for the user to remove. Remote (fsspec) stores are not locked.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Self

from .format import StoreError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Lock:
    """The acquire loop, the holder and the messages of both locks; subclasses create, read
    and remove the lock file (``_create`` raises ``FileExistsError`` when it exists)."""

    display: str
    shown: str
    held: bool

    def _create(self, payload: bytes) -> None:
        raise NotImplementedError

    def _read(self) -> bytes:
        raise NotImplementedError

    def _remove(self) -> None:
        raise NotImplementedError

    def acquire(self) -> Self:
        host = socket.gethostname()
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        payload = f"{os.getpid()} {host} {stamp}\n".encode()
        for _ in range(2):
            try:
                self._create(payload)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and holder[1] == host and not _alive(holder[0]):
                    log.warning(
                        "%s: removing the stale lock of PID %d (no longer running)",
                        self.display,
                        holder[0],
                    )
                    self._remove()
                    continue
                who = (
                    f"PID {holder[0]} on {holder[1]} since {holder[2]}"
                    if holder
                    else "another process"
                )
                raise StoreError(
                    f"{self.display}: store is being written by {who}; wait, or remove "
                    f"{self.shown} if that process is gone"
                ) from None
            self.held = True
            return self
        raise StoreError(f"{self.display}: could not take the writer lock {self.shown}; retry")

    def _holder(self) -> tuple[int, str, str] | None:
        try:
            text = self._read()[:4096].decode("utf-8", "replace")
            pid, host, stamp = text.strip().split(" ", 2)
            return int(pid), host, stamp
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self.held:
            self.held = False
            self._remove()

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class StoreLock(_Lock):
    """Exclusive writer lock of the local store directory ``root`` (use as a context manager
    or call :meth:`acquire` / :meth:`release`)."""

    def __init__(self, root: str, display: str | None = None) -> None:
        self.root = root
        self.display = display or root
        self.path = os.path.join(root, LOCK_NAME)
        self.shown = self.path
        self.held = False

    def _create(self, payload: bytes) -> None:
        # the lock appears with its content: written to a private file first, then
        # hard-linked into place (link() fails atomically when the lock exists), so a
        # second writer always reads whose lock it is
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                os.write(fd, payload)
            finally:
                os.close(fd)
            os.link(tmp, self.path)
        except FileNotFoundError:
            raise StoreError(f"{self.display}: no such store") from None
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def _read(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read(4096)

    def _remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class RemoteStoreLock(_Lock):
    """Exclusive writer lock ``root/.lock`` of a store on an object store (fsspec ``fs``),
    created with a conditional write (fails when it exists)."""

    def __init__(self, fs: AbstractFileSystem, root: str, display: str | None = None) -> None:
        self.fs = fs
        self.root = root
        self.display = display or root
        self.path = f"{root}/{LOCK_NAME}"
        self.shown = f"{self.display.rstrip('/')}/{LOCK_NAME}"
        self.held = False

    def _create(self, payload: bytes) -> None:
        self.fs.pipe_file(self.path, payload, mode="create")

    def _read(self) -> bytes:
        return self.fs.cat_file(self.path)

    def _remove(self) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            pass
