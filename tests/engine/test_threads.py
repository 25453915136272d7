"""Every core on every shard (row blocks), and the same model bytes for any
number of threads."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.api import train
from ooc_svm.engine import LocalEngine, blocks
from ooc_svm.engine.blocks import Blocked, block_bounds, row_blocks
from ooc_svm.store import open_store


def _data(seed: int = 3, n: int = 6000, d: int = 200):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.08, random_state=rng, format="csr", dtype=np.float64)
    X.data = X.data.astype(np.float32).astype(np.float64)
    w = rng.standard_normal(d)
    y = np.where(X @ w + 0.3 * rng.standard_normal(n) > 0.1, 1.0, -1.0)
    return X, y


def _model_bytes(res) -> bytes:
    m = res.model
    return np.asarray(m.coef_, dtype=np.float64).tobytes() + np.float64(m.intercept_).tobytes()


def test_row_blocks_cover_the_shard_in_order(tmp_path, make_store):
    X, y = _data(n=900)
    st = make_store(X, y, shard_rows=900)
    sh = st.read_shard(0)
    parts = row_blocks(sh, 1000)
    assert len(parts) == len(block_bounds(sh.indptr, 1000)) - 1 > 5
    assert sum(p.n_rows for p in parts) == sh.n_rows
    assert [p.row_start for p in parts] == sorted(p.row_start for p in parts)
    got = sp.vstack([p.to_scipy(X.shape[1]) for p in parts]).tocsr()
    assert (got != sh.to_scipy(X.shape[1])).nnz == 0
    np.testing.assert_array_equal(np.concatenate([p.y for p in parts]), sh.y)
    assert row_blocks(sh, 10**9) == [sh]


@pytest.mark.parametrize("variant", ["accelerated", "selective"])
def test_same_model_bytes_for_one_two_three_threads(tmp_path, make_store, monkeypatch, variant):
    """Shards split into row blocks run on every thread; the model bytes do not depend on
    the number of threads, nor on the engine running the blocks in its own thread."""
    from ooc_svm.solvers.perf import selective_inner as ps

    monkeypatch.setattr(blocks, "BLOCK_NNZ", 4000)
    # selective: the rows in memory in several groups, the line search in several chunks
    monkeypatch.setattr(ps, "PART_NNZ", 5000)
    monkeypatch.setattr(ps, "PLANE_COLS", 1)
    monkeypatch.setattr(ps, "LINE_CHUNK", 500)
    X, y = _data()
    st = make_store(X, y, shard_rows=2500)  # 3 shards of ~40k non-zeros: ~10 blocks each
    calls = []
    real = Blocked.blocks

    def counting(self, shard):
        out = real(self, shard)
        calls.append(len(out))
        return out

    monkeypatch.setattr(Blocked, "blocks", counting)
    kw = {"C": 1.0, "eps": 1e-3, "variant": variant}
    if variant == "selective":
        kw["inner_mb"] = "0.2"  # not every row in memory: several passes
    got = {}
    for threads in (1, 2, 3):
        with LocalEngine(n_threads=threads, inline_nnz=0) as eng:
            got[threads] = train(open_store(st.path), "perf", engine=eng, **kw)
    with LocalEngine(n_threads=2) as eng:  # a small store: the pass runs in the calling thread
        got["inline"] = train(open_store(st.path), "perf", engine=eng, **kw)
    assert max(calls) >= 5
    assert got[1].passes >= 2
    ref = _model_bytes(got[1])
    for k, r in got.items():
        assert _model_bytes(r) == ref, k
        assert r.objective == got[1].objective and r.passes == got[1].passes
