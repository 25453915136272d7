"""The memory budget: limits read from fake cgroup v1 / v2 trees, a real RLIMIT_AS, a real
cgroup; the budget's shares and the refusal of a budget below a run's minimum."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ooc_svm import memory_budget as mb

MiB = 2**20
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
)
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _v1_tree(root: Path, limit: int, usage: int, inactive: int, parent_limit: int) -> None:
    base = "/sys/fs/cgroup/memory"
    _write(root, f"{base}/memory.limit_in_bytes", "9223372036854771712\n")
    _write(root, f"{base}/process_api/memory.limit_in_bytes", f"{parent_limit}\n")
    _write(root, f"{base}/process_api/memory.usage_in_bytes", f"{usage}\n")
    _write(root, f"{base}/process_api/memory.stat", f"cache 5\ntotal_inactive_file {inactive}\n")
    d = f"{base}/process_api/job1"
    _write(root, f"{d}/memory.limit_in_bytes", f"{limit}\n")
    _write(root, f"{d}/memory.usage_in_bytes", f"{usage}\n")
    _write(root, f"{d}/memory.memsw.limit_in_bytes", f"{limit // 2}\n")  # never read
    _write(root, f"{d}/memory.stat", f"cache 7\ntotal_inactive_file {inactive}\n")


def test_cgroup_v1_limit_of_its_own_memory_cgroup(tmp_path):
    """The ``memory`` line of /proc/self/cgroup joined to the v1 mount: its limit, its usage
    less the reclaimable page cache; memsw is not read."""
    _v1_tree(tmp_path, 1500 * MiB, 300 * MiB, 100 * MiB, 8000 * MiB)
    cg = "9:name=systemd:/\n4:memory:/process_api/job1\n1:cpu:/\n0::/\n"
    lims = mb.cgroup_limits(str(tmp_path), cg, V1_MOUNTS)
    assert [lim.name for lim in lims] == ["cgroup v1 memory.limit_in_bytes"]
    (lim,) = lims
    assert lim.limit == 1500 * MiB
    assert lim.used == 200 * MiB
    assert lim.where == "/sys/fs/cgroup/memory/process_api/job1"
    b = mb.detect(
        root=str(tmp_path),
        proc_cgroup=cg,
        mountinfo=V1_MOUNTS,
        status={"VmRSS": 150 * MiB},
        mem_available=20000 * MiB,
        dask=False,
    )
    assert b.source == "cgroup v1 memory.limit_in_bytes"
    assert b.bytes == 1500 * MiB - 200 * MiB - mb._reserve(1500 * MiB)
    assert "from cgroup v1 memory.limit_in_bytes" in b.describe()
    assert json.loads(json.dumps(b.as_dict()))["source"] == b.source


def test_cgroup_v1_parent_limit_binds(tmp_path):
    """An ancestor's lower limit binds the child (hierarchical accounting)."""
    _v1_tree(tmp_path, 4000 * MiB, 0, 0, 1000 * MiB)
    lims = mb.cgroup_limits(str(tmp_path), "4:memory:/process_api/job1\n", V1_MOUNTS)
    assert lims[0].limit == 1000 * MiB
    assert lims[0].where.endswith("/process_api")


def test_cgroup_v1_namespaced_mount(tmp_path):
    """Inside a container the mount's root is the container's own cgroup: the path of
    /proc/self/cgroup is found at the mount point itself."""
    mounts = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
    _write(tmp_path, "/sys/fs/cgroup/memory/memory.limit_in_bytes", f"{700 * MiB}\n")
    lims = mb.cgroup_limits(str(tmp_path), "7:memory:/docker/abc\n", mounts)
    assert [(lim.limit, lim.where) for lim in lims] == [(700 * MiB, "/sys/fs/cgroup/memory")]


def test_cgroup_v1_unlimited_is_no_limit(tmp_path):
    _v1_tree(tmp_path, 9223372036854771712, 0, 0, 9223372036854771712)
    assert mb.cgroup_limits(str(tmp_path), "4:memory:/process_api/job1\n", V1_MOUNTS) == []


def test_cgroup_v2_max_and_high(tmp_path):
    """cgroup v2: memory.max and memory.high of the ``0::`` path; ``max`` means none."""
    d = "/sys/fs/cgroup/user.slice/job.scope"
    _write(tmp_path, "/sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    _write(tmp_path, "/sys/fs/cgroup/user.slice/cgroup.controllers", "memory\n")
    _write(tmp_path, "/sys/fs/cgroup/user.slice/memory.max", "max\n")
    _write(tmp_path, f"{d}/cgroup.controllers", "memory\n")
    _write(tmp_path, f"{d}/memory.max", f"{2048 * MiB}\n")
    _write(tmp_path, f"{d}/memory.high", f"{1024 * MiB}\n")
    _write(tmp_path, f"{d}/memory.current", f"{400 * MiB}\n")
    _write(tmp_path, f"{d}/memory.stat", f"anon 1\ninactive_file {100 * MiB}\n")
    cg = "0::/user.slice/job.scope\n"
    lims = {lim.name: lim for lim in mb.cgroup_limits(str(tmp_path), cg, V2_MOUNTS)}
    assert set(lims) == {"cgroup v2 memory.max", "cgroup v2 memory.high"}
    assert lims["cgroup v2 memory.max"].limit == 2048 * MiB
    assert lims["cgroup v2 memory.high"].used == 300 * MiB
    b = mb.detect(
        root=str(tmp_path), proc_cgroup=cg, mountinfo=V2_MOUNTS, status={}, dask=False,
        mem_available=64000 * MiB,
    )  # fmt: skip
    assert b.source == "cgroup v2 memory.high"
    assert b.bytes == 1024 * MiB - 300 * MiB - mb._reserve(1024 * MiB)


def test_no_cgroup_limit_falls_back_to_mem_available(tmp_path):
    b = mb.detect(
        root=str(tmp_path), proc_cgroup="0::/\n", mountinfo="", status={"VmRSS": 10 * MiB},
        mem_available=3000 * MiB, dask=False,
    )  # fmt: skip
    assert b.source == "MemAvailable"
    assert b.bytes == 3000 * MiB - mb._reserve(3010 * MiB)


def test_explicit_budget_and_its_errors(tmp_path, monkeypatch):
    b = mb.detect(
        800, root=str(tmp_path), proc_cgroup="", mountinfo="", status={"VmRSS": 100 * MiB},
        mem_available=64000 * MiB, dask=False,
    )  # fmt: skip
    assert b.source == "--memory-mb"
    assert b.bytes == 700 * MiB - mb._reserve(800 * MiB)
    with pytest.raises(mb.MemoryBudgetError, match="expected MiB"):
        mb.parse_memory_mb("lots")
    monkeypatch.setenv(mb.ENV, "-3")
    mb.set_explicit(None)
    with pytest.raises(mb.MemoryBudgetError, match=r"\$OOC_SVM_MEMORY_MB"):
        mb.explicit_mb()
    monkeypatch.setenv(mb.ENV, "512")
    assert mb.explicit_mb() == 512.0


def test_require_refuses_below_the_minimum_and_shares_the_rest(tmp_path):
    b = mb.detect(
        1000, root=str(tmp_path), proc_cgroup="", mountinfo="", status={}, dask=False,
        mem_available=64000 * MiB,
    )  # fmt: skip
    b.require("decoded shards in flight", 200 * MiB)
    assert b.free == b.bytes - 200 * MiB
    assert b.share(0.5) == b.free // 2
    assert b.share(0.5, cap=MiB) == MiB
    with pytest.raises(mb.MemoryBudgetError) as e:
        b.require("dense vectors", 2000 * MiB, "perf on this store")
    msg = str(e.value)
    assert "\n" not in msg
    assert "2,200 MiB perf on this store needs at least" in msg
    assert "--memory-mb" in msg
    assert b.claims == {"decoded shards in flight": 200 * MiB}  # a refused claim is not kept
    b.release("decoded shards in flight")
    assert b.free == b.bytes


def test_rlimit_as_in_a_real_process(tmp_path):
    """A real RLIMIT_AS (set in a child before the detector runs) binds the budget."""
    code = textwrap.dedent(
        """
        import json, resource
        from ooc_svm import memory_budget as mb
        st = mb.process_status()
        lim = st["VmSize"] + 600 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (lim, resource.RLIM_INFINITY))
        b = mb.detect()
        print(json.dumps({"source": b.source, "bytes": b.bytes, "lim": lim,
                          "used": b.binding.used}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != mb.ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(out.stdout)
    assert got["source"] == "RLIMIT_AS"
    # the headroom is what is left of the address space (~600 MiB), less the reserve
    assert 400 * MiB < got["bytes"] <= 600 * MiB - mb._reserve(got["lim"])


# ------------------------------------------------------------------------------------------
# a real cgroup (root with cgroup v1 memory, or a writable cgroup v2 subtree)
# ------------------------------------------------------------------------------------------


def _make_cgroup(limit: int) -> tuple[str, str] | str:
    """(folder, kind) of a new cgroup with ``limit``, or the reason none can be made."""
    name = f"ooc-svm-test-{os.getpid()}"
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        d = os.path.join(v1, name)
        try:
            os.mkdir(d)
            with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))
            return d, "cgroup v1 memory.limit_in_bytes"
        except OSError as e:
            if os.path.isdir(d):
                os.rmdir(d)
            return f"cannot make a cgroup v1 memory group here ({e.strerror or e})"
    if os.access("/sys/fs/cgroup/cgroup.subtree_control", os.W_OK):
        d = os.path.join("/sys/fs/cgroup", name)
        try:
            os.mkdir(d)
            with open(os.path.join(d, "memory.max"), "w") as f:
                f.write(str(limit))
            return d, "cgroup v2 memory.max"
        except OSError as e:
            if os.path.isdir(d):
                os.rmdir(d)
            return f"cannot make a cgroup v2 group here ({e.strerror or e})"
    return "no cgroup v1 memory hierarchy and no writable cgroup v2 subtree (needs root)"


def test_training_inside_a_real_cgroup_reports_it(tmp_path):
    """A small training run inside a real 400 MiB cgroup: it converges and names the cgroup
    as the source of its budget."""
    from conftest import build_store

    made = _make_cgroup(400 * MiB)
    if isinstance(made, str):
        pytest.skip(made)
    cg, kind = made
    try:
        rng = np.random.default_rng(0)
        X = rng.standard_normal((600, 5))
        y = np.where(X[:, 0] + 0.3 * rng.standard_normal(600) > 0, 1.0, -1.0)
        build_store(tmp_path / "s.zarr", X, y, shard_rows=200)
        env = {k: v for k, v in os.environ.items() if k != mb.ENV}
        cmd = [
            sys.executable, "-m", "ooc_svm", "train", str(tmp_path / "s.zarr"),
            "-o", str(tmp_path / "m"), "--json", "-q",
        ]  # fmt: skip
        proc = subprocess.run(
            ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh", cg, *cmd],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads(proc.stdout)
        assert summary["converged"] is True
        assert summary["memory_budget"]["source"] == kind
        assert summary["memory_budget"]["limit_mib"] == 400.0
        assert 0 < summary["memory_budget"]["mib"] < 400
    finally:
        os.rmdir(cg)


# ------------------------------------------------------------------------------------------
# the budget in a run
# ------------------------------------------------------------------------------------------


def _small_store(path, n=2000, d=20, shard_rows=250, seed=0):
    from conftest import build_store

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return build_store(path, X, y, shard_rows=shard_rows)


def test_cli_refuses_a_budget_below_the_minimum_before_any_work(tmp_path, capsys):
    from ooc_svm.cli import main

    _small_store(tmp_path / "s.zarr")
    rc = main(["train", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "m"), "--memory-mb", "64"])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1
    assert "memory budget" in err and "from --memory-mb" in err and "needs at least" in err
    assert "give --memory-mb" in err
    assert not (tmp_path / "m").exists()
    rc = main(["train", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "m"), "--memory-mb", "-5"])
    assert rc == 1
    assert "--memory-mb: expected MiB (a number > 0)" in capsys.readouterr().err
    mb.set_explicit(None)


def test_json_reports_the_budget_and_its_source(tmp_path, capsys):
    from ooc_svm.cli import main

    _small_store(tmp_path / "s.zarr")
    # --memory-mb is the whole process's: this test session may already hold more than a
    # user's small budget, so the budget is what it holds and 600 MiB more
    limit = float(mb.rss_bytes() // 2**20 + 600)
    rc = main(
        ["train", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "m"), "--memory-mb",
         f"{limit:.0f}", "--json"]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["converged"]
    assert out["memory_budget"]["source"] == "--memory-mb"
    assert out["memory_budget"]["limit_mib"] == limit
    assert out["memory_budget"]["claims_mib"]["decoded shards in flight"] > 0
    assert mb.explicit_state() is None  # the command's budget ended with it


def test_memory_mb_of_one_command_does_not_outlive_it(tmp_path, capsys):
    """A process that runs more than one command (the Python API after ``main``, the warm
    server, a test session) measures the next one's budget afresh, failed command or not."""
    from ooc_svm.cli import main

    mb.set_explicit(None)
    rc = main(["train", str(tmp_path / "absent.zarr"), "-o", str(tmp_path / "m"),
               "--memory-mb", "1"])  # fmt: skip
    assert rc != 0
    assert mb.explicit_state() is None
    assert mb.current().source != "--memory-mb"


def test_kernel_cache_and_perf_planes_within_the_budget(tmp_path, monkeypatch):
    """The automatic sizes of the solvers are lowered to their share of the budget left and
    claimed; the shard cache then takes its share of what remains."""
    from conftest import fake_memory_budget

    from ooc_svm.solvers.perf.params import Params as PerfParams
    from ooc_svm.solvers.smo.params import Params as SmoParams
    from ooc_svm.store import open_store

    meta = open_store(str(_small_store(tmp_path / "s.zarr").path)).meta
    budget = fake_memory_budget(monkeypatch, 400 * MiB)
    smo = SmoParams().fit_memory(meta, budget)
    assert smo.cache_mb == pytest.approx(100.0)  # a quarter of 400
    assert smo.working_mb == pytest.approx(75.0)  # a quarter of the 300 left
    assert budget.free == pytest.approx(400 * MiB - 175 * MiB, abs=2)
    budget.claims.clear()
    perf = PerfParams().fit_memory(meta, budget)
    assert perf.dense_limit_mb == pytest.approx(400 / 16, rel=1e-3)
    assert PerfParams().fit_memory(meta, fake_memory_budget(monkeypatch, 64000 * MiB)) == (
        PerfParams()
    )  # room enough: the defaults stay


@pytest.mark.parametrize("name", ["s.zarr", pytest.param("s.parquet", marks=pytest.mark.slow)])
def test_auto_variant_streams_a_store_larger_than_the_budget(tmp_path, monkeypatch, name):
    """``--variant auto`` (the default) trains a store that fits with ``accelerated`` and one
    larger than the cache's share of the budget with ``selective`` (Zarr and Parquet stores
    alike): the same certificate, P(w) <= P* + C n eps, so the objectives agree within
    C n eps."""
    from conftest import fake_memory_budget

    from ooc_svm import api
    from ooc_svm.engine import LocalEngine

    n, eps = 1200, 1e-3
    st = _small_store(tmp_path / name, n=n, d=10, shard_rows=400)
    roomy = api.train(st, "perf", eps=eps, shard_cache_mb=0)
    assert roomy.summary["variant"] == "accelerated"
    decoded = 8 * st.meta.nnz + 16 * n
    with LocalEngine() as eng:  # the shards in flight are claimed first
        in_flight = eng.memory_need(st)
    # the cache may hold half of what is left at most
    fake_memory_budget(monkeypatch, int(decoded + in_flight))
    tight = api.train(st, "perf", eps=eps, shard_cache_mb=0)
    assert tight.summary["variant"] == "selective"
    assert tight.converged and roomy.converged
    assert abs(tight.objective - roomy.objective) <= 1.0 * n * eps


def test_processes_scheduler_splits_the_budget_between_its_workers(monkeypatch):
    """``--scheduler processes``: each worker's Dask memory limit is its part of the budget
    (which the worker's own budget then honours); an explicit limit is kept."""
    pytest.importorskip("distributed")
    import distributed
    from conftest import fake_memory_budget

    from ooc_svm.engine.base import EngineError
    from ooc_svm.engine.dask_cluster import DaskConnection

    seen: list[dict] = []

    def fake_cluster(**kw):
        seen.append(kw)
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(distributed, "LocalCluster", fake_cluster)
    fake_memory_budget(monkeypatch, 1200 * MiB)
    conn = DaskConnection()
    conn.scheduler, conn._cluster, conn._client = "processes", None, None
    for given in (None, "300MB"):
        with pytest.raises(EngineError, match="not started in this test"):
            conn._start_local_cluster(2, 1, 1.0, given, {})
    # the client keeps one part (its solver state): two workers and it share 1,200 MiB
    assert seen[0]["memory_limit"] == 400 * MiB
    assert seen[1]["memory_limit"] == "300MB"


def test_processes_workers_too_small_for_a_pass_are_refused(monkeypatch, tmp_path):
    """A local cluster's workers sized from the budget must hold a pass (code, shard cache,
    decoded shards below Dask's pause threshold): otherwise the run is refused before any
    work, naming the need, instead of workers restarted by Dask's memory monitor."""
    import scipy.sparse as sp
    from conftest import build_store

    from ooc_svm.engine.dask_cluster import DaskConnection

    X = sp.random(4000, 500, density=0.2, format="csr", random_state=0)
    store = build_store(tmp_path / "s.zarr", X, np.where(np.arange(4000) % 2, 1.0, -1.0))
    conn = DaskConnection()
    conn._worker_limit = (2, 250 * MiB, 1)
    with pytest.raises(mb.MemoryBudgetError, match=r"each of the 2 workers gets 250 MiB"):
        conn.memory_need(store)
    conn._worker_limit = (2, 2000 * MiB, 1)
    assert conn.memory_need(store) == 0


def test_ingest_sizes_within_the_budget(monkeypatch):
    """ingest's shards and blocks are lowered to fit a small budget (a given size is kept);
    a budget below one block per thread is refused before any input is read."""
    from conftest import fake_memory_budget

    from ooc_svm.store.ingest import DEFAULT_BLOCK_MB, DEFAULT_SHARD_MB, budget_sizes

    assert budget_sizes(fake_memory_budget(monkeypatch, 64000 * MiB), 2) == (
        DEFAULT_SHARD_MB,
        DEFAULT_BLOCK_MB,
    )
    shard_mb, block_mb = budget_sizes(fake_memory_budget(monkeypatch, 120 * MiB), 2)
    assert 1.0 <= shard_mb < DEFAULT_SHARD_MB and 1.0 <= block_mb < DEFAULT_BLOCK_MB
    assert (6 * 2 * block_mb + 3 * shard_mb) <= 120
    assert budget_sizes(fake_memory_budget(monkeypatch, 120 * MiB), 2, 50.0, 4.0) == (50.0, 4.0)
    with pytest.raises(mb.MemoryBudgetError, match="ingest needs at least"):
        budget_sizes(fake_memory_budget(monkeypatch, 4 * MiB), 2)
