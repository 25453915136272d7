"""Passes over a store that does not fit the shard cache overlap
reading (the kernel's read-ahead of the next shards' files), decoding and computing.

The timing is ``scripts/bench_pass.py --overlap``; these tests check the mechanism (every
shard's files are handed to the read-ahead, ahead of being decoded) and that the pass
result is unchanged.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import ooc_svm.engine.local as local_mod
from ooc_svm.engine import LocalEngine
from ooc_svm.engine.reader import shard_files
from ooc_svm.kernels.csr import csr_matvec, u32


def _sum_margins(shard, w):
    out = np.empty(shard.n_rows)
    csr_matvec(shard.indptr, u32(shard.indices), shard.data, w, 0.0, out)
    return np.array([out.sum(), float(shard.n_rows)])


@pytest.fixture(scope="module", params=["s.zarr", "s.parquet"])
def store(request, tmp_path_factory):
    from conftest import build_store

    X = sp.random(3000, 60, density=0.1, format="csr", random_state=5, dtype=np.float32)
    y = np.where(np.arange(3000) % 2 == 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("ovl") / request.param
    return build_store(path, X, y, shard_rows=300), X


def _all_files(path) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}


def test_shard_files_are_the_shards_files(store):
    st, _ = store
    files = [set(shard_files(st, i)) for i in range(st.n_shards)]
    assert all(files) and all(os.path.isfile(f) for fs in files for f in fs)
    assert not set.intersection(*files)  # every shard its own files
    meta_files = _all_files(st.path) - set.union(*files)
    # what is left is store metadata (zarr.json of the group, _ooc_svm.json, the lock)
    assert all(os.path.basename(f) in ("zarr.json", "_ooc_svm.json", ".lock") for f in meta_files)


def test_cold_pass_reads_every_shard_ahead(store, monkeypatch):
    st, X = store
    w = np.random.default_rng(1).normal(size=X.shape[1])
    hinted: list[str] = []
    lock = threading.Lock()

    def recording(eng):
        # hints are recorded when the pass issues them: the read-ahead thread may still be
        # behind when the pass ends, and closing the engine cancels what it has not started
        real_submit = eng._ra.submit

        def submit(fn, *args, **kw):
            if fn is local_mod.read_ahead:
                with lock:
                    hinted.extend(args[0])
            return real_submit(fn, *args, **kw)

        monkeypatch.setattr(eng._ra, "submit", submit)
        return eng

    with LocalEngine(n_threads=2, prefetch=1, cache_mb=0, inline_nnz=0, readahead=3) as eng:
        r1 = recording(eng).map_reduce(st, _sum_margins, w)
    want = {f for i in range(st.n_shards) for f in shard_files(st, i)}
    assert set(hinted) == want and len(hinted) == len(want)  # each file once per pass
    with LocalEngine(n_threads=1, prefetch=0, cache_mb=0, inline_nnz=0, readahead=0) as eng:
        n0 = len(hinted)
        r0 = recording(eng).map_reduce(st, _sum_margins, w)
        assert len(hinted) == n0  # readahead=0: no hints
    np.testing.assert_array_equal(r1, r0)  # same fold, same bits
    np.testing.assert_allclose(r1[0], (X.astype(np.float64) @ w).sum(), rtol=1e-9)


def test_two_shards_decoded_at_a_time_by_default(store, monkeypatch):
    """Decoding costs several kernels: a local store is read and decoded by two reader
    threads at once (``local_reads=2``), so no core waits for a single decoder."""
    st, X = store
    w = np.ones(X.shape[1])
    real = local_mod.shard_reader

    def counting_reader(store, fast=True):
        read = real(store, fast=fast)
        state = {"now": 0, "max": 0}
        lock = threading.Lock()

        def rd(i):
            with lock:
                state["now"] += 1
                state["max"] = max(state["max"], state["now"])
            try:
                threading.Event().wait(0.05)  # a slow decode
                return read(i)
            finally:
                with lock:
                    state["now"] -= 1

        seen.append(state)
        return rd

    seen: list[dict] = []
    monkeypatch.setattr(local_mod, "shard_reader", counting_reader)
    results = []
    for kw in ({}, {"local_reads": 1}):
        with LocalEngine(n_threads=2, prefetch=2, cache_mb=0, inline_nnz=0, **kw) as eng:
            results.append(eng.map_reduce(st, _sum_margins, w))
    assert [s["max"] for s in seen] == [2, 1]
    np.testing.assert_array_equal(results[0], results[1])
