#!/usr/bin/env python
"""Where a ``--solver perf`` run spends its wall time, and which of it runs on one thread.

Serial work bounds the speed-up on many cores. Trains one store in this process with the
local engine
(``--threads`` compute threads, default: the CPUs of this process's affinity mask, so
``taskset -c 0`` / ``taskset -c 0,1`` choose it) and times, without changing what runs:

- every pass function call on the engine's threads (``compute``) and every shard read and
  decode (``read``), as intervals per thread: the time during which at least two of them
  run is *parallel*, the rest of a pass is *one thread* (shards left over at the end of a
  pass, the first pass's reads) or *no worker* (the main thread folds partials, schedules);
- the driver between passes, in the main thread: the working-set QP, adding a plane (its
  Gram row), and for ``selective`` the inner loop's margin sweeps, line searches
  (``segment_min``), cut updates and the set-up of the rows in memory;
- start-up (imports, numba's cache loading, opening the store) before the training.

Prints one table: section, wall seconds, CPU seconds (for main-thread sections the main
thread's own CPU: for a section whose work goes to the pool, e.g. the selective margin
sweeps, only what the main thread does there besides waiting), share of the process's CPU,
threads the section may use. The serial share is all CPU spent on the main thread (its
sections, the fold of partials, the driver) plus start-up, over the process's CPU; the
Amdahl bound 1 / (s + (1 − s)/N) follows. Example::

    taskset -c 0,1 .venv/bin/python scripts/profile_perf.py /tmp/s1m.zarr --variant selective
"""

from __future__ import annotations

import argparse
import os
import threading
import time

T_START = time.perf_counter()


class Recorder:
    """Busy intervals per (kind, thread) and wall time per named main-thread section."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.intervals: list[tuple[str, float, float]] = []
        self.worker_cpu: dict[str, float] = {}
        self.sections: dict[str, float] = {}
        self.section_cpu: dict[str, float] = {}
        self.threads_of: dict[str, str] = {}
        self.passes: list[tuple[float, float]] = []

    def wrap_worker(self, kind: str, fn):
        def timed(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                c = time.thread_time() - c
                with self.lock:
                    self.intervals.append((kind, t, time.perf_counter()))
                    self.worker_cpu[kind] = self.worker_cpu.get(kind, 0.0) + c

        return timed

    def wrap_section(self, name: str, fn, threads: str = "1"):
        self.threads_of[name] = threads

        def timed(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                self.sections[name] = self.sections.get(name, 0.0) + time.perf_counter() - t
                c = time.thread_time() - c
                self.section_cpu[name] = self.section_cpu.get(name, 0.0) + c

        return timed


def patch(rec: Recorder, engine, threads: int) -> None:
    """Instrument the engine, the working set and the selective inner loop in place."""
    from ooc_svm.solvers.perf import selective as sel
    from ooc_svm.solvers.perf import working_set as wsm

    orig_run = engine._run
    orig_reader = engine._reader

    def reader(store):
        return rec.wrap_worker("read", orig_reader(store))

    engine._reader = reader

    def run(store, fn, broadcast, reduce, state, shards, read):
        t = time.perf_counter()
        fold = rec.wrap_section("pass: fold (main thread)", reduce)
        if getattr(reduce, "consuming", None) is not None:  # the fold's in-place reduction
            fold.consuming = rec.wrap_section("pass: fold (main thread)", reduce.consuming)
        try:
            return orig_run(store, rec.wrap_worker("compute", fn), broadcast, fold, state,
                            shards, read)  # fmt: skip
        finally:
            rec.passes.append((t, time.perf_counter()))

    engine._run = run
    ws = wsm.WorkingSet
    ws.solve = rec.wrap_section("driver: working-set QP", ws.solve)
    ws.add = rec.wrap_section("driver: add plane (Gram row)", ws.add)
    inner = sel._Inner
    nt = str(threads)
    inner.__init__ = rec.wrap_section("selective: rows in memory (set-up)", inner.__init__)
    inner.margins = rec.wrap_section("selective: margin sweeps", inner.margins, nt)
    inner.cut = rec.wrap_section("selective: cut update", inner.cut, nt)
    if hasattr(inner, "flip"):  # the cut's sweep, fused with the best point's update
        inner.flip = rec.wrap_section("selective: cut update", inner.flip, nt)
    inner.value = rec.wrap_section("selective: P~ value", inner.value)
    sel.segment = rec.wrap_section("selective: line search (segment_min)", sel.segment, nt)


def overlap(intervals: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
    """(time with >= 2 intervals active, time with exactly 1) within [lo, hi]."""
    ev = []
    for a, b in intervals:
        a, b = max(a, lo), min(b, hi)
        if b > a:
            ev += [(a, 1), (b, -1)]
    ev.sort()
    two = one = 0.0
    cur = 0
    last = lo
    for t, d in ev:
        if cur >= 2:
            two += t - last
        elif cur == 1:
            one += t - last
        cur += d
        last = t
    return two, one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--variant", default="accelerated")
    ap.add_argument("--threads", type=int, default=None, help="compute threads (default: CPUs)")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.001)
    ap.add_argument("--cache-mb", default="auto", help="shard cache (default auto, as train)")
    args = ap.parse_args()

    import ooc_svm.solvers.perf._numba.cuts
    import ooc_svm.solvers.perf._numba.selective
    import ooc_svm.solvers.perf.error  # noqa: F401
    from ooc_svm._util import cpu_count
    from ooc_svm.api import train
    from ooc_svm.commands._startup import init_numba_target
    from ooc_svm.engine import make_engine
    from ooc_svm.store import open_store

    init_numba_target()
    store = open_store(args.store)
    threads = args.threads or cpu_count()
    rec = Recorder()
    load0 = os.getloadavg()
    cpu_startup = time.process_time()
    with make_engine("local", n_threads=threads, cache_mb=args.cache_mb) as eng:
        patch(rec, eng, threads)
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        res = train(store, "perf", engine=eng, C=args.C, eps=args.eps, variant=args.variant)
        t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
    startup, run, cpu_run, main_cpu = t0 - T_START, t1 - t0, c1 - c0, m1 - m0
    par = one = in_pass = 0.0
    busy = [(a, b) for _, a, b in rec.intervals]
    for a, b in rec.passes:
        two, single = overlap(busy, a, b)
        par, one, in_pass = par + two, one + single, in_pass + b - a
    secs, cpus = rec.sections, rec.section_cpu
    fold_w, fold_c = (
        secs.pop("pass: fold (main thread)", 0.0),
        cpus.pop("pass: fold (main thread)", 0.0),
    )
    main_sections = sum(v for k, v in cpus.items())
    # (section, wall s, CPU s, threads it can use)
    rows = [
        ("start-up (imports, numba cache, open store)", startup, cpu_startup, "1"),
        ("passes: kernels on row blocks (compute threads)", None,
         rec.worker_cpu.get("compute", 0.0), str(threads)),
        ("passes: shard reads + decoding (reader threads)", None,
         rec.worker_cpu.get("read", 0.0), str(min(threads, eng.local_reads))),
        ("passes: fold of partials (main thread)", fold_w, fold_c, "1"),
    ]  # fmt: skip
    for name, sec in sorted(secs.items(), key=lambda kv: -kv[1]):
        rows.append((name, sec, cpus.get(name, 0.0), rec.threads_of.get(name, "1")))
    other_w = max(0.0, run - in_pass - sum(secs.values()))
    other_c = max(0.0, main_cpu - main_sections - fold_c)
    rows.append(("main thread: other (driver, scheduling, waiting)", other_w, other_c, "1"))
    total_w, total_c = startup + run, cpu_startup + cpu_run
    print(
        f"# {args.store}: perf {args.variant}, {threads} compute threads, {res.passes} passes, "
        f"{res.iterations} iterations, objective {res.objective:.10g}"
    )
    print(
        f"# wall {total_w:.2f}s (start-up {startup:.2f}s + training {run:.2f}s), CPU "
        f"{total_c:.2f}s (start-up {cpu_startup:.2f}s); passes {in_pass:.2f}s wall, of which "
        f"{par:.2f}s with >= 2 workers busy and {one:.2f}s with one"
    )
    print(f"# load average before {load0}, after {os.getloadavg()}; CPUs {cpu_count()}")
    print(f"{'section':52s} {'wall s':>7} {'CPU s':>7} {'CPU %':>6} {'threads':>7}")
    serial = 0.0
    for name, w, c, thr in rows:
        ws = "" if w is None else f"{w:7.2f}"
        print(f"{name:52s} {ws:>7} {c:7.2f} {100 * c / total_c:5.1f}% {thr:>7}")
        if w is not None:  # measured on the main thread: its own CPU there is serial work
            serial += c
    s_share = serial / total_c
    print(f"{'serial CPU (all main-thread CPU + start-up)':52s} {'':>7} {serial:7.2f} "
          f"{100 * s_share:5.1f}%")  # fmt: skip
    amdahl = "  ".join(f"{n}: {1 / (s_share + (1 - s_share) / n):.2f}x" for n in (2, 4, 8, 16))
    print(f"# Amdahl speed-up bound from the serial CPU share: {amdahl}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
