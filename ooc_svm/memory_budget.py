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
run allocates anything large, by the command that runs it: the engine and the solver are
handed the run's sizes (:class:`ooc_svm.sizes.Sizes`) and do not read :func:`current`.

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
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from .memory_limits import (
    Limit,
    cap_malloc_arenas,
    cgroup_limits,
    mem_available_bytes,
    parse_proc_cgroup,
    process_status,
    rlimit_limits,
    rss_bytes,
)

__all__ = [
    "Limit",
    "MemoryBudget",
    "MemoryBudgetError",
    "cgroup_limits",
    "current",
    "detect",
    "mem_available_bytes",
    "parse_proc_cgroup",
    "process_status",
    "rss_bytes",
]

MiB = 2**20

#: the reserve kept free under the limit: this share of it, and at least this many MiB
RESERVE_SHARE, RESERVE_MIN_MB = 0.05, 48.0

#: resident memory of ooc-svm's own code in a run (the interpreter, numpy, scipy, numba, the
#: compiled kernels): a training on a 20,000-row store peaks at ~230 MiB RSS, its one shard
#: of 13 MiB included
CODE_MB = 224.0

#: address space of ooc-svm's code in a run, what ``RLIMIT_AS`` (``ulimit -v``) counts: the
#: libraries mapped, numba's compiler, thread stacks and malloc's arenas (at most
#: :data:`ARENA_MAX` once an address-space limit is found): a small training maps ~380 MiB
#: at its peak, 222 MiB of it resident
CODE_AS_MB = 448.0

#: a refusal's suggested limit leaves this much more room than the run's need (MiB): what is
#: in use when the budget is measured (the interpreter, the page cache a cgroup counts)
#: differs a little from run to run
HINT_SLACK_MB = 16.0

#: environment variable of an explicit budget (MiB), as ``--memory-mb``
ENV = "OOC_SVM_MEMORY_MB"


class MemoryBudgetError(ValueError):
    """A budget below what a run needs, or an invalid ``--memory-mb``: one line with the fix."""


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
            self._refuse_above(claims, what, fix)
            self.claims = claims

    def check(self, needs: dict[str, int], what: str = "this run", fix: str = "") -> None:
        """Refuse (as :meth:`require`) when the claims made so far and ``needs`` together
        exceed the budget, claiming nothing: a run checks the least it will claim in all
        before its first claim, so that the limit its refusal names is enough for every
        later claim too (one hint, not a chain of them)."""
        with self._lock:
            self._refuse_above({**self.claims, **needs}, what, fix)

    def _refuse_above(self, claims: dict[str, int], what: str, fix: str) -> None:
        need = sum(max(0, int(v)) for v in claims.values())
        if need <= self.bytes:
            return
        parts = ", ".join(f"{k} {v / MiB:,.0f}" for k, v in claims.items() if v)
        hint = f"; or {fix}" if fix else ""
        raise MemoryBudgetError(
            f"{self.describe()} is below the {_ceil_mib(need):,} MiB {what} needs at least "
            f"({parts} MiB): {self.raise_hint(need)}{hint}"
        )

    def raise_hint(self, need: int) -> str:
        """How to give ``need`` bytes, in the terms of the binding limit: a value of
        ``--memory-mb``, of the container's limit or of ``ulimit -v`` that a run given it
        accepts (:meth:`limit_for`)."""
        mb = _ceil_mib(self.limit_for(need))
        name = self.binding.name if self.binding is not None else ""
        if name.startswith("cgroup"):
            return f"raise the container's memory limit ({name}) to {mb:,} MiB or more"
        if name == "RLIMIT_AS":
            return f"raise ulimit -v to {mb * 1024:,} (KiB) or more"
        if name == "RLIMIT_DATA":
            return f"raise ulimit -d to {mb * 1024:,} (KiB) or more"
        if name == "MemAvailable":
            return f"free {_ceil_mib(need - self.bytes):,} MiB of the machine's memory or more"
        if name.startswith("Dask"):
            return f"give the Dask workers a memory limit of {mb:,} MiB or more"
        return f"give --memory-mb {mb:,} or more (or raise the container's limit)"

    def limit_for(self, need: int) -> int:
        """The limit under which a run that needs ``need`` bytes is accepted: what is in use,
        the need and the reserve *of that limit* (a share of it), plus
        :data:`HINT_SLACK_MB` for what is in use to differ a little in the next run,
        rounded up to 10 MiB. Computed once: following it is enough (the checks of a run
        are made before its first claim, :meth:`check`)."""
        used = self.binding.used if self.binding is not None else self.rss
        base = used + int(need) + int(HINT_SLACK_MB * MiB)
        limit = max(base + int(RESERVE_MIN_MB * MiB), math.ceil(base / (1.0 - RESERVE_SHARE)))
        step = 10 * MiB
        return -(-limit // step) * step

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
        rl = rlimit_limits(status)
        if rl:
            cap_malloc_arenas()
        limits += rl
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
    beyond what was resident when the budget was measured; under ``RLIMIT_AS`` what it will
    still map (:data:`CODE_AS_MB`) beyond the address space mapped then."""
    if budget.binding is not None and budget.binding.name == "RLIMIT_AS":
        return max(0, int(CODE_AS_MB * MiB) - budget.binding.used)
    return max(0, int(CODE_MB * MiB) - budget.rss)


def out_of_memory_line(e: BaseException) -> str | None:
    """One line for a run that ran out of memory all the same (``MemoryError``, a thread
    that could not start under ``ulimit -v``): what ran out, the budget, the process's peak
    and a limit to raise; None for any other error."""
    if isinstance(e, MemoryError):
        what = str(e) or "an allocation failed"
    elif isinstance(e, RuntimeError) and "can't start new thread" in str(e):
        what = "a thread could not start"
    else:
        return None
    st = process_status()
    b = current()
    name = b.binding.name if b.binding is not None else ""
    peak = st.get("VmPeak" if name in ("RLIMIT_AS", "RLIMIT_DATA") else "VmHWM", 0)
    grow = max(int(1.5 * peak), (b.binding.limit if b.binding is not None else 0) + 256 * MiB)
    return (
        f"out of memory ({what}) under the {b.describe()}, the process at {peak / MiB:,.0f} "
        f"MiB at its peak: {b.raise_hint(max(0, grow - b.limit_for(0)))}, or run it on one CPU "
        "(taskset -c 0 ...: fewer threads)"
    )


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
