"""Helpers shared by the benchmark scripts in this folder (not part of the package)."""

from __future__ import annotations

import os


def drop_caches(warn: bool = False) -> bool:
    """Empty the page cache (needs root); False when it cannot be done."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        if warn:
            print(f"# cannot drop the page cache ({e}); cold numbers are not cold", flush=True)
        return False
