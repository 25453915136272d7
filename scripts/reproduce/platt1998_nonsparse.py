#!/usr/bin/env python
"""Reproduce Platt 1998 (SMO), section 3.3: SMO with and without sparse inputs (a stand-in).

Platt timed SMO on his artificial data twice: with sparse dot products and with every input
stored as a dense vector of 300 floats, and reported the ratio (about 10x on the separable
set, 6x on the linear noise fit, 4x on the Gaussian one). The project has no dense-input
code path; the stand-in here writes every one of the 300 inputs, zeros included, which
``ooc-svm ingest`` keeps as entries, so each dot product walks all 300 of them as Platt's
non-sparse code did (through the sparse code: a stand-in, not his dense loop). For each
size, each solver runs on the sparse file and then on the "dense" one (paired, in the same
command): ``smo-platt``, ``smo-wss2`` and, with ``$SVMLIGHT_LEARN``, SVMlight on the same
two files. The data, sizes and parameters are ``platt1998_artificial.py``'s.

Usage::

    python scripts/reproduce/platt1998_nonsparse.py [--experiments noise-linear,...]
        [--max-n 5000] [--timeout 150]

Writes OUT/platt1998-nonsparse.md and .json (OUT: docs/reproduction by default).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
import platt1998_artificial as art

# The paper's sparse / non-sparse SMO CPU seconds (section 3.3), typed from the text.
PAPER = {
    "separable-linear": [
        (1000, 15.3, 145.1),
        (2000, 33.4, 345.4),
        (5000, 103.0, 1118.1),
        (10000, 186.8, 2163.7),
        (20000, 280.0, 3293.9),
    ],
    "noise-linear": [
        (500, 1.0, 6.0),
        (1000, 3.5, 21.7),
        (2000, 15.7, 99.3),
        (5000, 67.6, 400.0),
        (10000, 187.1, 1007.6),
    ],
    "noise-rbf": [
        (500, 5.6, 19.8),
        (1000, 21.1, 87.8),
        (2000, 131.4, 554.6),
        (5000, 986.5, 3957.2),
        (10000, 4226.7, 15743.8),
    ],
}
SOLVERS = ("smo-platt", "smo-wss2", "svmlight")


def experiment(name: str, args, work: Path, done: list[dict], save) -> dict:
    """Every size: each solver on the sparse file, then on the dense one."""
    spec = art.PAPER[name]
    sizes = args.sizes or [r[0] for r in PAPER[name] if r[0] <= args.max_n]
    X, y = art.generate(spec["data"], max(sizes), args.seed)
    solvers = [s for s in SOLVERS if s in args.solvers]
    art._warm(name, work, args, solvers)
    dead: set[str] = set()
    runs: list[dict] = []
    for n in sizes:
        rec: dict = {"n": n, "load": c.loadavg()}
        files = {}
        for kind in ("sparse", "dense"):
            text = art.write_text(X[:n], y[:n], work / f"{name}-{n}-{kind}.txt", kind == "dense")
            files[kind] = (text, work / f"{name}-{n}-{kind}.zarr")
            rec[f"nnz_{kind}"] = c.ingest(text, files[kind][1], art.DIM).get("nnz")
        for s in solvers:
            for kind, (text, store) in files.items():
                key = f"{s}-{kind}"
                if key in dead:
                    rec[key] = {"skipped": "timed out at a smaller size"}
                    continue
                r = art._one(s, text, store, work, spec["params"], args)
                if "timeout" in r:
                    dead.add(key)
                rec[key] = r
                print(f"{name} n={n} {key}: {art._brief(r)}  load {c.loadavg()}", flush=True)
        rec["load_end"] = c.loadavg()
        runs.append(rec)
        save([*done, {"name": name, "params": spec["params"], "runs": runs}], final=False)
        for _text, store in files.values():
            c.shutil.rmtree(store, ignore_errors=True)
    return {"name": name, "params": spec["params"], "runs": runs}


def report(results: list[dict], machine: str, cmdline: str) -> str:
    """Per size: the paper's sparse / non-sparse SMO seconds and ratio beside ours."""
    md = [f"Run: `{cmdline}` — {machine}. CPU seconds; ratio = dense / sparse.", ""]
    heads = ["n", "paper SMO sparse s", "paper non-sparse s", "paper ratio"]
    for s in SOLVERS:
        heads += [f"{s} sparse", f"{s} dense", f"{s} ratio"]
    heads += ["same SVs", "load"]
    for res in results:
        paper = {r[0]: r for r in PAPER[res["name"]]}
        md += [f"#### {res['name']} ({', '.join(f'{k}={v}' for k, v in res['params'].items())})"]
        rows = []
        for rec in res["runs"]:
            p = paper.get(rec["n"], (rec["n"], None, None))
            row = [rec["n"], p[1], p[2], c.ratio(p[2], p[1])]
            same = True
            for s in SOLVERS:
                a, b = rec.get(f"{s}-sparse"), rec.get(f"{s}-dense")
                row += [art._cell(a), art._cell(b), c.ratio(art._cpu(b), art._cpu(a))]
                if a and b and "n_sv" in a and "n_sv" in b:
                    same = same and abs(a["n_sv"] - b["n_sv"]) <= 2
            rows.append([*row, "yes" if same else "no", f"{rec['load']}→{rec['load_end']}"])
        md += ["", c.md_table(heads, rows), ""]
    return "\n".join(md)


def main() -> int:
    ap = c.base_parser(__doc__)
    ap.add_argument("--experiments", default=",".join(PAPER), help="comma list of experiments")
    ap.add_argument("--solvers", default=",".join(SOLVERS), help="comma list of solvers")
    ap.add_argument("--max-n", type=int, default=10**9, help="largest training-set size to run")
    ap.add_argument("--sizes", default="", help="comma list of sizes (default: the paper's)")
    ap.add_argument("--stem", default="platt1998-nonsparse", help="name of the output files")
    args = ap.parse_args()
    args.solvers = c.parse_choices(ap, args.solvers, SOLVERS, "solver")
    args.sizes = c.parse_sizes(ap, args.sizes)
    names = c.parse_choices(ap, args.experiments, PAPER, "experiment")
    if args.quick and not args.sizes:
        args.sizes = [PAPER[names[0]][0][0]]
    out = args.out or (Path(tempfile.mkdtemp(prefix="platt-ns-")) if args.quick else c.OUT_DEFAULT)
    cmdline = c.command_line("platt1998_nonsparse.py", sys.argv[1:])
    print(f"# {cmdline}\n# {c.machine()}", flush=True)
    c.run_experiments(
        "platt-nonsparse", names, lambda nm, path, results, save: experiment(
            nm, args, path, results, save), report, out, args.stem, cmdline, args.seed
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
