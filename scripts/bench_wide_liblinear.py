#!/usr/bin/env python
"""ooc-svm against LIBLINEAR's C ``train`` on wide and narrow sparse rows, paired and
interleaved, whole processes as users run them.

For every shape ``ROWSxFEATURES`` (default ``300000x20000000``, ``1000000x20000000`` and
``300000x50000``; ``--nnz`` non-zeros a row, ``--seed``) it builds once, with ``ooc-svm
synth``, the store (``.zarr``) and the same rows as SVMlight text (``.svm``, LIBLINEAR's
input), then runs ``--repeat`` rounds, the order of the two programs alternating:

- ``ooc-svm train STORE -o MODEL --json`` plus ``--flags`` (default ``--variant dcd``), from
  the store;
- ``$LIBLINEAR_TRAIN -s 3 -c C -B 1 -q FILE.svm MODEL`` (its default ``-e 0.1``), the whole
  process including its text reading.

Each run's wall and CPU seconds (user + system) and peak RSS come from ``os.wait4``. Both
models' primal objectives ½‖w̃‖² + C Σ max(0, 1 − yᵢw̃·x̃ᵢ) are evaluated on the same store
(one shard at a time), with ours' certified lower bound. Printed: one line per run, then per
shape the medians and the ratios ooc-svm / LIBLINEAR (wall, CPU, RSS), and ooc-svm's own
wide / narrow wall ratio (shapes of the same rows), with the load average at start and end.

    LIBLINEAR_TRAIN=/path/to/train python scripts/bench_wide_liblinear.py --dir /tmp/bw
    python scripts/bench_wide_liblinear.py --dir /tmp/bw --shapes 300000x20000000 --repeat 3
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_util import load_average as _load
from _bench_util import synth_cli as _synth
from bench_perf import read_linear_model, store_objective

BIN = [sys.executable, "-m", "ooc_svm"]
SHAPES = ("300000x20000000", "1000000x20000000", "300000x50000")


def _run(cmd: list[str]) -> dict:
    """One whole process: wall, CPU (user + system), peak RSS and its stdout."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(), err.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{etext[-2000:]}")
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mb": ru.ru_maxrss / 1024.0,
        "out": text,
    }


def _ours(store: str, model: str, flags: list[str], C: float) -> dict:
    shutil.rmtree(model, ignore_errors=True)
    r = _run([*BIN, "train", store, "-o", model, "--json", "--C", f"{C:g}", *flags])
    s = json.loads(r.pop("out").strip().splitlines()[-1])
    r.update(
        epochs=s.get("iterations"),
        passes=s.get("passes"),
        converged=s.get("converged"),
        reported=s.get("objective"),
        lower_bound=s.get("lower_bound"),
    )
    return r


def _liblinear(exe: str, text: str, model: str, C: float) -> dict:
    r = _run([exe, "-s", "3", "-c", f"{C:g}", "-B", "1", "-q", text, model])
    r.pop("out")
    return r


def _objective(kind: str, store: str, model: str, d: int, C: float) -> float:
    """The model's primal objective on the store, computed in a child process: the 20M-long
    vectors it reads would otherwise stay in this process, and a child's peak RSS starts at
    its parent's size when it forks (Linux records the parent's high-water mark at exec)."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--objective", kind, store, model, str(d),
         repr(C)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return float(out.strip().splitlines()[-1])


def _print_objective(kind: str, store: str, model: str, d: str, C: str) -> None:
    w, wb, pos = read_linear_model(kind, model, int(d))
    print(repr(store_objective(store, w, wb, pos, float(C))))


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--objective":
        _print_objective(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="where the stores, texts and models go")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="ROWSxFEATURES,...")
    ap.add_argument("--nnz", type=int, default=40, help="non-zeros a row")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2, help="rounds per shape (order alternates)")
    ap.add_argument("--flags", default="--variant dcd", help="ooc-svm train flags")
    args = ap.parse_args()
    exe = os.environ.get("LIBLINEAR_TRAIN")
    if not exe:
        raise SystemExit("set $LIBLINEAR_TRAIN to LIBLINEAR's C train program")
    os.makedirs(args.dir, exist_ok=True)
    flags = args.flags.split()
    print(f"# load at start {_load()}; ooc-svm train {args.flags}; LIBLINEAR -s 3 -B 1", flush=True)
    medians: dict[str, dict] = {}
    for shape in args.shapes.split(","):
        rows, feats = (int(v) for v in shape.split("x"))
        base = os.path.join(args.dir, f"r{rows}_f{feats}_n{args.nnz}_s{args.seed}")
        store, text = base + ".zarr", base + ".svm"
        _synth(store, rows, feats, args.nnz, args.seed)
        _synth(text, rows, feats, args.nnz, args.seed)
        runs: dict[str, list[dict]] = {"ooc-svm": [], "LIBLINEAR": []}
        for k in range(args.repeat):
            order = ["ooc-svm", "LIBLINEAR"] if k % 2 == 0 else ["LIBLINEAR", "ooc-svm"]
            for who in order:
                load = _load()
                if who == "ooc-svm":
                    r = _ours(store, base + ".ooc", flags, args.C)
                else:
                    r = _liblinear(exe, text, base + ".ll", args.C)
                r["load"] = load
                runs[who].append(r)
                print(
                    f"{shape:>18} {who:9} wall {r['wall']:7.2f} s  CPU {r['cpu']:7.2f} s  "
                    f"peak RSS {r['rss_mb']:7.0f} MB  load {load}"
                    + (f"  epochs {r['epochs']}" if "epochs" in r else ""),
                    flush=True,
                )
        p_ours = _objective("ooc", store, base + ".ooc", feats, args.C)
        p_ll = _objective("liblinear", store, base + ".ll", feats, args.C)
        med = {
            who: {key: statistics.median(r[key] for r in rs) for key in ("wall", "cpu", "rss_mb")}
            for who, rs in runs.items()
        }
        medians[shape] = med
        o, ll = med["ooc-svm"], med["LIBLINEAR"]
        lb = runs["ooc-svm"][-1].get("lower_bound")
        print(
            f"{shape:>18} medians: ooc-svm wall {o['wall']:.2f} CPU {o['cpu']:.2f} RSS "
            f"{o['rss_mb']:.0f} | LIBLINEAR wall {ll['wall']:.2f} CPU {ll['cpu']:.2f} RSS "
            f"{ll['rss_mb']:.0f} | ratio wall {o['wall'] / ll['wall']:.2f} CPU "
            f"{o['cpu'] / ll['cpu']:.2f} RSS {o['rss_mb'] / ll['rss_mb']:.2f}",
            flush=True,
        )
        print(
            f"{shape:>18} primal objective: ooc-svm {p_ours:.4f} (certified lower bound "
            f"{lb if lb is None else f'{lb:.4f}'}), LIBLINEAR {p_ll:.4f}; "
            f"(ooc-svm - LIBLINEAR) / (C n) = {(p_ours - p_ll) / (args.C * rows):+.2e}",
            flush=True,
        )
    by_rows: dict[int, dict[int, float]] = {}
    for shape, med in medians.items():
        rows, feats = (int(v) for v in shape.split("x"))
        by_rows.setdefault(rows, {})[feats] = med["ooc-svm"]["wall"]
    for rows, ws in sorted(by_rows.items()):
        if len(ws) > 1:
            lo, hi = min(ws), max(ws)
            print(f"# ooc-svm wide/narrow wall at {rows} rows ({hi} / {lo} features): "
                  f"{ws[hi] / ws[lo]:.2f}")  # fmt: skip
    print(f"# load at end {_load()}", flush=True)


if __name__ == "__main__":
    main()
