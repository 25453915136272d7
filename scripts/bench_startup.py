#!/usr/bin/env python
"""Whole-process ``ooc-svm train --solver perf`` beside LIBLINEAR's C ``train`` program.

Start-up counts and the reference is the program users run: the command a
user runs, start-up (imports, numba cache loading) included, against the C program users
compare with — LIBLINEAR's ``train``, found through ``$LIBLINEAR_TRAIN`` (built outside the
project from the public LIBLINEAR source; without it the bench stops with a message).

For a9a, w8a and ijcnn1 (from ``$OOC_SVM_DATA`` or ../shared/data) and any ``--store`` (e.g.
a 1M-row ``ooc-svm synth`` store, whose SVMlight text is written once for LIBLINEAR), in one
run:

- the data is made ready beforehand, untimed: the text decompressed into ``--dir`` (LIBLINEAR
  reads plain text) and ingested once into an lz4 Zarr store with ``ooc-svm ingest``;
- ``ooc-svm``: the whole process ``ooc-svm train --solver perf --C C --eps 0.001 --bias 1
  --variant V STORE -o MODEL -q`` (the console script installed beside this Python, else
  ``python -m ooc_svm``);
- ``LIBLINEAR``: the whole process ``$LIBLINEAR_TRAIN -s 3 -c C -B 1 [-e E] -q TEXT MODEL``:
  the dual L1-loss (hinge) SVM, the problem perf solves, same C and bias; its own stopping
  rule (dual maximal violation <= E, default 0.1, ``--ll-eps``) — so the objectives of both
  models, computed by one function over the store, are printed with their distance in units
  of C·n·ε (ooc-svm guarantees <= 1 from the optimum);
- ``predict``: the whole process ``ooc-svm predict MODEL STORE -o OUT -q`` with the model it
  trained, against LIBLINEAR's ``predict -q TEXT MODEL OUT`` of the same rows with its model
  (``$LIBLINEAR_PREDICT``, else ``predict`` beside ``train``; without it, no ratio);
- ``ooc-svm --help``, ``ooc-svm train --help`` and ``ooc-svm info STORE`` (the first data
  set's): the whole process, no counterpart to compare with.

Every row (command, data, medians and every run's wall and CPU, peak RSS, ratios, dP, the load
average when the row ended) is also written as JSON (``--json``, default ``DIR/bench.json``).

Every command runs once untimed first (numba's on-disk caches and Python's bytecode written,
files in the page cache: warm), then ``--repeat`` rounds alternating the commands (paired,
interleaved); per command the medians of wall time, CPU time (user + system of the process
and its threads, from ``os.wait4``) and peak RSS, and the ratios ooc-svm / LIBLINEAR, with
the load average at every row (the machine may be shared: compare CPU ratios). The CPUs are
those of this process's affinity: ``taskset -c 0,1`` runs both programs on 2 cores.

The commands run without ``PYTHONDONTWRITEBYTECODE`` (``--keep-env`` keeps it): set, every
run of an editable install compiles ooc-svm's ~60 modules from source again (0.1-0.2 s), a
cost no installed copy pays (pip compiles the bytecode at install; an editable install writes
it on the first run).

Usage::

    LIBLINEAR_TRAIN=/path/to/liblinear/train .venv/bin/python scripts/bench_startup.py
    LIBLINEAR_TRAIN=... taskset -c 0,1 .venv/bin/python scripts/bench_startup.py \
        --datasets '' --store /tmp/s1m.zarr --variants accelerated,selective --repeat 2
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


#: ``XDG_RUNTIME_DIR`` of the warm server of ``--server`` (None: no server)
SERVER_RUN: str | None = None
#: a command line starting with this runs through the warm server
VIA_SERVER = "@server"


def _served_usage() -> tuple[float, float]:
    """(CPU s, peak RSS MiB) of the last command the warm server ran (its log line)."""
    import glob
    import re

    logs = glob.glob(os.path.join(SERVER_RUN or "", "ooc-svm", "*.log"))
    lines = [ln for f in logs for ln in open(f) if " CPU " in ln]
    m = re.search(r"CPU ([\d.]+) s RSS ([\d.]+) MiB", lines[-1])
    assert m, lines[-1]
    return float(m.group(1)), float(m.group(2))


def wall(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one whole process, CPU = user + system time of the
    process and its threads (less sensitive than wall time to other load on a shared
    machine). Its output is discarded; a failure stops the bench.

    A command given as ``[VIA_SERVER, *cmd]`` runs ``cmd`` with the warm server's
    ``XDG_RUNTIME_DIR``: its CPU time is the client's plus the command process's (the
    server's log), its peak RSS the command process's (a fork counts the pages it shares
    with the server)."""
    served = cmd[0] == VIA_SERVER
    env = ENV
    if served:
        cmd = cmd[1:]
        env = {**(ENV if ENV is not None else os.environ), "XDG_RUNTIME_DIR": str(SERVER_RUN)}
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        p.returncode = rc = os.waitstatus_to_exitcode(status)
        if rc:
            err.seek(0)
            msg = err.read().decode(errors="replace")
            raise SystemExit(f"bench_startup: {' '.join(cmd)} failed ({rc}): {msg}")
    if served:
        cpu, rss = _served_usage()
        return dt, ru.ru_utime + ru.ru_stime + cpu, rss
    return dt, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def compare(cmds: dict[str, list[str]], repeat: int, warm: bool = True) -> tuple[dict, dict, dict]:
    """One untimed run of each command (``warm``), then ``repeat`` rounds alternating the
    commands (the order reversed every other round); (wall, CPU, peak RSS) lists per command."""
    if warm:
        for cmd in cmds.values():
            wall(cmd)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, list[float]] = {k: [] for k in cmds}
    for r in range(repeat):
        keys = list(cmds) if r % 2 == 0 else list(cmds)[::-1]
        for k in keys:
            w, c, m = wall(cmds[k])
            times[k].append(w)
            cpus[k].append(c)
            rss[k].append(m)
    return times, cpus, rss


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def store_text(store: str, work: str) -> str:
    """SVMlight text of a store for LIBLINEAR, written once (one shard at a time)."""
    text = os.path.join(work, os.path.basename(store.rstrip("/")) + ".txt")
    if not os.path.exists(text):
        from sklearn.datasets import dump_svmlight_file

        from ooc_svm.store import open_store

        st = open_store(store)
        with open(text + ".tmp", "wb") as f:
            for i in range(st.n_shards):
                sh = st.read_shard(i)
                dump_svmlight_file(sh.to_scipy(st.meta.n_features), sh.y, f, zero_based=False)
        os.replace(text + ".tmp", text)
    return text


def objective_gap(store: str, model: str, ll_model: str, C: str, eps: str) -> float:
    """(P(ooc-svm's w) - P(LIBLINEAR's w)) / (C n eps), both P over the store."""
    C, eps = float(C), float(eps)  # type: ignore[assignment]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_perf import read_linear_model, store_objective

    from ooc_svm.store import open_store

    meta = open_store(store).meta
    d = meta.n_features
    p = []
    for kind, path in (("ooc", model), ("ll", ll_model)):
        w, wb, positive = read_linear_model(kind, path, d)
        p.append(store_objective(store, w, wb, positive, C))
    return float((p[0] - p[1]) / (C * meta.n_rows * eps))


def in_child(name: str, *args):
    """``name(*args)`` run in a child Python (its JSON answer): this process stays small, as
    a fork's peak RSS counts the parent's (``ru_maxrss`` of the children it starts)."""
    import json

    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--helper", name, *map(str, args)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


#: the rows of the table, as written to ``--json``
ROWS: list[dict] = []

_HEAD = (
    f"{'data':<10}{'command':<22}{'wall s':>8}{'LL wall':>8}{'ratio':>7}{'CPU s':>7}"
    f"{'LL CPU':>7}{'ratio':>7}{'RSS MiB':>8}{'LL RSS':>7}{'dP':>7}   load"
)


def report(name: str, label: str, t: dict, c: dict, m: dict, k: str, dp=None) -> None:
    """One row of the table (and of the JSON): command ``k`` of ``t, c, m`` (medians of
    wall and CPU s, peak RSS) against ``"ll"`` (LIBLINEAR's program) when it ran."""
    row = {
        "data": name, "command": label, "wall_s": statistics.median(t[k]), "walls_s": t[k],
        "cpu_s": statistics.median(c[k]), "cpus_s": c[k], "rss_mib": max(m[k]),
        "dP": dp, "load": list(os.getloadavg()),
    }  # fmt: skip
    ll = "ll" in t
    if ll:
        row.update(
            ll_wall_s=statistics.median(t["ll"]), ll_walls_s=t["ll"],
            ll_cpu_s=statistics.median(c["ll"]), ll_rss_mib=max(m["ll"]),
        )  # fmt: skip
        row.update(
            wall_ratio=row["wall_s"] / row["ll_wall_s"], cpu_ratio=row["cpu_s"] / row["ll_cpu_s"]
        )
    ROWS.append(row)

    def f(key: str, fmt: str, width: int) -> str:
        v = row.get(key)
        return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"

    print(
        f"{name:<10}{label:<22}{f('wall_s', '.2f', 8)}{f('ll_wall_s', '.2f', 8)}"
        f"{f('wall_ratio', '.2f', 7)}{f('cpu_s', '.2f', 7)}{f('ll_cpu_s', '.2f', 7)}"
        f"{f('cpu_ratio', '.2f', 7)}{f('rss_mib', '.0f', 8)}{f('ll_rss_mib', '.0f', 7)}"
        f"{f('dP', '.2f', 7)}   {load()}   (walls {_fmt(t[k])}"
        + (f" / {_fmt(t['ll'])})" if ll else ")"),
        flush=True,
    )


def _env() -> dict:
    return {**(ENV if ENV is not None else os.environ), "XDG_RUNTIME_DIR": str(SERVER_RUN)}


def bench_train(a, ll: str, ooc: list[str], name: str, text: str, store: str) -> None:
    """``train --solver perf`` (each variant; served too with ``--server``) against
    LIBLINEAR's ``train -s 3``."""
    ll_model = os.path.join(a.dir, f"{name}.liblinear.model")
    ll_cmd = [ll, "-s", "3", "-c", a.C, "-B", "1", "-q", text, ll_model]
    if a.ll_eps:
        ll_cmd[7:7] = ["-e", a.ll_eps]
    for variant in [v for v in a.variants.split(",") if v]:
        model = os.path.join(a.dir, f"{name}.{variant}.model")
        flags = ["--C", a.C, "--eps", a.eps, "--bias", "1", "--variant", variant]
        train = [*ooc, "train", "--solver", "perf", *flags, store]
        cmds = {"ooc": [*train, "-o", model, "--overwrite", "-q"], "ll": ll_cmd}
        if SERVER_RUN:
            cmds["served"] = [VIA_SERVER, *train, "-o", model + ".served", "--overwrite", "-q"]
        t, c, m = compare(cmds, a.repeat, warm=not a.no_warm)
        dp = in_child("objective_gap", store, model, ll_model, a.C, a.eps)
        for k in [k for k in cmds if k != "ll"]:
            label = f"train/{variant}" + ("/served" if k == "served" else "")
            report(name, label, t, c, m, k, dp)


def bench_predict(a, ll_predict: str | None, ooc: list[str], name: str, text: str, store: str):
    """``predict MODEL STORE`` (the model ``bench_train`` wrote, on its own rows) against
    LIBLINEAR's ``predict`` of the same rows with its model."""
    variant = [v for v in a.variants.split(",") if v][0]
    model = os.path.join(a.dir, f"{name}.{variant}.model")
    out = os.path.join(a.dir, f"{name}.scores.tsv")
    cmds = {"ooc": [*ooc, "predict", model, store, "-o", out, "-q"]}
    if ll_predict:
        ll_model = os.path.join(a.dir, f"{name}.liblinear.model")
        cmds["ll"] = [ll_predict, "-q", text, ll_model, out + ".ll"]
    if SERVER_RUN:
        cmds["served"] = [VIA_SERVER, *ooc, "predict", model, store, "-o", out + ".s", "-q"]
    t, c, m = compare(cmds, a.repeat)
    for k in [k for k in cmds if k != "ll"]:
        report(name, "predict" + ("/served" if k == "served" else ""), t, c, m, k)


def bench_plain(a, ooc: list[str], store: str | None) -> None:
    """Commands without a LIBLINEAR counterpart: ``--help``, ``train --help``, ``info``."""
    cmds = {"ooc-svm --help": [*ooc, "--help"], "ooc-svm train --help": [*ooc, "train", "--help"]}
    if store:
        cmds["ooc-svm info STORE"] = [*ooc, "info", store]
    if SERVER_RUN and store:
        cmds["ooc-svm info STORE/served"] = [VIA_SERVER, *ooc, "info", store]
    t, c, m = compare(cmds, a.repeat)
    for k in cmds:
        report(os.path.basename(store or "").removesuffix(".zarr") if "info" in k else "-",
               k.removeprefix("ooc-svm "), t, c, m, k)  # fmt: skip


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None, help="default $OOC_SVM_DATA or ../shared/data")
    ap.add_argument("--dir", default="/tmp/bench_startup", help="text files, stores, models")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--C", default="1")
    ap.add_argument("--eps", default="0.001")
    ap.add_argument("--variants", default="accelerated", help="perf variants, comma-separated")
    ap.add_argument("--store", action="append", help="also this store (its text made once)")
    ap.add_argument("--ll-eps", default=None, help="LIBLINEAR -e (default: its own, 0.1)")
    ap.add_argument("--no-warm", action="store_true", help="no untimed first run (big stores)")
    ap.add_argument("--no-predict", action="store_true", help="no predict rows")
    ap.add_argument("--json", default=None, help="write the rows here (default DIR/bench.json)")
    ap.add_argument(
        "--server",
        action="store_true",
        help="also time ooc-svm through a warm server (`ooc-svm server start`), rows 'served'",
    )
    ap.add_argument(
        "--keep-env",
        action="store_true",
        help="run the commands with this environment as it is (PYTHONDONTWRITEBYTECODE kept)",
    )
    return ap.parse_args()


def ll_predict_program(ll: str) -> str | None:
    """LIBLINEAR's ``predict``: ``$LIBLINEAR_PREDICT``, else beside ``train``."""
    d, base = os.path.split(ll)
    found = [os.environ.get("LIBLINEAR_PREDICT", ""), os.path.join(d, "predict")]
    found.append(os.path.join(d, base.replace("train", "predict")))
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--helper":
        import json

        fn = {"objective_gap": objective_gap, "store_text": store_text}[sys.argv[2]]
        print(json.dumps(fn(*sys.argv[3:])))
        return 0
    a = parse_args()
    global ENV, SERVER_RUN
    if not a.keep_env:
        ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    ll = os.environ.get("LIBLINEAR_TRAIN")
    if not ll or not os.access(ll, os.X_OK):
        print("bench_startup: skipped: set $LIBLINEAR_TRAIN to LIBLINEAR's C train program")
        return 0
    ll_predict = ll_predict_program(ll)
    src_dir = data_dir(a.data_dir)
    os.makedirs(a.dir, exist_ok=True)
    ooc = ooc_svm_command()
    start_load = load()
    print(f"# load average at start: {start_load}; cpus: {len(os.sched_getaffinity(0))}; "
          f"ooc-svm: {' '.join(ooc)}; LIBLINEAR: {ll} -s 3 -c {a.C} -B 1"
          f"{' -e ' + a.ll_eps if a.ll_eps else ' (-e 0.1, its default)'}; predict: "
          f"{ll_predict or 'not found (no LIBLINEAR predict rows)'}")  # fmt: skip
    dont_write = (ENV if ENV is not None else os.environ).get("PYTHONDONTWRITEBYTECODE")
    print(f"# PYTHONDONTWRITEBYTECODE in the commands' environment: {dont_write or 'unset'}")
    print(f"# medians of {a.repeat} paired, interleaved whole-process runs (after one untimed "
          "run of each); dP = (P(ooc-svm) - P(LIBLINEAR)) / (C n eps), P the primal; CPU = "
          "user + system (os.wait4); served: client + command process")  # fmt: skip
    print(_HEAD)
    if a.server:
        SERVER_RUN = os.path.join(os.path.abspath(a.dir), "run")
        os.makedirs(SERVER_RUN, exist_ok=True)
        subprocess.run([*ooc, "server", "start", "--idle-minutes", "60"], env=_env(), check=True)
    jobs = [(n, *prepare(n, os.path.join(src_dir, DATASETS[n]), a.dir)) for n in
            [d for d in a.datasets.split(",") if d]]  # fmt: skip
    for st in a.store or []:
        jobs.append((os.path.basename(st.rstrip("/")), in_child("store_text", st, a.dir), st))
    try:
        for name, text, store in jobs:
            bench_train(a, ll, ooc, name, text, store)
            if not a.no_predict:
                bench_predict(a, ll_predict, ooc, name, text, store)
        bench_plain(a, ooc, jobs[0][2] if jobs else None)
    finally:
        if SERVER_RUN:
            subprocess.run([*ooc, "server", "stop"], env=_env())
    end_load = load()
    print(f"# load average at end: {end_load}")
    ratios = [r["wall_ratio"] for r in ROWS if "wall_ratio" in r]
    if ratios:
        print(f"# worst wall ratio ooc-svm / LIBLINEAR: {max(ratios):.2f}")
    write_json(a, ll, ll_predict, ooc, start_load, end_load)
    return 0


def write_json(a, ll, ll_predict, ooc, start_load: str, end_load: str) -> None:
    import json

    path = a.json or os.path.join(a.dir, "bench.json")
    doc = {
        "cpus": len(os.sched_getaffinity(0)), "load_start": start_load, "load_end": end_load,
        "repeat": a.repeat, "ooc_svm": ooc, "liblinear_train": ll,
        "liblinear_predict": ll_predict, "C": a.C, "eps": a.eps, "ll_eps": a.ll_eps,
        "rows": ROWS,
    }  # fmt: skip
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"# rows written to {path}")


if __name__ == "__main__":
    sys.exit(main())
