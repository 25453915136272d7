"""Helpers shared by the paper-reproduction scripts in this folder (not part of the package).

Every figure the scripts report comes from a run made here: subsets of the real data are
written as SVMlight text to a temporary folder, ingested with ``ooc-svm ingest`` and trained
with ``ooc-svm train --json`` (the public CLI), each in its own process, timed by wall clock
and by the CPU seconds of that process (``RUSAGE_CHILDREN``). The comparators (SVMlight,
SVMperf) are the programs named by ``$SVMLIGHT_LEARN`` / ``$SVMPERF_LEARN``; a script skips
them, saying so, when the variable is unset.
"""

from __future__ import annotations

import bz2
import datetime
import gzip
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT_DEFAULT = ROOT / "docs" / "reproduction"


def data_dir() -> Path:
    """``$OOC_SVM_DATA``, else ``../shared/data`` beside the project."""
    env = os.environ.get("OOC_SVM_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


DATASETS = {
    # name: (relative path, n_features)
    "adult": ("a9a/a9a", 123),
    "web": ("w8a/w8a.bz2", 300),
}


def ooc_svm_exe() -> list[str]:
    """The ``ooc-svm`` command of the environment running this script."""
    exe = Path(sys.executable).with_name("ooc-svm")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "ooc_svm"]


def read_lines(name: str) -> tuple[list[bytes], int]:
    """All non-empty lines of dataset ``name`` (``adult`` or ``web``) and its feature count."""
    rel, nf = DATASETS[name]
    path = data_dir() / rel
    if not path.exists():
        raise SystemExit(f"reproduce: {path} not found (set $OOC_SVM_DATA to the data folder)")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    elif raw[:3] == b"BZh":
        raw = bz2.decompress(raw)
    return [ln for ln in raw.splitlines() if ln.strip()], nf


def nested_order(n_rows: int, seed: int) -> list[int]:
    """A random permutation of the rows: the subset of size n is its first n entries, so the
    subsets are nested (as in Platt 1998)."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n_rows)]


class Workdir:
    """A temporary folder for subsets, stores and models; removed on exit."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"reproduce-{prefix}-"))

    def __enter__(self) -> Workdir:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def write_subset(lines: list[bytes], order: list[int], n: int, path: Path) -> Path:
    """Write the first ``n`` rows of ``order`` as SVMlight text."""
    with open(path, "wb") as f:
        for i in order[:n]:
            f.write(lines[i])
            f.write(b"\n")
    return path


def ingest(text: Path, store: Path, n_features: int, append: bool = False) -> dict:
    """``ooc-svm ingest --json`` of one text file (``--append``: add its rows to ``store``)."""
    cmd = [*ooc_svm_exe(), "-q", "ingest", str(text), str(store), "--json"]
    cmd += ["--n-features", str(n_features)] + (["--append"] if append else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"ingest failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed(
    cmd: list[str], timeout: float | None
) -> tuple[subprocess.CompletedProcess | None, float, float]:
    """Run ``cmd``; return (completed process or None when it ran out of time, wall s, CPU s).

    ``timeout`` is a limit on the child's CPU seconds (``RLIMIT_CPU``: the machine these
    scripts run on is shared, so a wall-clock limit would cut runs short under load), with
    a wall-clock backstop of 30 times that.
    """

    def limit() -> None:
        if timeout:
            t = max(1, int(timeout))
            resource.setrlimit(resource.RLIMIT_CPU, (t, t + 5))

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        out: subprocess.CompletedProcess | None = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=False,
            timeout=30 * timeout if timeout else None,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        out = None
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if out is not None and out.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        out = None
    return out, wall, cpu


def train(
    store: Path,
    solver: str,
    params: dict[str, Any],
    timeout: float | None = None,
    save: Path | None = None,
) -> dict:
    """Train with ``ooc_svm.api.train`` in a fresh child process; ``save``: write the model
    there (after the timed span), e.g. for a later ``init`` (warm start) of another run.

    Returns the solver's JSON summary (``Result.to_json_dict``) plus ``n_sv``, ``cpu`` (CPU
    seconds of the child around the ``train`` call alone: no interpreter start, imports or
    store opening), ``wall`` (the same span, wall clock) and ``command`` (the equivalent
    ``ooc-svm train`` command line); ``{"timeout": s}`` when it ran out of time.
    """
    spec = {"store": str(store), "solver": solver, "params": params}
    if save is not None:
        spec["save"] = str(save)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    out, wall, cpu = timed(cmd, timeout)
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in params.items())
    cli = f"ooc-svm train STORE -o {save or 'MODEL'} --solver {solver} {flags} --json"
    if out is None:
        return {"timeout": timeout, "wall": wall, "cpu": cpu, "command": cli}
    if out.returncode != 0:
        raise RuntimeError(f"train failed ({cli}): {out.stderr.strip()[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_cpu"] = cpu
    res["command"] = cli
    return res


def _child(spec: dict) -> dict:
    """In the child process: one ``api.train`` call, timed."""
    from ooc_svm.api import train as api_train
    from ooc_svm.store import open_store

    st = open_store(spec["store"])
    c0, t0 = time.process_time(), time.perf_counter()
    res = api_train(st, spec["solver"], **spec["params"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    d = {}
    for k, v in res.to_json_dict(spec["solver"]).items():
        if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
            v = v.item()
        if isinstance(v, (int, float, str, bool, type(None))):
            d[k] = v
    sv = getattr(res.model, "support_vectors_", None)
    if d.get("n_sv") is None and sv is not None:
        d["n_sv"] = int(sv.shape[0])
    d.update(cpu=cpu, wall=wall, converged=bool(res.converged), n_rows=int(st.meta.n_rows))
    if spec.get("save"):
        res.model.save(spec["save"])
    return d


def comparator(var: str) -> str | None:
    """Path of the comparator named by ``$var`` or None (with a message) when unset/missing."""
    exe = os.environ.get(var)
    if not exe:
        print(f"# {var} is not set: skipping that comparator", flush=True)
        return None
    if not os.access(exe, os.X_OK):
        print(f"# {var}={exe} is not an executable file: skipping that comparator", flush=True)
        return None
    return exe


_SVMLIGHT_SV = re.compile(r"Number of SV:\s*(\d+)\s*\(including\s*(\d+)\s*at upper bound\)")
_CPU = re.compile(r"Runtime in cpu-seconds:\s*([0-9.eE+-]+)")
_ITER = re.compile(r"(?:Optimization finished|Optimization done)\s*\((\d+)\s*iterations\)")


def run_svmlight(exe: str, text: Path, model: Path, args: list[str], timeout: float | None) -> dict:
    """Run SVMlight/SVMperf's learner on a text file; parse SVs, iterations and CPU seconds."""
    out, wall, cpu = timed([exe, *args, str(text), str(model)], timeout)
    if out is None:
        return {"timeout": timeout, "wall": wall, "cpu": cpu}
    if out.returncode != 0:
        raise RuntimeError(f"{exe} failed: {out.stdout[-1500:]} {out.stderr[-1500:]}")
    res: dict[str, Any] = {"wall": wall, "cpu": cpu, "command": " ".join([Path(exe).name, *args])}
    m = _SVMLIGHT_SV.search(out.stdout)
    if m:
        res["n_sv"], res["n_bound"] = int(m.group(1)), int(m.group(2))
        res["n_free"] = res["n_sv"] - res["n_bound"]
    m = _CPU.search(out.stdout)
    if m:
        res["reported_cpu"] = float(m.group(1))
    m = _ITER.search(out.stdout)
    if m:
        res["iterations"] = int(m.group(1))
    m = re.search(r"Number of iterations:\s*(\d+)", out.stdout)
    if m:
        res["iterations"] = int(m.group(1))
    return res


def fit_exponent(ns: list[float], ts: list[float]) -> float | None:
    """Slope of the least-squares line through (log n, log t); None with < 2 usable points."""
    pts = [(math.log(n), math.log(t)) for n, t in zip(ns, ts, strict=True) if t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return sxy / sxx if sxx > 0 else None


def plot_loglog(
    series: dict[str, tuple[list[float], list[float]]], path: Path, title: str, ylabel: str
) -> None:
    """Log-log plot of each series with its fitted exponent in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    markers = "osd^v<>p*h"
    for k, (name, (xs, ys)) in enumerate(series.items()):
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y and y > 0]
        if not pts:
            continue
        e = fit_exponent([p[0] for p in pts], [p[1] for p in pts])
        lab = f"{name} (~n^{e:.2f})" if e is not None else name
        ls = "--" if name.startswith("paper") else "-"
        ax.loglog(
            [p[0] for p in pts],
            [p[1] for p in pts],
            ls,
            marker=markers[k % len(markers)],
            label=lab,
        )
    ax.set_xlabel("training set size n")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def command_line(script: str, argv: list[str]) -> str:
    """The command line as the kept outputs record it: ``--out``'s folder written ``OUT`` and
    every other absolute path ``$DIR/NAME``, so the files in docs/reproduction/ name no folder
    of the machine that ran them."""
    words, after_out = [], False
    for a in argv:
        if after_out:
            a = "OUT"
        elif a.startswith("--out="):
            a = "--out=OUT"
        elif a.startswith("--") and "=" in a:
            key, _, val = a.partition("=")
            a = f"{key}=$DIR/{Path(val).name}" if os.path.isabs(val) else a
        elif os.path.isabs(a):
            a = f"$DIR/{Path(a).name}"
        words.append(a)
        after_out = a == "--out"
    return " ".join([f"python scripts/reproduce/{script}", *words])


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""

    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            if v == 0:
                return "0"
            if abs(v) >= 100:
                return f"{v:.0f}"
            if abs(v) >= 1:
                return f"{v:.2f}"
            return f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def machine() -> str:
    """Date, CPU, cores and load average, for the report."""
    model = platform.processor() or ""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{now}; {os.cpu_count()} cores ({model}); load average {' '.join(load)}"


def loadavg() -> str:
    """The 1-minute load average now."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def write_outputs(out: Path, stem: str, md: str, raw: dict) -> None:
    """``OUT/STEM.md`` (the tables) and ``OUT/STEM.json`` (every run's raw result)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(md + "\n")
    (out / f"{stem}.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(f"# wrote {out / (stem + '.md')} and {out / (stem + '.json')}", flush=True)


def parse_choices(ap, text: str, choices, what: str) -> list[str]:
    """A comma list of names, each one of ``choices`` (else ``ap.error`` naming them)."""
    names = [v for v in text.split(",") if v]
    for nm in names:
        if nm not in choices:
            ap.error(f"unknown {what} {nm!r}: choose from {', '.join(choices)}")
    return names


def parse_sizes(ap, text: str) -> list[int]:
    """``--sizes``: whole numbers separated by commas, sorted (else ``ap.error``)."""
    try:
        return sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        ap.error(f"--sizes {text!r}: give whole numbers separated by commas")
        raise


def run_experiments(
    tag: str, names: list[str], run_one, render, out: Path, stem: str, cmdline: str, seed: int
) -> list[dict]:
    """Run ``run_one(name, workdir, results, save)`` for each experiment in one scratch folder
    (``tag``), the tables written by ``save`` after every size (a cut-short run keeps its
    results) and once more at the end, printed; ``render(results, header, cmdline)`` makes
    the tables' text."""
    mach = machine()
    with Workdir(tag) as wd:

        def save(results: list[dict], final: bool) -> None:
            tail = ("; load at the end" if final else "; partial run, load now") + f" {loadavg()}"
            md = render(results, mach + tail, cmdline)
            if final:
                print(md)
            raw = {"machine": mach, "results": results, "cmdline": cmdline, "seed": seed}
            write_outputs(out, stem, md, {**raw, "tail": tail})

        results: list[dict] = []
        for nm in names:
            results.append(run_one(nm, wd.path, results, save))
        save(results, final=True)
    return results


def base_parser(doc: str):
    """The options every reproduction script has."""
    import argparse

    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small subsets only (<= 5 min on 2 cores)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the tables, JSON and PNGs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the nested random subsets")
    ap.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="CPU seconds allowed to one training run (a longer one is reported as timed out)",
    )
    return ap


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(json.loads(sys.argv[2])), default=str))
