"""docs/BENCHMARKS.md's generated tables are the benchmark scripts' own output.

A block between ``<!-- generated: python scripts/SCRIPT.py --render JSON... -->`` and
``<!-- end generated -->`` must equal what ``SCRIPT.render([JSON...])`` prints for the JSON
files kept in docs/benchmarks/ (written by the script's ``--json``): a figure edited by hand,
or a JSON file measured again without regenerating the table, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import generated_blocks, render_block

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"
KEPT_RUNS = ROOT / "docs" / "reproduction"  # the reproduction scripts' kept .md and .json


def _blocks() -> list[tuple[str, list[str], str]]:
    return generated_blocks(DOC)


def _render(script: str, files: list[str]) -> str:
    return render_block(ROOT, script, files)


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
    kept = [*(ROOT / "docs" / "benchmarks").glob("*.json"), *KEPT_RUNS.glob("*.json")]
    assert len(kept) > 10
    for f in kept:
        text = f.read_text()
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, f


# A folder of one developer's machine (a checkout, a scratch store, a reference binary) means
# nothing to a reader: the documents name reference programs by their environment variable
# ($LIBLINEAR_TRAIN, ...) and data by a placeholder ($DIR/...) or a relative path. System
# paths every user has (/usr/bin/time, /proc/..., /sys/fs/cgroup/..., /dev/...) are fine, and
# so is the folder ooc-svm itself makes under /tmp.
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:work|tmp|home|root)/\S*")
ALLOWED_PATHS = ("/tmp/ooc-svm-<uid>",)
GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated -->", re.S)


def _documents() -> list[Path]:
    return [
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(KEPT_RUNS.glob("*.md")),
        ROOT / "README.md",
    ]


def test_documents_are_found():
    assert DOC in _documents() and len(_documents()) > 5
    assert any(p.parent == KEPT_RUNS for p in _documents())


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths_in_the_documents(doc):
    text = GENERATED.sub(lambda m: "\n" * m.group().count("\n"), doc.read_text())
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in MACHINE_PATH.finditer(line):
            if not m.group().startswith(ALLOWED_PATHS):
                found.append(f"{n}: {m.group()}")
    assert not found, (
        f"{doc.relative_to(ROOT)} names paths of one machine (use $LIBLINEAR_TRAIN & co. "
        f"or $DIR/...): {found}"
    )
