"""The project's layout: what may sit at the top level, a README short enough to read whose
every block of commands is run by a test, and an architecture page that places every module."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what may be committed at the top level (anything else is a stray file, such as the shell
#: error once committed as `b.txt`)
TOP_LEVEL = {
    "pyproject.toml",
    "ooc_svm",
    "scripts",
    "tests",
    "conf",
    "docs",
    "README.md",
    "Makefile",
    "constraints.txt",
    "LICENSE",
    "CHANGELOG.md",
    ".ci",
    ".gitignore",
    ".gitattributes",
    ".pre-commit-config.yaml",
}

#: README sections with a block of commands, and the test that runs the block as written
README_BLOCKS = {
    "Command line": "tests/test_readme.py",
    "Python": "tests/test_readme.py",
    "On a Dask cluster": "tests/test_readme.py",
    "Data on object storage": "tests/store/test_s3.py",
    "Probabilities": "tests/test_readme.py",
    "Class weights": "tests/solvers/test_class_weights.py",
    "Choosing C": "tests/solvers/test_sweep.py",
}


def _tracked_top_level() -> set[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the committed files are unknown")
    r = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return {p.split("/", 1)[0] for p in r.stdout.split("\0") if p}


def test_no_unknown_file_at_the_top_level():
    unknown = sorted(_tracked_top_level() - TOP_LEVEL)
    assert not unknown, (
        f"unknown files at the top level: {unknown}; move them under docs/ or scripts/, or add "
        "them to TOP_LEVEL in tests/test_layout.py if they belong there"
    )


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 250, f"README.md has {n} lines; details belong in docs/"


def test_readme_starts_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```sh\n(.*?)```", text, re.S)
    assert m is not None
    cmds = [ln.split("#")[0].strip() for ln in m.group(1).splitlines() if ln.strip()]
    assert cmds == ["make demo", "make test"]
    assert text.index(m.group(0)) < text.index("\n## ")


def test_every_readme_block_is_run_by_a_test():
    """Every section of the README with a block of commands (after the set-up block) is one a
    test runs as written; the test reads the section by its heading."""
    text = (ROOT / "README.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    with_blocks = {s.splitlines()[0].strip() for s in sections if re.search(r"^```", s, re.M)}
    assert with_blocks == set(README_BLOCKS), (
        "README sections with code blocks differ from those a test runs: "
        f"untested {sorted(with_blocks - set(README_BLOCKS))}, "
        f"gone {sorted(set(README_BLOCKS) - with_blocks)}"
    )
    for section, test in README_BLOCKS.items():
        src = (ROOT / test).read_text()
        assert f'"## {section}"' in src or f'_block("{section}"' in src, (section, test)


def test_readme_links_exist():
    text = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / link).exists(), link


def _placed_modules(text: str) -> set[str]:
    """Module paths (relative to ooc_svm/) named in the architecture page's module table: a
    row's first path gives the directory of the bare names after it (`commands/info.py`,
    `plot.py`; `solvers/perf/` with `params`, `passes`)."""
    placed: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split("|")
        names = re.findall(r"`([^`]+)`", cells[1])
        if len(names) == 1 and names[0].endswith("/"):  # a package: its modules in the text
            names += re.findall(r"`(\w+)`", cells[2])
        base = ""
        for name in names:
            if "/" in name:
                base = name.rsplit("/", 1)[0] + "/"
                placed.add(name + "__init__.py" if name.endswith("/") else name)
            elif base:
                placed.add(base + (name if name.endswith(".py") else name + ".py"))
            else:
                placed.add(name if name.endswith(".py") else name + ".py")
    return placed


def test_architecture_places_every_module():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    placed = _placed_modules(text)
    pkg = ROOT / "ooc_svm"
    modules = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")}
    missing = sorted(modules - placed)
    assert not missing, f"docs/ARCHITECTURE.md does not place: {missing}"


def test_license_is_the_declared_bsd_3_clause():
    text = (ROOT / "LICENSE").read_text()
    assert 'license = "BSD-3-Clause"' in (ROOT / "pyproject.toml").read_text()
    assert "Redistribution and use in source and binary forms" in text
    assert "Neither the name of the copyright holder nor the names of its" in text
    assert "the ooc-svm developers" in text


#: the longest module and the longest Python function the package holds (numba kernels are
#: exempt from the second: a compiled loop is one function so that it stays in machine code)
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _package_sources() -> list[Path]:
    return sorted((ROOT / "ooc_svm").rglob("*.py"))


def test_no_module_is_too_long():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _package_sources()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them): {long}"


def _is_numba(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def test_no_python_function_is_too_long():
    long = {}
    for p in _package_sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_numba(node):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT).as_posix()}:{node.name}"] = n
    assert not long, f"Python functions over {MAX_FUNCTION_LINES} lines (split them): {long}"


#: the modules every solver package has (docs/ARCHITECTURE.md, "Solvers")
SOLVER_SHAPE = ("__init__.py", "params.py", "driver.py", "passes.py", "working_set.py")


def _solver_packages() -> list[Path]:
    """The solver packages: every package of ``ooc_svm/solvers/`` with a ``params.py``."""
    return sorted(p.parent for p in (ROOT / "ooc_svm" / "solvers").glob("*/params.py"))


def test_solver_packages_have_one_shape():
    packages = _solver_packages()
    assert len(packages) >= 4, packages
    for pkg in packages:
        missing = [m for m in SOLVER_SHAPE if not (pkg / m).is_file()]
        assert not missing, f"{pkg.name}: missing {missing}"
        numba = pkg / "_numba"
        assert numba.with_suffix(".py").is_file() or (numba / "__init__.py").is_file(), pkg.name
        outside = [
            p.relative_to(pkg).as_posix()
            for p in pkg.rglob("*.py")
            if "_numba" not in p.relative_to(pkg).parts[0]
            and re.search(r"^@(numba\.)?njit", p.read_text(), re.M)
        ]
        assert not outside, f"{pkg.name}: numba kernels outside _numba: {outside}"
        # the card and the facade only: reading Params loads no numba
        assert "njit" not in (pkg / "__init__.py").read_text(), pkg.name


def test_make_test_and_the_readme_agree_on_the_cluster_tests():
    """``make test`` (what CI runs) and the README's account of it say the same about the
    tests that start a Dask cluster."""
    make = (ROOT / "Makefile").read_text()
    m = re.search(r"^test: .*\n\t(.*)$", make, re.M)
    assert m is not None
    marks = re.search(r'-m "([^"]*)"', m.group(1))
    excluded = marks is not None and "not cluster" in marks.group(1)
    readme = " ".join((ROOT / "README.md").read_text().split())
    included = "cluster tests included" in readme
    assert excluded != included, (
        m.group(1),
        "README: 'cluster tests included'" if included else "",
    )


#: ``.md`` names in code and docs that are not files of the repository, on purpose: what the
#: scripts write (placeholders in capitals, ``scale_table.md``) and the papers beside it
_MD_NOT_FILES = re.compile(r"(^|/)(OUT|NAME|STEM)(/|\.md$)|^\.\./shared/|^scale_table\.md$")


def test_every_md_named_in_code_or_docs_exists():
    sources = [
        *_package_sources(),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "scripts").rglob("*.py"),
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
    ]
    name = re.compile(r"(?<![\w.-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)(?![\w/-])")
    missing = set()
    for src in sources:
        for m in name.finditer(src.read_text()):
            md = m.group(1)
            if _MD_NOT_FILES.search(md):
                continue
            where = (ROOT / md, ROOT / "docs" / md, src.parent / md)
            if not any(p.is_file() for p in where):
                missing.add(f"{src.relative_to(ROOT)}: {md}")
    assert not missing, f"named but not in the repository: {sorted(missing)}"


def test_no_issue_or_goal_numbers_in_docs_code_or_tests():
    """Docs, docstrings and tests give reasons, not the tracker's numbers (CHANGELOG.md, the
    history, keeps them)."""
    numbered = re.compile(r"\b[Ii]ssues? \d+|\b[Gg]oals? \d+(?! ?[%×x])")
    sources = [
        *_package_sources(),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "scripts").rglob("*.py"),
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
    ]
    found = [
        f"{src.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for src in sources
        if src.name != "test_layout.py"
        for n, line in enumerate(src.read_text().splitlines(), 1)
        if numbered.search(line)
    ]
    assert not found, found
