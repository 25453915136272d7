"""Print the longest Python functions of the package (numba kernels excluded) and module sizes.

Usage::

    python scripts/longest_functions.py            # 15 longest non-numba functions in ooc_svm/
    python scripts/longest_functions.py --top 30 --limit 80   # exit 1 if any exceeds 80 lines

A function's length is its source lines from ``def`` to its last line (decorators and the
docstring included, nested functions counted inside their parent as well as on their own).
Functions decorated with numba's ``njit``/``jit`` are excluded: numba kernels may stay long,
as LIBLINEAR's loops do.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _is_numba(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("njit", "jit", "vectorize", "guvectorize", "generated_jit"):
            return True
    return False


def function_lengths(package: Path) -> list[tuple[int, str]]:
    """(lines, "path:line qualified_name") of every non-numba function under ``package``."""
    out: list[tuple[int, str]] = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(package.parent)

        def visit(node: ast.AST, prefix: str, rel: Path = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    qual = f"{prefix}{child.name}"
                    if not _is_numba(child):
                        start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                        n = (child.end_lineno or child.lineno) - start + 1
                        out.append((n, f"{rel}:{child.lineno} {qual}"))
                    visit(child, qual + ".")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    out.sort(key=lambda t: (-t[0], t[1]))
    return out


def module_sizes(folder: Path) -> list[tuple[int, str]]:
    """(lines, path) of every module under ``folder``, largest first."""
    sizes = [
        (len(p.read_text().splitlines()), str(p.relative_to(folder.parent.parent)))
        for p in sorted(folder.rglob("*.py"))
    ]
    sizes.sort(key=lambda t: (-t[0], t[1]))
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=15, help="how many functions to list (15)")
    ap.add_argument("--limit", type=int, default=None, help="exit 1 if a function is longer")
    ap.add_argument("--package", default=str(ROOT / "ooc_svm"), help="package folder")
    args = ap.parse_args(argv)
    package = Path(args.package)
    lengths = function_lengths(package)
    print(f"{args.top} longest non-numba functions in {package.name}/:")
    for n, where in lengths[: args.top]:
        print(f"{n:5d}  {where}")
    solvers = package / "solvers"
    if solvers.is_dir():
        print(f"\nmodule sizes of {package.name}/solvers/ (lines):")
        for n, where in module_sizes(solvers):
            print(f"{n:5d}  {where}")
    if args.limit is not None:
        over = [(n, w) for n, w in lengths if n > args.limit]
        if over:
            print(f"\n{len(over)} function(s) over {args.limit} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
