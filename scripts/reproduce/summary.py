#!/usr/bin/env python
"""One summary table per paper, generated from the JSON files the reproduction scripts keep.

docs/REPRODUCTION.md's summary tables are this script's output for the JSON files in
docs/reproduction/ (``tests/test_reproduction_doc.py`` checks that they still are)::

    python scripts/reproduce/summary.py --render docs/reproduction/platt1998-adult-linear.json ...

Each JSON file is routed to its paper by its name (``platt1998*``, ``scheinberg2006*``,
``perezcruz*``, ``joachims2006*``); the papers' figures come from the JSON where the script
stored them (Scheinberg's and Pérez-Cruz's rows, Platt's fitted exponents) or from the
script's own table of the paper (Platt's SV counts, Joachims' exponents). The verdicts apply
docs/REPRODUCTION.md's rule: counts within 10 % of the paper's, exponents within 0.2, speed
claims by the ordering within one run. A figure the JSON lacks is printed as "–".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
import platt1998
import platt1998_artificial

# Joachims 2006's claimed exponents (section 5): time ~n^0.8, iterations independent of n,
# iterations ~(1/eps)^0.3, time ~(1/eps)^0.4, iterations ~C^0.5 (Figure 8's legend)
JOACHIMS = {"time_n": 0.8, "iter_n": 0.0, "iter_eps": 0.3, "time_eps": 0.4, "iter_C": 0.5}


def within(ours: float | None, paper: float | None) -> bool | None:
    """The rule for counts: ours within 10 % of the paper's (0 only matches 0)."""
    return platt1998_artificial.within(ours, paper)


def _exp_verdict(ours: float | None, paper: float | None) -> str:
    if ours is None or paper is None:
        return "–"
    return "within 0.2" if abs(ours - paper) <= 0.2 else "differs"


def _counted(flags: list[bool | None]) -> str:
    got = [f for f in flags if f is not None]
    return f"{sum(got)} of {len(got)}" if got else "–"


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def _pair(paper: Any, ours: Any) -> str:
    return f"{'–' if paper is None else f'{paper:,}'} / {'–' if ours is None else f'{ours:,}'}"


def _cpu(r: dict | None) -> float | None:
    """A run's CPU seconds (a comparator's own "Runtime in cpu-seconds" where it printed one)."""
    if not r or "timeout" in r:
        return None
    return r.get("reported_cpu", r.get("cpu"))


def _times(other: dict | None, ours: float | None) -> str:
    """other's CPU ÷ ours, "> k×" when other ran out of its CPU limit."""
    if other and "timeout" in other and ours:
        return f"> {other['timeout'] / ours:.2f}×"
    return _f(c.ratio(_cpu(other), ours), "{:.2f}×")


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


# --- Platt 1998 -----------------------------------------------------------------------------


def _platt_rows(path: str, raw: dict) -> list[list[Any]]:
    art = "artificial" in Path(path).stem or "seed" in raw
    table = platt1998_artificial.PAPER if art else platt1998.PAPER
    rows = []
    for res in raw["results"]:
        spec = table[res["name"]]
        paper = {r[0]: r for r in spec["rows"]}
        bound, free, last = [], [], None
        for run in res["runs"]:
            p, o = paper.get(run.get("n_paper", run["n"])), run.get("smo-platt") or {}
            if p is None or "n_free" not in o:
                continue
            free.append(within(o["n_free"], p[3]))
            bound.append(within(o["n_bound"], p[4]))
            last = (run["n"], p, o)
        ex = res.get("exponents", {})
        e_paper, e_ours = ex.get("paper SMO"), ex.get("smo-platt")
        counts = "all" if bound and all(bound + free) else "partly"
        setting = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in res["params"].items()
        )
        rows.append(
            [
                res["name"] + (f" (seed {raw['seed']})" if art else ""),
                setting,
                _counted(bound),
                _counted(free),
                "–" if last is None else f"{last[0]:,}",
                "–" if last is None else _pair(last[1][4], last[2]["n_bound"]),
                "–" if last is None else _pair(last[1][3], last[2]["n_free"]),
                f"{_f(e_paper)} / {_f(e_ours)}",
                f"SV counts {'reproduced' if counts == 'all' else 'partly'}; "
                f"exponent {_exp_verdict(e_ours, e_paper)}",
            ]
        )
    return rows


def _platt(files: list[tuple[str, dict]]) -> str:
    rows = [r for path, raw in files for r in _platt_rows(path, raw)]
    return c.md_table(
        [
            "experiment",
            "setting",
            "bound SVs within 10 %",
            "free SVs within 10 %",
            "largest n",
            "bound SVs there, paper / ours",
            "free SVs there, paper / ours",
            "SMO time exponent, paper / ours",
            "verdict",
        ],
        rows,
    )


# --- Scheinberg 2006 ------------------------------------------------------------------------


def _tol(rec: dict) -> str:
    m = re.search(r"--tol (\S+)", rec.get("command", ""))
    return f"{float(m[1]):g}" if m else "–"


def _scheinberg(files: list[tuple[str, dict]]) -> str:
    rows = []
    for _, raw in files:
        for r in raw["results"]:
            # paper row: (case, n, n_s, n_c, SVMlight s, SVM_e^light s, SVM-QP s)
            p, o = r["paper"], r.get("ours") or {}
            ns, nc = o.get("n_s"), o.get("n_c")
            light = [r.get(k) for k in ("light_0.001", "light_0.000001")]
            cpu = _cpu(o) if o.get("converged") else None
            flags = [within(nc, p[3]), within(ns, p[2])]
            if cpu is None:
                verdict = "not finished"
            elif all(flags):
                verdict = "n_c and n_s within 10 %"
            else:
                verdict = ", ".join(
                    f"{k} {'within 10 %' if ok else 'differs'}"
                    for k, ok in zip(("n_c", "n_s"), flags, strict=True)
                )
            rows.append(
                [
                    r["table"],
                    r["case"],
                    f"{r['n']:,}",
                    _tol(o),
                    _pair(p[3], nc),
                    _pair(p[2], ns),
                    _f(cpu),
                    " / ".join(_times(x, cpu) for x in light),
                    verdict,
                ]
            )
    return c.md_table(
        [
            "table",
            "case",
            "n",
            "tol",
            "n_c, paper / ours",
            "n_s, paper / ours",
            "ours CPU s",
            "SVMlight 10⁻³ / 10⁻⁶ CPU ÷ ours",
            "verdict",
        ],
        rows,
    )


# --- Pérez-Cruz et al. ----------------------------------------------------------------------


def _perezcruz(files: list[tuple[str, dict]]) -> str:
    rows = []
    for _, raw in files:
        for r in raw.get("table3", []):
            # paper row: (name, data, n, C, sigma, SV, q irwls, q light, CPU irwls, CPU light)
            p, o, lt = r["row"], r.get("ours") or {}, r.get("light") or {}
            sv = o.get("n_sv")
            paper_r, ours_r = c.ratio(p[9], p[8]), c.ratio(_cpu(lt), _cpu(o))
            if "timeout" in lt:
                ours_r = lt["timeout"] / _cpu(o) if _cpu(o) else None
            same = None if ours_r is None or paper_r is None else (paper_r >= 1) == (ours_r >= 1)
            rows.append(
                [
                    p[0],
                    f"{r['n']:,}",
                    f"{p[3]:g}",
                    f"{r['gamma']:g}",
                    _pair(p[5], sv),
                    _f(c.ratio(sv, p[5])),
                    f"{_f(paper_r)} / {'> ' if 'timeout' in lt else ''}{_f(ours_r)}",
                    f"SVs {'within 10 %' if within(sv, p[5]) else 'differ'}; speed "
                    + ("–" if same is None else ("same ordering" if same else "contrary")),
                ]
            )
    return c.md_table(
        [
            "row",
            "n",
            "C",
            "γ",
            "SVs, paper / ours",
            "ours ÷ paper",
            "SVMlight ÷ IRWLS CPU, paper / ours",
            "verdict",
        ],
        rows,
    )


# --- Joachims 2006 --------------------------------------------------------------------------


def _data(path: str, section: str) -> str:
    like = re.search(r"-like-(\w+)", Path(path).stem)
    if like:
        return f"{like[1]}-shaped stand-in"
    return "Adult (a9a)" if section in ("eps", "C") else "synth"


def _joachims(files: list[tuple[str, dict]]) -> str:
    rows = []

    def add(claim, data, span, paper, ex: dict, k_ours, k_perf, k_light=None):
        ours = ex.get(k_ours)
        rows.append(
            [
                claim,
                Path(path).stem,
                data,
                span,
                _f(paper),
                _f(ours),
                _f(ex.get(k_perf)),
                _f(ex.get(k_light)) if k_light else "–",
                _exp_verdict(ours, paper),
            ]
        )

    def span(recs: list[dict], key: str) -> str:
        xs = [r[key] for r in recs]
        fmt = "{:,}" if key == "n" else "{:.3g}"
        name = {"eps": "ε"}.get(key, key)
        return f"{name} {fmt.format(min(xs))}–{fmt.format(max(xs))}" if xs else "–"

    for path, raw in files:
        if raw.get("scaling"):
            data = _data(path, "scaling")
            ex, s = raw["scaling_exp"], span(raw["scaling"], "n")
            add(
                "iterations ~n^x (paper: independent of n)",
                data,
                s,
                JOACHIMS["iter_n"],
                ex["iterations"],
                "ours paper",
                "SVMperf 3.00",
            )
            add(
                "time ~n^x",
                data,
                s,
                JOACHIMS["time_n"],
                ex["time"],
                "ours paper",
                "SVMperf 3.00",
                "SVMlight 6.20",
            )
        for key, recs, exk in (
            ("eps", "eps", "eps_exp"),
            ("eps", "eps_synth", "eps_synth_exp"),
            ("C", "C", "C_exp"),
        ):
            if not raw.get(recs):
                continue
            ex, s, data = raw[exk], span(raw[recs], key), _data(path, recs)
            its = {k: v[0] for k, v in ex.items()}
            tim = {k: v[1] for k, v in ex.items()}
            var = "1/ε" if key == "eps" else "C"
            add(f"iterations ~{var}^x", data, s, JOACHIMS[f"iter_{key}"], its, "paper", "svmperf")
            if key == "eps":
                add(f"time ~{var}^x", data, s, JOACHIMS["time_eps"], tim, "paper", "svmperf")
    return c.md_table(
        [
            "claim",
            "run",
            "data",
            "range",
            "paper x",
            "ours x (paper variant)",
            "SVMperf 3.00 x",
            "SVMlight 6.20 x",
            "verdict",
        ],
        rows,
    )


PAPERS = (
    ("platt1998", "Platt 1998 (SMO, Platt's selection rule)", _platt),
    ("scheinberg2006", "Scheinberg 2006 (SVM-QP)", _scheinberg),
    ("perezcruz", "Pérez-Cruz et al. (IRWLS), Table 3", _perezcruz),
    ("joachims2006", "Joachims 2006 (SVM-Perf)", _joachims),
)


def render(paths: list[str]) -> str:
    """The summary table of each paper whose JSON files are among ``paths``."""
    out = []
    for prefix, title, table in PAPERS:
        files = [(p, _load(p)) for p in paths if Path(p).stem.startswith(prefix)]
        if not files:
            continue
        machines = sorted(
            {
                raw["machine"].split(";", 1)[1].split(";")[0].strip()
                for _, raw in files
                if ";" in raw.get("machine", "")
            }
        )
        out += [
            f"**{title}** ({', '.join(Path(p).name for p, _ in files)}; {' and '.join(machines)})",
            "",
            table(files),
            "",
        ]
    return "\n".join(out).strip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--render",
        nargs="+",
        metavar="JSON",
        required=True,
        help="print the summary tables of these JSON files",
    )
    args = ap.parse_args()
    print(render(args.render), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
