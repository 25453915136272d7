"""perf's table of algorithms (``ooc_svm/solvers/perf/algorithms.py``).

Every ``--variant`` is one row with an entry point and the parameters it reads; a parameter
set away from its default that the row does not read is refused in one line (the Python API
and the command line alike); no variant name is compared outside the table.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ooc_cmd

from ooc_svm.api import train
from ooc_svm.commands.train_flags import load_config
from ooc_svm.solvers import SolverError, perf
from ooc_svm.solvers.perf.algorithms import ALGORITHMS, COMMON, check_parameter, resolved
from ooc_svm.solvers.perf.params import Params

ROOT = Path(__file__).resolve().parents[2]
TABLE_MODULE = ROOT / "ooc_svm" / "solvers" / "perf" / "algorithms.py"


def test_every_row_has_an_entry_point_and_reads():
    assert perf.VARIANTS == tuple(ALGORITHMS) == perf.SPEC.algorithms
    names = set(Params.names())
    for name, row in ALGORITHMS.items():
        assert row.name == name
        assert callable(row.entry.resolve()), name
        assert row.reads and row.reads <= names, (name, row.reads - names)
        assert COMMON <= row.reads, name
        assert row.losses and set(row.losses) <= set(perf.LOSSES), name
        assert row.stop in ("gap", "violation") and row.wide in ("features", "columns", "deferred")
        assert not row.fused_as or row.fused_as in ALGORITHMS
    # every parameter is read by some row, and the spec's capabilities are the rows' union
    assert set().union(*(r.reads for r in ALGORITHMS.values())) == names
    assert perf.SPEC.checkpoint == any(r.checkpoint for r in ALGORITHMS.values())
    # auto reads what any row it picks reads, but the squared hinge (a different problem)
    picked = set().union(*(r.reads for r in ALGORITHMS.values() if not r.chooses))
    assert ALGORITHMS["auto"].reads == picked - {"hinge"}


def _non_default(name: str):
    f = next(f for f in dataclasses.fields(Params) if f.name == name)
    choices = f.metadata.get("choices")
    if choices:
        return next(c for c in choices if c != f.default)
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, int | float):
        return f.default + 1
    return "7"  # inner_mb


@pytest.mark.parametrize("variant", list(ALGORITHMS))
def test_unread_parameters_are_refused_read_ones_taken(variant):
    row = ALGORITHMS[variant]
    for name in sorted(set(Params.names()) - row.reads):
        value = _non_default(name)
        with pytest.raises(SolverError) as e:
            Params.from_mapping({"variant": variant, name: value})
        msg = str(e.value)
        assert "\n" not in msg
        flag = name.replace("_", "-")
        assert (f"--{flag}" in msg or f"--no-{flag}" in msg) and f"--variant {variant}" in msg
    # the parameters particular to the row (not the problem's) are taken
    for name in sorted(row.reads - COMMON):
        p = Params.from_mapping({"variant": variant, name: _non_default(name)})
        check_parameter(p, row)
    # a default given explicitly (the shipped --config perf writes them) is no refusal
    Params.from_mapping({**Params.defaults(), "variant": variant})
    Params.from_mapping({**load_config("perf", "perf"), "variant": variant})


def test_auto_resolved_keeps_what_the_pick_reads():
    p = Params.from_mapping({"max_inner": 7, "mu": 0.3, "shrinking": False, "inner_mb": "9"})
    dcd = resolved(p, "dcd")
    assert (dcd.variant, dcd.shrinking, dcd.inner_mb) == ("dcd", False, "9")
    assert (dcd.max_inner, dcd.mu) == (Params.defaults()["max_inner"], Params.defaults()["mu"])
    acc = resolved(p, "accelerated")
    assert (acc.mu, acc.shrinking, acc.max_inner) == (0.3, True, 2000)


def _store(make_store):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return make_store(X, y, shard_rows=30)


def test_python_api_refuses_in_one_line(make_store):
    st = _store(make_store)
    with pytest.raises(SolverError, match=r"^--max-inner 7 needs --variant selective; "):
        train(st, "perf", variant="dcd", max_inner=7)
    with pytest.raises(SolverError, match="--no-shrinking needs --variant dcd"):
        train(st, "perf", variant="paper", shrinking=False)
    # auto takes them: the row it picks reads its own
    assert train(st, "perf", max_inner=7, shrinking=False, eps=1e-2).model is not None


def test_command_line_refuses_in_one_line(make_store, tmp_path):
    st = _store(make_store)
    cmd = ooc_cmd("train", "--solver", "perf", st.path, "-o", tmp_path / "m", "--variant",
                  "dcd", "--max-inner", "7")  # fmt: skip
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ooc-svm: error: "), err
    assert "--max-inner 7 needs --variant selective; --variant dcd does not read it" in err[0]
    assert not (tmp_path / "m").exists()


def _variant_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing with a variant name, or comparing ``variant`` with a string."""
    names = set(ALGORITHMS) - {"auto"}  # "auto" is also a value of other fields

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [s for e in node.elts for s in strings(e)]
        return []

    def is_variant(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "variant") or (
            isinstance(node, ast.Attribute) and node.attr == "variant"
        )

    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        consts = [s for o in operands for s in strings(o)]
        if set(consts) & names or (consts and any(is_variant(o) for o in operands)):
            out.append(node.lineno)
    return out


def test_no_variant_name_is_compared_outside_the_table():
    found = []
    for path in sorted((ROOT / "ooc_svm").rglob("*.py")):
        if path == TABLE_MODULE:
            continue
        for line in _variant_comparisons(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, f"variant names compared (ask the table instead): {found}"
    # the scan sees them
    assert _variant_comparisons(ast.parse('if p.variant == "auto" or v in ("dcd", "x"): pass'))


@pytest.mark.parametrize("variant", [n for n, r in ALGORITHMS.items() if not r.chooses])
def test_the_table_tells_what_each_algorithm_does(variant, make_store, tmp_path):
    """The flags the rest of the package reads are those the algorithm lives up to: a
    checkpoint, one-vs-rest and ROC area are trained where the row says so, else refused in
    one line."""
    row = ALGORITHMS[variant]
    st = _store(make_store)
    kw = {"variant": variant, "eps": 1e-2}
    ck = str(tmp_path / "ck")
    if row.checkpoint:
        assert train(st, "perf", checkpoint=ck, **kw).model is not None
    else:
        with pytest.raises(SolverError, match="checkpoint"):
            train(st, "perf", checkpoint=ck, **kw)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 4))
    multi = make_store(X, np.argmax(X[:, :3], axis=1) + 1.0, shard_rows=45, name="m.zarr")
    if row.ovr:
        assert train(multi, "perf", **kw).model.classes == [1.0, 2.0, 3.0]
    else:
        with pytest.raises(
            SolverError, match=f"one-vs-rest perf does not support --variant {variant}"
        ):
            train(multi, "perf", **kw)
    if "roc" in row.losses:
        assert train(st, "perf", loss="roc", **kw).model is not None
    else:
        with pytest.raises(SolverError, match="--loss error only"):
            train(st, "perf", loss="roc", **kw)
