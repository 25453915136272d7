#!/usr/bin/env python
"""Reproduce Joachims 2006 (SVM-Perf, the cutting-plane algorithm), section 4.

C is the paper's (OP2: min 1/2 |w|^2 + C/n sum xi), i.e. LIBLINEAR's C times n; ours gets it
as ``--c-perf C/100`` (SVMperf's unit), SVMperf 3.00 as ``-c C/100`` and SVMlight as
``-c C/n``. Every run stops at the paper's epsilon = 0.001 unless said otherwise.

1. Time vs n (the paper's Figure 1, left and left middle: ~n^0.8 for SVM-Perf, ~n^1.7 for
   SVMlight) on the RCV1-like ``ooc-svm synth`` data (nested prefixes of one generated file;
   synth rows are i.i.d.), for ``--variant paper`` and the default (``accelerated``) and the
   comparators ``$SVMPERF_LEARN`` / ``$SVMLIGHT_LEARN`` (skipped with a message when unset;
   SVMlight only up to ``--light-max-n``). Iterations vs n (Figure 2: independent of n).
2. Ordinal regression / ROC area (Figure 1 right: O(s n log n)): ``--loss roc`` on the same
   subsets (binary labels as two ranks, as the paper does).
3. Iterations and time vs epsilon (Figures 5-6: ~(1/eps)^0.3 iterations, ~(1/eps)^0.4 time)
   and vs C (Figure 8: sublinear) on Adult (a9a).
4. The paper's Adult (C = 0.05 n: 3.1 CPU s) and Web (C = 1 n: 7.6 CPU s) runs.
5. Iterations and time vs epsilon (Figures 5-6) on the synth data at the largest ``--sizes``
   (with ``--like``: on that stand-in at the paper's C), where a run is the solver's work,
   not the fixed cost of a call that Adult's size leaves.

``--like ccat|c11|arxiv|covertype|kdd04`` gives parts 1-2 a *stand-in* shaped like one of
Table 1's data sets (its number of features and non-zeros per row, from the paper's N and
sparsity s; the paper's C for that task unless ``--c-synth`` is given; for the two Reuters
tasks also a class balance, which the paper does not give: see ``LIKE``): the same
``ooc-svm synth`` generator, not the paper's data, so each table says "stand-in". The
paper's Table 1 row (its n, SVM-Perf and SVMlight CPU seconds) is printed beside it.

Usage::

    python scripts/reproduce/joachims2006.py --quick      # <= 5 min on 2 cores
    python scripts/reproduce/joachims2006.py [--sizes 10000,20000,...] [--parts 1,2,3,4]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

SYNTH = {"features": 20000, "nnz_per_row": 40, "seed": 1}
FULL_SIZES = [5000, 10000, 20000, 50000, 100000, 200000]
QUICK_SIZES = [5000, 20000]
PAPER_EXP = {"SVM-Perf": 0.8, "SVMlight": 1.7}
# Table 1 (Joachims 2006): n, features N, sparsity s, the paper's C, and its CPU seconds
# (SVM-Perf classification, SVMlight classification, SVM-Perf ordinal regression); "pos"
# and "noise", where given, are synth's --positive-fraction (before noise) and --noise.
# The paper calls CCAT "almost balanced" and C11 "unbalanced" without figures. CCAT: 381,327
# of RCV1-v2's 804,414 documents (scikit-learn's fetch_rcv1 documentation) = 0.474. C11
# (Strategy/Plans) is a small category of a few per cent of RCV1-v2 (Lewis et al., JMLR 5,
# 2004, appendix topic counts: about 24,000 documents, not re-checked against a copy here):
# 0.03, with 1 % label noise, since synth's default 5 % of flipped labels alone would make
# 5 % of the rows positive.
LIKE = {
    "ccat": {
        "n": 804414,
        "features": 47236,
        "s": 0.0016,
        "C": 10000.0,
        "t": (149.7, 20075.5, 304.1),
        "pos": 0.474,
    },
    "c11": {
        "n": 804414,
        "features": 47236,
        "s": 0.0016,
        "C": 50000.0,
        "t": (178.9, 5187.4, 499.1),
        "pos": 0.03,
        "noise": 0.01,
    },
    "arxiv": {"n": 62369, "features": 99757, "s": 0.0008, "C": 20000.0, "t": (16.9, 80.1, 26.1)},
    "covertype": {
        "n": 522911,
        "features": 54,
        "s": 0.2222,
        "C": 1000000.0,
        "t": (171.7, 25514.3, 1109.1),
    },
    "kdd04": {"n": 150000, "features": 78, "s": 0.3842, "C": 20000.0, "t": (31.9, 1040.2, 132.5)},
}
ADULT_WEB = [("adult", 0.05, 3.1), ("web", 1.0, 7.6)]  # (data, C/n, paper CPU s)


def synth_text(path: Path, rows: int) -> None:
    cmd = [*c.ooc_svm_exe(), "-q", "synth", str(path), "--rows", str(rows)]
    cmd += ["--features", str(SYNTH["features"]), "--nnz-per-row", str(SYNTH["nnz_per_row"])]
    cmd += ["--seed", str(SYNTH["seed"])]
    if "positive_fraction" in SYNTH:
        cmd += ["--positive-fraction", str(SYNTH["positive_fraction"])]
    if "noise" in SYNTH:
        cmd += ["--noise", str(SYNTH["noise"])]
    out = c.subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)


def perf_runs(
    store: Path,
    text: Path,
    n: int,
    C: float,
    args,
    work: Path,
    loss: str = "error",
    eps: float = 0.001,
    light_ok: bool = True,
    light_any_n: bool = False,
) -> dict:
    """Ours (paper, accelerated) and the comparators on one store; C in the paper's units."""
    rec: dict = {"n": n, "C": C, "eps": eps, "load": c.loadavg()}
    for variant in ("paper", "accelerated"):
        p = {"variant": variant, "c_perf": C / 100.0, "eps": eps, "loss": loss}
        rec[variant] = c.train(store, "perf", p, timeout=args.timeout)
    if args.perf_exe:
        la = ["-c", repr(C / 100.0), "-e", repr(eps * 100)]
        if loss == "roc":
            la += ["-l", "10", "-w", "3"]  # ROC area needs algorithm 3
        rec["svmperf"] = c.run_svmlight(args.perf_exe, text, work / "perf.model", la, args.timeout)
    if args.light_exe and light_ok and loss == "error" and (light_any_n or n <= args.light_max_n):
        la = ["-c", repr(C / n), "-m", "256"]
        rec["svmlight"] = c.run_svmlight(
            args.light_exe, text, work / "light.model", la, args.timeout
        )
    return rec


def _cpu(r: dict | None):
    if not r or "timeout" in r:
        return None
    return r.get("reported_cpu", r.get("cpu"))


def _it(r: dict | None):
    if not r or "timeout" in r:
        return None
    return r.get("iterations")


def _line(tag: str, rec: dict) -> None:
    parts = [
        f"{k} {_cpu(rec.get(k)) and round(_cpu(rec.get(k)), 2)}s it {_it(rec.get(k))}"
        for k in ("paper", "accelerated", "svmperf", "svmlight")
        if k in rec
    ]
    print(f"{tag}: " + "; ".join(parts) + f"  load {c.loadavg()}", flush=True)


NAMES = {
    "paper": "ours paper",
    "accelerated": "ours accelerated",
    "svmperf": "SVMperf 3.00",
    "svmlight": "SVMlight 6.20",
}


def scaling_table(recs: list[dict], title: str, out: Path, png: str, md: list[str]) -> dict:
    keys = [k for k in NAMES if any(k in r for r in recs)]
    rows = []
    series = {}
    for k in keys:
        xs = [r["n"] for r in recs if _cpu(r.get(k))]
        series[NAMES[k]] = (xs, [_cpu(r[k]) for r in recs if _cpu(r.get(k))])
    for r in recs:
        row = [r["n"]]
        for k in keys:
            v = r.get(k)
            row += [
                _cpu(v) if v and "timeout" not in v else (f">{v['timeout']:.0f}" if v else None),
                _it(v),
            ]
        rows.append(row)
    hdr = ["n"]
    for k in keys:
        hdr += [f"{NAMES[k]} CPU s", "iter"]
    md += [f"#### {title}", "", c.md_table(hdr, rows), ""]
    exps = {name: c.fit_exponent(*xy) for name, xy in series.items()}
    it_exps = {
        NAMES[k]: c.fit_exponent(
            [r["n"] for r in recs if _it(r.get(k))], [_it(r[k]) for r in recs if _it(r.get(k))]
        )
        for k in keys
    }
    # over the three largest sizes each ran: less of the fixed per-call cost in the slope
    tail = {
        name: c.fit_exponent(xy[0][-3:], xy[1][-3:]) if len(xy[0]) > 3 else None
        for name, xy in series.items()
    }
    md.append(
        "Fitted exponents (log-log least squares over the sizes run): time "
        + ", ".join(f"{k} {_f(v)}" for k, v in exps.items())
        + "; iterations "
        + ", ".join(f"{k} {_f(v)}" for k, v in it_exps.items())
        + "; time over the three largest sizes each ran: "
        + ", ".join(f"{k} {_f(v)}" for k, v in tail.items() if v is not None)
        + "."
    )
    md += ["", f"![{title}]({png})", ""]
    c.plot_loglog(series, out / png, title, "CPU seconds")
    return {"time": exps, "iterations": it_exps, "time_three_largest": tail}


def _f(v):
    return "–" if v is None else f"{v:.2f}"


def sweep_table(recs: list[dict], key: str, title: str, md: list[str]) -> dict:
    light = any("svmlight" in r for r in recs)  # Figure 9's right half: SVMlight vs C
    rows = [
        [
            r[key],
            _cpu(r.get("paper")),
            _it(r.get("paper")),
            _cpu(r.get("accelerated")),
            _it(r.get("accelerated")),
            _cpu(r.get("svmperf")),
            _it(r.get("svmperf")),
        ]
        + ([_cell(r.get("svmlight"))] if light else [])
        for r in recs
    ]
    md += [
        f"#### {title}",
        "",
        c.md_table(
            [
                key,
                "ours paper CPU s",
                "iter",
                "ours accelerated CPU s",
                "iter",
                "SVMperf CPU s",
                "iter",
            ]
            + (["SVMlight 6.20 CPU s"] if light else []),
            rows,
        ),
        "",
    ]
    xs = [r[key] if key == "C" else 1.0 / r[key] for r in recs]
    res = {}
    for k in ("paper", "accelerated", "svmperf"):
        pts = [
            (x, _it(r.get(k)), _cpu(r.get(k)))
            for x, r in zip(xs, recs, strict=True)
            if _it(r.get(k))
        ]
        if len(pts) >= 2:
            res[k] = (
                c.fit_exponent([p[0] for p in pts], [p[1] for p in pts]),
                c.fit_exponent([p[0] for p in pts], [p[2] for p in pts]),
            )
    var = "C" if key == "C" else "1/eps"
    md.append(
        f"Fitted exponents against {var} (iterations, time): "
        + ", ".join(f"{NAMES[k]} {_f(a)}, {_f(b)}" for k, (a, b) in res.items())
        + "."
    )
    md.append("")
    if light:
        pts = [(r[key], _cpu(r.get("svmlight"))) for r in recs if _cpu(r.get("svmlight"))]
        if len(pts) >= 2:
            res["svmlight"] = (None, c.fit_exponent([p[0] for p in pts], [p[1] for p in pts]))
    return res


def eps_sweep(
    store: Path, text: Path, n: int, C: float, args, work: Path, md: list[str],
    eps_list: list[float], tag: str, what: str,
) -> tuple[list[dict], dict]:  # fmt: skip
    """Figures 5-6: ours and SVMperf at each epsilon on one store (C in the paper's units);
    the runs and their fitted exponents, the table appended to ``md``."""
    recs = [perf_runs(store, text, n, C, args, work, eps=e, light_ok=False) for e in eps_list]
    for r in recs:
        _line(f"{tag} eps={r['eps']}", r)
    exp = sweep_table(recs, "eps", f"Iterations and time vs eps, {what}", md)
    md.insert(-2, "Paper: iterations ~(1/eps)^0.3, time ~(1/eps)^0.4.")
    return recs, exp


def _cell(r: dict | None):
    """CPU seconds, ``>T`` when the run ran out of its CPU limit, None when not run."""
    if not r:
        return None
    return f">{r['timeout']:.0f}" if "timeout" in r else _cpu(r)


def save(md: list[str], raw: dict, machine: str, out: Path, stem: str) -> None:
    """Write the tables so far (a run cut short keeps the parts it finished)."""
    text = "\n".join(md).replace("{machine}", machine + f"; partial run, load now {c.loadavg()}")
    c.write_outputs(out, stem, text, raw)


def main() -> int:
    ap = c.base_parser(__doc__)
    ap.add_argument("--sizes", default="", help="comma list of synth sizes")
    ap.add_argument("--parts", default="1,2,3,4", help="which parts to run (see above)")
    ap.add_argument("--c-synth", type=float, default=1000.0, help="the paper's C for synth")
    ap.add_argument("--light-max-n", type=int, default=20000, help="largest n given to SVMlight")
    ap.add_argument("--stem", default="joachims2006", help="name of the output files")
    ap.add_argument(
        "--light-c-sweep",
        action="store_true",
        help="part 3: run SVMlight beside the C sweep on Adult too (Figure 9, right; slow at "
        "large C: each run stops at --timeout CPU seconds and is shown as >T)",
    )
    ap.add_argument(
        "--like",
        choices=sorted(LIKE),
        default=None,
        help="parts 1-2 on a stand-in shaped like this Table 1 data set",
    )
    args = ap.parse_args()
    like = LIKE.get(args.like or "")
    if like:
        SYNTH["features"] = int(like["features"])
        SYNTH["nnz_per_row"] = max(1, round(like["s"] * like["features"]))
        if "pos" in like:
            SYNTH["positive_fraction"] = like["pos"]
        if "noise" in like:
            SYNTH["noise"] = like["noise"]
        if "--c-synth" not in sys.argv:
            args.c_synth = like["C"]
    parts = set(args.parts.split(","))
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    if args.quick:
        args.light_max_n = min(args.light_max_n, 5000)
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="joachims2006-")) if args.quick else c.OUT_DEFAULT
    )
    args.perf_exe = c.comparator("SVMPERF_LEARN")
    args.light_exe = c.comparator("SVMLIGHT_LEARN")
    machine = c.machine()
    # BLAS threads change the paper variant's time (its working-set QP may use an SVD)
    blas = [f"{k}={c.os.environ[k]} " for k in ("OPENBLAS_NUM_THREADS",) if k in c.os.environ]
    cmdline = "".join(blas) + c.command_line("joachims2006.py", sys.argv[1:])
    print(f"# {cmdline}\n# {machine}", flush=True)
    md = [f"Run: `{cmdline}` — {{machine}}. Synth: {SYNTH}.", ""]
    if like:
        t = like["t"]
        md += [
            f"**Stand-in** for Table 1's {args.like} (paper: n = {like['n']:,}, "
            f"N = {like['features']:,}, s = {like['s']:.2%}, C = {like['C']:g}; SVM-Perf "
            f"{t[0]} CPU s, SVMlight {t[1]} CPU s, SVM-Perf ordinal {t[2]} CPU s on its 2006 "
            "machine): synth rows of the same width and row length, not the paper's data.",
            "",
        ]
    raw: dict = {"machine": machine, "like": args.like, "synth": dict(SYNTH)}
    with c.Workdir("joachims2006") as wd:
        w = wd.path
        if parts & {"1", "2", "5"}:
            full = w / "synth.txt"
            synth_text(full, max(sizes))
            lines = full.read_bytes().splitlines()
            n_pos = sum(1 for ln in lines if ln.startswith((b"+1", b"1 ")))
            raw["positive_share"] = n_pos / len(lines)
            md += [f"Positive labels in the generated rows: {n_pos / len(lines):.2%}.", ""]
            order = list(range(len(lines)))
            recs, roc = [], []
            for n in sizes if parts & {"1", "2"} else []:
                text = c.write_subset(lines, order, n, w / f"synth-{n}.txt")
                store = w / f"synth-{n}.zarr"
                c.ingest(text, store, SYNTH["features"])
                if "1" in parts:
                    recs.append(perf_runs(store, text, n, args.c_synth, args, w))
                    _line(f"synth n={n}", recs[-1])
                if "2" in parts:
                    roc.append(perf_runs(store, text, n, args.c_synth, args, w, loss="roc"))
                    _line(f"synth roc n={n}", roc[-1])
                c.shutil.rmtree(store, ignore_errors=True)
            if recs:
                raw["scaling"] = recs
                raw["scaling_exp"] = scaling_table(
                    recs,
                    f"Time vs n, classification, synth, C={args.c_synth:g}",
                    out,
                    f"{args.stem}-scaling.png",
                    md,
                )
                md.insert(
                    -3,
                    f"Paper: SVM-Perf ~n^{PAPER_EXP['SVM-Perf']}, "
                    f"SVMlight ~n^{PAPER_EXP['SVMlight']}, iterations independent of n.",
                )
            if roc:
                raw["roc"] = roc
                raw["roc_exp"] = scaling_table(
                    roc,
                    f"Time vs n, ROC-area (two-rank ordinal) loss, synth, C={args.c_synth:g}",
                    out,
                    f"{args.stem}-roc.png",
                    md,
                )
                md.insert(
                    -3,
                    "Paper: O(s n log n); the exponent of n log n over these sizes is "
                    + _f(c.fit_exponent(sizes, [n * c.math.log(n) for n in sizes]))
                    + ".",
                )
            if "5" in parts:
                n = max(sizes)
                text = c.write_subset(lines, order, n, w / f"synth-{n}.txt")
                store = w / f"synth-eps-{n}.zarr"
                c.ingest(text, store, SYNTH["features"])
                raw["eps_synth"], raw["eps_synth_exp"] = eps_sweep(
                    store, text, n, args.c_synth, args, w, md,
                    [0.1, 0.01, 0.001] if args.quick else [0.1, 0.03, 0.01, 0.003, 0.001],
                    f"synth n={n}", f"synth n={n}, C={args.c_synth:g}",
                )  # fmt: skip
                c.shutil.rmtree(store, ignore_errors=True)
        save(md, raw, machine, out, args.stem)
        if parts & {"3", "4"}:
            lines, nf = c.read_lines("adult")
            text = c.write_subset(lines, list(range(len(lines))), len(lines), w / "adult.txt")
            store = w / "adult.zarr"
            c.ingest(text, store, nf)
            n = len(lines)
            if "3" in parts:
                raw["eps"], raw["eps_exp"] = eps_sweep(
                    store, text, n, 0.05 * n, args, w, md,
                    [0.1, 0.01, 0.001] if args.quick else [0.1, 0.03, 0.01, 0.003, 0.001, 0.0003],
                    "adult", f"Adult (a9a), C=0.05·n={0.05 * n:.0f}",
                )  # fmt: skip
                cs = [0.05, 5.0] if args.quick else [0.005, 0.05, 0.5, 5.0, 50.0]
                recs = [
                    perf_runs(
                        store,
                        text,
                        n,
                        cl * n,
                        args,
                        w,
                        light_ok=args.light_c_sweep,
                        light_any_n=args.light_c_sweep,
                    )
                    for cl in cs
                ]
                for r in recs:
                    _line(f"adult C={r['C']:.0f}", r)
                raw["C"] = recs
                raw["C_exp"] = sweep_table(
                    recs,
                    "C",
                    "Iterations and time vs C (paper's units), Adult (a9a), eps=0.001",
                    md,
                )
                md.insert(
                    -2,
                    "Paper: iterations grow much more slowly than the linear bound of its Lemma 2.",
                )
            save(md, raw, machine, out, args.stem)
            if "4" in parts:
                rows = []
                raw["adult_web"] = []
                for data, cl, paper_s in ADULT_WEB:
                    if data == "web":
                        lines, nf = c.read_lines("web")
                        text = c.write_subset(
                            lines, list(range(len(lines))), len(lines), w / "web.txt"
                        )
                        store = w / "web.zarr"
                        c.ingest(text, store, nf)
                        n = len(lines)
                    # the paper's own data sets: SVMlight at any size (CPU-limited)
                    r = perf_runs(store, text, n, cl * n, args, w, light_any_n=True)
                    _line(f"{data} C={cl}*n", r)
                    raw["adult_web"].append(r)
                    rows.append(
                        [
                            data,
                            n,
                            f"{cl}·n",
                            paper_s,
                            _cpu(r.get("paper")),
                            _it(r.get("paper")),
                            _cpu(r.get("accelerated")),
                            _it(r.get("accelerated")),
                            _cpu(r.get("svmperf")),
                            _it(r.get("svmperf")),
                            _cpu(r.get("svmlight"))
                            if not (r.get("svmlight") or {}).get("timeout")
                            else f">{r['svmlight']['timeout']:.0f}",
                            c.ratio(_cpu(r.get("paper")), paper_s),
                        ]
                    )
                md += [
                    "#### Adult and Web runs (paper: 3.1 and 7.6 CPU seconds on its 2006 machine)",
                    "",
                    c.md_table(
                        [
                            "data",
                            "n",
                            "C",
                            "paper CPU s",
                            "ours paper CPU s",
                            "iter",
                            "ours accelerated CPU s",
                            "iter",
                            "SVMperf 3.00 CPU s",
                            "iter",
                            "SVMlight CPU s",
                            "ours paper / paper",
                        ],
                        rows,
                    ),
                    "",
                ]
    text_md = "\n".join(md).replace("{machine}", machine + f"; load at the end {c.loadavg()}")
    print(text_md)
    c.write_outputs(out, args.stem, text_md, raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
