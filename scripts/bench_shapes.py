#!/usr/bin/env python
"""Benchmark ``train --solver perf`` on the shapes of public data sets against LIBLINEAR.

For every profile of ``ooc-svm synth --like`` (rcv1, url, kdd2010, webspam, criteo) this
builds, once, a training split of ``--rows`` rows (webspam: ``--webspam-rows``, by default a
tenth: its rows hold ~3,730 non-zeros each) and a held-out test split, each as a Zarr store
and as SVMlight text (the same rows: the generator is deterministic). Then, paired and
interleaved (the order reversed every other round, ``--repeat`` rounds), whole processes:

- LIBLINEAR's C program ``$LIBLINEAR_TRAIN -s 3 -c C -B 1 TRAIN.svm`` (L2-regularised hinge
  loss, dual coordinate descent, its default stop ``-e 0.1``; its time includes parsing the
  text);
- with ``--snapml PYTHON`` (or ``$SNAPML_PYTHON``; a Python where ``import snapml`` works),
  Snap ML's CPU ``SupportVectorMachine(regularizer=1/C)`` on 2 threads over the same text
  with a constant column, its text reading included: a second reference;
- ``ooc-svm train STORE --solver perf --variant V --C C --eps EPS --json`` for every
  ``--variants`` entry (``V`` or ``V@BIN``: another ooc-svm executable, e.g. a branch
  installed in its own virtual environment).

For each: wall and CPU seconds and peak RSS of the process (``os.wait4``), the load average
after it, LIBLINEAR's iterations and ooc-svm's passes; then, by one function over the same
training store, the primal objective ½(‖w‖² + w_b²) + C Σ max(0, 1 − yᵢ(w·xᵢ + w_b)) of every
model (both regularise the bias weight w_b of a constant feature 1, ``-B 1`` and ``--bias
1``; LIBLINEAR's file is read by ``ooc_svm.interop.liblinear``, whose intercept is w_b·bias),
its distance to LIBLINEAR's in units of ooc-svm's guarantee C·n·ε, the best lower bound
(the largest dual objective printed by either program) and the test accuracy. Target: ooc-svm
no slower than LIBLINEAR on any shape, at an objective no worse than LIBLINEAR's by more
than C·n·ε.

    LIBLINEAR_TRAIN=/path/train python scripts/bench_shapes.py --dir /tmp/bs          # 1M
    LIBLINEAR_TRAIN=/path/train python scripts/bench_shapes.py --dir /tmp/bs --rows 200000 \\
        --profiles rcv1,criteo --variants accelerated,dcd@/tmp/wv/bin/ooc-svm
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_util import kept_rows, machine

PROFILES = ("rcv1", "url", "kdd2010", "webspam", "criteo")
TIME = "/usr/bin/time"
OOC = [sys.executable, "-m", "ooc_svm"]


def _load() -> float:
    return os.getloadavg()[0]


def _synth(path: str, name: str, rows: int, seed: int, split: str) -> None:
    if os.path.exists(path):
        return
    t = time.perf_counter()
    subprocess.run(
        [*OOC, "synth", path, "--like", name, "--rows", str(rows), "--seed", str(seed),
         "--split", split, "-q"],
        check=True,
    )  # fmt: skip
    print(f"# built {path} in {time.perf_counter() - t:.1f} s (load {_load():.1f})", flush=True)


def _timed(cmd: list[str], timeout: float | None) -> dict:
    """Wall, CPU (``os.wait4``), peak RSS and stdout of one whole process.

    The peak RSS comes from ``/usr/bin/time -f %M``, which forks the program from its own
    small process: Linux carries a process's RSS high-water mark across fork and exec, so a
    program started straight from this (large) process would report at least this
    process's RSS.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as mem:  # fmt: skip
        t0 = time.perf_counter()
        p = subprocess.Popen([TIME, "-f", "%M", "-o", mem.name, *cmd], stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if timeout and time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                _, status, ru = os.wait4(p.pid, 0)
                timed_out = True
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        kb = mem.read().split()
    rss = float(kb[-1]) / 1024.0 if kb and kb[-1].isdigit() else float("nan")
    r = {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": rss,
         "load": _load(), "stdout": text, "cmd": shlex.join(cmd)}  # fmt: skip
    if timed_out:
        r["error"] = f"timeout after {timeout:.0f} s"
    elif os.waitstatus_to_exitcode(status) != 0:
        r["error"] = (etext.strip().splitlines() or ["exit status != 0"])[-1][:300]
    return r


def _liblinear(binary: str, txt: str, model: str, C: float, timeout) -> dict:
    r = _timed([binary, "-s", "3", "-c", f"{C:g}", "-B", "1", txt, model], timeout)
    it = re.findall(r"#iter = (\d+)", r["stdout"])
    obj = re.findall(r"Objective value = (-?[0-9.eE+-]+)", r["stdout"])
    r["iterations"] = int(it[-1]) if it else None
    if "reaching max number of iterations" in r["stdout"]:
        r["warning"] = "stopped at its iteration limit"
    # LIBLINEAR prints the dual as a minimisation (½αᵀQα − eᵀα): its negative is the dual
    # objective, a lower bound on the primal optimum
    r["dual"] = -float(obj[-1]) if obj else None
    r["model"] = model
    return r


def _ooc(binary: str, variant: str, store: str, model: str, C: float, eps: float, timeout):
    cmd = [binary, "train", store, "-o", model, "--solver", "perf", "--variant", variant,
           "--C", repr(C), "--eps", repr(eps), "--json", "--overwrite"]  # fmt: skip
    r = _timed(cmd, timeout)
    if "error" not in r:
        j = json.loads(r["stdout"].strip().splitlines()[-1])
        # perf's lower bound: the dual value its certificate uses (``dual_objective`` is in
        # LIBSVM's sign convention where a variant reports it)
        dual = j.get("lower_bound")
        r.update(iterations=j.get("iterations"), passes=j.get("passes"),
                 dual=dual, reported=j.get("objective"),
                 converged=j.get("converged"), picked=j.get("variant"),
                 why=j.get("auto"))  # fmt: skip
    r["model"] = model
    return r


#: the child program of the Snap ML reference: reads the SVMlight text (scikit-learn's C-level
#: reader), adds the constant column (``-B 1``: the bias weight regularised as LIBLINEAR's),
#: fits ``snapml.SupportVectorMachine(regularizer=1/C)`` on 2 threads and saves (w, w_b,
#: positive label); one whole process, its text reading included, as LIBLINEAR's
_SNAPML = r"""
import sys, numpy as np, scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from snapml import SupportVectorMachine
txt, d, out = sys.argv[1], int(sys.argv[2]), sys.argv[5]
C, tol = float(sys.argv[3]), float(sys.argv[4])
X, y = load_svmlight_file(txt, n_features=d, dtype=np.float32)
X = sp.hstack([X, np.ones((X.shape[0], 1), dtype=np.float32)], format="csr")
pos = float(y.max())
m = SupportVectorMachine(regularizer=1.0 / C, n_jobs=2, tol=tol, max_iter=100000,
                         fit_intercept=False)
m.fit(X, np.where(y == pos, 1.0, -1.0))
w = np.asarray(m.coef_, dtype=np.float64).ravel()
np.savez(out, w=w[:d], wb=w[d], pos=pos)
"""


def _snapml(python: str, txt: str, d: int, model: str, C: float, tol: float, timeout) -> dict:
    r = _timed([python, "-c", _SNAPML, txt, str(d), repr(C), repr(tol), model + ".npz"], timeout)
    r["model"] = model + ".npz"
    return r


def _linear(kind: str, path: str, d: int) -> tuple:
    """(w, w_b, positive label) of a trained model; bias feature value 1 in both."""
    import numpy as np

    if kind == "liblinear":
        return _liblinear_weights(path, d)
    if kind == "snapml":
        z = np.load(path)
        return np.asarray(z["w"], dtype=np.float64), float(z["wb"]), float(z["pos"])
    from ooc_svm.model.model import load_model

    m = load_model(path)
    w = np.zeros(d)
    coef = np.asarray(m.coef_, dtype=np.float64).ravel()[:d]
    w[: coef.size] = coef
    return w, float(m.intercept_), float(m.classes[1])


def _liblinear_weights(path: str, d: int) -> tuple:
    """(w, w_b, positive label) of a two-class LIBLINEAR model file, read as
    ``ooc_svm.interop.liblinear.read`` does (w scores ``label[0]``; the last weight is the
    bias feature's, intercept = w_b · bias) but with one C-level parse of the weight lines
    (``read`` checks every line in Python: minutes for 20 million of them)."""
    import numpy as np

    head: dict[str, list[str]] = {}
    with open(path) as f:
        for line in f:
            toks = line.split()
            if toks == ["w"]:
                break
            head[toks[0]] = toks[1:]
        w = np.loadtxt(f, dtype=np.float64, ndmin=1)
    nf, bias = int(head["nr_feature"][0]), float(head["bias"][0])
    labels = [float(t) for t in head["label"]]
    if len(labels) != 2 or w.size != nf + (1 if bias >= 0 else 0):
        raise SystemExit(f"{path}: not a two-class LIBLINEAR model with {nf} features")
    out = np.zeros(d)
    out[: min(d, nf)] = w[: min(d, nf)]
    return out, (float(w[nf]) * bias if bias >= 0 else 0.0), labels[0]


def _evaluate(store: str, w, wb: float, positive: float, C: float) -> tuple[float, float, int]:
    """(½(‖w‖² + w_b²) + C Σ hinge, correct predictions, rows) over a store, shard by shard."""
    import numpy as np

    from ooc_svm.store import open_store

    st = open_store(store)
    hinge, correct, n = 0.0, 0, 0
    for i in range(st.n_shards):
        sh = st.read_shard(i)
        y = np.where(sh.y == positive, 1.0, -1.0)
        f = sh.to_scipy(st.meta.n_features) @ w + wb
        hinge += float(np.maximum(0.0, 1.0 - y * f).sum())
        correct += int(np.sum((f > 0) == (y > 0)))
        n += sh.n_rows
    return 0.5 * (float(w @ w) + wb * wb) + C * hinge, correct, n


def _variants(spec: str) -> list[tuple[str, str, str]]:
    """``V`` or ``V@BIN`` entries -> (label, variant, executable)."""
    here = os.path.join(os.path.dirname(sys.executable), "ooc-svm")
    out = []
    for item in filter(None, spec.split(",")):
        v, _, binary = item.partition("@")
        label = f"ooc-svm perf {v}" + (f" ({binary})" if binary else "")
        out.append((label, v, binary or here))
    return out


def run_profile(a, name: str, ll: str | None) -> list[dict]:
    from ooc_svm.store import open_store

    rows = a.webspam_rows if name == "webspam" else a.rows
    test_rows = max(1000, rows // 5) if a.test_rows is None else a.test_rows
    base = os.path.join(a.dir, f"{name}_r{rows}_s{a.seed}")
    train_st, train_txt = base + ".zarr", base + ".svm"
    test_st = os.path.join(a.dir, f"{name}_test_r{test_rows}_s{a.seed}.zarr")
    _synth(train_st, name, rows, a.seed, "train")
    if ll or a.snapml:
        _synth(train_txt, name, rows, a.seed, "train")
    _synth(test_st, name, test_rows, a.seed, "test")
    meta = open_store(train_st).meta
    n, d = meta.n_rows, meta.n_features
    systems: list[tuple[str, object]] = []
    if ll:
        systems.append(("LIBLINEAR -s 3 -B 1",
                        lambda m: _liblinear(ll, train_txt, m, a.C, a.timeout)))  # fmt: skip
    if a.snapml:
        tol = a.snapml_tol

        def snap(m: str, tol: float = tol) -> dict:
            return _snapml(a.snapml, train_txt, d, m, a.C, tol, a.timeout)

        systems.append((f"Snap ML SVM tol {tol:g}", snap))
    for label, v, binary in _variants(a.variants):
        systems.append((label, lambda m, v=v, b=binary: _ooc(b, v, train_st, m, a.C, a.eps,
                                                              a.timeout)))  # fmt: skip
    runs: dict[str, list[dict]] = {s: [] for s, _ in systems}
    for rep in range(a.repeat):
        order = systems if rep % 2 == 0 else systems[::-1]
        for label, fn in order:
            model = os.path.join(a.dir, f"model_{name}_{re.sub(r'[^A-Za-z0-9]+', '_', label)}")
            r = fn(model)  # type: ignore[operator]
            runs[label].append(r)
            shown = {k: v for k, v in r.items() if k not in ("stdout", "cmd")}
            print(f"{name} rep {rep} {label}: {json.dumps(shown)}", flush=True)
    out = []
    for label, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        row = {"profile": name, "rows": n, "test_rows": test_rows, "features": d,
               "nnz_per_row": meta.nnz / n, "program": label, "runs": len(rs),
               "cmd": rs[0]["cmd"], "loads": [round(r["load"], 1) for r in rs]}  # fmt: skip
        if not ok:
            row["error"] = rs[0]["error"]
            out.append(row)
            continue
        last = ok[-1]
        kind = ("liblinear" if label.startswith("LIBLINEAR")
                else "snapml" if label.startswith("Snap ML") else "ooc")  # fmt: skip
        w, wb, pos = _linear(kind, last["model"], d)
        obj, _, _ = _evaluate(train_st, w, wb, pos, a.C)
        _, correct, nt = _evaluate(test_st, w, wb, pos, a.C)
        row.update(
            wall=statistics.median(r["wall"] for r in ok),
            cpu=statistics.median(r["cpu"] for r in ok),
            rss_mb=max(r["rss_mb"] for r in ok),
            iterations=last.get("iterations"),
            passes=last.get("passes"),
            dual=last.get("dual"),
            converged=last.get("converged"),
            warning=last.get("warning"),
            picked=last.get("picked"),
            why=last.get("why"),
            objective=obj,
            test_accuracy=correct / nt,
        )
        out.append(row)
    ref = next((r for r in out if r["program"].startswith("LIBLINEAR") and "error" not in r), None)
    lower = max((r["dual"] for r in out if r.get("dual") is not None), default=None)
    for r in out:
        if "error" in r:
            continue
        if ref:
            r["wall_ratio"] = r["wall"] / ref["wall"]
            r["cpu_ratio"] = r["cpu"] / ref["cpu"]
            r["obj_vs_ll"] = (r["objective"] - ref["objective"]) / (a.C * n * a.eps)
            r["obj_ratio"] = r["objective"] / ref["objective"]
        if lower is not None:
            r["rel_gap"] = (r["objective"] - lower) / r["objective"]
    return out


def table(rows: list[dict], a=None) -> str:
    head = ("| shape | rows (test) | columns | nnz/row | program | wall s | CPU s | peak RSS MB "
            "| iter. / passes | primal P | P / P_LL | (P − P_LL)/(C·n·ε) | (P − D_best)/P "
            "| test acc. | wall / LL | CPU / LL | load |")  # fmt: skip
    lines = [head, "|" + "---|" * 17]
    for r in rows:
        shape = r["profile"]
        lead = (f"| {shape} | {r['rows']:,} ({r['test_rows']:,}) | {r['features']:,} | "
                f"{r['nnz_per_row']:.1f} | {r['program']} |")  # fmt: skip
        if "error" in r:
            lines.append(lead + f" {r['error']} |" + " |" * 11)
            continue
        it = r.get("iterations")
        it = ("–" if it is None else it) if r.get("passes") is None else f"{it} / {r['passes']}"
        if r.get("warning") or r.get("converged") is False:
            it = f"{it} ({r.get('warning') or 'not converged'})"
        if r.get("why"):
            it = f"{it}, auto: {r['picked']}"

        def opt(k: str, f: str, r: dict = r) -> str:
            return f.format(r[k]) if r.get(k) is not None else "–"

        lines.append(
            lead + f" {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss_mb']:.0f} | {it} | "
            f"{r['objective']:,.2f} | {opt('obj_ratio', '{:.4f}')} | {opt('obj_vs_ll', '{:+.3f}')} "
            f"| {opt('rel_gap', '{:.2e}')} "
            f"| {r['test_accuracy']:.4f} | {opt('wall_ratio', '{:.2f}')} | "
            f"{opt('cpu_ratio', '{:.2f}')} | {', '.join(str(x) for x in r['loads'])} |"
        )
    return "\n".join(lines)


def _portable(rows: list[dict], a, ll: str | None) -> list[dict]:
    """The rows with this machine's paths replaced by names (``$DIR``, ``$LIBLINEAR_TRAIN``,
    ``ooc-svm``), the machine and the date added: what docs/benchmarks/ keeps."""
    subs = [(os.path.abspath(a.dir), "$DIR"), (a.dir, "$DIR")]
    if ll:
        subs.insert(0, (ll, "$LIBLINEAR_TRAIN"))
    if getattr(a, "snapml", None):
        subs.insert(0, (a.snapml, "$SNAPML_PYTHON"))
    subs.insert(0, (shlex.join(OOC), "ooc-svm"))
    for _, _, binary in _variants(a.variants):
        subs.insert(0, (binary, "ooc-svm"))
    out = []
    for r in rows:
        r = dict(r, machine=machine(), date=time.strftime("%Y-%m-%d"))
        for k in ("cmd", "model"):
            if isinstance(r.get(k), str):
                for old, new in subs:
                    r[k] = r[k].replace(old, new)
        out.append(r)
    return out


def render(paths: list[str]) -> str:
    """The table of rows saved by ``--json`` (one or more files, in order), the machine and
    dates named once: what docs/BENCHMARKS.md carries (a test checks it is this output)."""
    rows, head = kept_rows(paths)
    return head + "\n\n" + table(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="bench_shapes_data", help="where the data sets are built")
    ap.add_argument("--rows", type=int, default=1_000_000, help="training rows per profile")
    ap.add_argument("--webspam-rows", type=int, default=None,
                    help="training rows of webspam (default --rows / 10)")  # fmt: skip
    ap.add_argument("--test-rows", type=int, default=None,
                    help="held-out rows (default a fifth of the training rows)")  # fmt: skip
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--variants", default="auto",
                    help="perf variants, comma-separated, each V or V@OOC_SVM_EXECUTABLE "
                    "(default: auto, what a user gets without --variant; the table says "
                    "which variant auto picked)")  # fmt: skip
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=0.001, help="ooc-svm's --eps")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per training run")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument(
        "--snapml",
        default=os.environ.get("SNAPML_PYTHON"),
        metavar="PYTHON",
        help="a Python with snapml installed (default $SNAPML_PYTHON; else this "
        "one when it imports snapml): Snap ML's CPU SVM as a second reference",
    )
    ap.add_argument("--snapml-tol", type=float, default=1e-3, help="Snap ML's tol")
    ap.add_argument("--render", nargs="+", metavar="JSON", default=None,
                    help="print the table of rows saved by --json and exit")  # fmt: skip
    a = ap.parse_args()
    if a.snapml is None:
        import importlib.util

        if importlib.util.find_spec("snapml") is not None:
            a.snapml = sys.executable
    if a.render:
        print(render(a.render))
        return 0
    if a.webspam_rows is None:
        a.webspam_rows = max(1000, a.rows // 10)
    os.makedirs(a.dir, exist_ok=True)
    ll = os.environ.get("LIBLINEAR_TRAIN")
    if not ll:
        print("# LIBLINEAR skipped: set $LIBLINEAR_TRAIN to LIBLINEAR's C train program")
    print(f"# load at start: {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    rows: list[dict] = []
    for name in a.profiles.split(","):
        if name not in PROFILES:
            raise SystemExit(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
        rows += run_profile(a, name, ll)
        print(table([r for r in rows if r["profile"] == name], a), flush=True)
    print(f"\n# load at end: {os.getloadavg()}")
    print(table(rows, a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(_portable(rows, a, ll), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
