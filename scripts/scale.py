#!/usr/bin/env python
"""Proof at scale: a store larger than RAM once decoded, trained by ``perf`` in bounded memory.

Steps (each a child process run under ``/usr/bin/time -v``, so every peak RSS is measured):

1. ``ooc-svm synth`` straight into a Zarr store (default 50,000,000 rows × 1,000,000 features,
   ~66 non-zeros per row: 3.3e9 non-zeros, 26 GB of CSR once decoded — more than the
   machine's 24 GiB) and a 10,000,000-row test split.
2. Disk sequential read speed, measured on the store's own files after dropping the page
   cache (needs root; reported as "not measured" otherwise), and the in-memory kernel speed:
   the very pass function the accelerated ``perf`` pass runs (margins at two points, hinge
   sums along the segment, cuts at the grid points), 2 threads, over ~3 GiB of shards
   already decoded in memory, partials reduced the same way.
3. ``ooc-svm train --solver perf --variant selective --eps 0.001`` (``--variant``,
   ``--inner-mb``) with ``--history``: per pass time, MB/s, non-zeros/s; pass time against
   max(disk read time, kernel time) for the same bytes.
4. ``ooc-svm predict`` and ``ooc-svm evaluate`` of the 10,000,000-row test store: rows/s,
   bounded memory.

Usage::

    python scripts/scale.py                      # the full run (~1 h here, ~45 GB of disk)
    python scripts/scale.py --rows 2000000 --test-rows 500000 --features 100000   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from _bench_util import drop_caches

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
OOC = os.path.join(BIN, "ooc-svm")


def timed(cmd: list[str], log: str) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; return wall seconds, peak RSS (MB), stdout."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{r.stdout}\n{r.stderr}\n")
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    return {
        "seconds": wall,
        "peak_rss_mb": int(m.group(1)) / 1024 if m else float("nan"),
        "stdout": r.stdout,
    }


def du_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def disk_read_speed(path: str, limit_bytes: int = 8 << 30) -> tuple[float | None, int]:
    """Cold sequential read MB/s of the store's files (first ``limit_bytes``)."""
    if not drop_caches():
        return None, 0
    files = []
    for root, _, names in os.walk(path):
        files += [os.path.join(root, n) for n in sorted(names)]
    files.sort()
    buf = bytearray(16 << 20)
    done = 0
    t0 = time.perf_counter()
    for fp in files:
        with open(fp, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                done += n
        if done >= limit_bytes:
            break
    dt = time.perf_counter() - t0
    return done / dt / 1e6, done


KERNEL_CHILD = r"""
import json, sys, time
from functools import reduce
import numpy as np
from concurrent.futures import ThreadPoolExecutor
from ooc_svm.store import open_store
from ooc_svm.solvers.perf import _cut_grid, _line_grid, pass_segment, reduce_cut
store = open_store(sys.argv[1]); budget = float(sys.argv[2]) * 2**30
shards, nbytes = [], 0
for i in range(store.n_shards):
    s = store.read_shard(i); shards.append(s); nbytes += s.nbytes
    if nbytes >= budget:
        break
d = store.meta.n_features
rng = np.random.default_rng(0)
w2 = np.ascontiguousarray(rng.normal(size=(d, 2)) * 0.01)
bc = (w2, 0.0, 0.0, 1.0, float(store.meta.labels[-1]), d + 1, _line_grid(32), _cut_grid(5, 0.1))
def run(ex):
    return reduce(reduce_cut, ex.map(lambda s: pass_segment(s, bc), shards))
with ThreadPoolExecutor(2) as ex:
    run(ex)   # compile / warm
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter(); run(ex)
        best = min(best, time.perf_counter() - t0)
nnz = sum(s.nnz for s in shards)
print(json.dumps({"nnz": nnz, "seconds": best, "nnz_per_s": nnz / best, "bytes": nbytes}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/scale")
    ap.add_argument("--rows", type=int, default=50_000_000)
    ap.add_argument("--test-rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=1_000_000)
    ap.add_argument("--nnz-per-row", type=float, default=66.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--C",
        type=float,
        default=0.02,
        help="LIBLINEAR C (default 0.02: C·n = 1e6 at 50M rows, the same C_perf "
        "as C=1 on the 1M-row benchmark)",
    )
    ap.add_argument("--eps", type=float, default=0.001)
    ap.add_argument(
        "--variant",
        default="selective",
        choices=("paper", "accelerated", "selective"),
        help="perf variant to train with (default: selective, the one with the fewest passes)",
    )
    ap.add_argument(
        "--inner-mb",
        default="1536",
        help="selective: MiB for the rows kept between passes, or auto (default 1536: ~3%% "
        "of the 50M-row store's rows)",
    )
    ap.add_argument(
        "--shard-cache-mb",
        default="0",
        help="train's decoded-shard cache (default 0: the peak RSS is the solver's own; auto "
        "takes up to 8 GiB from the second pass on)",
    )
    ap.add_argument(
        "--data-only",
        action="store_true",
        help="only synthesise the stores (step 1, implies --keep); train later with --reuse",
    )
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    ap.add_argument("--reuse", action="store_true", help="reuse stores already in --dir")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted training from its checkpoint in --dir",
    )
    args = ap.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    log = os.path.join(args.dir, "scale.log")
    train_store = os.path.join(args.dir, "train.zarr")
    test_store = os.path.join(args.dir, "test.zarr")
    rows = {}

    # 1. data
    for path, n, split in ((train_store, args.rows, "train"), (test_store, args.test_rows, "test")):
        if args.reuse and os.path.exists(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        r = timed(
            [
                OOC,
                "synth",
                path,
                "--rows",
                str(n),
                "--features",
                str(args.features),
                "--nnz-per-row",
                str(args.nnz_per_row),
                "--seed",
                str(args.seed),
                "--split",
                split,
            ],
            log,
        )
        rows[f"synth {split}"] = r
        print(f"synth {split}: {r['seconds']:.1f}s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    if args.data_only:
        return
    info = json.loads(
        subprocess.run(
            [OOC, "info", train_store, "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    disk = du_bytes(train_store)
    decoded = info["nnz"] * 8 + info["n_rows"] * 16
    print(
        f"train store: {info['n_rows']} rows, {info['nnz']} nnz, {info['n_shards']} shards, "
        f"{disk / 1e9:.2f} GB on disk, {decoded / 2**30:.1f} GiB decoded",
        flush=True,
    )

    # 2. hardware references
    disk_mbs, disk_probe = disk_read_speed(train_store)
    print(
        f"disk: {disk_mbs if disk_mbs is None else round(disk_mbs)} MB/s cold sequential "
        f"({disk_probe / 1e9:.1f} GB read)",
        flush=True,
    )
    kr = subprocess.run(
        [sys.executable, "-c", KERNEL_CHILD, train_store, "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    kernel = json.loads(kr.stdout.strip().splitlines()[-1])
    print(
        f"in-memory kernel: {kernel['nnz_per_s'] / 1e9:.3f} G nnz/s "
        f"({kernel['nnz'] / 1e6:.0f}M nnz, 2 threads)",
        flush=True,
    )

    # 3. training
    model = os.path.join(args.dir, "model")
    hist = os.path.join(args.dir, "history.jsonl")
    ckpt = os.path.join(args.dir, "checkpoint")
    shutil.rmtree(model, ignore_errors=True)
    if not args.resume:
        shutil.rmtree(ckpt, ignore_errors=True)
    drop_caches()
    r = timed(
        [
            OOC,
            "train",
            "--solver",
            "perf",
            train_store,
            "-o",
            model,
            "--C",
            str(args.C),
            "--eps",
            str(args.eps),
            "--variant",
            args.variant,
            "--json",
            "--history",
            hist,
            "--shard-cache-mb",
            str(args.shard_cache_mb),
            # the selective variant has no checkpoints (yet); its selection budget instead
            *(
                ["--inner-mb", str(args.inner_mb)]
                if args.variant == "selective"
                else ["--checkpoint", ckpt, *(["--resume"] if args.resume else [])]
            ),
        ],
        log,
    )
    summary = json.loads(r["stdout"].strip().splitlines()[-1])
    recs = [json.loads(line) for line in open(hist) if '"header"' not in line]
    pass_times = [x["pass_seconds"] for x in recs if x.get("pass_seconds")]
    med = statistics.median(pass_times) if pass_times else float("nan")
    print(
        f"train: {summary['iterations']} iterations, {summary['passes']} passes, "
        f"{r['seconds']:.1f}s, peak RSS {r['peak_rss_mb']:.0f} MB",
        flush=True,
    )
    rows["train"] = r

    # 4. predict / evaluate of the test split
    preds = os.path.join(args.dir, "preds.parquet")
    rp = timed([OOC, "predict", model, test_store, "-o", preds], log)
    rows["predict"] = rp
    re_ = timed([OOC, "evaluate", model, test_store, "--json"], log)
    rows["evaluate"] = re_
    ev = json.loads(re_["stdout"].strip().splitlines()[-1])

    # report
    kernel_time = info["nnz"] / kernel["nnz_per_s"]
    disk_time = disk / (disk_mbs * 1e6) if disk_mbs else float("nan")
    bound = max(kernel_time, disk_time if disk_mbs else 0.0)
    lines = [
        "| quantity | value |",
        "|---|---|",
        f"| train store | {info['n_rows']:,} rows × {info['n_features']:,} features, "
        f"{info['nnz']:,} nnz, {info['n_shards']} shards |",
        f"| size on disk (zstd) / decoded | {disk / 1e9:.2f} GB / {decoded / 2**30:.1f} GiB |",
        f"| disk cold sequential read | "
        f"{'not measured' if disk_mbs is None else f'{disk_mbs:.0f} MB/s'} |",
        f"| in-memory pass kernel (2 threads) | {kernel['nnz_per_s'] / 1e9:.3f} G nnz/s |",
        f"| C, eps, variant | {args.C}, {args.eps}, {args.variant}"
        + (f" (--inner-mb {args.inner_mb})" if args.variant == "selective" else "")
        + f", --shard-cache-mb {args.shard_cache_mb}"
        + " |",
        f"| iterations / passes | {summary['iterations']} / {summary['passes']} |",
        f"| total training time | {r['seconds']:.1f} s |",
        f"| time per pass (median, min, max) | {med:.2f} s, {min(pass_times):.2f} s, "
        f"{max(pass_times):.2f} s |"
        if pass_times
        else "| time per pass | n/a |",
        f"| achieved per pass (median) | {disk / med / 1e6:.0f} MB/s of store, "
        f"{info['nnz'] / med / 1e9:.3f} G nnz/s |",
        f"| floor max(disk time, kernel time) | {bound:.2f} s "
        f"(disk {disk_time:.2f} s, kernel {kernel_time:.2f} s) |",
        f"| pass time / floor (median) | {med / bound:.2f} |",
        f"| objective / final gap | {summary['objective']:.6g} / {summary.get('stop_value')} |",
        f"| test accuracy / AUC ({args.test_rows:,} rows) | {ev.get('accuracy'):.4f} / "
        f"{ev.get('auc'):.4f} |",
        f"| predict throughput | {args.test_rows / rp['seconds']:,.0f} rows/s "
        f"({rp['seconds']:.1f} s) |",
    ]
    for name, x in rows.items():
        lines.append(f"| peak RSS {name} | {x['peak_rss_mb']:.0f} MB ({x['seconds']:.1f} s) |")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(args.dir, "scale_table.md"), "w") as f:
        f.write(table + "\n")
    worst = max(x["peak_rss_mb"] for x in rows.values())
    print(
        f"\npeak RSS of every process <= 2 GB: {'yes' if worst <= 2048 else 'NO'} "
        f"(max {worst:.0f} MB)"
    )
    if not args.keep:
        for p in (train_store, test_store, preds):
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (
                os.path.exists(p) and os.remove(p)
            )


if __name__ == "__main__":
    main()
