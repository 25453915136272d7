#!/usr/bin/env python
"""Serial fraction of the kernel solvers from per-thread CPU time (load-independent).

On a shared machine the wall-clock speed-up from 1 to 2 cores mostly measures the other
processes. CPU time per thread does not: each solver runs once in a child process pinned to
two cores with two kernel threads, and at its end the child reads its own CPU time
(``getrusage``: every thread, ended ones included) and its main thread's
(``/proc/self/task/PID/stat``). The kernel threads split every parallel region's work in
equal static chunks and sleep between regions (``OMP_WAIT_POLICY=passive``), so with two
threads

- the other threads' CPU W is half the parallel work: P ≈ 2 W;
- the main thread's CPU is the serial work plus the other half: S ≈ main − W;
- Amdahl's bound on the speed-up from 1 to 2 cores is (S + P) / (S + P/2).

Printed per data set (a9a γ 0.05, ijcnn1 γ 1, w8a γ 0.05; C = 1, tol 1e-3) and solver: total
CPU, main-thread CPU, S, P, the serial fraction S / (S + P) and the bound, with the load.

Usage::

    python scripts/profile_kernel_serial.py [--data a9a,ijcnn1] [--solvers smo,active-set,irwls]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_kernel_threads import SETS  # noqa: E402


def _thread_cpu(tid: int) -> float:
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(spec: dict) -> None:
    from ooc_svm.api import train

    r = train(
        spec["store"], spec["solver"], kernel="rbf", gamma=spec["gamma"], C=spec["C"],
        tol=spec["tol"], cache_mb=spec["cache_mb"],
    )  # fmt: skip
    ru = resource.getrusage(resource.RUSAGE_SELF)
    total = ru.ru_utime + ru.ru_stime
    main = _thread_cpu(os.getpid())
    print(
        json.dumps(
            {"total": total, "main": main, "dual": r.dual_objective, "passes": r.passes,
             "kkt_source": r.summary.get("kkt_source")}
        )
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="a9a,ijcnn1,w8a")
    ap.add_argument("--solvers", default="smo,active-set,irwls")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--cache-mb", type=float, default=256.0)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0

    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    from ooc_svm.store import csr_to_shards, write_store

    tmp = tempfile.mkdtemp(prefix="prof-kserial-")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.setdefault("OMP_WAIT_POLICY", "passive")
    print(f"# load before: {open('/proc/loadavg').read().strip()}", flush=True)
    print("data    solver      |  CPU s | main s |   S s  |   P s  | serial | 1->2 bound")
    try:
        for name in args.data.split(","):
            path, gamma, nf = SETS[name]
            X, y = load_svmlight_file(str(path), n_features=nf)
            store = os.path.join(tmp, f"{name}.zarr")
            write_store(
                store, csr_to_shards(sp.csr_matrix(X, dtype=np.float32), y, shard_rows=10000)
            )
            for s in args.solvers.split(","):
                spec = {"store": store, "solver": s, "gamma": gamma, "C": args.C,
                        "tol": args.tol, "cache_mb": args.cache_mb}  # fmt: skip
                out = subprocess.run(
                    ["taskset", "-c", "0,1", sys.executable, __file__, "--child", json.dumps(spec)],
                    capture_output=True, text=True, env=env, check=True,
                )  # fmt: skip
                d = json.loads(out.stdout.strip().splitlines()[-1])
                w = d["total"] - d["main"]
                par, ser = 2.0 * w, max(0.0, d["main"] - w)
                bound = (ser + par) / (ser + 0.5 * par) if ser + par > 0 else 1.0
                print(
                    f"{name:7s} {s:11s} | {d['total']:6.2f} | {d['main']:6.2f} | {ser:6.2f} | "
                    f"{par:6.2f} | {ser / max(ser + par, 1e-9):5.1%} | {bound:5.2f}x  "
                    f"(dual {d['dual']:.6f}, passes {d['passes']}, KKT {d['kkt_source']})",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# load after: {open('/proc/loadavg').read().strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
