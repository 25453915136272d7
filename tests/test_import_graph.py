"""The package's import graph has no circles, and the docstrings name modules and objects
that exist.

The graph is read from the sources with :mod:`ast`: every ``import`` of an ``ooc_svm``
module, at the top of a module, inside a function or under ``if TYPE_CHECKING:`` (a circle
through an import made on first use or for the type checker only is a circle all the same).
Importing from one's own package (``from .. import SolverError``) is the package's interface,
not an edge. import-linter's ``layers`` contract (``pyproject.toml``) orders the layers; this
test also sees the circles inside one layer.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ooc_svm"

#: the circles still there, each with why: the test fails when one is gone (remove it here)
#: or another appears
KNOWN_CIRCLES = {
    frozenset(
        {
            "ooc_svm.solvers.perf.auto",
            "ooc_svm.solvers.perf.common",
            "ooc_svm.solvers.perf.params",
            "ooc_svm.solvers.perf.passes",
            "ooc_svm.solvers.perf.selection",
            "ooc_svm.solvers.perf.selective",
        }
    ): "on first use: Params resolves --variant auto by auto's table, which reads selective",
    frozenset({"ooc_svm.solvers.perf.dcd", "ooc_svm.solvers.perf.dcd_cert"}): (
        "type-only: the certificate names dcd's run in annotations"
    ),
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (path, is a package)}`` of every module of the package."""
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (p, package)
    return out


def _absolute(module: str, package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the package (see the module docstring)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, (path, package) in mods.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(mod, package, node.level, node.module)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.add(sub if sub in mods else base)
        graph[mod] = {t for t in targets if t in mods and t != mod and not mod.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    found = set(circles(import_graph()))
    new = [sorted(c) for c in found - set(KNOWN_CIRCLES)]
    gone = [sorted(c) for c in set(KNOWN_CIRCLES) - found]
    assert not new, f"import circles: {new} (move what both need into a module below both)"
    assert not gone, f"circles no longer there: remove them from KNOWN_CIRCLES: {gone}"


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    g = import_graph()
    assert "ooc_svm._private_folder" in g["ooc_svm._numba_cache"]
    assert "ooc_svm.solvers" not in g["ooc_svm.solvers.contract"]  # its own package


# --------------------------------------------------------------------------------------------
# docstring references
# --------------------------------------------------------------------------------------------
#: ``:mod:`ooc_svm.x```, ``:func:`~ooc_svm.x.f```, ``:class:`ooc_svm.x.C``` ... in a docstring
ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`~?(ooc_svm(?:\.\w+)+)`")


def _resolves(name: str) -> bool:
    """``name`` is a module of the package, or an attribute chain from one."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def docstring_references() -> list[tuple[str, str]]:
    """``(module, name)`` of every ``ooc_svm.*`` name in a role of a docstring."""
    out = []
    for mod, (path, _) in sorted(_modules().items()):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                out.extend((mod, m.group(2)) for m in ROLE.finditer(doc))
    return out


#: stale names left in the docstrings, each with its right name: the test fails when one is
#: fixed (remove it here) or another appears
KNOWN_STALE: set[tuple[str, str]] = set()


def test_docstring_references_resolve():
    refs = docstring_references()
    assert len(refs) > 50  # the roles are found
    stale = {(mod, name) for mod, name in refs if not _resolves(name)}
    new = sorted(f"{mod}: {name}" for mod, name in stale - KNOWN_STALE)
    assert not new, "docstrings name what is not there:\n" + "\n".join(new)
    fixed = sorted(KNOWN_STALE - stale)
    assert not fixed, f"fixed: remove them from KNOWN_STALE: {fixed}"


def test_a_stale_reference_is_found():
    assert _resolves("ooc_svm.server.server_link.forward")
    assert _resolves("ooc_svm.solvers.perf.params.Params.rules")
    assert not _resolves("ooc_svm.server_link")
    assert not _resolves("ooc_svm.solvers.perf.params.Params.no_such")
