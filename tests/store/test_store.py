"""Store backends: round trip, metadata validation, atomic writes, hostile metadata."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_SUFFIXES

from ooc_svm.store import (
    ShardCorruptError,
    StoreError,
    StoreWriter,
    csr_to_shards,
    open_store,
    write_store,
)


def _data(n=1000, d=50, seed=0, qid=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.1, format="csr", random_state=seed, dtype=np.float32)
    y = rng.choice([-1.0, 1.0], n)
    q = np.repeat(np.arange(n // 10), 10) if qid else None
    return X, y, q


def _read_all(store):
    shards = [store.read_shard(i, verify=True) for i in range(store.n_shards)]
    X = sp.vstack([s.to_scipy(store.meta.n_features) for s in shards]).tocsr()
    y = np.concatenate([s.y for s in shards])
    q = np.concatenate([s.qid for s in shards]) if store.meta.has_qid else None
    return X, y, q, shards


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
@pytest.mark.parametrize("qid", [False, True])
def test_round_trip(tmp_path, suffix, qid):
    X, y, q = _data(qid=qid)
    path = str(tmp_path / f"s{suffix}")
    meta = write_store(path, csr_to_shards(X, y, q, shard_rows=300))
    assert meta.n_rows == 1000 and meta.n_shards == 4 and meta.nnz == X.nnz
    store = open_store(path)
    assert store.meta.backend == suffix[1:]
    assert store.meta.label_kind == "binary" and store.meta.labels == [-1.0, 1.0]
    X2, y2, q2, shards = _read_all(store)
    assert (X2 != X).nnz == 0
    np.testing.assert_array_equal(y2, y)
    if qid:
        np.testing.assert_array_equal(q2, q)
    assert [s.row_start for s in shards] == [0, 300, 600, 900]
    for s in shards:
        assert s.indptr.dtype == np.int64 and s.indices.dtype == np.int32
        assert s.data.dtype == np.float32
    # nothing but the store at the destination directory
    assert sorted(os.listdir(tmp_path)) == [f"s{suffix}"]


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_append_and_overwrite(tmp_path, suffix):
    X, y, _ = _data()
    path = str(tmp_path / f"s{suffix}")
    write_store(path, csr_to_shards(X[:600], y[:600], shard_rows=300))
    with pytest.raises(StoreError, match="destination exists"):
        write_store(path, csr_to_shards(X, y))
    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(X[600:], y[600:], shard_rows=300):
            w.add(s)
        w.commit()
    X2, y2, _, _ = _read_all(open_store(path))
    assert (X2 != X).nnz == 0 and np.array_equal(y2, y)
    write_store(path, csr_to_shards(X[:10], y[:10]), overwrite=True)
    assert open_store(path).meta.n_rows == 10
    assert sorted(os.listdir(tmp_path)) == [f"s{suffix}"]


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_failed_write_leaves_nothing(tmp_path, suffix):
    X, y, _ = _data()
    path = str(tmp_path / f"s{suffix}")
    with pytest.raises(RuntimeError):
        with StoreWriter(path) as w:
            for s in csr_to_shards(X, y, shard_rows=300):
                w.add(s)
                raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_not_a_store_and_newer_version(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="not an ooc-svm store"):
        open_store(str(tmp_path / "empty"))
    with pytest.raises(StoreError, match="no such store"):
        open_store(str(tmp_path / "missing"))
    X, y, _ = _data()
    path = str(tmp_path / "s.parquet")
    write_store(path, csr_to_shards(X, y))
    meta_file = os.path.join(path, "_ooc_svm.json")
    doc = json.load(open(meta_file))
    doc["version"] = 99
    json.dump(doc, open(meta_file, "w"))
    with pytest.raises(StoreError, match="newer than this ooc-svm supports"):
        open_store(path)


def test_hostile_metadata_refused(tmp_path):
    X, y, _ = _data()
    path = str(tmp_path / "s.parquet")
    write_store(path, csr_to_shards(X, y))
    meta_file = os.path.join(path, "_ooc_svm.json")
    good = json.load(open(meta_file))
    doc = json.loads(json.dumps(good))
    doc["shards"][0]["name"] = "../../etc/passwd"
    json.dump(doc, open(meta_file, "w"))
    with pytest.raises(StoreError, match="unsafe name"):
        open_store(path)
    doc = json.loads(json.dumps(good))
    doc["shards"][0]["n_rows"] = 10**12
    json.dump(doc, open(meta_file, "w"))
    with pytest.raises(StoreError):
        open_store(path)


@pytest.mark.parametrize("suffix", [".zarr", ".parquet"])
def test_corrupted_shard_is_named(tmp_path, suffix):
    X, y, _ = _data()
    path = str(tmp_path / f"s{suffix}")
    write_store(path, csr_to_shards(X, y, shard_rows=300), compression="none")
    store = open_store(path)
    name = store.meta.shards[1].name
    if suffix == ".zarr":
        target = os.path.join(path, name, "data", "c", "0")
    else:
        target = os.path.join(path, name + ".parquet")
    raw = bytearray(open(target, "rb").read())
    mid = len(raw) // 2
    raw[mid : mid + 8] = b"\xff" * 8
    open(target, "wb").write(bytes(raw))
    with pytest.raises(ShardCorruptError, match=name):
        open_store(path).read_shard(1, verify=True)
    open(target, "wb").write(bytes(raw[: len(raw) // 3]))
    with pytest.raises(ShardCorruptError, match=name):
        open_store(path).read_shard(1, verify=True)
