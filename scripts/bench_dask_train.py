#!/usr/bin/env python
"""Whole ``ooc-svm`` commands on Dask against the local engine, paired and interleaved.

Every case runs the same command (``train``, ``predict`` or ``evaluate``) as a whole process
with ``--scheduler local`` (the reference), ``--scheduler processes`` (a ``LocalCluster``
started and closed by the command: its start, the workers' first reads and kernel loading
included) and, with ``--tcp``, on a long-lived cluster that this script starts once
(``dask scheduler`` + ``dask worker --nworkers W --nthreads 1`` on 127.0.0.1): a first, cold
command and then warm ones (workers keep decoded shards and loaded kernels between jobs).

Rounds alternate the order of the schedulers, so every scheduler sees the same load. Printed
per case and scheduler: median wall seconds, the median of the per-round ratios wall / local
wall, CPU seconds (all the command's processes, its workers included: a cgroup v1 ``cpuacct``
group per command where this runs as root, the long-lived workers' own group for ``tcp``;
otherwise the command's waited-for children only, marked ``~``), peak RSS of the command's
process tree (cgroup ``memory.max_usage_in_bytes`` where available), and whether the model
is bit-identical to the local one; the load average before and after.

Usage::

    python scripts/bench_dask_train.py --store s1m.zarr --solver perf --repeat 3 --tcp
    python scripts/bench_dask_train.py --dataset a9a --solver irwls,active-set --repeat 3
    python scripts/bench_dask_train.py --store s1m.zarr --commands predict,evaluate --tcp
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CG = Path("/sys/fs/cgroup")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Group:
    """A cgroup v1 cpuacct (+ memory) group, or nothing where it cannot be made."""

    def __init__(self, name: str) -> None:
        self.paths: list[Path] = []
        for ctrl in ("cpuacct", "memory"):
            p = CG / ctrl / name
            try:
                p.mkdir()
                self.paths.append(p)
            except OSError:
                pass
        self.ok = any(p.parent.name == "cpuacct" for p in self.paths)

    def add(self, pid: int) -> None:
        for p in self.paths:
            (p / "cgroup.procs").write_text(f"{pid}\n")

    def cpu_s(self) -> float | None:
        for p in self.paths:
            if p.parent.name == "cpuacct":
                return int((p / "cpuacct.usage").read_text()) / 1e9
        return None

    def peak_mb(self) -> float | None:
        for p in self.paths:
            if p.parent.name == "memory":
                return int((p / "memory.max_usage_in_bytes").read_text()) / 2**20
        return None

    def kill(self) -> None:
        """SIGKILL every process left in the group."""
        for p in self.paths:
            for pid in (p / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def close(self) -> None:
        for p in self.paths:
            try:
                p.rmdir()
            except OSError:
                pass


def run(cmd: list[str], tag: str, cwd: Path) -> dict:
    """Run one command in its own group; wall, CPU, peak, exit status."""
    g = Group(f"ooc-bench-{os.getpid()}-{tag}")
    r0 = os.times()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=(lambda: g.add(os.getpid())) if g.paths else None,
    )
    try:
        _, err = p.communicate()
    except BaseException:  # a stopped benchmark stops its command (and the command's workers)
        p.kill()
        p.wait()
        g.kill()
        g.close()
        raise
    wall = time.perf_counter() - t0
    r1 = os.times()
    cpu = g.cpu_s()
    approx = cpu is None
    if approx:
        cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    out = {"wall": wall, "cpu": cpu, "approx": approx, "peak": g.peak_mb(), "rc": p.returncode}
    g.close()
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err.decode()[-2000:]}")
    return out


def digest(path: Path) -> str:
    """Digest of a model folder's array files (the bits that must match)."""
    h = hashlib.blake2b(digest_size=8)
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.suffix in (".npy", ".npz"):
            h.update(f.read_bytes())
    return h.hexdigest()


def same_priority(pid: int) -> None:
    """Give the session of ``pid`` this process's autogroup nice value (Linux: the CPU share
    of a session against the machine's other sessions; a benchmark started with
    ``setsid sh -c 'echo -10 > /proc/$$/autogroup; exec python ...'`` keeps its priority in
    the cluster it starts). Nothing where autogroups are not available."""
    try:
        nice = open("/proc/self/autogroup").read().split("nice")[1].split()[0]
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(nice)
    except (OSError, IndexError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TcpCluster:
    """``dask scheduler`` + ``dask worker`` processes on 127.0.0.1, in one CPU group."""

    def __init__(self, workers: int, cwd: Path) -> None:
        bin_dir = Path(sys.executable).parent
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.group = Group(f"ooc-bench-{os.getpid()}-cluster")
        pre = (lambda: self.group.add(os.getpid())) if self.group.paths else None
        log = open(cwd / "cluster.log", "w")
        self.procs = [
            subprocess.Popen(
                [str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                 str(self.port), "--no-dashboard"],
                stdout=log, stderr=log, preexec_fn=pre, start_new_session=True,
            )
        ]  # fmt: skip
        self.procs.append(
            subprocess.Popen(
                [str(bin_dir / "dask"), "worker", self.address, "--nworkers", str(workers),
                 "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                stdout=log, stderr=log, preexec_fn=pre, start_new_session=True,
            )
        )  # fmt: skip
        for p in self.procs:  # the cluster's sessions run at this benchmark's priority
            same_priority(p.pid)
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(workers, timeout=120)

    def cpu_s(self) -> float:
        return self.group.cpu_s() or 0.0

    def close(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.group.close()


def command(ooc: str, what: str, solver: str, store: str, out: Path, sched: str, extra):
    if what == "train":
        return [ooc, "train", "--solver", solver, store, "-o", str(out), "--overwrite",
                "--scheduler", sched, *extra]  # fmt: skip
    if what == "predict":
        return [ooc, "predict", str(out), store, "-o", str(out) + f".{sched[:5]}.parquet",
                "--scheduler", sched]  # fmt: skip
    return [ooc, "evaluate", str(out), store, "--scheduler", sched, "--json"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", action="append", default=[], help="a store (repeatable)")
    ap.add_argument(
        "--dataset", action="append", default=[], help="a9a, w8a or ijcnn1 ($OOC_SVM_DATA)"
    )
    ap.add_argument("--solver", default="perf", help="comma-separated solvers")
    ap.add_argument("--commands", default="train", help="train,predict,evaluate")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="workers x 1 thread")
    ap.add_argument("--tcp", action="store_true", help="also a long-lived dask cluster")
    ap.add_argument("--no-processes", action="store_true")
    ap.add_argument("--train-args", default="", help="extra train flags (one string)")
    a = ap.parse_args()

    # a SIGTERM (timeout, kill) still stops the long-lived cluster (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ooc = str(Path(sys.executable).parent / "ooc-svm")
    tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    stores = [os.path.abspath(s) for s in a.store]
    data = Path(os.environ.get("OOC_SVM_DATA", ROOT.parent / "shared" / "data"))
    files = {"a9a": "a9a/a9a", "w8a": "w8a/w8a.bz2", "ijcnn1": "ijcnn1/ijcnn1.bz2"}
    for d in a.dataset:
        dst = tmp / f"{d}.zarr"
        subprocess.run([ooc, "ingest", str(data / files[d]), str(dst)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        stores.append(str(dst))
    scheds = ["local"] + ([] if a.no_processes else ["processes"])
    cluster = None
    if a.tcp:
        cluster = TcpCluster(a.workers, tmp)
    extra = ["--C", "1"] + a.train_args.split()
    print(f"# {' '.join(sys.argv[1:])}; cpus {os.cpu_count()}; load {loadavg()}", flush=True)
    print(
        f"{'case':34} {'scheduler':10} {'wall s':>7} {'ratio':>6} {'cpu s':>7} {'peak MB':>8} "
        f"{'same':>5}"
    )
    try:
        for store in stores:
            for solver in a.solver.split(","):
                for what in a.commands.split(","):
                    bench_case(a, ooc, tmp, store, solver, what, scheds, cluster, extra)
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# load after {loadavg()}", flush=True)
    return 0


def bench_case(a, ooc, tmp, store, solver, what, scheds, cluster, extra) -> None:
    name = f"{what} {solver} {Path(store).name}"
    model = tmp / f"m-{solver}-{Path(store).stem}"
    if what != "train":  # score with the local model
        subprocess.run(command(ooc, "train", solver, store, model, "local", extra), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    rows: dict[str, list] = {s: [] for s in scheds}
    tcp_first = None
    if cluster is not None:
        rows["tcp"] = []
        # the cluster's first job of this store: cold workers (not in the rounds)
        tcp_first = run_tcp(ooc, what, solver, store, tmp, model, cluster, extra, "first")
    order = list(rows)
    for r in range(a.repeat):
        for sched in order if r % 2 == 0 else order[::-1]:
            if sched == "tcp":
                rows[sched].append(run_tcp(ooc, what, solver, store, tmp, model, cluster, extra, r))
                continue
            out = model if what != "train" else tmp / f"m-{sched}"
            res = run(command(ooc, what, solver, store, out, sched, extra), f"{sched}{r}", tmp)
            if what == "train":
                res["digest"] = digest(out)
            rows[sched].append(res)
    ref = rows["local"]
    for sched, rs in rows.items():
        ratio = statistics.median(x["wall"] / y["wall"] for x, y in zip(rs, ref, strict=True))
        same = "-"
        if what == "train":
            same = str(all(x["digest"] == ref[0]["digest"] for x in rs))
        cpu = statistics.median(x["cpu"] for x in rs)
        approx = "~" if any(x["approx"] for x in rs) else ""
        peaks = [x["peak"] for x in rs if x.get("peak")]
        peak = f"{max(peaks):8.0f}" if peaks else f"{'-':>8}"
        print(
            f"{name:34} {sched:10} {statistics.median(x['wall'] for x in rs):7.2f} "
            f"{ratio:6.2f} {approx}{cpu:6.2f} {peak} {same:>5}   load {loadavg()}",
            flush=True,
        )
    if tcp_first is not None:
        print(f"{name:34} {'tcp 1st':10} {tcp_first['wall']:7.2f} {'':6} {tcp_first['cpu']:7.2f}")


def run_tcp(ooc, what, solver, store, tmp, model, cluster, extra, tag) -> dict:
    c0 = cluster.cpu_s()
    out = model if what != "train" else tmp / "m-tcp"
    res = run(command(ooc, what, solver, store, out, cluster.address, extra), f"tcp{tag}", tmp)
    res["cpu"] += cluster.cpu_s() - c0
    if what == "train":
        res["digest"] = digest(out)
    return res


if __name__ == "__main__":
    sys.exit(main())
