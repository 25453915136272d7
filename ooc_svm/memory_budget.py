"""The process's memory budget: the one number every automatic size draws from.

Where the number comes from
---------------------------
The effective **limit** is the smallest of the limits that apply to this process:

- an explicit budget, ``--memory-mb`` or ``$OOC_SVM_MEMORY_MB`` (MiB): the whole process's
  memory, what it already uses included;
- cgroup v2 ``memory.max`` and ``memory.high`` of the process's own cgroup (the ``0::`` line of
  ``/proc/self/cgroup``, joined to the cgroup2 mount) and of its ancestors up to the mount's
  root (a parent's limit binds its children too);
- cgroup v1 ``memory.limit_in_bytes`` of its own ``memory`` cgroup and its ancestors (not
  ``memory.memsw.limit_in_bytes``: never below it, and swap is no room to compute in);
- ``RLIMIT_AS`` (address space) and ``RLIMIT_DATA`` (heap and anonymous mappings);
- the host's ``MemAvailable`` (``/proc/meminfo``) plus what this process already holds;
- a Dask worker's memory limit (``get_worker().memory_manager.memory_limit``) when the code
  runs on a worker.

The **budget** is the room left under the tightest of them: each limit minus what already
counts against it — for a cgroup its usage without the page cache the kernel can drop at no
cost (``inactive_file``: the memory of every process of the cgroup counts, ours included); for
``RLIMIT_AS`` the address space already mapped (``VmSize``), for ``RLIMIT_DATA`` ``VmData``;
for the host ``MemAvailable`` itself; for an explicit or Dask limit the process's RSS — less a
reserve (:data:`RESERVE_SHARE` of the limit, at least :data:`RESERVE_MIN_MB`) for the
allocator's slack, thread stacks and the page cache of the files being read (which a cgroup v1
limit counts: a reader that would let it grow evicts it with ``posix_fadvise(DONTNEED)``, see
:func:`drop_cache_of`). The budget is measured once per process (:func:`current`), before the
run allocates anything large.

How the budget is shared
------------------------
A run first :meth:`MemoryBudget.require` s what it cannot do without (the decoded shards in
flight, the solver's dense vectors, ...): below that the run is refused before any work, in
one line naming the minimum. The automatic sizes then take shares of what is left
(:meth:`MemoryBudget.share`): the decoded-shard cache, selective's rows in memory, perf's
cutting planes, the kernel caches, the buffers of ingest and predict, each Dask worker's cache.

Standard library only (the bottom layer: every other module may import it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any

MiB = 2**20

#: the reserve kept free under the limit: this share of it, and at least this many MiB
RESERVE_SHARE, RESERVE_MIN_MB = 0.05, 48.0

#: resident memory of ooc-svm's own code in a run (the interpreter, numpy, scipy, numba, the
#: compiled kernels): a training on a 20,000-row store peaks at ~230 MiB RSS, its one shard
#: of 13 MiB included
CODE_MB = 224.0

#: environment variable of an explicit budget (MiB), as ``--memory-mb``
ENV = "OOC_SVM_MEMORY_MB"

_UNLIMITED = 2**60  # a cgroup "no limit" value is at least this (v1: 2**63 less a page)


class MemoryBudgetError(ValueError):
    """A budget below what a run needs, or an invalid ``--memory-mb``: one line with the fix."""


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


@dataclass
class MemoryBudget:
    """The room this process may fill, and where that number came from.

    ``limits`` holds every limit found; ``binding`` the one with the least headroom (the
    *source* of the budget); ``bytes`` the budget: that headroom less the reserve.
    ``claims`` are the sizes :meth:`require` d so far (name -> bytes).
    """

    limits: tuple[Limit, ...]
    binding: Limit | None
    bytes: int
    claims: dict[str, int] = field(default_factory=dict)
    #: resident memory of the process when the budget was measured
    rss: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # ---------------------------------------------------------------------- reporting

    @property
    def mib(self) -> float:
        """The budget in MiB."""
        return self.bytes / MiB

    @property
    def source(self) -> str:
        """What set the budget ("cgroup v1 memory.limit_in_bytes", "--memory-mb", ...)."""
        return self.binding.name if self.binding is not None else "nothing (no limit found)"

    def describe(self) -> str:
        """One line: ``memory budget 1,310 MiB from cgroup v1 memory.limit_in_bytes (limit
        1,500 MiB at /sys/fs/cgroup/memory/x, 142 MiB in use)``."""
        b = self.binding
        if b is None:
            return f"memory budget {self.mib:,.0f} MiB (no limit could be read)"
        where = f" at {b.where}" if b.where else ""
        return (
            f"memory budget {self.mib:,.0f} MiB from {b.name} (limit {b.limit / MiB:,.0f} "
            f"MiB{where}, {b.used / MiB:,.0f} MiB in use)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The budget for ``--json``: MiB, source, the binding limit and every limit found."""
        return {
            "mib": round(self.mib, 1),
            "source": self.source,
            "limit_mib": None if self.binding is None else round(self.binding.limit / MiB, 1),
            "where": None if self.binding is None else self.binding.where,
            "limits": {
                lim.name: {
                    "limit_mib": round(lim.limit / MiB, 1),
                    "used_mib": round(lim.used / MiB, 1),
                }
                for lim in self.limits
            },
            "claims_mib": {k: round(v / MiB, 1) for k, v in self.claims.items()},
        }

    # ---------------------------------------------------------------------- sharing

    @property
    def claimed(self) -> int:
        return sum(self.claims.values())

    @property
    def free(self) -> int:
        """Bytes of the budget not :meth:`require` d yet."""
        return max(0, self.bytes - self.claimed)

    def require(self, name: str, nbytes: int, what: str = "this run", fix: str = "") -> None:
        """Claim ``nbytes`` that ``what`` cannot do without (``name``: what they hold; a second
        claim of the same name replaces the first).

        Raises
        ------
        MemoryBudgetError
            Before any work, when the claims exceed the budget: the message names the
            minimum and how to give more (``fix`` adds a way to need less).
        """
        with self._lock:
            claims = {**self.claims, name: max(0, int(nbytes))}
            need = sum(claims.values())
            if need > self.bytes:
                parts = ", ".join(f"{k} {v / MiB:,.0f}" for k, v in claims.items() if v)
                hint = f"; or {fix}" if fix else ""
                raise MemoryBudgetError(
                    f"{self.describe()} is below the {_ceil_mib(need):,} MiB {what} needs at "
                    f"least ({parts} MiB): give --memory-mb {_ceil_mib(self.limit_for(need)):,} "
                    f"or more (or raise the container's limit){hint}"
                )
            self.claims = claims

    def limit_for(self, need: int) -> int:
        """The limit under which ``need`` bytes would fit: what is in use, the reserve and
        the need."""
        used = self.binding.used if self.binding is not None else self.rss
        return used + self.reserve + int(need)

    def release(self, name: str) -> None:
        """Drop a claim (its owner is done)."""
        with self._lock:
            self.claims.pop(name, None)

    @property
    def reserve(self) -> int:
        """The reserve kept under the binding limit (see the module doc)."""
        return _reserve(self.binding.limit if self.binding is not None else 0)

    def share(self, fraction: float, cap: int | None = None) -> int:
        """``fraction`` of the unclaimed budget (:attr:`free`), at most ``cap`` bytes."""
        n = int(max(0.0, float(fraction)) * self.free)
        return n if cap is None else max(0, min(n, int(cap)))


def _ceil_mib(n: int) -> int:
    return -(-int(n) // MiB)


def _reserve(limit: int) -> int:
    return int(max(RESERVE_MIN_MB * MiB, RESERVE_SHARE * limit))


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


def dask_worker_limit(rss: int) -> Limit | None:
    """The memory limit of the Dask worker running this code (``None`` outside a worker or
    when it has none)."""
    import sys

    if "distributed" not in sys.modules:  # never import Dask only to learn we are not on it
        return None
    try:
        from distributed import get_worker

        lim = int(get_worker().memory_manager.memory_limit or 0)
    except (ImportError, ValueError, AttributeError):
        return None
    return Limit("Dask worker memory_limit", lim, rss, "distributed") if lim > 0 else None


def parse_memory_mb(value: Any, what: str = "--memory-mb") -> float:
    """An explicit budget in MiB (a number > 0), or :class:`MemoryBudgetError`."""
    try:
        mb = float(str(value).strip())
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise MemoryBudgetError(
            f"{what}: expected MiB (a number > 0), got {value!r}; e.g. {what} 1400"
        )
    return mb


def detect(
    explicit_mb: float | None = None,
    *,
    root: str = "/",
    proc_cgroup: str | None = None,
    mountinfo: str | None = None,
    status: dict[str, int] | None = None,
    mem_available: int | None = None,
    dask: bool = True,
) -> MemoryBudget:
    """Measure the budget now (see the module doc); the arguments after ``explicit_mb``
    replace what is read from the system (tests)."""
    status = process_status() if status is None else status
    rss = status.get("VmRSS", 0)
    limits: list[Limit] = []
    if explicit_mb is not None:
        limits.append(Limit("--memory-mb", int(float(explicit_mb) * MiB), rss, "explicit"))
    limits += cgroup_limits(root, proc_cgroup, mountinfo)
    if root in ("", "/"):
        limits += rlimit_limits(status)
    avail = mem_available if mem_available is not None else mem_available_bytes()
    if avail is not None:
        limits.append(Limit("MemAvailable", int(avail) + rss, rss, "/proc/meminfo"))
    if dask:
        w = dask_worker_limit(rss)
        if w is not None:
            limits.append(w)
    if not limits:
        return MemoryBudget((), None, 0)
    binding = min(limits, key=lambda lim: lim.headroom - _reserve(lim.limit))
    budget = max(0, binding.headroom - _reserve(binding.limit))
    return MemoryBudget(tuple(limits), binding, budget, rss=rss)


def code_need(budget: MemoryBudget) -> int:
    """What ooc-svm's own code will still add to the process once a run starts (the
    interpreter, numpy, numba and the compiled kernels: :data:`CODE_MB` resident in all),
    beyond what was resident when the budget was measured."""
    return max(0, int(CODE_MB * MiB) - budget.rss)


# ------------------------------------------------------------------------------------------
# the process's budget
# ------------------------------------------------------------------------------------------

_CURRENT: list[MemoryBudget] = []
_EXPLICIT: list[float] = []
_LOCK = threading.Lock()


def set_explicit(mb: float | None) -> None:
    """Set (or with ``None`` forget) the explicit budget of this process (``--memory-mb``);
    the budget is measured again on the next :func:`current`."""
    with _LOCK:
        _EXPLICIT.clear()
        if mb is not None:
            _EXPLICIT.append(float(mb))
        _CURRENT.clear()


def explicit_state() -> float | None:
    """What :func:`set_explicit` set, to give back when a command ends (its ``--memory-mb``
    must not outlive it in a process that runs more: the API, the warm server, tests)."""
    return _EXPLICIT[0] if _EXPLICIT else None


def explicit_mb() -> float | None:
    """The explicit budget: ``--memory-mb`` (:func:`set_explicit`), else
    ``$OOC_SVM_MEMORY_MB``, else ``None``."""
    if _EXPLICIT:
        return _EXPLICIT[0]
    env = os.environ.get(ENV, "").strip()
    return parse_memory_mb(env, f"${ENV}") if env else None


def current() -> MemoryBudget:
    """This process's budget, measured on first use (and after :func:`reset`)."""
    with _LOCK:
        if not _CURRENT:
            _CURRENT.append(detect(explicit_mb()))
        return _CURRENT[0]


def reset() -> None:
    """Measure the budget again on the next :func:`current` (claims are dropped)."""
    with _LOCK:
        _CURRENT.clear()


@contextlib.contextmanager
def claimed(name: str, nbytes: int, what: str = "this run", fix: str = ""):
    """:meth:`MemoryBudget.require` for the duration of a ``with`` block."""
    b = current()
    b.require(name, nbytes, what, fix)
    try:
        yield b
    finally:
        b.release(name)


# page cache ---------------------------------------------------------------------------------


def drop_cache_of(path: str) -> None:
    """Tell the kernel the page cache of a file just read is no longer needed
    (``posix_fadvise(DONTNEED)``): under a cgroup v1 limit the page cache counts, and a
    stream over a store larger than the budget would otherwise push the process's own
    memory out before the kernel reclaimed it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
