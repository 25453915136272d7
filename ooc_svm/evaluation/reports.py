"""Training reports: per-iteration history files (JSON lines) and convergence / ROC plots.

Plots need matplotlib (the ``plot`` extra); everything else works without it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import numpy as np

from .._util import json_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class HistoryWriter:
    """Append one JSON object per iteration to a ``.jsonl`` file, flushed as it goes.

    Used as a solver callback: ``HistoryWriter(path)(record)``.
    """

    def __init__(self, path: str, header: dict | None = None) -> None:
        self.path = path
        from .._util import OutputError, make_output_parent

        make_output_parent(os.path.abspath(str(path)), str(path))
        try:
            self._f: IO[str] = open(path, "w")
        except OSError as e:
            raise OutputError(
                f"--history {path}: cannot write ({e.strerror or e}); give a file in a directory "
                "you can write"
            ) from None
        if header:
            self._f.write(json_text({"header": header}) + "\n")
            self._f.flush()

    def __call__(self, record: dict) -> None:
        self._f.write(json_text(record) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class HistoryError(ValueError):
    """A file is not a training history (the message names the file and line)."""


def read_history(path: str) -> tuple[dict, list[dict]]:
    """Return ``(header, records)`` of a history file.

    Raises
    ------
    HistoryError
        The file is not JSON lines of objects (file and line in the message).
    """
    header: dict = {}
    records: list[dict] = []
    if os.path.isdir(path):
        raise HistoryError(
            f"{path}: is a directory, not a history file (write one with `ooc-svm train "
            "--history FILE.jsonl`)"
        )
    try:
        f = open(path, "rb")  # closed below
    except FileNotFoundError:
        raise HistoryError(f"{path}: no such history file") from None
    with f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise HistoryError(
                    f"{path}:{n}: binary data, not a JSON-lines history (write one with "
                    "`ooc-svm train --history FILE.jsonl`)"
                ) from None
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                raise HistoryError(
                    f"{path}:{n}: not a JSON line; a history is written by `ooc-svm train "
                    "--history FILE.jsonl`"
                ) from None
            if not isinstance(obj, dict):
                raise HistoryError(f"{path}:{n}: not a JSON object; not a training history")
            if "header" in obj and len(obj) == 1:
                header = obj["header"]
            else:
                records.append(obj)
    return header, records


def _series(records: list[dict], key: str) -> np.ndarray:
    return np.array(
        [float(r[key]) if r.get(key) is not None else math.nan for r in records], dtype=float
    )


def _has(recs: list[dict], key: str) -> bool:
    return any(r.get(key) is not None for r in recs)


#: history keys that make a record an iteration record of some solver
_ITERATION_KEYS = ("objective", "dual_objective", "violation", "gap", "lower_bound")
#: gaps below this fraction of the objective are float64 noise: drawn at that floor
GAP_FLOOR = 1e-10
#: at most this many classes of a one-vs-rest history are drawn one line each (else: worst)
MAX_CLASS_LINES = 8


@dataclass(frozen=True)
class HistoryLabels:
    """How a solver's history reads, from the solver's spec (:func:`ooc_svm.api.history_labels`;
    this module sits below the solvers and names none): the parameter holding its stopping
    tolerance and its default, the name of its recorded violation, whether the ``objective``
    of its records is a primal value, and why a history may hold a single iteration. The
    defaults read a history of unknown origin."""

    tolerance: str = "tol"
    tolerance_default: float | None = None
    violation: str = "KKT violation"
    primal_objective: bool = False
    few_records_hint: str = ""


#: how a history names its solver → how it reads (None: the defaults)
LabelsFor = Callable[[str], "HistoryLabels | None"]


def _labels(header: dict, labels_for: LabelsFor | None) -> HistoryLabels:
    solver = str(header.get("solver", "") or "")
    found = labels_for(solver) if labels_for is not None and solver else None
    return found or HistoryLabels()


def _tolerance(header: dict, labels: HistoryLabels) -> tuple[float | None, str]:
    """The stopping tolerance of the run (header params, else the solver's default)."""
    params = header.get("params") or {}
    name = labels.tolerance
    for key in (name, "eps", "tol"):
        if params.get(key) is not None:
            return float(params[key]), key
    if labels.tolerance_default is not None:
        return float(labels.tolerance_default), name
    return None, name


def _certified_gap(recs: list[dict]) -> tuple[np.ndarray | None, str]:
    """A gap that bounds the distance to the optimum at every record, or None.

    ``lower_bound`` (perf): best primal so far − best lower bound so far. ``dual_objective``
    (dual solvers): best primal − best dual, with the dual in LIBSVM's minimisation form
    (½αᵀQα − eᵀα ≤ 0, so the gap is P + D) or in maximisation form (P − D).
    """
    P = _series(recs, "objective")
    if np.all(np.isnan(P)):
        return None, ""
    Pbest = np.fmin.accumulate(np.where(np.isnan(P), np.inf, P))
    if _has(recs, "lower_bound"):
        lb = _series(recs, "lower_bound")
        LB = np.fmax.accumulate(np.where(np.isnan(lb), -np.inf, lb))
        return Pbest - LB, "primal − lower bound\n(certified gap)"
    if _has(recs, "dual_objective"):
        D = _series(recs, "dual_objective")
        ok = ~np.isnan(D)
        dual = -D if np.nanmedian(D[ok]) <= 0 else D  # both forms -> a lower bound on P*
        best = np.fmax.accumulate(np.where(np.isnan(dual), -np.inf, dual))
        return Pbest - best, "primal − dual\n(duality gap)"
    return None, ""


def _groups(recs: list[dict]) -> list[tuple[str, list[dict]]]:
    """Records per class for one-vs-rest histories (``class_index``), else one group."""
    if not any("class_index" in r for r in recs):
        return [("", recs)]
    by: dict[int, list[dict]] = {}
    names: dict[int, str] = {}
    for r in recs:
        k = int(r.get("class_index", -1))
        by.setdefault(k, []).append(r)
        c = r.get("class", k)
        names[k] = f"class {float(c):g}" if isinstance(c, (int, float)) else f"class {c}"
    return [(names[k], by[k]) for k in sorted(by)]


def _x_values(recs: list[dict], key: str) -> np.ndarray | None:
    x = _series(recs, key)
    return None if np.all(np.isnan(x)) else x


def _iteration_records(path: str) -> tuple[dict, list[dict]]:
    """``(header, records)`` of a history file that has iteration records, else HistoryError."""
    header, recs = read_history(path)
    if not recs:
        raise HistoryError(f"{path}: no iteration records to plot")
    if not any(any(k in r for k in _ITERATION_KEYS) for r in recs):
        keys = ", ".join(list(recs[0])[:5])
        raise HistoryError(
            f"{path}: not a training history (records have {keys}, none of "
            f"{', '.join(_ITERATION_KEYS)}); write one with `ooc-svm train --history FILE.jsonl`"
        )
    return header, recs


def _worst_group(groups: list[tuple[str, list[dict]]]) -> int:
    """The worst class: largest final stopping value (then: most records)."""

    def final_violation(g):
        v = _series(g[1], "violation")
        v = v[~np.isnan(v)]
        return (float(np.abs(v[-1])) if v.size else -1.0, len(g[1]))

    return max(range(len(groups)), key=lambda i: final_violation(groups[i]))


def _not_recorded(axes, col: int, solver: str) -> None:
    """A column whose x quantity (seconds) the history does not record says so."""
    for row in range(2):
        ax = axes[row][col]
        ax.text(
            0.5,
            0.5,
            f"seconds not recorded\nin this {solver or 'training'} history",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=12,
            color="0.35",
        )
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][col].set_title("against seconds")


@dataclass
class _Panels:
    """What every column of the convergence figure draws the same way."""

    groups: list[tuple[str, list[dict]]]
    worst: int
    obj_key: str
    viol_key: str
    tol: float | None
    floors: dict[tuple[int, int], float]


def _draw_lines(axes, col: int, xkey: str, pn: _Panels) -> None:
    """Every group's gap (or objective) line and stopping-quantity line in column ``col``."""
    many = len(pn.groups) > MAX_CLASS_LINES
    for gi, (name, g) in enumerate(pn.groups):
        x = _x_values(g, xkey)
        if x is None:
            x = np.arange(1, len(g) + 1, dtype=float)
        if many and gi != pn.worst:
            style = dict(color="0.7", lw=0.6, alpha=0.5, label=None)
        else:
            label = name + (f" (worst of {len(pn.groups)})" if many else "")
            style = dict(lw=1.4, marker="o", ms=2.5, label=label or None)
        # row 0: certified gap, or the objective on a linear scale
        gap, _ = _certified_gap(g)
        ax = axes[0][col]
        if gap is not None:
            P = np.abs(_series(g, "objective"))
            floor = GAP_FLOOR * max(1.0, float(np.nanmax(P)) if np.any(~np.isnan(P)) else 1.0)
            _log_line(ax, x, gap, floor, style)
            pn.floors[(0, col)] = min(pn.floors.get((0, col), np.inf), floor)
        else:
            ax.plot(x, _series(g, pn.obj_key), **style)
        # row 1: the stopping quantity and the tolerance
        v = np.abs(_series(g, pn.viol_key))
        if not np.all(np.isnan(v)):
            vmax = float(np.nanmax(v))
            floor = (pn.tol if pn.tol else max(vmax, 1e-300)) * 1e-3
            _log_line(axes[1][col], x, v, floor, style)
            pn.floors[(1, col)] = min(pn.floors.get((1, col), np.inf), floor)


def history_figure(path: str, labels_for: LabelsFor | None = None) -> Figure:
    """Build the convergence figure of a history file (matplotlib Figure, Agg backend).

    Layout: two rows — the certified gap (perf: primal − lower bound; dual solvers: primal
    − dual), or the objective itself when the history has no bound; then the stopping
    quantity (violation) with the solver's tolerance drawn — against passes (left) and
    seconds (right), log scale. A column whose x quantity the history does not record says
    so instead of drawing a false panel. One-vs-rest histories get one line per class (at
    most :data:`MAX_CLASS_LINES`, else the worst class in colour and the others in grey).
    Values below a floor (gap: :data:`GAP_FLOOR` of the objective; violation: tolerance / 1000) are
    drawn at the floor with a triangle marker, so nothing plunges to 1e-16. ``labels_for``
    gives the :class:`HistoryLabels` of the solver the header names.

    Raises
    ------
    HistoryError
        The file is not a training history.
    """
    header, recs = _iteration_records(path)
    solver = str(header.get("solver", "") or "")
    labels = _labels(header, labels_for)
    groups = _groups(recs)
    if groups and all(len(g) < 2 for _, g in groups):
        hint = labels.few_records_hint
        raise HistoryError(
            f"{path}: one iteration recorded{' per class' if len(groups) > 1 else ''}; nothing "
            f"to plot{hint}"
        )
    plt = _pyplot()
    tol, tol_name = _tolerance(header, labels)
    gap_label = next(
        (lab for _, g in groups for gap, lab in [_certified_gap(g)] if gap is not None), ""
    )
    obj_key = "objective" if _has(recs, "objective") else "dual_objective"
    viol_key = "violation" if _has(recs, "violation") else "gap"
    viol_label = labels.violation
    have_passes = _has(recs, "passes")
    pn = _Panels(groups, _worst_group(groups), obj_key, viol_key, tol, {})
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex="col", squeeze=False)
    for col, (xkey, xlabel) in enumerate(
        (("passes", "passes over the data"), ("seconds", "seconds"))
    ):
        if xkey == "passes" and not have_passes:
            xkey, xlabel = "iteration", "iteration (passes not recorded)"
        elif xkey == "seconds" and not _has(recs, "seconds"):
            _not_recorded(axes, col, solver)
            continue
        _draw_lines(axes, col, xkey, pn)
        ax0, ax1 = axes[0][col], axes[1][col]
        if gap_label:
            ax0.set_yscale("log")
            ax0.set_ylabel(gap_label)
        else:
            ax0.set_ylabel(_objective_label(recs, obj_key, labels.primal_objective))
        ax1.set_yscale("log")
        ax1.set_ylabel(viol_label)
        if tol:
            ax1.axhline(tol, color="C3", ls="--", lw=1.2, label=f"tolerance {tol_name} = {tol:g}")
        ax1.set_xlabel(xlabel)
        ax0.set_title(f"against {xkey if xkey != 'iteration' else 'iterations'}")
        if not have_passes and col == 0:
            ax0.set_title("against iterations — passes not recorded")
        for ax in (ax0, ax1):
            _grid_legend(ax)
    # for tests: the floor of each log panel (an attribute matplotlib's Figure does not declare)
    fig._ooc_svm_floors = pn.floors
    what = f"{solver} " if solver else ""
    store = header.get("store")
    multi = f", one-vs-rest, {len(groups)} classes" if len(groups) > 1 else ""
    fig.suptitle(f"convergence of {what}training" + (f" on {store}" if store else "") + multi)
    fig.tight_layout()
    return fig


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid_legend(ax) -> None:
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(fontsize=8, loc="best")


def _objective_label(recs: list[dict], key: str, primal: bool) -> str:
    """Axis label of an objective drawn as recorded (no bound to make a gap from)."""
    v = _series(recs, key)
    v = v[~np.isnan(v)]
    if key == "dual_objective" or (not primal and v.size and np.all(v <= 0)):
        # dual solvers that record only ½αᵀQα − eᵀα (≤ 0) under "objective"
        return "dual objective ½αᵀQα − eᵀα\n(as recorded; no primal recorded)"
    return "primal objective\n(no lower bound recorded)"


def _log_line(ax, x, y, floor, style) -> None:
    """Draw y on a log axis, values below ``floor`` at the floor with a triangle marker."""
    y = np.asarray(y, dtype=float)
    ok = ~np.isnan(y)
    low = ok & (y < floor)
    yy = np.where(low, floor, y)
    ax.plot(x[ok], yy[ok], **style)
    if np.any(low):
        label = f"below {floor:.0e} (drawn at it)"
        seen = label in ax.get_legend_handles_labels()[1]
        ax.plot(x[low], yy[low], "v", color="k", ms=5, label=None if seen else label)


def plot_history(path: str, out: str, labels_for: LabelsFor | None = None) -> None:
    """Write the convergence plot of a history file (see :func:`history_figure`) as PNG."""
    import matplotlib.pyplot as plt

    fig = history_figure(path, labels_for)
    try:
        parent = os.path.dirname(os.path.abspath(out))
        os.makedirs(parent, exist_ok=True)
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)


def roc_figure(
    scores: np.ndarray,
    positive: np.ndarray,
    model: str | None = None,
    store: str | None = None,
) -> Figure:
    """ROC and precision–recall curves of binary scores (``positive`` is a boolean array);
    returns the matplotlib Figure (Agg backend).

    The precision–recall break-even point (PRBEP: precision = recall, reached at the
    threshold that ranks as many rows positive as there are positives) is marked on both
    curves; the title names ``model`` and ``store`` when given.
    """
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
    k = min(P, pos.shape[0]) - 1  # the top-P rows: precision = recall = PRBEP
    prbep = float(prec[k]) if pos.shape[0] else float("nan")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8))
    axes[0].plot(fpr, tpr, label="ROC")
    axes[0].plot([0, 1], [0, 1], "k:", lw=0.8, label="chance")
    axes[0].plot(fpr[k + 1], tpr[k + 1], "o", color="C3", ms=7, label=f"PRBEP {prbep:.4f}")
    axes[0].set_xlabel("false positive rate")
    axes[0].set_ylabel("true positive rate")
    axes[0].set_title(f"ROC (AUC {np.trapezoid(tpr, fpr):.4f})")
    axes[1].plot(rec, prec, label="precision–recall")
    axes[1].plot([0, 1], [0, 1], ":", color="0.6", lw=0.8, label="precision = recall")
    axes[1].plot(rec[k], prec[k], "o", color="C3", ms=7, label=f"PRBEP {prbep:.4f}")
    axes[1].set_xlabel("recall")
    axes[1].set_ylabel("precision")
    axes[1].set_title("precision–recall")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    n = pos.shape[0]
    name = " on ".join(str(v) for v in (model, store) if v)
    fig.suptitle((name + ": " if name else "") + f"{n:,} rows, {int(pos.sum()):,} positive")
    fig.tight_layout()
    return fig


def plot_roc_pr(
    scores: np.ndarray,
    positive: np.ndarray,
    out: str,
    model: str | None = None,
    store: str | None = None,
) -> None:
    """Write the ROC / precision–recall figure of :func:`roc_figure` as PNG."""
    import matplotlib.pyplot as plt

    fig = roc_figure(scores, positive, model, store)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------
# C sweeps (``ooc-svm train --C 0.01,0.1,1 --validation V --sweep-table t.json``)
# ------------------------------------------------------------------------------------------
def read_sweep(path: str) -> dict | None:
    """The sweep document in ``path`` (``train --sweep-table FILE.json``), or None when the
    file is something else (a training history)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 24)
        doc = json.loads(first.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(doc, dict) and doc.get("sweep") is True and isinstance(doc.get("table"), list):
        return doc
    return None


def sweep_figure(doc: dict) -> Figure:
    """Validation metric (top) and training objective (bottom) against C, log x; the best C
    marked. ``doc``: a sweep document (:func:`read_sweep`)."""
    plt = _pyplot()
    rows = doc["table"]
    metric = str(doc.get("metric", "metric"))
    C = np.array([float(r["C"]) for r in rows])
    m = _series(rows, metric)
    obj = _series(rows, "objective")
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    ax0.plot(C, m, marker="o", lw=1.4)
    best = doc.get("best_C")
    where = "validation store" if doc.get("validation") else f"mean of {doc.get('folds')} folds"
    ax0.set_ylabel(f"{metric}\n({where})")
    ax1.plot(C, obj, marker="o", lw=1.4, color="C1")
    ax1.set_ylabel("training objective\n½‖w‖² + C Σ ξᵢ")
    if obj.size and np.all(obj[~np.isnan(obj)] > 0):
        ax1.set_yscale("log")
    ax1.set_xlabel("C")
    for ax in (ax0, ax1):
        ax.set_xscale("log")
        if best is not None:
            ax.axvline(float(best), color="C3", ls="--", lw=1.0, label=f"best C = {float(best):g}")
        _grid_legend(ax)
    mode = {"shared": "shared passes", "warm": "warm starts"}.get(str(doc.get("mode")), "")
    fig.suptitle(
        f"C sweep of {doc.get('solver', '')} on {doc.get('store', '')}"
        + (f" ({mode}, {doc.get('passes')} passes)" if mode else "")
    )
    fig.tight_layout()
    return fig


def plot_sweep(doc: dict, out: str) -> None:
    """Write :func:`sweep_figure` of a sweep document as PNG."""
    plt = _pyplot()
    fig = sweep_figure(doc)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)
