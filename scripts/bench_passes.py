#!/usr/bin/env python
"""Full passes of ``--solver perf``: paper vs accelerated vs selective, against LIBLINEAR.

Fewer full passes, the same certificate. For a9a, w8a, ijcnn1 (from
../shared/data or ``--data-dir``) and the synthetic store (``ooc-svm synth``, default 1M rows
x 50,000 features, 77 non-zeros per row, seed 1 — the "1M store"; ``--rows 300000`` for a
smaller one), every configuration trains in its own child process (local engine, no shard
cache, page cache warm: the store was just read by the previous run) and reports full passes,
iterations (inner planes included), seconds, seconds spent in passes, the primal objective
½‖w‖² + C Σ ξᵢ and its gap to LIBLINEAR's in units of the guarantee, (P − P_LL)/(C·n·ε),
which must be ≤ 1 (P_LL ≥ P*, so a slightly negative value just means LIBLINEAR's
reference is not fully converged). Ratios are to the accelerated variant of the same run.

Configurations: ``paper``, ``accelerated``, ``selective`` (default ``--inner-mb auto``: a
quarter of the available memory, at most what holds every row — all of the three small sets
and of the 1M store), ``selective:MB`` with a fixed ``--inner-mb`` (``--budgets``, default
256: all of the small sets, ~20 % of the 1M store's rows) and ``selective@F``: the
budget set to F times the store's size as the selection counts it (64 B per row + 8 B per
non-zero), i.e. about a fraction F of the rows in memory (``--fractions``, default 0.2).
The seconds in passes (``pass s``) divided by the passes give the cost of a pass.

LIBLINEAR: scikit-learn ``LinearSVC(loss="hinge", dual=True, intercept_scaling=1)``
(LIBLINEAR -s 3 -B 1) in memory at ``tol`` 1e-8 (real sets) / ``--ll-tol-synth`` (default
1e-4: a tight tolerance takes minutes on the 1M store), as tests/solvers/test_perf.py computes P*.

Example::

    .venv/bin/python scripts/bench_passes.py                       # ~15 min under load
    .venv/bin/python scripts/bench_passes.py --skip-synth
    .venv/bin/python scripts/bench_passes.py --datasets "" --rows 300000 --no-paper-synth
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable
sys.path.insert(0, HERE)

import bench_perf as bp  # noqa: E402  (helpers: stores, LIBLINEAR child)


def child_perf(cfg: dict) -> dict:
    from ooc_svm.api import train
    from ooc_svm.engine import LocalEngine
    from ooc_svm.store import open_store

    store = open_store(cfg["store"])
    extra = {}
    if cfg.get("inner_mb") is not None:
        extra["inner_mb"] = cfg["inner_mb"]
    with LocalEngine() as eng:
        t = time.perf_counter()
        r = train(
            store,
            "perf",
            engine=eng,
            C=cfg["C"],
            eps=cfg["eps"],
            bias=1.0,
            variant=cfg["variant"],
            **extra,
        )
        sec = time.perf_counter() - t
    return {
        "iterations": r.iterations,
        "passes": r.passes,
        "seconds": sec,
        "pass_seconds": sum(h["pass_seconds"] for h in r.history),
        "objective": r.objective,
        "lower_bound": r.summary["lower_bound"],
        "converged": r.summary["converged"],
        "selected_rows": r.summary.get("selected_rows"),
        "selected_mb": r.summary.get("selected_mb"),
        "n": store.meta.n_rows,
    }


def child_main(cfg: dict) -> None:
    fn = {"perf": child_perf, "liblinear": bp.child_liblinear}[cfg["kind"]]
    print("RESULT " + json.dumps(fn(cfg)), flush=True)


def run_child(cfg: dict) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(
            [PY, os.path.abspath(__file__), "--child", json.dumps(cfg)],
            stdout=out,
            stderr=err,
            cwd=ROOT,
        )
        _, status, ru = os.wait4(p.pid, 0)
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        etext = err.read().decode()
    res = {}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if not res:
        res = {"error": (etext.strip().splitlines() or ["no output"])[-1][:300]}
    res["wall"] = time.perf_counter() - t0
    res["peak_rss_mb"] = ru.ru_maxrss / 1024
    return res


def ps_share() -> float:
    """The share of ``inner_mb`` the selection takes (``SELECTION_SHARE`` / ``SHARE``)."""
    from ooc_svm.solvers.perf.selective import SELECTION_SHARE, SHARE

    return SELECTION_SHARE / SHARE


def store_budget_mb(path: str) -> float:
    """The store's size as the selection budget counts it (64 B per row + 8 B per nnz)."""
    from ooc_svm.solvers.perf.selection import NZ_BYTES, ROW_BYTES
    from ooc_svm.store import open_store

    m = open_store(path).meta
    return (ROW_BYTES * m.n_rows + NZ_BYTES * m.nnz) / 2**20


HEADER = (
    f"{'data':9s} {'config':18s} {'passes':>6} {'iters':>6} {'seconds':>8} {'pass s':>7} "
    f"{'objective':>16} {'gap/(Cne)':>10} {'passes/acc':>10} {'time/acc':>8} {'in mem':>14} "
    f"{'RSS MB':>7}"
)


def fmt(name, label, r, ref, acc, C, eps):
    if "error" in r:
        return f"{name:9s} {label:18s} ERROR {r['error']}"
    gap = (r["objective"] - ref["objective"]) / (C * r["n"] * eps) if "objective" in ref else 0
    pr = f"{r['passes'] / acc['passes']:.3f}" if acc and "passes" in acc else ""
    tr = f"{r['seconds'] / acc['seconds']:.2f}" if acc and "seconds" in acc else ""
    mem = ""
    if r.get("selected_rows") is not None:
        mem = f"{r['selected_rows']}r/{r['selected_mb']:.0f}MB"
    return (
        f"{name:9s} {label:18s} {r['passes']:6d} {r['iterations']:6d} {r['seconds']:8.2f} "
        f"{r['pass_seconds']:7.2f} {r['objective']:16.6f} {gap:10.4f} {pr:>10} {tr:>8} "
        f"{mem:>14} {r['peak_rss_mb']:7.0f}"
    )


def bench_one(name, path, ll_cfg, args, summary, paper=True, ref_objective=None):
    if ref_objective is not None:
        ref = {"objective": ref_objective, "seconds": float("nan")}
        print(f"{name:9s} {'LIBLINEAR':18s} objective {ref_objective:.6f} (given)", flush=True)
    else:
        ref = run_child(ll_cfg)
    if "error" in ref:
        print(f"{name:9s} LIBLINEAR ERROR {ref['error']}", flush=True)
    else:
        if ref_objective is None:
            print(
                f"{name:9s} {'LIBLINEAR':18s} objective {ref['objective']:.6f} "
                f"({ref['seconds']:.2f}s, tol {ll_cfg.get('tol', 1e-4)})",
                flush=True,
            )
    whole = store_budget_mb(path)
    confs = ([("paper", None)] if paper else []) + [("accelerated", None), ("selective", None)]
    confs += [(f"selective:{mb:g}", mb) for mb in args.budgets]
    confs += [(f"selective@{f:g}", f * whole / ps_share()) for f in args.fractions]
    res, acc = {}, None
    for label, mb in confs:
        variant = label.split("@")[0].split(":")[0]
        bp.set_page_cache(path, warm=True)
        r = run_child(
            {
                "kind": "perf",
                "store": path,
                "variant": variant,
                "C": args.C,
                "eps": args.eps,
                "inner_mb": mb,
            }
        )
        if label == "accelerated":
            acc = r
        res[label] = r
        print(fmt(name, label, r, ref, acc, args.C, args.eps), flush=True)
    summary[name] = {"liblinear": ref, **res}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("OOC_SVM_DATA", os.path.join(ROOT, "..", "shared", "data")),
    )
    ap.add_argument(
        "--work", default=os.path.join("/tmp", os.environ.get("USER", "bench"), "bench_perf")
    )
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.001)
    ap.add_argument("--datasets", default="a9a,w8a,ijcnn1")
    ap.add_argument("--skip-synth", action="store_true")
    ap.add_argument("--no-paper-synth", action="store_true", help="skip paper on the synth store")
    ap.add_argument("--no-paper", action="store_true", help="skip paper everywhere")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=50_000)
    ap.add_argument("--nnz-per-row", type=float, default=77.0)
    ap.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "none"])
    ap.add_argument("--ll-tol-synth", type=float, default=1e-4)
    ap.add_argument(
        "--synth-ref",
        type=float,
        default=None,
        help="LIBLINEAR's objective on the synth store from an earlier run (skips its ~3 min)",
    )
    ap.add_argument(
        "--budgets",
        type=lambda s: [float(x) for x in s.split(",") if x],
        default=[256.0],
        help="extra selective runs with a fixed --inner-mb (MiB, comma list)",
    )
    ap.add_argument(
        "--fractions",
        type=lambda s: [float(x) for x in s.split(",") if x],
        default=[0.2],
        help="extra selective runs with inner_mb = F x the store's size (comma list)",
    )
    args = ap.parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return 0
    os.makedirs(args.work, exist_ok=True)
    print(
        f"load average at start: {os.getloadavg()}; cores: {os.cpu_count()}; C={args.C} "
        f"eps={args.eps} bias=1; local engine, no shard cache, page cache warm"
    )
    print(HEADER)
    summary: dict = {}
    for name in [d for d in args.datasets.split(",") if d]:
        path, src, n, nf = bp.make_real_store(name, args.data_dir, args.work)
        ll = {"kind": "liblinear", "file": src, "n_features": nf, "C": args.C}
        ll.update(tol=1e-8, max_iter=1_000_000)
        bench_one(name, path, ll, args, summary, paper=not args.no_paper)
    if not args.skip_synth:
        path = bp.make_synth_store(
            args.work, args.rows, args.features, args.nnz_per_row, 1, args.compression
        )
        name = f"synth{args.rows // 1000}k"
        ll = {"kind": "liblinear", "store": path, "C": args.C, "tol": args.ll_tol_synth}
        bench_one(
            name,
            path,
            ll,
            args,
            summary,
            paper=not (args.no_paper_synth or args.no_paper),
            ref_objective=args.synth_ref,
        )
    print(f"load average at end: {os.getloadavg()}")
    print("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
