"""The solver contract's conformance suite (:mod:`ooc_svm.solvers.contract`).

Every solver of the registry passes every check, on tiny stores, for what its spec declares:
its ``Params`` round-trip through flags, TOML and Python; it converges to the reference
optimum of its problem (LIBSVM's C-SVC dual by scikit-learn's LIBSVM, LIBLINEAR's primal by
scikit-learn's LIBLINEAR, both at a tight tolerance); a run interrupted and resumed ends with
the model of an uninterrupted one (where it declares checkpoints); a warm start reaches the
cold run's optimum (where it declares warm starts); one-vs-rest gives each class the model it
gets alone; the local and the Dask engines give the same bits (``cluster``).

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
from ooc_svm.solvers import Result, binary_classes
from ooc_svm.solvers.contract import (
    Entry,
    SolverSpec,
    get_spec,
    register,
    solver_names,
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


def _params(spec: SolverSpec, **changes: Any) -> SolverParams:
    """The check's parameters: tight tolerance, C = 1, an RBF kernel for the C-SVC dual and a
    regularised bias of 1 for LIBLINEAR's primal (where the solver has these parameters)."""
    names = spec.Params.names()
    given: dict[str, Any] = {"C": 1.0, spec.tolerance: TIGHT}
    if spec.problem == "libsvm" and "kernel" in names:
        given.update(kernel="rbf", gamma=GAMMA)
    if spec.problem == "liblinear" and "bias" in names:
        given["bias"] = 1.0
    given.update(changes)
    return spec.Params.from_mapping(given)


def _rbf(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.exp(-GAMMA * np.maximum(d2, 0.0))


def _objective(spec: SolverSpec, model: Model, X: np.ndarray, y: np.ndarray, C: float) -> float:
    """The problem's objective at the model, computed here (not the solver's own figure):
    LIBSVM's dual ½αᵀQα − eᵀα from the dual coefficients, or LIBLINEAR's primal."""
    if spec.problem == "libsvm":
        coef = np.asarray(model.dual_coef_, dtype=np.float64).ravel()
        sv = sp.csr_matrix(model.support_vectors_).toarray().astype(np.float64)
        return float(0.5 * coef @ _rbf(sv, sv) @ coef - np.abs(coef).sum())
    w = np.asarray(model.coef_, dtype=np.float64).ravel()
    b = float(model.intercept_)
    pos = max(model.classes)
    yy = np.where(y == pos, 1.0, -1.0)
    hinge = np.maximum(0.0, 1.0 - yy * (X.astype(np.float64) @ w + b)).sum()
    return float(0.5 * (w @ w + b * b) + C * hinge)


def _reference(spec: SolverSpec, X: np.ndarray, y: np.ndarray, C: float) -> float:
    """The optimum by LIBSVM / LIBLINEAR (scikit-learn) at a tight tolerance."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import SVC, LinearSVC

    if spec.problem == "libsvm":
        m = SVC(C=C, kernel="rbf", gamma=GAMMA, tol=1e-10).fit(X.astype(np.float64), y)
        coef = m.dual_coef_.ravel()
        sv = m.support_vectors_
        return float(0.5 * coef @ _rbf(sv, sv) @ coef - np.abs(coef).sum())
    m = LinearSVC(C=C, loss="hinge", dual=True, tol=1e-12, max_iter=10**7, intercept_scaling=1.0)
    with warnings.catch_warnings():  # at tol 1e-12 it stops at max_iter, a hair from the optimum
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X.astype(np.float64), y)
    w, b = m.coef_.ravel(), float(m.intercept_[0])
    yy = np.where(y == m.classes_[1], 1.0, -1.0)
    hinge = np.maximum(0.0, 1.0 - yy * (X @ w + b)).sum()
    return float(0.5 * (w @ w + b * b) + C * hinge)


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


def check_params_round_trip(spec: SolverSpec, tmp) -> None:
    p = _params(spec, C=0.5, seed=7)
    assert spec.Params.from_mapping(p.to_dict()) == p  # Python
    assert spec.Params(**p.to_dict()) == p
    args = build_parser("train").parse_args(_argv(spec, p))  # flags
    assert solver_params_from_args(args)[0] == p
    conf = tmp / "p.toml"  # TOML, in the solver's table
    lines = [f"{k} = {_toml_value(v)}" for k, v in p.to_dict().items() if v is not None]
    conf.write_text(f"[{spec.name}]\n" + "\n".join(lines) + "\n")
    assert spec.Params.from_mapping(load_config(str(conf), spec.name)) == p
    assert spec.DEFAULTS == spec.Params().to_dict()


def check_reference_optimum(spec: SolverSpec, tmp) -> None:
    store, X, y = _store(tmp)
    p = _params(spec)
    res = spec.solve(store, make_engine("local"), p)
    assert res.converged, res.stop_reason
    got, ref = _objective(spec, res.model, X, y, p.C), _reference(spec, X, y, p.C)
    assert abs(got - ref) <= REL * abs(ref), (spec.name, got, ref)
    own = res.dual_objective if spec.problem == "libsvm" else res.objective
    assert own is not None and abs(own - ref) <= REL * abs(ref), (spec.name, own, ref)


class _Stop(Exception):
    """Raised by a callback to interrupt a training run."""


def check_resume(spec: SolverSpec, tmp) -> None:
    if not spec.checkpoint:
        return
    store, _, _ = _store(tmp)
    p = _params(spec, **spec.checkpoint_often)
    full = train(store, spec.name, checkpoint=str(tmp / "ck_full"), params=p).model
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


def check_warm_start(spec: SolverSpec, tmp) -> None:
    if spec.solve_warm is None:
        return
    store, X, y = _store(tmp)
    eng = make_engine("local")
    low = spec.solve(store, eng, _params(spec, C=0.5)).model
    p = _params(spec, C=2.0)
    cold = spec.solve(store, eng, p)
    warm = spec.solve_warm(store, eng, p, low)
    from_none = spec.solve_warm(store, eng, p, None)
    ref = _objective(spec, cold.model, X, y, 2.0)
    for res in (warm, from_none):
        assert res.converged
        got = _objective(spec, res.model, X, y, 2.0)
        assert abs(got - ref) <= REL * abs(ref), (spec.name, got, ref)


def check_one_vs_rest(spec: SolverSpec, tmp) -> None:
    store, X, y = _store(tmp, classes=3)
    p = _params(spec)
    model = train(store, spec.name, params=p).model
    assert list(model.classes) == [1.0, 2.0, 3.0]
    scores = model.decision_function(sp.csr_matrix(X))
    eng = make_engine("local")
    for k, c in enumerate(model.classes):
        alone = spec.solve(BinaryView(store, c), eng, p).model
        one = np.asarray(alone.decision_function(sp.csr_matrix(X))).ravel()
        np.testing.assert_allclose(scores[:, k], one, rtol=1e-6, atol=1e-6, err_msg=str(c))


def check_engines_same_bits(spec: SolverSpec, tmp) -> None:
    store, _, _ = _store(tmp)
    p = _params(spec)
    local = train(store, spec.name, params=p).model
    dask = train(store, spec.name, scheduler="threads", params=p).model
    _same_model(local, dask)


#: the checks every solver passes without a cluster
CHECKS: dict[str, Callable[[SolverSpec, Any], None]] = {
    "params": check_params_round_trip,
    "optimum": check_reference_optimum,
    "resume": check_resume,
    "warm": check_warm_start,
    "ovr": check_one_vs_rest,
}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("solver", solver_names())
def test_contract(solver, check, tmp_path):
    CHECKS[check](get_spec(solver), tmp_path)


@pytest.mark.cluster
@pytest.mark.parametrize("solver", solver_names())
def test_local_and_dask_engines_give_the_same_bits(solver, tmp_path):
    check_engines_same_bits(get_spec(solver), tmp_path)


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
    dual = float(alpha.sum() - 0.5 * w @ w)
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
    marks = [m for m in test_contract.pytestmark if m.args[0] == "solver"]
    assert list(marks[0].args[1]) == solver_names()


def test_a_solver_that_fails_to_import_is_reported_with_its_reason(monkeypatch):
    from ooc_svm.solvers import SolverError, contract

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
