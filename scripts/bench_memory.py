"""Training inside a memory limit against the same training without one.

For each configuration (the default flags, ``--variant selective``, ``--shard-cache-mb 0``;
or those given with ``--config``) the script runs ``ooc-svm train --solver perf STORE``
inside the limit and without it, paired and interleaved (limited, then unconstrained, then the
next configuration; ``--repeat`` rounds), and prints one table: wall and CPU seconds, peak
memory, reads of the store from disk, passes, objective, and the result (converged, not
converged, OOM-killed, refused), with the load average before and after.

The limit is a real cgroup (cgroup v1 ``memory.limit_in_bytes`` or a cgroup v2
``memory.max``; needs root) of ``--limit-mb``, or, with ``--memory-mb``, ooc-svm's own
budget (``--memory-mb`` passed to train; nothing enforces it: the peak shows whether it held).
A cgroup counts the page cache: its peak (``max_usage_in_bytes``) is shown next to the
process's peak RSS.

Peak RSS, CPU and disk reads come from ``/usr/bin/time`` around each run (``%M``, ``%U +
%S``, ``%I``: 512-byte blocks read from disk); a store read = its bytes on disk.

Example (the store of the memory benchmark, 320M non-zeros, ~1.7 GB on disk)::

    ooc-svm synth /tmp/mem/s4m.zarr --rows 4000000 --features 50000 --nnz-per-row 80 --seed 1
    python scripts/bench_memory.py /tmp/mem/s4m.zarr --limit-mb 1500
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    "default": [],
    "selective": ["--variant", "selective"],
    "shard-cache-mb 0": ["--shard-cache-mb", "0"],
}


def _store_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _make_cgroup(mb: float) -> tuple[str, str] | None:
    """(folder, kind) of a new cgroup limited to ``mb`` MiB, or None where none can be made."""
    name = f"ooc-bench-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        d = os.path.join(v1, name)
        try:
            os.mkdir(d)
            with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
                f.write(str(int(mb * 2**20)))
            return d, "v1"
        except OSError:
            return None
    if os.access("/sys/fs/cgroup/cgroup.subtree_control", os.W_OK):
        d = os.path.join("/sys/fs/cgroup", name)
        try:
            os.mkdir(d)
            with open(os.path.join(d, "memory.max"), "w") as f:
                f.write(str(int(mb * 2**20)))
            return d, "v2"
        except OSError:
            return None
    return None


def _cgroup_peak(cg: tuple[str, str]) -> tuple[int, int]:
    """(peak bytes, OOM kills) of a cgroup."""
    d, kind = cg
    peak_file = "memory.max_usage_in_bytes" if kind == "v1" else "memory.peak"
    events = "memory.oom_control" if kind == "v1" else "memory.events"
    peak = kills = 0
    try:
        with open(os.path.join(d, peak_file)) as f:
            peak = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(os.path.join(d, events)) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    kills = int(v)
    except (OSError, ValueError):
        pass
    return peak, kills


def _run(args, flags: list[str], limited: bool, store_bytes: int) -> dict:
    """One training; returns its row of the table."""
    out = tempfile.mkdtemp(prefix="bench-mem-", dir=args.tmp)
    timing = os.path.join(out, "time.txt")
    cmd = [
        args.ooc_svm, "train", "--solver", "perf", args.store, "-o", os.path.join(out, "m"),
        "--json", "-q", *flags,
    ]  # fmt: skip
    if limited and args.memory_mb:
        cmd += ["--memory-mb", str(args.memory_mb)]
    cmd = ["/usr/bin/time", "-o", timing, "-f", "%e %U %S %M %I", *cmd]
    cg = _make_cgroup(args.limit_mb) if limited and not args.memory_mb else None
    if limited and not args.memory_mb and cg is None:
        raise SystemExit("bench_memory: cannot make a cgroup here (needs root); use --memory-mb")
    env = {k: v for k, v in os.environ.items() if k != "OOC_SVM_MEMORY_MB"}
    if args.drop_caches:
        subprocess.run(["sync"], check=False)
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1")
        except OSError:
            pass
    t0 = time.perf_counter()
    if cg is not None:
        proc = subprocess.run(
            ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh", cg[0], *cmd],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    row: dict = {"wall": wall, "rc": proc.returncode}
    try:
        with open(timing) as f:
            last = f.read().strip().splitlines()[-1].split()
        row.update(
            wall=float(last[0]), cpu=float(last[1]) + float(last[2]),
            rss=int(last[3]) * 1024, reads=int(last[4]) * 512 / store_bytes,
        )  # fmt: skip
    except (OSError, ValueError, IndexError):
        pass
    if cg is not None:
        row["cg_peak"], kills = _cgroup_peak(cg)
        row["oom"] = kills > 0
        try:
            os.rmdir(cg[0])
        except OSError:
            pass
    try:
        js = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(
            objective=js.get("objective"), passes=js.get("passes"),
            converged=js.get("converged"), variant=js.get("variant"),
            budget=js.get("memory_budget", {}),
        )  # fmt: skip
    except (ValueError, IndexError):
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:120]
    shutil.rmtree(out, ignore_errors=True)
    return row


def _result(row: dict) -> str:
    if row.get("oom") or row.get("rc") in (-9, 137):
        return "OOM-killed"
    if "error" in row:
        return f"failed: {row['error']}"
    return "converged" if row.get("converged") else "not converged"


def _fmt(row: dict, name: str, limited: bool, limit: str) -> str:
    def mb(v):
        return "-" if v is None else f"{v / 2**20:,.0f}"

    b = row.get("budget") or {}
    src = f"{b.get('mib', 0):,.0f} MiB {b.get('source', '')}" if b else "-"
    obj = row.get("objective")
    return (
        f"| {name} | {limit if limited else 'none'} | {row.get('wall', 0):.1f} | "
        f"{row.get('cpu', 0):.1f} | {mb(row.get('rss'))} | {mb(row.get('cg_peak'))} | "
        f"{row.get('reads', 0):.1f} | {row.get('passes', '-')} | {row.get('variant') or '-'} | "
        f"{'-' if obj is None else f'{obj:.7g}'} | {_result(row)} | {src} |"
    )


def profile(store_path: str, shards: int) -> None:
    """Where a streamed pass's time goes, per shard and for the whole store: reading the files
    from disk (page cache dropped first), decoding them (files in the page cache), and the
    pass's kernel on the decoded shard (perf's hinge pass: X·w, Xᵀ·(violators)); one thread,
    CPU and wall."""
    import numpy as np

    from ooc_svm.engine.passes import hinge_pass
    from ooc_svm.engine.reader import shard_files
    from ooc_svm.memory_budget import drop_cache_of
    from ooc_svm.store import open_store

    store = open_store(store_path)
    ids = list(range(min(shards, store.n_shards)))
    read = store.shard_reader(fast=True)
    w = np.random.default_rng(0).standard_normal(store.meta.n_features + 1) * 1e-2
    disk = dec = comp = 0.0
    cdisk = cdec = ccomp = 0.0
    nbytes = 0
    for sid in ids:
        files = shard_files(store, sid)
        for f in files:
            drop_cache_of(f)
        t, c = time.perf_counter(), time.process_time()
        for f in files:
            with open(f, "rb") as fh:
                nbytes += len(fh.read())
        disk += time.perf_counter() - t
        cdisk += time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        shard = read(sid)  # the files are in the page cache now: decoding only
        dec += time.perf_counter() - t
        cdec += time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        hinge_pass(shard, (w, 1.0, 1.0))
        comp += time.perf_counter() - t
        ccomp += time.process_time() - c
    k = store.n_shards / len(ids)
    print(f"profile of one pass ({len(ids)} of {store.n_shards} shards measured, x{k:.1f}):")
    print(f"  read from disk : {disk * k:7.2f} s wall {cdisk * k:7.2f} s CPU "
          f"({nbytes * k / 1e9:.2f} GB, {nbytes / max(disk, 1e-9) / 1e6:,.0f} MB/s)")  # fmt: skip
    print(f"  decode (zstd)  : {dec * k:7.2f} s wall {cdec * k:7.2f} s CPU")
    print(f"  hinge pass     : {comp * k:7.2f} s wall {ccomp * k:7.2f} s CPU")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("store")
    p.add_argument("--limit-mb", type=float, default=1500.0, help="cgroup limit (MiB)")
    p.add_argument(
        "--memory-mb", type=float, default=None, help="pass --memory-mb instead of a cgroup"
    )
    p.add_argument("--repeat", type=int, default=1, help="rounds of every pair")
    p.add_argument(
        "--config", action="append", default=None, choices=list(CONFIGS),
        help="configurations to run (default: all)",
    )  # fmt: skip
    p.add_argument("--limited-only", action="store_true", help="skip the unconstrained runs")
    p.add_argument("--drop-caches", action="store_true", help="drop the page cache before runs")
    p.add_argument("--ooc-svm", default=os.path.join(os.path.dirname(sys.executable), "ooc-svm"))
    p.add_argument("--tmp", default=None, help="folder of the models written (default /tmp)")
    p.add_argument(
        "--profile", type=int, default=0, metavar="SHARDS",
        help="only profile a pass (disk read, decode, kernel) over this many shards",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.profile:
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        profile(args.store, args.profile)
        return 0
    store_bytes = _store_bytes(args.store)
    limit = f"--memory-mb {args.memory_mb:g}" if args.memory_mb else f"cgroup {args.limit_mb:g}"
    print(f"store {args.store}: {store_bytes / 1e9:.2f} GB on disk; limit {limit}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(
        "| flags | limit | wall s | CPU s | peak RSS MiB | cgroup peak MiB | store reads | "
        "passes | variant | objective | result | budget |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for name in args.config or list(CONFIGS):
            lim = _run(args, CONFIGS[name], True, store_bytes)
            print(_fmt(lim, name, True, limit), flush=True)
            if args.limited_only:
                continue
            free = _run(args, CONFIGS[name], False, store_bytes)
            print(_fmt(free, name, False, limit), flush=True)
            if "wall" in lim and "wall" in free and not lim.get("oom"):
                ratios.setdefault(name, []).append(
                    (lim["wall"] / free["wall"], lim.get("cpu", 0) / max(free.get("cpu", 1), 1e-9))
                )
    print()
    for name, rs in ratios.items():
        w = sorted(r[0] for r in rs)[len(rs) // 2]
        c = sorted(r[1] for r in rs)[len(rs) // 2]
        print(
            f"{name}: limited / unconstrained = {w:.2f}x wall, {c:.2f}x CPU (median of {len(rs)})"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
