"""docs/REPRODUCTION.md's summary tables are the reproduction scripts' own output.

A block between ``<!-- generated: python scripts/reproduce/summary.py --render JSON... -->``
and ``<!-- end generated -->`` must equal what ``summary.render([JSON...])`` prints for the
JSON files kept in docs/reproduction/ (written by the scripts' full runs): a figure edited by
hand, or a run made again without regenerating the table, fails here.

The kept outputs (docs/reproduction/*.md and *.json) name no folder of one machine: the
scripts record ``--out OUT`` and ``$DIR/NAME`` for the paths on their command line (tested
here; the files themselves by tests/test_benchmarks_doc.py's machine-path tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import generated_blocks, render_block

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "REPRODUCTION.md"
PAPERS = ("platt1998", "scheinberg2006", "perezcruz", "joachims2006")


def _blocks() -> list[tuple[str, list[str], str]]:
    return generated_blocks(DOC)


def _render(script: str, files: list[str]) -> str:
    return render_block(ROOT, script, files)


def test_every_paper_has_a_generated_summary():
    named = [Path(f).name for _, files, _ in _blocks() for f in files]
    for paper in PAPERS:
        assert any(n.startswith(paper) for n in named), f"no generated summary for {paper}"


@pytest.mark.parametrize("script,files,text", _blocks(), ids=lambda v: str(v)[:40])
def test_generated_summary_is_the_scripts_output(script, files, text):
    for f in files:
        assert (ROOT / f).is_file(), f"{f} is named by docs/REPRODUCTION.md but missing"
    assert text == _render(script, files), (
        f"docs/REPRODUCTION.md's table from {' '.join(files)} is not what `python {script} "
        f"--render {' '.join(files)}` prints: regenerate it"
    )


def test_the_scripts_write_portable_command_lines():
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "reproduce"))
    try:
        import _common
    finally:
        sys.path.pop(0)
    line = _common.command_line(
        "perezcruz.py", ["--out", "/tmp/x", "--splice", "/tmp/p/splice.txt", "--rows", "none"]
    )
    assert (
        line
        == "python scripts/reproduce/perezcruz.py --out OUT --splice $DIR/splice.txt --rows none"
    )
