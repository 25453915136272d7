"""Helpers shared by the benchmark scripts in this folder (not part of the package)."""

from __future__ import annotations

import os


def drop_caches(warn: bool = False) -> bool:
    """Empty the page cache (needs root); False when it cannot be done."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        if warn:
            print(f"# cannot drop the page cache ({e}); cold numbers are not cold", flush=True)
        return False


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux: ru_maxrss is in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class ChildFailed(RuntimeError):
    """A ``--child`` run exited non-zero; ``stderr`` is what it printed there."""

    def __init__(self, what: str, stderr: str) -> None:
        super().__init__(f"child {what} failed:\n{stderr[-3000:]}")
        self.stderr = stderr


def run_child(script: str, spec: dict, timeout: float | None = None) -> dict:
    """Run one measurement in a fresh process: ``python SCRIPT --child JSON(spec)``.

    Returns the JSON object the child prints last, ``{"timeout": timeout}`` when it runs out
    of time; raises :class:`ChildFailed` when it fails.
    """
    import json
    import subprocess
    import sys

    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(script), "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if out.returncode != 0:
        raise ChildFailed(spec.get("what", "?"), out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def add_child_option(ap) -> None:
    """The hidden ``--child JSON`` option by which :func:`run_child` starts a measurement."""
    import argparse

    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)


def serve_child(args, child) -> bool:
    """In a ``--child`` process: print ``child(spec)`` as JSON and answer True (then exit 0);
    False in the parent."""
    import json

    if not args.child:
        return False
    print(json.dumps(child(json.loads(args.child))))
    return True


def solver_result(res, seconds: float) -> dict:
    """What every solver benchmark records of an ``api.train`` result."""
    return {
        "seconds": seconds,
        "dual": res.dual_objective,
        "iterations": res.iterations,
        "passes": res.passes,
    }


def pass_weights(store) -> tuple:
    """A realistic ``(w, bias, b)`` for a hinge pass: the class-mean direction of shard 0,
    scaled so the median |w·x| is 2 (a random w makes every row violated, the worst case
    for the Σ yᵢxᵢ scatter, which a solver only sees in its first iteration)."""
    import numpy as np

    from ooc_svm.kernels.csr import csr_matvec, csr_rmatvec_add, u32

    s = store.read_shard(0)
    ys = np.where(s.y > np.median(s.y), 1.0, -1.0)
    w = csr_rmatvec_add(s.indptr, u32(s.indices), s.data, ys, np.zeros(store.meta.n_features))
    m = csr_matvec(s.indptr, u32(s.indices), s.data, w, 0.0, np.empty(s.n_rows))
    w *= 2.0 / max(np.median(np.abs(m)), 1e-12)
    return (w, 1.0, 0.0)


def pass_digest(res) -> str:
    """A short digest of a hinge pass's result ``(g, count, hinge, gb)`` (equal bytes in,
    equal digest out)."""
    import hashlib

    import numpy as np

    g, cnt, hinge, gb = res
    h = hashlib.blake2b(np.ascontiguousarray(g).view(np.uint8), digest_size=8)
    h.update(np.array([cnt, hinge, gb]).view(np.uint8))
    return h.hexdigest()


def synth_once(path: str, a, **options) -> None:
    """Write the synthetic store ``a.rows`` x ``a.features`` (``a.nnz`` per row, ``a.seed``)
    at ``path`` unless it exists; ``options`` go to :func:`ooc_svm.synth.synth`."""
    import time

    from ooc_svm.synth import synth

    if os.path.exists(path):
        return
    t = time.perf_counter()
    synth(path, a.rows, a.features, a.nnz, a.seed, **options)
    print(f"# built {path} in {time.perf_counter() - t:.1f}s", flush=True)


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, as /proc/loadavg prints them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def synth_cli(path: str, rows: int, features: int, nnz: int, seed: int) -> None:
    """Write the synthetic data ``rows`` x ``features`` (``nnz`` a row, ``seed``) at ``path``
    with the ``ooc-svm synth`` command, unless it exists (a store, or SVMlight text for the C
    programs by an ``.svm`` name)."""
    import subprocess
    import sys
    import time

    if os.path.exists(path):
        return
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ooc_svm", "synth", path, "--rows", str(rows), "--features",
         str(features), "--nnz-per-row", str(nnz), "--seed", str(seed), "-q"],
        check=True,
    )  # fmt: skip
    print(f"# built {path} in {time.perf_counter() - t:.1f} s", flush=True)


def machine() -> str:
    """The machine, once: CPU model, logical CPUs, memory (what a kept JSON row names)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} logical CPUs, {mem:.0f} GiB"


def kept_rows(paths: list[str]) -> tuple[list[dict], str]:
    """The rows of the JSON files ``paths`` (a script's ``--json``, in order) and the line
    naming their machines and dates once (the head of a generated table)."""
    import json

    rows: list[dict] = []
    for p in paths:
        with open(p) as f:
            rows += json.load(f)
    machines = sorted({r.get("machine", "unknown machine") for r in rows})
    dates = sorted({r.get("date", "undated") for r in rows})
    return rows, f"Machine: {'; '.join(machines)}. Measured {', '.join(dates)}."
