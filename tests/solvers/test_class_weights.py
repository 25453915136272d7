"""Class weights for perf, active-set and irwls.

``--class-weight`` multiplies C per class (LIBLINEAR / LIBSVM ``-wi``): the problem is
``½‖w‖² + Σᵢ C_{y_i} ξᵢ``. Conventions and references: ``tests/reference_weights.py``.

- perf (``--loss error``): the weighted 1-slack cut; compared with ``dcd_reference`` (dual
  coordinate descent without LIBLINEAR's iteration cap; its optima on the subsets are cached
  below and re-derived by a slow test) to perf's guarantee P − P* ≤ ε·C·n, and bracketed by
  liblinear-official ``-s 3 -wi -B 1`` (LIBLINEAR dual ≤ our primal, our lower bound ≤
  LIBLINEAR primal). ``--loss roc``: every pair weighs w₊·w₋ (C rescaled).
- active-set, irwls: per-row box bounds 0 ≤ αᵢ ≤ C_{y_i}; dual objective against
  libsvm-official ``-s 0 -wi`` (free bias).

w8a (3 % positive) with ``balanced`` weights and a9a with ``pos=5``, on random row subsets
(non-slow) and in full (slow).
"""

from __future__ import annotations

import functools
import json
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, dataset, ooc_cmd
from reference_weights import (
    balanced_weights,
    class_costs,
    dcd_reference,
    liblinear_reference,
    libsvm_reference,
    primal_objective,
    signed_labels,
)

from ooc_svm.engine import LocalEngine
from ooc_svm.solvers import SolverError, active_set, available_solvers, irwls, perf

pytest.importorskip("liblinear")
pytest.importorskip("libsvm")
load_svmlight_file = pytest.importorskip("sklearn.datasets").load_svmlight_file

#: name -> (file, n_features, --class-weight, reference weights by label (None: balanced))
WEIGHTED = {
    "w8a-balanced": ("w8a/w8a.bz2", 300, "balanced", None),
    "a9a-pos5": ("a9a/a9a", 123, "pos=5", {1.0: 5.0}),
}

#: dcd_reference optima (C = 1, bias feature 1, eps 1e-6) of the weighted problems on the
#: row subsets of :func:`_subset`: (primal, dual); test_cached_optima re-derives them (slow)
PERF_OPT = {
    ("w8a-balanced", 1000): (92.199484, 92.199469),
    ("w8a-balanced", 3000): (467.454640, 467.454537),
    ("a9a-pos5", 1000): (629.449626, 629.449606),
    ("a9a-pos5", 3000): (2057.731460, 2057.731419),
}


@functools.cache
def _full(name):
    rel, nf, _, _ = WEIGHTED[name]
    X, y = load_svmlight_file(str(dataset(rel)), n_features=nf, zero_based=False)
    return sp.csr_matrix(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _subset(name, n: int | None, seed: int = 0):
    """``n`` rows drawn without replacement (seeded, in file order); all rows for None."""
    X, y = _full(name)
    if n is None:
        return X, y
    rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], n, replace=False))
    return X[rows], y[rows]


def _weights(name, y):
    w = WEIGHTED[name][3]
    return balanced_weights(y) if w is None else w


@functools.cache
def _store(tmp_root, name, n, shard_rows):
    X, y = _subset(name, n)
    return build_store(f"{tmp_root}/{name}-{n}-{shard_rows}.zarr", X, y, shard_rows=shard_rows)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cw"))


def _engine():
    return LocalEngine(n_threads=2)


# --------------------------------------------------------------------------------------------
# perf, --loss error
# --------------------------------------------------------------------------------------------
def _check_perf(res, name, n, X, y, opt, ll=None, eps=1e-3):
    """perf's weighted objective against the reference ``opt`` and LIBLINEAR ``ll``."""
    weights = _weights(name, y)
    costs = class_costs(y, 1.0, weights)
    ypm = signed_labels(y)
    m = res.model
    bw = m.intercept_ / 1.0  # bias feature value 1
    p_model = primal_objective(X, ypm, m.coef_, m.intercept_, costs) + 0.5 * bw * bw
    # opt = (a primal value ≥ P*, a dual value ≤ P*) of the reference
    p_ref, d_ref = opt
    # Theorem: P(w) ≤ P* + C·n·ε (checked against the dual value: sufficient), and no
    # point is below the optimum, no lower bound above it
    assert p_model - d_ref <= eps * 1.0 * n, (p_model, d_ref)
    assert res.objective == pytest.approx(p_model, rel=1e-9)  # reported = weighted primal
    assert res.objective >= d_ref - 1e-6 * d_ref
    lb = res.summary["lower_bound"]
    assert lb is not None and lb <= p_ref + 1e-6 * p_ref
    # the costs perf used are C times the reference weights
    assert res.summary["class_costs"] == pytest.approx(
        [weights.get(-1.0, 1.0), weights.get(1.0, 1.0)], rel=1e-12
    )
    if ll is not None:  # bracket by LIBLINEAR (it may stop at its iteration cap)
        assert ll["dual"] <= res.objective + 1e-6
        assert lb <= ll["primal"] + 1e-9


@pytest.mark.parametrize(
    "name,n,variant",
    [
        ("w8a-balanced", 3000, "accelerated"),
        ("a9a-pos5", 3000, "accelerated"),
        ("w8a-balanced", 1000, "paper"),
        ("a9a-pos5", 1000, "paper"),
    ],
)
def test_perf_error_weighted(root, name, n, variant):
    X, y = _subset(name, n)
    st = _store(root, name, n, 700)
    spec = WEIGHTED[name][2]
    res = perf.solve(st, _engine(), dict(C=1.0, class_weight=spec, bias=1.0, variant=variant))
    assert res.summary["converged"]
    ll = liblinear_reference(X, y, 1.0, _weights(name, y), bias=1.0)
    _check_perf(res, name, n, X, y, PERF_OPT[(name, n)], ll)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(PERF_OPT))
def test_cached_optima(key):
    """The cached optima are dcd_reference's (to its 1e-6 violation)."""
    name, n = key
    X, y = _subset(name, n)
    ref = dcd_reference(X, y, 1.0, _weights(name, y), bias=1.0, eps=1e-6)
    assert ref["primal"] == pytest.approx(PERF_OPT[key][0], abs=2e-6)
    assert ref["dual"] == pytest.approx(PERF_OPT[key][1], abs=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WEIGHTED))
@pytest.mark.parametrize("variant", ["accelerated", "paper"])
def test_perf_error_weighted_full(root, name, variant):
    """Full w8a (balanced) and a9a (pos=5) against dcd_reference (violation 1e-3: its dual
    is within far less than ε·C·n of the optimum) and LIBLINEAR."""
    X, y = _subset(name, None)
    st = _store(root, name, None, 5000)
    spec = WEIGHTED[name][2]
    res = perf.solve(st, _engine(), dict(C=1.0, class_weight=spec, bias=1.0, variant=variant))
    assert res.summary["converged"]
    ref = _dcd_full(name)
    ll = liblinear_reference(X, y, 1.0, _weights(name, y), bias=1.0)
    _check_perf(res, name, X.shape[0], X, y, (ref["primal"], ref["dual"]), ll)


@functools.cache
def _dcd_full(name):
    X, y = _subset(name, None)
    return dcd_reference(X, y, 1.0, _weights(name, y), bias=1.0, eps=1e-3)


def test_perf_weighted_refusals(root):
    st = _store(root, "a9a-pos5", 1000, 700)
    with pytest.raises(SolverError, match="--variant selective"):
        perf.solve(st, _engine(), dict(class_weight="pos=2", variant="selective"))
    with pytest.raises(SolverError, match="not a class"):
        perf.solve(st, _engine(), dict(class_weight="7=2"))


def test_perf_one_vs_rest_class_weight(tmp_path):
    """One-vs-rest perf (all classes in shared passes): class c's weight multiplies C on its
    own rows in its subproblem, as LIBLINEAR's -wi; ``balanced`` is computed per subproblem."""
    from ooc_svm.api import train
    from ooc_svm.store.views import BinaryView

    rng = np.random.default_rng(4)
    X = sp.random(450, 10, density=0.5, format="csr", random_state=4, dtype=np.float32)
    y = np.argmax(X @ rng.normal(size=(10, 3)) + 0.3 * rng.normal(size=(450, 3)), axis=1) + 1.0
    st = build_store(tmp_path / "mc.zarr", X, y, shard_rows=150, label_kind="multiclass")
    plain = train(st, "perf", C=1.0).summary["per_class_objective"]
    for spec, per_class in (("2=5", {2.0: "pos=5"}), ("balanced", None)):
        res = train(st, "perf", C=1.0, class_weight=spec)
        assert res.summary["shared_passes"]
        objs = res.summary["per_class_objective"]
        if per_class is not None:  # only class 2's subproblem changes
            assert objs[0] == plain[0] and objs[2] == plain[2] and objs[1] > plain[1]
        for k, c in enumerate((1.0, 2.0, 3.0)):
            sub = "balanced" if per_class is None else per_class.get(c)
            one = perf.solve(BinaryView(st, c), _engine(), dict(C=1.0, class_weight=sub))
            assert res.summary["per_class_objective"][k] == one.objective, (spec, c)
            np.testing.assert_array_equal(res.model.coef_[k], one.model.coef_)


# --------------------------------------------------------------------------------------------
# perf, --loss roc: one weight per pair, w₊·w₋
# --------------------------------------------------------------------------------------------
def test_perf_roc_pair_weight(tmp_path):
    """Every (positive, negative) pair weighs w₊·w₋: the model is the unweighted one at
    C·w₊·w₋ (bit for bit); the objective is reported with the weighted pairs."""
    rng = np.random.default_rng(5)
    X = sp.random(200, 10, density=0.4, format="csr", random_state=5, dtype=np.float32)
    y = np.where(X @ rng.normal(size=10) + 0.5 * rng.normal(size=200) > 0.2, 1.0, -1.0)
    st = build_store(tmp_path / "r.zarr", X, y, shard_rows=100)
    kw = dict(loss="roc", eps=1e-2)
    res = perf.solve(st, _engine(), dict(kw, C=0.125, class_weight="pos=3,neg=2"))
    ref = perf.solve(st, _engine(), dict(kw, C=0.75))
    assert res.model.info["pair_weight"] == 6.0
    assert res.model.info["C"] == 0.125 and 0.125 * 6.0 == 0.75
    np.testing.assert_array_equal(res.model.coef_, ref.model.coef_)
    assert res.objective == ref.objective
    plain = perf.solve(st, _engine(), dict(kw, C=0.125))
    assert not np.array_equal(plain.model.coef_, res.model.coef_)
    with pytest.raises(SolverError, match="ordinal"):
        yr = np.where(y > 0, 2.0, rng.choice([0.0, 1.0], 200))
        st3 = build_store(tmp_path / "o.zarr", X, yr, shard_rows=100, label_kind="ordinal")
        perf.solve(st3, _engine(), dict(loss="ordinal", class_weight="pos=2"))


# --------------------------------------------------------------------------------------------
# active-set and irwls: per-row box bounds, against libsvm-official -wi
# --------------------------------------------------------------------------------------------
@functools.cache
def _libsvm(name, n, kernel, gamma):
    X, y = _subset(name, n)
    return libsvm_reference(X, y, 1.0, _weights(name, y), kernel=kernel, gamma=gamma, eps=1e-6)


DUAL = {"active-set": active_set, "irwls": irwls}


def _check_dual(res, ref, name, y, rel_tol):
    weights = _weights(name, y)
    assert res.summary["class_costs"] == pytest.approx(
        [weights.get(-1.0, 1.0), weights.get(1.0, 1.0)], rel=1e-12
    )
    assert res.converged and res.summary["kkt_ok"]
    # our dual_objective has LIBSVM's sign (½αᵀQα − Σα); the reference's is Σα − ½αᵀQα
    rel = abs(-res.dual_objective - ref["dual"]) / abs(ref["dual"])
    assert rel <= rel_tol, (res.dual_objective, ref["dual"], rel)
    assert res.objective == pytest.approx(ref["primal"], rel=10 * rel_tol + 1e-6)


@pytest.mark.parametrize("solver", list(DUAL))
@pytest.mark.parametrize(
    "name,n,kernel",
    [("w8a-balanced", 1000, "linear"), ("a9a-pos5", 1000, "linear"), ("a9a-pos5", 400, "rbf")],
)
def test_dual_weighted_vs_libsvm(root, solver, name, n, kernel):
    _, y = _subset(name, n)
    gamma = 0.05 if kernel == "rbf" else None
    ref = _libsvm(name, n, kernel, gamma)
    st = _store(root, name, n, 300)
    kw = dict(C=1.0, class_weight=WEIGHTED[name][2], kernel=kernel, tol=1e-4)
    if gamma is not None:
        kw["gamma"] = gamma
    res = DUAL[solver].solve(st, _engine(), kw)
    _check_dual(res, ref, name, y, 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("solver", list(DUAL))
@pytest.mark.parametrize("name", list(WEIGHTED))
def test_dual_weighted_vs_libsvm_bigger(root, solver, name):
    n = 8000
    _, y = _subset(name, n)
    ref = _libsvm(name, n, "linear", None)
    st = _store(root, name, n, 2000)
    res = DUAL[solver].solve(
        st, _engine(), dict(C=1.0, class_weight=WEIGHTED[name][2], kernel="linear", tol=1e-4)
    )
    _check_dual(res, ref, name, y, 1e-6)


# --------------------------------------------------------------------------------------------
# command line and Dask
# --------------------------------------------------------------------------------------------
def _cli_store(tmp_path):
    rng = np.random.default_rng(2)
    X = sp.random(300, 15, density=0.4, format="csr", random_state=2, dtype=np.float32)
    y = np.where(X @ rng.normal(size=15) + 0.3 * rng.normal(size=300) > 0.4, 1.0, -1.0)
    build_store(tmp_path / "s.zarr", X, y, shard_rows=100)


def _cli_train(tmp_path, solver, spec):
    extra = [] if solver == "perf" else ["--kernel", "linear"]
    run = subprocess.run(
        ooc_cmd("train", "--solver", solver, "s.zarr", "-o", f"{solver}.model",
                "--class-weight", spec, "--json", *extra),
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, (solver, run.stderr)
    rec = json.loads(run.stdout)
    assert rec["solver"] == solver and rec["objective"] > 0, rec
    return rec


def test_cli_class_weight(tmp_path):
    """``train --help`` says --class-weight is for every solver; a CLI run uses it
    (relative paths, in a temporary directory)."""
    _cli_store(tmp_path)
    out = subprocess.run(
        ooc_cmd("train", "--help"), capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "--class-weight" in text and "every solver (perf: --loss error and roc)" in text
    _cli_train(tmp_path, "irwls", "balanced")


@pytest.mark.slow
def test_cli_class_weight_every_solver(tmp_path):
    """Every solver trains with --class-weight from the command line."""
    _cli_store(tmp_path)
    for solver in available_solvers():
        _cli_train(tmp_path, solver, "pos=4")


@pytest.mark.slow
@pytest.mark.cluster
def test_dask_weighted_bit_identical(tmp_path):
    """The local engine and a 2-process Dask cluster give bit-identical weighted models."""
    from ooc_svm.engine import make_engine

    rng = np.random.default_rng(4)
    X = sp.random(600, 25, density=0.3, format="csr", random_state=4, dtype=np.float32)
    y = np.where(X @ rng.normal(size=25) + 0.4 * rng.normal(size=600) > 0.8, 1.0, -1.0)
    st = build_store(tmp_path / "d.zarr", X, y, shard_rows=150)
    runs = {
        "perf": (perf, dict(C=1.0, class_weight="balanced")),
        "active-set": (active_set, dict(C=1.0, class_weight="balanced", kernel="rbf", gamma=0.1)),
        "irwls": (irwls, dict(C=1.0, class_weight="pos=3", kernel="linear", working_set=60)),
    }
    local = {k: mod.solve(st, _engine(), kw) for k, (mod, kw) in runs.items()}
    eng = make_engine("processes", n_workers=2, threads_per_worker=1)
    try:
        dask = {k: mod.solve(st, eng, kw) for k, (mod, kw) in runs.items()}
    finally:
        eng.close()
    for k in runs:
        a, b = local[k].model, dask[k].model
        assert a.info.get("class_costs") is not None or k == "perf", k
        for attr in ("coef_", "dual_coef_", "intercept_"):
            va, vb = getattr(a, attr), getattr(b, attr)
            if va is None:
                assert vb is None
                continue
            np.testing.assert_array_equal(np.asarray(va), np.asarray(vb), err_msg=f"{k} {attr}")
        assert local[k].objective == dask[k].objective, k


@pytest.mark.slow
def test_readme_class_weights_block(tmp_path):
    """The README's "Class weights" block runs as written in an empty directory."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("## Class weights")
    block = re.compile(r"```sh\n(.*?)```", re.S).search(text, start)
    assert block is not None
    cmds = [c for c in (ln.split("  #")[0].strip() for ln in block.group(1).splitlines()) if c]
    assert len(cmds) >= 8 and all(c.startswith("ooc-svm ") for c in cmds)
    out = {}
    for cmd in cmds:
        args = cmd.split()[1:]
        r = subprocess.run(
            ooc_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=900
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
        out[cmd] = r.stdout
    ev = [json.loads(v) for k, v in out.items() if k.startswith("ooc-svm evaluate")]
    assert ev[1]["recall"] > ev[0]["recall"]  # balanced weights find more of the rare class
