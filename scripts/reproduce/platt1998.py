#!/usr/bin/env python
"""Reproduce Platt 1998 (SMO), section 3.1-3.2: the Adult and Web tables.

For each of the paper's four real-data experiments (Adult linear C=0.05, Adult Gaussian C=1,
Web linear C=1, Web Gaussian C=5; "variance 10" is exp(-|x-y|^2 / (2*10)), so gamma=0.05)
the script trains on nested random subsets of the paper's sizes (a9a = Adult, w8a = Web):

- ``smo-platt``: ``--solver smo --selection platt`` (Platt's heuristics as written);
- ``smo-wss2``: ``--solver smo`` (LIBSVM's WSS2 selection, the default);
- ``chunking``: the plain chunking baseline of ``chunking.py`` (exact inner QP), the paper's
  comparator; it stops with "N/A" when its matrix would exceed ``--chunk-memory-mb``.

and prints, beside the paper's numbers, the non-bound and bound support-vector counts, the
CPU seconds of each run and the exponent of a least-squares fit of log time on log n.
A solver that runs out of ``--timeout`` at one size is not run at larger sizes.

Usage::

    python scripts/reproduce/platt1998.py --quick          # <= 5 min on 2 cores
    python scripts/reproduce/platt1998.py [--max-n 11221] [--experiments adult-linear,...]

Writes OUT/platt1998.md, OUT/platt1998.json and OUT/platt1998-*.png (OUT: docs/reproduction
by default; --quick: a temporary folder unless --out is given).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

# The paper's tables (Platt 1998, section 3.1 and 3.2), typed from the text:
# (n, SMO CPU s, chunking CPU s or None for "N/A", non-bound SVs, bound SVs).
PAPER = {
    "adult-linear": {
        "data": "adult",
        "params": {"kernel": "linear", "C": 0.05},
        "exp": (1.9, 3.1),
        "rows": [
            (1605, 0.4, 37.1, 42, 633),
            (2265, 0.9, 228.3, 47, 930),
            (3185, 1.8, 596.2, 57, 1210),
            (4781, 3.6, 1954.2, 63, 1791),
            (6414, 5.5, 3684.6, 61, 2370),
            (11221, 17.0, 20711.3, 79, 4079),
            (16101, 35.3, None, 67, 5854),
            (22697, 85.7, None, 88, 8209),
            (32562, 163.6, None, 149, 11558),
        ],
    },
    "adult-rbf": {
        "data": "adult",
        "params": {"kernel": "rbf", "gamma": 0.05, "C": 1.0},
        "exp": (2.1, 2.9),
        "rows": [
            (1605, 15.8, 34.8, 106, 585),
            (2265, 32.1, 144.7, 165, 845),
            (3185, 66.2, 380.5, 181, 1115),
            (4781, 146.6, 1137.2, 238, 1650),
            (6414, 258.8, 2530.6, 298, 2181),
            (11221, 781.4, 11910.6, 460, 3746),
            (16101, 1784.4, None, 567, 5371),
            (22697, 4126.4, None, 813, 7526),
            (32562, 7749.6, None, 1011, 10663),
        ],
    },
    "web-linear": {
        "data": "web",
        "params": {"kernel": "linear", "C": 1.0},
        "exp": (1.6, 2.5),
        "rows": [
            (2477, 2.2, 13.1, 123, 47),
            (3470, 4.9, 16.1, 147, 72),
            (4912, 8.1, 40.6, 169, 107),
            (7366, 12.7, 140.7, 194, 166),
            (9888, 24.7, 239.3, 214, 245),
            (17188, 65.4, 1633.3, 252, 480),
            (24692, 104.9, 3369.7, 273, 698),
            (49749, 268.3, 17164.7, 315, 1408),
        ],
    },
    "web-rbf": {
        "data": "web",
        "params": {"kernel": "rbf", "gamma": 0.05, "C": 5.0},
        "exp": (1.7, 2.0),
        "rows": [
            (2477, 26.3, 64.9, 439, 43),
            (3470, 44.1, 110.4, 544, 66),
            (4912, 83.6, 372.5, 616, 90),
            (7366, 156.7, 545.4, 914, 125),
            (9888, 248.1, 907.6, 1118, 172),
            (17188, 581.0, 3317.9, 1780, 316),
            (24692, 1214.0, 6659.7, 2300, 419),
            (49749, 3863.5, 23877.6, 3720, 764),
        ],
    },
}
QUICK_SIZES = 3  # the first three sizes of each table in --quick mode
SOLVERS = ("smo-platt", "smo-wss2", "chunking")


def run_chunking(text: Path, nf: int, params: dict, timeout: float, memory_mb: float) -> dict:
    import json

    cmd = [sys.executable, str(Path(__file__).with_name("chunking.py")), str(text)]
    cmd += ["--n-features", str(nf), "--C", str(params["C"]), "--kernel", params["kernel"]]
    cmd += ["--gamma", str(params.get("gamma", 0.05)), "--memory-mb", str(memory_mb)]
    out, wall, cpu = c.timed(cmd, timeout)
    if out is None:
        return {"timeout": timeout}
    if out.returncode != 0:
        raise RuntimeError(f"chunking failed: {out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_cpu"] = cpu
    res["command"] = "python scripts/reproduce/chunking.py " + " ".join(cmd[3:])
    return res


def experiment(name: str, args, work: Path, lines_cache: dict, done: list[dict], save) -> dict:
    spec = PAPER[name]
    if spec["data"] not in lines_cache:
        lines_cache[spec["data"]] = c.read_lines(spec["data"])
    lines, nf = lines_cache[spec["data"]]
    order = c.nested_order(len(lines), args.seed)
    rows = spec["rows"][:QUICK_SIZES] if args.quick else spec["rows"]
    rows = [r for r in rows if r[0] <= args.max_n]
    if args.only_n:
        rows = [r for r in rows if r[0] in args.only_n]
    solvers = [s for s in SOLVERS if s in args.solvers]
    dead: set[str] = set()
    runs = []
    warm = False
    for n_paper, *_ in rows:
        n = min(n_paper, len(lines))
        text = c.write_subset(lines, order, n, work / f"{name}-{n}.txt")
        store = work / f"{name}-{n}.zarr"
        c.ingest(text, store, nf)
        if not warm:
            # one untimed run of each SMO variant on 500 rows first: numba's first call in
            # a fresh checkout compiles (10+ CPU s), which is not the solver's cost
            wtext = c.write_subset(lines, order, 500, work / f"{name}-warm.txt")
            c.ingest(wtext, work / f"{name}-warm.zarr", nf)
            for s in solvers:
                if s != "chunking":
                    p = dict(spec["params"], selection=s.split("-")[1], tol=1e-3)
                    c.train(work / f"{name}-warm.zarr", "smo", p, timeout=args.timeout)
            warm = True
        rec: dict = {"n": n, "n_paper": n_paper, "load": c.loadavg()}
        for s in solvers:
            if s in dead:
                rec[s] = {"skipped": "timed out at a smaller size"}
                continue
            if s == "chunking":
                r = run_chunking(text, nf, spec["params"], args.timeout, args.chunk_memory_mb)
            else:
                p = dict(spec["params"], selection=s.split("-")[1], tol=1e-3)
                r = c.train(store, "smo", p, timeout=args.timeout)
                if "timeout" not in r:
                    r["n_bound"] = r.get("n_bound_sv")
                    r["n_free"] = r["n_sv"] - r["n_bound_sv"]
            if "timeout" in r:
                dead.add(s)
            rec[s] = r
            print(
                f"{name} n={n} {s}: "
                + (
                    f"timeout {args.timeout:.0f}s"
                    if "timeout" in r
                    else "N/A (matrix too large)"
                    if r.get("too_large")
                    else f"free {r['n_free']} bound {r['n_bound']} cpu {r['cpu']:.2f}s"
                )
                + f"  load {c.loadavg()}",
                flush=True,
            )
        runs.append(rec)
        save([*done, {"name": name, "params": spec["params"], "runs": runs}], final=False)
        c.shutil.rmtree(store, ignore_errors=True)
    return {"name": name, "params": spec["params"], "runs": runs}


def _cpu(r: dict | None) -> float | None:
    if not r or "cpu" not in r:
        return None
    return r["cpu"]


def report(results: list[dict], out: Path, machine: str, cmdline: str, stem: str) -> str:
    md = [f"Run: `{cmdline}` — {machine}.", ""]
    for res in results:
        name, spec = res["name"], PAPER[res["name"]]
        paper = {r[0]: r for r in spec["rows"]}
        md += [f"#### {name} ({', '.join(f'{k}={v}' for k, v in spec['params'].items())})", ""]
        rows = []
        series: dict[str, tuple[list[float], list[float]]] = {}
        for s in ("paper SMO", "paper chunking", *SOLVERS):
            series[s] = ([], [])
        for rec in res["runs"]:
            p = paper[rec["n_paper"]]
            w, pl, ch = rec.get("smo-wss2"), rec.get("smo-platt"), rec.get("chunking")

            def sv(r: dict | None, key: str):
                return r.get(key) if r and "n_free" in r else None

            rows.append(
                [
                    rec["n"],
                    p[3],
                    sv(pl, "n_free"),
                    sv(w, "n_free"),
                    p[4],
                    sv(pl, "n_bound"),
                    sv(w, "n_bound"),
                    c.ratio(sv(pl, "n_free"), p[3]),
                    c.ratio(sv(pl, "n_bound"), p[4]),
                    p[1],
                    _cpu(pl) if not (pl and "timeout" in pl) else f">{pl['timeout']:.0f}",
                    _cpu(w) if not (w and "timeout" in w) else f">{w['timeout']:.0f}",
                    p[2],
                    _cpu(ch)
                    if ch and "cpu" in ch
                    else (
                        "N/A"
                        if ch and ch.get("too_large")
                        else f">{ch['timeout']:.0f}"
                        if ch and "timeout" in ch
                        else None
                    ),
                    sv(ch, "n_free"),
                    sv(ch, "n_bound"),
                ]
            )
            series["paper SMO"][0].append(p[0])
            series["paper SMO"][1].append(p[1])
            if p[2]:
                series["paper chunking"][0].append(p[0])
                series["paper chunking"][1].append(p[2])
            for s, r in (("smo-platt", pl), ("smo-wss2", w), ("chunking", ch)):
                if _cpu(r):
                    series[s][0].append(rec["n"])
                    series[s][1].append(_cpu(r))
        md.append(
            c.md_table(
                [
                    "n",
                    "paper free",
                    "platt free",
                    "wss2 free",
                    "paper bound",
                    "platt bound",
                    "wss2 bound",
                    "free ratio",
                    "bound ratio",
                    "paper SMO s",
                    "platt CPU s",
                    "wss2 CPU s",
                    "paper chunk s",
                    "chunk CPU s",
                    "chunk free",
                    "chunk bound",
                ],
                rows,
            )
        )
        exps = {k: c.fit_exponent(*v) for k, v in series.items()}
        full_smo = c.fit_exponent([r[0] for r in spec["rows"]], [r[1] for r in spec["rows"]])
        ch_rows = [r for r in spec["rows"] if r[2]]
        full_ch = c.fit_exponent([r[0] for r in ch_rows], [r[2] for r in ch_rows])
        # the paper's exponents are over its full table; ours over the sizes run
        md += [
            "",
            f"Fitted exponent of CPU time vs n: paper text SMO ~n^{spec['exp'][0]} (fit to its "
            f"whole table: {_fmt(full_smo)}), chunking ~n^{spec['exp'][1]} (its table: "
            f"{_fmt(full_ch)}); ours over the sizes run: smo-platt "
            f"{_fmt(exps['smo-platt'])}, smo-wss2 {_fmt(exps['smo-wss2'])}, chunking "
            f"{_fmt(exps['chunking'])}. Paper's table over the same sizes: SMO "
            f"{_fmt(_same(series['paper SMO'], series['smo-platt']))}, chunking "
            f"{_fmt(_same(series['paper chunking'], series['chunking']))}."
            + _tail_sentence(series),
            "",
            f"![{name}]({stem}-{name}.png)"
            if stem.startswith("platt1998-full")
            else f"![{name}](platt1998-{name}.png)",
            "",
        ]
        res["exponents"] = exps
        c.plot_loglog(
            series,
            out
            / (
                f"{stem}-{name}.png"
                if stem.startswith("platt1998-full")
                else f"platt1998-{name}.png"
            ),
            f"Platt 1998 {name}: CPU time vs n",
            "CPU seconds",
        )
    return "\n".join(md)


def _same(paper: tuple[list[float], list[float]], ours: tuple[list[float], list[float]]):
    """The paper's exponent restricted to the sizes we ran (to compare like with like)."""
    keep = [i for i, n in enumerate(paper[0]) if any(abs(n - m) <= 1 for m in ours[0])]
    return c.fit_exponent([paper[0][i] for i in keep], [paper[1][i] for i in keep])


def _tail(xy: tuple[list[float], list[float]], k: int = 4) -> tuple[list[float], list[float]]:
    return (xy[0][-k:], xy[1][-k:])


def _tail_sentence(series: dict) -> str:
    """The exponents over the four largest sizes each solver ran (less fixed cost in them)."""
    parts = []
    for s in SOLVERS:
        xy = series[s]
        if len(xy[0]) > 4:
            paper = "paper chunking" if s == "chunking" else "paper SMO"
            parts.append(
                f"{s} {_fmt(c.fit_exponent(*_tail(xy)))} (paper's table, same sizes: "
                f"{_fmt(_same(series[paper], _tail(xy)))})"
            )
    return " Over the four largest sizes each ran: " + ", ".join(parts) + "." if parts else ""


def _fmt(e: float | None) -> str:
    return "–" if e is None else f"{e:.2f}"


def main() -> int:
    ap = c.base_parser(__doc__)
    ap.add_argument("--experiments", default=",".join(PAPER), help="comma list of experiments")
    ap.add_argument(
        "--solvers", default=",".join(SOLVERS), help="comma list of " + ",".join(SOLVERS)
    )
    ap.add_argument("--max-n", type=int, default=10**9, help="largest subset size to run")
    ap.add_argument("--chunk-memory-mb", type=float, default=1024.0)
    ap.add_argument("--only-n", default="", help="comma list: run only these paper sizes")
    ap.add_argument(
        "--stem", default="", help="name of the output files (default from --experiments)"
    )
    ap.add_argument("--render", type=Path, default=None, help="redo the tables from a JSON file")
    args = ap.parse_args()
    if args.render:
        import json

        raw = json.loads(args.render.read_text())
        out = args.out or args.render.parent
        stem = args.stem or args.render.stem
        md = report(
            raw["results"], out, raw["machine"] + raw.get("tail", ""), raw.get("cmdline", "?"), stem
        )
        c.write_outputs(out, stem, md, raw)
        return 0
    args.solvers = args.solvers.split(",")
    args.only_n = {int(v) for v in args.only_n.split(",") if v}
    names = args.experiments.split(",")
    for nm in names:
        if nm not in PAPER:
            ap.error(f"unknown experiment {nm!r}: choose from {', '.join(PAPER)}")
    out = args.out or (Path(tempfile.mkdtemp(prefix="platt1998-")) if args.quick else c.OUT_DEFAULT)
    machine = c.machine()
    cmdline = c.command_line("platt1998.py", sys.argv[1:])
    print(f"# {cmdline}\n# {machine}", flush=True)
    lines_cache: dict = {}
    with c.Workdir("platt1998") as wd:
        stem = args.stem or (
            "platt1998" if len(names) == len(PAPER) else "platt1998-" + "-".join(names)
        )

        def save(results: list[dict], final: bool) -> None:
            """Write the tables so far (after every size: a cut-short run keeps its results)."""
            tail = "; load at the end" if final else "; partial run, load now"
            md = report(results, out, machine + f"{tail} {c.loadavg()}", cmdline, stem)
            if final:
                print(md)
            raw = {"machine": machine, "results": results, "cmdline": cmdline}
            raw["tail"] = f"{tail} {c.loadavg()}"
            c.write_outputs(out, stem, md, raw)

        results: list[dict] = []
        for nm in names:
            results.append(experiment(nm, args, wd.path, lines_cache, results, save))
        save(results, final=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
