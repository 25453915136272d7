"""File-system access through fsspec, with atomic writes and renames where possible.

Remote stores (``s3://bucket/store.zarr``) go through fsspec and its file-system package
(``s3fs`` for S3: ``pip install 'ooc-svm[s3]'``). Endpoint and credentials come from where
s3fs / botocore users keep them: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL`` (an S3-compatible server), ``AWS_PROFILE`` / ``~/.aws``, or fsspec's
own configuration (``FSSPEC_S3_ENDPOINT_URL``, ``FSSPEC_S3='{"key": ..., "config_kwargs":
{...}}'``, files in ``~/.config/fsspec``). Dask workers read the same variables, so they
must see the same environment.

Timeouts: s3fs connects within 5 s and reads within 15 s per request (fsspec
``config_kwargs`` ``connect_timeout`` / ``read_timeout`` change that); this module caps
botocore's retries at 3 attempts in its "standard" mode (unless ``AWS_MAX_ATTEMPTS`` /
``AWS_RETRY_MODE`` or an fsspec ``config_kwargs`` says otherwise) and s3fs's own retry loop
around them at :data:`S3FS_RETRIES` (no retry of its own), so an endpoint that refuses
connections fails in seconds and one that never answers after 3 read timeouts (about a
minute), instead of retrying for many minutes.
Errors of the remote file system are turned into one-line
:class:`~ooc_svm.store.format.StoreError` messages by :func:`remote_errors`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .format import StoreError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: the extra that installs the file-system package of a protocol
_EXTRAS = {"s3": "s3", "s3a": "s3"}
#: botocore retries when neither the environment nor fsspec's configuration sets them
_DEFAULT_RETRIES = {"max_attempts": 3, "mode": "standard"}
#: tries of s3fs's own retry loop (around botocore's) on timeouts and dropped connections
S3FS_RETRIES = 1
_QUIETED = False


def is_local(path: str) -> bool:
    """True when ``path`` is a plain local path (or ``file://`` URL)."""
    return "://" not in str(path) or str(path).startswith("file://")


def protocol_of(path: str) -> str:
    """``s3`` for ``s3://...``, ``file`` for local paths."""
    p = str(path)
    return p.split("://", 1)[0].lower() if "://" in p else "file"


def _quiet_aws_logging() -> None:
    # botocore logs "Found credentials in environment variables." at INFO on every client:
    # the CLI's INFO log is for the user; keep these at WARNING unless set by the user or
    # the root logger is at DEBUG (``ooc-svm -vv``)
    global _QUIETED
    if _QUIETED or logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return
    _QUIETED = True
    for name in ("botocore", "aiobotocore", "s3fs"):
        lg = logging.getLogger(name)
        if lg.level == logging.NOTSET:
            lg.setLevel(logging.WARNING)


def _storage_options(protocol: str) -> dict:
    """Defaults this package adds for ``protocol`` (fsspec's configuration wins)."""
    if protocol not in ("s3", "s3a"):
        return {}
    _quiet_aws_logging()
    import fsspec

    conf = fsspec.config.conf.get("s3", {})
    ck = dict(conf.get("config_kwargs") or {})
    if "retries" not in ck and not (
        os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")
    ):
        ck["retries"] = dict(_DEFAULT_RETRIES)
    return {"config_kwargs": ck}


def get_fs(path: str) -> tuple[AbstractFileSystem, str]:
    """Return ``(filesystem, root)`` for a path or URL.

    Raises
    ------
    StoreError
        When the file-system package of the URL's protocol is not installed.
    """
    import fsspec  # only here: a local store is read with os calls (store.base.store_fs)

    proto = protocol_of(path)
    try:
        fs, root = fsspec.core.url_to_fs(str(path), **_storage_options(proto))
    except ImportError:
        extra = _EXTRAS.get(proto)
        fix = (
            f"pip install 'ooc-svm[{extra}]'"
            if extra
            else f"install the fsspec file system for {proto}://"
        )
        raise StoreError(
            f"{path}: {proto}:// stores need a package that is not installed; {fix}"
        ) from None
    except ValueError as e:
        raise StoreError(f"{path}: {e}") from None
    if proto in ("s3", "s3a") and isinstance(getattr(fs, "retries", None), int):
        # s3fs retries timeouts 5 times on top of botocore's attempts: 15 x 15 s before an
        # unanswered request fails (measured: `info` against a server that accepts and never
        # answers took 131 s with 2 s3fs tries, 66 s with 1). botocore's standard mode
        # already retries timeouts, dropped connections and throttling.
        fs.retries = min(fs.retries, S3FS_RETRIES)
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


def atomic_write_bytes(fs: AbstractFileSystem, path: str, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so readers see either the old or the new content.

    Local: write a temporary file, then rename it. Object stores (``fs.pipe_file``): one PUT
    is atomic there, and a "rename" would be a copy plus a delete.
    """
    if not is_local_fs(fs):
        fs.pipe_file(path, payload)
        return
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


def is_local_fs(fs: AbstractFileSystem) -> bool:
    """Whether an fsspec file system is the local one."""
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return proto in ("file", "local")


def _bucket(path: str) -> str:
    p = str(path)
    p = p.split("://", 1)[1] if "://" in p else p
    return p.split("/", 1)[0]


def _endpoint(fs) -> str:
    url = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get(
        "endpoint_url"
    )
    return str(
        url
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or "the default AWS endpoint"
    )


def describe_remote_error(
    path: str, e: BaseException, fs: AbstractFileSystem | None = None
) -> str | None:
    """A one-line explanation of an error of a remote file system, or None if not one."""
    name = type(e).__name__
    text = str(e).splitlines()[0] if str(e) else name
    mods = {c.__module__.split(".")[0] for c in type(e).__mro__}
    bucket = _bucket(path)
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return (
            f"{path}: no credentials for {bucket} ({text}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError") or (
        name in ("ReadTimeoutError", "TimeoutError", "FSTimeoutError")
    ):
        where = _endpoint(fs) if fs is not None else "the endpoint"
        return (
            f"{path}: cannot reach the object store at {where} ({name}: {text}); check "
            "AWS_ENDPOINT_URL and that the server is running"
        )
    if isinstance(e, PermissionError) or "AccessDenied" in text or "InvalidAccessKeyId" in text:
        return (
            f"{path}: access denied ({text}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
            f"and the permissions on bucket {bucket}"
        )
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"{path}: bucket {bucket} does not exist; create it first (e.g. `aws s3 mb s3://{bucket}`)"
    if mods & {"botocore", "aiobotocore", "s3fs", "aiohttp"}:
        return f"{path}: object store error ({name}: {text})"
    return None


@contextlib.contextmanager
def remote_errors(path: str, fs: AbstractFileSystem | None = None) -> Iterator[None]:
    """Turn errors of a remote file system into one-line :class:`StoreError` messages.

    Local paths pass errors through unchanged (their messages already name the file).
    """
    if is_local(path):
        yield
        return
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError as e:
        msg = describe_remote_error(path, e, fs)
        if msg is not None and "bucket" in msg:
            raise StoreError(msg) from None
        raise
    except Exception as e:  # botocore / aiohttp errors have no common base
        msg = describe_remote_error(path, e, fs)
        if msg is None:
            raise
        raise StoreError(msg) from None


def check_bucket(fs: AbstractFileSystem, path: str) -> None:
    """Raise a one-line :class:`StoreError` when the bucket of a remote ``path`` is missing."""
    bucket = _bucket(path)
    with remote_errors(path, fs):
        try:
            ok = fs.exists(bucket)
        except FileNotFoundError:
            ok = False
    if not ok:
        raise StoreError(
            f"{path}: bucket {bucket} does not exist; create it first "
            f"(e.g. `aws s3 mb s3://{bucket}`)"
        )


def is_store_path(path: str) -> bool:
    """True for a store (a directory, or a URL): what :func:`open_store` opens (else
    ``store.text_view`` reads it as SVMlight text)."""
    p = str(path)
    return p != "-" and ("://" in p or os.path.isdir(p))
