"""docs/BENCHMARKS.md's generated tables are the benchmark scripts' own output.

A block between ``<!-- generated: python scripts/SCRIPT.py --render JSON... -->`` and
``<!-- end generated -->`` must equal what ``SCRIPT.render([JSON...])`` prints for the JSON
files kept in docs/benchmarks/ (written by the script's ``--json``): a figure edited by hand,
or a JSON file measured again without regenerating the table, fails here.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"
BLOCK = re.compile(
    r"<!-- generated: python (scripts/\w+\.py) --render ([^>]+?) -->\n"
    r"(.*?)\n<!-- end generated -->",
    re.S,
)


def _blocks() -> list[tuple[str, list[str], str]]:
    return [(m[1], shlex.split(m[2]), m[3].strip()) for m in BLOCK.finditer(DOC.read_text())]


def _render(script: str, files: list[str]) -> str:
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / script)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.render([str(ROOT / f) for f in files]).strip()


def test_the_document_has_generated_tables():
    assert _blocks(), "docs/BENCHMARKS.md lost its generated tables"


@pytest.mark.parametrize("script,files,text", _blocks(), ids=lambda v: str(v)[:40])
def test_generated_table_is_the_scripts_output(script, files, text):
    for f in files:
        assert (ROOT / f).is_file(), f"{f} is named by docs/BENCHMARKS.md but missing"
    assert text == _render(script, files), (
        f"docs/BENCHMARKS.md's table from {' '.join(files)} is not what `python {script} "
        f"--render {' '.join(files)}` prints: regenerate it"
    )


def test_no_machine_paths_in_the_kept_json():
    for f in (ROOT / "docs" / "benchmarks").glob("*.json"):
        text = f.read_text()
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, f
