#!/usr/bin/env python
"""Kernel solvers against LIBSVM's ``svm-train`` built with OpenMP, at equal threads.

For each data set (a9a: RBF γ = 0.05; ijcnn1: γ = 1; w8a: γ = 0.05; C = 1, tol 1e-3) and each
solver (smo, active-set, irwls), whole processes are timed — ``ooc-svm train`` (startup,
reading the store, the solve, the KKT check, writing the model) and ``$LIBSVM_TRAIN``
(LIBSVM 3.x built with OpenMP; ``-c C -g γ -e tol -m cache``) with ``OMP_NUM_THREADS`` = the
same number of threads and the same ``OMP_WAIT_POLICY`` (default passive, as ooc-svm's) —
pinned with ``taskset -c 0`` (1 core) or ``taskset -c 0,1`` (2 cores).
The runs are paired and interleaved: each round runs every configuration once, in a rotating
order, so load from other processes hits all of them alike. Wall and CPU time (``wait4``'s
rusage) and peak RSS of every child; the load average before and after each data set.

Printed for each data set, one line per solver: median wall / CPU at each core count, the
speed-up (median of the per-round wall ratios, fewest / most cores), the ratio to
LIBSVM-OpenMP at the same number of threads (median of the per-round wall ratios, and of the
CPU ratios), and the dual objective's relative difference to LIBSVM's ``obj``. Targets: wall
≤ 0.6× LIBSVM-OpenMP (smo, active-set), ≤ 1.0× (irwls); speed-up 1 → 2 cores ≥ 1.7×;
objective within 1e-6 relative.

Usage::

    python scripts/bench_kernel_threads.py [--rounds 3] [--data a9a,ijcnn1,w8a]
        [--solvers smo,active-set,irwls] [--rows N] [--cores 1,2] [--warmup]
        [--baseline /work/main/.venv/bin/ooc-svm]

``--warmup`` runs each solver once, untimed, on the first data set (a changed checkout
compiles and caches its numba functions on its first run). ``--baseline EXE`` adds every
solver run by another ``ooc-svm`` (e.g. the main branch's) to the same interleaved rounds, as
``SOLVER@base``, with the per-round wall and CPU ratios of this checkout's runs to it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {
    "a9a": (DATA / "a9a" / "a9a", 0.05, 123),
    "ijcnn1": (DATA / "ijcnn1" / "ijcnn1.bz2", 1.0, 22),
    "w8a": (DATA / "w8a" / "w8a.bz2", 0.05, 300),
}


def run_measured(cmd: list[str], env: dict | None = None) -> dict:
    """Run a whole process: wall, CPU (user + sys, from ``os.wait4``) and peak RSS."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        assert p.stdout is not None
        out = p.stdout.read().decode(errors="replace")
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {' '.join(tail)}")
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mb": ru.ru_maxrss / 1024.0,
        "stdout": out,
    }


def _libsvm_obj(stdout: str) -> float | None:
    for line in stdout.splitlines():
        if line.startswith("obj = "):
            return float(line.split()[2].rstrip(","))
    return None


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default="a9a,ijcnn1,w8a")
    ap.add_argument("--solvers", default="smo,active-set,irwls")
    ap.add_argument("--rows", type=int, default=0, help="first N rows only (0: all)")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--cache-mb", type=float, default=256.0)
    ap.add_argument("--cores", default="1,2", help="core counts to compare (taskset 0..n-1)")
    ap.add_argument("--baseline", default="", help="another ooc-svm executable to compare")
    ap.add_argument("--warmup", action="store_true", help="one untimed run of each solver first")
    args = ap.parse_args()

    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file, load_svmlight_file

    from ooc_svm.model.model import load_model
    from ooc_svm.store import csr_to_shards, write_store

    libsvm = os.environ.get("LIBSVM_TRAIN", "svm-train")
    libsvm = shutil.which(libsvm) or libsvm
    have_libsvm = os.path.exists(libsvm)
    if not have_libsvm:
        print(f"# {libsvm} not found: no LIBSVM column (set $LIBSVM_TRAIN)", flush=True)
    exe = str(Path(sys.executable).with_name("ooc-svm"))
    cores = [int(c) for c in args.cores.split(",")]
    solvers = args.solvers.split(",")
    if args.baseline:
        solvers += [f"{s}@base" for s in solvers]
    tmp = tempfile.mkdtemp(prefix="bench-kthreads-")
    # both programs wait the same way between parallel regions (ooc-svm's default: passive;
    # GNU OpenMP's own default, spinning, costs LIBSVM dearly on a loaded machine)
    wait = os.environ.get("OMP_WAIT_POLICY", "passive")
    load = open("/proc/loadavg").read().strip()
    print(f"# load before: {load}; OMP_WAIT_POLICY={wait}", flush=True)
    try:
        for name in args.data.split(","):
            path, gamma, nf = SETS[name]
            if not path.exists():
                print(f"# {path} not found: {name} skipped", flush=True)
                continue
            X, y = load_svmlight_file(str(path), n_features=nf)
            if args.rows:
                X, y = X[: args.rows], y[: args.rows]
            store = os.path.join(tmp, f"{name}.zarr")
            write_store(
                store, csr_to_shards(sp.csr_matrix(X, dtype=np.float32), y, shard_rows=10000)
            )
            txt = os.path.join(tmp, f"{name}.txt")
            dump_svmlight_file(X, y, txt, zero_based=False)
            print(
                f"\n{name}: {X.shape[0]} rows, {X.nnz} nnz, RBF gamma={gamma} C={args.C} "
                f"tol={args.tol}, cache {args.cache_mb:g} MB",
                flush=True,
            )
            configs = []
            for s in solvers + (["libsvm-omp"] if have_libsvm else []):
                for c in cores:
                    configs.append((s, c))
            times: dict = {k: [] for k in configs}
            objs: dict = {}
            schedule = []
            if args.warmup and name == args.data.split(",")[0]:
                schedule += [(-1, s, max(cores)) for s in solvers]
            for r in range(args.rounds):
                k = r % len(configs)
                schedule += [(r, s, c) for s, c in configs[k:] + configs[:k]]
            for r, s, c in schedule:
                pin = ["taskset", "-c", ",".join(str(i) for i in range(c))]
                env = dict(os.environ, OMP_NUM_THREADS=str(c), OMP_WAIT_POLICY=wait)
                if s == "libsvm-omp":
                    cmd = pin + [
                        libsvm, "-c", str(args.C), "-g", str(gamma), "-e", str(args.tol),
                        "-m", str(int(args.cache_mb)), txt, os.path.join(tmp, "ls.model"),
                    ]  # fmt: skip
                else:
                    cmd = pin + [
                        args.baseline if s.endswith("@base") else exe,
                        "train", "--solver", s.removesuffix("@base"), store,
                        "-o", os.path.join(tmp, "m"),
                        "--kernel", "rbf", "--gamma", str(gamma), "--C", str(args.C),
                        "--tol", str(args.tol), "--cache-mb", str(args.cache_mb), "--overwrite",
                    ]  # fmt: skip
                m = run_measured(cmd, env)
                if s == "libsvm-omp":
                    obj = _libsvm_obj(m["stdout"])
                else:
                    obj = load_model(os.path.join(tmp, "m")).info.get("dual_objective")
                print(
                    f"  {'warm-up' if r < 0 else f'round {r + 1}'} {s:11s} {c} core(s): "
                    f"wall {m['wall']:7.2f} s  cpu {m['cpu']:7.2f} s  peak RSS "
                    f"{m['rss_mb']:6.0f} MB  dual obj {obj}",
                    flush=True,
                )
                if r < 0:
                    continue
                times[(s, c)].append(m)
                objs.setdefault(s, obj)
            lo, hi = min(cores), max(cores)
            head = f"  {'solver':11s}"
            for c in cores:
                head += f" | {c} core(s) wall / cpu"
            head += f" | speed-up {lo}->{hi}"
            if have_libsvm:
                head += " | wall / LIBSVM-omp (" + ", ".join(f"{c}t" for c in cores) + ")"
                head += " | cpu / LIBSVM-omp | obj rel. diff"
            print(head)
            ref_obj = objs.get("libsvm-omp")
            for s in solvers + (["libsvm-omp"] if have_libsvm else []):
                line = f"  {s:11s}"
                for c in cores:
                    w = statistics.median(x["wall"] for x in times[(s, c)])
                    u = statistics.median(x["cpu"] for x in times[(s, c)])
                    line += f" | {w:8.2f} s / {u:8.2f} s"
                sp_ = statistics.median(
                    a["wall"] / b["wall"]
                    for a, b in zip(times[(s, lo)], times[(s, hi)], strict=True)
                )
                line += f" | {sp_:5.2f}x"
                if have_libsvm and s != "libsvm-omp":
                    ratios = [
                        statistics.median(
                            a["wall"] / b["wall"]
                            for a, b in zip(times[(s, c)], times[("libsvm-omp", c)], strict=True)
                        )
                        for c in cores
                    ]
                    cpu_ratios = [
                        statistics.median(
                            a["cpu"] / b["cpu"]
                            for a, b in zip(times[(s, c)], times[("libsvm-omp", c)], strict=True)
                        )
                        for c in cores
                    ]
                    line += " | " + ", ".join(f"{q:5.2f}x" for q in ratios)
                    line += " | " + ", ".join(f"{q:5.2f}x" for q in cpu_ratios)
                    if ref_obj is not None and objs.get(s) is not None:
                        line += f" | {(objs[s] - ref_obj) / abs(ref_obj):+.2e}"
                print(line, flush=True)
            for s in solvers:
                if s.endswith("@base"):
                    continue
                b = f"{s}@base"
                if b not in solvers:
                    continue
                for c in cores:
                    rw = statistics.median(
                        x["wall"] / z["wall"]
                        for x, z in zip(times[(s, c)], times[(b, c)], strict=True)
                    )
                    rc = statistics.median(
                        x["cpu"] / z["cpu"]
                        for x, z in zip(times[(s, c)], times[(b, c)], strict=True)
                    )
                    print(f"  {s} / {b} at {c} core(s): wall {rw:5.2f}x  cpu {rc:5.2f}x")
            if objs.get("libsvm-omp") is not None:
                print(f"  LIBSVM obj = {objs['libsvm-omp']:.6f}")
            print(f"  load after {name}: {open('/proc/loadavg').read().strip()}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# load after: {open('/proc/loadavg').read().strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
