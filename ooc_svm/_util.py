"""Small helpers shared across the package (standard library and numpy only, cheap to import).

Sections: CPU count and memory (engine), JSON of numpy values, shard cache budget, outputs.

Outputs
-------
:func:`open_output` and :func:`atomic_dir` are the one place where ooc-svm creates output
files and directories:

- ``"-"`` is standard output (never closed by us);
- a path that exists and is neither a regular file nor a directory (``/dev/stdout``,
  ``/dev/null``, a FIFO, a terminal) is written **in place**: never replaced by a rename;
- anything else is written under a temporary name in the same directory and renamed into place
  when complete (an interrupted write leaves nothing half-written); a symlink to a regular file
  is followed, so the link stays and its target is replaced;
- files are created with mode 0666 and directories with 0777, both masked by the process umask,
  as any Unix tool does (``tempfile`` would give 0600 / 0700).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from typing import IO, Any, NoReturn

# ------------------------------------------------------------------------------------------
# CPUs and memory (engine)
# ------------------------------------------------------------------------------------------


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask on Linux), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def mem_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (``None`` where it cannot be read); the
    automatic sizes draw from the memory budget instead (:class:`ooc_svm.sizes.Sizes`),
    which also knows the container's limits."""
    from .memory_budget import mem_available_bytes as read

    return read()


# ------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------


def json_default(o: Any) -> Any:
    """``default=`` for :func:`json.dump`: numpy scalars and arrays as Python values, paths
    as strings, sets as sorted lists, anything else as its ``str``."""
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if isinstance(o, set | frozenset):
        return sorted(o)
    return str(o)


def json_ready(o: Any) -> Any:
    """``o`` with every value JSON can hold: numpy values as Python ones (:func:`json_default`
    for the rest) and NaN / ±infinity as ``None`` (``null``), which standard JSON lacks."""
    import math

    import numpy as np

    if isinstance(o, dict):
        return {k: json_ready(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [json_ready(v) for v in o]
    if isinstance(o, np.ndarray):
        return json_ready(o.tolist())
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def json_text(o: Any, **kw: Any) -> str:
    """``json.dumps`` of :func:`json_ready` ``(o)``: always valid (standard) JSON."""
    import json

    return json.dumps(json_ready(o), allow_nan=False, default=json_default, **kw)


# ------------------------------------------------------------------------------------------
# shard cache budget (engine)
# ------------------------------------------------------------------------------------------

#: share of the memory budget not claimed yet that the automatic shard cache may use
#: (``auto`` = ``auto:0.5``)
AUTO_CACHE_SHARE = 0.5
#: upper bound of the automatic shard cache, MiB (per process)
AUTO_CACHE_CAP_MB = 8192.0


def parse_cache_mb(value: Any) -> float | str:
    """A ``--shard-cache-mb`` value: MiB >= 0, ``auto`` or ``auto:SHARE`` (0 < SHARE <= 1).

    Raises :class:`ValueError` with the accepted forms otherwise (argparse shows it).
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not value >= 0:
            raise ValueError(f"shard cache MiB must be >= 0, got {value!r}")
        return float(value)
    s = str(value).strip().lower()
    if s == "auto":
        return "auto"
    if s.startswith("auto:"):
        try:
            share = float(s[5:].rstrip("%")) / (100.0 if s.endswith("%") else 1.0)
        except ValueError:
            share = -1.0
        if 0.0 < share <= 1.0:
            return f"auto:{share:g}"
        raise ValueError(f"auto:SHARE needs 0 < SHARE <= 1 (or a percentage), got {value!r}")
    try:
        mb = float(s)
    except ValueError:
        raise ValueError(
            f"expected MiB (a number >= 0), 'auto' or 'auto:SHARE', got {value!r}"
        ) from None
    if not mb >= 0:
        raise ValueError(f"shard cache MiB must be >= 0, got {value!r}")
    return mb


def auto_cache_bytes(spec: str, free_bytes: int, limit_bytes: int | None = None) -> int:
    """Byte budget of an automatic shard cache: SHARE of ``free_bytes``, the memory budget
    not claimed yet (handed down: :class:`ooc_svm.sizes.Sizes`; the tightest of the
    container's limit, the resource limits, the host's available memory, ``--memory-mb``,
    less the run's claims), at most :data:`AUTO_CACHE_CAP_MB` and at most ``limit_bytes``."""
    share = AUTO_CACHE_SHARE
    if spec.startswith("auto:"):
        share = float(spec[5:])
    budget = int(max(0.0, share) * max(0, int(free_bytes)))
    budget = max(0, min(budget, int(AUTO_CACHE_CAP_MB * 2**20)))
    if limit_bytes is not None:
        budget = min(budget, int(limit_bytes))
    return max(0, budget)


# ------------------------------------------------------------------------------------------
# outputs (predict files, models)
# ------------------------------------------------------------------------------------------

STDOUT = "-"


def is_special_output(path: str) -> bool:
    """True for ``-`` and for existing paths that are neither regular files nor directories."""
    if path == STDOUT:
        return True
    try:
        st = os.stat(path)  # follows symlinks: /dev/stdout -> /proc/self/fd/1 -> pipe
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


def _temp_name(target: str, prefix: str) -> str:
    parent = os.path.dirname(target) or "."
    return os.path.join(parent, f".{prefix}-{os.getpid()}-{os.urandom(4).hex()}")


class OutputError(OSError):
    """An output path that cannot be written: the message names it and the fix."""


def make_output_parent(target: str, given: str) -> None:
    """Create the directory of ``target`` (the output the user named ``given``), or raise
    :class:`OutputError` naming the output, what is in the way and what to do."""
    parent = os.path.dirname(target) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):
        pass
    except OSError as e:
        raise OutputError(
            f"{given}: cannot create the directory {parent} ({e.strerror or e}); give an output "
            "path in a directory you can write"
        ) from None
    blocker = os.path.dirname(given) or parent  # named as the user gave it
    while os.path.dirname(blocker) not in ("", blocker) and not os.path.lexists(blocker):
        blocker = os.path.dirname(blocker)
    raise OutputError(
        f"{given}: {blocker} is a file, not a directory; give an output path in a directory"
    )


def _create_file(path: str, binary: bool) -> IO:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    return os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8")


@contextlib.contextmanager
def open_output(path: str, *, binary: bool = False, prefix: str = "ooc-svm") -> Iterator[IO]:
    """Open ``path`` for writing, atomically where it is a regular file (see the module doc).

    Yields a file object. On an exception nothing is left at ``path`` (a regular file is only
    replaced when the body completed); special files have received what was written so far.

    Raises
    ------
    IsADirectoryError
        When ``path`` is a directory.
    """
    path = str(path)
    if path == STDOUT:
        f = sys.stdout.buffer if binary else sys.stdout
        yield f
        f.flush()
        return
    if is_special_output(path):
        with open(path, "wb" if binary else "w") as f:
            yield f
        return
    target = os.path.realpath(path)  # a symlink to a regular file stays a symlink
    if os.path.isdir(target):
        raise IsADirectoryError(f"{path}: is a directory; give a file name")
    make_output_parent(target, path)
    tmp = _temp_name(target, prefix)
    try:
        f = _create_file(tmp, binary)
    except OSError as e:
        raise OutputError(
            f"{path}: cannot write ({e.strerror or e}); give an output path in a directory "
            "you can write"
        ) from None
    try:
        with f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str, *, prefix: str = "ooc-svm", exists_ok: bool = True) -> Iterator[str]:
    """Yield a fresh temporary directory next to ``path``; rename it to ``path`` on success.

    An existing directory at ``path`` is replaced (``exists_ok``) only once the new one is
    complete; an existing non-directory is refused with :class:`FileExistsError`.
    """
    given = str(path)
    path = os.path.abspath(given)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"{path}: exists and is not a directory; not overwriting")
    make_output_parent(path, given)
    tmp = _temp_name(path, prefix)
    try:
        os.mkdir(tmp, 0o777)  # umask applies
    except OSError as e:
        raise OutputError(
            f"{given}: cannot write ({e.strerror or e}); give an output path in a directory "
            "you can write"
        ) from None
    try:
        yield tmp
        if os.path.isdir(path):
            if not exists_ok:
                raise FileExistsError(f"{path}: exists; not overwriting")
            old = _temp_name(path, prefix + "-old")
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        elif os.path.lexists(path):
            raise FileExistsError(f"{path}: exists and is not a directory; not overwriting")
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def flush_and_exit(status: int) -> NoReturn:
    """Flush standard output and error (a closed pipe or a failed write is ignored) and end
    the process at once with ``status`` (``os._exit``: no finalisers, nothing to unwind)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)
