#!/usr/bin/env python3
"""Train every (solver, algorithm) on small deterministic stores, and compare two such runs.

A refactoring that should not change what is trained is checked with it:
train the models with the code before the change and after it, then compare the two
folders::

    python scripts/check_same_models.py train OUT_BEFORE     # on the old commit
    python scripts/check_same_models.py train OUT_AFTER      # on the new one
    python scripts/check_same_models.py compare OUT_BEFORE OUT_AFTER

``train`` writes the stores (``ooc-svm synth``; a three-class store ingested from SVMlight
text written here) under ``OUT/stores`` and one model per run under ``OUT/models/NAME``,
through the command line (``python -m ooc_svm``) of the interpreter that runs it, so the
code trained is the ``ooc_svm`` that interpreter imports (``PYTHONPATH=TREE`` picks a tree).
The runs are every solver of the registry with every choice of its algorithm parameter
(``SolverSpec.algorithms``; its default alone where it has none) on a binary store, and
perf's other problems and modes: ranks, ROC area, class weights, ``--hinge l2``, one-vs-rest,
``--variant auto`` on a wide store, a checkpointed run, and warm starts: the dual solvers'
C sweeps and ``--init`` from a model trained above (``@@NAME`` in a run's flags). A run that
fails records its one-line error (a refusal must be the same too).

``compare`` says, for every run, whether the arrays (``arrays.npz``) are equal bit for bit
and the JSON (``model.json``) field for field, except the fields that hold timings or paths;
it exits 1 when any differs or is missing from one side. ``--repeat OUT2`` (repeatable),
another ``train`` of the first folder's code (or of its ``--only dcd`` runs), tells apart the
arrays that are not the same from one run to the next, marked ``same*``: dcd's saved α
(``warm_alpha``) is the α of the moment the certificate, computed on a thread while the
epochs go on, comes back, so it depends on timing; its w, the certified point, does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

#: JSON keys not compared: timings and paths change from run to run
SKIP_KEYS = ("seconds", "time", "wall", "elapsed", "path", "date", "created", "dir")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # run from a folder without the package (``python -m`` puts the working directory first
    # on the path): the ``ooc_svm`` trained is the one this interpreter imports
    env = {**os.environ, "OOC_SVM_NO_PROGRESS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or _HOME,
    )


#: the working directory of the runs (``train`` sets it to OUT)
_HOME = Path.cwd()


def _stores(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = {
        "binary": root / "binary.zarr",
        "ranks": root / "ranks.zarr",
        "wide": root / "wide.zarr",
        "multi": root / "multi.zarr",
    }
    synth = {
        "binary": ["--rows", "600", "--features", "40", "--nnz-per-row", "8", "--seed", "3"],
        "ranks": [
            "--rows",
            "400",
            "--features",
            "30",
            "--nnz-per-row",
            "6",
            "--seed",
            "4",
            "--ranks",
            "3",
            "--qid-size",
            "20",
        ],  # fmt: skip
        "wide": [
            "--rows",
            "300",
            "--features",
            str((1 << 18) + 5),
            "--nnz-per-row",
            "6",
            "--seed",
            "5",
        ],  # fmt: skip
    }
    for name, args in synth.items():
        if not out[name].exists():
            r = _cli("synth", str(out[name]), *args)
            if r.returncode:
                raise SystemExit(f"synth {name}: {r.stderr.strip()}")
    if not out["multi"].exists():
        rng = np.random.default_rng(6)
        W = rng.normal(size=(3, 20))
        lines = []
        for _ in range(450):
            cols = np.sort(rng.choice(20, size=6, replace=False))
            vals = np.round(rng.normal(size=6), 3)
            x = np.zeros(20)
            x[cols] = vals
            y = int(np.argmax(W @ x)) + 1
            lines.append(
                f"{y} " + " ".join(f"{c + 1}:{v:g}" for c, v in zip(cols, vals, strict=True))
            )
        text = root / "multi.svm"
        text.write_text("\n".join(lines) + "\n")
        r = _cli("ingest", str(text), str(out["multi"]))
        if r.returncode:
            raise SystemExit(f"ingest multi: {r.stderr.strip()}")
    return out


def _runs() -> list[tuple[str, str, str, list[str]]]:
    """``(name, store, solver, flags)`` of every run."""
    from ooc_svm.api import flag_name
    from ooc_svm.solvers.contract import solver_specs

    runs = []
    for spec in solver_specs():
        algos = spec.algorithms or (None,)
        for algo in algos:
            flags = [] if algo is None else [flag_name(spec.algorithm), str(algo)]
            name = f"{spec.name}-{algo}" if algo is not None else spec.name
            runs.append((name, "binary", spec.name, flags))
    perf = [
        ("perf-ranks-auto", "ranks", []),
        ("perf-ranks-accelerated", "ranks", ["--variant", "accelerated"]),
        ("perf-ranks-paper", "ranks", ["--variant", "paper"]),
        ("perf-roc-accelerated", "binary", ["--loss", "roc", "--variant", "accelerated"]),
        ("perf-roc-paper", "binary", ["--loss", "roc", "--variant", "paper"]),
        ("perf-dcd-l2", "binary", ["--variant", "dcd", "--hinge", "l2"]),
        ("perf-dcd-noshrink", "binary", ["--variant", "dcd", "--no-shrinking"]),
        ("perf-cw-auto", "binary", ["--class-weight", "pos=3"]),
        ("perf-cw-paper", "binary", ["--class-weight", "pos=3", "--variant", "paper"]),
        ("perf-cw-dcd", "binary", ["--class-weight", "pos=3", "--variant", "dcd"]),
        ("perf-cw-selective", "binary", ["--class-weight", "pos=3", "--variant", "selective"]),
        ("perf-dcd-ranks", "ranks", ["--variant", "dcd"]),
        ("perf-selective-inner", "binary", ["--variant", "selective", "--max-inner", "7"]),
        ("perf-dcd-maxinner", "binary", ["--variant", "dcd", "--max-inner", "7"]),
        ("perf-accelerated-hinge", "binary", ["--variant", "accelerated", "--hinge", "l2"]),
        ("perf-accelerated-mu", "binary", ["--variant", "accelerated", "--mu", "0.3"]),
        ("perf-wide-auto", "wide", []),
        ("perf-multi-auto", "multi", []),
        ("perf-multi-accelerated", "multi", ["--variant", "accelerated"]),
        ("perf-multi-paper", "multi", ["--variant", "paper"]),
        ("perf-multi-dcd", "multi", ["--variant", "dcd"]),
        ("perf-multi-selective", "multi", ["--variant", "selective"]),
        ("perf-nowarm", "binary", ["--no-warm-state"]),
        ("perf-selective-nowarm", "binary", ["--variant", "selective", "--no-warm-state"]),
        # auto with parameters of every row: the row it picks reads its own
        ("perf-auto-tuned", "binary", ["--mu", "0.3", "--max-inner", "7", "--no-shrinking"]),
        ("perf-wide-auto-tuned", "wide", ["--mu", "0.3", "--no-shrinking", "--inner-mb", "1"]),
        # C sweeps (the model at the best C on the store itself)
        ("perf-sweep-auto", "binary", ["--C", "0.5,2", "--validation", "@binary"]),
        (
            "perf-sweep-paper",
            "binary",
            ["--C", "0.5,2", "--validation", "@binary", "--variant", "paper"],
        ),  # fmt: skip
        (
            "perf-sweep-svmperf",
            "binary",
            ["--C", "0.5,2", "--validation", "@binary", "--variant", "svmperf"],
        ),  # fmt: skip
        (
            "perf-sweep-dcd",
            "binary",
            ["--C", "0.5,2", "--validation", "@binary", "--variant", "dcd"],
        ),  # fmt: skip
        ("perf-sweep-multi", "multi", ["--C", "0.5,2", "--validation", "@multi"]),
    ]
    runs += [(n, s, "perf", f) for n, s, f in perf]
    runs.append(("smo-multi", "multi", "smo", []))
    # warm starts (#47): the dual solvers' C sweeps (each C from the previous one) and
    # `--init` from a model above (@@NAME) at another C, and a refusal
    sweep = ["--C", "0.5,2", "--validation", "@binary"]
    runs += [
        ("smo-sweep", "binary", "smo", sweep),
        ("smo-cw-sweep", "binary", "smo", [*sweep, "--class-weight", "pos=3"]),
        ("active-set-sweep", "binary", "active-set", sweep),
        ("irwls-sweep", "binary", "irwls", sweep),
        ("smo-init", "binary", "smo", ["--C", "2", "--init", "@@smo-wss2"]),
        ("active-set-init", "binary", "active-set", ["--C", "2", "--init", "@@active-set-sprint"]),
        ("irwls-init", "binary", "irwls", ["--C", "2", "--init", "@@irwls-random"]),
        ("perf-init", "binary", "perf", ["--C", "2", "--init", "@@perf-auto"]),
        (
            "perf-dcd-init",
            "binary",
            "perf",
            ["--C", "2", "--variant", "dcd", "--init", "@@perf-dcd"],
        ),
        ("perf-multi-init", "multi", "perf", ["--C", "2", "--init", "@@perf-multi-auto"]),
        ("smo-multi-init", "multi", "smo", ["--C", "2", "--init", "@@smo-multi"]),
        ("smo-init-perf-refused", "binary", "smo", ["--init", "@@perf-auto"]),
    ]
    return runs


def train(out: Path, only: str | None = None) -> None:
    global _HOME
    import ooc_svm

    out.mkdir(parents=True, exist_ok=True)
    _HOME = out.resolve()
    code = Path(ooc_svm.__file__).resolve().parents[1]
    child = subprocess.run(
        [sys.executable, "-c", "import ooc_svm; print(ooc_svm.__file__)"],
        capture_output=True, text=True, cwd=_HOME,
    ).stdout.strip()  # fmt: skip
    if Path(child).resolve().parents[1] != code:
        raise SystemExit(f"the runs would import {child}, not the ooc_svm of {code}")
    head = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    print(f"ooc_svm from {code} (commit {head or 'unknown'})", flush=True)
    (out / "code.txt").write_text(f"{code}\n{head}\n")
    stores = _stores(out / "stores")
    models = out / "models"
    models.mkdir(parents=True, exist_ok=True)
    for name, store, solver, flags in _runs():
        if only and only not in name:
            continue
        dest = models / name
        if dest.exists() or (models / f"{name}.error").exists():
            continue
        flags = [
            str(models / f[2:]) if f.startswith("@@") else str(stores[f[1:]]) if f[:1] == "@" else f
            for f in flags
        ]
        args = ["train", "--solver", solver, str(stores[store]), "-o", str(dest), *flags]
        r = _cli(*args)
        if r.returncode:
            last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
            (models / f"{name}.error").write_text(last + "\n")
            print(f"{name}: refused/failed: {last}", flush=True)
        else:
            print(f"{name}: trained", flush=True)
    ck = models / "perf-checkpoint"
    if (not only or only in ck.name) and not ck.exists():
        ckdir = out / "checkpoint"
        r = _cli("train", "--solver", "perf", str(stores["binary"]), "-o", str(ck),
                 "--checkpoint", str(ckdir))  # fmt: skip
        print(f"{ck.name}: {'trained' if not r.returncode else r.stderr.strip()}", flush=True)


def _strip(doc: object, root: str) -> object:
    """``doc`` without the timing and path keys, ``root`` (the folder) in strings as OUT."""
    if isinstance(doc, dict):
        return {
            k: _strip(v, root) for k, v in doc.items() if not any(s in k.lower() for s in SKIP_KEYS)
        }
    if isinstance(doc, list):
        return [_strip(v, root) for v in doc]
    if isinstance(doc, str):
        return doc.replace(root, "OUT")
    return doc


def _arrays(a: Path, b: Path) -> list[str]:
    """Names of the arrays that differ between two models (dtype, shape or bytes)."""
    out = []
    with np.load(a / "arrays.npz") as za, np.load(b / "arrays.npz") as zb:
        for k in sorted(set(za.files) | set(zb.files)):
            if k not in za.files or k not in zb.files:
                out.append(k)
                continue
            x, y = za[k], zb[k]
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                out.append(k)
    return out


def _same_model(a: Path, b: Path, unstable: set[str]) -> list[str]:
    why = []
    ra, rb = str(a.parents[1].resolve()), str(b.parents[1].resolve())
    ja = _strip(json.loads((a / "model.json").read_text()), ra)
    jb = _strip(json.loads((b / "model.json").read_text()), rb)
    if ja != jb:
        why.append(f"model.json differs: {_json_diff(ja, jb)}")
    for k in _arrays(a, b):
        if k in unstable:
            why.append(f"array {k} differs, as it does between two runs of the first's code")
        else:
            why.append(f"array {k} differs")
    return why


def _json_diff(a: object, b: object, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _json_diff(a.get(k), b.get(k), f"{path}.{k}")
    return f"{path or '.'}: {a!r} vs {b!r}"


def compare(a: Path, b: Path, repeats: list[Path] | None = None) -> int:
    """Compare the runs of ``a`` and ``b``; ``repeats``: other runs of ``a``'s code, whose
    differences from ``a`` (arrays that are not the same from run to run) are told apart."""
    names = sorted(
        {p.name for p in (a / "models").iterdir()} | {p.name for p in (b / "models").iterdir()}
    )
    bad = 0
    for name in names:
        pa, pb = a / "models" / name, b / "models" / name
        if not pa.exists() or not pb.exists():
            print(f"DIFF  {name}: only in {'the first' if pa.exists() else 'the second'}")
            bad += 1
            continue
        if name.endswith(".error"):
            ea, eb = pa.read_text().strip(), pb.read_text().strip()
            # a message naming a model of the folder (``--init @@NAME``) names it as OUT
            ea = ea.replace(str(a.resolve()), "OUT").replace(str(a), "OUT")
            eb = eb.replace(str(b.resolve()), "OUT").replace(str(b), "OUT")
            same = ea == eb
            print(f"{'same' if same else 'DIFF'}  {name}: {ea}" + ("" if same else f" | {eb}"))
            bad += not same
            continue
        unstable: set[str] = set()
        for repeat in repeats or []:
            if (repeat / "models" / name).exists():
                unstable |= set(_arrays(pa, repeat / "models" / name))
        why = _same_model(pa, pb, unstable)
        real = [w for w in why if "between two runs" not in w]
        tag = "DIFF" if real else ("same*" if why else "same")
        print(f"{tag}  {name}" + "".join(f"\n      {w}" for w in why))
        bad += bool(real)
    print(f"{len(names) - bad} of {len(names)} the same (same*: but for arrays that differ "
          "between two runs of the same code)")  # fmt: skip
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train every run into OUT (runs already there are kept)")
    t.add_argument("out", type=Path)
    t.add_argument("--only", default=None, help="the runs whose name contains this")
    c = sub.add_parser("compare", help="compare two folders written by train")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument(
        "--repeat",
        type=Path,
        action="append",
        help="another train of A's code (repeatable): arrays it changes are not counted",
    )
    args = ap.parse_args()
    if args.cmd == "train":
        train(args.out, args.only)
        return 0
    return compare(args.a, args.b, args.repeat)


if __name__ == "__main__":
    sys.exit(main())
