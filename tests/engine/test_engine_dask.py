"""Dask engine on a real 2-process LocalCluster: same results as the local engine, faults.

One cluster is shared by the module (``DaskEngine("processes", n_workers=2,
threads_per_worker=1)`` is a ``distributed.LocalCluster(n_workers=2, processes=True,
threads_per_worker=1)``). The worker-killing tests run last.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.engine import LocalEngine, concat_partials, make_engine
from ooc_svm.engine.base import EngineError
from ooc_svm.engine.passes import hinge_pass, hinge_state_pass, margins_pass
from ooc_svm.store import csr_to_shards, open_store, write_store

pytestmark = pytest.mark.cluster

N, D = 6000, 300


def _data():
    X = sp.random(N, D, density=0.04, format="csr", random_state=11, dtype=np.float32)
    y = np.random.default_rng(11).choice([-1.0, 1.0], N)
    return X, y


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    X, y = _data()
    root = tmp_path_factory.mktemp("dask")
    out = {}
    for name, comp in (("zarr", "zstd"), ("zarr-none", "none"), ("parquet", "zstd")):
        path = str(root / (f"s-{name}." + ("parquet" if name == "parquet" else "zarr")))
        write_store(path, csr_to_shards(X, y, shard_rows=550), compression=comp)
        out[name] = open_store(path)
    assert out["zarr"].n_shards == 11
    return out


@pytest.fixture(scope="module")
def engine():
    eng = make_engine("processes", n_workers=2, threads_per_worker=1)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def local():
    with LocalEngine(n_threads=2, prefetch=1) as eng:
        yield eng


def _w(seed=0, scale=1.0):
    return np.random.default_rng(seed).normal(size=D) * scale


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(1e-300, float(np.max(np.abs(b)))))


@pytest.mark.parametrize("kind", ["zarr", "zarr-none", "parquet"])
def test_pass_equals_local(engine, local, stores, kind):
    st = stores[kind]
    w = _w(1)
    m_d = np.concatenate(engine.map_reduce(st, margins_pass, (w, 0.5), reduce=concat_partials))
    m_l = np.concatenate(local.map_reduce(st, margins_pass, (w, 0.5), reduce=concat_partials))
    X, _ = _data()
    assert _rel(m_d, X.astype(np.float64) @ w + 0.5) < 1e-12
    np.testing.assert_array_equal(m_d, m_l)
    bc = (w, 1.0, 0.2)
    g_d, c_d, h_d, b_d = engine.map_reduce(st, hinge_pass, bc)
    g_l, c_l, h_l, b_l = local.map_reduce(st, hinge_pass, bc)
    assert 0 < c_d < N and c_d == c_l
    assert _rel(g_d, g_l) < 1e-6 and abs(h_d - h_l) <= 1e-6 * abs(h_l)
    # same fixed reduction tree on both engines: identical bits
    np.testing.assert_array_equal(g_d, g_l)
    assert (h_d, b_d) == (h_l, b_l)


def test_shard_subset_order_and_counters(engine, local, stores):
    st = stores["zarr"]
    bc = (_w(2), 1.0, 0.0)
    p0, q0 = engine.passes, engine.partial_passes
    sub = [7, 2, 9, 0]
    a = engine.map_reduce(st, hinge_pass, bc, shards=sub)
    b = local.map_reduce(st, hinge_pass, bc, shards=sub)
    np.testing.assert_array_equal(a[0], b[0])
    c = engine.map_reduce(st, hinge_pass, bc, shards=sorted(sub))
    np.testing.assert_allclose(c[0], a[0], rtol=1e-12, atol=1e-12)  # order: fp only
    assert c[1] == a[1]
    assert engine.map_reduce(st, hinge_pass, bc, shards=[]) is None
    assert (engine.passes, engine.partial_passes) == (p0, q0 + 3)


def test_broadcast_scatter_retried_when_stream_closes(engine, local, stores, monkeypatch):
    """A worker dying while the broadcast is copied closes the scatter's stream
    (``CommClosedError``); the engine sends it again instead of failing the pass."""
    from distributed.comm.core import CommClosedError

    client = engine._client
    real = client.scatter
    calls = []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise CommClosedError("in <TCP (closed) ConnectionPool.scatter>: Stream is closed")
        return real(*a, **k)

    monkeypatch.setattr(client, "scatter", flaky)
    bc = (_w(3), 1.0, 0.0)
    a = engine.map_reduce(stores["zarr"], hinge_pass, bc)
    b = local.map_reduce(stores["zarr"], hinge_pass, bc)
    assert len(calls) == 2
    np.testing.assert_array_equal(a[0], b[0])

    def dead(*a, **k):
        raise CommClosedError("Stream is closed")

    monkeypatch.setattr(client, "scatter", dead)
    with pytest.raises(EngineError, match="broadcast"):
        engine.map_reduce(stores["zarr"], hinge_pass, bc)


def _zeros(info, i):
    return np.zeros(info.n_rows)


def _bump(stub, bc, st):
    return float(st.sum()), st + bc


def test_state_lives_on_workers(engine, local, stores):
    st = stores["zarr"]
    hd = engine.init_state(st, _zeros)
    hl = local.init_state(st, _zeros)
    for k in range(3):
        bc = (_w(3, 0.3 * (k + 1)), 1.0, 0.1)
        rd = engine.map_reduce(st, hinge_state_pass, bc, state=hd)
        rl = local.map_reduce(st, hinge_state_pass, bc, state=hl)
        np.testing.assert_array_equal(rd[0], rl[0])
        assert rd[1:] == rl[1:]
        if k:
            assert rd[4] > 0  # the state (previous margins) was there
    sd, sl = engine.gather_state(hd), local.gather_state(hl)
    assert len(sd) == st.n_shards
    for a, b in zip(sd, sl, strict=True):
        np.testing.assert_array_equal(a, b)
    # map_state: no data read, only positions and state
    h2 = engine.init_state(st, _zeros, shards=[1, 4])
    assert engine.map_state(st, _bump, 2.0, state=h2, shards=[1, 4]) == 0.0
    assert engine.map_state(st, _bump, 2.0, state=h2, shards=[4]) == 2.0 * 550
    got = engine.gather_state(h2)
    assert got[0].tolist() == [2.0] * 550 and got[1].tolist() == [4.0] * 550
    with pytest.raises(EngineError, match="no per-shard state"):
        engine.map_state(st, _bump, 1.0, state=h2, shards=[0])
    # state from client values (checkpoint) round-trips
    h3 = engine.set_state(st, sl)
    for a, b in zip(engine.gather_state(h3), sl, strict=True):
        np.testing.assert_array_equal(a, b)


def test_states_backed_up_without_replicate(engine, stores, monkeypatch):
    """Every per-shard state has a backup under its own key on another worker, made without
    ``Client.replicate`` or ``scatter(broadcast=True)``: the scheduler's replicate loop never
    ends when a worker dies during it (a training hung that way after a worker SIGKILL)."""
    client = engine._client
    real_scatter = client.scatter

    def no_replicate(*a, **k):
        raise AssertionError("Client.replicate must not be used")

    def scatter(*a, **k):
        assert not k.get("broadcast"), "scatter(broadcast=True) must not be used"
        return real_scatter(*a, **k)

    monkeypatch.setattr(client, "replicate", no_replicate)
    monkeypatch.setattr(client, "scatter", scatter)
    st = stores["zarr"]
    h = engine.init_state(st, _zeros)
    engine.map_reduce(st, hinge_state_pass, (_w(4), 1.0, 0.0), state=h)
    refs = h.items
    assert all(r.backup is not None and r.backup.key != r.primary.key for r in refs)
    who = client.who_has([f for r in refs for f in (r.primary, r.backup)])
    for r in refs:  # the state survives the loss of any one worker
        assert len(set(who[r.primary.key]) | set(who[r.backup.key])) >= 2


def test_runs_reduce_into_the_fixed_tree():
    """A pass split into runs of consecutive shards (one per worker), each reduced into its
    subtrees (tree_nodes), the runs joined pairwise (_join_task) or at once (tree_join):
    exactly the tree of tree_reduce over the whole list, for every split."""
    import itertools

    from ooc_svm.engine.base import StreamingTreeReduce, tree_reduce
    from ooc_svm.engine.dask_tree import tree_join, tree_nodes
    from ooc_svm.engine.dask_worker import _join_task

    def red(a, b):
        return f"({a}+{b})"

    def run(a, b, n):
        out = []
        for s, e in tree_nodes(a, b, n):
            fold = StreamingTreeReduce(red)
            for i in range(s, e):
                fold.push(str(i))
            out.append(((s, e), fold.result()))
        return out

    for n in range(1, 24):
        ref = tree_reduce([str(i) for i in range(n)], red)
        for n_cuts in range(4):
            for cuts in itertools.combinations(range(1, n), min(n_cuts, n - 1)):
                bounds = [0, *cuts, n]
                groups = [run(a, b, n) for a, b in itertools.pairwise(bounds)]
                assert tree_join(n, {nd: v for g in groups for nd, v in g}, red) == ref
                while len(groups) > 1:
                    nxt = [
                        _join_task(red, n, *groups[i : i + 2]) for i in range(0, len(groups) - 1, 2)
                    ]
                    groups = nxt + groups[len(groups) - len(groups) % 2 :]
                assert groups == [[((0, n), ref)]]


def _has_worker(shard, bc):
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return 0
    return 1


def test_worker_threads_run_its_shards_same_bits(local, stores):
    """One task per worker runs its shards on all the worker's threads (here one
    in-process worker with 3 threads); same tree, same bits, states included."""
    st = stores["zarr"]
    with make_engine("threads", n_workers=1, threads_per_worker=3) as eng:
        bc = (_w(8), 1.0, 0.1)
        a = eng.map_reduce(st, hinge_pass, bc)
        b = local.map_reduce(st, hinge_pass, bc)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:] == b[1:]
        hd, hl = eng.init_state(st, _zeros), local.init_state(st, _zeros)
        for _ in range(2):
            rd = eng.map_reduce(st, hinge_state_pass, bc, state=hd)
            rl = local.map_reduce(st, hinge_state_pass, bc, state=hl)
            np.testing.assert_array_equal(rd[0], rl[0])
            assert rd[1:] == rl[1:]
        # fn runs on the worker's pool threads with the task's context: get_worker() works
        # there (WorkerScratch relies on it)
        assert eng.map_reduce(st, _has_worker, None) == st.n_shards
        sub = [9, 3, 4, 5, 0]
        np.testing.assert_array_equal(
            eng.map_reduce(st, hinge_pass, bc, shards=sub)[0],
            local.map_reduce(st, hinge_pass, bc, shards=sub)[0],
        )


def test_second_client_by_address(engine, stores):
    addr = engine.client.scheduler.address
    with make_engine(addr, connect_timeout=10) as other:
        # the workers are reachable: broadcasts and results skip the scheduler
        assert other.client.direct_to_workers is True
        r = other.map_reduce(stores["zarr"], hinge_pass, (_w(4), 1.0, 0.0))
    ref = engine.map_reduce(stores["zarr"], hinge_pass, (_w(4), 1.0, 0.0))
    np.testing.assert_array_equal(r[0], ref[0])


def _hits_misses(eng) -> tuple[int, int]:
    stats = eng.worker_cache_stats().values()
    return sum(s["hits"] for s in stats), sum(s["misses"] for s in stats)


def test_long_lived_cluster_keeps_shards_between_jobs(engine, local, tmp_path):
    """A second job on the same cluster reads no shard again; a store rewritten at the same
    path is never served from the old shards; after an append only the new shards are read
    (the workers' cache is keyed by each shard's contents)."""
    from ooc_svm.store import StoreWriter

    X, y = _data()
    path = str(tmp_path / "kept.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=550))
    st = open_store(path)
    addr = engine.client.scheduler.address
    bc = (_w(5), 1.0, 0.0)
    with make_engine(addr, cache_mb=64) as first:
        for _ in range(2):
            first.map_reduce(st, hinge_pass, bc)
    h0, m0 = _hits_misses(engine)
    with make_engine(addr, cache_mb="auto") as second:  # its first pass: all from the cache
        again = second.map_reduce(st, hinge_pass, bc)
    h1, m1 = _hits_misses(engine)
    assert (h1 - h0, m1 - m0) == (st.n_shards, 0)
    np.testing.assert_array_equal(again[0], local.map_reduce(st, hinge_pass, bc)[0])

    # rewritten with other rows: nothing of the old store may be used
    X2 = sp.random(N, D, density=0.04, format="csr", random_state=12, dtype=np.float32)
    write_store(path, csr_to_shards(X2, y, shard_rows=550), overwrite=True)
    st2 = open_store(path)
    with make_engine(addr, cache_mb=64) as third:
        got = third.map_reduce(st2, hinge_pass, bc)
    np.testing.assert_array_equal(got[0], local.map_reduce(st2, hinge_pass, bc)[0])
    h2, m2 = _hits_misses(engine)
    assert m2 - m1 == st2.n_shards and h2 == h1

    # appended: the unchanged shards come from the cache, the new ones are read
    with StoreWriter(path, append=True) as w:
        for s in csr_to_shards(X[:1000], y[:1000], shard_rows=550):
            s.row_start += N
            w.add(s)
        w.commit()
    st3 = open_store(path)
    assert st3.n_shards == st2.n_shards + 2
    with make_engine(addr, cache_mb="auto") as fourth:
        got = fourth.map_reduce(st3, hinge_pass, bc)
    np.testing.assert_array_equal(got[0], local.map_reduce(st3, hinge_pass, bc)[0])
    h3, m3 = _hits_misses(engine)
    # shards are placed in contiguous blocks per worker: the append moves a few boundaries
    before, after = engine._placement(st2.n_shards), engine._placement(st3.n_shards)
    moved = sum(before[s] != after[s] for s in range(st2.n_shards))
    assert moved < st2.n_shards // 2
    assert (h3 - h2, m3 - m2) == (st2.n_shards - moved, 2 + moved)

    # and a whole training on the long-lived cluster is the local one, bit for bit
    from ooc_svm.api import train

    with make_engine(addr, cache_mb="auto") as fifth:
        on_cluster = train(st3, "perf", engine=fifth, C=1.0)
    here = train(st3, "perf", engine=local, C=1.0)
    np.testing.assert_array_equal(on_cluster.model.coef_, here.model.coef_)
    assert on_cluster.model.intercept_ == here.model.intercept_


def test_kernel_threads_follow_the_worker(engine, stores):
    """Kernel work in a worker of 1 thread uses 1 thread (numba's parallel regions), not
    every core of the host: 2 such workers on 2 cores run 2 kernel threads, not 4."""

    def kernel_threads():
        from ooc_svm.kernels.parallel import max_threads

        return max_threads()

    engine.map_reduce(stores["zarr"], hinge_pass, (_w(6), 1.0, 0.0))
    assert set(engine.client.run(kernel_threads).values()) == {1}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_fails_fast(tmp_path, monkeypatch):
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="cannot reach the Dask scheduler"):
        make_engine(f"tcp://127.0.0.1:{_free_port()}", connect_timeout=2)
    assert time.monotonic() - t0 < 20
    with pytest.raises(EngineError, match="does not exist"):
        make_engine(str(tmp_path / "nope.json"))
    monkeypatch.setenv("OOC_SVM_SCHEDULER", f"tcp://127.0.0.1:{_free_port()}")
    t0 = time.monotonic()
    with pytest.raises(EngineError):
        make_engine(None, connect_timeout=1)
    assert time.monotonic() - t0 < 20
    from ooc_svm.cli import _known_errors

    assert EngineError in _known_errors()


# ------------------------------------------------------------------------------------------
# faults (last: they restart a worker)
# ------------------------------------------------------------------------------------------


def _slow_hinge(shard, bc):
    time.sleep(bc[3])
    return hinge_pass(shard, bc[:3])


def _slow_hinge_state(shard, bc, st):
    time.sleep(bc[3])
    return hinge_state_pass(shard, bc[:3], st)


class _Killer(threading.Thread):
    """SIGKILLs one worker process ``delay`` seconds after start; records when."""

    def __init__(self, engine, delay):
        super().__init__(daemon=True)
        pids = engine.client.run(os.getpid)
        self.pid = pids[sorted(pids)[0]]
        self.delay = delay
        self.killed_at = None

    def run(self):
        time.sleep(self.delay)
        os.kill(self.pid, signal.SIGKILL)
        self.killed_at = time.monotonic()


def _kill_one_worker_soon(engine, delay):
    k = _Killer(engine, delay)
    k.start()
    return k


def _wait_workers(engine, n=2, timeout=30):
    engine.client.wait_for_workers(n, timeout=timeout)


def test_worker_killed_mid_pass(engine, local, stores):
    st = stores["zarr"]
    bc = (_w(5), 1.0, 0.3)
    ref = local.map_reduce(st, hinge_pass, bc)
    _wait_workers(engine)
    killer = _kill_one_worker_soon(engine, 0.4)
    got = engine.map_reduce(st, _slow_hinge, bc + (0.12,))
    done = time.monotonic()
    killer.join()
    assert killer.killed_at is not None and killer.killed_at < done  # killed mid-pass
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[1:] == ref[1:]


def test_worker_killed_mid_state_pass(engine, local, stores):
    st = stores["parquet"]
    _wait_workers(engine)
    hd = engine.init_state(st, _zeros)
    hl = local.init_state(st, _zeros)
    bc1 = (_w(6), 1.0, 0.0)
    engine.map_reduce(st, hinge_state_pass, bc1, state=hd)
    local.map_reduce(st, hinge_state_pass, bc1, state=hl)
    bc2 = (_w(7), 1.0, 0.0)
    ref = local.map_reduce(st, hinge_state_pass, bc2, state=hl)
    killer = _kill_one_worker_soon(engine, 0.4)
    got = engine.map_reduce(st, _slow_hinge_state, bc2 + (0.12,), state=hd)
    done = time.monotonic()
    killer.join()
    assert killer.killed_at is not None and killer.killed_at < done  # killed mid-pass
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[1:] == ref[1:]  # includes Σ|m - previous m|: the states survived the kill
    for a, b in zip(engine.gather_state(hd), local.gather_state(hl), strict=True):
        np.testing.assert_array_equal(a, b)


def test_auto_shard_cache_on_workers(stores, tmp_path):
    """``make_engine``'s default cache (auto) on Dask: the first pass over a store
    caches nothing, later passes hit the workers' caches, each bounded by its budget (at most
    a quarter of the worker's memory limit)."""
    X, y = _data()
    path = str(tmp_path / "fresh.zarr")
    write_store(path, csr_to_shards(X, y, shard_rows=550))
    st = open_store(path)
    old = os.environ.pop("OOC_SVM_SHARD_CACHE_MB", None)
    try:
        eng = make_engine("processes", n_workers=2, threads_per_worker=1, memory_limit="1GiB")
    finally:
        if old is not None:
            os.environ["OOC_SVM_SHARD_CACHE_MB"] = old
    with eng:
        ref = eng.map_reduce(st, hinge_pass, (_w(), 1.0, 0.0))
        stats = eng.worker_cache_stats()
        assert sum(s["used"] for s in stats.values()) == 0
        for _ in range(3):
            again = eng.map_reduce(st, hinge_pass, (_w(), 1.0, 0.0))
            np.testing.assert_array_equal(again[0], ref[0])
        stats = eng.worker_cache_stats()
        assert sum(s["hits"] for s in stats.values()) > 0
        for s in stats.values():
            assert 0 < s["budget"] <= 2**30 // 4 and s["used"] <= s["budget"]


def _slow_exit(seconds):
    """The worker process takes ``seconds`` to exit (as on a loaded machine): a
    multiprocessing finalizer, run at the end of a spawned or forked process alike."""
    from multiprocessing import util

    util.Finalize(None, time.sleep, args=(seconds,), exitpriority=10)


def test_close_lets_slow_workers_exit():
    """A worker that takes a while to exit (a loaded machine) is not killed on a
    normal close: no "Worker process ... was killed by signal 9" / "still alive ... killing"
    (Dask's nanny kills a worker still running 4 s after it was asked to stop)."""
    import logging

    records: list[logging.LogRecord] = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record)

    grab = Grab(level=logging.DEBUG)
    nanny_log = logging.getLogger("distributed.nanny")
    old_level = nanny_log.level
    nanny_log.addHandler(grab)
    nanny_log.setLevel(logging.INFO)
    try:
        eng = make_engine("processes", n_workers=1, threads_per_worker=1)
        eng.client.run(_slow_exit, 4.5)
        t0 = time.monotonic()
        eng.close()
        took = time.monotonic() - t0
    finally:
        nanny_log.removeHandler(grab)
        nanny_log.setLevel(old_level)
    msgs = [r.getMessage() for r in records]
    assert not [m for m in msgs if "killed" in m or "killing" in m], msgs
    assert 4.0 < took < 30
