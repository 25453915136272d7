"""Training reports: per-iteration history files (JSON lines) and convergence / ROC plots.

Plots need matplotlib (the ``plot`` extra); everything else works without it.
"""

from __future__ import annotations

import json
import math
import os
from typing import IO

import numpy as np

from ._util import json_default


class HistoryWriter:
    """Append one JSON object per iteration to a ``.jsonl`` file, flushed as it goes.

    Used as a solver callback: ``HistoryWriter(path)(record)``.
    """

    def __init__(self, path: str, header: dict | None = None):
        self.path = path
        self._f: IO[str] = open(path, "w")
        if header:
            self._f.write(json.dumps({"header": header}, default=json_default) + "\n")
            self._f.flush()

    def __call__(self, record: dict) -> None:
        self._f.write(json.dumps(record, default=json_default) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_history(path: str) -> tuple[dict, list[dict]]:
    """Return ``(header, records)`` of a history file."""
    header: dict = {}
    records: list[dict] = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}:{n}: not a JSON line") from None
            if "header" in obj and len(obj) == 1:
                header = obj["header"]
            else:
                records.append(obj)
    return header, records


def _series(records: list[dict], key: str) -> np.ndarray:
    return np.array(
        [float(r[key]) if r.get(key) is not None else math.nan for r in records], dtype=float
    )


def plot_history(path: str, out: str) -> None:
    """Convergence plot: objective gap (to the best objective seen) and violation, against
    passes and against seconds, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    header, recs = read_history(path)
    if not recs:
        raise ValueError(f"{path}: no iteration records to plot")
    passes = _series(recs, "passes")
    secs = _series(recs, "seconds")
    if np.all(np.isnan(passes)):
        passes = np.arange(1, len(recs) + 1, dtype=float)
    if np.all(np.isnan(secs)):
        secs = np.arange(1, len(recs) + 1, dtype=float)
    obj = _series(recs, "objective")
    if np.all(np.isnan(obj)):
        obj = _series(recs, "dual_objective")
    viol = _series(recs, "violation")
    if np.all(np.isnan(viol)):
        viol = _series(recs, "gap")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, x, xl in ((axes[0], passes, "passes"), (axes[1], secs, "seconds")):
        if not np.all(np.isnan(obj)):
            best = np.nanmin(obj)
            gap = np.maximum(obj - best, 1e-16)
            ax.semilogy(x, gap, "o-", ms=3, label="objective − best")
        if not np.all(np.isnan(viol)):
            ax.semilogy(x, np.maximum(np.abs(viol), 1e-16), "s-", ms=3, label="violation")
        ax.set_xlabel(xl)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    title = header.get("solver", "") if header else ""
    fig.suptitle(f"convergence {title}".strip())
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot_roc_pr(scores: np.ndarray, positive: np.ndarray, out: str) -> None:
    """ROC and precision–recall curves of binary scores (``positive`` is a boolean array)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = np.argsort(-scores, kind="mergesort")
    pos = np.asarray(positive, dtype=bool)[order]
    tp = np.cumsum(pos)
    fp = np.cumsum(~pos)
    P = max(int(pos.sum()), 1)
    N = max(int((~pos).sum()), 1)
    tpr = np.concatenate([[0.0], tp / P])
    fpr = np.concatenate([[0.0], fp / N])
    prec = tp / np.maximum(tp + fp, 1)
    rec = tp / P
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    axes[0].plot(fpr, tpr)
    axes[0].plot([0, 1], [0, 1], "k:", lw=0.8)
    axes[0].set_xlabel("false positive rate")
    axes[0].set_ylabel("true positive rate")
    axes[0].set_title(f"ROC (AUC {np.trapezoid(tpr, fpr):.4f})")
    axes[1].plot(rec, prec)
    axes[1].set_xlabel("recall")
    axes[1].set_ylabel("precision")
    axes[1].set_title("precision–recall")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
