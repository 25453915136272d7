"""Checkpoint / resume: a training process killed mid-run and resumed ends with the same
model as an uninterrupted run; Ctrl-C stops cleanly with the last checkpoint intact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import default_sigint as _default_sigint
from conftest import latest_checkpoint_iteration as _latest_iteration
from conftest import ooc_cmd, signal_at_checkpoint
from sklearn.datasets import make_classification

from ooc_svm.checkpoint import Checkpointer, CheckpointError
from ooc_svm.model.model import load_model
from ooc_svm.store import csr_to_shards, write_store

OOC = ooc_cmd()

# case -> (solver, extra CLI flags making many small checkpointed steps)
CASES = {
    "smo": ("smo", ["--kernel", "rbf", "--gamma", "0.05", "--C", "100", "--config", "SMO_CONF"]),
    # time-based checkpoints inside one in-memory chunk (checkpoint_every left at 100,000)
    "smo-seconds": (
        "smo",
        ["--kernel", "rbf", "--gamma", "0.05", "--C", "100", "--checkpoint-seconds", "0.02"],
    ),
    # the out-of-core decomposition (800 of 3000 rows in memory): a checkpoint per outer step
    "smo-decomposition": (
        "smo",
        ["--kernel", "rbf", "--gamma", "0.05", "--C", "10", "--working-rows", "800"],
    ),
    "perf-paper": ("perf", ["--C", "10", "--eps", "1e-5", "--variant", "paper"]),
    "perf-accelerated": ("perf", ["--C", "10", "--eps", "1e-7", "--variant", "accelerated"]),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X, y = make_classification(
        n_samples=3000, n_features=20, n_informative=10, flip_y=0.1, random_state=0
    )
    path = str(tmp_path_factory.mktemp("ck") / "s.zarr")
    write_store(path, csr_to_shards(sp.csr_matrix(X), y, shard_rows=500))
    return path


def _args(case, store, out, ckpt, tmp):
    conf = tmp / "smo.toml"
    conf.write_text("checkpoint_every = 25\n")
    solver, flags = CASES[case]
    extra = [a.replace("SMO_CONF", str(conf)) for a in flags]
    return [
        *OOC,
        "train",
        "--solver",
        solver,
        store,
        "-o",
        str(out),
        "--json",
        "--checkpoint",
        str(ckpt),
        *extra,
    ]


def _run_until(
    args, ckpt: Path, min_iter: int, sig, suffix: str = ""
) -> subprocess.CompletedProcess:
    """Run ``args``; the run sends itself ``sig`` right after writing its first checkpoint of
    iteration >= ``min_iter`` in a directory ending with ``suffix`` (a fixed point, whatever
    the machine's speed)."""
    cmd = signal_at_checkpoint(args, min_iter, sig, suffix)
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint
    )
    out, err = p.communicate(timeout=600)
    return subprocess.CompletedProcess(args, p.returncode, out, err)


@pytest.mark.parametrize("solver", list(CASES))
def test_kill_and_resume_same_model(solver, store, tmp_path):
    """`solver` is a case name of CASES."""
    full = subprocess.run(
        _args(solver, store, tmp_path / "full", tmp_path / "ck_full", tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert full.returncode == 0, full.stderr
    n_ckpt = _latest_iteration(tmp_path / "ck_full")
    assert n_ckpt >= 4, f"too few checkpoints ({n_ckpt}) to interrupt the run"

    ck = tmp_path / "ck"
    killed = _run_until(
        _args(solver, store, tmp_path / "m", ck, tmp_path), ck, max(1, n_ckpt // 2), signal.SIGKILL
    )
    assert killed.returncode == -signal.SIGKILL, "training ended before it could be killed"
    assert not (tmp_path / "m").exists()
    at = _latest_iteration(ck)
    assert 1 <= at < n_ckpt
    resumed = subprocess.run(
        _args(solver, store, tmp_path / "m", ck, tmp_path) + ["--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    a, b = load_model(str(tmp_path / "full")), load_model(str(tmp_path / "m"))
    if a.kind == "linear":
        np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-12, atol=1e-14)
    else:
        np.testing.assert_array_equal(b.support_, a.support_)
        np.testing.assert_allclose(b.dual_coef_, a.dual_coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-12, atol=1e-14)
    sa = json.loads(full.stdout.strip().splitlines()[-1])
    sb = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert sb["objective"] == pytest.approx(sa["objective"], rel=1e-12)


def test_ctrl_c_keeps_last_checkpoint(store, tmp_path):
    ck = tmp_path / "ck"
    r = _run_until(_args("smo", store, tmp_path / "m", ck, tmp_path), ck, 2, signal.SIGINT)
    assert r.returncode == 130, r.stderr
    assert "interrupted" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()
    data = Checkpointer(str(ck), "smo", resume=True).load(check_params=False)
    assert data is not None and data.iteration >= 2 and data.arrays["alpha"].shape == (3000,)
    assert not [n for n in os.listdir(ck) if n.startswith(".")]


def test_resume_with_other_parameters_refused(store, tmp_path):
    ck = tmp_path / "ck"
    c = Checkpointer(str(ck), "perf", {"C": 1.0})
    c.save(1, scalars={"x": 1}, arrays={"w": np.zeros(3)})
    with pytest.raises(CheckpointError, match="different parameters"):
        Checkpointer(str(ck), "perf", {"C": 2.0}).load()
    with pytest.raises(CheckpointError, match="solver"):
        Checkpointer(str(ck), "smo", {"C": 1.0}).load()
    d = Checkpointer(str(ck), "perf", {"C": 1.0}).load()
    assert d.iteration == 1 and d.scalars == {"x": 1}


@pytest.fixture(scope="module")
def mc_store(tmp_path_factory):
    X, y = make_classification(
        n_samples=3000, n_features=20, n_informative=10, n_classes=4, flip_y=0.1, random_state=1
    )
    path = str(tmp_path_factory.mktemp("ckmc") / "mc.zarr")
    write_store(
        path, csr_to_shards(sp.csr_matrix(X), y + 1.0, shard_rows=500), label_kind="multiclass"
    )
    return path


def test_kill_and_resume_ovr_same_model(mc_store, tmp_path):
    """perf one-vs-rest (all classes in shared passes) killed mid-run, resumed: every class
    continues from its own checkpoint and the model equals the uninterrupted one."""

    def args(out, ck):
        return [
            *OOC,
            "train",
            "--solver",
            "perf",
            mc_store,
            "-o",
            str(out),
            "--json",
            "--C",
            "10",
            "--eps",
            "1e-7",
            "--checkpoint",
            str(ck),
        ]

    full = subprocess.run(
        args(tmp_path / "full", tmp_path / "ck_full"), capture_output=True, text=True, timeout=600
    )
    assert full.returncode == 0, full.stderr
    dirs = sorted(p.name for p in (tmp_path / "ck_full").iterdir())
    assert dirs == [f"class-{k:04d}" for k in range(4)]
    n_ckpt = _latest_iteration(tmp_path / "ck_full" / "class-0000")
    assert n_ckpt >= 4
    ck = tmp_path / "ck"
    killed = _run_until(
        args(tmp_path / "m", ck),
        ck / "class-0000",
        max(1, n_ckpt // 2),
        signal.SIGKILL,
        suffix="class-0000",
    )
    assert killed.returncode == -signal.SIGKILL, "training ended before it could be killed"
    assert not (tmp_path / "m").exists()
    hist = tmp_path / "resumed.jsonl"
    resumed = subprocess.run(
        args(tmp_path / "m", ck) + ["--resume", "--history", str(hist)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    # it really continued: no class started again from iteration 0
    recs = [json.loads(x) for x in hist.read_text().splitlines() if '"header"' not in x]
    assert recs and min(r["iteration"] for r in recs) >= 1
    assert {r["class_index"] for r in recs} <= {0, 1, 2, 3}
    a, b = load_model(str(tmp_path / "full")), load_model(str(tmp_path / "m"))
    assert a.coef_.shape == (4, 20)
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-12, atol=1e-14)
    sa = json.loads(full.stdout.strip().splitlines()[-1])
    sb = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert sb["objective"] == pytest.approx(sa["objective"], rel=1e-12)
    assert sb["passes"] == sa["passes"]
    # another C is refused, naming the class directory
    bad = subprocess.run(
        args(tmp_path / "m2", ck)[:-4]
        + ["--C", "1", "--eps", "1e-7", "--checkpoint", str(ck), "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "class-0000" in bad.stderr and "C" in bad.stderr


# -- a damaged checkpoint: one line, never a traceback or an endless read --------------------


def _flip(path: Path, where: float, bit: int = 0x80) -> None:
    b = bytearray(path.read_bytes())
    b[int(len(b) * where)] ^= bit
    path.write_bytes(bytes(b))


def _to_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _truncate(path: Path, n: int) -> None:
    path.write_bytes(path.read_bytes()[:n])


#: how to damage a checkpoint directory (its newest ckpt-* is ``d``)
DAMAGE = {
    "LATEST-flipped-byte": lambda ck, d: _flip(ck / "LATEST", 0.2),
    "LATEST-is-dev-zero": lambda ck, d: _to_dev_zero(ck / "LATEST"),
    "meta-is-dev-zero": lambda ck, d: _to_dev_zero(d / "meta.json"),
    "meta-deeply-nested": lambda ck, d: (d / "meta.json").write_text("[" * 200_000),
    "arrays-flipped-byte": lambda ck, d: _flip(d / "arrays.npz", 0.4, 0x01),
    "arrays-truncated": lambda ck, d: _truncate(d / "arrays.npz", 300),
    "arrays-empty": lambda ck, d: (d / "arrays.npz").write_bytes(b""),
    "arrays-member-dropped": lambda ck, d: _drop_member(d / "arrays.npz"),
    "shards-empty": lambda ck, d: (d / "shards.npz").write_bytes(b""),
}  # fmt: skip


def _drop_member(path: Path) -> None:
    with np.load(path) as z:
        kept = {k: z[k] for k in z.files[1:]}
    np.savez(path, **kept)


#: the checkpoints damaged: (solver, train flags), made once per module
DAMAGED_SOLVERS = {
    "perf": ("perf", ["--C", "1"]),
    "active-set": ("active-set", ["--kernel", "rbf", "--gamma", "0.05", "--C", "1"]),
}


@pytest.fixture(scope="module")
def small_checkpoints(tmp_path_factory):
    """A finished run's checkpoint directory per solver of DAMAGED_SOLVERS, on 300 rows."""
    root = tmp_path_factory.mktemp("damaged")
    X, y = make_classification(n_samples=300, n_features=8, random_state=1)
    write_store(str(root / "s.zarr"), csr_to_shards(sp.csr_matrix(X), y, shard_rows=100))
    for name, (solver, flags) in DAMAGED_SOLVERS.items():
        r = subprocess.run(
            [*OOC, "train", "--solver", solver, "s.zarr", "-o", f"m-{name}", "-q"]
            + ["--checkpoint", f"ck-{name}", *flags],
            cwd=root,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
    return root


def _damaged_copy(root: Path, name: str, damage: str, dest: Path) -> Path:
    import shutil

    ck = dest / "ck"
    shutil.copytree(root / f"ck-{name}", ck)
    d = ck / (ck / "LATEST").read_text().strip()
    if damage.startswith("shards") and not (d / "shards.npz").exists():
        pytest.skip(f"{name} checkpoints have no shards.npz")
    DAMAGE[damage](ck, d)
    return ck


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("name", list(DAMAGED_SOLVERS))
def test_damaged_checkpoint_is_one_error(small_checkpoints, tmp_path, name, damage):
    from ooc_svm.store import open_store

    ck = _damaged_copy(small_checkpoints, name, damage, tmp_path)
    solver = DAMAGED_SOLVERS[name][0]
    store = open_store(str(small_checkpoints / "s.zarr"))
    with pytest.raises(CheckpointError, match="is damaged .*; delete it or start without --resume"):
        Checkpointer(str(ck), solver, resume=True, store=store).load(check_params=False)


@pytest.mark.parametrize(
    "name, damage",
    [
        ("perf", "LATEST-is-dev-zero"),
        ("perf", "LATEST-flipped-byte"),
        ("perf", "arrays-flipped-byte"),
        ("active-set", "shards-empty"),
        ("active-set", "arrays-member-dropped"),
    ],
)
def test_resume_from_damaged_checkpoint_cli(small_checkpoints, tmp_path, name, damage):
    import shutil

    shutil.copytree(small_checkpoints / "s.zarr", tmp_path / "s.zarr")
    _damaged_copy(small_checkpoints, name, damage, tmp_path)
    solver, flags = DAMAGED_SOLVERS[name]
    r = subprocess.run(
        [*OOC, "train", "--solver", solver, "s.zarr", "-o", "m", "--checkpoint", "ck"]
        + ["--resume", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("ooc-svm: error: checkpoint ck is damaged (")
    assert r.stderr.rstrip().endswith("; delete it or start without --resume")
    assert not (tmp_path / "m").exists()
