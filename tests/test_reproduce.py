"""The paper-reproduction scripts (scripts/reproduce/) run end to end in their --quick mode.

Slow (each script takes minutes on 2 cores): excluded from `make test`, run by `make test-all`.
They need the real a9a / w8a files (skipped, with the reason, when absent); the comparators
(SVMlight, SVMperf) are used when $SVMLIGHT_LEARN / $SVMPERF_LEARN are set, else skipped by
the scripts themselves with a message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import dataset

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts" / "reproduce"


def _run(script: str, out: Path, *extra: str) -> str:
    dataset("a9a/a9a")
    dataset("w8a/w8a.bz2")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--quick", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_platt1998_quick(tmp_path):
    out = _run("platt1998.py", tmp_path)
    raw = json.loads((tmp_path / "platt1998.json").read_text())
    assert len(raw["results"]) == 4
    for res in raw["results"]:
        assert len(res["runs"]) == 3
        for rec in res["runs"]:
            # every SMO run converged and split its SVs into free and bound
            for s in ("smo-platt", "smo-wss2"):
                assert (
                    rec[s]["converged"] and rec[s]["n_free"] + rec[s]["n_bound"] == rec[s]["n_sv"]
                )
            # the chunking baseline solves the same problem: nearly the same bound SVs
            ch = rec["chunking"]
            assert abs(ch["n_bound"] - rec["smo-wss2"]["n_bound"]) <= 0.05 * ch["n_bound"] + 5
    assert (tmp_path / "platt1998-adult-rbf.png").stat().st_size > 1000
    assert "paper free" in out


@pytest.mark.slow
def test_scheinberg2006_quick(tmp_path):
    _run("scheinberg2006.py", tmp_path)
    raw = json.loads((tmp_path / "scheinberg2006.json").read_text())
    assert len(raw["results"]) == 2
    for rec in raw["results"]:
        assert rec["ours"]["converged"]
        assert rec["ours"]["n_s"] + rec["ours"]["n_c"] == rec["ours"]["n_sv"]


@pytest.mark.slow
def test_perezcruz_quick(tmp_path):
    _run("perezcruz.py", tmp_path)
    raw = json.loads((tmp_path / "perezcruz.json").read_text())
    assert [r["row"][0] for r in raw["table3"]] == ["Adult1", "Web1"]
    assert [r["q"] for r in raw["table2"]] == [20, 40, 70]
    for r in raw["table3"] + raw["table2"]:
        assert r["ours"]["converged"] and r["ours"]["n_sv"] > 0


@pytest.mark.slow
def test_joachims2006_quick(tmp_path):
    _run("joachims2006.py", tmp_path)
    raw = json.loads((tmp_path / "joachims2006.json").read_text())
    for key in ("scaling", "roc", "eps", "C", "adult_web"):
        for rec in raw[key]:
            assert rec["paper"]["converged"] and rec["accelerated"]["converged"]
    assert (tmp_path / "joachims2006-scaling.png").stat().st_size > 1000


@pytest.mark.slow
def test_joachims2006_like_quick(tmp_path):
    """A Table 1 stand-in: synth rows of KDD04 Physics' width (78) and row length (30)."""
    _run("joachims2006.py", tmp_path, "--like", "kdd04", "--parts", "1", "--c-synth", "1000")
    raw = json.loads((tmp_path / "joachims2006.json").read_text())
    assert raw["scaling"]
    for rec in raw["scaling"]:
        assert rec["paper"]["converged"] and rec["accelerated"]["converged"]
    assert raw["like"] == "kdd04"
    assert raw["synth"]["features"] == 78 and raw["synth"]["nnz_per_row"] == 30
