"""Packaged like real software: ``pip wheel .`` builds a wheel holding the package, the
``conf/*.toml`` parameter files that ``train --config NAME`` finds, and the LICENSE; the wheel
installs into a fresh virtual environment and runs ``ooc-svm --help`` and the README's first
commands there, in an empty directory (slow: builds, installs and compiles the numba kernels
anew)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from ooc_svm.commands.train_flags import config_file, load_config
from ooc_svm.solvers import available_solvers

ROOT = Path(__file__).resolve().parents[1]
SOLVERS = available_solvers()


@pytest.mark.parametrize("solver", SOLVERS)
def test_config_names_a_shipped_parameter_file(solver, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the project directory: found in the package
    path = Path(config_file(solver))
    assert path.is_file() and path.name == f"{solver}.toml"
    with open(ROOT / "conf" / f"{solver}.toml", "rb") as f:
        assert load_config(solver, solver) == tomllib.load(f)


def test_config_file_given_as_a_path_is_used_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perf").write_text("C = 3.0\n")  # a file in the directory wins over the name
    assert load_config("perf", "perf") == {"C": 3.0}
    assert config_file("conf/perf.toml") == "conf/perf.toml"
    with pytest.raises(OSError, match="nope: config file not found"):
        load_config("nope", "perf")


def _readme_first_commands(n: int) -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index("## Command line") :], re.S)
    assert block is not None
    cmds = [c for c in (ln.split("  #")[0].strip() for ln in block.group(1).splitlines()) if c]
    return cmds[:n]


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_runs(tmp_path):
    # built from a copy: setuptools' build/ in the checkout would keep deleted modules
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,  # ooc_svm/conf -> ../conf
        ignore=shutil.ignore_patterns(
            ".*", "build", "dist", "*.egg-info", "__pycache__", "demo", "*.zarr", "*.parquet"
        ),
    )
    dist = tmp_path / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(dist), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = dist.glob("ooc_svm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for s in SOLVERS:
        assert f"ooc_svm/conf/{s}.toml" in names
    assert "ooc_svm/py.typed" in names  # PEP 561: the type hints reach users' type checkers
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not [n for n in names if not n.startswith(("ooc_svm/", "ooc_svm-"))], names

    # a fresh venv; the dependencies are those of this environment (a path entry, so its
    # editable install of ooc_svm is not activated), the package only from the wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "deps-from-test.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q"]
        + ["--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]

    work = tmp_path / "work"
    work.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = subprocess.run(
        [str(py), "-c", "import ooc_svm; print(ooc_svm.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where

    def ooc(cmd: str) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=1200
        )
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
        return r

    assert ooc("ooc-svm --help").stdout.startswith("usage: ooc-svm")
    assert "--config" in ooc("ooc-svm train --help").stdout
    cmds = _readme_first_commands(10)
    assert cmds[-1].startswith("ooc-svm predict")
    for cmd in cmds:
        ooc(cmd)
    assert (work / "model" / "model.json").is_file() and (work / "scores.parquet").is_file()
    ooc("ooc-svm train --solver perf train.zarr -o m-conf --config perf --C 1")
    assert (work / "m-conf" / "model.json").is_file()
