"""Local engine: results equal an in-memory computation, independent of threads and prefetch."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_FORMATS

from ooc_svm.engine import LocalEngine, concat_partials
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


# ------------------------------------------------------------------------------------------
# reduction tree, counters, cache, reader fast path, errors
# ------------------------------------------------------------------------------------------


def test_streaming_tree_equals_tree_reduce():
    from ooc_svm.engine import StreamingTreeReduce, tree_reduce

    def join(a, b):  # not associative: exposes the tree shape
        return f"({a}+{b})"

    for n in range(0, 40):
        parts = [str(i) for i in range(n)]
        f = StreamingTreeReduce(join)
        for p in parts:
            f.push(p)
        assert f.result() == tree_reduce(list(parts), join), n


def test_streaming_fold_of_perf_partials_adds_in_place_with_the_same_bits():
    """The local fold adds perf's dense plane accumulators into its own partials (no new
    array) with the bits of ``a + b`` in the same tree; ``tree_reduce`` (the Dask task
    tree) leaves its inputs as they were."""
    from ooc_svm.engine import StreamingTreeReduce, tree_reduce
    from ooc_svm.solvers.perf.passes import reduce_cut

    def parts():
        r = np.random.default_rng(3)
        return [{"g": r.random((4, 50)), "cnt": r.random(4), "hinge": r.random(4)}
                for _ in range(7)]  # fmt: skip

    ref = tree_reduce(parts(), lambda a, b: {k: a[k] + b[k] for k in a})
    given = parts()
    copies = [{k: v.copy() for k, v in p.items()} for p in given]
    tree = tree_reduce(given, reduce_cut)
    for p, c in zip(given, copies, strict=True):
        for k in p:
            np.testing.assert_array_equal(p[k], c[k])
    fold = StreamingTreeReduce(reduce_cut)
    own = parts()
    first = own[0]["g"]
    for p in own:
        fold.push(p)
    got = fold.result()
    assert got["g"] is first  # added into the first partial's array
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
        np.testing.assert_array_equal(tree[k], ref[k])


def _fail_on_3(shard, bc, st):
    if shard.row_start == 3 * 700:
        raise ValueError("boom")
    return 0.0, st + 1


def _try_write(shard, bc):
    shard.data[0] = 1.0


def test_counters_errors_and_readonly(store):
    st, _, _ = store
    with LocalEngine(n_threads=2, prefetch=1) as eng:
        eng.map_reduce(st, _margins, np.zeros(200), reduce=concat_partials)
        eng.map_reduce(st, _margins, np.zeros(200), reduce=concat_partials, shards=[2, 0])
        assert (eng.passes, eng.partial_passes) == (1, 1)
        assert eng.map_reduce(st, _margins, np.zeros(200), shards=[]) is None
        h = eng.init_state(st, lambda info, i: 0)
        with pytest.raises(ValueError, match="boom"):
            eng.map_reduce(st, _fail_on_3, None, state=h)
        assert eng.gather_state(h) == [0] * st.n_shards  # a failed pass changes no state
        assert (eng.passes, eng.partial_passes) == (1, 2)
        with pytest.raises(ValueError, match="read-only"):
            eng.map_reduce(st, _try_write, None)


def test_subset_state_and_map_state(store):
    st, _, _ = store
    with LocalEngine(n_threads=2) as eng:
        h = eng.init_state(st, lambda info, i: np.zeros(info.n_rows), shards=[1, 5])
        assert h.ids == [1, 5]
        from ooc_svm.engine import EngineError

        with pytest.raises(EngineError, match="no per-shard state"):
            eng.map_reduce(st, _count_state, None, state=h)
        read0 = eng.shards_read
        tot = eng.map_state(st, _bump, 1.5, state=h, shards=[5, 1])
        assert eng.shards_read == read0  # map_state reads no shard data
        assert tot == 0.0
        got = eng.gather_state(h)
        assert got[0].tolist() == [1.5] * 700 and got[1].shape == (700,)


def _bump(stub, bc, st):
    assert not hasattr(stub, "data")
    return float(st.sum()), st + bc


@pytest.mark.parametrize("comp", ["zstd", "lz4", "none"])
def test_fast_reader_matches_store(tmp_path, comp):
    from ooc_svm.engine.reader import shard_reader

    rng = np.random.default_rng(5)
    X = sp.random(900, 70, density=0.1, format="csr", random_state=5, dtype=np.float32)
    y = rng.choice([-1.0, 1.0], 900)
    qid = np.repeat(np.arange(90), 10)
    for fmt in STORE_FORMATS:
        path = str(tmp_path / f"s-{comp}.{fmt}")
        write_store(path, csr_to_shards(X, y, qid=qid, shard_rows=400), compression=comp)
        s = open_store(path)
        fast, slow = shard_reader(s), shard_reader(s, fast=False)
        for i in range(s.n_shards):
            a, b, c = fast(i), slow(i), s.read_shard(i)
            for k in ("indptr", "indices", "data", "y", "qid"):
                np.testing.assert_array_equal(getattr(a, k), getattr(c, k))
                np.testing.assert_array_equal(getattr(b, k), getattr(c, k))
                assert not getattr(a, k).flags.writeable
            assert a.row_start == c.row_start and a.indices.dtype == np.int32


def test_shard_cache_avoids_rereads(store):
    st, X, _ = store
    w = np.random.default_rng(1).normal(size=200)
    with LocalEngine(n_threads=2, cache_mb=64) as eng:
        a = eng.map_reduce(st, _violated, (w, 200))
        assert eng.shards_read == st.n_shards
        b = eng.map_reduce(st, _violated, (w, 200))
        assert eng.shards_read == st.n_shards  # second pass: all from the cache
        assert eng.cache.hits >= st.n_shards
        np.testing.assert_array_equal(a[0], b[0])
    one = st.read_shard(0).nbytes
    with LocalEngine(n_threads=1, cache_mb=2.5 * one / 2**20) as eng:
        eng.map_reduce(st, _violated, (w, 200))
        eng.map_reduce(st, _violated, (w, 200))
        # fill-until-full: the shards that fit stay cached and hit on every later pass
        cached = len(eng.cache._d)
        assert 2 <= cached < st.n_shards and eng.cache.used <= 2.5 * one
        assert eng.cache.hits == cached and eng.shards_read == 2 * st.n_shards - cached


def test_make_engine_options(monkeypatch):
    from ooc_svm.engine import EngineError, make_engine

    monkeypatch.delenv("OOC_SVM_SCHEDULER", raising=False)
    monkeypatch.setenv("OOC_SVM_SHARD_CACHE_MB", "3")
    with make_engine(None, n_workers=4, prefetch=1) as eng:  # n_workers: Dask-only, ignored
        assert isinstance(eng, LocalEngine) and eng.cache.budget == 3 * 2**20
    with make_engine("local", cache_mb=1) as eng:
        assert eng.cache.budget == 2**20
    with pytest.raises(TypeError, match="bogus"):
        make_engine("local", bogus=1)
    monkeypatch.setenv("OOC_SVM_SHARD_CACHE_MB", "lots")
    with pytest.raises(EngineError, match="OOC_SVM_SHARD_CACHE_MB"):
        make_engine("local")
    monkeypatch.delenv("OOC_SVM_SHARD_CACHE_MB")
    with pytest.raises(EngineError, match="unknown scheduler"):
        make_engine("nonsense")


def test_train_shard_cache_flag(store, tmp_path, monkeypatch):
    """`train --shard-cache-mb`: later passes come from the cache, the model is unchanged."""
    import ooc_svm.api as api
    import ooc_svm.engine as engine_module
    from ooc_svm.cli import main
    from ooc_svm.model.model import load_model
    from ooc_svm.solvers import SolverError

    st, _, _ = store
    made = []
    real = engine_module.make_engine  # (api imports it when it makes an engine)

    def spy(*a, **k):
        eng = real(*a, **k)
        made.append(eng)
        return eng

    monkeypatch.delenv("OOC_SVM_SHARD_CACHE_MB", raising=False)
    monkeypatch.setattr(engine_module, "make_engine", spy)
    # the default is now "auto"; 0 turns the cache off (was the default)
    for cache, out in ((0, "plain"), (64, "cached"), (None, "auto")):
        argv = ["train", "--solver", "perf", st.path, "-o", str(tmp_path / out), "--C", "1"]
        assert main(argv + ([] if cache is None else ["--shard-cache-mb", str(cache)])) == 0
    plain, cached, auto = made
    assert plain.cache.budget == 0 and plain.shards_read > st.n_shards
    assert cached.cache.budget == 64 * 2**20 and cached.shards_read == st.n_shards
    assert cached.cache.hits > 0
    # auto: bounded by available memory, filled from the second pass on
    assert 0 < auto.cache.budget <= 8192 * 2**20 and auto.shards_read == 2 * st.n_shards
    a, b = load_model(str(tmp_path / "plain")), load_model(str(tmp_path / "cached"))
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.coef_, load_model(str(tmp_path / "auto")).coef_)
    with pytest.raises(SolverError, match="shard-cache-mb"):
        api.train(st, "perf", shard_cache_mb=-1)


def test_auto_cache_not_filled_by_batched_scoring(store, tmp_path):
    """``predict`` scores a store in batches of shards (partial passes): with the auto cache
    none of them may be cached the first time (the 10M-row scale test store's predict held
    5 GB, the whole decoded store, when the first batch marked the store as seen)."""
    import ooc_svm.api as api
    from ooc_svm.model.shard_scores import iter_scored

    st, _, _ = store
    model = api.train(st, "perf", max_iter=2, shard_cache_mb=0).model
    with LocalEngine(cache_mb="auto") as eng:
        # one whole prediction, 2 shards a batch: every shard read once, none cached
        n = sum(len(y) for y, _, _ in iter_scored(st, eng, model, max_rows=1400))
        assert n == st.meta.n_rows
        assert eng.cache.budget > 0  # sized from the memory budget on the first pass
        assert eng.cache.used == 0 and eng.shards_read == st.n_shards
        # a second one reads every shard a second time: now they are cached
        sum(len(y) for y, _, _ in iter_scored(st, eng, model, max_rows=1400))
        assert 0 < eng.cache.used <= eng.cache.budget
        assert eng.shards_read == 2 * st.n_shards


@pytest.mark.parametrize("inline_nnz", [0, 10**9])
def test_auto_cache_bounded_and_filled_from_second_pass(store, monkeypatch, inline_nnz):
    """``auto`` never caches beyond SHARE × the memory budget left (sized on the first pass
    that reads); a single pass caches nothing; later passes come from the cache (threaded and
    inline passes alike)."""
    from conftest import fake_memory_budget

    from ooc_svm.engine import make_engine
    from ooc_svm.engine.passes import hinge_pass

    st, _, _ = store
    shard_bytes = st.read_shard(0).nbytes
    # a budget of 3 shards: auto may use half of it
    fake_memory_budget(monkeypatch, 3 * shard_bytes + 10)
    w = np.zeros(200)
    with LocalEngine(cache_mb="auto", inline_nnz=inline_nnz) as eng:
        ref = eng.map_reduce(st, hinge_pass, (w, 1.0, 0.0))
        assert eng.cache.budget == int(0.5 * (3 * shard_bytes + 10))
        assert eng.cache.used == 0 and eng.shards_read == st.n_shards
        for _ in range(3):
            again = eng.map_reduce(st, hinge_pass, (w, 1.0, 0.0))
            assert 0 < eng.cache.used <= eng.cache.budget
            np.testing.assert_array_equal(again[0], ref[0])
        # only some shards fit (1.5 shards of budget): passes 3 and 4 read the others
        assert 2 * st.n_shards < eng.shards_read < 4 * st.n_shards
    # the whole store fits: after pass 2, no reads
    budget = fake_memory_budget(monkeypatch, 4 * 10 * shard_bytes)
    monkeypatch.setenv("OOC_SVM_SHARD_CACHE_MB", "auto:0.25")
    with make_engine("local", inline_nnz=inline_nnz) as eng:
        for _ in range(4):
            eng.map_reduce(st, hinge_pass, (w, 1.0, 0.0))
        assert eng.cache.budget == int(0.25 * 4 * 10 * shard_bytes)
        assert eng.shards_read == 2 * st.n_shards
    # what a run claimed is not the cache's
    budget.require("rows", 2 * 10 * shard_bytes)
    with make_engine("local", inline_nnz=inline_nnz) as eng:
        eng.map_reduce(st, hinge_pass, (w, 1.0, 0.0))
        assert eng.cache.budget == int(0.25 * 2 * 10 * shard_bytes)
    monkeypatch.setenv("OOC_SVM_SHARD_CACHE_MB", "0")
    with make_engine("local") as eng:
        assert eng.cache.budget == 0
