#!/usr/bin/env python
"""Whole-process wall time of ``ooc-svm train --solver perf`` beside LIBLINEAR's whole ``train``.

Issue 16, goal 3 ("no start-up tax"): on small data the command a user runs must cost no more
than LIBLINEAR's ``train`` on the text file, start-up (imports, numba cache loading) included.

For a9a, w8a and ijcnn1 (from ``$OOC_SVM_DATA`` or ../shared/data), in one run:

- the data is made ready beforehand, untimed: the text decompressed into ``--dir`` (LIBLINEAR
  reads plain text) and ingested once into an lz4 Zarr store with ``ooc-svm ingest``;
- ``ooc-svm``: the whole process ``ooc-svm train --solver perf --C 1 --eps 0.001 --bias 1
  STORE -o MODEL -q`` (the console script installed beside this Python, else
  ``python -m ooc_svm``);
- ``liblinear``: LIBLINEAR (``liblinear-official`` from PyPI, the project's ``bench`` / ``dev``
  extra) in a child Python that reads the SVMlight text with ``svm_read_problem``, trains
  ``-s 3 -c 1 -B 1`` (the dual L1-loss SVM LIBLINEAR's ``train`` runs for these flags) and
  saves the model: LIBLINEAR's ``train`` command, run from Python;
- ``ooc-svm --help`` and ``ooc-svm train --help``: the whole process.

Every command runs once untimed first (numba's on-disk caches and Python's bytecode written,
files in the page cache: warm), then ``--repeat`` times alternating with the reference; the
medians and their ratio are printed, with the load average before and after (the machine may
be shared: compare ratios).

The commands run without ``PYTHONDONTWRITEBYTECODE`` (``--keep-env`` keeps it): set, every
run of an editable install compiles ooc-svm's ~60 modules from source again (0.1-0.2 s), a
cost no installed copy pays (pip compiles the bytecode at install; an editable install writes
it on the first run).

Usage::

    .venv/bin/python scripts/bench_startup.py                 # a9a, w8a, ijcnn1, 3 repeats
    .venv/bin/python scripts/bench_startup.py --datasets a9a --repeat 5
"""

from __future__ import annotations

import argparse
import bz2
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: dataset -> path of its training file under the data folder
DATASETS = {
    "a9a": "a9a/a9a",
    "w8a": "w8a/w8a.bz2",
    "ijcnn1": "ijcnn1/ijcnn1.bz2",
}

#: LIBLINEAR's ``train`` from Python: read the text, train, save (argv: DATA MODEL OPTIONS)
LIBLINEAR_TRAIN = """\
import sys
from liblinear.liblinearutil import save_model, svm_read_problem, train
y, x = svm_read_problem(sys.argv[1])
save_model(sys.argv[2], train(y, x, sys.argv[3] + " -q"))
"""


def ooc_svm_command() -> list[str]:
    """The ``ooc-svm`` console script beside this Python, else ``python -m ooc_svm``."""
    exe = os.path.join(os.path.dirname(sys.executable), "ooc-svm")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "ooc_svm"]


def data_dir(arg: str | None) -> str:
    d = arg or os.environ.get("OOC_SVM_DATA") or os.path.join(ROOT, "..", "shared", "data")
    if not os.path.isdir(d):
        raise SystemExit(f"bench_startup: data folder {d} not found (set $OOC_SVM_DATA)")
    return d


def prepare(name: str, src: str, work: str) -> tuple[str, str]:
    """(plain text file, lz4 Zarr store) of a dataset, made once in ``work``."""
    text = os.path.join(work, f"{name}.txt")
    if not os.path.exists(text):
        # blank lines dropped: w8a ends with one, which LIBLINEAR's reader refuses
        opener = bz2.open if src.endswith(".bz2") else open
        with opener(src, "rb") as fi, open(text + ".tmp", "wb") as fo:
            fo.writelines(line for line in fi if line.strip())
        os.replace(text + ".tmp", text)
    store = os.path.join(work, f"{name}.zarr")
    if not os.path.exists(store):
        cmd = [*ooc_svm_command(), "ingest", "-q", "--compression", "lz4", text, store]
        subprocess.run(cmd, check=True)
    return text, store


#: environment of the timed commands (see the module docstring; ``--keep-env``)
ENV: dict[str, str] | None = None


def wall(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process, CPU = user + system time of the process and
    its threads (less sensitive than wall time to other load on a shared machine). Its output
    is discarded; a failure stops the bench."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=ENV)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        p.returncode = rc = os.waitstatus_to_exitcode(status)
        if rc:
            err.seek(0)
            msg = err.read().decode(errors="replace")
            raise SystemExit(f"bench_startup: {' '.join(cmd)} failed ({rc}): {msg}")
    return dt, ru.ru_utime + ru.ru_stime


def compare(cmds: dict[str, list[str]], repeat: int) -> tuple[dict, dict]:
    """One untimed run of each command, then ``repeat`` rounds, alternating the commands;
    (wall times, CPU times) per command."""
    for cmd in cmds.values():
        wall(cmd)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, cmd in cmds.items():
            w, c = wall(cmd)
            times[k].append(w)
            cpus[k].append(c)
    return times, cpus


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None, help="default $OOC_SVM_DATA or ../shared/data")
    ap.add_argument("--dir", default="/tmp/bench_startup", help="text files, stores, models")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--C", default="1")
    ap.add_argument("--eps", default="0.001")
    ap.add_argument(
        "--keep-env",
        action="store_true",
        help="run the commands with this environment as it is (PYTHONDONTWRITEBYTECODE kept)",
    )
    a = ap.parse_args()
    global ENV
    if not a.keep_env:
        ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    try:
        import liblinear  # noqa: F401
    except ImportError:
        raise SystemExit("bench_startup: pip install -e '.[bench]' (liblinear-official)") from None
    src_dir = data_dir(a.data_dir)
    os.makedirs(a.dir, exist_ok=True)
    ooc = ooc_svm_command()
    print(f"# load average at start: {load()}; cpus: {os.cpu_count()}; ooc-svm: {' '.join(ooc)}")
    dont_write = (ENV if ENV is not None else os.environ).get("PYTHONDONTWRITEBYTECODE")
    print(f"# PYTHONDONTWRITEBYTECODE in the commands' environment: {dont_write or 'unset'}")
    print(f"# medians of {a.repeat} whole-process wall times (after one untimed run of each)")
    print(
        f"{'data':<8}{'ooc-svm s':>10}{'liblinear s':>12}{'ratio':>7}{'CPU s':>7}{'CPU s':>7}"
        f"{'ratio':>7}   wall times ooc-svm / liblinear"
    )
    ratios = []
    for name in [d for d in a.datasets.split(",") if d]:
        text, store = prepare(name, os.path.join(src_dir, DATASETS[name]), a.dir)
        model = os.path.join(a.dir, f"{name}.model")
        flags = ["--C", a.C, "--eps", a.eps, "--bias", "1"]
        cmds = {
            "ooc": [*ooc, "train", "--solver", "perf", *flags, store, "-o", model, "-q"],
            "ll": [
                sys.executable,
                "-c",
                LIBLINEAR_TRAIN,
                text,
                model + ".liblinear",
                f"-s 3 -c {a.C} -B 1",
            ],
        }
        t, c = compare(cmds, a.repeat)
        mo, ml = statistics.median(t["ooc"]), statistics.median(t["ll"])
        co, cl = statistics.median(c["ooc"]), statistics.median(c["ll"])
        ratios.append(mo / ml)
        each = f"{_fmt(t['ooc'])} / {_fmt(t['ll'])}"
        print(
            f"{name:<8}{mo:>10.3f}{ml:>12.3f}{mo / ml:>7.2f}{co:>7.2f}{cl:>7.2f}{co / cl:>7.2f}"
            f"   {each}   (load {load()})",
            flush=True,
        )
    helps = {"ooc-svm --help": [*ooc, "--help"], "ooc-svm train --help": [*ooc, "train", "--help"]}
    th, ch = compare(helps, a.repeat)
    for k in helps:
        print(
            f"{k}: median {statistics.median(th[k]):.3f} s wall, "
            f"{statistics.median(ch[k]):.3f} s CPU ({_fmt(th[k])}) (goal <= 0.3 s)"
        )
    print(f"# load average at end: {load()}")
    print(f"# worst ratio ooc-svm / liblinear: {max(ratios):.2f} (goal <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
