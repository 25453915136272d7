"""Leftovers of interrupted writers (SIGKILL, power loss): find them and remove them.

An ingest killed hard leaves what its cleanup would have removed: the hidden temporary store
``.NAME.ingest-<hex>`` (or ``.NAME.old-<hex>`` during ``--overwrite``) next to the store,
shard files of an unfinished ``--append`` that the shard table does not list (orphans), a
half-written metadata file ``.*.part-<hex>`` and a writer lock whose process is gone.
``ooc-svm info`` / ``ooc-svm verify`` list them; ``ooc-svm verify --repair`` removes them.

Anything that belongs to a writer still running on this host (its lock names a live PID) is
left alone. Local stores only.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
from dataclasses import dataclass, field

from .backends import shard_suffixes
from .lock import LOCK_NAME, _alive
from .paths import is_local, local_path

log = logging.getLogger(__name__)


def _shard_entry(name: str) -> str | None:
    """The shard a store directory's entry holds (its name without a backend's shard
    suffix), or None when it is not a shard."""
    for suffix in shard_suffixes():
        base = name.removesuffix(suffix) if suffix else name
        if (not suffix or name.endswith(suffix)) and re.fullmatch(r"s\d{7}", base):
            return base
    return None


@dataclass
class Leftovers:
    """What interrupted writers left at a store (absolute paths)."""

    temp_dirs: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    stale_lock: str | None = None
    busy: str | None = None  #: the store is being written right now (lock of a live process)

    @property
    def count(self) -> int:
        return len(self.temp_dirs) + len(self.orphans) + len(self.parts) + bool(self.stale_lock)

    def summary(self) -> str:
        """One line, e.g. ``2 stale temporary directories, 3 orphan shard files: run ...``."""
        parts = []
        if self.temp_dirs:
            parts.append(_n(len(self.temp_dirs), "stale temporary directory", "directories"))
        if self.orphans:  # an interrupted append's, or those `ooc-svm drop` left for readers
            parts.append(
                _n(len(self.orphans), "orphan shard file", "files")
                + " (dropped shards or an interrupted append)"
            )
        if self.parts:
            parts.append(_n(len(self.parts), "half-written metadata file", "files"))
        if self.stale_lock:
            parts.append("a stale writer lock")
        return ", ".join(parts) + ": run `ooc-svm verify --repair` to remove them"

    def to_dict(self) -> dict:
        return {
            "temp_dirs": self.temp_dirs,
            "orphans": self.orphans,
            "parts": self.parts,
            "stale_lock": self.stale_lock,
            "busy": self.busy,
        }


def _n(k: int, one: str, many: str) -> str:
    return f"1 {one}" if k == 1 else f"{k} {one.rsplit(' ', 1)[0]} {many}"


def _lock_live(d: str) -> str | None:
    """``"PID N on HOST since T"`` when ``d/.lock`` belongs to a live process here (or to
    another host, which we cannot check), else None."""
    try:
        with open(os.path.join(d, LOCK_NAME), "rb") as f:
            pid, host, stamp = f.read(4096).decode("utf-8", "replace").strip().split(" ", 2)
        pid_i = int(pid)
    except (OSError, ValueError):
        return None
    if host == socket.gethostname() and not _alive(pid_i):
        return None
    return f"PID {pid_i} on {host} since {stamp}"


def find_leftovers(path: str, shard_names: list[str] | None) -> Leftovers:
    """List the leftovers of interrupted writers at store ``path``.

    Parameters
    ----------
    path : str
        The store.
    shard_names : list of str or None
        Names in the store's shard table (None: the store could not be opened; orphans are
        then not looked for).
    """
    lo = Leftovers()
    if not is_local(path):
        return lo
    root = local_path(path).rstrip("/")
    head, name = os.path.split(root)
    try:
        siblings = os.listdir(head or ".")
    except OSError:
        siblings = []
    prefix = re.compile(rf"^\.{re.escape(name)}\.(ingest|old)-[0-9a-f]{{12}}$")
    for s in sorted(siblings):
        p = os.path.join(head, s)
        if prefix.match(s) and os.path.isdir(p) and not os.path.islink(p) and not _lock_live(p):
            lo.temp_dirs.append(p)
    if not os.path.isdir(root):
        return lo
    lo.busy = _lock_live(root)
    if lo.busy:
        return lo  # an append is running: its new shards are not orphans
    if os.path.exists(os.path.join(root, LOCK_NAME)):
        lo.stale_lock = os.path.join(root, LOCK_NAME)
    known = set(shard_names or [])
    for s in sorted(os.listdir(root)):
        p = os.path.join(root, s)
        if re.match(r"^\..*\.part-[0-9a-f]{12}$", s):
            lo.parts.append(p)
        elif shard_names is not None and (shard := _shard_entry(s)) is not None:
            if shard not in known:
                lo.orphans.append(p)
    return lo


def remove_leftovers(lo: Leftovers) -> int:
    """Remove what :func:`find_leftovers` listed; returns how many entries were removed."""
    n = 0
    for p in lo.temp_dirs + lo.orphans + lo.parts + ([lo.stale_lock] if lo.stale_lock else []):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
            n += 1
        except FileNotFoundError:
            pass
    return n
