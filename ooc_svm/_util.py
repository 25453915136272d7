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
