"""The store backends' registry (:mod:`ooc_svm.store.backends`): every format-dependent choice
comes from it, so a third format registered at run time is ingested into, trained on and
scored through like the built-in ones."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_FORMATS

from ooc_svm.cli import main
from ooc_svm.model.model import load_model
from ooc_svm.store import open_store
from ooc_svm.store.backends import (
    PARQUET,
    ZARR,
    Backend,
    backend_for_path,
    backend_names,
    get_backend,
    register_backend,
    unregister_backend,
)
from ooc_svm.store.base import ShardGuard, load_meta_json, store_fs
from ooc_svm.store.format import Shard, StoreError, StoreMeta
from ooc_svm.store.paths import atomic_write_bytes, get_fs

MARKER = "_toy_store.json"


class ToyShardWriter:
    """One ``.npz`` file per shard (no pickle), the metadata in :data:`MARKER`."""

    def __init__(self, path: str, compression: str = "none") -> None:
        self.fs, self.root = get_fs(path)
        self.fs.makedirs(self.root, exist_ok=True)

    def write(self, name: str, shard: Shard) -> None:
        arrays = {k: np.asarray(getattr(shard, k)) for k in ("indptr", "indices", "data", "y")}
        if shard.qid is not None:
            arrays["qid"] = np.asarray(shard.qid)
        np.savez(os.path.join(self.root, f"{name}.npz"), **arrays)

    def write_meta(self, meta: StoreMeta) -> None:
        atomic_write_bytes(self.fs, f"{self.root}/{MARKER}", meta.to_json().encode())


class ToyStore(ShardGuard):
    """Reads what :class:`ToyShardWriter` wrote; every shard passes the usual checks."""

    backend = "toy"

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._fs, root, local = store_fs(self.path)
        self._init_guard(local, root)
        self.meta = StoreMeta.from_dict(load_meta_json(self._fs, root, MARKER, self.path))

    def _read(self, i: int) -> Shard:
        info = self.meta.shards[i]
        with np.load(os.path.join(self._root, f"{info.name}.npz"), allow_pickle=False) as z:
            qid = z["qid"] if "qid" in z.files else None
            return Shard(z["indptr"], z["indices"], z["data"], z["y"], qid, info.row_start)

    def read_shard(self, i: int, verify: bool = False) -> Shard:
        return self.accept(i, self._read(i), None, verify)

    def shard_reader(self, fast: bool = True):
        return lambda i: self.accept(i, self._read(i), None, False)


TOY = Backend(
    name="toy",
    suffixes=(".toy",),
    marker=MARKER,
    default_codec="none",
    reader=ToyStore,
    writer=ToyShardWriter,
    shard_suffix=".npz",
)


@pytest.fixture
def toy_backend():
    register_backend(TOY)
    yield TOY
    unregister_backend(TOY.name)


def test_the_built_in_formats():
    assert STORE_FORMATS == backend_names() == ["zarr", "parquet"]
    assert backend_for_path("a/b.parquet") is PARQUET and backend_for_path("x.PQ/") is PARQUET
    assert backend_for_path("s.zarr") is ZARR and backend_for_path("s") is ZARR  # the default
    with pytest.raises(StoreError, match="unknown store format 'csv'; use zarr or parquet"):
        get_backend("csv")
    with pytest.raises(StoreError, match="already registered"):
        register_backend(ZARR)
    unregister_backend("zarr")  # the built-in formats stay
    assert backend_names() == ["zarr", "parquet"]


def test_a_registered_format_ingests_trains_and_predicts(toy_backend, tmp_path, capsys):
    rng = np.random.default_rng(3)
    X = sp.random(300, 12, density=0.3, format="csr", random_state=3, dtype=np.float32)
    y = np.where(X @ rng.standard_normal(12) > 0, 1, -1)
    text = tmp_path / "d.svm"
    lines = []
    for i in range(X.shape[0]):
        row = X.getrow(i)
        cols = " ".join(f"{j + 1}:{float(v)!r}" for j, v in zip(row.indices, row.data, strict=True))
        lines.append(f"{y[i]} {cols}")
    text.write_text("\n".join(lines) + "\n")
    os.chdir(tmp_path)
    assert main(["ingest", "-q", "d.svm", "d.toy", "--shard-rows", "100"]) == 0
    store = open_store("d.toy")
    assert isinstance(store, ToyStore) and store.meta.backend == "toy"
    assert store.meta.compression == "none" and store.n_shards == 3
    assert sorted(os.listdir("d.toy")) == [MARKER, "s0000000.npz", "s0000001.npz", "s0000002.npz"]
    # --format names it too, whatever the suffix
    assert main(["ingest", "-q", "d.svm", "other", "--format", "toy"]) == 0
    assert isinstance(open_store("other"), ToyStore)
    assert main(["train", "-q", "--solver", "perf", "d.toy", "-o", "m", "--bias", "1"]) == 0
    assert main(["predict", "-q", "m", "d.toy", "-o", "p.txt"]) == 0
    score, pred = np.loadtxt("p.txt", skiprows=1, usecols=(1, 2), unpack=True)
    model = load_model("m")
    np.testing.assert_allclose(score, np.ravel(model.decision_function(X)), rtol=1e-12)
    np.testing.assert_array_equal(pred, model.predict(X))
    assert main(["verify", "-q", "d.toy"]) == 0
    capsys.readouterr()
