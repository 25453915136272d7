#!/usr/bin/env python
"""Speed-up of ``ooc-svm train --solver perf`` from 1 core to N cores.

Runs the whole process ``ooc-svm train --solver perf STORE --variant V -q`` pinned to the
first 1, then the first N CPUs of this process's affinity (``os.sched_setaffinity`` in the
child: what ``taskset -c 0`` / ``taskset -c 0,1`` do), paired and interleaved (the order
reversed every other round), ``--repeat`` rounds after one untimed run. Prints per core
count the median wall time, CPU time and peak RSS (``os.wait4``), the wall speed-up and
the final objective (it must not change with the core count), with the load average.

On a shared machine wall times mean little: other processes take cores from both runs.
Example (a 1M-row store from ``ooc-svm synth``)::

    .venv/bin/python scripts/bench_cores.py /tmp/s1m.zarr --cores 1,2 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd: list[str], cpus: list[int]) -> tuple[float, float, float, dict]:
    """(wall s, CPU s, peak RSS MiB, the command's JSON summary) of one whole process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(
            cmd, stdout=out, stderr=err, preexec_fn=lambda: os.sched_setaffinity(0, cpus)
        )
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode()[-2000:]}")
        summary = json.loads(out.read().decode().strip().splitlines()[-1])
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--cores", default="1,2", help="core counts, comma-separated")
    ap.add_argument("--variants", default="accelerated,selective")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--C", default="1")
    ap.add_argument("--eps", default="0.001")
    ap.add_argument("--no-warm", action="store_true", help="no untimed first run")
    a = ap.parse_args()
    avail = sorted(os.sched_getaffinity(0))
    counts = [int(c) for c in a.cores.split(",")]
    if max(counts) > len(avail):
        raise SystemExit(f"bench_cores: {max(counts)} cores asked, {len(avail)} available")
    exe = os.path.join(os.path.dirname(sys.executable), "ooc-svm")
    ooc = [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "ooc_svm"]
    work = tempfile.mkdtemp(prefix="bench_cores_")
    print(f"# {a.store}; load average at start {os.getloadavg()}; CPUs {avail}")
    print(f"{'variant':<12}{'cores':>6}{'wall s':>8}{'CPU s':>8}{'RSS MiB':>8}{'speed-up':>9}"
          f"{'passes':>7}  objective   (walls; load)")  # fmt: skip
    for v in [x for x in a.variants.split(",") if x]:
        cmd = [*ooc, "train", "--solver", "perf", a.store, "-o", os.path.join(work, "m"),
               "--C", a.C, "--eps", a.eps, "--variant", v, "--json", "--overwrite",
               "-q"]  # fmt: skip
        if not a.no_warm:
            run(cmd, avail[: max(counts)])
        res: dict[int, list] = {c: [] for c in counts}
        for r in range(a.repeat):
            for c in counts if r % 2 == 0 else counts[::-1]:
                res[c].append((*run(cmd, avail[:c]), os.getloadavg()[0]))
        base = statistics.median(x[0] for x in res[counts[0]])
        for c in counts:
            w = statistics.median(x[0] for x in res[c])
            cpu = statistics.median(x[1] for x in res[c])
            rss = max(x[2] for x in res[c])
            s = res[c][-1][3]
            walls = " ".join(f"{x[0]:.1f}" for x in res[c])
            loads = " ".join(f"{x[4]:.1f}" for x in res[c])
            print(f"{v:<12}{c:>6}{w:>8.2f}{cpu:>8.2f}{rss:>8.0f}{base / w:>8.2f}x"
                  f"{s.get('passes', '-')!s:>7}  {s.get('objective')!r}   ({walls}; {loads})",
                  flush=True)  # fmt: skip
    print(f"# load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
