#!/usr/bin/env python
"""Benchmark ``--solver active-set`` (Scheinberg 2006) against LIBSVM and our SMO.

Two problems: full a9a, RBF γ=0.05, C=1, and full w8a, linear kernel, C=1, both at
tol=1e-3. Every measurement runs in its own child process (clean peak RSS):

- ``svc``          scikit-learn SVC (LIBSVM), fit time only (parsing the text excluded);
- ``as-sprint``    ``ooc_svm.api.train(store, "active-set", pricing="sprint")``, end to end
                   from the store (the final KKT check pass switched off, ``check=False``);
- ``as-shrinking`` the same with ``pricing="shrinking"``;
- ``smo``          ``ooc_svm.api.train(store, "smo")`` (its own final KKT pass included, as
                   it always runs it);
- ``as-sprint@32`` / ``@1024``, ``as-shrinking@32`` / ``@1024``: peak RSS with
                   ``cache_mb`` 32 and 1024 (the timed runs use ``--cache-mb``, default 256).

Times are printed with their ratio to the SVC time measured in the same run, dual objectives
with their relative difference to SVC's (computed here from ``dual_coef_``: ½cᵀKc − Σ|c|).
The stores are written into ``--workdir`` at the start, so they are read warm (page cache);
a9a / w8a stores are a few MB, reading them costs milliseconds either way.

Usage::

    python scripts/bench_active_set.py [--only a9a|w8a] [--skip-rss] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import _bench_util
from _bench_util import add_child_option, serve_child, solver_result
from _bench_util import peak_rss_mb as _rss_mb

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"

PROBLEMS = {
    "a9a": dict(file="a9a/a9a", n_features=123, kernel="rbf", gamma=0.05, C=1.0),
    "w8a": dict(file="w8a/w8a.bz2", n_features=300, kernel="linear", gamma=None, C=1.0),
}


def _load(spec):
    import numpy as np
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(spec["data"], n_features=spec["n_features"])
    X.indices = X.indices.astype(np.int32)  # SVC refuses int64 indices
    X.indptr = X.indptr.astype(np.int32)
    return X, y


def _svc_dual(X, coef, kernel, gamma) -> float:
    """½ cᵀKc − Σ|c| over SVC's support vectors, in blocks (no n_SV² matrix in memory)."""
    import numpy as np
    import scipy.sparse as sp

    from ooc_svm.kernels.kernel_functions import kernel_matrix

    coef = np.asarray(coef, dtype=np.float64).ravel()
    X = sp.csr_matrix(X, dtype=np.float64)
    if kernel == "linear":
        w = X.T @ coef
        return float(0.5 * w @ w - np.abs(coef).sum())
    quad = 0.0
    for s in range(0, X.shape[0], 2000):
        K = kernel_matrix(X[s : s + 2000], X, kernel, gamma)
        quad += float(coef[s : s + 2000] @ (K @ coef))
    return 0.5 * quad - float(np.abs(coef).sum())


def child(spec: dict) -> dict:
    """Run one measurement in this (child) process."""
    import numpy as np

    what = spec["what"]
    if what == "svc":
        from sklearn.svm import SVC

        X, y = _load(spec)
        t = time.perf_counter()
        clf = SVC(
            C=spec["C"],
            kernel=spec["kernel"],
            gamma=spec["gamma"] or "scale",
            tol=spec["tol"],
            cache_size=spec["cache_mb"],
        ).fit(X, y)
        sec = time.perf_counter() - t
        rss = _rss_mb()
        c = clf.dual_coef_
        c = np.asarray(c.todense() if hasattr(c, "todense") else c).ravel()
        return {
            "seconds": sec,
            "dual": _svc_dual(X[clf.support_], c, spec["kernel"], spec["gamma"]),
            "n_sv": int(c.size),
            "n_free": int((np.abs(c) < spec["C"] * (1 - 1e-9)).sum()),
            "iterations": int(np.sum(clf.n_iter_)),
            "rss_mb": rss,
        }
    from ooc_svm.api import train

    params = dict(C=spec["C"], kernel=spec["kernel"], tol=spec["tol"], cache_mb=spec["cache_mb"])
    if spec["gamma"]:
        params["gamma"] = spec["gamma"]
    solver = "smo" if what == "smo" else "active-set"
    if solver == "active-set":
        params.update(pricing=spec["pricing"], check=False)
    t = time.perf_counter()
    res = train(spec["store"], solver, **params)
    sec = time.perf_counter() - t
    out = {**solver_result(res, sec), "rss_mb": _rss_mb()}
    for k in (
        "n_s",
        "n_c",
        "n_sv",
        "major_iterations",
        "minor_iterations",
        "working_set_peak_mb",
        "refactorisations",
    ):
        if k in res.summary:
            out[k] = res.summary[k]
    return out


def run_child(spec: dict) -> dict:
    try:
        return _bench_util.run_child(__file__, spec)
    except _bench_util.ChildFailed as e:
        return {"error": (e.stderr.strip().splitlines() or ["?"])[-1]}


def make_store(name: str, prob: dict, workdir: Path) -> str:
    import numpy as np
    from sklearn.datasets import load_svmlight_file

    from ooc_svm.store import csr_to_shards, write_store

    path = workdir / f"{name}.zarr"
    if path.exists():
        shutil.rmtree(path)
    X, y = load_svmlight_file(str(DATA / prob["file"]), n_features=prob["n_features"])
    X.indices = X.indices.astype(np.int32)
    write_store(str(path), csr_to_shards(X, y, shard_rows=10_000))
    return str(path)


def _fmt(name, r, ref):
    if "error" in r:
        return f"  {name:<18} ERROR {r['error']}"
    ratio = r["seconds"] / ref["seconds"] if ref and "seconds" in ref else float("nan")
    rel = (
        (r["dual"] - ref["dual"]) / abs(ref["dual"])
        if ref and "dual" in ref and r.get("dual") is not None
        else float("nan")
    )
    extra = ", ".join(
        f"{k}={r[k]:.4g}" if isinstance(r[k], float) else f"{k}={r[k]}"
        for k in (
            "iterations",
            "major_iterations",
            "passes",
            "n_s",
            "n_c",
            "n_sv",
            "n_free",
            "working_set_peak_mb",
        )
        if k in r
    )
    return (
        f"  {name:<18} {r['seconds']:8.2f} s  x{ratio:5.2f} of SVC   dual {r['dual']:.10g} "
        f"(rel {rel:+.1e})  peak RSS {r['rss_mb']:.0f} MB  [{extra}]"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", choices=sorted(PROBLEMS), default=None)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--cache-mb", type=float, default=256.0, help="cache for the timed runs")
    ap.add_argument("--skip-rss", action="store_true", help="skip the 32 / 1024 MB RSS runs")
    ap.add_argument("--skip-smo", action="store_true")
    ap.add_argument("--workdir", default="/tmp/ooc-svm-bench-active-set")
    add_child_option(ap)
    args = ap.parse_args()
    if serve_child(args, child):
        return 0
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"bench_active_set: tol={args.tol}, timed runs with cache_mb={args.cache_mb}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    names = [args.only] if args.only else list(PROBLEMS)
    for name in names:
        prob = PROBLEMS[name]
        t = time.perf_counter()
        store = make_store(name, prob, workdir)
        print(
            f"\n{name}: {prob['kernel']} kernel"
            + (f" gamma={prob['gamma']}" if prob["gamma"] else "")
            + f", C={prob['C']}; store written in {time.perf_counter() - t:.1f} s "
            "(data warm: page cache)"
        )
        base = dict(
            data=str(DATA / prob["file"]),
            n_features=prob["n_features"],
            kernel=prob["kernel"],
            gamma=prob["gamma"],
            C=prob["C"],
            tol=args.tol,
            cache_mb=args.cache_mb,
            store=store,
        )
        ref = run_child(dict(base, what="svc"))
        print(
            _fmt("svc (LIBSVM)", ref, ref) if "error" not in ref else f"  svc ERROR {ref['error']}"
        )
        runs = [
            ("as-sprint", dict(what="as", pricing="sprint")),
            ("as-shrinking", dict(what="as", pricing="shrinking")),
        ]
        if not args.skip_smo:
            runs.append(("smo", dict(what="smo")))
        if not args.skip_rss:
            for pricing in ("sprint", "shrinking"):
                for mb in (32.0, 1024.0):
                    runs.append(
                        (f"as-{pricing}@{int(mb)}", dict(what="as", pricing=pricing, cache_mb=mb))
                    )
        for label, extra in runs:
            r = run_child(dict(base, **extra))
            print(_fmt(label, r, ref), flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
