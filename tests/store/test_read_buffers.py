"""The pass read path of compressed Zarr stores: chunks read and decoded into pooled buffers.

Damaged chunks must still be refused through that path (even when the pooled buffer still
holds the previous shard's correct bytes), and pooled buffers must never be shared by two
shards that are both alive (a consumer that keeps shards — the shard cache, a solver's
in-memory rows — keeps their buffers out of the pool).
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store

from ooc_svm.engine import LocalEngine
from ooc_svm.engine.reader import ShardCache, materialize, shard_reader
from ooc_svm.store import ShardCorruptError, open_store

N_SHARDS, SHARD_ROWS, N_FEATURES = 4, 300, 60


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(N_SHARDS * SHARD_ROWS, N_FEATURES, density=0.2, random_state=rng, format="csr")
    X.data = rng.standard_normal(X.nnz).astype(np.float32)
    y = np.where(rng.random(X.shape[0]) < 0.5, -1.0, 1.0)
    return X.astype(np.float32), y


@pytest.fixture(scope="module", params=["lz4", "zstd"])
def stored(request, tmp_path_factory):
    X, y = _data()
    path = tmp_path_factory.mktemp("buffers") / f"s_{request.param}.zarr"
    build_store(path, X, y, shard_rows=SHARD_ROWS, compression=request.param)
    return str(path), X, y


def _expect(shard, X, y) -> None:
    r0 = shard.row_start
    ref = X[r0 : r0 + shard.n_rows]
    ref.sort_indices()
    np.testing.assert_array_equal(shard.indptr, ref.indptr)
    np.testing.assert_array_equal(shard.indices, ref.indices)
    np.testing.assert_array_equal(shard.data, ref.data)
    np.testing.assert_array_equal(shard.y, y[r0 : r0 + shard.n_rows])


def _arrays(shard):
    return [shard.indptr, shard.indices, shard.data, shard.y]


def test_pooled_buffers_are_reused_but_never_shared_by_live_shards(stored):
    path, X, y = stored
    store = open_store(path)
    read = store.shard_reader(fast=True)
    assert read.pool is not None  # compressed local store: the pooled path
    a = read(0)
    b = read(1)  # decoded right after a, both alive: own memory, own contents
    for u in _arrays(a):
        for v in _arrays(b):
            assert not np.shares_memory(u, v)
    _expect(a, X, y)
    _expect(b, X, y)
    keep = a.data[5:20]  # a view of a view keeps the whole buffer out of the pool
    before = read.pool.reused
    del a
    gc.collect()
    c = read(2)  # reuses a's buffers except the one the view still holds
    assert read.pool.reused > before
    assert not any(np.shares_memory(keep, v) for v in _arrays(c))
    _expect(b, X, y)
    _expect(c, X, y)
    ref = X[0:SHARD_ROWS]
    ref.sort_indices()
    np.testing.assert_array_equal(keep, ref.data[5:20])


def test_engine_pass_that_keeps_its_shards_sees_their_own_contents(stored):
    path, X, y = stored
    store = open_store(path)
    kept = []

    def keep_all(shard, bc):  # like a solver keeping rows in memory
        kept.append(shard)
        return np.array([float(shard.data.sum(dtype=np.float64))])

    eng = LocalEngine(n_threads=2, prefetch=2, cache_mb=0, inline_nnz=0)
    try:
        for _ in range(2):
            kept.clear()
            total = eng.map_reduce(store, keep_all, None)
            assert len(kept) == N_SHARDS
            for s in kept:
                _expect(s, X, y)
            np.testing.assert_allclose(total[0], X.data.sum(dtype=np.float64), rtol=1e-12)
    finally:
        eng.close()


def test_cached_shards_keep_their_contents_while_the_pool_is_reused(stored):
    path, X, y = stored
    store = open_store(path)
    read = shard_reader(store)
    cache = ShardCache(1 << 30)
    cached = cache.put("t", 0, read(0))
    for i in (1, 2, 3, 1, 2, 3):
        s = read(i)
        _expect(s, X, y)
        del s
    _expect(cached, X, y)
    again = materialize(cached)
    _expect(again, X, y)


def _damage(path: str, rel: str, codec: str) -> bool:
    """Change one byte of a chunk; prefer a change the decoder itself accepts (then only the
    checksum can tell). Returns whether the decoder accepts the damaged chunk."""
    from numcodecs import Blosc, Zstd

    f = os.path.join(path, rel)
    raw = bytearray(open(f, "rb").read())
    dec = Blosc() if codec == "lz4" else Zstd()
    good = dec.decode(bytes(raw))
    for pos in range(len(raw) - 1, 32, -1):
        cand = bytearray(raw)
        cand[pos] ^= 0x5A
        try:
            out = dec.decode(bytes(cand))
        except Exception:  # the decoder refused this one: try another byte
            continue
        if len(out) == len(good) and bytes(out) != bytes(good):
            open(f, "r+b").write(cand)
            return True
    raw[len(raw) // 2] ^= 0x5A
    open(f, "r+b").write(raw)
    return False


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_damaged_chunk_is_refused_through_the_pooled_path(tmp_path, codec):
    X, y = _data(1)
    path = str(tmp_path / f"d_{codec}.zarr")
    build_store(path, X, y, shard_rows=SHARD_ROWS, compression=codec)
    store = open_store(path)
    read = store.shard_reader(fast=True)
    first = read(0)
    _expect(first, X, y)
    del first  # its buffers (the right bytes of an equally sized shard) go back to the pool
    gc.collect()
    decodes = _damage(path, "s0000001/data/c/0", codec)
    with pytest.raises(ShardCorruptError, match="shard 1") as e:
        read(1)
    assert read.pool.reused > 0  # the damaged chunk was decoded into a reused buffer
    if decodes:  # only the checksum over the decoded bytes can have caught it
        assert "checksum mismatch" in str(e.value)
    eng = LocalEngine(n_threads=2, prefetch=2, cache_mb=0, inline_nnz=0)
    try:
        with pytest.raises(ShardCorruptError, match="shard 1"):
            eng.map_reduce(open_store(path), lambda s, bc: np.zeros(1), None)
    finally:
        eng.close()


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_truncated_or_padded_chunk_is_refused_through_the_pooled_path(tmp_path, codec):
    X, y = _data(2)
    path = str(tmp_path / f"t_{codec}.zarr")
    build_store(path, X, y, shard_rows=SHARD_ROWS, compression=codec)
    read = open_store(path).shard_reader(fast=True)
    read(0)
    f = os.path.join(path, "s0000001", "indices", "c", "0")
    raw = open(f, "rb").read()
    with open(f, "wb") as fh:
        fh.write(raw[: len(raw) - 7])
    with pytest.raises(ShardCorruptError, match="shard 1"):
        read(1)
    with open(f, "wb") as fh:  # trailing bytes: the header no longer describes the file
        fh.write(raw + b"\0" * 7)
    with pytest.raises(ShardCorruptError, match="shard 1"):
        open_store(path).shard_reader(fast=True)(1)


def test_pool_keeps_at_most_its_bound_of_free_buffers():
    from ooc_svm.store.base import BufferPool

    pool = BufferPool(3 << 20)
    arrs = [pool.take(1 << 20) for _ in range(6)]
    assert pool.allocated == 6 and pool.free_bytes == 0  # all in use: none free
    del arrs
    gc.collect()
    assert 0 < pool.free_bytes <= 3 << 20
    a = pool.take(1 << 20)
    assert pool.reused == 1 and a.nbytes == 1 << 20
    big = pool.take(8 << 20)  # larger than the bound: used, then not kept
    del big
    assert pool.free_bytes <= 3 << 20
