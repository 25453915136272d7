"""Solver checkpoints: written atomically after every iteration, read back to resume.

Layout of a checkpoint directory::

    DIR/LATEST            name of the newest complete checkpoint (replaced atomically)
    DIR/ckpt-000042/      meta.json (solver, params, iteration, scalars) + arrays.npz
                          (+ shards.npz: per-shard state arrays, ``s{i}_{name}``)

A new checkpoint is written to a fresh ``ckpt-*`` directory, fsynced, and only then does
``LATEST`` point to it; older checkpoints are removed afterwards. A crash or Ctrl-C at any
moment leaves the previous complete checkpoint readable. Nothing is pickled.

Every checkpoint records the identity of its store (:func:`store_identity`: path, rows,
features, non-zeros and a hash of the shard checksums) and the solver parameters; resuming
on another store, or with other parameters, is refused with one line naming both. The
directory is created by the first :meth:`Checkpointer.save`, so a run refused before it
starts leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ._util import json_default
from .model.model import ModelError

if TYPE_CHECKING:
    from .store.base import Store

CHECKPOINT_FORMAT = "ooc-svm-checkpoint"

log = logging.getLogger(__name__)

#: identity fields that must match for a resume (the path may differ: a copied store is fine)
_IDENTITY_KEYS = ("n_rows", "n_features", "nnz", "shards_sha256")
#: parameters that do not change the result: they may differ on resume (``init``: a resumed
#: run continues from its checkpoint, not from the model it started from)
_NOT_PROBLEM = frozenset({"checkpoint_seconds", "init"})


def store_identity(store: Store) -> dict[str, Any]:
    """What identifies a store's contents: resolved path, n_rows, n_features, nnz, and the
    SHA-256 of its shard checksums (a rewritten store at the same path differs)."""
    meta = store.meta
    path = str(getattr(store, "path", "") or "")
    if path and "://" not in path:
        path = os.path.realpath(path)
    h = hashlib.sha256()
    for info in meta.shards:
        h.update(f"{info.row_start}:{info.n_rows}:{info.nnz}:{info.checksum};".encode())
    return {
        "path": path,
        "n_rows": int(meta.n_rows),
        "n_features": int(meta.n_features),
        "nnz": int(meta.nnz),
        "shards_sha256": h.hexdigest(),
    }


def _describe(ident: dict) -> str:
    return (
        f"{ident.get('path') or '?'} ({ident.get('n_rows')} rows, "
        f"{ident.get('n_features')} features, {ident.get('nnz')} non-zeros)"
    )


class CheckpointError(Exception):
    """A checkpoint cannot be read or does not match the run being resumed."""


@dataclass
class CheckpointData:
    """What a solver saved: scalars (JSON), arrays, and optional per-shard state arrays."""

    solver: str
    iteration: int
    scalars: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    shard_states: list[dict[str, np.ndarray]] | None = None
    params: dict[str, Any] = field(default_factory=dict)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Checkpointer:
    """Writes and reads the checkpoints of one training run.

    Parameters
    ----------
    directory : str
        Checkpoint directory (created if missing).
    solver : str
        Solver name, checked on resume.
    params : dict
        Solver parameters, saved with every checkpoint and checked on resume (a resumed run
        must use the same parameters).
    keep : int
        Number of complete checkpoints kept.
    resume : bool
        Whether the solver should start from :meth:`load` (``--resume``).
    store : Store, optional
        The store trained on: its :func:`store_identity` is saved and checked on resume.
    """

    def __init__(
        self,
        directory: str,
        solver: str,
        params: dict | None = None,
        keep: int = 1,
        resume: bool = False,
        store: Store | None = None,
    ) -> None:
        self.directory = os.path.abspath(directory)
        self.name = str(directory)  # as the user gave it (messages)
        self.resume = resume
        self.solver = solver
        self.params = _jsonable(params or {})
        self.keep = max(1, keep)
        self.store = None if store is None else store_identity(store)
        # the directory is made by the first save(): a refused run leaves nothing behind

    # -- writing --------------------------------------------------------------------------
    def save(
        self,
        iteration: int,
        scalars: dict[str, Any] | None = None,
        arrays: dict[str, np.ndarray] | None = None,
        shard_states: list[dict[str, np.ndarray]] | None = None,
    ) -> str:
        """Write a complete checkpoint for ``iteration`` and make it the latest."""
        name = f"ckpt-{iteration:08d}"
        final = os.path.join(self.directory, name)
        tmp = os.path.join(self.directory, f".{name}.part-{os.getpid()}")
        os.makedirs(self.directory, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            self._write(tmp, final, name, iteration, scalars, arrays, shard_states)
        except BaseException:
            # e.g. Ctrl-C while writing: the previous checkpoint stays the latest
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._prune(name)
        return final

    def _write(self, tmp, final, name, iteration, scalars, arrays, shard_states) -> None:
        meta = {
            "format": CHECKPOINT_FORMAT,
            "solver": self.solver,
            "iteration": int(iteration),
            "params": self.params,
            "store": self.store,
            "scalars": _jsonable(scalars or {}),
            "n_shard_states": None if shard_states is None else len(shard_states),
        }
        arrays = {k: np.asarray(v) for k, v in (arrays or {}).items()}
        meta["arrays"] = {k: list(v.shape) for k, v in arrays.items()}
        with open(os.path.join(tmp, "arrays.npz"), "wb") as f:
            np.savez(f, allow_pickle=False, **arrays)
            f.flush()
            os.fsync(f.fileno())
        if shard_states is not None:
            flat = {}
            for i, st in enumerate(shard_states):
                for k, v in st.items():
                    flat[f"s{i}_{k}"] = np.asarray(v)
            meta["shard_arrays"] = {k: list(v.shape) for k, v in flat.items()}
            with open(os.path.join(tmp, "shards.npz"), "wb") as f:
                np.savez(f, allow_pickle=False, **flat)
                f.flush()
                os.fsync(f.fileno())
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(self.directory)
        latest_tmp = os.path.join(self.directory, f".LATEST.{os.getpid()}")
        with open(latest_tmp, "w") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, os.path.join(self.directory, "LATEST"))
        _fsync_dir(self.directory)

    def _prune(self, newest: str) -> None:
        names = sorted(n for n in os.listdir(self.directory) if n.startswith("ckpt-"))
        for n in names[: max(0, len(names) - self.keep)]:
            if n != newest:
                shutil.rmtree(os.path.join(self.directory, n), ignore_errors=True)
        for n in os.listdir(self.directory):
            if n.startswith(".ckpt-") and not n.endswith(f"-{os.getpid()}"):
                shutil.rmtree(os.path.join(self.directory, n), ignore_errors=True)

    # -- reading --------------------------------------------------------------------------
    def load(self, check_params: bool = True) -> CheckpointData | None:
        """The latest complete checkpoint, or None when the directory has none.

        Nothing in the directory is trusted: ``LATEST``, ``meta.json`` and the ``.npz`` files
        must be regular files of bounded size, the arrays are read as the model loader reads
        them (numbers only, sizes and CRCs checked), and they must be the ones ``meta.json``
        lists. Any problem is one :class:`CheckpointError`: the checkpoint is damaged.
        """
        latest = os.path.join(self.directory, "LATEST")
        if not os.path.lexists(latest):
            if self.resume:
                log.info("no checkpoint found in %s, starting fresh", self.directory)
            return None
        try:
            name = _read_small(latest, MAX_LATEST_BYTES).decode("ascii").strip()
            if not _CKPT_NAME.fullmatch(name):
                raise _Damaged(f"LATEST names {name[:40]!r}, not a checkpoint")
            path = os.path.join(self.directory, name)
            meta = _load_meta(os.path.join(path, "meta.json"))
            arrays = _read_npz(os.path.join(path, "arrays.npz"))
            _check_listed(meta.get("arrays"), arrays, "arrays.npz")
            shard_states = _read_shard_states(path, meta)
            if not isinstance(meta.get("iteration"), int) or not isinstance(
                meta.get("scalars", {}), dict
            ):
                raise _Damaged("meta.json: iteration or scalars missing")
            if not isinstance(meta.get("params", {}), dict):
                raise _Damaged("meta.json: params is not a JSON object")
        except (_Damaged, UnicodeDecodeError, ModelError) as e:
            raise CheckpointError(
                f"checkpoint {self.name} is damaged ({e}); delete it or start without --resume"
            ) from None
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path}: not an ooc-svm checkpoint")
        if meta.get("solver") != self.solver:
            raise CheckpointError(
                f"{self.directory}: checkpoint is of solver {meta.get('solver')!r}, "
                f"not {self.solver!r}"
            )
        saved_store = meta.get("store")
        if saved_store and self.store is not None:
            if any(saved_store.get(k) != self.store.get(k) for k in _IDENTITY_KEYS):
                raise CheckpointError(
                    f"{self.directory}: checkpoint was made on store {_describe(saved_store)}, "
                    f"not on {_describe(self.store)}; resume with the original store or use "
                    "another --checkpoint directory"
                )
        diff = sorted(
            k
            for k in set(meta.get("params", {})) | set(self.params)
            if meta.get("params", {}).get(k) != self.params.get(k) and k not in _NOT_PROBLEM
        )
        if check_params and diff:
            saved = meta.get("params", {})
            what = ", ".join(
                f"{k} {saved.get(k)!r} there, {self.params.get(k)!r} now" for k in diff
            )
            raise CheckpointError(
                f"{self.directory}: checkpoint was made with different parameters "
                f"({what}); resume with the same parameters"
            )
        return CheckpointData(
            solver=meta["solver"],
            iteration=int(meta["iteration"]),
            scalars=meta.get("scalars", {}),
            arrays=arrays,
            shard_states=shard_states,
            params=meta.get("params", {}),
        )


class _Damaged(Exception):
    """What is wrong with a checkpoint (turned into a :class:`CheckpointError`)."""


#: largest ``LATEST`` read (it holds one ``ckpt-NNNNNNNN`` name)
MAX_LATEST_BYTES = 4096
#: largest ``meta.json`` read (solver state scalars and history)
MAX_META_BYTES = 256 << 20
_CKPT_NAME = re.compile(r"ckpt-[0-9]{8,}")


def _regular_size(path: str) -> int:
    """Size of ``path`` if it is a regular file (symlinks followed); :class:`_Damaged` if not."""
    what = os.path.basename(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _Damaged(f"{what} is missing") from None
    except OSError as e:
        raise _Damaged(f"cannot read {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Damaged(f"{what} is not a regular file")
    return int(st.st_size)


def _read_small(path: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    size = _regular_size(path)
    if size > limit:
        raise _Damaged(f"{os.path.basename(path)} is {size} bytes, more than {limit}")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise _Damaged(f"cannot read {os.path.basename(path)}: {e.strerror or e}") from None
    if len(data) > limit:
        raise _Damaged(f"{os.path.basename(path)} is larger than {limit} bytes")
    return data


def _load_meta(path: str) -> dict:
    try:
        meta = json.loads(_read_small(path, MAX_META_BYTES).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise _Damaged(f"meta.json is not valid JSON: {str(e)[:80]}") from None
    if not isinstance(meta, dict):
        raise _Damaged("meta.json is not a JSON object")
    return meta


def _read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of a checkpoint ``.npz``, read as :func:`ooc_svm.model.model.load_model` reads a
    model's: a regular file, no pickle, declared sizes checked against the file, CRCs."""
    import zipfile

    from .model.model_files import read_npy_member

    what = os.path.basename(path)
    size = _regular_size(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise _Damaged(f"{what} is not a valid npz file: {e}") from None
    out: dict[str, np.ndarray] = {}
    with zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in out:
                raise _Damaged(f"{what} holds {name!r} twice")
            stored = info.compress_type == zipfile.ZIP_STORED
            if (
                info.compress_size > size
                or (stored and info.file_size != info.compress_size)
                or info.file_size > 1100 * info.compress_size + 4096
            ):
                raise _Damaged(f"{what}: member {name!r} declares impossible sizes")
            out[name] = read_npy_member(what, zf, info, name)
    return out


def _read_shard_states(path: str, meta: dict) -> list[dict[str, np.ndarray]] | None:
    """The per-shard states of checkpoint ``path`` (``shards.npz``, members ``s{i}_{name}``),
    or None when ``meta.json`` declares none; raises ``_Damaged``."""
    n_states = meta.get("n_shard_states")
    if n_states is None:
        return None
    if not isinstance(n_states, int) or isinstance(n_states, bool) or n_states < 0:
        raise _Damaged("meta.json: n_shard_states is not a count")
    flat = _read_npz(os.path.join(path, "shards.npz"))
    _check_listed(meta.get("shard_arrays"), flat, "shards.npz")
    shard_states: list[dict[str, np.ndarray]] = [{} for _ in range(n_states)]
    for key, value in flat.items():
        i, _, k = key[1:].partition("_")
        if not (key[:1] == "s" and i.isdigit() and int(i) < n_states and k):
            raise _Damaged(f"shards.npz: unexpected member {key!r}")
        shard_states[int(i)][k] = value
    return shard_states


def _check_listed(listed, arrays: dict[str, np.ndarray], what: str) -> None:
    """The arrays ``meta.json`` lists (name -> shape) are the ones read (older checkpoints
    list none: not checked)."""
    if listed is None:
        return
    if not isinstance(listed, dict):
        raise _Damaged(f"meta.json: the list of {what} arrays is not a JSON object")
    have = {k: list(v.shape) for k, v in arrays.items()}
    if have != listed:
        missing = sorted(set(listed) - set(have))
        raise _Damaged(
            f"{what} does not hold the arrays meta.json lists"
            + (f" (missing {', '.join(missing[:3])})" if missing else "")
        )


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=json_default))
