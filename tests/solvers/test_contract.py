"""The solver contract's conformance suite (:mod:`ooc_svm.solvers.contract`).

Every algorithm of every solver of the registry (the choices of the parameter its spec names
``algorithm``: perf's ``--variant``, smo's ``--selection``, ...) passes every check, on tiny
stores, for what its spec and parameters declare:
its ``Params`` round-trip through flags, TOML and Python; it converges to the reference
optimum of its problem (LIBSVM's C-SVC dual by scikit-learn's LIBSVM, LIBLINEAR's primal by
scikit-learn's LIBLINEAR, both at a tight tolerance, the primal with its certificate's lower
bound below the optimum), also with class weights and with the squared hinge where its
parameters accept them (a refusal names the flag); a run interrupted and resumed ends with
the model of an uninterrupted one (where it declares checkpoints); a warm start reaches the
cold run's optimum (where it declares warm starts); one-vs-rest gives each class the model it
gets alone; one thread and two give the same bits; the local and the Dask engines too
(``cluster``). The
algorithms of LIBLINEAR's problem also train, or refuse in one line, under a small memory
budget on a narrow, a wide and a ``synth --like`` store.

The checks take a spec, not a name: a solver added to the registry gets every check without
an edit here, as the toy solver registered by
:func:`test_a_registered_solver_gets_every_check` shows.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, latest_checkpoint_iteration

from ooc_svm.api import train
from ooc_svm.cli import build_parser
from ooc_svm.commands.train_flags import load_config, solver_params_from_args
from ooc_svm.engine import make_engine
from ooc_svm.model.model import Model
from ooc_svm.solvers import Result, SolverError, binary_classes
from ooc_svm.solvers.contract import (
    Entry,
    SolverSpec,
    get_spec,
    register,
    solver_names,
    solver_specs,
    unregister,
)
from ooc_svm.solvers.params import SolverParams, as_params, flag_name, param
from ooc_svm.store.views import BinaryView

#: the tolerance every solver is run at (its own stopping quantity)
TIGHT = 1e-6
#: relative distance of an objective from the reference optimum
REL = 1e-4
#: the kernel of the "libsvm" problem's checks
GAMMA = 0.5
#: the class weights of the weighted checks (the positive class is 1.0)
WEIGHTS = "pos=3"


# --------------------------------------------------------------------------------------------
# tiny stores and the problems' objectives
# --------------------------------------------------------------------------------------------
def _data(n: int = 60, d: int = 5, classes: int = 2, seed: int = 0):
    """Rows in [-1, 1] with overlapping classes (free and bounded support vectors)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, d)).astype(np.float32)
    score = X @ np.linspace(1.0, -0.5, d) + 0.4 * rng.standard_normal(n)
    if classes == 2:
        y = np.where(score > 0, 1.0, -1.0)
    else:
        y = 1.0 + np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    return X, y


def _store(tmp_path, classes: int = 2):
    X, y = _data(classes=classes)
    name = f"c{classes}.zarr"
    return build_store(tmp_path / name, X, y, shard_rows=20), X, y


def _params(spec: SolverSpec, algorithm: Any = None, **changes: Any) -> SolverParams:
    """The check's parameters: tight tolerance, C = 1, an RBF kernel for the C-SVC dual and a
    regularised bias of 1 for LIBLINEAR's primal (where the solver has these parameters), and
    ``algorithm`` (None: the default) in the spec's algorithm field."""
    names = spec.Params.names()
    given: dict[str, Any] = {"C": 1.0, spec.tolerance: TIGHT}
    if spec.problem == "libsvm" and "kernel" in names:
        given.update(kernel="rbf", gamma=GAMMA)
    if spec.problem == "liblinear" and "bias" in names:
        given["bias"] = 1.0
    if algorithm is not None:
        assert spec.algorithm is not None
        given[spec.algorithm] = algorithm
    given.update(changes)
    return spec.Params.from_mapping(given)


def _costs(p: SolverParams, y: np.ndarray) -> np.ndarray:
    """Each row's C: C times its class's weight (``WEIGHTS`` names the positive class)."""
    C = np.full(len(y), float(p.C))
    if getattr(p, "class_weight", None) is not None:
        assert p.class_weight == WEIGHTS
        C[y == max(y)] *= 3.0
    return C


def _squared(p: SolverParams) -> bool:
    """The loss is the squared hinge (perf's ``--hinge l2``)."""
    return getattr(p, "hinge", "l1") == "l2"


def _rbf(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.exp(-GAMMA * np.maximum(d2, 0.0))


def _objective(spec: SolverSpec, model: Model, X: np.ndarray, y: np.ndarray, p) -> float:
    """The problem's objective at the model, computed here (not the solver's own figure):
    LIBSVM's dual ½αᵀQα − eᵀα from the dual coefficients, or LIBLINEAR's primal (the hinge
    or its square, each row's C weighted by its class)."""
    if spec.problem == "libsvm":
        coef = np.asarray(model.dual_coef_, dtype=np.float64).ravel()
        sv = sp.csr_matrix(model.support_vectors_).toarray().astype(np.float64)
        return float(0.5 * coef @ _rbf(sv, sv) @ coef - np.abs(coef).sum())
    w = np.asarray(model.coef_, dtype=np.float64).ravel()
    b = float(model.intercept_)
    return _primal(w, b, X, y, p, max(model.classes))


def _primal(w, b, X, y, p, pos) -> float:
    yy = np.where(y == pos, 1.0, -1.0)
    loss = np.maximum(0.0, 1.0 - yy * (X.astype(np.float64) @ w + b))
    if _squared(p):
        loss = loss * loss
    return float(0.5 * (w @ w + b * b) + _costs(p, y) @ loss)


def _reference(spec: SolverSpec, X: np.ndarray, y: np.ndarray, p) -> float:
    """The optimum by LIBSVM / LIBLINEAR (scikit-learn) at a tight tolerance."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import SVC, LinearSVC

    weights = {max(y): 3.0} if getattr(p, "class_weight", None) is not None else None
    if spec.problem == "libsvm":
        m = SVC(C=p.C, kernel="rbf", gamma=GAMMA, tol=1e-10, class_weight=weights)
        m.fit(X.astype(np.float64), y)
        coef = m.dual_coef_.ravel()
        sv = m.support_vectors_
        return float(0.5 * coef @ _rbf(sv, sv) @ coef - np.abs(coef).sum())
    # every w is an upper bound of the optimum: the best of LIBLINEAR's runs in three orders
    # (at tol 1e-12 a run may stop early: 27.918 for 27.913 in one order of five, measured)
    best = np.inf
    for seed in range(3):
        m = LinearSVC(
            C=p.C,
            loss="squared_hinge" if _squared(p) else "hinge",
            dual=True,
            tol=1e-12,
            max_iter=10**6,
            intercept_scaling=1.0,
            class_weight=weights,
            random_state=seed,
        )
        with warnings.catch_warnings():  # at tol 1e-12 it stops at max_iter
            warnings.simplefilter("ignore", ConvergenceWarning)
            m.fit(X.astype(np.float64), y)
        w, b = m.coef_.ravel(), float(m.intercept_[0])
        best = min(best, _primal(w, b, X, y, p, m.classes_[1]))
    return best


def _same_model(a: Model, b: Model) -> None:
    """The same arrays to the last bit."""
    for name in ("coef_", "dual_coef_", "support_", "intercept_"):
        va, vb = getattr(a, name), getattr(b, name)
        assert (va is None) == (vb is None), name
        if va is not None:
            np.testing.assert_array_equal(np.asarray(vb), np.asarray(va), err_msg=name)
    if a.support_vectors_ is not None:
        assert (sp.csr_matrix(a.support_vectors_) != sp.csr_matrix(b.support_vectors_)).nnz == 0


# --------------------------------------------------------------------------------------------
# the checks: each takes a spec and a scratch directory
# --------------------------------------------------------------------------------------------
def _argv(spec: SolverSpec, p: SolverParams) -> list[str]:
    """``train`` flags that give exactly ``p``."""
    out = ["train", "s.zarr", "-o", "m", "--solver", spec.name]
    for f in spec.Params.fields():
        v = getattr(p, f.name)
        cli = f.metadata.get("cli")
        if v is None:
            continue
        if cli == "bool":
            out.append(flag_name(f.name) if v else flag_name("no_" + f.name))
        elif cli == "no":
            if v is False:
                out.append(flag_name("no_" + f.name))
        else:
            out += [flag_name(f.name), str(v)]
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def check_params_round_trip(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    p = _params(spec, algorithm, C=0.5, seed=7)
    assert spec.Params.from_mapping(p.to_dict()) == p  # Python
    assert spec.Params(**p.to_dict()) == p
    args = build_parser("train").parse_args(_argv(spec, p))  # flags
    assert solver_params_from_args(args)[0] == p
    conf = tmp / "p.toml"  # TOML, in the solver's table
    lines = [f"{k} = {_toml_value(v)}" for k, v in p.to_dict().items() if v is not None]
    conf.write_text(f"[{spec.name}]\n" + "\n".join(lines) + "\n")
    assert spec.Params.from_mapping(load_config(str(conf), spec.name)) == p
    assert spec.DEFAULTS == spec.Params().to_dict()


def _claimed(spec: SolverSpec, algorithm: Any, flag: str, **changes: Any) -> SolverParams | None:
    """The check's parameters with ``changes``, or None where the parameters refuse them: a
    refusal names the flag (an algorithm that does not claim a feature says so)."""
    try:
        return _params(spec, algorithm, **changes)
    except SolverError as e:
        assert flag in str(e) and "\n" not in str(e), (spec.name, algorithm, str(e))
        return None


def _optimum(spec: SolverSpec, tmp, p: SolverParams) -> None:
    """``p``'s run reaches the reference optimum, by the objective computed here and by the
    solver's own; on LIBLINEAR's problem the lower bound of its certificate (``lower_bound``,
    else the dual objective) is below the optimum and within the tolerance of its primal."""
    store, X, y = _store(tmp)
    res = spec.solve(store, make_engine("local"), p)
    assert res.converged, res.stop_reason
    got, ref = _objective(spec, res.model, X, y, p), _reference(spec, X, y, p)
    label = (spec.name, p.to_dict().get(spec.algorithm or ""))
    assert abs(got - ref) <= REL * abs(ref), (*label, got, ref)
    own = res.dual_objective if spec.problem == "libsvm" else res.objective
    assert own is not None and abs(own - ref) <= REL * abs(ref), (*label, own, ref)
    if spec.problem == "liblinear":
        lower = res.summary.get("lower_bound")
        if lower is None and res.dual_objective is not None:
            lower = -res.dual_objective  # LIBSVM's sign: min ½αᵀQα − eᵀα
        assert lower is not None, label
        assert lower <= ref + 1e-9 * abs(ref), (*label, lower, ref)
        assert own - lower <= REL * abs(ref), (*label, own, lower)


def check_reference_optimum(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    _optimum(spec, tmp, _params(spec, algorithm))


def check_weighted_optimum(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    """Class weights (C·3 for the positive class), where the parameters take them."""
    if not spec.Params.SUPPORTS_CLASS_WEIGHT:
        return
    p = _claimed(spec, algorithm, "--class-weight", class_weight=WEIGHTS)
    if p is not None:
        try:
            _optimum(spec, tmp, p)
        except SolverError as e:  # refused when the run starts (smo --selection platt)
            _refused(spec, algorithm, e, "--class-weight")


def check_squared_hinge_optimum(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    """LIBLINEAR's L2-loss primal (``-s 1``), where the parameters take ``hinge="l2"``."""
    if "hinge" not in spec.Params.names():
        return
    p = _claimed(spec, algorithm, "--hinge", hinge="l2")
    if p is not None:
        try:
            _optimum(spec, tmp, p)
        except SolverError as e:
            _refused(spec, algorithm, e, "--hinge")


def _refused(spec: SolverSpec, algorithm: Any, e: SolverError, feature: str) -> None:
    """An algorithm other than the solver's default may refuse a feature of its spec: in one
    line that names the feature and the algorithm or its flag (perf: ``--variant dcd does not
    save checkpoints``); the default does them all."""
    default = spec.DEFAULTS.get(spec.algorithm or "")
    assert algorithm is not None and algorithm != default, (spec.name, str(e))
    named = str(algorithm) in str(e) or flag_name(spec.algorithm or "") in str(e)
    assert feature in str(e) and named and "\n" not in str(e), str(e)


class _Stop(Exception):
    """Raised by a callback to interrupt a training run."""


def check_resume(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    if not spec.checkpoint:
        return
    store, _, _ = _store(tmp)
    p = _params(spec, algorithm, **spec.checkpoint_often)
    try:
        full = train(store, spec.name, checkpoint=str(tmp / "ck_full"), params=p).model
    except SolverError as e:
        _refused(spec, algorithm, e, "checkpoint")
        return
    seen = []

    def stop(rec: dict) -> None:
        seen.append(rec)
        if len(seen) == 2:
            raise _Stop

    with pytest.raises(_Stop):
        train(store, spec.name, checkpoint=str(tmp / "ck"), callback=stop, params=p)
    assert latest_checkpoint_iteration(tmp / "ck") >= 0, "interrupted before any checkpoint"
    resumed = train(store, spec.name, checkpoint=str(tmp / "ck"), resume=True, params=p)
    _same_model(full, resumed.model)


def check_warm_start(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    if spec.solve_warm is None:
        return
    store, X, y = _store(tmp)
    eng = make_engine("local")
    low = spec.solve(store, eng, _params(spec, algorithm, C=0.5)).model
    p = _params(spec, algorithm, C=2.0)
    cold = spec.solve(store, eng, p)
    warm = spec.solve_warm(store, eng, p, low)
    from_none = spec.solve_warm(store, eng, p, None)
    ref = _objective(spec, cold.model, X, y, p)
    for res in (warm, from_none):
        assert res.converged
        got = _objective(spec, res.model, X, y, p)
        assert abs(got - ref) <= REL * abs(ref), (spec.name, algorithm, got, ref)


def check_one_vs_rest(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    store, X, y = _store(tmp, classes=3)
    p = _params(spec, algorithm)
    try:
        model = train(store, spec.name, params=p).model
    except SolverError as e:
        _refused(spec, algorithm, e, "one-vs-rest")
        return
    assert list(model.classes) == [1.0, 2.0, 3.0]
    scores = model.decision_function(sp.csr_matrix(X))
    eng = make_engine("local")
    for k, c in enumerate(model.classes):
        alone = spec.solve(BinaryView(store, c), eng, p).model
        one = np.asarray(alone.decision_function(sp.csr_matrix(X))).ravel()
        np.testing.assert_allclose(scores[:, k], one, rtol=1e-6, atol=1e-6, err_msg=str(c))


def check_engines_same_bits(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    store, _, _ = _store(tmp)
    p = _params(spec, algorithm)
    local = train(store, spec.name, params=p).model
    dask = train(store, spec.name, scheduler="threads", params=p).model
    _same_model(local, dask)


def check_threads_same_bits(spec: SolverSpec, tmp, algorithm: Any = None) -> None:
    """One thread and two give the same model, to the last bit (every algorithm claims it:
    partial sums are folded in shard order, the schedules depend on counts, not on time)."""
    from ooc_svm.engine import LocalEngine

    store, _, _ = _store(tmp)
    p = _params(spec, algorithm)
    with LocalEngine(n_threads=1, prefetch=0) as one, LocalEngine(n_threads=2) as two:
        a = train(store, spec.name, engine=one, params=p).model
        b = train(store, spec.name, engine=two, params=p).model
    _same_model(a, b)


#: the checks every solver passes without a cluster
CHECKS: dict[str, Callable[..., None]] = {
    "threads": check_threads_same_bits,
    "params": check_params_round_trip,
    "optimum": check_reference_optimum,
    "weighted": check_weighted_optimum,
    "l2": check_squared_hinge_optimum,
    "resume": check_resume,
    "warm": check_warm_start,
    "ovr": check_one_vs_rest,
}


def algorithm_cases() -> list[tuple[str, Any]]:
    """``(solver, algorithm)`` for every algorithm of every solver of the registry (the
    choices of its spec's ``algorithm`` field; ``None`` where it declares none)."""
    return [(s.name, a) for s in solver_specs() for a in s.algorithms or (None,)]


def _case_params(cases: list[tuple[str, Any]]) -> list[Any]:
    return [pytest.param(n, a, id=n if a is None else f"{n}-{a}") for n, a in cases]


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize(("solver", "algorithm"), _case_params(algorithm_cases()))
def test_contract(solver, algorithm, check, tmp_path):
    CHECKS[check](get_spec(solver), tmp_path, algorithm)


@pytest.mark.cluster
@pytest.mark.parametrize(("solver", "algorithm"), _case_params(algorithm_cases()))
def test_local_and_dask_engines_give_the_same_bits(solver, algorithm, tmp_path):
    check_engines_same_bits(get_spec(solver), tmp_path, algorithm)


# --------------------------------------------------------------------------------------------
# a fifth solver: LIBLINEAR's dual coordinate descent in memory, registered for one test
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToyParams(SolverParams):
    """Parameters of the toy solver."""

    SOLVER: ClassVar[str] = "toy"

    eps: float = param(1e-3, "stop when max - min projected gradient <= eps", gt=0)
    bias: float = param(1.0, "constant feature, regularised like the weights", ge=0)


def toy_solve(store, engine, params, *, callback=None, checkpoint=None) -> Result:
    """LIBLINEAR's dual coordinate descent for the L1-loss SVM (Hsieh et al. 2008) on the
    whole store in memory: the toy of the registry test."""
    t0 = time.perf_counter()
    p = as_params(ToyParams, params)
    neg, pos = binary_classes(store.meta)
    shards = [store.read_shard(i) for i in range(store.n_shards)]
    d = store.meta.n_features
    X = sp.vstack(
        [sp.csr_matrix((s.data, s.indices, s.indptr), shape=(len(s.y), d)) for s in shards]
    ).toarray()
    yy = np.where(np.concatenate([s.y for s in shards]) == pos, 1.0, -1.0)
    Xb = np.hstack([X, np.full((X.shape[0], 1), p.bias)]).astype(np.float64)
    alpha, w = np.zeros(len(yy)), np.zeros(d + 1)
    qii = (Xb * Xb).sum(1)
    rng = np.random.default_rng(p.seed)
    it, gap = 0, np.inf
    while it < p.max_iter and gap > p.eps:
        hi, lo = -np.inf, np.inf
        for i in rng.permutation(len(yy)):
            g = yy[i] * (Xb[i] @ w) - 1.0
            pg = g if 0 < alpha[i] < p.C else (min(g, 0.0) if alpha[i] == 0 else max(g, 0.0))
            hi, lo = max(hi, pg), min(lo, pg)
            if pg != 0.0 and qii[i] > 0:
                old = alpha[i]
                alpha[i] = min(max(old - g / qii[i], 0.0), p.C)
                w += (alpha[i] - old) * yy[i] * Xb[i]
        it, gap = it + 1, hi - lo
        if callback is not None:
            callback({"iteration": it, "violation": gap})
    hinge = np.maximum(0.0, 1.0 - yy * (Xb @ w)).sum()
    model = Model(
        kind="linear",
        n_features=d,
        classes=[neg, pos],
        coef_=w[:d].copy(),
        intercept_=float(w[d] * p.bias),
        info={"solver": "toy", "C": p.C},
    )
    primal = float(0.5 * w @ w + p.C * hinge)
    dual = float(0.5 * w @ w - alpha.sum())  # LIBSVM's sign (Result.dual_objective)
    return Result(model, primal, dual, it, 1, time.perf_counter() - t0, float(gap))


TOY = SolverSpec(
    name="toy",
    Params=ToyParams,
    stopping_rule="max - min projected gradient <= eps (LIBLINEAR)",
    problem="liblinear",
    tolerance="eps",
    primal_objective=True,
    solve=Entry(__name__, "toy_solve"),
)


@pytest.fixture
def toy_registered():
    register(TOY)
    yield TOY
    unregister(TOY.name)


def test_a_registered_solver_gets_every_check(toy_registered, tmp_path):
    """The toy is a solver like the others once registered: ``train`` and its flags know it,
    and every check of the suite runs on it through the registry."""
    assert solver_names()[-1] == "toy"
    for name, check in CHECKS.items():
        (tmp_path / name).mkdir()
        check(get_spec("toy"), tmp_path / name)


def test_the_suite_is_parametrised_by_the_registry():
    """Every solver, and every choice of its algorithm field (perf's variants read from
    ``--variant``'s choices, not listed here)."""
    marks = [m for m in test_contract.pytestmark if m.args[0] == ("solver", "algorithm")]
    cases = [tuple(p.values) for p in marks[0].args[1]]
    assert cases == algorithm_cases()
    assert [n for n, _ in cases if n == "perf"] and {n for n, _ in cases} == set(solver_names())
    perf = get_spec("perf")
    assert (
        perf.algorithms
        == perf.Params.fields()[perf.Params.names().index("variant")].metadata["choices"]
    )
    assert {a for n, a in cases if n == "perf"} == set(perf.algorithms)


def test_a_solver_that_fails_to_import_is_reported_with_its_reason(monkeypatch):
    from ooc_svm.solvers import contract

    names = solver_names()
    missing = "ooc_svm.solvers.not_built"
    monkeypatch.setattr(contract, "SOLVER_PACKAGES", (*contract.SOLVER_PACKAGES, missing))
    monkeypatch.setattr(contract, "_BUILTIN", None)
    monkeypatch.setattr(contract, "_FAILED", {})
    assert solver_names() == names  # the others stay
    reason = contract.unavailable_solvers()[missing]
    assert reason.startswith("ModuleNotFoundError") and "not_built" in reason
    with pytest.raises(SolverError, match="not_built is not available .ModuleNotFoundError"):
        get_spec("not_built")


# --------------------------------------------------------------------------------------------
# every algorithm of LIBLINEAR's problem under a small memory budget
# --------------------------------------------------------------------------------------------
#: the small budget: MiB for the run's data beyond the code (as ``--memory-mb`` would leave)
SMALL_BUDGET_MB = 48


@pytest.fixture(scope="module")
def budget_stores(tmp_path_factory):
    """A narrow store, a wide one (3M columns, beyond ``REMAP_MIN_DIM``: a dense w is 24 MB)
    and a ``synth --like kdd2010`` one with few rows (29.9M columns)."""
    from ooc_svm.cli import main

    root = tmp_path_factory.mktemp("budget")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((400, 10))
    y = np.where(X[:, 0] + 0.5 * rng.standard_normal(400) > 0, 1.0, -1.0)
    build_store(root / "narrow.zarr", X, y, shard_rows=100)
    n, d, k = 300, 3_000_000, 8
    cols = rng.integers(0, d, size=(n, k))
    W = sp.csr_matrix((rng.uniform(0.1, 1.0, n * k), cols.ravel(), np.arange(0, n * k + 1, k)))
    W = sp.csr_matrix(W, shape=(n, d))
    yw = np.where(np.asarray(W[:, cols[0]].sum(1)).ravel() + rng.standard_normal(n) > 0.3, 1, -1)
    build_store(root / "wide.zarr", W, yw.astype(np.float64), shard_rows=100, n_features=d)
    like = root / "like.zarr"
    argv = ["synth", str(like), "--like", "kdd2010", "--rows", "300", "--seed", "1", "-q"]
    assert main([*argv, "--shard-rows", "100"]) == 0
    return {name: root / f"{name}.zarr" for name in ("narrow", "wide", "like")}


@pytest.fixture
def small_budget(monkeypatch):
    """Every budget measured in this test is :data:`SMALL_BUDGET_MB` (``train`` measures it
    afresh): the budget API of tests/test_memory_budget.py, for the CLI."""
    from ooc_svm import memory_budget as mb

    nbytes = SMALL_BUDGET_MB * 2**20

    def detect(explicit_mb=None, **kw):
        lim = mb.Limit("--memory-mb", nbytes, 0, "test")
        return mb.MemoryBudget((lim,), lim, nbytes, rss=int(mb.CODE_MB * 2**20))

    monkeypatch.setattr(mb, "detect", detect)
    mb.reset()
    yield
    mb.reset()


_LIBLINEAR_CASES = [(n, a) for n, a in algorithm_cases() if get_spec(n).problem == "liblinear"]


@pytest.mark.parametrize("store", ["narrow", "wide", "like"])
@pytest.mark.parametrize(("solver", "algorithm"), _case_params(_LIBLINEAR_CASES))
def test_a_small_memory_budget_trains_or_refuses_in_one_line(
    solver, algorithm, store, budget_stores, small_budget, tmp_path, capsys
):
    """``train`` under a small budget either converges within it or refuses in one line
    (``ooc-svm: error: ...``, no traceback), for every algorithm of LIBLINEAR's problem on a
    narrow, a wide and a ``synth --like`` store. Measured at 48 MiB: every variant trains the
    narrow store; on the wide one auto and dcd train (over the 2,400 columns held) and the
    cutting-plane variants are refused by their floor of dense vectors over every column;
    on the kdd2010-shaped one all are refused (dcd's int32 column map alone is 78 MiB)."""
    from ooc_svm.cli import main

    spec = get_spec(solver)
    argv = ["train", str(budget_stores[store]), "-o", str(tmp_path / "m"), "--solver", solver]
    if algorithm is not None:
        argv += [flag_name(spec.algorithm or ""), str(algorithm)]
    rc = main([*argv, "--C", "1", "--json", "-q"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert rc == 0 or store != "narrow", err  # 400 rows of 10 columns fit any algorithm
    if rc == 0:
        summary = json.loads(out)
        assert summary["converged"], summary
        assert (tmp_path / "m").exists()
    else:
        lines = err.strip().splitlines()
        assert rc == 1 and len(lines) == 1 and lines[0].startswith("ooc-svm: error: "), err
        assert not (tmp_path / "m").exists()
