"""The README's quick start, run as written: every shell command of the "Command line" block,
then the "Python" block, in an empty directory (slow: ~3-5 minutes on 2 cores)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _block(section: str, lang: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {section}")
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert m is not None, f"no ```{lang} block under ## {section}"
    return m.group(1)


def test_quick_start_blocks_are_found():
    cmds = [c for c in _block("Command line", "sh").splitlines() if c.strip()]
    assert cmds and all(c.startswith("ooc-svm ") for c in cmds)
    assert "ooc_svm.train" in _block("Python", "python")


@pytest.mark.slow
def test_readme_quick_start_runs_as_written(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for line in _block("Command line", "sh").splitlines():
        cmd = line.split("  #")[0].strip()
        if not cmd:
            continue
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    for f in (
        "train.zarr",
        "test.parquet",
        "model",
        "scores.parquet",
        "conv.png",
        "roc.png",
        "m3",
        "m4",
    ):
        assert (tmp_path / f).exists(), f
    code = _block("Python", "python")
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    passes, *_ = shlex.split(r.stdout.replace("[", " ").replace("]", " "))
    assert int(passes) > 0
