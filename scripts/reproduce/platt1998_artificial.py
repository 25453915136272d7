#!/usr/bin/env python
"""Reproduce Platt 1998 (SMO), section 3.3: the two artificial data sets.

The paper's generator (section 3.3), written out in :func:`generate`:

- inputs: random binary 300-dimensional vectors with a 10 % fraction of ones (each of the
  300 inputs is 1 with probability 0.1, independently);
- ``separable``: a weight vector drawn uniformly in [-1, 1]^300; a point whose dot product
  with it is above 1 is labelled +1, below -1 labelled -1, and in between discarded (no
  threshold: the set is linearly separable through the origin with margin 1);
- ``noise``: the labels are random (+1 or -1 with probability 1/2): the SVM fits pure noise.

Rows come from one seeded stream in blocks, so the set of size n is the first n rows of any
larger one (nested, like the real-data subsets of ``platt1998.py``) and the same on every
machine. The paper's three timing tables on them (its "sparse" columns; the non-sparse
columns need a dense-input code path, which the project does not have):

- ``separable-linear``: linear SVM, C = 100, n = 1,000 ... 20,000;
- ``noise-linear``: linear SVM, C = 0.1, n = 500 ... 10,000;
- ``noise-rbf``: Gaussian SVM of "variance 10" (gamma = 0.05, the reading ``platt1998.py``
  uses), C = 0.1, n = 500 ... 10,000.

Solvers, as in ``platt1998.py``: ``smo-platt`` (``--solver smo --selection platt``),
``smo-wss2`` (``--solver smo``), both at tolerance 1e-3; ``chunking`` (``chunking.py``,
chunk size 500 as in the paper; its inner QP is LIBSVM's solver, not Platt's conjugate
gradient, so it is no test of Platt's SMO-vs-chunking speed claim); and ``svmlight``
(``$SVMLIGHT_LEARN``, ``-e 0.001``), the speed reference run in the same command.

Usage::

    python scripts/reproduce/platt1998_artificial.py --quick    # first two sizes of each
    python scripts/reproduce/platt1998_artificial.py [--max-n 10000] [--experiments ...]

Writes OUT/platt1998-artificial.md and .json (OUT: docs/reproduction by default; --quick: a
temporary folder unless --out is given).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
import platt1998 as p98

DIM, DENSITY = 300, 0.1
# The paper's tables (section 3.3, "sparse" columns), typed from the text:
# (n, SMO CPU s, chunking CPU s or None for "N/A", non-bound SVs, bound SVs).
PAPER = {
    "separable-linear": {
        "data": "separable",
        "params": {"kernel": "linear", "C": 100.0},
        "exp": (1.0, 1.2),
        "rows": [
            (1000, 15.3, 10.4, 275, 0),
            (2000, 33.4, 33.0, 286, 0),
            (5000, 103.0, 108.3, 299, 0),
            (10000, 186.8, 226.0, 309, 0),
            (20000, 280.0, 374.1, 329, 0),
        ],
    },
    "noise-linear": {
        "data": "noise",
        "params": {"kernel": "linear", "C": 0.1},
        "exp": (1.8, 3.2),
        "rows": [
            (500, 1.0, 6.4, 162, 263),
            (1000, 3.5, 57.9, 220, 632),
            (2000, 15.7, 593.8, 264, 1476),
            (5000, 67.6, 10353.3, 283, 4201),
            (10000, 187.1, None, 293, 9034),
        ],
    },
    "noise-rbf": {
        "data": "noise",
        "params": {"kernel": "rbf", "gamma": 0.05, "C": 0.1},
        "exp": (2.2, 3.4),
        "rows": [
            (500, 5.6, 5.8, 22, 476),
            (1000, 21.1, 41.9, 82, 888),
            (2000, 131.4, 635.7, 75, 1905),
            (5000, 986.5, 13532.2, 30, 4942),
            (10000, 4226.7, None, 48, 9897),
        ],
    },
}
SOLVERS = ("smo-platt", "smo-wss2", "chunking", "svmlight")
QUICK_SIZES = 2


def generate(kind: str, n: int, seed: int, block: int = 1024) -> tuple[sp.csr_matrix, np.ndarray]:
    """Platt's artificial set ``kind`` (``separable`` or ``noise``): the first ``n`` rows.

    Parameters
    ----------
    kind : str
        ``"separable"`` (labels from a random weight vector, |w.x| <= 1 discarded) or
        ``"noise"`` (random labels).
    n : int
        Number of rows kept.
    seed : int
        Seed of the stream; the rows of size n are a prefix of those of any larger size.
    block : int
        Candidate rows drawn at a time (part of the stream's definition: keep it fixed).

    Returns
    -------
    X : scipy.sparse.csr_matrix
        ``n`` x 300 binary matrix (float64 ones).
    y : numpy.ndarray
        Labels in {-1.0, +1.0}.
    """
    if kind not in ("separable", "noise"):
        raise ValueError(f"generate: unknown kind {kind!r}; use 'separable' or 'noise'")
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1.0, 1.0, DIM) if kind == "separable" else None
    xs, ys, got = [], [], 0
    while got < n:
        B = rng.random((block, DIM)) < DENSITY
        if w is None:
            yb = np.where(rng.random(block) < 0.5, 1.0, -1.0)
        else:
            s = B @ w
            keep = np.abs(s) > 1.0
            B, yb = B[keep], np.where(s[keep] > 0, 1.0, -1.0)
        xs.append(B)
        ys.append(yb)
        got += len(yb)
    X = sp.csr_matrix(np.vstack(xs)[:n], dtype=np.float64)
    X.indptr = X.indptr.astype(np.int64)
    return X, np.concatenate(ys)[:n]


def write_text(X: sp.csr_matrix, y: np.ndarray, path: Path, dense: bool = False) -> Path:
    """SVMlight text (one-based feature numbers, value 1) of ``X``, ``y``; ``dense`` writes
    every one of the 300 inputs, zeros included (kept as entries by ``ooc-svm ingest``)."""
    with open(path, "w") as f:
        for i in range(X.shape[0]):
            cols = X.indices[X.indptr[i] : X.indptr[i + 1]]
            if dense:
                row = np.zeros(DIM, dtype=np.int64)
                row[cols] = 1
                feats = "".join(f" {j + 1}:{v}" for j, v in enumerate(row))
            else:
                feats = "".join(f" {j + 1}:1" for j in cols)
            f.write(("+1" if y[i] > 0 else "-1") + feats + "\n")
    return path


def _light(text: Path, work: Path, params: dict, timeout: float) -> dict:
    exe = c.comparator("SVMLIGHT_LEARN")
    if exe is None:
        return {"skipped": "SVMLIGHT_LEARN not set"}
    la = ["-c", repr(params["C"]), "-e", "0.001", "-m", "64"]
    la += ["-t", "2", "-g", repr(params["gamma"])] if params["kernel"] == "rbf" else ["-t", "0"]
    r = c.run_svmlight(exe, text, work / "light.model", la, timeout)
    if "reported_cpu" in r:
        r["process_cpu"], r["cpu"] = r["cpu"], r["reported_cpu"]
    return r


def _one(s: str, text: Path, store: Path, work: Path, params: dict, args) -> dict:
    """One solver's run on one size."""
    if s == "chunking":
        return p98.run_chunking(text, DIM, params, args.timeout, args.chunk_memory_mb)
    if s == "svmlight":
        return _light(text, work, params, args.timeout)
    r = c.train(store, "smo", dict(params, selection=s.split("-")[1], tol=1e-3), args.timeout)
    if "timeout" not in r:
        r["n_bound"] = r.get("n_bound_sv")
        r["n_free"] = r["n_sv"] - r["n_bound_sv"]
    return r


def _warm(name: str, work: Path, args, solvers: list[str]) -> None:
    """Untimed SMO runs on 300 rows: numba's first call compiles, which is not the solver."""
    spec = PAPER[name]
    X, y = generate(spec["data"], 300, args.seed)
    text = write_text(X, y, work / f"{name}-warm.txt")
    c.ingest(text, work / f"{name}-warm.zarr", DIM)
    for s in solvers:
        if s.startswith("smo-"):
            p = dict(spec["params"], selection=s.split("-")[1], tol=1e-3)
            c.train(work / f"{name}-warm.zarr", "smo", p, timeout=args.timeout)


def experiment(name: str, args, work: Path, done: list[dict], save) -> dict:
    """Every size of one table, each solver in turn; stops a solver after its first timeout."""
    spec = PAPER[name]
    rows = spec["rows"][:QUICK_SIZES] if args.quick else spec["rows"]
    sizes = args.sizes or [r[0] for r in rows if r[0] <= args.max_n]
    X, y = generate(spec["data"], max(sizes), args.seed)
    solvers = [s for s in SOLVERS if s in args.solvers]
    _warm(name, work, args, solvers)
    dead: set[str] = set()
    runs: list[dict] = []
    for n in sizes:
        text = write_text(X[:n], y[:n], work / f"{name}-{n}.txt")
        store = work / f"{name}-{n}.zarr"
        c.ingest(text, store, DIM)
        rec: dict = {"n": n, "load": c.loadavg(), "nnz_per_row": X[:n].nnz / n}
        for s in solvers:
            if s in dead:
                rec[s] = {"skipped": "timed out at a smaller size"}
                continue
            r = _one(s, text, store, work, spec["params"], args)
            if "timeout" in r or r.get("too_large"):
                dead.add(s)
            rec[s] = r
            print(f"{name} n={n} {s}: {_brief(r)}  load {c.loadavg()}", flush=True)
        rec["load_end"] = c.loadavg()
        runs.append(rec)
        save([*done, {"name": name, "params": spec["params"], "runs": runs}], final=False)
        c.shutil.rmtree(store, ignore_errors=True)
    return {"name": name, "params": spec["params"], "runs": runs}


def _brief(r: dict) -> str:
    if "timeout" in r:
        return f"timeout {r['timeout']:.0f} CPU s"
    if r.get("too_large"):
        return "N/A (chunk matrix too large)"
    if "skipped" in r:
        return "skipped: " + r["skipped"]
    return f"free {r.get('n_free')} bound {r.get('n_bound')} cpu {r.get('cpu', 0):.2f}s"


def _cpu(r: dict | None) -> float | None:
    return r["cpu"] if r and "cpu" in r and "timeout" not in r else None


def _cell(r: dict | None):
    if not r:
        return None
    if "timeout" in r:
        return f">{r['timeout']:.0f}"
    if r.get("too_large"):
        return "N/A"
    return _cpu(r)


def _wall(r: dict | None) -> str:
    """Wall seconds of a finished run (ours: the train call; chunking, SVMlight: the process)."""
    if not r or _cpu(r) is None:
        return "–"
    return f"{r.get('seconds', r.get('wall', 0.0)):.1f}"


def within(ours: int | None, paper: int | None) -> bool | None:
    """The project's rule for counts: within 10 % of the paper's (0 only matches 0)."""
    if ours is None or paper is None:
        return None
    return ours == 0 if paper == 0 else abs(ours / paper - 1.0) <= 0.10


def _sv(r: dict | None, key: str):
    return r.get(key) if r and "n_free" in r else None


def _table(res: dict, paper: dict, series: dict) -> tuple[list[list], dict]:
    """Rows of one experiment's table; fills ``series`` (n, CPU s) for the exponents."""
    rows, hits = [], {"free": [0, 0], "bound": [0, 0]}
    for rec in res["runs"]:
        # a size the paper did not run (--sizes) has no paper figures
        p = paper.get(rec["n"], (rec["n"], None, None, None, None))
        pl, w, ch, li = (rec.get(s) for s in SOLVERS)
        for key, col in (("free", 3), ("bound", 4)):
            ok = within(_sv(pl, "n_" + key), p[col])
            if ok is not None:
                hits[key][0] += ok
                hits[key][1] += 1
        rows.append(
            [rec["n"], p[3], _sv(pl, "n_free"), _sv(w, "n_free"), _sv(ch, "n_free")]
            + [_sv(li, "n_free"), p[4], _sv(pl, "n_bound"), _sv(w, "n_bound")]
            + [_sv(ch, "n_bound"), _sv(li, "n_bound"), p[1], _cell(pl), _cell(w), p[2]]
            + [_cell(ch), _cell(li), c.ratio(p[2], p[1]), c.ratio(_cpu(ch), _cpu(pl))]
            + [c.ratio(_cpu(li), _cpu(pl)), c.ratio(_cpu(li), _cpu(w))]
            + ["/".join(_wall(r) for r in (pl, w, ch, li))]
            + [f"{rec['load']}→{rec.get('load_end', '?')}"]
        )
        for s, r in (("paper SMO", p[1]), ("paper chunking", p[2])):
            if r:
                series[s][0].append(p[0])
                series[s][1].append(r)
        for s, r in zip(SOLVERS, (pl, w, ch, li), strict=True):
            if _cpu(r):
                series[s][0].append(rec["n"])
                series[s][1].append(_cpu(r))
    return rows, hits


HEADERS = [
    "n",
    "paper free",
    "platt free",
    "wss2 free",
    "chunk free",
    "light free",
    "paper bound",
    "platt bound",
    "wss2 bound",
    "chunk bound",
    "light bound",
    "paper SMO s",
    "platt CPU s",
    "wss2 CPU s",
    "paper chunk s",
    "chunk CPU s",
    "light CPU s",
    "paper chunk/SMO",
    "chunk/platt",
    "light/platt",
    "light/wss2",
    "wall s platt/wss2/chunk/light",
    "load",
]


_PAIRS = (("smo-platt", "paper SMO"), ("smo-wss2", "paper SMO"), ("chunking", "paper chunking"))


def _both(ours: tuple[list, list], paper: tuple[list, list]) -> tuple[float | None, float | None]:
    """Exponents of ours and of the paper's table, both fitted over the sizes both ran."""
    common = set(ours[0]) & set(paper[0])

    def fit(xy: tuple[list, list]) -> float | None:
        keep = [i for i, n in enumerate(xy[0]) if n in common]
        return c.fit_exponent([xy[0][i] for i in keep], [xy[1][i] for i in keep])

    return fit(ours), fit(paper)


def report(results: list[dict], machine: str, cmdline: str) -> str:
    """The Markdown tables, the SV-count verdicts (10 % rule) and the exponents."""
    md = [f"Run: `{cmdline}` — {machine}. Times are CPU seconds (SVMlight's own figure).", ""]
    for res in results:
        name, spec = res["name"], PAPER[res["name"]]
        paper = {r[0]: r for r in spec["rows"]}
        md += [f"#### {name} ({', '.join(f'{k}={v}' for k, v in spec['params'].items())})", ""]
        series: dict = {s: ([], []) for s in ("paper SMO", "paper chunking", *SOLVERS)}
        rows, hits = _table(res, paper, series)
        md += [c.md_table(HEADERS, rows), ""]
        exps = {k: c.fit_exponent(*v) for k, v in series.items()}
        res["exponents"] = exps
        md += [
            f"smo-platt SV counts within 10 % of the paper's: free {hits['free'][0]} of "
            f"{hits['free'][1]}, bound {hits['bound'][0]} of {hits['bound'][1]}.",
            "",
            "Exponent of CPU time vs n, ours (paper's table) over the sizes both ran: "
            + ", ".join(
                "{} {} ({})".format(s, *(p98._fmt(e) for e in _both(series[s], series[ps])))
                for s, ps in _PAIRS
            )
            + f"; SVMlight over the sizes it ran: {p98._fmt(exps['svmlight'])} (the paper's "
            f"text: SMO ~n^{spec['exp'][0]}, chunking ~n^{spec['exp'][1]}).",
            "",
        ]
    return "\n".join(md)


def main() -> int:
    ap = c.base_parser(__doc__)
    ap.add_argument("--experiments", default=",".join(PAPER), help="comma list of experiments")
    ap.add_argument("--solvers", default=",".join(SOLVERS), help="comma list of solvers")
    ap.add_argument("--max-n", type=int, default=10**9, help="largest training-set size to run")
    ap.add_argument("--sizes", default="", help="comma list of sizes (default: the paper's)")
    ap.add_argument("--chunk-memory-mb", type=float, default=1024.0)
    ap.add_argument("--stem", default="platt1998-artificial", help="name of the output files")
    ap.add_argument("--render", type=Path, default=None, help="redo the tables from a JSON file")
    args = ap.parse_args()
    if args.render:
        import json

        raw = json.loads(args.render.read_text())
        md = report(raw["results"], raw["machine"] + raw.get("tail", ""), raw["cmdline"])
        c.write_outputs(args.out or args.render.parent, args.render.stem, md, raw)
        return 0
    args.solvers = c.parse_choices(ap, args.solvers, SOLVERS, "solver")
    args.sizes = c.parse_sizes(ap, args.sizes)
    names = c.parse_choices(ap, args.experiments, PAPER, "experiment")
    out = args.out or (Path(tempfile.mkdtemp(prefix="platt-art-")) if args.quick else c.OUT_DEFAULT)
    cmdline = c.command_line("platt1998_artificial.py", sys.argv[1:])
    print(f"# {cmdline}\n# {c.machine()}", flush=True)
    c.run_experiments(
        "platt-artificial", names, lambda nm, path, results, save: experiment(
            nm, args, path, results, save), report, out, args.stem, cmdline, args.seed
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
