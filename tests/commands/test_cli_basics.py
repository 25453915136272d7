"""The ``ooc-svm`` command itself.

Bare ``ooc-svm`` lists the commands, ``--version``, ``-v``/``-q`` after the sub-command,
one-line argument errors pointing to ``--help``, ``python -m ooc_svm``, and a start-up that
imports none of the heavy libraries for ``--help``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import run_ooc as _ooc

from ooc_svm import __version__
from ooc_svm.cli import COMMANDS
from ooc_svm.store import csr_to_shards, write_store


def test_bare_command_lists_commands():
    r = _ooc()
    assert r.returncode == 2
    for name in COMMANDS:
        assert f"    {name}" in r.stdout
    assert "bench" not in COMMANDS


def test_version():
    r = _ooc("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ooc-svm {__version__}"


def test_argument_error_is_one_line_naming_the_argument(tmp_path):
    r = _ooc("train", "--C", "x", "s.zarr", "-o", "m", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "ooc-svm train: error: argument --C: invalid float value: 'x' (see ooc-svm train --help)"
    ]
    r = _ooc("trian")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "invalid choice: 'trian'" in r.stderr and "(see ooc-svm --help)" in r.stderr


def test_quiet_and_verbose_after_the_command(tmp_path):
    X = sp.random(300, 20, density=0.2, format="csr", random_state=1, dtype=np.float32)
    y = np.where(np.arange(300) % 2 == 0, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=100))
    for flag in ("-q", "-v"):
        r = _ooc("train", flag, "--solver", "perf", "s.zarr", "-o", f"m{flag}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / f"m{flag}" / "model.json").is_file()
    r = _ooc("info", "-q", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0 and "n_rows" in r.stdout


def test_info_lists_the_shard_table(tmp_path):
    """``info --shards`` (the table's records are slotted dataclasses: no ``__dict__``)."""
    import json

    X = sp.random(250, 10, density=0.3, format="csr", random_state=2, dtype=np.float32)
    y = np.where(np.arange(250) % 2 == 0, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=100))
    r = _ooc("info", "--json", "--shards", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shards = json.loads(r.stdout)["shards"]
    assert [s["n_rows"] for s in shards] == [100, 100, 50]
    assert [s["row_start"] for s in shards] == [0, 100, 200]
    r = _ooc("info", "--shards", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "row_start=200 n_rows=50" in r.stdout


def test_help_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from ooc_svm.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['numpy', 'scipy', 'numba', 'zarr', 'pyarrow', 'dask', 'distributed']\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_closed_stdout_pipe_exits_quietly(tmp_path):
    """`ooc-svm evaluate ... | true`, `ooc-svm info ... | true`: no "Broken pipe" error, the
    status of a process ended by SIGPIPE (141), as cat or grep."""
    import os

    from ooc_svm.model.model import Model

    Model(kind="linear", n_features=3, classes=[-1.0, 1.0], coef_=np.ones(3)).save(
        str(tmp_path / "m")
    )
    (tmp_path / "d.svm").write_text("1 1:1 2:0.5\n-1 3:1\n" * 20)
    for args in (["evaluate", "m", "d.svm"], ["info", "m"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before anything is written
        try:
            r = subprocess.run(
                [sys.executable, "-m", "ooc_svm", *args],
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(write)
        assert r.returncode == 141, (args, r.returncode, r.stderr)
        # nothing but the one-time note of a numba compile (a kernel not cached yet)
        err = [x for x in r.stderr.splitlines() if not x.startswith("ooc-svm: compiling numba")]
        assert err == [], (args, r.stderr)


def test_liblinear_libsvm_flags_say_the_ooc_svm_spelling(tmp_path):
    """`train -c 4 a9a.zarr -o m`: one line per LIBLINEAR/LIBSVM flag, with ooc-svm's flag."""
    r = _ooc("train", "-c", "4", "-s", "2", "-e", "0.1", "-B", "1", "-w1", "5", "a.zarr", "-o", "m")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "unrecognized" not in r.stderr, r.stderr
    assert [ln.split(": ")[2] for ln in lines] == ["-c", "-s", "-e", "-B", "-wN"], lines
    assert "--C (LIBLINEAR's and LIBSVM's -c)" in lines[0]
    assert "--class-weight" in lines[4] and lines[4].endswith("(see ooc-svm train --help)")
    for args, want in [
        (["train", "-t", "2", "-g", "0.5", "a.zarr", "-o", "m"], ["--kernel", "--gamma"]),
        (["train", "-v", "5", "a.zarr", "-o", "m"], ["--folds"]),
        (["predict", "-b", "1", "m", "t.svm", "-o", "p"], ["--probability"]),
    ]:
        r = _ooc(*args)
        assert r.returncode == 2 and all(w in r.stderr for w in want), r.stderr
        assert len(r.stderr.strip().splitlines()) == len(want), r.stderr


def test_train_refuses_to_replace_a_model_without_overwrite(tmp_path):
    X = sp.random(60, 5, density=0.5, format="csr", random_state=np.random.default_rng(0))
    y = np.where(np.arange(60) % 2, 1.0, -1.0)
    write_store(str(tmp_path / "s.zarr"), csr_to_shards(X, y, shard_rows=30))
    first = _ooc("train", "s.zarr", "-o", "m", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    stamp = (tmp_path / "m" / "model.json").stat().st_mtime_ns
    again = _ooc("train", "s.zarr", "-o", "m", "--C", "5", cwd=tmp_path)
    assert again.returncode == 1, again.stderr
    assert again.stderr.strip() == (
        "ooc-svm: error: -o m: exists; pass --overwrite to replace it (or give another -o)"
    )
    assert (tmp_path / "m" / "model.json").stat().st_mtime_ns == stamp
    forced = _ooc("train", "s.zarr", "-o", "m", "--C", "5", "--overwrite", "-q", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert '"C": 5.0' in (tmp_path / "m" / "model.json").read_text()


def test_small_wording_of_ingest_evaluate_and_sweep(tmp_path):
    """ "into 1 shard" (not "1 shards"), the same decimal MB on the bar and in the summary,
    Python's ingest names overwrite=True, evaluate --plot says what it wrote, and a sweep
    whose table goes to --sweep-table FILE does not print it too."""
    import pytest

    from ooc_svm.progress import Meter
    from ooc_svm.store import StoreError
    from ooc_svm.store.ingest import ingest

    rng = np.random.default_rng(0)
    rows = [f"{1 if k % 2 else -1} 1:{rng.random():.3f} 2:{rng.random():.3f}" for k in range(80)]
    (tmp_path / "d.svm").write_text("\n".join(rows) + "\n")
    r = _ooc("ingest", "d.svm", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0 and " into 1 shard from " in r.stdout, r.stdout
    assert Meter("ingest", "off", unit="B")._amount(2_500_000) == "2.5 MB"
    with pytest.raises(StoreError, match=r"overwrite=True in Python"):
        ingest([str(tmp_path / "d.svm")], str(tmp_path / "s.zarr"))
    pytest.importorskip("matplotlib")
    r = _ooc("train", "s.zarr", "-o", "m", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _ooc("evaluate", "m", "s.zarr", "--plot", "roc.png", cwd=tmp_path)
    assert r.returncode == 0 and "wrote roc.png" in r.stderr, r.stderr
    r = _ooc("train", "s.zarr", "-o", "m2", "--C", "0.1,1", "--validation", "s.zarr",
             "--sweep-table", "t.csv", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.csv").exists() and "objective" not in r.stdout, r.stdout
    assert "best C" in r.stdout


def test_an_allocation_that_cannot_fit_is_one_line(tmp_path, monkeypatch, capsys):
    """numpy's ``_ArrayMemoryError`` (a MemoryError) from anywhere in a command: one line,
    status 1, never a traceback (the CLI's last resort)."""
    from ooc_svm import cli
    from ooc_svm.commands import info

    def run(args):
        return np.empty(2**57)  # 1 EiB: no machine gives it

    monkeypatch.setattr(info, "run", run)
    monkeypatch.setattr(info, "add_parser", _parser_calling(info.add_parser, run))
    assert cli.main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ooc-svm: error: out of memory (Unable to allocate")
    assert "1.00 EiB" in err[0] and "memory budget" in err[0], err


def _parser_calling(add_parser, run):
    """``add_parser`` whose sub-command calls ``run``."""

    def add(sub):
        add_parser(sub)
        sub.choices["info"].set_defaults(func=run)

    return add


@pytest.mark.parametrize(
    "args, flag, value",
    [
        (["ingest", "t.svm", "s.zarr", "--hash-bits", " 3"], "--hash-bits", " 3"),
        (["ingest", "t.svm", "s.zarr", "--shard-rows", "10 "], "--shard-rows", "10 "),
        (["ingest", "t.svm", "s.zarr", "--memory-mb", " 500"], "--memory-mb", " 500"),
        (["train", "s.zarr", "-o", "m", "--C", " 1"], "--C", " 1"),
        (["train", "s.zarr", "-o", "m", "--max-iter", "1_000"], "--max-iter", "1_000"),
        (["synth", "o.svm", "--rows", "\t5", "--seed", "1"], "--rows", "\t5"),
    ],
)
def test_numbers_are_taken_as_written(args, flag, value, capsys):
    """`--hash-bits ' 3'` was accepted: Python's int() and float() forgive spaces and
    underscores, a command line does not (it is usually a quoting mistake)."""
    from ooc_svm import cli

    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    kind = "int" if flag not in ("--memory-mb", "--C") else "float"
    assert len(err) == 1 and f"argument {flag}: invalid {kind} value: {value!r}" in err[0], err
