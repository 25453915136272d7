#!/usr/bin/env python
"""Kernel solvers beyond the cache: how time, passes and memory grow with rows.

For each row count (default 30,000, 100,000, 300,000) a synthetic store
(``ooc-svm synth``: low-dimensional, L2-normalised rows, labels from a hidden linear score,
no label noise; the same rows as SVMlight text for LIBSVM) is trained with RBF by each kernel
solver under a small kernel cache (``--cache-mb``, default 8 MiB: the float32 kernel matrix
of 30,000 rows is 3.6 GB, 450× the cache; of 300,000 rows 360 GB) and with the shard cache
off (``--shard-cache-mb 0``: every pass re-reads and decodes the shards), with
``--checkpoint`` and ``--history``. LIBSVM's ``svm-train`` (``$LIBSVM_TRAIN``, required while
``--solvers`` names ``libsvm``; ``-m`` = the same cache) runs beside it on the text.

Every run is a whole process under ``/usr/bin/time -v`` (wall, CPU, peak RSS) with a wall
limit (``--limit``, default 600 s): a run past it is killed and reported as ``> limit``.
Each run's stderr (its progress lines) is kept in ``DIR/log-SOLVER-ROWS.txt``.
Printed per run: wall, CPU, peak RSS, passes over the store, wall per pass, iterations,
support vectors, the dual objective (LIBSVM's ``obj``), and the load average before and
after; at the end a Markdown table.

Usage::

    python scripts/bench_kernel_scale.py [--rows 30000,100000,300000]
        [--solvers smo,active-set,irwls,libsvm] [--limit 600] [--cache-mb 8]
        [--gamma 1] [--C 1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SYNTH = [
    "--features", "30", "--nnz-per-row", "8", "--seed", "1", "--noise", "0",
    "--nnz-spread", "0", "--w-density", "1.0",
]  # fmt: skip


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def timed(cmd: list[str], limit: float, cwd: str, log: str) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v`` with a wall limit; wall, CPU, peak RSS, stdout.
    Its stderr (progress lines, then ``time -v``'s report) is kept in ``log``."""
    t = time.perf_counter()
    with open(log, "w+b") as err:
        p = subprocess.Popen(
            ["/usr/bin/time", "-v", *cmd],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            out, _ = p.communicate(timeout=limit)
            killed = False
        except subprocess.TimeoutExpired:
            # kill the trainer, not /usr/bin/time: it still reports CPU and peak RSS
            try:
                kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
            except OSError:
                kids = []
            for k in kids:
                os.kill(int(k), 9)
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                out, _ = p.communicate()
            killed = True
        wall = time.perf_counter() - t
        err.seek(0)
        text = err.read().decode(errors="replace")
    res = {"wall": wall, "killed": killed, "rc": p.returncode, "stdout": out.decode()}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    res["rss_mb"] = int(m.group(1)) / 1024.0 if m else float("nan")
    u = re.search(r"User time \(seconds\): ([\d.]+)", text)
    s = re.search(r"System time \(seconds\): ([\d.]+)", text)
    res["cpu"] = float(u.group(1)) + float(s.group(1)) if u and s else float("nan")
    res["stderr_tail"] = [ln for ln in text.splitlines() if not ln.startswith("\t")][-3:]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", default="30000,100000,300000")
    ap.add_argument("--solvers", default="smo,active-set,irwls,libsvm")
    ap.add_argument("--limit", type=float, default=600.0, help="wall limit per run, seconds")
    ap.add_argument("--cache-mb", type=int, default=8)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument(
        "--working-mb",
        type=float,
        default=0.0,
        help="smo's --working-mb (0: its default); below the rows' size smo decomposes",
    )
    ap.add_argument("--dir", default="", help="keep the stores here (default: a temp dir)")
    args = ap.parse_args()

    exe = str(Path(sys.executable).with_name("ooc-svm"))
    libsvm = os.environ.get("LIBSVM_TRAIN", "")
    if not libsvm and "libsvm" in args.solvers.split(","):
        ap.error("--solvers names libsvm: set $LIBSVM_TRAIN to LIBSVM's svm-train")
    work = args.dir or tempfile.mkdtemp(prefix="bench-kscale-")
    os.makedirs(work, exist_ok=True)
    print(f"# load before: {load()}; work dir {work}", flush=True)
    rows_list = [int(r) for r in args.rows.split(",")]
    table = []
    try:
        for n in rows_list:
            store, text = f"s{n}.zarr", f"s{n}.svm"
            for out in (store, text):
                if not os.path.exists(os.path.join(work, out)):
                    subprocess.run(
                        [exe, "synth", out, "--rows", str(n), *SYNTH, "-q"], cwd=work, check=True
                    )
            kmat = n * n * 4 / 2**20
            print(
                f"\n{n} rows: float32 kernel matrix {kmat / 1024:.1f} GiB = "
                f"{kmat / args.cache_mb:.0f}x --cache-mb {args.cache_mb}; shard cache off; "
                f"RBF gamma={args.gamma} C={args.C} tol={args.tol}",
                flush=True,
            )
            for s in args.solvers.split(","):
                before = load()
                if s == "libsvm":
                    if not os.path.exists(libsvm):
                        print(f"  {libsvm} not found: LIBSVM skipped", flush=True)
                        continue
                    cmd = [
                        libsvm, "-c", str(args.C), "-g", str(args.gamma), "-e", str(args.tol),
                        "-m", str(args.cache_mb), text, f"ls{n}.model",
                    ]  # fmt: skip
                else:
                    ck = os.path.join(work, f"ck-{s}-{n}")
                    shutil.rmtree(ck, ignore_errors=True)
                    cmd = [
                        exe, "train", "--solver", s, store, "-o", f"m-{s}-{n}", "--overwrite",
                        "--kernel", "rbf", "--gamma", str(args.gamma), "--C", str(args.C),
                        "--tol", str(args.tol), "--cache-mb", str(args.cache_mb),
                        "--shard-cache-mb", "0", "--checkpoint", ck,
                        "--history", f"h-{s}-{n}.jsonl", "--json",
                    ]  # fmt: skip
                    if s == "smo" and args.working_mb > 0:
                        cmd += ["--working-mb", str(args.working_mb)]
                r = timed(cmd, args.limit, work, os.path.join(work, f"log-{s}-{n}.txt"))
                row = {"rows": n, "solver": s, "wall": r["wall"], "cpu": r["cpu"]}
                row.update(rss_mb=r["rss_mb"], killed=r["killed"], load=f"{before} -> {load()}")
                if r["killed"] and s != "libsvm":
                    # how far it got: the checkpoints it left and its last history line
                    ck = os.path.join(work, f"ck-{s}-{n}")
                    nck = len([d for d in os.listdir(ck) if d.startswith("ckpt-")])
                    row.update(checkpoints=nck)
                    hist = os.path.join(work, f"h-{s}-{n}.jsonl")
                    lines = open(hist).read().splitlines() if os.path.exists(hist) else []
                    last = json.loads(lines[-1]) if len(lines) > 1 else {}
                    row.update(passes=last.get("passes"), last=last)
                    print(
                        f"  {s}: killed at the limit after {nck} checkpoint(s) (resumable with "
                        f"--resume); last history line: passes {last.get('passes', '-')}, "
                        f"violation {last.get('violation', '-')}, "
                        f"pass_seconds {last.get('pass_seconds', '-')}",
                        flush=True,
                    )
                elif r["rc"] != 0:
                    print(f"  {s}: failed ({r['rc']}): {r['stderr_tail']}", flush=True)
                    continue
                elif s == "libsvm":
                    obj = re.search(r"obj = ([-\d.e+]+)", r["stdout"])
                    nsv = re.search(r"Total nSV = (\d+)", r["stdout"])
                    it = re.search(r"#iter = (\d+)", r["stdout"])
                    row.update(
                        obj=float(obj.group(1)) if obj else None,
                        sv=int(nsv.group(1)) if nsv else None,
                        iters=int(it.group(1)) if it else None,
                    )
                else:
                    j = json.loads(r["stdout"].strip().splitlines()[-1])
                    row.update(
                        obj=j.get("dual_objective", j.get("objective")),
                        sv=j.get("n_sv"),
                        iters=j.get("iterations"),
                        passes=j.get("passes"),
                        in_memory=j.get("in_memory"),
                    )
                table.append(row)
                wall = f"> {args.limit:.0f} s (killed)" if r["killed"] else f"{r['wall']:.1f} s"
                per = f", {r['wall'] / row['passes']:.2f} s/pass" if row.get("passes") else ""
                print(
                    f"  {s:10s} wall {wall}, cpu {r['cpu']:.1f} s, peak RSS "
                    f"{r['rss_mb']:.0f} MB, passes {row.get('passes', '-')}{per}, "
                    f"iterations {row.get('iters', '-')}, SVs {row.get('sv', '-')}, "
                    f"objective {row.get('obj', '-')}, in memory {row.get('in_memory', '-')}"
                    f"  (load {row['load']})",
                    flush=True,
                )
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n# load after: {load()}\n")
    print("| rows | solver | wall | CPU | passes | s/pass | iterations | SVs | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        wall = f"> {args.limit:.0f} s" if r["killed"] else f"{r['wall']:.1f} s"
        p = r.get("passes")
        per = f"{r['wall'] / p:.2f}" if p and not r["killed"] else "-"
        if r["killed"] and r.get("last", {}).get("pass_seconds"):
            per = f"{r['last']['pass_seconds']:.2f} (last)"
        print(
            f"| {r['rows']:,} | {r['solver']} | {wall} | {r['cpu']:.1f} s | {p or '-'} | {per} "
            f"| {r.get('iters') or '-'} | {r.get('sv') or '-'} | {r['rss_mb']:.0f} MB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
