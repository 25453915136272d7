#!/usr/bin/env python
"""Benchmark ``--solver smo`` against LIBSVM (scikit-learn SVC) on a9a, RBF γ=0.05, C=1.

Every measurement runs in its own child process (clean peak RSS, no shared caches):

- ``svc``      scikit-learn SVC(C, rbf, gamma, tol, cache_size=--cache-mb), fit time only;
- ``wss2``     ``ooc_svm.api.train(store, "smo", selection="wss2")``, end to end (reading the
               store, solving, the independent KKT pass);
- ``platt``    the same with ``selection="platt"``;
- ``wss2@64``, ``wss2@1024``: peak RSS of the wss2 run with ``cache_mb`` 64 and 1024.

Ratios are against the SVC time measured in the same run. Each line says whether the store
was warm (page cache: it was just written, or read by an earlier child) — this machine evicts
idle file pages after about a minute, and a9a's store is a few MB, so reading it costs
milliseconds either way.

Usage::

    python scripts/bench_smo.py [--data ../shared/data/a9a/a9a] [--rows N] [--skip-platt]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _bench_util
from _bench_util import add_child_option, serve_child, solver_result
from _bench_util import peak_rss_mb as _rss_mb

ROOT = Path(__file__).resolve().parents[1]


def child(spec: dict) -> dict:
    """Run one measurement in this (child) process."""
    import numpy as np

    if spec["what"] == "svc":
        from sklearn.datasets import load_svmlight_file
        from sklearn.svm import SVC

        X, y = load_svmlight_file(spec["data"], n_features=123)
        if spec["rows"]:
            X, y = X[: spec["rows"]], y[: spec["rows"]]
        X.indices = X.indices.astype(np.int32)  # SVC refuses int64 indices
        X.indptr = X.indptr.astype(np.int32)
        rss0 = _rss_mb()
        t = time.perf_counter()
        clf = SVC(
            C=spec["C"],
            kernel="rbf",
            gamma=spec["gamma"],
            tol=spec["tol"],
            cache_size=spec["cache_mb"],
        ).fit(X, y)
        sec = time.perf_counter() - t
        rss_fit = _rss_mb()  # before the dense SV kernel matrix used for the dual below
        c = np.asarray(clf.dual_coef_.todense()).ravel()
        from ooc_svm.kernels.kernel_functions import kernel_matrix

        Xs = X[clf.support_]
        dual = float(0.5 * c @ kernel_matrix(Xs, Xs, "rbf", spec["gamma"]) @ c - np.abs(c).sum())
        return {
            "seconds": sec,
            "dual": dual,
            "n_sv": int(len(clf.support_)),
            "iterations": int(clf.n_iter_[0]),
            "rss_before_mb": rss0,
            "peak_rss_mb": rss_fit,
        }
    from ooc_svm.api import train
    from ooc_svm.store import open_store

    st = open_store(spec["store"])
    rss0 = _rss_mb()
    t = time.perf_counter()
    res = train(
        st,
        "smo",
        C=spec["C"],
        kernel="rbf",
        gamma=spec["gamma"],
        tol=spec["tol"],
        selection=spec["selection"],
        cache_mb=spec["cache_mb"],
    )
    sec = time.perf_counter() - t
    s = res.summary
    return {
        **solver_result(res, sec),
        "n_sv": s["n_sv"],
        "kkt_max_violation": s["kkt_max_violation"],
        "cache_hits": s["cache_hits"],
        "cache_misses": s["cache_misses"],
        "rss_before_mb": rss0,
        "peak_rss_mb": _rss_mb(),
    }


def run_child(spec: dict) -> dict:
    return _bench_util.run_child(__file__, spec)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "a9a" / "a9a"))
    ap.add_argument("--rows", type=int, default=0, help="first N rows only (0: all)")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--cache-mb", type=float, default=256.0, help="cache for the timed runs")
    ap.add_argument("--skip-platt", action="store_true")
    add_child_option(ap)
    args = ap.parse_args()
    if serve_child(args, child):
        return 0

    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    from ooc_svm.store import csr_to_shards, write_store

    if not os.path.exists(args.data):
        print(f"bench_smo: {args.data} not found", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="bench-smo-")
    try:
        X, y = load_svmlight_file(args.data, n_features=123)
        if args.rows:
            X, y = X[: args.rows], y[: args.rows]
        store = os.path.join(tmp, "a9a.zarr")
        write_store(store, csr_to_shards(sp.csr_matrix(X, dtype=np.float32), y, shard_rows=10000))
        print(
            f"a9a: {X.shape[0]} rows, {X.nnz} nnz; RBF gamma={args.gamma} C={args.C} "
            f"tol={args.tol}; store {store} (warm: just written)"
        )
        base = dict(
            data=args.data,
            store=store,
            rows=args.rows,
            C=args.C,
            gamma=args.gamma,
            tol=args.tol,
            cache_mb=args.cache_mb,
        )
        runs = [("svc", dict(base, what="svc")), ("wss2", dict(base, what="smo", selection="wss2"))]
        if not args.skip_platt:
            runs.append(("platt", dict(base, what="smo", selection="platt")))
        runs += [
            ("wss2@64MB", dict(base, what="smo", selection="wss2", cache_mb=64.0)),
            ("wss2@1024MB", dict(base, what="smo", selection="wss2", cache_mb=1024.0)),
        ]
        res = {}
        for name, spec in runs:
            r = run_child(spec)
            res[name] = r
            ref = res["svc"]
            ratio = r["seconds"] / ref["seconds"]
            rel = abs(r["dual"] - ref["dual"]) / abs(ref["dual"])
            extra = ""
            if name != "svc":
                extra = (
                    f" kkt_max_violation {r['kkt_max_violation']:.2e}"
                    f" cache hits/misses {r['cache_hits']}/{r['cache_misses']}"
                )
            print(
                f"{name:12s} {r['seconds']:8.2f} s  x{ratio:5.2f} of SVC  dual {r['dual']:.6f}"
                f" (rel diff {rel:.1e})  n_sv {r['n_sv']}  iterations {r['iterations']}"
                f"  peak RSS {r['peak_rss_mb']:.0f} MB (before training "
                f"{r['rss_before_mb']:.0f} MB){extra}",
                flush=True,
            )
        print(
            json.dumps(
                {
                    "summary": {
                        k: {
                            "seconds": v["seconds"],
                            "peak_rss_mb": v["peak_rss_mb"],
                            "dual": v["dual"],
                        }
                        for k, v in res.items()
                    }
                }
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
