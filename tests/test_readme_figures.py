"""The README's benchmark and reproduction figures are the generated tables' figures.

Every figure the README quotes under "## Benchmarks" and "## More" (a decimal such as 0.29 or
1.0004, or a count with thousands separators such as 12,181) must appear in a generated block
(``<!-- generated: ... -->`` ... ``<!-- end generated -->``) of docs/BENCHMARKS.md or
docs/REPRODUCTION.md, which tests/test_benchmarks_doc.py and tests/test_reproduction_doc.py
check against the kept JSON: a README figure typed by hand, or left behind by a new run,
fails here. Program versions (LIBLINEAR 2.50, ...) are not figures.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("Benchmarks", "More")
GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated -->", re.S)
FIGURE = re.compile(
    r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w.]?\d)|(?<![\w.])\d+\.\d+(?![\w.]?\d)"
)
VERSIONS = {"2.50", "3.00", "3.37", "6.20"}  # LIBLINEAR, SVMperf, LIBSVM, SVMlight


def _section(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {name}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m is not None, f"README.md has no section ## {name}"
    return m.group(1)


def _generated() -> set[str]:
    found: set[str] = set()
    for doc in ("BENCHMARKS.md", "REPRODUCTION.md"):
        for block in GENERATED.findall((ROOT / "docs" / doc).read_text()):
            found.update(FIGURE.findall(block))
    return found


def test_the_figure_pattern():
    text = "0.29× 1.0004 12,181 / 12,182, 10⁻⁶ 1M × 50k ~n^0.80 1.17.2 (2.50)"
    assert FIGURE.findall(text) == ["0.29", "1.0004", "12,181", "12,182", "0.80", "2.50"]


@pytest.mark.parametrize("section", SECTIONS)
def test_readme_figures_are_in_generated_tables(section):
    quoted = [f for f in FIGURE.findall(_section(section)) if f not in VERSIONS]
    missing = sorted(set(quoted) - _generated())
    assert quoted or section != "Benchmarks", "README's Benchmarks section quotes no figure"
    assert not missing, (
        f"README.md's ## {section} quotes {missing}, which no generated table of "
        "docs/BENCHMARKS.md or docs/REPRODUCTION.md holds: quote the generated figures, or "
        "generate the table the figure comes from"
    )
