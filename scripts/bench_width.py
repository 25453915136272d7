#!/usr/bin/env python
"""Benchmark perf at any width: the same rows at 20,000,000 and at 50,000
features, default flags, whole ``ooc-svm train`` processes.

Builds (once, ``ooc-svm synth``) two stores of ``--rows`` rows with ``--nnz`` non-zeros per
row and seed ``--seed``: ``--features`` (default 20,000,000) and ``--narrow`` (default
50,000) columns, then trains each with ``ooc-svm train STORE -o MODEL --json`` (default
flags: perf, accelerated, C = 1, eps = 0.001), the narrow store first, ``--repeat`` times
interleaved. For every run: wall and CPU seconds, the child's peak RSS (``os.wait4``),
passes, iterations, objective, converged and whether progress lines came from the first
pass on; then the ratios wide / narrow of the medians, and the load average at start and
end. Target: wide <= 2 x narrow time, wide peak RSS <= 2 GB (2000 MB).

    python scripts/bench_width.py --dir /tmp/bw                    # 1,000,000 rows
    python scripts/bench_width.py --dir /tmp/bw --rows 300000      # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BIN = [sys.executable, "-m", "ooc_svm"]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_util import load_average as _load  # noqa: E402
from _bench_util import synth_cli as _synth  # noqa: E402


def _train(store: str, model: str) -> dict:
    """One ``ooc-svm train`` process: its JSON summary, wall/CPU seconds, peak RSS."""
    shutil.rmtree(model, ignore_errors=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(
            [*BIN, "train", store, "-o", model, "--json"],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(), err.read().decode()
    if status != 0:
        return {"error": (etext.strip().splitlines() or ["?"])[-1][:300], "wall": wall}
    summary = json.loads(text.strip().splitlines()[-1])
    progress = [ln for ln in etext.splitlines() if ln.startswith("iter ")]
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mb": ru.ru_maxrss / 1024.0,
        "passes": summary.get("passes"),
        "iterations": summary.get("iterations"),
        "objective": summary.get("objective"),
        "converged": summary.get("converged"),
        "first_progress": progress[0][:60] if progress else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="bench_width_data", help="where the stores are built")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=20_000_000)
    ap.add_argument("--narrow", type=int, default=50_000)
    ap.add_argument("--nnz", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    stores = {}
    for name, width in (("narrow", a.narrow), ("wide", a.features)):
        stores[name] = os.path.join(a.dir, f"r{a.rows}_f{width}_n{a.nnz}_s{a.seed}.zarr")
        _synth(stores[name], a.rows, width, a.nnz, a.seed)
    print(f"# load at start: {_load()}", flush=True)
    runs: dict[str, list[dict]] = {"narrow": [], "wide": []}
    for rep in range(a.repeat):
        for name in ("narrow", "wide"):
            r = _train(stores[name], os.path.join(a.dir, f"model_{name}"))
            runs[name].append(r)
            print(f"{name:6s} rep {rep}: {json.dumps(r)}  (load {_load()})", flush=True)
    if any("error" in r for rs in runs.values() for r in rs):
        print("# a run failed: no ratios")
        return 1
    med = {k: {m: statistics.median(r[m] for r in rs) for m in ("wall", "cpu", "rss_mb")}
           for k, rs in runs.items()}  # fmt: skip
    for k in ("narrow", "wide"):
        print(f"{k:6s} median: wall {med[k]['wall']:.1f} s, cpu {med[k]['cpu']:.1f} s, "
              f"peak RSS {med[k]['rss_mb']:.0f} MB")  # fmt: skip
    print(
        f"ratio wide/narrow: wall {med['wide']['wall'] / med['narrow']['wall']:.2f}, cpu "
        f"{med['wide']['cpu'] / med['narrow']['cpu']:.2f}; wide peak RSS "
        f"{med['wide']['rss_mb']:.0f} MB (target <= 2x time, <= 2000 MB)"
    )
    print(f"# load at end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
