#!/usr/bin/env python
"""Reproduce Scheinberg 2006 (SVM-QP, the active-set method), Tables 1-2: the adult and web cases.

A case ``adult_S_C`` is the Gaussian kernel with parameter sigma = S and the box C. The paper
does not write its kernel formula; ``--gamma-rule`` chooses how sigma becomes LIBSVM's gamma
(exp(-gamma |x-y|^2)): ``inv`` gamma = 1/sigma (default: the rule whose n_s / n_c match the
paper, see docs/REPRODUCTION.md), ``inv2`` gamma = 1/(2 sigma), ``inv2sq`` gamma =
1/(2 sigma^2). Table 1 used half of each set (16,100 adult rows, 24,692 web rows: nested
random subsets here), Table 2 the full sets (a9a 32,561, w8a 49,749).

Each case runs ``--solver active-set --pricing sprint`` and, when ``$SVMLIGHT_LEARN`` is set,
SVMlight (``svm_learn -t 2 -g GAMMA -c C -m CACHE``, its default accuracy ``-e 0.001``; with
``--light-eps`` also ``-e 1e-6``, the paper's "SVM_e^light" column). Printed beside the paper:
n_s (free SVs), n_c (SVs at C), CPU seconds and the SVMlight / ours ratio (the paper's claim:
SVM-QP at least 2x faster than SVMlight on almost all cases).

Table 6 (``--tables 6``, the paper's incremental mode SVM-QP_inc, Section 4.4): a Table 1
case is trained on the first n/K rows of its nested subset, then K-1 times the next n/K
rows are appended to the store (``ooc-svm ingest --append``) and the solver is warm-started
from the previous model (``train --init``: the new rows enter I_0 and are priced, the
others keep their alpha), up to the full n; beside a batch run of the same case at the
same ``--tol``. Reported: the summed CPU seconds of the K train calls (each timed as every
run here: inside the child, around the train call), K, and whether the last model is the
batch optimum (n_s, n_c within 1%, dual objective within 1e-6 relative). ``--increments``
gives K (a comma list runs each). SVMlight is not run for Table 6.

Usage::

    python scripts/reproduce/scheinberg2006.py --quick     # <= 5 min on 2 cores
    python scripts/reproduce/scheinberg2006.py [--tables 1,2] [--cases adult_100_1,...]
    python scripts/reproduce/scheinberg2006.py --tables 6 --increments 100 --tol 1e-6 \
        --cases web_100_10,adult_100_1
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

# (case, n, n_s, n_c, SVMlight s, SVM_e^light s, SVM-QP s); None: "-" or "*" in the paper
TABLE1 = [
    ("web_100_100", 24692, 980, 453, 380, 918, 65),
    ("web_40_10", 24692, 1037, 568, 241, 377, 68),
    ("web_40_100", 24692, 1214, 313, 368, 685, 84),
    ("web_100_10", 24692, 679, 835, 203, 358, 40),
    ("adult_100_1", 16100, 97, 5996, 153, 154, 81),
    ("adult_100_100", 16100, 871, 4823, 515, 856, 175),
    ("adult_200_1", 16100, 168, 5785, 159, 152, 85),
    ("adult_200_100", 16100, 483, 5219, 332, 447, 140),
    ("adult_50_10", 16100, 615, 5143, 207, 243, 120),
]
# Table 2 has only the SVM_e^light column (tolerance 1e-6 for both codes)
TABLE2 = [
    ("web_1000_100", 49749, 297, 1702, None, 694, 92),
    ("web_100_100", 49749, 1404, 905, None, 3581, 174),
    ("web_10_100", 49749, 3446, 527, None, 1354, 715),
    ("adult_1000_100", 32561, 143, 11361, None, 937, 278),
    ("adult_100_100", 32561, 1317, 9879, None, 5685, 460),
    ("adult_10_100", 32561, 9959, 3200, None, 14466, None),
]
# Table 6: (case, n, n_s, n_c, SVM-QP s, SVM-QP_inc s), the Adult and Web rows
TABLE6 = [
    ("web_100_100", 24692, 980, 453, 65, 1388),
    ("web_40_10", 24692, 1037, 568, 68, 1017),
    ("web_40_100", 24692, 1214, 313, 84, 1190),
    ("web_100_10", 24692, 679, 835, 40, 1101),
    ("adult_100_1", 16100, 97, 5996, 81, 372),
    ("adult_100_100", 16100, 871, 4823, 175, 5882),
    ("adult_200_1", 16100, 168, 5785, 85, 330),
    ("adult_200_100", 16100, 483, 5219, 140, 1819),
    ("adult_50_10", 16100, 615, 5143, 120, 2274),
]
QUICK = [("adult_100_1", 4000), ("web_100_10", 6000)]  # smaller subsets: no paper numbers
QUICK6 = [("adult_100_1", 2000)]  # --quick --tables 6: a small incremental run
# the last incremental model "is the batch optimum" within these
SAME_SV = 0.01
SAME_DUAL = 1e-6
GAMMA = {
    "inv": lambda s: 1.0 / s,
    "inv2": lambda s: 1.0 / (2 * s),
    "inv2sq": lambda s: 1.0 / (2 * s * s),
}


def parse(case: str) -> tuple[str, float, float]:
    data, sigma, C = case.split("_")
    return data, float(sigma), float(C)


def main() -> int:
    ap = c.base_parser(__doc__)
    ap.add_argument(
        "--tables",
        default="1,2",
        help="comma list of tables: 1, 2 (batch, beside SVMlight), 6 (incremental mode, "
        "beside batch); with --quick: 1 or 2 the two small subsets, 6 a small incremental run",
    )
    ap.add_argument(
        "--increments",
        default="",
        help="Table 6: comma list of K, the number of equal parts the rows arrive in "
        "(default 100, with --quick 4)",
    )
    ap.add_argument("--cases", default="", help="comma list of case names (default all)")
    ap.add_argument("--gamma-rule", choices=sorted(GAMMA), default="inv")
    ap.add_argument("--tol", type=float, default=1e-3, help="our --tol (the paper: 1e-6)")
    ap.add_argument("--cache-mb", type=float, default=256.0, help="ours and SVMlight's -m")
    ap.add_argument("--light-eps", action="store_true", help="also SVMlight -e 1e-6")
    ap.add_argument("--no-light", action="store_true", help="skip SVMlight")
    ap.add_argument(
        "--pricing",
        choices=("sprint", "shrinking"),
        default="sprint",
        help="our pricing (the paper's Table 3 compares sprint with shrinking)",
    )
    ap.add_argument(
        "--sprint-size",
        type=int,
        default=0,
        help="our --sprint-size, rows |I0'|+|Ic'| per major iteration (0: the solver's "
        "default; the paper's memory-saving mode, Table 4, used 100 with a 20 MB budget: "
        "--sprint-size 100 --cache-mb 20)",
    )
    args = ap.parse_args()
    tables = c.parse_choices(ap, args.tables, ("1", "2", "6"), "table")
    k_text = args.increments or ("4" if args.quick else "100")
    try:
        increments = [int(k) for k in k_text.split(",")]
    except ValueError:
        ap.error(f"--increments {args.increments!r}: give whole numbers separated by commas")
    if any(k < 2 for k in increments):
        ap.error(f"--increments {args.increments!r}: each K must be at least 2")
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="scheinberg2006-")) if args.quick else c.OUT_DEFAULT
    )
    light = None if args.no_light else c.comparator("SVMLIGHT_LEARN")
    machine = c.machine()
    cmdline = c.command_line("scheinberg2006.py", sys.argv[1:])
    print(f"# {cmdline}\n# {machine}", flush=True)
    if args.quick:
        todo = []
        if "1" in tables or "2" in tables:
            todo += [("quick", (name, n, None, None, None, None, None)) for name, n in QUICK]
        if "6" in tables:
            todo += [("quick6", (name, n, None, None, None, None)) for name, n in QUICK6]
    else:
        todo = []
        if "1" in tables:
            todo += [("1", r) for r in TABLE1]
        if "2" in tables:
            todo += [("2", r) for r in TABLE2]
        if "6" in tables:
            todo += [("6", r) for r in TABLE6]
    if args.cases:
        keep = set(args.cases.split(","))
        todo = [t for t in todo if t[1][0] in keep]
    cache: dict = {}
    results = []
    with c.Workdir("scheinberg2006") as wd:
        warm = False
        for table, row in todo:
            case, n_paper = row[0], row[1]
            data, sigma, C = parse(case)
            if data not in cache:
                lines, nf = c.read_lines(data)
                cache[data] = (lines, nf, c.nested_order(len(lines), args.seed))
            lines, nf, order = cache[data]
            n = min(n_paper, len(lines))
            text = wd.path / f"{data}-{n}.txt"
            store = wd.path / f"{data}-{n}.zarr"
            if not store.exists():
                c.write_subset(lines, order, n, text)
                c.ingest(text, store, nf)
            gamma = GAMMA[args.gamma_rule](sigma)
            if not warm:
                # numba's first call in a fresh checkout compiles for ~10 CPU s: one untimed
                # run on 500 rows, so that it is not charged to the first case
                wtext = c.write_subset(lines, order, 500, wd.path / "warm.txt")
                c.ingest(wtext, wd.path / "warm.zarr", nf)
                wp = {"kernel": "rbf", "gamma": gamma, "C": C, "pricing": args.pricing}
                c.train(wd.path / "warm.zarr", "active-set", wp, timeout=args.timeout)
                warm = True
            rec: dict = {"table": table, "case": case, "n": n, "gamma": gamma, "C": C, "paper": row}
            p = {"kernel": "rbf", "gamma": gamma, "C": C, "pricing": args.pricing, "tol": args.tol}
            p["cache_mb"] = args.cache_mb
            if args.sprint_size:
                p["sprint_size"] = args.sprint_size
            rec["ours"] = r = c.train(store, "active-set", p, timeout=args.timeout)
            if table in ("6", "quick6"):
                print(f"T{table} {case} n={n} batch: {_brief(r)}  load {c.loadavg()}", flush=True)
                rec["inc"] = {}
                for k in increments:
                    inc = incremental(wd.path, data, lines, order, n, nf, k, p, args.timeout)
                    inc.update(_same(inc, r))
                    rec["inc"][str(k)] = inc
                    print(
                        f"T{table} {case} n={n} K={k}: {_brief(inc)} ({inc['steps']} train "
                        f"calls, same optimum: {inc['same']})  load {c.loadavg()}",
                        flush=True,
                    )
                results.append(rec)
                _save(out, results, machine, cmdline, args)
                continue
            msg = (
                f"timeout {args.timeout:.0f}s"
                if "timeout" in r
                else f"n_s {r.get('n_s')} n_c {r.get('n_c')} cpu {r['cpu']:.1f}s"
            )
            print(
                f"T{table} {case} n={n} gamma={gamma:g}: ours {msg}  load {c.loadavg()}", flush=True
            )
            if light:
                for eps in ("0.001", "0.000001") if args.light_eps else ("0.001",):
                    la = ["-t", "2", "-g", repr(gamma), "-c", repr(C), "-e", eps]
                    la += ["-m", str(int(args.cache_mb))]
                    lr = c.run_svmlight(light, text, wd.path / "light.model", la, args.timeout)
                    rec[f"light_{eps}"] = lr
                    lm = (
                        f"timeout {args.timeout:.0f}s"
                        if "timeout" in lr
                        else f"n_s {lr.get('n_free')} n_c {lr.get('n_bound')} "
                        f"cpu {lr.get('reported_cpu', lr['cpu']):.1f}s"
                    )
                    print(f"   svmlight -e {eps}: {lm}", flush=True)
            results.append(rec)
            _save(out, results, machine, cmdline, args)
    md = report(results, machine + f"; load at the end {c.loadavg()}", cmdline, args)
    print(md)
    c.write_outputs(out, "scheinberg2006", md, {"machine": machine, "results": results})
    return 0


def _save(out: Path, results: list[dict], machine: str, cmdline: str, args) -> None:
    """The tables so far, after every case, so that a run cut short keeps what it measured."""
    partial = report(results, machine + f"; partial run, load now {c.loadavg()}", cmdline, args)
    c.write_outputs(out, "scheinberg2006", partial, {"machine": machine, "results": results})


def _brief(r: dict) -> str:
    if "timeout" in r:
        return f"timeout {r['timeout']:.0f}s" + (f" at step {r['step']}" if "step" in r else "")
    return f"n_s {r.get('n_s')} n_c {r.get('n_c')} cpu {r['cpu']:.1f}s"


def incremental(
    work: Path,
    data: str,
    lines: list[bytes],
    order: list[int],
    n: int,
    nf: int,
    k: int,
    params: dict,
    timeout: float,
) -> dict:
    """Table 6's incremental mode: the first n/k rows of ``order`` trained cold, then k-1
    times the next n/k rows appended to the store and trained warm from the last model.

    Returns the last train call's result with ``cpu``/``wall`` summed over all ``steps``
    calls (each timed inside its child, around the train call: no interpreter start, store
    opening, ingest or model writing), ``ingest_wall`` (the appends' wall seconds, not in
    ``cpu``), ``passes``/``iterations`` summed, ``batch_rows`` (n/k) and ``commands``
    (the first two train commands, the scratch folder written ``WORK``);
    ``{"timeout": s, "step": i}`` when a call ran out of its ``timeout`` CPU seconds.
    """
    store = work / f"{data}-{n}-inc{k}.zarr"
    sizes = [round(n * (i + 1) / k) for i in range(k)]
    tot = {"cpu": 0.0, "wall": 0.0, "passes": 0, "iterations": 0, "ingest_wall": 0.0}
    commands: list[str] = []
    prev_model: Path | None = None
    start = 0
    r: dict = {}
    for i, size in enumerate(sizes):
        text = c.write_subset(lines, order[start:], size - start, work / "inc.txt")
        t0 = time.perf_counter()
        c.ingest(text, store, nf, append=i > 0)
        tot["ingest_wall"] += time.perf_counter() - t0
        model = work / f"inc{k}-m{i}"
        p = dict(params)
        if prev_model is not None:
            p["init"] = str(prev_model)
        r = c.train(store, "active-set", p, timeout=timeout, save=model)
        if len(commands) < 2:
            commands.append(r["command"].replace(str(work), "WORK"))
        if "timeout" in r:
            shutil.rmtree(store, ignore_errors=True)
            return {**r, "step": i + 1, "cpu_before": tot["cpu"], "batch_rows": sizes[0]}
        if not r.get("converged"):
            raise RuntimeError(f"incremental step {i + 1} of {k} did not converge: {r}")
        for key in ("cpu", "wall", "passes", "iterations"):
            tot[key] += r.get(key) or 0
        if prev_model is not None:
            shutil.rmtree(prev_model, ignore_errors=True)
        prev_model, start = model, size
    shutil.rmtree(store, ignore_errors=True)
    if prev_model is not None:
        shutil.rmtree(prev_model, ignore_errors=True)
    return {
        **r,
        **tot,
        "last_cpu": r["cpu"],
        "steps": len(sizes),
        "batch_rows": sizes[0],
        "commands": commands,
    }


def _same(inc: dict, batch: dict) -> dict:
    """Whether the incremental run's last model is the batch optimum: n_s, n_c within 1%
    (``SAME_SV``) and the dual objective within ``SAME_DUAL`` relative."""
    if "timeout" in inc or "timeout" in batch:
        return {"same": None}
    d_inc, d_bat = inc.get("dual_objective"), batch.get("dual_objective")
    rel = abs(d_inc - d_bat) / max(abs(d_bat), 1e-300) if d_inc is not None and d_bat else None
    sv_ok = all(
        abs(inc[key] - batch[key]) <= SAME_SV * max(batch[key], 1) for key in ("n_s", "n_c")
    )
    return {"dual_rel_diff": rel, "same": bool(sv_ok and rel is not None and rel <= SAME_DUAL)}


def _cpu(r: dict | None) -> float | None:
    if not r or "timeout" in r:
        return None
    return r.get("reported_cpu", r.get("cpu"))


def _cpu_or_limit(r: dict | None) -> float | str | None:
    """CPU seconds, or ">T" for a run that ran out of its T CPU seconds."""
    if r and "timeout" in r:
        return f">{r['timeout']:.0f}"
    return _cpu(r)


def _light_ratio(lt: dict | None, o: dict) -> float | str | None:
    """SVMlight / ours; a lower bound ">x" when SVMlight ran out of time and ours did not."""
    if lt and "timeout" in lt and _cpu(o):
        return f">{lt['timeout'] / _cpu(o):.2f}"
    return c.ratio(_cpu(lt), _cpu(o))


def report(results: list[dict], machine: str, cmdline: str, args) -> str:
    md = [
        f"Run: `{cmdline}` — {machine}. Our tol {args.tol:g}; gamma rule `{args.gamma_rule}`; "
        f"pricing {args.pricing}; cache {args.cache_mb:g} MB"
        + (f"; sprint size {args.sprint_size}." if args.sprint_size else "."),
        "",
    ]
    for table in ("quick", "1", "2"):
        rs = [r for r in results if r["table"] == table]
        if not rs:
            continue
        md += [f"#### Table {table}" if table != "quick" else "#### quick subsets", ""]
        rows = []
        for r in rs:
            p, o = r["paper"], r["ours"]
            lt, le = r.get("light_0.001"), r.get("light_0.000001")
            ns, nc = o.get("n_s"), o.get("n_c")
            rows.append(
                [
                    r["case"],
                    r["n"],
                    f"{r['gamma']:g}",
                    p[2],
                    ns,
                    c.ratio(ns, p[2]),
                    p[3],
                    nc,
                    c.ratio(nc, p[3]),
                    lt.get("n_free") if lt else None,
                    lt.get("n_bound") if lt else None,
                    p[4],
                    p[5],
                    p[6],
                    _cpu_or_limit(lt),
                    _cpu_or_limit(le),
                    _cpu_or_limit(o),
                    c.ratio(p[4] or p[5], p[6]),
                    _light_ratio(lt, o),
                ]
            )
        md.append(
            c.md_table(
                [
                    "case",
                    "n",
                    "gamma",
                    "paper n_s",
                    "our n_s",
                    "ratio",
                    "paper n_c",
                    "our n_c",
                    "ratio",
                    "light n_s",
                    "light n_c",
                    "paper light s",
                    "paper light_e s",
                    "paper SVM-QP s",
                    "light CPU s",
                    "light_e CPU s",
                    "our CPU s",
                    "paper light/QP",
                    "our light/ours",
                ],
                rows,
            )
        )
        md.append("")
    md += report6(results)
    return "\n".join(md)


def report6(results: list[dict]) -> list[str]:
    """Table 6: batch beside incremental, one row per case and K."""
    md: list[str] = []
    for table in ("quick6", "6"):
        rs = [r for r in results if r["table"] == table]
        if not rs:
            continue
        md += ["#### Table 6 (incremental mode)" if table == "6" else "#### quick incremental", ""]
        rows = []
        for r in rs:
            p, b = r["paper"], r["ours"]
            for k, inc in r["inc"].items():
                rows.append(
                    [
                        r["case"],
                        r["n"],
                        int(k),
                        inc.get("batch_rows"),
                        p[2],
                        p[3],
                        b.get("n_s"),
                        b.get("n_c"),
                        inc.get("n_s"),
                        inc.get("n_c"),
                        inc.get("dual_rel_diff"),
                        {True: "yes", False: "NO"}.get(inc.get("same")),  # type: ignore[arg-type]
                        p[4],
                        p[5],
                        c.ratio(p[5], p[4]),
                        _cpu_or_limit(b),
                        f">{inc['cpu_before']:.0f} (step {inc['step']} >{inc['timeout']:.0f})"
                        if "timeout" in inc
                        else inc["cpu"],
                        c.ratio(_cpu(inc), _cpu(b)),
                        inc.get("passes"),
                    ]
                )
        md.append(
            c.md_table(
                [
                    "case",
                    "n",
                    "K",
                    "rows per step",
                    "paper n_s",
                    "paper n_c",
                    "batch n_s",
                    "batch n_c",
                    "inc n_s",
                    "inc n_c",
                    "dual rel. diff",
                    "same optimum",
                    "paper SVM-QP s",
                    "paper SVM-QP_inc s",
                    "paper inc/batch",
                    "our batch CPU s",
                    "our inc CPU s (sum)",
                    "our inc/batch",
                    "inc passes (sum)",
                ],
                rows,
            )
        )
        md.append("")
    return md


if __name__ == "__main__":
    raise SystemExit(main())
