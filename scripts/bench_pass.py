#!/usr/bin/env python
"""Benchmark one streamed pass (margins + violated-constraint sum) against the in-memory floor.

What it measures (each configuration in its own child process, so peak RSS is its own):

- ``memory``: the reference — the same numba pass function (``ooc_svm.engine.passes.
  hinge_pass``: w·xᵢ for every row, Σ over rows with yᵢ(w·xᵢ+b) < 1 of yᵢxᵢ, the count and
  the hinge sum) over the same shards already decoded in memory, 2 threads, partials reduced
  in the same fixed tree;
- ``local``: ``LocalEngine(n_threads=2)`` streaming the store;
- ``processes``: ``DaskEngine("processes", n_workers=2, threads_per_worker=1)``;
- ``local-cached``: the local engine with room for every decoded shard in its cache;
- ``local-auto``: the default engine of ``ooc-svm train`` (``make_engine("local")``,
  ``--shard-cache-mb auto``: caches from the second pass on), two untimed passes.

The store (1,000,000 × 50,000, ~80 non-zeros per row by default) is made once with
``ooc_svm.synth`` (the ``ooc-svm synth`` generator) per format and codec and cached in
``--dir`` (default /tmp/bench). Warm numbers: the store was just read (page cache) and each
child first makes one untimed pass; the figure is the best of ``--repeat`` passes (median
also printed). ``--cold`` drops the page cache (``echo 3 > /proc/sys/vm/drop_caches``, needs
root) right before a single timed pass (after an untimed pass that opened the store and
loaded the kernels in every process). ``--overlap`` (a store that does not
fit the cache) times, for the same bytes: ``disk read`` (every file of the store read once,
sequentially, after its pages were evicted with ``posix_fadvise(DONTNEED)``: these files
only, nothing else on the machine), ``decode`` (the store's own shard reader — read from the
page cache, decompress, validate — over every shard on ``--threads`` threads, plus the same
on one thread), ``kernel`` (the ``memory`` pass above) and the engine's real pass
(``LocalEngine`` with ``cache_mb=0``, the store's pages evicted right before it), and prints
pass / max(disk read, decode, kernel) (goal <= 1.3) and pass / (decode + kernel) (the bound
when decode and kernel share the same cores), the same ratio of CPU seconds (what the
pipeline costs beyond decoding and the kernel: page-cache fills, hand-offs; it does not
depend on other processes' load as wall times do) and the 1-minute load average of each row.
``--memtest`` runs the local engine with a shard cache 4x smaller than the decoded store and
checks peak RSS against shard size × (threads + prefetch) + cache + the bound on the free
buffers of the reader's pool + O(features).

Usage::

    python scripts/bench_pass.py                       # zarr lz4/zstd/none + parquet lz4
    python scripts/bench_pass.py --codecs lz4 --formats zarr --cold --memtest
    python scripts/bench_pass.py --codecs lz4 --formats zarr --no-warm --overlap
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from _bench_util import drop_caches, pass_digest, pass_weights

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------------------------------
# child side
# ------------------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _RssSampler:
    """Samples this process's resident set every few ms (peak RSS *during* the passes)."""

    def __init__(self, every: float = 0.002):
        import threading

        self.every = every
        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _current_rss_mb())
            self._stop.wait(self.every)

    def __enter__(self):
        self.peak = _current_rss_mb()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _current_rss_mb())


def _wait_go() -> None:
    print("READY", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit("parent went away")


def _warm_kernels() -> None:
    """Compile / load the numba kernels on tiny arrays (no store pages touched)."""
    from ooc_svm.engine.passes import hinge_pass
    from ooc_svm.store import Shard

    ip = np.array([0, 2, 3], np.int64)
    ix = np.array([0, 3, 1], np.int32)
    da = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([1.0, -1.0])
    for a in (ip, ix, da, y):
        a.flags.writeable = False
    hinge_pass(Shard(ip, ix, da, y), (np.zeros(4), 1.0, 0.0))


def child(args) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ooc_svm.engine import LocalEngine, StreamingTreeReduce, add_partials
    from ooc_svm.engine.passes import hinge_pass
    from ooc_svm.engine.reader import materialize
    from ooc_svm.store import open_store

    store = open_store(args.store)
    meta = store.meta
    bc = pass_weights(store)
    out: dict = {"mode": args.child, "store": args.store}
    _warm_kernels()
    times: list[float] = []
    cpus: list[float] = []
    cpu_clock = time.process_time

    def timed(call):
        c = cpu_clock()
        t = time.perf_counter()
        r = call()
        times.append(time.perf_counter() - t)
        cpus.append(cpu_clock() - c)
        return r

    res = None
    if args.child == "decode":  # the store's reader alone, no kernel (page cache warm)
        from ooc_svm.engine.reader import shard_reader

        read = shard_reader(store)
        for i in range(store.n_shards):  # untimed: the first read checks every checksum
            read(i)
        ids = range(store.n_shards)
        with ThreadPoolExecutor(args.threads) as pool:
            for _ in range(args.repeat):
                timed(lambda: sum(s.nnz for s in pool.map(read, ids)))
        one = []
        for _ in range(max(1, args.repeat // 2)):
            t = time.perf_counter()
            for i in ids:
                read(i)
            one.append(time.perf_counter() - t)
        out["one_thread"] = min(one)
        res = (np.zeros(1), 0.0, 0.0, 0.0)
    elif args.child == "memory":
        shards = [materialize(store.read_shard(i)) for i in range(store.n_shards)]
        out["rss_loaded_mb"] = _current_rss_mb()
        with ThreadPoolExecutor(args.threads) as pool:

            def one():
                fold = StreamingTreeReduce(add_partials)
                for part in pool.map(lambda s: hinge_pass(s, bc), shards):
                    fold.push(part)
                return fold.result()

            res = one()
            for _ in range(args.repeat):
                res = timed(one)
    elif args.child == "local-fresh":
        # every timed pass on a newly opened store object: each shard is validated and
        # checksummed again (what the first pass of every process pays)
        eng = LocalEngine(n_threads=args.threads, prefetch=args.prefetch)
        res = eng.map_reduce(store, hinge_pass, bc)
        for _ in range(args.repeat):
            fresh = open_store(args.store)
            res = timed(lambda fresh=fresh: eng.map_reduce(fresh, hinge_pass, bc))
        eng.close()
    elif args.child in ("local", "memtest", "local-cached", "local-auto"):
        cache_mb = args.cache_mb if args.child == "memtest" else 0.0
        if args.child == "local-cached":  # room for every decoded shard: passes 2.. hit
            cache_mb = (store.meta.nnz * 8 + store.meta.n_rows * 24) * 1.2 / 2**20 + 64
        if args.child == "local-auto":  # what `ooc-svm train` uses by default
            from ooc_svm.engine import make_engine

            os.environ.pop("OOC_SVM_SHARD_CACHE_MB", None)
            eng = make_engine("local", n_threads=args.threads, prefetch=args.prefetch)
            out["cache_budget_mb"] = eng.cache.budget / 2**20
        else:
            eng = LocalEngine(
                n_threads=args.threads,
                prefetch=args.prefetch,
                cache_mb=cache_mb,
                **json.loads(args.engine_kw or "{}"),
            )
        out["rss_before_mb"] = _current_rss_mb()
        res = eng.map_reduce(store, hinge_pass, bc)  # untimed: store opened, kernels loaded
        if args.child == "local-auto":  # auto fills the cache in the second pass
            res = eng.map_reduce(store, hinge_pass, bc)
        if args.cold:
            _wait_go()  # the parent drops the page cache now
        out["engine"] = {
            k: getattr(eng, k, None)
            for k in ("n_threads", "prefetch", "io_threads", "local_reads", "readahead")
        }
        with _RssSampler() as rss:
            for _ in range(1 if args.cold else args.repeat):
                res = timed(lambda: eng.map_reduce(store, hinge_pass, bc))
        out["pass_peak_rss_mb"] = rss.peak
        out["cache_hits"] = eng.cache.hits
        out["cache_used_mb"] = eng.cache.used / 2**20
        eng.close()
    elif args.child == "processes":
        from ooc_svm.engine.dask_engine import DaskEngine

        eng = DaskEngine("processes", n_workers=args.threads, threads_per_worker=1)

        def cluster_cpu():  # this process + every worker process
            return time.process_time() + sum(eng.client.run(time.process_time).values())

        cpu_clock = cluster_cpu
        res = eng.map_reduce(store, hinge_pass, bc)  # untimed: workers open the store
        if args.cold:
            _wait_go()  # the parent drops the page cache now
        for _ in range(1 if args.cold else args.repeat):
            res = timed(lambda: eng.map_reduce(store, hinge_pass, bc))
        out["worker_peak_rss_mb"] = {k: v / 1024.0 for k, v in eng.worker_peak_rss_kb().items()}
        eng.close()
    else:
        raise SystemExit(f"unknown child mode {args.child}")
    out.update(
        times=times,
        cpus=cpus,
        best=min(times),
        best_cpu=min(cpus),
        median=statistics.median(times),
        nnz=meta.nnz,
        n_rows=meta.n_rows,
        violated=float(res[1]),
        digest=pass_digest(res),
        peak_rss_mb=_peak_rss_mb(),
    )
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------------------------------
# parent side
# ------------------------------------------------------------------------------------------


def store_path(a, fmt: str, codec: str) -> str:
    name = f"pass_{a.rows}x{a.features}x{a.nnz:g}_s{a.seed}_{codec}.{fmt}"
    return os.path.join(a.dir, name)


def ensure_store(a, fmt: str, codec: str) -> str:
    from ooc_svm.synth import synth

    path = store_path(a, fmt, codec)
    if not os.path.exists(path):
        t = time.perf_counter()
        synth(path, a.rows, a.features, a.nnz, a.seed, format=fmt, compression=codec)
        print(f"# built {path} in {time.perf_counter() - t:.1f}s", flush=True)
    return path


def du_mb(path: str) -> float:
    tot = 0
    for dp, _, fs in os.walk(path):
        for f in fs:
            tot += os.path.getsize(os.path.join(dp, f))
    return tot / 2**20


def read_all(path: str) -> None:
    """Bring a store into the page cache (warm runs)."""
    for dp, _, fs in os.walk(path):
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def evict(path: str) -> None:
    """Evict the page-cache pages of every file of a store (these files only)."""
    for dp, _, fs in os.walk(path):
        for f in fs:
            fd = os.open(os.path.join(dp, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_read(path: str) -> float:
    """Seconds to read every file of a store once, sequentially, from disk (pages evicted)."""
    evict(path)
    t = time.perf_counter()
    for dp, _, fs in sorted(os.walk(path)):
        for f in sorted(fs):
            with open(os.path.join(dp, f), "rb", buffering=0) as fh:
                while fh.read(1 << 24):
                    pass
    return time.perf_counter() - t


def run_child(a, mode: str, store: str, cold=False, extra=()) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        mode,
        "--store",
        store,
        "--threads",
        str(a.threads),
        "--prefetch",
        str(a.prefetch),
        "--repeat",
        str(a.repeat),
        *extra,
    ]
    if cold:
        cmd.append("--cold")
    kw = a.engine_kw.split(";")[0] if a.engine_kw else ""
    if kw:
        cmd += ["--engine-kw", kw]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    result = None
    for line in p.stdout:
        if line.startswith("READY"):
            if cold == "evict":
                evict(store)
            elif cold:
                drop_caches(warn=True)
            p.stdin.write("GO\n")
            p.stdin.flush()
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
        else:
            sys.stdout.write(line)
    rc = p.wait()
    if rc or result is None:
        raise SystemExit(f"child {mode} on {store} failed (exit {rc})")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=50_000)
    ap.add_argument("--nnz", type=float, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="/tmp/bench")
    ap.add_argument("--formats", default="zarr,parquet")
    ap.add_argument("--codecs", default="lz4,zstd,none")
    ap.add_argument("--parquet-codecs", default="lz4")
    ap.add_argument(
        "--engines",
        default="local,processes",
        help="comma list of local, processes, local-cached (every shard in the "
        "shard cache after the untimed first pass), local-auto (the default "
        "--shard-cache-mb auto, after two untimed passes), local-fresh (the store re-opened "
        "before every pass: every shard validated and checksummed again, the once-per-process "
        "cost)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="also time one pass after drop_caches")
    ap.add_argument(
        "--memtest",
        action="store_true",
        help="peak RSS of the local engine with a cache 4x smaller than the store",
    )
    ap.add_argument(
        "--overlap",
        action="store_true",
        help="store larger than the cache: disk read, decode, kernel and the real pass "
        "(cache 0, pages evicted) for the same bytes, and their ratio",
    )
    ap.add_argument(
        "--engine-kw",
        default=None,
        help="JSON of extra LocalEngine options for the local modes, e.g. "
        "'{\"local_reads\": 2}'; --overlap: several, separated by ';', one row each "
        "('{}': the defaults)",
    )
    ap.add_argument("--json", default=None, help="write all results to this file")
    # child-only options
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cache-mb", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--no-warm", action="store_true", help="skip the warm table")
    a = ap.parse_args()
    if a.child:
        return child(a)

    os.makedirs(a.dir, exist_ok=True)
    combos = []
    for fmt in a.formats.split(","):
        codecs = a.codecs if fmt == "zarr" else a.parquet_codecs
        for codec in codecs.split(","):
            if codec:
                combos.append((fmt, codec))
    stores = {c: ensure_store(a, *c) for c in combos}
    engines = [e for e in a.engines.split(",") if e]
    all_results = []
    print(
        f"# {a.rows:,} x {a.features:,}, ~{a.nnz:g} nnz/row, threads={a.threads}, "
        f"prefetch={a.prefetch}, best of {a.repeat} warm passes (page cache)",
        flush=True,
    )
    hdr = (
        f"{'store':<14}{'disk MB':>9}  {'engine':<10}{'best s':>8}{'median s':>9}"
        f"{'G nnz/s':>9}{'ratio':>7}{'CPU s':>7}{'CPU ratio':>10}{'peak RSS MB':>13}"
        "  workers' peak RSS MB"
    )
    print(hdr)
    digests = set()
    for (fmt, codec), path in [] if a.no_warm else stores.items():
        read_all(path)
        ref = run_child(a, "memory", path)
        rows = [("memory", ref)]
        for eng in engines:
            read_all(path)
            rows.append((eng, run_child(a, eng, path)))
        ref2 = run_child(a, "memory", path)  # the floor again: contention drift check
        floor = min(ref["best"], ref2["best"])
        cfloor = min(ref["best_cpu"], ref2["best_cpu"])
        for name, r in rows:
            digests.add(r["digest"])
            wk = r.get("worker_peak_rss_mb")
            wks = " ".join(f"{v:.0f}" for v in wk.values()) if wk else ""
            print(
                f"{fmt + '/' + codec:<14}{du_mb(path):>9.0f}  {name:<10}{r['best']:>8.3f}"
                f"{r['median']:>9.3f}{r['nnz'] / r['best'] / 1e9:>9.2f}"
                f"{r['best'] / floor:>7.2f}{r['best_cpu']:>7.2f}{r['best_cpu'] / cfloor:>10.2f}"
                f"{r['peak_rss_mb']:>13.0f}  {wks}",
                flush=True,
            )
            all_results.append({"format": fmt, "codec": codec, "engine": name, "floor": floor, **r})
        print(
            f"#   violated rows: {ref['violated']:.0f} of {ref['n_rows']}; in-memory floor "
            f"{ref['best']:.3f}s / {ref2['best']:.3f}s (before / after)",
            flush=True,
        )
    if digests:
        print(f"# results identical across engines and stores: {len(digests) == 1}")

    if a.cold:
        print("\n# cold: page cache dropped right before one timed pass")
        can = drop_caches(warn=True)
        for (fmt, codec), path in stores.items():
            for eng in engines:
                r = run_child(a, eng, path, cold=can)
                mb = du_mb(path)
                print(
                    f"{fmt + '/' + codec:<14}{mb:>9.0f}  {eng:<10}{r['best']:>8.3f}s "
                    f"{r['nnz'] / r['best'] / 1e9:>6.2f} G nnz/s  {mb / r['best']:>7.0f} MB/s "
                    f"from disk  peak RSS {r['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
                all_results.append(
                    {"format": fmt, "codec": codec, "engine": eng + "-cold", "cold": can, **r}
                )

    if a.overlap:
        print(
            f"\n# overlap (store not in the cache): best of {a.repeat}; pass = LocalEngine "
            "cache 0 after posix_fadvise(DONTNEED) on the store's files; load "
            + " ".join(f"{x:.2f}" for x in os.getloadavg())
        )
        print(
            f"{'store':<14}{'disk MB':>8}{'read s':>8}{'decode s':>9}{'(1 thr)':>8}"
            f"{'kernel s':>9}{'pass s':>8}{'pass/max':>9}{'pass/(dec+ker)':>15}"
            "  CPU s: decode kernel pass  CPU pass/(dec+ker)  load  engine"
        )
        for (fmt, codec), path in stores.items():
            rd = min(disk_read(path) for _ in range(max(1, a.repeat // 2)))
            read_all(path)
            dec = run_child(a, "decode", path)
            ker = run_child(a, "memory", path)
            floor = max(rd, dec["best"], ker["best"])
            for kw in (a.engine_kw or "{}").split(";"):
                sub_a = argparse.Namespace(**{**vars(a), "engine_kw": kw})
                passes = [run_child(sub_a, "local", path, cold="evict") for _ in range(a.repeat)]
                ps = min(r["best"] for r in passes)
                pcpu = min(r["best_cpu"] for r in passes)
                print(
                    f"{fmt + '/' + codec:<14}{du_mb(path):>8.0f}{rd:>8.3f}{dec['best']:>9.3f}"
                    f"{dec['one_thread']:>8.3f}{ker['best']:>9.3f}{ps:>8.3f}{ps / floor:>9.2f}"
                    f"{ps / (dec['best'] + ker['best']):>15.2f}  {dec['best_cpu']:>6.2f} "
                    f"{ker['best_cpu']:>6.2f} {pcpu:>5.2f}"
                    f"{pcpu / (dec['best_cpu'] + ker['best_cpu']):>20.2f}"
                    f"{os.getloadavg()[0]:>6.1f}  {passes[0].get('engine')}  result "
                    + (
                        "identical"
                        if {r["digest"] for r in passes} == {ker["digest"]}
                        else "DIFFERS"
                    )
                    + " to the in-memory kernel's",
                    flush=True,
                )
                all_results.append(
                    {
                        "format": fmt,
                        "codec": codec,
                        "engine": "overlap",
                        "engine_kw": kw,
                        "disk_read": rd,
                        "decode": dec["best"],
                        "decode_one_thread": dec["one_thread"],
                        "kernel": ker["best"],
                        "pass": ps,
                        "cpu": {"decode": dec["best_cpu"], "kernel": ker["best_cpu"], "pass": pcpu},
                        "load": os.getloadavg(),
                        "passes": [r["best"] for r in passes],
                    }
                )
        print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    if a.memtest:
        fmt, codec = combos[0]
        path = stores[(fmt, codec)]
        from ooc_svm.store import open_store

        st = open_store(path)
        decoded = st.meta.nnz * 8 + st.meta.n_rows * 16
        max_shard = max(s.nnz * 8 + s.n_rows * 16 + 8 for s in st.meta.shards)
        max_packed = max(du_mb(os.path.join(path, s.name)) for s in st.meta.shards) * 2**20
        cache_mb = decoded / 4 / 2**20
        read_all(path)
        r = run_child(a, "memtest", path, extra=["--cache-mb", f"{cache_mb:.1f}"])
        window = a.threads + a.prefetch
        from ooc_svm.engine import LocalEngine

        probe = LocalEngine(n_threads=a.threads, prefetch=a.prefetch, cache_mb=0)
        io_threads = min(probe.io_threads, probe.local_reads)  # shards decoded at a time
        probe.close()
        # partials in flight: window + those waiting for an earlier shard + the fold's stack
        feat_mb = st.meta.n_features * 8 * (3 * window + 2 + 10) / 2**20
        parts = {
            "decoded shards in flight (window x largest shard)": max_shard * window / 2**20,
            "compressed bytes being decoded (reads at a time x largest packed shard)": io_threads
            * max_packed
            / 2**20,
            "cache budget": cache_mb,
            "free read buffers the store reader's pool may keep (its bound)": getattr(
                getattr(st.shard_reader(True), "pool", None), "max_free_bytes", 0
            )
            / 2**20,
            "O(features) partials": feat_mb,
        }
        bound = r["rss_before_mb"] + sum(parts.values())
        pk = r["pass_peak_rss_mb"]
        print(
            f"\n# memtest ({fmt}/{codec}): decoded store {decoded / 2**20:.0f} MB = "
            f"{decoded / 2**20 / cache_mb:.1f} x cache_mb {cache_mb:.0f}; largest shard "
            f"{max_shard / 2**20:.0f} MB decoded / {max_packed / 2**20:.0f} MB on disk; window "
            f"{window} shards, {io_threads} read at a time"
        )
        for k, v in parts.items():
            print(f"#   {k:<72} {v:>6.0f} MB")
        print(
            f"#   RSS before the passes {r['rss_before_mb']:.0f} MB; peak during the passes "
            f"{pk:.0f} MB (sampled every 2 ms); increase {pk - r['rss_before_mb']:.0f} MB; "
            f"bound {bound:.0f} MB -> {'within' if pk <= bound else 'EXCEEDED'} "
            f"(cache used {r['cache_used_mb']:.0f} MB, hits {r['cache_hits']}, best pass "
            f"{r['best']:.3f}s)"
        )
        all_results.append(
            {
                "format": fmt,
                "codec": codec,
                "engine": "memtest",
                "bound_mb": bound,
                "cache_mb": cache_mb,
                **r,
            }
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(all_results, f, indent=1)


if __name__ == "__main__":
    main()
