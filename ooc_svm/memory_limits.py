"""The limits on this process's memory, read where the system keeps them: cgroup v1 and v2
(the process's own group and its ancestors), ``RLIMIT_AS`` / ``RLIMIT_DATA``, ``MemAvailable``
and what the process uses (``/proc/self/status``); and malloc's arenas capped under an
address-space limit. :mod:`ooc_svm.memory_budget` makes the budget of them.

Standard library only (the bottom layer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: malloc arenas (64 MiB of address space each) once ``RLIMIT_AS`` or ``RLIMIT_DATA`` is
#: set: glibc's default (8 a core) mapped 470 MiB more than a 100k-row training used
ARENA_MAX = 2

_UNLIMITED = 2**60  # a cgroup "no limit" value is at least this (v1: 2**63 less a page)


@dataclass(frozen=True)
class Limit:
    """One limit on this process's memory.

    ``name`` says what it is ("cgroup v1 memory.limit_in_bytes"), ``limit`` its value in
    bytes, ``used`` what already counts against it, ``where`` the file or setting read.
    """

    name: str
    limit: int
    used: int
    where: str = ""

    @property
    def headroom(self) -> int:
        """Bytes left under this limit."""
        return max(0, self.limit - self.used)


# ------------------------------------------------------------------------------------------
# what this process uses (/proc/self/status)
# ------------------------------------------------------------------------------------------


def process_status(proc: str = "/proc") -> dict[str, int]:
    """``VmRSS``, ``VmSize``, ``VmData`` ... of ``/proc/self/status`` in bytes ({} elsewhere)."""
    out: dict[str, int] = {}
    try:
        with open(os.path.join(proc, "self", "status")) as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if key.startswith("Vm") and len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def rss_bytes() -> int:
    """Resident memory of this process now (0 where it cannot be read)."""
    return process_status().get("VmRSS", 0)


def mem_available_bytes(proc: str = "/proc") -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (``None`` where it cannot be read)."""
    try:
        with open(os.path.join(proc, "meminfo")) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# ------------------------------------------------------------------------------------------
# cgroups
# ------------------------------------------------------------------------------------------


def _read_int(path: str) -> int | None:
    """An integer file of a cgroup (``max`` and unreadable files: ``None``)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        v = int(text.split()[0])
    except ValueError:
        return None
    return None if v >= _UNLIMITED else v


def _stat_value(path: str, key: str) -> int:
    """One counter of a cgroup's ``memory.stat`` (0 when absent)."""
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """``(v1 memory cgroup path, v2 cgroup path)`` from the text of ``/proc/self/cgroup``
    (``4:memory:/process_api/x`` and ``0::/user.slice/...``); ``None`` for what is absent."""
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def _mounts(mountinfo: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(v1 memory mounts, v2 mounts)`` of ``/proc/self/mountinfo``: (root in the
    hierarchy, mount point) each."""
    v1: list[tuple[str, str]] = []
    v2: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if not sep or len(f) < 5 or len(r) < 1:
            continue
        root, point = f[3], f[4].replace("\\040", " ")
        if r[0] == "cgroup2":
            v2.append((root, point))
        elif r[0] == "cgroup" and len(r) >= 3 and "memory" in r[2].split(","):
            v1.append((root, point))
    return v1, v2


def _cgroup_dir(mounts: list[tuple[str, str]], path: str) -> str | None:
    """The folder of cgroup ``path`` under the mount whose root contains it."""
    best = None
    for root, point in mounts:
        r = root.rstrip("/")
        if path == r or path.startswith(r + "/") or r == "":
            rel = path[len(r) :].lstrip("/")
            d = os.path.join(point, rel) if rel else point
            if best is None or len(r) > len(best[0]):
                best = (r, d, point)
    if best is None:
        return None
    return best[1] if os.path.isdir(best[1]) else None


def _ancestors(d: str, top: str) -> list[str]:
    """``d`` and its parents up to ``top`` (the mount point) inclusive."""
    out = [d]
    top = os.path.normpath(top)
    while os.path.normpath(d) != top and os.path.dirname(d) != d:
        d = os.path.dirname(d)
        out.append(d)
        if not d.startswith(top):
            break
    return out


def cgroup_limits(
    root: str = "/", proc_cgroup: str | None = None, mountinfo: str | None = None
) -> list[Limit]:
    """The cgroup memory limits of this process (v1 and v2), tightest per kind.

    ``root`` prefixes every path read (a fake tree in tests); ``proc_cgroup`` and ``mountinfo``
    replace the text of ``/proc/self/cgroup`` and ``/proc/self/mountinfo``. Where no mount
    table is given or found, the usual mount points are assumed
    (``/sys/fs/cgroup/memory`` for v1, ``/sys/fs/cgroup`` for v2).
    """

    def read(p: str) -> str:
        try:
            with open(os.path.join(root, p.lstrip("/"))) as f:
                return f.read()
        except OSError:
            return ""

    if proc_cgroup is None:
        proc_cgroup = read("/proc/self/cgroup")
    if mountinfo is None:
        mountinfo = read("/proc/self/mountinfo")
    v1_path, v2_path = parse_proc_cgroup(proc_cgroup)
    m1, m2 = _mounts(mountinfo)
    if not m1:
        m1 = [("/", "/sys/fs/cgroup/memory")]
    if not m2:
        m2 = [("/", "/sys/fs/cgroup")]

    def rooted(mounts):
        return [(r, os.path.join(root, p.lstrip("/"))) for r, p in mounts]

    out: list[Limit] = []
    if v1_path is not None:
        mounts = rooted(m1)
        d = _cgroup_dir(mounts, v1_path)
        if d is not None:
            top = next(p for _, p in mounts if d.startswith(p))
            best = None
            for a in _ancestors(d, top):
                lim = _read_int(os.path.join(a, "memory.limit_in_bytes"))
                if lim is not None and (best is None or lim < best[0]):
                    best = (lim, a)
            if best is not None:
                lim, a = best
                usage = _read_int(os.path.join(a, "memory.usage_in_bytes")) or 0
                stat = os.path.join(a, "memory.stat")
                cache = _stat_value(stat, "total_inactive_file") or _stat_value(
                    stat, "inactive_file"
                )
                out.append(
                    Limit(
                        "cgroup v1 memory.limit_in_bytes",
                        lim,
                        max(0, usage - cache),
                        _shown(a, root),
                    )
                )
    if v2_path is not None:
        mounts = rooted(m2)
        d = _cgroup_dir(mounts, v2_path)
        if d is not None and os.path.exists(os.path.join(d, "cgroup.controllers")):
            top = next(p for _, p in mounts if d.startswith(p))
            for fname in ("memory.max", "memory.high"):
                best = None
                for a in _ancestors(d, top):
                    lim = _read_int(os.path.join(a, fname))
                    if lim is not None and (best is None or lim < best[0]):
                        best = (lim, a)
                if best is not None:
                    lim, a = best
                    usage = _read_int(os.path.join(a, "memory.current")) or 0
                    cache = _stat_value(os.path.join(a, "memory.stat"), "inactive_file")
                    out.append(
                        Limit(f"cgroup v2 {fname}", lim, max(0, usage - cache), _shown(a, root))
                    )
    return out


def _shown(path: str, root: str) -> str:
    """A path as the process sees it (without the fake root of tests)."""
    if root not in ("", "/") and path.startswith(root):
        return "/" + os.path.relpath(path, root)
    return path


# ------------------------------------------------------------------------------------------
# the other limits
# ------------------------------------------------------------------------------------------


def rlimit_limits(status: dict[str, int] | None = None) -> list[Limit]:
    """``RLIMIT_AS`` and ``RLIMIT_DATA`` where set (soft limits), with the address space and
    data segment already used."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Unix
        return []
    status = process_status() if status is None else status
    out = []
    for name, res, key in (
        ("RLIMIT_AS", resource.RLIMIT_AS, "VmSize"),
        ("RLIMIT_DATA", resource.RLIMIT_DATA, "VmData"),
    ):
        soft, _ = resource.getrlimit(res)
        if soft != resource.RLIM_INFINITY and 0 < soft < _UNLIMITED:
            out.append(Limit(name, int(soft), status.get(key, 0), "ulimit"))
    return out


_ARENAS_CAPPED: list[bool] = []


def cap_malloc_arenas() -> None:
    """At most :data:`ARENA_MAX` malloc arenas in this process (glibc's ``mallopt``; once):
    under an address-space limit each thread's own arena reserves 64 MiB it rarely uses,
    and threads then fail to start ("can't start new thread") or allocations fail far
    below the memory the run needs."""
    if _ARENAS_CAPPED:
        return
    _ARENAS_CAPPED.append(True)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(ctypes.c_int(-8), ctypes.c_int(ARENA_MAX))  # M_ARENA_MAX
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass
