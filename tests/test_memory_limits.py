"""Runs inside real limits (``--memory-mb``, a cgroup, ``ulimit -v``): a run that cannot fit
is refused before any work in one line whose suggested limit is enough (fed back, the run is
accepted and trains), a run that fits converges, and none is killed by the kernel or ends in
a traceback. Each run is a fresh ``python -m ooc_svm`` process, as a user's would be."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm import memory_budget as mb
from ooc_svm.store import csr_to_shards, write_store

MiB = 2**20
VARIANTS = ("paper", "accelerated", "selective", "svmperf", "dcd")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != mb.ENV}


def _train(store, out, *flags, prefix=(), preexec=None, timeout=600):
    cmd = [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", str(store), "-o",
           str(out), "--overwrite", "--json", "-q", *flags]  # fmt: skip
    return subprocess.run(
        [*prefix, *cmd], capture_output=True, text=True, env=_env(), timeout=timeout,
        preexec_fn=preexec,
    )  # fmt: skip


def _one_line_refusal(proc) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 1, (proc.returncode, err[-3000:])
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err[-3000:]
    assert "memory budget" in err and "needs at least" in err, err
    return err


def _converged(proc) -> dict:
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["converged"] is True
    return out


def _wide_store(path, n=1500, width=2_500_000, held=4000, k=12, seed=5) -> str:
    """A wide hashed store's shape: ``k`` non-zeros a row over ``held`` columns spread
    across ``width`` (perf's dense vectors over the width dominate its needs)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(width, held, replace=False))
    idx = np.sort(rng.choice(held, size=(n, k)), axis=1)
    X = sp.csr_matrix(
        (np.ones(n * k, dtype=np.float32), cols[idx].ravel(), np.arange(n + 1) * k),
        shape=(n, width),
    )
    X.sum_duplicates()
    y = np.where(X @ rng.normal(size=width) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    write_store(str(path), csr_to_shards(X, y, shard_rows=500), n_features=width)
    return str(path)


def _narrow_store(path, n=3000, d=50, seed=6) -> str:
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    write_store(str(path), csr_to_shards(X, y, shard_rows=500), n_features=d)
    return str(path)


def _like_store(path, like="criteo", rows=3000) -> str:
    from ooc_svm.synth import synth

    synth(str(path), like=like, rows=rows, seed=1, shard_rows=1000)
    return str(path)


# ------------------------------------------------------------------------------------------
# the suggested limit is enough (one hint, not a chain)
# ------------------------------------------------------------------------------------------


def test_memory_mb_hint_is_enough(tmp_path):
    """Too small a --memory-mb is refused in one line naming a --memory-mb; given that
    value, the run is accepted and converges (it used to name a value refused in turn:
    200 -> 272 -> 517 -> 520 ...)."""
    store = _wide_store(tmp_path / "w.zarr")
    err = _one_line_refusal(_train(store, tmp_path / "m", "--memory-mb", "150", "--eps", "0.01"))
    hint = re.search(r"give --memory-mb ([\d,]+) or more", err)
    assert hint, err
    value = hint.group(1).replace(",", "")
    _converged(_train(store, tmp_path / "m", "--memory-mb", value, "--eps", "0.01"))


def _cgroup_prefix(limit_mib: int):
    from test_memory_budget import _make_cgroup

    made = _make_cgroup(limit_mib * MiB)
    if isinstance(made, str):
        pytest.skip(made)
    cg, _ = made
    return cg, ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh", cg]


def _in_cgroup(limit_mib: int, store, out, *flags, timeout=600):
    cg, prefix = _cgroup_prefix(limit_mib)
    try:
        proc = _train(store, out, *flags, prefix=prefix, timeout=timeout)
        with open(os.path.join(cg, "memory.oom_control")) as f:
            oom = f.read()
        assert "oom_kill 0" in oom or "oom_kill " not in oom, oom
    finally:
        os.rmdir(cg)
    return proc


def test_cgroup_hint_is_enough(tmp_path):
    """Inside a container's limit the refusal names the limit to give the container (not a
    --memory-mb, which cannot raise it); a cgroup of that size accepts the run."""
    store = _wide_store(tmp_path / "w.zarr")
    err = _one_line_refusal(_in_cgroup(250, store, tmp_path / "m", "--eps", "0.01"))
    hint = re.search(
        r"raise the container's memory limit \(cgroup v\d [\w.]+\) to ([\d,]+) MiB", err
    )
    assert hint, err
    _converged(
        _in_cgroup(int(hint.group(1).replace(",", "")), store, tmp_path / "m", "--eps", "0.01")
    )


def test_ulimit_v_hint_is_enough_and_never_a_traceback(tmp_path):
    """Under ``ulimit -v`` (RLIMIT_AS: address space, thread stacks and malloc arenas
    included) a run is refused in one line naming a ``ulimit -v``; under that limit it
    trains, without "can't start new thread" or a MemoryError traceback."""
    store = _narrow_store(tmp_path / "n.zarr")

    def limit(kib: int):
        return lambda: resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))

    err = _one_line_refusal(_train(store, tmp_path / "m", preexec=limit(500_000)))
    hint = re.search(r"raise ulimit -v to ([\d,]+) \(KiB\)", err)
    assert hint, err
    kib = int(hint.group(1).replace(",", ""))
    _converged(_train(store, tmp_path / "m", preexec=limit(kib)))


@pytest.mark.parametrize(
    "error",
    [
        MemoryError("Unable to allocate 38.1 MiB for an array"),
        RuntimeError("can't start new thread"),
    ],
)
def test_out_of_memory_all_the_same_is_one_line(tmp_path, monkeypatch, capsys, error):
    """A run that runs out of memory although its claims fit (an allocation refused by
    ``ulimit -v``, a thread that cannot start) ends in one line naming the limit, not a
    traceback."""
    import ooc_svm.api as api
    from ooc_svm.cli import main

    store = _narrow_store(tmp_path / "n.zarr", n=200)

    def fail(*a, **k):
        raise error

    monkeypatch.setattr(api, "train", fail)
    rc = main(["train", "--solver", "perf", store, "-o", str(tmp_path / "m")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("ooc-svm: error: out of memory (") and "memory budget" in err
    mb.set_explicit(None)


# ------------------------------------------------------------------------------------------
# every variant under a small budget, on narrow, wide and --like stores
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("stores")
    return {
        "narrow": _narrow_store(d / "n.zarr"),
        "wide": _wide_store(d / "w.zarr"),
        "like": _like_store(d / "c.zarr"),
    }


@pytest.mark.parametrize("shape", ["narrow", "wide", "like"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_under_the_least_budget_it_accepts(stores, tmp_path, variant, shape):
    """Each perf variant, refused in one line under 120 MiB, converges under the budget
    the refusal names (the least one it accepts: selective then keeps few rows in memory,
    the planes' share is small)."""
    store = stores[shape]
    flags = ("--variant", variant, "--eps", "0.01")
    err = _one_line_refusal(_train(store, tmp_path / "m", *flags, "--memory-mb", "120"))
    value = re.search(r"give --memory-mb ([\d,]+) or more", err).group(1).replace(",", "")
    out = _converged(_train(store, tmp_path / "m", *flags, "--memory-mb", value))
    assert out["memory_budget"]["source"] == "--memory-mb"


# ------------------------------------------------------------------------------------------
# the public sets' shapes at 100k rows inside 400, 800 and 1,500 MB cgroups
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def like_100k(tmp_path_factory):
    d = tmp_path_factory.mktemp("like100k")
    return {like: _like_store(d / f"{like}.zarr", like, 100_000) for like in ("kdd2010", "criteo")}


@pytest.mark.slow
@pytest.mark.parametrize("limit", [400, 800, 1500])
@pytest.mark.parametrize("like", ["kdd2010", "criteo"])
def test_like_stores_in_cgroups_converge_or_are_refused(like_100k, tmp_path, like, limit):
    """``train --solver perf`` with default flags inside a real cgroup: it converges, or it
    is refused before any work in one line; never killed by the kernel (exit 137)."""
    proc = _in_cgroup(limit, like_100k[like], tmp_path / "m", timeout=3000)
    assert proc.returncode != 137 and proc.returncode >= 0, proc.stderr[-3000:]
    if proc.returncode == 1:
        _one_line_refusal(proc)
    else:
        _converged(proc)
