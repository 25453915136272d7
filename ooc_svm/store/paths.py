"""File-system access through fsspec, with atomic writes and renames where possible."""

from __future__ import annotations

import os
import uuid


def is_local(path: str) -> bool:
    """True when ``path`` is a plain local path (or ``file://`` URL)."""
    return "://" not in str(path) or str(path).startswith("file://")


def get_fs(path: str):
    """Return ``(filesystem, root)`` for a path or URL."""
    import fsspec  # only here: a local store is read with os calls (store.base.store_fs)

    fs, root = fsspec.core.url_to_fs(str(path))
    return fs, root.rstrip("/")


def local_path(path: str) -> str:
    p = str(path)
    if p.startswith("file://"):
        p = p[len("file://") :]
    return os.path.abspath(p)


def temp_sibling(path: str, tag: str = "tmp") -> str:
    """A unique name next to ``path`` that no reader mistakes for a store (dot-prefixed)."""
    path = str(path).rstrip("/")
    head, _, tail = path.rpartition("/")
    name = f".{tail}.{tag}-{uuid.uuid4().hex[:12]}"
    return f"{head}/{name}" if head else name


def atomic_write_bytes(fs, path: str, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so readers see either the old or the new content."""
    tmp = temp_sibling(path, "part")
    with fs.open(tmp, "wb") as f:
        f.write(payload)
        if hasattr(f, "flush"):
            f.flush()
        if hasattr(f, "fileno"):
            try:
                os.fsync(f.fileno())
            except (OSError, ValueError, AttributeError):
                pass
    fs.mv(tmp, path)
