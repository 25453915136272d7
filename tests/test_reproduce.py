"""The paper-reproduction scripts (scripts/reproduce/) run end to end in their --quick mode.

Slow (each script takes minutes on 2 cores): excluded from `make test`, run by `make test-all`;
the checks of the generator of Platt's artificial data (section 3.3) are quick and always run.
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
def test_scheinberg2006_incremental_quick(tmp_path):
    """Table 6's incremental mode: rows appended in 4 parts, each training warm-started from
    the last model, ends at the batch optimum."""
    _run("scheinberg2006.py", tmp_path, "--tables", "6", "--tol", "1e-6", "--no-light")
    raw = json.loads((tmp_path / "scheinberg2006.json").read_text())
    [rec] = raw["results"]
    inc, batch = rec["inc"]["4"], rec["ours"]
    assert inc["steps"] == 4 and inc["warm_start"] and not batch["warm_start"]
    assert (inc["n_s"], inc["n_c"], inc["n_rows"]) == (batch["n_s"], batch["n_c"], rec["n"])
    assert inc["dual_rel_diff"] <= 1e-6 and inc["same"] is True


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
    """A Table 1 stand-in: synth rows of KDD04 Physics' width (78) and row length (30), with
    the epsilon sweep (part 5) on its largest size."""
    _run("joachims2006.py", tmp_path, "--like", "kdd04", "--parts", "1,5", "--c-synth", "1000")
    raw = json.loads((tmp_path / "joachims2006.json").read_text())
    assert raw["scaling"]
    for rec in raw["scaling"] + raw["eps_synth"]:
        assert rec["paper"]["converged"] and rec["accelerated"]["converged"]
    eps = raw["eps_synth"]
    assert [r["eps"] for r in eps] == [0.1, 0.01, 0.001]
    assert {r["n"] for r in eps} == {max(r["n"] for r in raw["scaling"])}
    # a tighter epsilon never takes fewer cutting planes (Figure 5's trend)
    assert eps[0]["paper"]["iterations"] <= eps[-1]["paper"]["iterations"]
    assert raw["like"] == "kdd04"
    assert raw["synth"]["features"] == 78 and raw["synth"]["nnz_per_row"] == 30


@pytest.mark.slow
def test_joachims2006_like_c11_is_unbalanced(tmp_path):
    """The Reuters C11 stand-in: RCV1's width and row length with an unbalanced class ratio
    (3 % positives before 1 % flipped labels), which the CCAT one (47 %) does not have."""
    _run(
        "joachims2006.py", tmp_path, "--like", "c11", "--parts", "1", "--sizes", "3000",
        "--c-synth", "1000",
    )  # fmt: skip
    raw = json.loads((tmp_path / "joachims2006.json").read_text())
    assert raw["synth"]["features"] == 47236 and raw["synth"]["nnz_per_row"] == 76
    assert raw["synth"]["positive_fraction"] == 0.03 and raw["synth"]["noise"] == 0.01
    assert 0.02 < raw["positive_share"] < 0.06
    assert raw["scaling"][0]["paper"]["converged"]


def _artificial():
    """The generator and report of Platt's section 3.3 (a script, imported from its folder)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import platt1998_artificial as art
    finally:
        sys.path.remove(str(SCRIPTS))
    return art


def test_platt_artificial_data_is_deterministic_and_nested():
    import numpy as np

    art = _artificial()
    for kind in ("separable", "noise"):
        X, y = art.generate(kind, 1500, seed=3)
        X2, y2 = art.generate(kind, 1500, seed=3)
        assert (X != X2).nnz == 0 and np.array_equal(y, y2)
        # a smaller set is the first rows of a larger one (nested sizes, as in the paper)
        Xs, ys = art.generate(kind, 400, seed=3)
        assert (Xs != X[:400]).nnz == 0 and np.array_equal(ys, y[:400])
        Xo, _ = art.generate(kind, 400, seed=4)
        assert (Xo != Xs).nnz > 0
        assert X.indptr.dtype == np.int64


def test_platt_artificial_data_has_the_papers_properties():
    import numpy as np

    art = _artificial()
    for kind in ("separable", "noise"):
        X, y = art.generate(kind, 3000, seed=0)
        assert X.shape == (3000, 300)
        assert set(np.unique(X.data)) == {1.0} and set(np.unique(y)) == {-1.0, 1.0}
        # 10 % ones: 300 * 3000 Bernoulli(0.1) draws lie within 0.1 +- 0.003 (> 5 sd)
        assert abs(X.nnz / (3000 * 300) - 0.1) < 0.003
    # separable: the hidden weights (the stream's first 300 draws) put every kept point
    # outside the slab |w.x| <= 1, on the side of its label
    X, y = art.generate("separable", 3000, seed=0)
    w = np.random.default_rng(0).uniform(-1.0, 1.0, 300)
    assert np.all(y * (X @ w) > 1.0)
    # noise: labels are fair coins, unrelated to the inputs
    X, y = art.generate("noise", 3000, seed=0)
    assert abs(y.mean()) < 0.06
    corr = np.abs(np.asarray(X.T @ y).ravel()) / 3000
    assert corr.max() < 0.03
    with pytest.raises(ValueError, match="unknown kind"):
        art.generate("spiral", 10, seed=0)


def test_platt_artificial_text_and_count_rule(tmp_path):

    art = _artificial()
    X, y = art.generate("noise", 50, seed=1)
    lines = art.write_text(X, y, tmp_path / "a.txt").read_text().splitlines()
    assert [float(ln.split()[0]) for ln in lines] == list(y)
    for i, ln in enumerate(lines):
        cols = [int(t.split(":")[0]) - 1 for t in ln.split()[1:]]
        assert cols == list(X[i].indices) and all(t.endswith(":1") for t in ln.split()[1:])
    # the non-sparse stand-in: all 300 inputs written, zeros included, the same ones
    dense = art.write_text(X, y, tmp_path / "d.txt", dense=True).read_text().splitlines()
    for i, ln in enumerate(dense):
        toks = ln.split()[1:]
        assert len(toks) == 300
        assert [j for j, t in enumerate(toks) if t.endswith(":1")] == list(X[i].indices)
    # the project's count rule: within 10 % of the paper's figure; a paper 0 matches only 0
    assert art.within(109, 100) and not art.within(111, 100)
    assert art.within(0, 0) and not art.within(1, 0) and art.within(None, 5) is None


@pytest.mark.slow
def test_platt_artificial_end_to_end(tmp_path):
    """Every experiment and solver on two tiny sizes: the same solution from all of them."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "platt1998_artificial.py"), "--sizes", "150,300"]
        + ["--out", str(tmp_path), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = json.loads((tmp_path / "platt1998-artificial.json").read_text())
    assert [r["name"] for r in raw["results"]] == list(_artificial().PAPER)
    for res in raw["results"]:
        assert [rec["n"] for rec in res["runs"]] == [150, 300]
        for rec in res["runs"]:
            ref = rec["smo-wss2"]
            assert ref["converged"] and ref["n_free"] + ref["n_bound"] == ref["n_sv"]
            for s in ("smo-platt", "chunking"):
                assert abs(rec[s]["n_bound"] - ref["n_bound"]) <= 0.05 * ref["n_bound"] + 3
    assert "paper chunk/SMO" in proc.stdout


@pytest.mark.slow
def test_platt_nonsparse_end_to_end(tmp_path):
    """The sparse / non-sparse pairs on one tiny size: the same SVs from both files."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "platt1998_nonsparse.py"), "--sizes", "200"]
        + ["--experiments", "noise-linear", "--out", str(tmp_path), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = json.loads((tmp_path / "platt1998-nonsparse.json").read_text())
    (rec,) = raw["results"][0]["runs"]
    assert rec["nnz_dense"] == 200 * 300 and rec["nnz_sparse"] < 0.2 * 200 * 300
    for s in ("smo-platt", "smo-wss2"):
        a, b = rec[f"{s}-sparse"], rec[f"{s}-dense"]
        assert a["converged"] and b["converged"] and abs(a["n_sv"] - b["n_sv"]) <= 2
    assert "paper ratio" in proc.stdout
