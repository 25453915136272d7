"""Progress of the commands (``ooc_svm/progress.py``).

Without a terminal: plain lines (iteration, passes, objective, gap and its target, elapsed)
on stderr, at most one per ``$OOC_SVM_PROGRESS_SECONDS`` (5 s) plus the first and the last;
``-q``: nothing but errors; on a terminal: a bar showing the stopping target.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.progress import Meter, TrainProgress, progress_mode, sci, stop_target
from ooc_svm.solvers import get_solver
from ooc_svm.store import csr_to_shards, write_store

LINE = re.compile(r"^iter (\d+)  passes \d+  obj \S+  \|W\| \d+  gap (\S+) \(target 1e-3\)  \S+s$")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("progress")
    rng = np.random.default_rng(3)
    X = sp.random(600, 40, density=0.2, format="csr", random_state=3, dtype=np.float32)
    w = rng.normal(size=40)
    y = np.where(X @ w + 0.3 * rng.normal(size=600) > 0, 1.0, -1.0)
    write_store(str(d / "s.zarr"), csr_to_shards(X, y, shard_rows=150))
    return d


def _train(work, *extra: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", "s.zarr", *extra],
        capture_output=True,
        text=True,
        cwd=work,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        timeout=600,
        **kw,
    )


def test_plain_lines_without_a_terminal(work):
    r = _train(work, "-o", "m1", "--json", env={"OOC_SVM_PROGRESS_SECONDS": "0"})
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("iter ")]
    assert lines and all(LINE.match(ln) for ln in lines), r.stderr
    # interval 0: one line per iteration (iteration 0 is the first pass at w = 0)
    iters = [int(LINE.match(ln).group(1)) for ln in lines]
    assert iters == list(range(summary["iterations"] + 1))
    assert float(LINE.match(lines[-1]).group(2)) <= 1e-3 < float(LINE.match(lines[1]).group(2))


def test_plain_lines_every_5_seconds_first_and_last(work):
    r = _train(work, "-o", "m2")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("iter ")]
    assert 2 <= len(lines) < 10, r.stderr  # a fast run: the first and the last record
    assert LINE.match(lines[0]).group(1) == "0"
    assert "perf: objective" in r.stdout  # the summary line


def test_quiet_prints_nothing(work):
    r = _train(work, "-o", "m3", "-q", env={"OOC_SVM_PROGRESS_SECONDS": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout == ""
    assert (work / "m3" / "model.json").is_file()
    r = _train(work, "-o", "m4", "-q", "--json")  # --json was asked for: printed
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["converged"] is True


@pytest.mark.parametrize("lines, columns", [(24, 80), (0, 0), (0, 80), (24, 0)])
def test_bar_with_the_target_on_a_terminal(work, lines, columns):
    """Whatever size the terminal reports (0 lines: no bar was drawn at all)."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    try:
        p = subprocess.Popen(
            [sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", "s.zarr"]
            + ["-o", f"m5_{lines}_{columns}"],
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not b:
                break
            chunks.append(b)
        out, _ = p.communicate(timeout=600)
    finally:
        os.close(master)
    assert p.returncode == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert re.search(r"perf  gap \S+ (→|->) 1e-3  iter \d+", screen), screen[-2000:]
    assert "|" in screen and "█" in screen  # the bar itself
    assert not re.search(r"^iter \d+  passes", screen, re.M)  # no plain lines on a terminal
    assert b"perf: objective" in out


# ------------------------------------------------------------------------------------------
# the module itself, in-process
# ------------------------------------------------------------------------------------------
class _Args:
    def __init__(self, quiet=False, verbose=0):
        self.quiet, self.verbose = quiet, verbose


class _Stream:
    encoding = "utf-8"

    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self):
        return self.tty


def test_mode_and_target():
    assert progress_mode(_Args(quiet=True), _Stream(True)) == "off"
    assert progress_mode(_Args(verbose=1), _Stream(True)) == "log"
    assert progress_mode(_Args(), _Stream(False)) == "log"
    assert progress_mode(_Args(), _Stream(True)) == "bar"

    class P:
        variant, eps, tol = "accelerated", 1e-3, 1e-2

    assert stop_target(get_solver("perf"), P()) == ("gap", 1e-3)
    P.variant = "paper"
    assert stop_target(get_solver("perf"), P()) == ("viol", 1e-3)
    assert stop_target(get_solver("smo"), P()) == ("KKT", 1e-2)
    assert [sci(v) for v in (0.0031, 0.001, 0.02, 123.0, 2.5e6)] == [
        "3.1e-3",
        "1e-3",
        "0.02",
        "123",
        "2.5e6",
    ]


def test_lines_are_throttled(caplog, monkeypatch):
    monkeypatch.setenv("OOC_SVM_PROGRESS_SECONDS", "3600")
    caplog.set_level(logging.INFO, logger="ooc_svm.progress")
    p = TrainProgress("smo", ("KKT", 1e-3), "log", record_labels=get_solver("smo").record_labels)
    for i in range(50):
        p({"iteration": i, "violation": 1.0 / (i + 1), "objective": -float(i + 1)})
    p.close()
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 2  # the first and the last record only
    assert msgs[0].startswith("iter 0  dual -1  KKT 1 (target 1e-3)")  # smo: objective = dual
    assert msgs[1].startswith("iter 49  dual -50  KKT 0.02 (target 1e-3)")


def test_one_vs_rest_classes_done(caplog, monkeypatch):
    monkeypatch.setenv("OOC_SVM_PROGRESS_SECONDS", "0")
    caplog.set_level(logging.INFO, logger="ooc_svm.progress")
    # one class after the other (smo, active-set, irwls)
    p = TrainProgress("irwls", ("KKT", 1e-3), "log", n_classes=3)
    for k in range(3):
        for v in (1.0, 1e-2, 1e-4):
            p({"iteration": 1, "violation": v, "class": float(k + 1), "class_index": k})
    assert p.classes_done() == 3
    assert caplog.records[0].getMessage().startswith("class 1 (1/3, 0 done)  iter 1")
    assert "class 3 (3/3, 2 done)" in caplog.records[6].getMessage()
    # fused (perf): every class in each pass; done when its gap reaches the target
    p = TrainProgress("perf", ("gap", 1e-3), "log", n_classes=3, fused=True)
    for v in (0.5, 1e-2, 4e-4):
        for k in range(3):
            p({"iteration": 1, "violation": v * (k + 1), "class": float(k), "class_index": k})
    assert p.classes_done() == 2  # gaps 4e-4, 8e-4, 1.2e-3
    assert "classes 2/3 done  worst gap 1.2e-3" in p._desc({"violation": 4e-4})


def test_meter_lines(caplog, monkeypatch):
    monkeypatch.setenv("OOC_SVM_PROGRESS_SECONDS", "0")
    caplog.set_level(logging.INFO, logger="ooc_svm.progress")
    m = Meter("predict", "log", total=1000, unit="rows")
    m.update(250)
    m.close()
    msg = caplog.records[-1].getMessage()
    assert re.match(r"predict  250 of 1,000 rows \(25%\)  [\d,]+ rows/s  ETA \d+s  [\d.]+s$", msg)
    off = Meter("predict", "off", total=10)
    off.update(5)
    assert off.n == 0


def test_predict_meter_lines(work):
    assert _train(work, "-o", "mp", "-q").returncode == 0
    r = subprocess.run(
        [sys.executable, "-m", "ooc_svm", "predict", "mp", "s.zarr", "-o", "p.txt"]
        + ["--batch-rows", "150"],
        capture_output=True,
        text=True,
        cwd=work,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "OOC_SVM_PROGRESS_SECONDS": "0"},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("predict  ")]
    assert [ln.split("  ")[1] for ln in lines] == [
        "150 of 600 rows (25%)",
        "300 of 600 rows (50%)",
        "450 of 600 rows (75%)",
        "600 of 600 rows (100%)",
    ], r.stderr


def test_one_vs_rest_fused_lines_name_no_single_class(caplog, monkeypatch):
    """perf one-vs-rest trains every class in each pass: its plain lines count the classes
    done and give the worst gap, never "class 1 (1/3, ...)" for all of them."""
    monkeypatch.setenv("OOC_SVM_PROGRESS_SECONDS", "0")
    caplog.set_level(logging.INFO, logger="ooc_svm.progress")
    p = TrainProgress("perf", ("gap", 1e-3), "log", n_classes=3, fused=True)
    for it, v in enumerate((0.5, 1e-2, 4e-4)):
        for k in range(3):
            p({"iteration": it, "passes": it + 1, "objective": 10.0 * k, "violation": v * (k + 1),
               "class": float(k + 1), "class_index": k})  # fmt: skip
    p.close()
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs and not any(m.startswith("class ") for m in msgs), msgs
    assert msgs[-1].startswith("classes 2/3 done  iter 2  passes 3  worst gap 1.2e-3"), msgs
    assert not any("obj " in m for m in msgs), msgs
