"""Local engine: results equal an in-memory computation, independent of threads and prefetch."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.engine import LocalEngine
from ooc_svm.kernels.csr import csr_matvec, hinge_violated, u32
from ooc_svm.store import csr_to_shards, open_store, write_store


def _margins(shard, w):
    out = np.empty(shard.n_rows)
    csr_matvec(shard.indptr, u32(shard.indices), shard.data, w, 0.0, out)
    return [out]


def _violated(shard, bc):
    w, d = bc
    g = np.zeros(d)
    m = np.empty(shard.n_rows)
    cnt, hinge, gb = hinge_violated(
        shard.indptr, u32(shard.indices), shard.data, shard.y, w, 1.0, 0.5, g, m
    )
    return g, float(cnt), hinge, gb


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = sp.random(5000, 200, density=0.05, format="csr", random_state=3, dtype=np.float32)
    y = rng.choice([-1.0, 1.0], 5000)
    path = str(tmp_path_factory.mktemp("eng") / "s.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=700))
    return open_store(path), X, y


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (2, 2), (4, 1)])
def test_pass_matches_in_memory(store, threads, prefetch):
    st, X, y = store
    w = np.random.default_rng(0).normal(size=200)
    with LocalEngine(n_threads=threads, prefetch=prefetch) as eng:
        from ooc_svm.engine import concat_partials

        parts = eng.map_reduce(st, _margins, w, reduce=concat_partials)
        g, cnt, hinge, gb = eng.map_reduce(st, _violated, (w, 200))
        assert eng.passes == 2
    np.testing.assert_allclose(np.concatenate(parts), X.astype(np.float64) @ w, rtol=1e-10)
    m = y * (X.astype(np.float64) @ w + 0.5)
    viol = m < 1
    assert cnt == viol.sum()
    np.testing.assert_allclose(hinge, np.maximum(0, 1 - m).sum(), rtol=1e-10)
    np.testing.assert_allclose(g, X[viol].T.astype(np.float64) @ y[viol], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, y[viol].sum())


def _count_state(shard, bc, st):
    return float(st), st + shard.n_rows


def test_shard_state_persists(store):
    st, _, _ = store
    with LocalEngine(n_threads=2) as eng:
        h = eng.init_state(st, lambda info, i: 0)
        assert eng.map_reduce(st, _count_state, None, state=h) == 0.0
        assert eng.map_reduce(st, _count_state, None, state=h) == 5000.0
        assert eng.gather_state(h) == [2 * s.n_rows for s in st.meta.shards]
