"""Progress of the ``ooc-svm`` commands: the one place that draws it.

Solvers never draw: they call their callback with one record (a dict) per iteration and log
through ``logging``. The commands hand those records, or their row / byte counts, to the
objects here, which show them in one of three ways (:func:`progress_mode`):

``bar``
    stderr is a terminal (and neither ``-v`` nor ``-q``): a tqdm bar with the stopping target,
    e.g. ``perf  gap 3.1e-3 → 1e-3`` or ``smo  KKT 0.02 → 1e-3``; rows or bytes with a rate and
    ETA for ingest / predict / verify; one-vs-rest runs show the classes done.
``log``
    stderr is not a terminal (a script, a batch job, a pipe), or ``-v``: one plain line per
    iteration or every 5 seconds, whichever is rarer (LIBLINEAR / VW style), e.g.
    ``iter 12  passes 13  obj 1.234e+04  gap 2.1e-3 (target 1e-3)  12.3s``. The first and the
    last record are always shown. ``$OOC_SVM_PROGRESS_SECONDS`` sets the interval.
``off``
    ``-q``: nothing (errors are still printed by the command).

Log lines go to the ``ooc_svm.progress`` logger at INFO, which the command line sends to
stderr; stdout is left to results (``--json``, summaries).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

log = logging.getLogger(__name__)

#: seconds between two plain progress lines (``$OOC_SVM_PROGRESS_SECONDS`` overrides)
LOG_EVERY = 5.0

#: what the solvers' records hold, in the order a line shows them: (record key, label)
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("iteration", "iter"),
    ("smo_iterations", "steps"),
    ("passes", "passes"),
    ("objective", "obj"),
    ("dual_objective", "dual"),
    ("violation", "<target>"),  # labelled with the solver's target name (gap, KKT, ...)
    ("working_set", "|W|"),
    ("n_sv", "SVs"),
    ("changed", "changed"),
    ("cache_hit_rate", "cache hits"),
)


def progress_mode(args: Any = None, stream: TextIO | None = None) -> str:
    """``"off"`` with ``-q``, ``"log"`` with ``-v`` or when stderr is not a terminal, else
    ``"bar"``."""
    if getattr(args, "quiet", False):
        return "off"
    stream = sys.stderr if stream is None else stream
    if getattr(args, "verbose", 0):
        return "log"
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "bar" if tty else "log"


def log_interval() -> float:
    """Seconds between two plain lines: ``$OOC_SVM_PROGRESS_SECONDS`` or :data:`LOG_EVERY`."""
    try:
        return max(0.0, float(os.environ.get("OOC_SVM_PROGRESS_SECONDS", LOG_EVERY)))
    except ValueError:
        return LOG_EVERY


def sci(v: float | None) -> str:
    """Short scientific notation: ``0.0031`` -> ``3.1e-3``, ``0.001`` -> ``1e-3``."""
    if v is None:
        return "-"
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if 1e-2 <= abs(v) < 1e4:
        return f"{v:.3g}"
    mant, exp = f"{v:.1e}".split("e")
    if mant.endswith(".0"):
        mant = mant[:-2]
    return f"{mant}e{int(exp)}"


def _num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}" if 1e-2 <= abs(v) < 1e5 or v == 0 else f"{v:.3e}"
    return str(v)


def _arrow(stream) -> str:
    enc = (getattr(stream, "encoding", None) or "ascii").lower()
    try:
        "→".encode(enc)
        return "→"
    except (LookupError, UnicodeEncodeError):
        return "->"


class _Redirect:
    """While a bar is drawn, log records (the solvers' INFO lines) are written above it
    (``tqdm.contrib.logging.logging_redirect_tqdm``) instead of through it."""

    def __init__(self) -> None:
        from tqdm.contrib.logging import logging_redirect_tqdm

        self.ctx = logging_redirect_tqdm()
        self.ctx.__enter__()

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(None, None, None)
            self.ctx = None


def _width(stream) -> dict:
    """tqdm's size arguments: follow the terminal, or 100 columns and 24 lines where it
    reports none (a pseudo-terminal of size 0, as ``script`` and some CI runners give; tqdm
    draws nothing in 0 lines). Following the terminal (``dynamic_ncols``) reads its lines
    too, at every refresh: a terminal of 80 columns and 0 lines showed no bar at all, so it
    is followed only when it reports both."""
    try:
        size = os.get_terminal_size(stream.fileno())
        cols, lines = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        cols = lines = 0
    if cols > 0 and lines > 0:
        return {"dynamic_ncols": True}
    return {"ncols": cols if cols > 0 else 100, "nrows": lines if lines > 0 else 24}


def stop_target(spec: Any, params: Any) -> tuple[str, float | None]:
    """``(name, value)`` of a solver's stopping target, for the progress display: the
    solver's spec says it (:meth:`ooc_svm.solvers.contract.SolverSpec.stop_target`; perf
    stops on ``--eps``, the relative duality gap or, in the paper's variant, the most violated
    constraint's violation; the dual solvers on ``--tol``, a KKT violation)."""
    name, value = spec.stop_target(params)
    return str(name), value


class TrainProgress:
    """The callback a command gives a solver: shows each iteration record.

    Parameters
    ----------
    solver : str
        ``--solver`` name (labels the bar).
    target : (str, float)
        Name and value of the stopping target (:func:`stop_target`).
    mode : {"bar", "log", "off"}
    n_classes : int, optional
        Classes of a one-vs-rest run (records then carry ``class`` and ``class_index``).
    fused : bool
        One-vs-rest classes progress together (perf: every class in each shared pass) rather
        than one after the other.
    stream : file, optional
        Where the bar is drawn (default stderr).
    record_labels : mapping, optional
        The solver's own labels of record keys (its spec's ``record_labels``: smo's
        ``objective`` is its dual value).
    """

    def __init__(
        self,
        solver: str,
        target: tuple[str, float | None],
        mode: str,
        *,
        n_classes: int | None = None,
        fused: bool = False,
        stream: TextIO | None = None,
        record_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.solver = solver
        self.target_name, self.target = target
        self.mode = mode
        self.n_classes = n_classes
        self.fused = fused
        self.stream = sys.stderr if stream is None else stream
        self.t0 = time.perf_counter()
        self.every = log_interval()
        self.last_line = -math.inf
        self.pending: dict | None = None  # the last record, when not yet shown as a line
        self.labels = {**dict(_COLUMNS), **(record_labels or {})}
        self.labels["violation"] = self.target_name
        self.first: dict[int, float] = {}  # class -> first violation seen
        self.frac: dict[int, float] = {}  # class -> fraction of the way to the target
        self.last_viol: dict[int, float] = {}
        self.records = 0
        self.bar = None
        self.redirect = None
        if mode == "bar":
            from tqdm import tqdm

            self.redirect = _Redirect()
            self.bar = tqdm(
                total=1000,
                file=self.stream,
                bar_format="{desc} |{bar}| {elapsed}",
                desc=self._desc(None),
                leave=True,
                **_width(self.stream),
            )

    # -- state ---------------------------------------------------------------------------
    def _fraction(self, first: float, v: float) -> float:
        """How far ``v`` has come from ``first`` towards the target, on a log scale."""
        t = self.target
        if t is None or not t > 0 or not v > 0:
            return 1.0 if (v is not None and v <= 0) else 0.0
        if v <= t or first <= t:
            return 1.0
        return min(1.0, max(0.0, math.log(first / v) / math.log(first / t)))

    def _update_state(self, rec: dict) -> None:
        k = int(rec.get("class_index", 0))
        if self.n_classes and not self.fused:
            for j in range(k):  # one class after the other: the earlier ones are finished
                self.frac[j] = 1.0
        v = rec.get("violation")
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            v = float(v)
            self.last_viol[k] = v
            self.first.setdefault(k, v)
            self.frac[k] = max(self.frac.get(k, 0.0), self._fraction(self.first[k], v))

    def classes_done(self) -> int:
        return sum(1 for f in self.frac.values() if f >= 1.0)

    def _desc(self, rec: dict | None) -> str:
        arrow = _arrow(self.stream)
        head = self.solver
        if self.n_classes:
            head += f"  classes {self.classes_done()}/{self.n_classes} done"
        v = None
        if rec is not None:
            if self.n_classes and self.fused and self.last_viol:
                v = max(self.last_viol.values())  # the worst class
            else:
                v = rec.get("violation")
        worst = "worst " if self.n_classes and self.fused else ""
        return f"{head}  {worst}{self.target_name} {sci(v)} {arrow} {sci(self.target)}"

    def _fields(self, rec: dict) -> list[str]:
        out = []
        for key, _ in _COLUMNS:
            if key == "violation" or rec.get(key) is None:
                continue
            out.append(f"{self.labels[key]} {_num(rec[key])}")
        return out

    def line(self, rec: dict) -> str:
        """The plain progress line of a record."""
        parts = []
        fused = bool(self.n_classes and self.fused)
        if fused:  # every class advances in each pass: no one class to name
            parts.append(f"classes {self.classes_done()}/{self.n_classes} done")
        elif self.n_classes and "class" in rec:
            c = rec["class"]
            c = int(c) if float(c).is_integer() else c
            parts.append(
                f"class {c} ({int(rec.get('class_index', 0)) + 1}/{self.n_classes}, "
                f"{self.classes_done()} done)"
            )
        fields = self._fields(rec)
        if fused:  # one class's objective would mislead (as on the bar)
            fields = [f for f in fields if f.startswith(("iter ", "passes "))]
        parts.extend(fields)
        if fused and self.last_viol:
            v = max(self.last_viol.values())
            parts.append(f"worst {self.target_name} {sci(v)} (target {sci(self.target)})")
        elif "violation" in rec:
            v = rec["violation"]
            parts.append(f"{self.target_name} {sci(v)} (target {sci(self.target)})")
        parts.append(f"{time.perf_counter() - self.t0:.1f}s")
        return "  ".join(parts)

    # -- the callback --------------------------------------------------------------------
    def __call__(self, rec: dict) -> None:
        if self.mode == "off":
            return
        self.records += 1
        self._update_state(rec)
        if self.bar is not None:
            done = sum(self.frac.values()) / (self.n_classes or 1) if self.frac else 0.0
            self.bar.n = max(self.bar.n, int(1000 * min(1.0, done)))
            fields = self._fields(rec)
            if self.n_classes and self.fused:  # one class's objective would mislead
                fields = [f for f in fields if f.startswith(("iter ", "passes "))]
            desc = "  ".join([self._desc(rec), *fields])
            self.bar.set_description_str(desc, refresh=False)
            self.bar.refresh()
            return
        now = time.perf_counter()
        if now - self.last_line >= self.every:
            log.info("%s", self.line(rec))
            self.last_line = now
            self.pending = None
        else:
            self.pending = rec

    def close(self, ok: bool = True) -> None:
        """Finish: the bar is closed (full when ``ok`` and every class reached its target);
        in ``log`` mode the last record is shown if it was not."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            if self.redirect is not None:  # set with the bar
                self.redirect.close()
        elif self.pending is not None and self.mode == "log":
            log.info("%s", self.line(self.pending))
        self.pending = None


class Meter:
    """Progress of a streamed command over rows, bytes or shards (ingest, predict, verify).

    ``update(n)`` adds ``n`` units; the bar shows the rate and, with ``total``, the ETA; the
    plain lines read ``predict  120,000 of 1,000,000 rows (12%)  45,000 rows/s  ETA 19s``.
    """

    def __init__(
        self,
        desc: str,
        mode: str,
        *,
        total: float | None = None,
        unit: str = "rows",
        stream: TextIO | None = None,
    ) -> None:
        self.desc = desc
        self.mode = mode
        self.total = total or None
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.n = 0.0
        self.t0 = time.perf_counter()
        self.every = log_interval()
        self.last_line = time.perf_counter()  # the first line after `every` seconds
        self.bar = None
        self.redirect = None
        if mode == "bar":
            from tqdm import tqdm

            self.redirect = _Redirect()
            byte = unit == "B"
            self.bar = tqdm(
                total=self.total,
                file=self.stream,
                desc=desc,
                unit=unit if byte else f" {unit}",
                unit_scale=byte,
                unit_divisor=1000,  # MB, as the summary lines count them
                leave=False,
                **_width(self.stream),
            )

    def _amount(self, v: float) -> str:
        if self.unit == "B":
            for u in ("B", "kB", "MB", "GB", "TB"):  # decimal, as the summary lines
                if v < 1000 or u == "TB":
                    return f"{v:.1f} {u}" if u != "B" else f"{int(v)} B"
                v /= 1000
        return f"{int(v):,}"

    def line(self) -> str:
        el = time.perf_counter() - self.t0
        unit = "" if self.unit == "B" else f" {self.unit}"
        s = f"{self.desc}  {self._amount(self.n)}"
        if self.total:
            s += f" of {self._amount(self.total)}{unit} ({100.0 * self.n / self.total:.0f}%)"
        else:
            s += unit
        rate = self.n / el if el > 0 else 0.0
        s += f"  {self._amount(rate)}{unit if unit else ''}/s"
        if self.total and rate > 0 and self.n < self.total:
            s += f"  ETA {(self.total - self.n) / rate:.0f}s"
        return s + f"  {el:.1f}s"

    def update(self, n: float) -> None:
        if self.mode == "off":
            return
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last_line >= self.every:
            log.info("%s", self.line())
            self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            if self.redirect is not None:  # set with the bar
                self.redirect.close()
