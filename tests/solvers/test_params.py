"""The typed solver contract and LIBSVM-style parameter checks.

- one frozen ``Params`` dataclass per solver, validated once with one wording per rule;
- one ``solve(store, engine, params, *, callback=None, checkpoint=None)`` signature;
- ``train`` flags and ``--help`` defaults generated from the dataclasses, ``--config`` + flags;
- ``--gamma`` <= 0, ``--C`` with ``--c-perf``, ``--tol`` to perf / ``--eps`` to a dual solver
  refused naming the right flag; ``--max-iter`` reached reported as not converged;
- rank data on a dual solver points to ``--solver perf``; ``--loss ordinal`` on binary labels
  points to ``--loss roc``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import build_store, kernel_solvers

from ooc_svm.api import train
from ooc_svm.engine import LocalEngine
from ooc_svm.solvers import SolverError, available_solvers, get_solver
from ooc_svm.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SOLVERS = available_solvers()


def _binary(n=120, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A directory with a binary store ``b.zarr`` and a rank store (qids) ``r.zarr``."""
    d = tmp_path_factory.mktemp("params")
    X, y = _binary()
    build_store(d / "b.zarr", X, y, shard_rows=40)
    rng = np.random.default_rng(3)
    yr = rng.integers(0, 3, X.shape[0]).astype(float)
    qid = np.sort(rng.integers(0, 4, X.shape[0]))
    build_store(d / "r.zarr", X, yr, qid=qid, shard_rows=40)
    return d


def _cli(work, *args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", "train", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line_error(r, *needles):
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ooc-svm: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# --------------------------------------------------------------------------------------------
# item 1: one frozen Params per solver, validated once
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", SOLVERS)
def test_params_dataclass_per_solver(solver):
    mod = get_solver(solver)
    P = mod.Params
    assert dataclasses.is_dataclass(P)
    p = P()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.C = 2.0
    for f in dataclasses.fields(P):
        assert f.metadata.get("help"), f"{solver}.{f.name} has no help"
    assert mod.DEFAULTS == {f.name: f.default for f in dataclasses.fields(P)}
    if solver != "perf":  # the kernel solvers share a base
        from ooc_svm.solvers.params import KernelSolverParams

        assert issubclass(P, KernelSolverParams)
        assert {"C", "kernel", "gamma", "degree", "coef0", "tol", "cache_mb"} <= set(mod.DEFAULTS)
        assert {"max_iter", "seed"} <= set(mod.DEFAULTS)
    # values are converted to the declared types once
    q = P.from_mapping({"C": 2, "max_iter": 5.0})
    assert isinstance(q.C, float) and q.C == 2.0 and isinstance(q.max_iter, int)


@pytest.mark.parametrize("solver", SOLVERS)
def test_every_declared_range_is_enforced_and_its_edge_accepted(solver):
    """Ranges are data (``param(..., gt=, ge=)``): each one refuses the value just outside it
    with one wording and accepts its edge; the numeric fields the old rules checked all
    declare one."""
    from ooc_svm.solvers.params import flag_name

    P = get_solver(solver).Params
    ranged = {f.name: f for f in dataclasses.fields(P) if f.metadata.get("gt") is not None
              or f.metadata.get("ge") is not None}  # fmt: skip
    assert {"C", "max_iter", "checkpoint_seconds"} <= set(ranged)
    assert ({"eps", "c_perf"} if solver == "perf" else {"tol", "gamma", "cache_mb"}) <= set(ranged)
    for name, f in ranged.items():
        gt, ge = f.metadata.get("gt"), f.metadata.get("ge")
        is_int = isinstance(f.default, int) and not isinstance(f.default, bool)
        bad = (gt if gt is not None else ge - 1) if is_int else (gt if gt is not None else ge)
        if not is_int and ge is not None:
            bad = ge - 0.5
        with pytest.raises(SolverError, match=f"^{flag_name(name)} must be "):
            P.from_mapping({name: bad})
        edge = ge if ge is not None else (gt + 1 if is_int else gt + 0.5)
        assert getattr(P.from_mapping({name: edge}), name) == edge


@pytest.mark.parametrize("solver", SOLVERS)
def test_one_wording_per_rule(work, solver):
    st = open_store(str(work / "b.zarr"))
    with pytest.raises(SolverError) as e:
        train(st, solver, C=-1)
    assert str(e.value) == "--C must be positive (got -1.0)"
    with pytest.raises(SolverError) as e:
        train(st, solver, max_iter=-3)
    assert str(e.value) == "--max-iter must be >= 0 (got -3)"
    with pytest.raises(SolverError, match="its parameters are .*max_iter"):
        train(st, solver, bogus=1)


def test_cli_and_api_share_the_wording(work):
    r = _cli(work, "--solver", "irwls", "b.zarr", "-o", "m", "--C", "0")
    assert _one_line_error(r) == "ooc-svm: error: --C must be positive (got 0.0)"
    with pytest.raises(SolverError) as e:
        get_solver("irwls").Params(C=0.0)
    assert str(e.value) == "--C must be positive (got 0.0)"


# --------------------------------------------------------------------------------------------
# item 2: one solve() signature; smo's checkpointer is an argument, not a params entry
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", SOLVERS)
def test_one_solve_signature(solver):
    sig = inspect.signature(get_solver(solver).solve)
    ps = list(sig.parameters.values())
    assert [p.name for p in ps] == ["store", "engine", "params", "callback", "checkpoint"]
    assert ps[3].kind is ps[4].kind is inspect.Parameter.KEYWORD_ONLY
    assert ps[3].default is None and ps[4].default is None


def test_smo_checkpoint_is_an_argument(work, tmp_path):
    from ooc_svm.checkpoint import Checkpointer
    from ooc_svm.solvers import smo

    st = open_store(str(work / "b.zarr"))
    p = smo.Params(kernel="rbf", gamma=0.3, C=10.0, checkpoint_every=5)
    ck = Checkpointer(str(tmp_path / "ck"), "smo", p.to_dict())
    with LocalEngine() as eng:
        res = smo.solve(st, eng, p, checkpoint=ck)
    assert "_checkpoint" not in p.to_dict()
    assert (tmp_path / "ck" / "LATEST").exists()
    with LocalEngine() as eng:
        again = smo.solve(st, eng, p)
    assert again.dual_objective == pytest.approx(res.dual_objective, rel=1e-12)


def test_typed_params_through_api(work):
    from ooc_svm.solvers import perf

    st = open_store(str(work / "b.zarr"))
    a = train(st, "perf", params=perf.Params(C=0.5, eps=1e-4))
    b = train(st, "perf", C=0.5, eps=1e-4)
    np.testing.assert_array_equal(a.model.coef_, b.model.coef_)


# --------------------------------------------------------------------------------------------
# item 3: flags and --help generated from the dataclasses; --config still works
# --------------------------------------------------------------------------------------------
def test_help_lists_every_field_and_default():
    r = subprocess.run(
        [sys.executable, "-m", "ooc_svm", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for solver in SOLVERS:
        P = get_solver(solver).Params
        for f in dataclasses.fields(P):
            flag = "--" + f.name.replace("_", "-")
            if f.metadata.get("cli") == "no":
                flag = "--no-" + f.name.replace("_", "-")
            assert flag in text, flag
    # per-solver defaults, generated from the dataclasses
    assert "--checkpoint-every" in text and "(default 100000)" in text
    assert "--max-iter" in text and "irwls 100000" in text
    for flag in ("--C", "--eps", "--tol", "--kernel", "--shrinking", "--no-check", "--init"):
        assert flag in text


def test_config_file_and_flags_override(work):
    conf = ROOT / "conf" / "irwls.toml"
    r = _cli(
        work, "--solver", "irwls", "b.zarr", "-o", "mc", "--config", str(conf), "--C", "2",
        "--kernel", "linear", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["strategy"] == "random" and s["working_set"] == 600
    from ooc_svm.model.model import load_model

    assert load_model(str(work / "mc")).info["C"] == 2.0
    # conf files of every solver are accepted by its Params
    for solver in SOLVERS:
        import tomllib

        with open(ROOT / "conf" / f"{solver}.toml", "rb") as f:
            get_solver(solver).Params.from_mapping(tomllib.load(f))


def test_config_unknown_key(work, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("C = 1.0\nworking_sett = 3\n")
    r = _cli(work, "--solver", "irwls", "b.zarr", "-o", "m", "--config", str(bad))
    _one_line_error(r, str(bad), "--working-sett", "working_set")


# --------------------------------------------------------------------------------------------
# item 4: the one-vs-rest driver lives in solvers/ovr.py; perf imports nothing upward
# --------------------------------------------------------------------------------------------
def test_perf_ovr_does_not_import_api(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 4)).astype(np.float32)
    y = (np.arange(90) % 3).astype(float)
    X[:, 0] += 2 * y
    path = build_store(tmp_path / "m.zarr", X, y, shard_rows=40).path
    code = (
        "import sys\n"
        "from ooc_svm.store import open_store\n"
        "from ooc_svm.engine import LocalEngine\n"
        "from ooc_svm.solvers import perf\n"
        f"st = open_store({path!r})\n"
        "r = perf.solve_ovr(st, LocalEngine(), perf.Params(), [0.0, 1.0, 2.0])\n"
        "assert r.model.coef_.shape == (3, 4)\n"
        "print('ooc_svm.api' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# --------------------------------------------------------------------------------------------
# item 6: irwls keeps its column caches in per-run worker scratch, not a module global
# --------------------------------------------------------------------------------------------
def test_irwls_scratch_is_per_run():
    from ooc_svm.engine.base import WorkerScratch
    from ooc_svm.solvers import irwls

    assert not hasattr(irwls, "_CACHES")
    sc = WorkerScratch("irwls-columns")
    made = sc.get(0, lambda: [1])
    assert sc.get(0, lambda: [2]) is made
    copy = pickle.loads(pickle.dumps(sc))  # outside a Dask worker: a fresh, empty copy
    assert copy.key == sc.key and copy.get(0, lambda: [3]) == [3]
    sc.clear()
    assert sc.get(0, lambda: [4]) == [4]


# --------------------------------------------------------------------------------------------
# parameter checks as LIBSVM does them
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", ["-1", "0"])
def test_gamma_must_be_positive(work, gamma):
    r = _cli(work, "--solver", "smo", "b.zarr", "-o", "m", "--gamma", gamma)
    _one_line_error(r, "--gamma must be positive", "1/n_features")
    assert not (work / "m").exists()


def test_gamma_default_is_one_over_n_features(work):
    st = open_store(str(work / "b.zarr"))
    res = train(st, "smo", kernel="rbf")
    assert res.model.gamma == pytest.approx(1.0 / st.meta.n_features)


def test_C_with_c_perf_is_refused(work):
    r = _cli(work, "--solver", "perf", "b.zarr", "-o", "m", "--C", "1", "--c-perf", "0.1")
    _one_line_error(r, "--C", "--c-perf", "not both")
    st = open_store(str(work / "b.zarr"))
    with pytest.raises(SolverError, match="not both"):
        train(st, "perf", C=1.0, c_perf=0.1)


def test_tol_to_perf_names_eps(work):
    r = _cli(work, "--solver", "perf", "b.zarr", "-o", "m", "--tol", "0.01")
    line = _one_line_error(r)
    assert line == (
        "ooc-svm: error: perf stops on --eps (the duality gap, as SVMperf's -e); --tol is for "
        "the dual solvers"
    )


@pytest.mark.parametrize("solver", kernel_solvers())
def test_eps_to_dual_solver_names_tol(work, solver):
    r = _cli(work, "--solver", solver, "b.zarr", "-o", "m", "--eps", "0.01")
    _one_line_error(r, f"--solver {solver} stops on --tol", "--eps is for perf")


@pytest.mark.parametrize(
    "solver,flags",
    [
        ("perf", ["--max-iter", "1", "--eps", "1e-9"]),
        ("smo", ["--max-iter", "2", "--kernel", "linear"]),
        ("active-set", ["--max-iter", "2", "--kernel", "linear"]),
        ("irwls", ["--max-iter", "1", "--working-set", "4", "--C", "10"]),
    ],
)
def test_max_iter_reached_is_not_converged(work, solver, flags):
    r = _cli(work, "--solver", solver, "b.zarr", "-o", "mj", "--json", *flags, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["converged"] is False
    r = _cli(work, "--solver", solver, "b.zarr", "-o", "mt", *flags, "--overwrite")
    assert r.returncode == 0, r.stderr
    n = flags[1]
    assert f"not converged (max-iter {n} reached)" in r.stdout, r.stdout
    # a converged run says so in the JSON
    r = _cli(work, "--solver", solver, "b.zarr", "-o", "mc", "--json", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["converged"] is True


# --------------------------------------------------------------------------------------------
# rank data and --loss ordinal on binary labels
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", kernel_solvers())
def test_rank_data_points_to_perf(work, solver):
    assert open_store(str(work / "r.zarr")).meta.label_kind == "ordinal"
    r = _cli(work, "--solver", solver, "r.zarr", "-o", "m")
    line = _one_line_error(r, "ranking data needs --solver perf (--loss ordinal or roc)")
    assert "ovr" not in line and "multiclass" not in line


def test_loss_ordinal_on_binary_says_roc(work):
    r = _cli(work, "--solver", "perf", "b.zarr", "-o", "m", "--loss", "ordinal")
    _one_line_error(r, "--loss ordinal", "--loss roc")
    # roc on the same store trains
    r = _cli(work, "--solver", "perf", "b.zarr", "-o", "m2", "--loss", "roc")
    assert r.returncode == 0, r.stderr


@pytest.mark.cluster
def test_irwls_column_cache_works_on_dask_workers(tmp_path):
    """The worker scratch persists across passes on a Dask worker: same cache hits as local."""
    pytest.importorskip("distributed")
    from ooc_svm.engine import make_engine

    X, y = _binary(n=300, d=6, seed=4)
    path = build_store(tmp_path / "c.zarr", X, y, shard_rows=80).path
    params = dict(C=3.0, gamma=0.5, working_set=10, seed=7)
    a = train(path, "irwls", **params)
    with make_engine("processes", n_workers=2, threads_per_worker=1) as eng:
        b = train(path, "irwls", engine=eng, **params)
    assert a.summary["cache_hits"] > 0
    assert b.summary["cache_hits"] == a.summary["cache_hits"]
    assert b.iterations == a.iterations
    assert b.dual_objective == pytest.approx(a.dual_objective, rel=1e-12)
