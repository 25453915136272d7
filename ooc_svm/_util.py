"""Small helpers shared across the package (standard library and numpy only, cheap to import).

Sections: CPU count and memory (engine), JSON of numpy values.
(Atomic writes live here too once the scoring helper adds them.)
"""

from __future__ import annotations

import os
from typing import Any

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
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (``None`` where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # pragma: no cover - not Linux
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None


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


# ------------------------------------------------------------------------------------------
# shard cache budget (engine)
# ------------------------------------------------------------------------------------------

#: share of MemAvailable the automatic shard cache may use (``auto`` = ``auto:0.5``)
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


def auto_cache_bytes(spec: str = "auto", limit_bytes: int | None = None) -> int:
    """Byte budget of an automatic shard cache: ``SHARE × MemAvailable`` (now), at most
    :data:`AUTO_CACHE_CAP_MB` and at most ``limit_bytes``; 0 when memory cannot be read."""
    share = AUTO_CACHE_SHARE
    if spec.startswith("auto:"):
        share = float(spec[5:])
    avail = mem_available_bytes()
    if not avail:
        return 0
    budget = min(int(share * avail), int(AUTO_CACHE_CAP_MB * 2**20))
    if limit_bytes is not None:
        budget = min(budget, int(limit_bytes))
    return max(0, budget)
