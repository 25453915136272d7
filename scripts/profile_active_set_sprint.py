#!/usr/bin/env python
"""Time active-set's sprints (the compiled minor iterations) inside one training run.

Trains ``--solver active-set`` in this process (RBF; a9a γ 0.05, ijcnn1 γ 1, w8a γ 0.05;
C = 1, tol 1e-3, cache 256 MB) with :meth:`WorkingSet._sprint` wrapped by a timer, and
prints the run's and the sprints' wall and CPU seconds (the process's CPU clock: every
thread), the number of sprint calls and minor iterations, the median working-set size and
number of Q columns, the dual objective, and the load average. The sprint is a small part of
a run (10–17 % of the CPU on a9a and ijcnn1), so a change to it is lost in whole-process
timings on a loaded machine; this measures it alone. Compare two checkouts by running the
script of each in interleaved rounds (the numba cache must be warm: run each once first).

Usage::

    taskset -c 0,1 python scripts/profile_active_set_sprint.py [--data a9a] [--rows N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_kernel_threads import SETS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="a9a", choices=sorted(SETS))
    ap.add_argument("--rows", type=int, default=0, help="first N rows only (0: all)")
    args = ap.parse_args()

    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    from ooc_svm.api import train
    from ooc_svm.solvers.active_set import working_set as ws
    from ooc_svm.store import csr_to_shards, write_store

    path, gamma, nf = SETS[args.data]
    X, y = load_svmlight_file(str(path), n_features=nf)
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    stats: dict = {"calls": 0, "wall": 0.0, "cpu": 0.0, "iters": 0, "n": [], "p": []}
    orig = ws.WorkingSet._sprint

    def timed(self, phase, st, fl):
        t, c, it = time.perf_counter(), time.process_time(), self.c.iterations
        code = orig(self, phase, st, fl)
        stats["wall"] += time.perf_counter() - t
        stats["cpu"] += time.process_time() - c
        stats["calls"] += 1
        stats["iters"] += self.c.iterations - it
        stats["n"].append(self.G.shape[0])
        stats["p"].append(int(self.cols.p))
        return code

    ws.WorkingSet._sprint = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="prof-sprint-") as tmp:
        store = os.path.join(tmp, f"{args.data}.zarr")
        write_store(store, csr_to_shards(sp.csr_matrix(X, dtype=np.float32), y, shard_rows=10000))
        print(f"# load before: {open('/proc/loadavg').read().strip()}", flush=True)
        t, c = time.perf_counter(), time.process_time()
        r = train(store, "active-set", kernel="rbf", gamma=gamma, C=1.0, tol=1e-3, cache_mb=256)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"{args.data}: train wall {wall:.2f} s cpu {cpu:.2f} s, dual {r.dual_objective!r}, "
          f"passes {r.passes}")  # fmt: skip
    print(
        f"sprints: {stats['calls']} calls, {stats['iters']} minor iterations, wall "
        f"{stats['wall']:.2f} s cpu {stats['cpu']:.2f} s; working rows median "
        f"{statistics.median(stats['n']):.0f}, Q columns median {statistics.median(stats['p']):.0f}"
        f" max {max(stats['p'])}"
    )
    print(f"# load after: {open('/proc/loadavg').read().strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
