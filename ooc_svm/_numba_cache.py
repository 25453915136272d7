"""Where numba keeps its compiled kernels: a folder named after this package's source files.

numba checks a cached kernel against the stamp (mtime, size) of the file that defines it,
not against the files of the kernels it calls. Our kernels call kernels of other modules
(``solvers/smo/_numba/wss2.py`` calls ``kernels/parallel.py``), so after an update of the
callee only (``git pull`` in an editable install, a changed checkout), the caller was loaded
from the cache linked to the old callee, and every ``--solver smo`` run ended in a
segmentation fault. Keying the whole cache by every source file's stamp makes any change
start from an empty cache (numba compiles again once, ~1 minute).

The folder is ``$XDG_CACHE_HOME/ooc-svm/numba/<install>/<sources>`` (``~/.cache`` without
``XDG_CACHE_HOME``); the 3 most recent ``<sources>`` folders of an install are kept. Without
``XDG_CACHE_HOME``, where ``~/.cache`` cannot be written or there is no home folder at all (no
``HOME`` and a uid without a passwd entry, as in many containers), it is
``<temp>/ooc-svm-cache-<uid>/ooc-svm/numba/...``: a folder private to the user (0700, owner
checked: numba loads what it finds there), so kernels compile once per boot rather than in
every process. A user's ``NUMBA_CACHE_DIR`` is left alone, and so is numba's default
(``__pycache__`` beside the sources) when no folder can be written or numba was imported
before ooc_svm.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

#: folders of older sources kept per install (other processes may still be using them)
KEEP = 3


#: :func:`sources_key` of this process, computed once
_SOURCES: dict[Path, str] = {}


def sources_key(root: Path) -> str:
    """A digest of the name, mtime and size of every ``.py`` file under ``root`` (once per
    process)."""
    if root not in _SOURCES:
        _SOURCES[root] = _sources_key(root)
    return _SOURCES[root]


def _sources_key(root: Path) -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in sorted(root.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(root)}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    return h.hexdigest()


def _prune(install: Path, current: Path) -> None:
    """Remove all but the ``KEEP`` most recently used source folders of this install."""
    import shutil

    try:
        others = sorted(
            (d for d in install.iterdir() if d.is_dir() and d != current),
            key=lambda d: d.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return
    for d in others[KEEP - 1 :]:
        shutil.rmtree(d, ignore_errors=True)


def _cache_bases() -> list[tuple[Path, bool]]:
    """Folders to keep the cache under, first choice first, each with whether it is a shared
    place where only a private folder will do: ``$XDG_CACHE_HOME`` (the user's choice,
    alone), else ``~/.cache`` and then a folder of this user in the temporary directory."""
    if os.environ.get("XDG_CACHE_HOME"):
        return [(Path(os.environ["XDG_CACHE_HOME"]), False)]
    bases = []
    try:
        bases.append((Path.home() / ".cache", False))
    except RuntimeError:  # no HOME and no passwd entry for this uid
        pass
    import tempfile

    bases.append((Path(tempfile.gettempdir()) / f"ooc-svm-cache-{os.getuid()}", True))
    return bases


def _usable(base: Path, shared: bool) -> bool:
    """Whether ``base`` may hold the cache; in a shared place, only a private folder."""
    if not shared:
        return True
    from ._private_folder import make_private_folder

    try:
        os.close(make_private_folder(base))
    except OSError:  # another user's, or not writable: numba's default
        return False
    return True


def configure() -> str | None:
    """Set ``NUMBA_CACHE_DIR`` for this process (and the processes it starts: Dask workers)
    to the folder of the current sources; returns it, or None when left to numba."""
    if os.environ.get("NUMBA_CACHE_DIR") or "numba" in sys.modules:
        return None
    root = Path(__file__).resolve().parent
    for base, shared in _cache_bases():
        if not _usable(base, shared):
            continue
        install = (
            base
            / "ooc-svm"
            / "numba"
            / hashlib.blake2b(str(root).encode(), digest_size=6).hexdigest()
        )
        try:
            current = install / sources_key(root)
            current.mkdir(parents=True, exist_ok=True)
            os.utime(current)  # most recently used: kept by _prune
            probe = current / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError:
            continue
        _prune(install, current)
        os.environ["NUMBA_CACHE_DIR"] = str(current)
        return str(current)
    return None


#: whether this process said it compiles (:func:`announce_compiles`), and its listener
_ANNOUNCE: dict[str, object] = {}

#: the line said when numba starts compiling a kernel that is not in the cache
COMPILING = (
    "ooc-svm: compiling numba kernels (the first run after an install or an update, or of a "
    "solver not run before; cached for the next runs)..."
)


def announce_compiles() -> None:
    """Say once, in one log line (INFO: not with ``-q``), when numba starts compiling a kernel
    it did not find in its cache: a first kernel command in a fresh clone ran for minutes
    without a word. numba's ``numba:compile`` event comes only after a cache miss."""
    if "listener" in _ANNOUNCE:
        return
    import logging

    from numba.core import event

    class _Announce(event.Listener):
        def on_start(self, ev) -> None:
            if not _ANNOUNCE.get("said"):
                _ANNOUNCE["said"] = True
                logging.getLogger(__name__).info(COMPILING)

        def on_end(self, ev) -> None:
            pass

    _ANNOUNCE["listener"] = listener = _Announce()
    event.register("numba:compile", listener)
