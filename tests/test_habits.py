"""House habits checked by the suite: module loggers named by ``__name__``."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ooc_svm"


def _literal_logger_names(path: Path) -> list[str]:
    """``logging.getLogger("...")`` calls naming an ``ooc_svm`` logger by a literal string."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        arg = node.args[0]
        if name == "getLogger" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value.split(".")[0] == "ooc_svm":
                found.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {arg.value!r}")
    return found


def test_loggers_are_named_by_module():
    bad = [hit for p in sorted(PKG.rglob("*.py")) for hit in _literal_logger_names(p)]
    assert not bad, "use logging.getLogger(__name__):\n" + "\n".join(bad)


def test_module_logger_propagates_to_the_package_logger(tmp_path, caplog):
    # the CLI's -q/-v set the level above the package: a module's warning reaches it
    from ooc_svm.store.ingest import ingest

    (tmp_path / "empty.svm").write_text("# nothing\n")
    (tmp_path / "a.svm").write_text("1 1:1\n-1 2:1\n")
    with caplog.at_level(logging.WARNING, logger="ooc_svm"):
        ingest([str(tmp_path / "empty.svm"), str(tmp_path / "a.svm")], str(tmp_path / "s.zarr"))
    rec = [r for r in caplog.records if "no data rows" in r.getMessage()]
    assert rec and rec[0].name == "ooc_svm.store.ingest"


@pytest.mark.parametrize("flag, shown", [([], True), (["-q"], False)])
def test_cli_quiet_hides_module_warnings(tmp_path, monkeypatch, capsys, flag, shown):
    from ooc_svm.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.svm").write_text("# nothing\n")
    (tmp_path / "a.svm").write_text("1 1:1\n-1 2:1\n")
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = []  # let main()'s basicConfig install its stderr handler
    try:
        assert main([*flag, "ingest", "empty.svm", "a.svm", "s.zarr"]) == 0
    finally:
        root.handlers[:], root.level = saved
    assert ("empty.svm: no data rows" in capsys.readouterr().err) is shown
