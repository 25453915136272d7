"""Solver checkpoints: written atomically after every iteration, read back to resume.

Layout of a checkpoint directory::

    DIR/LATEST            name of the newest complete checkpoint (replaced atomically)
    DIR/ckpt-000042/      meta.json (solver, params, iteration, scalars) + arrays.npz
                          (+ shards.npz: per-shard state arrays, ``s{i}_{name}``)

A new checkpoint is written to a fresh ``ckpt-*`` directory, fsynced, and only then does
``LATEST`` point to it; older checkpoints are removed afterwards. A crash or Ctrl-C at any
moment leaves the previous complete checkpoint readable. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._util import json_default

CHECKPOINT_FORMAT = "ooc-svm-checkpoint"


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
    """

    def __init__(
        self,
        directory: str,
        solver: str,
        params: dict | None = None,
        keep: int = 1,
        resume: bool = False,
    ):
        self.directory = os.path.abspath(directory)
        self.resume = resume
        self.solver = solver
        self.params = _jsonable(params or {})
        self.keep = max(1, keep)
        os.makedirs(self.directory, exist_ok=True)

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
            "scalars": _jsonable(scalars or {}),
            "n_shard_states": None if shard_states is None else len(shard_states),
        }
        with open(os.path.join(tmp, "arrays.npz"), "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in (arrays or {}).items()})
            f.flush()
            os.fsync(f.fileno())
        if shard_states is not None:
            flat = {}
            for i, st in enumerate(shard_states):
                for k, v in st.items():
                    flat[f"s{i}_{k}"] = np.asarray(v)
            with open(os.path.join(tmp, "shards.npz"), "wb") as f:
                np.savez(f, **flat)
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
        """The latest complete checkpoint, or None when the directory has none."""
        latest = os.path.join(self.directory, "LATEST")
        if not os.path.exists(latest):
            return None
        name = open(latest).read().strip()
        path = os.path.join(self.directory, name)
        try:
            with open(os.path.join(path, "meta.json")) as f:
                meta = json.load(f)
            with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            shard_states = None
            if meta.get("n_shard_states") is not None:
                shard_states = [{} for _ in range(int(meta["n_shard_states"]))]
                with np.load(os.path.join(path, "shards.npz"), allow_pickle=False) as z:
                    for key in z.files:
                        i, _, k = key[1:].partition("_")
                        shard_states[int(i)][k] = z[key]
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(f"{path}: unreadable checkpoint ({e})") from None
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path}: not an ooc-svm checkpoint")
        if meta.get("solver") != self.solver:
            raise CheckpointError(
                f"{self.directory}: checkpoint is of solver {meta.get('solver')!r}, "
                f"not {self.solver!r}"
            )
        if check_params and meta.get("params") != self.params:
            diff = sorted(
                k
                for k in set(meta.get("params", {})) | set(self.params)
                if meta.get("params", {}).get(k) != self.params.get(k)
            )
            raise CheckpointError(
                f"{self.directory}: checkpoint was made with different parameters "
                f"({', '.join(diff)}); resume with the same parameters"
            )
        return CheckpointData(
            solver=meta["solver"],
            iteration=int(meta["iteration"]),
            scalars=meta.get("scalars", {}),
            arrays=arrays,
            shard_states=shard_states,
            params=meta.get("params", {}),
        )


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=json_default))
