"""The automatic sizes are passed down: the command resolves them from the memory
budget (:func:`ooc_svm.api.claim_memory`) into :class:`ooc_svm.sizes.Sizes`, hands them to
the engine and the solver reads them there; nothing below the command reads the global."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import ooc_svm

PKG = Path(ooc_svm.__file__).parent

#: the modules that may read the process's budget (:func:`ooc_svm.memory_budget.current`,
#: :func:`ooc_svm.sizes.measure`), and why
ALLOWED = {
    "cli.py": "the command line: --memory-mb of one command",
    "api.py": "the command layer: measures the budget and resolves the run's sizes",
    "commands/": "the commands: ingest's and predict's buffers, --json's report",
    "memory_budget.py": "defines the budget",
    "sizes.py": "the one fallback for a solver or engine called without a command",
    "engine/dask_worker.py": "a Dask worker process: its own budget, no command runs there",
}

#: names that read the global: from memory_budget, and sizes' fallback
READS = {"memory_budget": {"current", "claimed"}, "sizes": {"measure"}}


def _allowed(rel: str) -> bool:
    return any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in ALLOWED)


def _reads(tree: ast.AST) -> list[str]:
    """``module.name`` of every read of :data:`READS` in a module: imported by name, or an
    attribute of the module imported whole."""
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = (node.module or "").rsplit(".", 1)[-1]
            for a in node.names:
                if mod in READS and a.name in READS[mod]:
                    found.append(f"{mod}.{a.name} (line {node.lineno})")
                if a.name in READS:  # from . import memory_budget [as mb]
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                last = a.name.rsplit(".", 1)[-1]
                if last in READS:
                    aliases[a.asname or a.name] = last
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            mod = aliases.get(base)
            if mod is not None and node.attr in READS[mod]:
                found.append(f"{mod}.{node.attr} (line {node.lineno})")
    return found


def test_nothing_below_the_command_reads_the_memory_budget():
    """Every module outside :data:`ALLOWED` reads the automatic sizes handed down
    (:func:`ooc_svm.sizes.sizes_of`), never the process's budget itself."""
    bad = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if _allowed(rel):
            continue
        reads = _reads(ast.parse(path.read_text(), str(path)))
        if reads:
            bad[rel] = reads
    assert not bad, f"modules below the command read the memory budget: {bad}"
    for rel in ALLOWED:  # the allow-list names what exists
        assert (PKG / rel).exists(), rel


def test_the_scan_finds_each_kind_of_read():
    src = """
from ..memory_budget import current
from ...sizes import measure as m
from .. import memory_budget as mb
import ooc_svm.sizes
x = mb.current()
y = ooc_svm.sizes.measure()
"""
    assert len(_reads(ast.parse(src))) == 4


def _store(make_store, d=40):
    rng = np.random.default_rng(3)
    X = sp.random(300, d, density=0.3, random_state=3, format="csr", dtype=np.float64)
    y = np.where(X @ rng.normal(size=d) + 0.7 > 0, 1.0, -1.0)
    return make_store(X, y, shard_rows=100)


@pytest.mark.parametrize(
    "solver,params",
    [
        ("perf", {}),  # auto: accelerated on a narrow store
        ("perf", {"variant": "auto", "wide": True}),  # auto: dcd
        ("perf", {"variant": "selective"}),
        ("perf", {"variant": "svmperf"}),
        ("perf", {"variant": "dcd"}),
        ("smo", {}),
    ],
)
def test_a_training_reads_only_the_sizes_the_command_hands_down(
    make_store, monkeypatch, solver, params
):
    """Through :func:`ooc_svm.api.train` the engine and the solver never measure the budget
    themselves (the fallback of a call no command sized): the command's sizes reach them."""
    from ooc_svm import api, sizes
    from ooc_svm.solvers.perf import auto

    params = dict(params)
    if params.pop("wide", False):
        monkeypatch.setattr(auto, "DCD_MIN_FEATURES", 40)
    st = _store(make_store)

    def no_fallback(own_claims=()):
        raise AssertionError("sizes measured below the command")

    monkeypatch.setattr(sizes, "measure", no_fallback)
    res = api.train(st, solver, shard_cache_mb="auto", **params)
    assert res.model is not None
    if solver == "perf" and "variant" not in params:
        assert res.summary["auto"].startswith("accelerated")
    if params.get("variant") == "auto":
        assert res.summary["variant"] == "dcd"


def test_the_room_is_resolved_once_by_the_command(make_store, monkeypatch):
    """perf's auto chooses by the room claim_memory resolved (the same before and after
    perf's own claims), and the engine holds those sizes for the run only."""
    from conftest import fake_memory_budget

    from ooc_svm import api
    from ooc_svm.engine import make_engine
    from ooc_svm.sizes import Sizes
    from ooc_svm.solvers.perf.params import Params

    st = _store(make_store)
    budget = fake_memory_budget(monkeypatch, 2000 * 2**20)
    seen = []
    with make_engine("local") as engine:
        real = engine.use_sizes
        monkeypatch.setattr(engine, "use_sizes", lambda s: (seen.append(s), real(s)))
        api.train(st, "perf", engine=engine)
        assert engine.sizes is None  # the run's sizes end with it
        outer = Sizes.of(budget)  # a run nested in another gives the outer one's back
        engine.use_sizes(outer)
        api.train(st, "perf", engine=engine)
        assert engine.sizes is outer
    handed = [s for s in seen if s is not None and s is not outer]
    assert len(handed) == 2 and isinstance(handed[0], Sizes)
    # the room is the budget less the command's own claims, perf's counted as free
    code_and_shards = 2000 * 2**20 - handed[0].room
    assert 0 < code_and_shards < 2000 * 2**20
    assert budget.claims == {}
    sizes = Sizes.of(budget, Params.OWN_CLAIMS)
    budget.require("perf dense vectors", 2**20)
    assert Sizes.of(budget, Params.OWN_CLAIMS).room == sizes.room
    assert Sizes.of(budget).room == sizes.room - 2**20


@pytest.mark.parametrize("how", ["sweep", "probability"])
def test_sweeps_and_nested_trainings_read_the_sizes_handed_down(make_store, monkeypatch, how):
    """A C sweep's folds and final model, and probability's cross-validation (api.train
    nested in the run, on the same engine), read the sizes the command hands down too."""
    from ooc_svm import api, sizes

    st = _store(make_store)

    def no_fallback(own_claims=()):
        raise AssertionError("sizes measured below the command")

    monkeypatch.setattr(sizes, "measure", no_fallback)
    if how == "sweep":
        out = api.train_sweep(st, "perf", C=[0.1, 1.0], folds=2)
        assert out.result.model is not None
    else:
        res = api.train(st, "perf", probability=True, probability_folds=2)
        assert res.model is not None


def test_a_local_cluster_made_by_the_command_splits_the_commands_budget(monkeypatch):
    """``--scheduler processes`` made by the command: the workers' part of the budget is
    measured by the command's measure, handed to the engine, not by the engine itself."""
    pytest.importorskip("distributed")
    import distributed
    from conftest import fake_memory_budget

    from ooc_svm import api, sizes

    seen: list[dict] = []

    def fake_cluster(**kw):
        seen.append(kw)
        raise RuntimeError("not started in this test")

    def no_fallback(own_claims=()):
        raise AssertionError("sizes measured below the command")

    monkeypatch.setattr(distributed, "LocalCluster", fake_cluster)
    monkeypatch.setattr(sizes, "measure", no_fallback)
    fake_memory_budget(monkeypatch, 1200 * 2**20)
    with pytest.raises(Exception, match="not started in this test"):
        api._make_engine("processes", 0)
    workers = 1200 * 2**20 // seen[0]["memory_limit"] - 1
    assert workers >= 1 and seen[0]["memory_limit"] == 1200 * 2**20 // (workers + 1)
