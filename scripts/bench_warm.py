"""Warm refits after ``ingest --append`` against cold fits, paired in one command.

Modes (every measurement in a fresh child process; cold and warm interleaved; wall and CPU
seconds, passes, objectives, peak RSS and the load average printed per run):

``grow``   a store of the first rows (``--base``), grown by appending ``--append`` (SVMlight
           text) into a copy, then (``--drop-shards K``) without its K oldest shards (the
           decremental half of a window): cold fit of the changed store vs a warm fit from
           the model of the base store (``--solvers``: perf and/or smo, active-set, irwls; solver
           parameters as ``--params 'C=1,gamma=0.05'``). The ratio warm / cold of each pair
           is printed, then the median.
``follow`` ``ooc-svm train --follow`` on a copy of ``--base``; the files ``--append`` (several,
           in order) are appended one by one by this process (``ingest --append``); each
           refit's seconds are read from the follow process's JSON lines; their total is
           compared with one cold fit of the final store, measured after.

Examples::

    python scripts/bench_warm.py grow --base base.zarr --append app10.svm --solvers perf
    python scripts/bench_warm.py grow --base a9a90.zarr --append a9a10.svm \\
        --solvers smo,active-set,irwls --params gamma=0.05 --reps 1
    python scripts/bench_warm.py follow --base base.zarr --append app1_0 app1_1 ... app1_9
    python scripts/bench_warm.py grow --base base.zarr --append app10.svm --drop-shards 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_util import add_child_option, kept_rows, machine, peak_rss_mb, run_child, serve_child

OOC = [sys.executable, "-m", "ooc_svm"]


def _params(text: str) -> dict:
    out: dict = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        k, _, v = item.partition("=")
        try:
            out[k.strip()] = float(v) if any(c in v for c in ".e") else int(v)
        except ValueError:
            out[k.strip()] = v
    return out


def _child(spec: dict) -> dict:
    """One training: ``spec`` = store, solver, params, init (model directory or None), out."""
    import resource

    import ooc_svm

    load0 = os.getloadavg()[0]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    kw = dict(spec["params"])
    if spec.get("init"):
        kw["init"] = spec["init"]
    res = ooc_svm.train(spec["store"], spec["solver"], **kw)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if spec.get("out"):
        res.model.save(spec["out"])
    return {
        "wall": wall,
        "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
        "passes": int(res.passes),
        "iterations": int(res.iterations),
        "objective": res.objective,
        "dual_objective": res.dual_objective,
        "stop": float(res.stop_value),
        "converged": bool(res.converged),
        "peak_rss_mb": peak_rss_mb(),
        "load": [load0, os.getloadavg()[0]],
        "variant": res.summary.get("variant") if isinstance(res.summary, dict) else None,
    }


def _grown_copy(base: str, appends: list[str], tmp: str, drop: int = 0) -> str:
    full = os.path.join(tmp, "grown" + os.path.splitext(base)[1])
    shutil.copytree(base, full)
    for a in appends:
        subprocess.run([*OOC, "-q", "ingest", a, full, "--append"], check=True)
    if drop:  # the decremental half of a window: the oldest shards leave
        subprocess.run([*OOC, "-q", "drop", full, "--shards", str(drop), "--purge"], check=True)
    return full


def _line(tag: str, r: dict) -> str:
    obj = r["objective"] if r["dual_objective"] is None else r["dual_objective"]
    return (
        f"  {tag:5s} wall {r['wall']:8.2f}s  cpu {r['cpu']:8.2f}s  passes {r['passes']:4d}  "
        f"iters {r['iterations']:7d}  obj {obj:.10g}  stop {r['stop']:.3g}  "
        f"rss {r['peak_rss_mb']:.0f} MiB  load {r['load'][0]:.1f}->{r['load'][1]:.1f}"
    )


def grow(args) -> None:
    tmp = tempfile.mkdtemp(prefix="bench-warm-", dir=args.tmp)
    try:
        full = _grown_copy(args.base, args.append, tmp, args.drop_shards)
        drop = f" - {args.drop_shards} oldest shards" if args.drop_shards else ""
        print(f"# base {args.base} + {' '.join(args.append)}{drop}; load {os.getloadavg()}")
        for solver in args.solvers.split(","):
            params = _params(args.params)
            if solver == "perf":
                params = {k: v for k, v in params.items() if k not in ("gamma", "kernel", "tol")}
            else:
                params = {k: v for k, v in params.items() if k not in ("eps",)}
            model = os.path.join(tmp, f"base-{solver}")
            r = run_child(__file__, {"store": args.base, "solver": solver, "params": params,
                                     "out": model, "what": "base"})  # fmt: skip
            print(f"{solver} {params}: base model {r['wall']:.1f}s, {r['passes']} passes")
            ratios, cpu = [], []
            case = _case(args)
            for rep in range(args.reps):
                pair = {}
                order = ("cold", "warm") if rep % 2 == 0 else ("warm", "cold")
                for tag in order:
                    spec = {"store": full, "solver": solver, "params": params, "what": tag,
                            "init": model if tag == "warm" else None}  # fmt: skip
                    pair[tag] = run_child(__file__, spec)
                    print(_line(tag, pair[tag]), flush=True)
                ratios.append(pair["warm"]["wall"] / pair["cold"]["wall"])
                cpu.append(pair["warm"]["cpu"] / pair["cold"]["cpu"])
                print(f"  pair {rep + 1}: warm/cold wall {ratios[-1]:.3f}, cpu {cpu[-1]:.3f}")
                _keep(args, {"mode": "grow", "case": case, "solver": solver,
                             "params": params, "pair": rep + 1, "cold": pair["cold"],
                             "warm": pair["warm"]})  # fmt: skip
            print(
                f"{solver}: warm/cold median wall {statistics.median(ratios):.3f}, "
                f"cpu {statistics.median(cpu):.3f} over {len(ratios)} pair(s)",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def follow(args) -> None:
    tmp = tempfile.mkdtemp(prefix="bench-follow-", dir=args.tmp)
    try:
        store = os.path.join(tmp, "s" + os.path.splitext(args.base)[1])
        shutil.copytree(args.base, store)
        model = os.path.join(tmp, "model")
        params = _params(args.params)
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()]
        cmd = [*OOC, "-q", "train", store, "-o", model, "--solver", args.solvers, *flags,
               "--follow", "--follow-seconds", str(args.poll), "--json"]  # fmt: skip
        print(f"# {' '.join(cmd)}; load {os.getloadavg()}", flush=True)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        first = json.loads(p.stdout.readline())
        print(f"first fit: {first['seconds']:.2f}s, {first['passes']} passes", flush=True)
        refits = []
        for a in args.append:
            subprocess.run([*OOC, "-q", "ingest", a, store, "--append"], check=True)
            rec = json.loads(p.stdout.readline())
            refits.append(rec)
            print(
                f"  refit {rec['refit']}: +{rec['rows_added']} rows -> {rec['n_rows']}, "
                f"{rec['passes']} passes, {rec['seconds']:.2f}s, {rec['stop']['name']} "
                f"{rec['stop']['value']:.3g}, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        cpu_follow = _cpu_of(p.pid)
        p.terminate()
        p.wait(timeout=60)
        total = sum(r["seconds"] for r in refits)
        cold = run_child(__file__, {"store": store, "solver": args.solvers, "params": params,
                                    "what": "cold"})  # fmt: skip
        print(_line("cold", cold))
        _keep(args, {"mode": "follow", "case": _case(args), "solver": args.solvers,
                     "params": params, "refits": len(refits),
                     "refit_seconds": [r["seconds"] for r in refits],
                     "refit_passes": [r["passes"] for r in refits], "cold": cold,
                     "follow_cpu": cpu_follow})  # fmt: skip
        print(
            f"follow: {len(refits)} refits, total {total:.2f}s = {total / cold['wall']:.3f} x "
            f"one cold fit of the final store ({cold['wall']:.2f}s, {cold['passes']} passes); "
            f"follow process CPU {cpu_follow:.1f}s in {time.perf_counter() - t0:.0f}s",
            flush=True,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _case(args) -> str:
    """What changed between the base model and the refit, in words (no machine paths)."""
    base = os.path.basename(os.path.normpath(args.base))
    adds = " + ".join(os.path.basename(a) for a in args.append)
    text = f"{base} + {adds}" if adds else base
    if getattr(args, "drop_shards", 0):
        text += f" - {args.drop_shards} oldest shard{'s' if args.drop_shards > 1 else ''}"
    return text


def _keep(args, row: dict) -> None:
    """Append ``row`` (with the machine and date) to ``--json`` (a list of rows)."""
    if not args.json:
        return
    rows = []
    if os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)
    rows.append(dict(row, machine=machine(), date=time.strftime("%Y-%m-%d")))
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


def render(paths: list[str]) -> str:
    """The table of rows saved by ``--json`` (one or more files, in order), machine and dates
    named once: what docs/BENCHMARKS.md carries (tests/test_benchmarks_doc.py checks it)."""
    rows, head = kept_rows(paths)
    out = [
        head,
        "",
        "| change | solver | cold: wall / CPU s, passes | warm: wall / CPU s, passes "
        "| warm / cold wall | CPU | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["cold"]
        loads = [c["load"][0], c["load"][1]]
        if r["mode"] == "grow":
            w = r["warm"]
            loads += w["load"]
            warm = f"{w['wall']:.1f} / {w['cpu']:.1f}, {w['passes']} ({w['iterations']} it.)"
            rw, rc = w["wall"] / c["wall"], w["cpu"] / c["cpu"]
            change = f"{r['case']} (pair {r['pair']})"
        else:
            total = sum(r["refit_seconds"])
            warm = f"{r['refits']} refits: {total:.1f} s wall, {sum(r['refit_passes'])} passes"
            rw, rc = total / c["wall"], float("nan")
            change = f"{r['case']} (--follow)"
        cold = f"{c['wall']:.1f} / {c['cpu']:.1f}, {c['passes']} ({c['iterations']} it.)"
        solver = r["solver"] + (f" ({c['variant']})" if c.get("variant") else "")
        rc_text = "–" if rc != rc else f"{rc:.2f}"
        out.append(
            f"| {change} | {solver} | {cold} | {warm} | {rw:.2f} | {rc_text} "
            f"| {min(loads):.1f}–{max(loads):.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_child_option(ap)
    ap.add_argument("mode", nargs="?", choices=["grow", "follow"])
    ap.add_argument("--base", help="store of the first rows")
    ap.add_argument("--append", nargs="+", default=[], help="SVMlight file(s) appended")
    ap.add_argument("--solvers", default="perf", help="comma list (follow: one solver)")
    ap.add_argument("--params", default="", help="solver parameters, 'C=1,eps=0.001'")
    ap.add_argument("--reps", type=int, default=2, help="cold/warm pairs (grow)")
    ap.add_argument(
        "--drop-shards",
        type=int,
        default=0,
        help="grow: then `ooc-svm drop` this many oldest shards of the copy (decremental)",
    )
    ap.add_argument("--poll", type=float, default=0.5, help="--follow-seconds (follow)")
    ap.add_argument("--tmp", default=None, help="directory for the copies (default $TMPDIR)")
    ap.add_argument("--json", default=None, help="also append the rows as JSON here")
    ap.add_argument("--render", nargs="+", metavar="JSON", default=None,
                    help="print the table of rows saved by --json and exit")  # fmt: skip
    args = ap.parse_args()
    if args.render:
        print(render(args.render))
        return
    if serve_child(args, _child):
        return
    if not args.base or not (args.append or args.drop_shards) or not args.mode:
        ap.error("give MODE, --base and --append (grow: or --drop-shards)")
    (grow if args.mode == "grow" else follow)(args)


if __name__ == "__main__":
    main()
