#!/usr/bin/env python
"""Iteration fidelity of ``--variant svmperf`` and ``paper`` against SVMperf 3.00.

For a9a, w8a, ijcnn1 (``$OOC_SVM_DATA`` or ../shared/data) and the 1M synthetic store
(``ooc-svm synth``: 1M rows x 50,000 features, 77 non-zeros per row, seed 1, zstd — the "1M
store" of ``bench_perf.py``), in ONE run:

- SVMperf 3.00 (``$SVMPERF_LEARN``, its default algorithm ``-w 9`` with shrinking) trains on the
  SVMlight text at ``-c C·n/100 -e 100·ε`` (bias ``--b 1`` is its default); its iterations,
  ``pval`` / ``dval`` and CPU seconds are read from its output and its weights from its model;
- ooc-svm trains ``--variant paper`` and ``--variant svmperf`` from the ingested Zarr store
  (``python -m ooc_svm train --solver perf ... --json``, one child process each).

Every model's primal objective ½(‖w‖² + w_b²) + C Σ max(0, 1 − y(w·x + w_b·bias)) is
computed by ONE function here (:func:`objective`, streamed over the store's shards), and the
certificate gap/(C·n·ε) = (P − lower bound)/(C·n·ε) uses the solver's own lower bound
(SVMperf: its ``dval``). Printed per dataset: iterations, ratio to SVMperf's, full passes
(SVMperf: "-" from the stock binary; an instrumented copy printing ``INSTR full_rounds=...
full_pass_equiv=...`` has them read), objective, lower bound, gap/(C·n·ε),
seconds. The load average is printed at start and end (2 shared cores: seconds are noisy).

a8a is not in /work/shared/data, so it is not measured (said so in the output).

Example::

    SVMPERF_LEARN=/work/ref/svm_perf/svm_perf_learn .venv/bin/python \\
        scripts/bench_svmperf_fidelity.py                 # a9a, w8a, ijcnn1 and the 1M store
    ... scripts/bench_svmperf_fidelity.py --skip-1m       # the three real datasets only
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable

DATASETS = {"a9a": "a9a/a9a", "w8a": "w8a/w8a.bz2", "ijcnn1": "ijcnn1/ijcnn1.bz2"}


def ooc(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "ooc_svm", *map(str, args)], check=True, **kw)


def text_of(data_dir: str, rel: str, work: str) -> str:
    """SVMlight text SVMperf can read: decompressed, empty lines removed (SVMperf's reader
    stops with "Parsing error" on w8a's trailing empty line)."""
    src = os.path.join(data_dir, rel)
    out = os.path.join(work, os.path.basename(rel).removesuffix(".bz2") + ".txt")
    if not os.path.exists(out):
        opener = bz2.open if src.endswith(".bz2") else open
        with opener(src, "rt") as f, open(out + ".tmp", "w") as g:
            for line in f:
                if line.strip():
                    g.write(line)
        os.replace(out + ".tmp", out)
    return out


def store_of(text: str, work: str, name: str) -> str:
    path = os.path.join(work, f"{name}.zarr")
    if not os.path.exists(path):
        ooc("ingest", text, path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def synth_1m(work: str) -> tuple[str, str]:
    """The 1M store (as bench_perf.py makes it) and its SVMlight text."""
    from sklearn.datasets import dump_svmlight_file

    from ooc_svm.store import open_store

    path = os.path.join(work, "synth1000k_zstd.zarr")
    if not os.path.exists(path):
        print("generating the 1M store ...", flush=True)
        ooc("synth", path, "--rows", 1_000_000, "--features", 50_000, "--nnz-per-row", 77,
            "--seed", 1, "--compression", "zstd", stdout=subprocess.DEVNULL)  # fmt: skip
    txt = os.path.join(work, "synth1m.txt")
    if not os.path.exists(txt):
        import scipy.sparse as sp

        st = open_store(path)
        d = st.meta.n_features
        with open(txt + ".tmp", "wb") as f:
            for i in range(st.n_shards):
                sh = st.read_shard(i)
                X = sp.csr_matrix((sh.data, sh.indices, sh.indptr), shape=(sh.n_rows, d))
                dump_svmlight_file(X, sh.y, f, zero_based=False)
        os.replace(txt + ".tmp", txt)
    return path, txt


def objective(store_path: str, w: np.ndarray, wb: float, C: float, bias: float) -> float:
    """½(‖w‖² + w_b²) + C Σ max(0, 1 − y(w·x + w_b·bias)), y = ±1 (the larger label +1),
    streamed over the store's shards. The one function every model is measured with."""
    import scipy.sparse as sp

    from ooc_svm.store import open_store

    st = open_store(store_path)
    d = st.meta.n_features
    pos = max(st.meta.labels)
    w = np.asarray(w, dtype=np.float64)[:d]
    w = np.pad(w, (0, d - w.shape[0]))
    hinge = 0.0
    for i in range(st.n_shards):
        sh = st.read_shard(i)
        X = sp.csr_matrix((sh.data.astype(np.float64), sh.indices, sh.indptr), shape=(sh.n_rows, d))
        y = np.where(sh.y == pos, 1.0, -1.0)
        hinge += float(np.maximum(0.0, 1.0 - y * (X @ w + wb * bias)).sum())
    return 0.5 * (float(w @ w) + wb * wb) + C * hinge


def run_ours(store: str, variant: str, C: float, eps: float, work: str, name: str) -> dict:
    from ooc_svm import load_model

    model = os.path.join(work, f"m_{name}_{variant}")
    t = time.perf_counter()
    p = ooc("train", "--solver", "perf", store, "-o", model, "--C", repr(C), "--eps", repr(eps),
            "--variant", variant, "--json", capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - t
    r = json.loads(p.stdout.splitlines()[-1])
    m = load_model(model)
    passes = r["passes"]
    return {
        "iterations": r["iterations"],
        "full": r.get("full_rounds", passes),
        "pass_eq": r.get("full_pass_equiv", float(passes)),
        "w": np.asarray(m.coef_, dtype=np.float64),
        "wb": float(m.intercept_),  # bias 1: intercept = w_b
        "lower": r["lower_bound"],
        "reported": r["objective"],
        "seconds": r["seconds"],
        "wall": wall,
        "converged": r["converged"],
    }


def run_svmperf(binary: str, text: str, n: int, d: int, C: float, eps: float, work: str) -> dict:
    model = os.path.join(work, "svmperf.model")
    cmd = [binary, "-c", repr(C * n / 100.0), "-e", repr(100.0 * eps), text, model]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    out = p.stdout

    def grab(pat):
        return float(re.search(pat, out).group(1))

    lines = open(model).read().splitlines()
    b = float(lines[10].split("#")[0])  # decision w·x − b, b = −bias·w_b (svm_struct_api.c:1279)
    w = np.zeros(max(d, int(lines[7].split("#")[0])) + 1)
    for tok in lines[11].split("#")[0].split()[1:]:
        i, v = tok.split(":")
        w[int(i)] = float(v)
    # the instrumented copy (/work/ref/svm_perf_instr) also prints its full rounds
    instr = re.search(r"INSTR full_rounds=(\d+).*full_pass_equiv=([\d.]+)", out)
    return {
        "iterations": int(grab(r"Number of iterations:\s*(\d+)")),
        "full": int(instr.group(1)) if instr else None,
        "pass_eq": float(instr.group(2)) if instr else None,
        "w": w[1 : d + 1],
        "wb": -b,
        "lower": grab(r"dval=([-\d.eE+]+)"),
        "reported": grab(r"pval=([-\d.eE+]+)"),
        "seconds": grab(r"Runtime in cpu-seconds:\s*([\d.]+)"),
        "wall": wall,
        "converged": True,
        "cmd": " ".join(cmd),
    }


def report(name: str, store: str, n: int, res: dict, C: float, eps: float) -> None:
    ref = res.get("SVMperf 3.00")
    print(f"\n== {name} (n = {n:,}, C = {C:g}, eps = {eps:g}; C*n*eps = {C * n * eps:.3f})")
    print(
        f"{'config':14s} {'iters':>6} {'/SVMperf':>9} {'full':>5} {'pass-eq':>8} "
        f"{'objective':>14} {'lower bound':>14} {'gap/(Cne)':>9} {'seconds':>8} {'wall':>7}"
    )
    for label, r in res.items():
        P = objective(store, r["w"], r["wb"], C, 1.0)
        ratio = f"{r['iterations'] / ref['iterations']:.3f}" if ref else "-"
        full = "-" if r["full"] is None else str(r["full"])
        peq = "-" if r["pass_eq"] is None else f"{r['pass_eq']:.1f}"
        gap = (P - r["lower"]) / (C * n * eps) if r["lower"] is not None else float("nan")
        print(
            f"{label:14s} {r['iterations']:6d} {ratio:>9} {full:>5} {peq:>8} {P:14.4f} "
            f"{r['lower']:14.4f} {gap:9.3f} {r['seconds']:8.2f} {r['wall']:7.2f}"
            + ("" if r["converged"] else "  NOT CONVERGED")
        )
        if abs(P - r["reported"]) > 1e-6 * abs(P):
            print(f"{'':14s} (the solver reported objective {r['reported']:.4f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("OOC_SVM_DATA", os.path.join(ROOT, "..", "shared", "data")),
    )
    ap.add_argument("--work", default="/tmp/bench_svmperf_fidelity")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.001)
    ap.add_argument("--datasets", default="a9a,w8a,ijcnn1")
    ap.add_argument("--skip-1m", action="store_true")
    ap.add_argument("--no-paper-1m", action="store_true", help="skip paper on the 1M store")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    binary = os.environ.get("SVMPERF_LEARN")
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if not binary:
        print("SVMPERF_LEARN is not set: SVMperf is not run, no ratios", flush=True)
    if not os.path.exists(os.path.join(args.data_dir, "a8a")):
        print(f"a8a: not in {args.data_dir}: not measured", flush=True)
    jobs = []
    for name in [s for s in args.datasets.split(",") if s]:
        txt = text_of(args.data_dir, DATASETS[name], args.work)
        jobs.append((name, store_of(txt, args.work, name), txt))
    if not args.skip_1m:
        jobs.append(("synth1m", *synth_1m(args.work)))
    from ooc_svm.store import open_store

    for name, store, txt in jobs:
        meta = open_store(store).meta
        n, d = int(meta.n_rows), int(meta.n_features)
        res = {}
        if binary:
            res["SVMperf 3.00"] = run_svmperf(binary, txt, n, d, args.C, args.eps, args.work)
            print(f"[{name}] {res['SVMperf 3.00']['cmd']}", flush=True)
        for variant in ("svmperf", "paper"):
            if variant == "paper" and name == "synth1m" and args.no_paper_1m:
                continue
            res[f"ooc {variant}"] = run_ours(store, variant, args.C, args.eps, args.work, name)
        report(name, store, n, res, args.C, args.eps)
    print(f"\nload average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
