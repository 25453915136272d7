"""Convergence and ROC plots a person can read (headless, matplotlib Agg): labelled axes,
the tolerance drawn, no plunge to 1e-16, per-class lines, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from conftest import ooc_cmd

pytest.importorskip("matplotlib")

from ooc_svm.evaluation.reports import (
    GAP_FLOOR,
    HistoryError,
    HistoryWriter,
    history_figure,
    roc_figure,
)


def _write(path, header, recs):
    w = HistoryWriter(str(path), header=header)
    for r in recs:
        w(r)
    w.close()
    return str(path)


def _perf_history(path, classes=None):
    """perf-like records; the last objective equals the best (old plot: 1e-16 there)."""
    recs = []
    for c, k in [(None, None)] if classes is None else [(c, k) for k, c in enumerate(classes)]:
        for i in range(1, 16):
            P = 100.0 + 50.0 * 0.6**i
            r = {
                "iteration": i,
                "objective": P if i < 15 else 100.0 + 50.0 * 0.6**14,
                "lower_bound": 100.0 - 80.0 * 0.5**i,
                "violation": 0.5 * 0.55**i if k is None else (0.5 + 0.1 * k) * 0.55**i,
                "passes": i + 1,
                "seconds": 0.01 * i,
            }
            if c is not None:
                r.update({"class": c, "class_index": k})
            recs.append(r)
    if classes is not None:  # interleaved, as one-vs-rest runs with shared passes write them
        recs.sort(key=lambda r: (r["iteration"], r["class_index"]))
    return _write(path, {"solver": "perf", "store": "s.zarr", "params": {"eps": 0.001}}, recs)


def _log_axes_ydata(fig):
    out = []
    for ax in fig.axes:
        if ax.get_yscale() == "log":
            for line in ax.get_lines():
                if line.get_label().startswith("tolerance"):
                    continue
                y = np.asarray(line.get_ydata(), dtype=float)
                out.append((ax, y[np.isfinite(y)]))
    return out


def test_perf_history_labels_tolerance_and_no_plunge(tmp_path):
    fig = history_figure(_perf_history(tmp_path / "h.jsonl"))
    drawn = [ax for ax in fig.axes if ax.get_lines()]
    assert len(drawn) == 4
    for ax in drawn:
        assert ax.get_ylabel().strip(), "every panel has a labelled y axis"
    gap_axes = [ax for ax in drawn if "lower bound" in ax.get_ylabel()]
    assert len(gap_axes) == 2 and all(ax.get_yscale() == "log" for ax in gap_axes)
    viol_axes = [ax for ax in drawn if "violation" in ax.get_ylabel()]
    assert len(viol_axes) == 2
    for ax in viol_axes:
        tol = [ln for ln in ax.get_lines() if ln.get_label().startswith("tolerance")]
        assert len(tol) == 1 and np.allclose(tol[0].get_ydata(), 1e-3)
    assert {ax.get_xlabel() for ax in viol_axes} == {"passes over the data", "seconds"}
    # the certified gap ends well above 0: nothing near 1e-16, nothing below the floor
    for ax, y in _log_axes_ydata(fig):
        assert y.size and y.min() >= GAP_FLOOR * 100.0 * 0.999, (ax.get_ylabel(), y.min())
    gap = gap_axes[0].get_lines()[0].get_ydata()
    # P_best - LB_best at the last point, not "objective - best" = 0
    assert np.isclose(gap[-1], (100 + 50 * 0.6**14) - (100 - 80 * 0.5**15))


def test_exact_solution_is_drawn_at_the_floor_not_at_1e16(tmp_path):
    recs = [
        {
            "iteration": i,
            "objective": 10.0 + 2.0**-i,
            "dual_objective": -(10.0 - 2.0**-i),
            "violation": 2.0**-i,
            "passes": i,
            "seconds": 0.1 * i,
        }
        for i in range(1, 8)
    ]
    recs.append(
        {
            "iteration": 8,
            "objective": 10.0,
            "dual_objective": -10.0,
            "violation": 1e-17,
            "passes": 8,
            "seconds": 0.8,
        }
    )
    fig = history_figure(_write(tmp_path / "h.jsonl", {"solver": "active-set"}, recs))
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_lines()]
    assert any("duality gap" in lb for lb in labels) and any("KKT" in lb for lb in labels)
    for ax, y in _log_axes_ydata(fig):
        floor = 10.0 * GAP_FLOOR if "gap" in ax.get_ylabel() else 1e-3 * 1e-3
        assert y.min() >= floor * 0.999, (ax.get_ylabel(), y.min())
    marks = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label().startswith("below")]
    assert marks, "points below the floor are marked as such"


def test_history_without_passes_or_seconds_says_so(tmp_path):
    recs = [
        {
            "iteration": i,
            "objective": 5 + 1.0 / i,
            "dual_objective": -(5 - 1.0 / i),
            "violation": 1.0 / i,
        }
        for i in range(1, 6)
    ]
    fig = history_figure(_write(tmp_path / "h.jsonl", {"solver": "irwls"}, recs))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("seconds not recorded" in t for t in texts)
    assert any("passes not recorded" in ax.get_xlabel() for ax in fig.axes)
    # no curve is drawn against a made-up seconds axis
    assert sum(1 for ax in fig.axes if ax.get_lines()) == 2


def test_one_vs_rest_history_is_drawn_per_class(tmp_path):
    fig = history_figure(_perf_history(tmp_path / "h.jsonl", classes=[1.0, 2.0, 3.0]))
    for ax in fig.axes:
        labels = [ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith("class")]
        assert labels == ["class 1", "class 2", "class 3"]
        for ln in ax.get_lines():
            if ln.get_label().startswith("class"):  # each class's passes increase
                assert np.all(np.diff(ln.get_xdata()) > 0)
    many = [float(c) for c in range(1, 13)]
    fig = history_figure(_perf_history(tmp_path / "h12.jsonl", classes=many))
    for ax in fig.axes:
        labelled = [ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith("class")]
        assert labelled == ["class 12 (worst of 12)"]  # largest final violation
        assert len(ax.get_lines()) >= 12


@pytest.mark.parametrize(
    "content, what",
    [
        ('{"format": "ooc-svm-model", "kind": "linear"}\n', "not a training history"),
        ("+1 1:0.5 3:1\n-1 2:1\n", ":1: not a JSON line"),
        ("[1, 2, 3]\n", ":1: not a JSON object"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", ":1: binary data"),
        ("", "no iteration records"),
    ],
)
def test_non_history_input_is_an_error(tmp_path, content, what):
    p = tmp_path / "x.jsonl"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    with pytest.raises(HistoryError, match=what):
        history_figure(str(p))


def test_plot_cli_errors_are_one_line(tmp_path):
    os.chdir(tmp_path)
    os.mkdir("model")
    (tmp_path / "model" / "model.json").write_text('{"format": "ooc-svm-model"}')
    for arg, what in (
        ("model", "is a directory"),
        ("model/model.json", "not a training history"),
        ("missing.jsonl", "no such history file"),
    ):
        r = subprocess.run(ooc_cmd("plot", arg, "-o", "x.png"), capture_output=True, text=True)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("ooc-svm: error: ") and what in r.stderr, r.stderr
        assert not os.path.exists("x.png")
    h = _perf_history(tmp_path / "h.jsonl")
    r = subprocess.run(ooc_cmd("plot", h, "-o", "conv.png"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert open("conv.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_roc_marks_prbep_and_names_model_and_store():
    from ooc_svm.evaluation.metrics import prbep

    rng = np.random.default_rng(0)
    y = rng.random(800) < 0.3
    s = y + rng.normal(size=800)
    fig = roc_figure(s, y, "my_model", "test.zarr")
    assert "my_model on test.zarr" in fig._suptitle.get_text()
    want = prbep(y, s, True)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel()
        marks = [ln for ln in ax.get_lines() if ln.get_label().startswith("PRBEP")]
        assert len(marks) == 1 and f"{want:.4f}" in marks[0].get_label()
    pr = fig.axes[1].get_lines()
    mark = [ln for ln in pr if ln.get_label().startswith("PRBEP")][0]
    assert np.isclose(mark.get_xdata()[0], mark.get_ydata()[0])  # precision = recall


def test_evaluate_plot_on_multiclass_prints_metrics_and_skips(tmp_path, make_store):
    import scipy.sparse as sp

    from ooc_svm.model.model import Model

    rng = np.random.default_rng(1)
    X = sp.random(300, 10, density=0.5, format="csr", random_state=1, dtype=np.float32)
    y = rng.integers(1, 4, size=300).astype(float)
    make_store(X, y, name="mc.zarr")
    Model(
        kind="linear",
        n_features=10,
        classes=[1.0, 2.0, 3.0],
        coef_=rng.normal(size=(3, 10)),
        intercept_=np.zeros(3),
    ).save(str(tmp_path / "m"))
    os.chdir(tmp_path)
    # a multiclass store written with integer labels: the store says "ordinal" or "multiclass"
    r = subprocess.run(
        ooc_cmd("evaluate", "m", "mc.zarr", "--plot", "roc.png"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "accuracy" in r.stdout and "plot skipped" in r.stderr
    assert not os.path.exists("roc.png")


def test_evaluate_plot_names_model_and_store(tmp_path, make_store):
    import scipy.sparse as sp

    from ooc_svm.model.model import Model

    rng = np.random.default_rng(2)
    X = sp.random(300, 10, density=0.5, format="csr", random_state=2, dtype=np.float32)
    w = rng.normal(size=10)
    y = np.where(X @ w + 0.3 * rng.normal(size=300) > 0, 1.0, -1.0)
    make_store(X, y, name="b.zarr")
    Model(kind="linear", n_features=10, classes=[-1.0, 1.0], coef_=w, intercept_=0.0).save(
        str(tmp_path / "m")
    )
    os.chdir(tmp_path)
    r = subprocess.run(
        ooc_cmd("evaluate", "m", "b.zarr", "--plot", "roc.png", "--json"),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prbep"] > 0.5
    assert open("roc.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_of_one_recorded_iteration_says_nothing_to_plot(tmp_path):
    """smo in memory records once per --checkpoint-every steps: a history of one iteration
    is one line saying so (and how to record more), not a figure of one dot per panel."""
    import subprocess
    import sys

    rec = {"iteration": 1, "violation": 8e-4, "objective": -303.6, "passes": 1, "seconds": 0.4}
    (tmp_path / "h.jsonl").write_text(
        json.dumps({"header": {"solver": "smo", "store": "s.zarr", "params": {}}})
        + "\n"
        + json.dumps(rec)
        + "\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "ooc_svm", "plot", "h.jsonl", "-o", "h.png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (
        "ooc-svm: error: h.jsonl: one iteration recorded; nothing to plot (smo in memory "
        "records once per --checkpoint-every SMO steps: train again with a smaller "
        "--checkpoint-every to record more)"
    )
    assert not (tmp_path / "h.png").exists()
