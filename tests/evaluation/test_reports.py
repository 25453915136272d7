"""History files, convergence and ROC plots, TOML config loading."""

from __future__ import annotations

import numpy as np
import pytest

from ooc_svm.cli import main
from ooc_svm.commands.train_flags import load_config
from ooc_svm.evaluation.reports import HistoryWriter, plot_roc_pr, read_history

pytest.importorskip("matplotlib")


def _is_png(path) -> bool:
    data = open(path, "rb").read()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_history_round_trip_and_plot(tmp_path):
    h = tmp_path / "h.jsonl"
    w = HistoryWriter(str(h), header={"solver": "perf"})
    for i in range(1, 11):
        w(
            {
                "iteration": i,
                "objective": 1.0 + 2.0**-i,
                "violation": 10.0**-i,
                "passes": i,
                "seconds": 0.1 * i,
                "working_set": i,
                "w": np.float32(1.5),
            }
        )
    w.close()
    header, recs = read_history(str(h))
    assert header == {"solver": "perf"} and len(recs) == 10 and recs[0]["w"] == 1.5
    out = tmp_path / "conv.png"
    assert main(["plot", str(h), "-o", str(out)]) == 0
    assert _is_png(out)


def test_plot_errors(tmp_path, capsys):
    h = tmp_path / "empty.jsonl"
    h.write_text("")
    assert main(["plot", str(h), "-o", str(tmp_path / "x.png")]) == 1
    assert "no iteration records" in capsys.readouterr().err
    h.write_text("{not json\n")
    assert main(["plot", str(h), "-o", str(tmp_path / "x.png")]) == 1
    assert "empty.jsonl:1" in capsys.readouterr().err


def test_roc_plot(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.random(500) < 0.3
    s = y + rng.normal(size=500)
    out = tmp_path / "roc.png"
    plot_roc_pr(s, y, str(out))
    assert _is_png(out)


def test_load_config(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("C = 2.0\neps = 0.01\n[perf]\neps = 0.005\nmax-inactive = 7\n[smo]\ntol = 1.0\n")
    assert load_config(str(f), "perf") == {"C": 2.0, "eps": 0.005, "max_inactive": 7}
    assert load_config(str(f), "smo") == {"C": 2.0, "eps": 0.01, "tol": 1.0}
    f.write_text("C = \n")
    with pytest.raises(OSError, match="invalid TOML"):
        load_config(str(f), "perf")


def test_train_history_and_evaluate_plot(tmp_path):
    """End to end: train --history, plot it, evaluate --plot ROC/PR."""
    import scipy.sparse as sp

    from ooc_svm.store import csr_to_shards, write_store

    rng = np.random.default_rng(0)
    X = sp.random(600, 30, density=0.3, format="csr", random_state=0, dtype=np.float32)
    y = np.where(X @ rng.normal(size=30) > 0, 1.0, -1.0)
    store = str(tmp_path / "s.zarr")
    write_store(store, csr_to_shards(X, y, shard_rows=200))
    h, model = tmp_path / "h.jsonl", tmp_path / "m"
    assert main(["train", "--solver", "perf", store, "-o", str(model), "--history", str(h)]) == 0
    header, recs = read_history(str(h))
    assert header["solver"] == "perf" and len(recs) >= 2
    assert all("objective" in r and "passes" in r and "seconds" in r for r in recs)
    assert main(["plot", str(h), "-o", str(tmp_path / "conv.png")]) == 0
    assert _is_png(tmp_path / "conv.png")
    assert main(["evaluate", str(model), store, "--plot", str(tmp_path / "roc.png")]) == 0
    assert _is_png(tmp_path / "roc.png")
