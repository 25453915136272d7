#!/usr/bin/env python
"""Calibration on a9a.t: LIBSVM ``-b 1`` beside ooc-svm's Platt fit over shard folds.

Both sides train the same SVM (kernel, C, γ) on the first ``--rows`` rows of a9a:

- **LIBSVM** (libsvm-official): ``svm_train -b 1`` — 5-fold CV inside LIBSVM (random rows),
  Platt/Lin-Lin-Weng sigmoid on those decision values, then ``svm_predict -b 1`` on a9a.t;
- **ooc-svm**: the rows ingested into a Zarr store of ``--shard-rows``-row shards;
  :func:`ooc_svm.evaluation.cross_validation.cross_val_decision_values` trains one model per
  fold of *shards* (``--folds``, through ``ooc_svm.train`` on ``ShardSubsetView`` views),
  :func:`fit_platt` fits (A, B) on the held-out decision values, the final model is trained
  on every shard, and a9a.t is scored with ``sigmoid_predict``.

Printed: (A, B) of both, Brier score, log loss, expected calibration error (ECE) and accuracy on
a9a.t, the mean / max |p_ooc − p_libsvm| per row, and the two 10-bin reliability tables side by
side. Training times are printed for orientation only (different programs: a ratio, not a
benchmark of the solvers). The a9a store is a few MB, written by this script: warm.

Usage::

    python scripts/bench_probability.py [--data ../shared/data] [--rows 8000]
        [--kernel rbf|linear] [--C 1] [--gamma 0.05] [--solver smo|perf] [--folds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _libsvm_rows(X) -> list[dict]:
    return [
        {int(j) + 1: float(v) for j, v in zip(X.indices[a:b], X.data[a:b], strict=True)}
        for a, b in zip(X.indptr[:-1], X.indptr[1:], strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--data", default=os.environ.get("OOC_SVM_DATA", str(ROOT.parent / "shared/data"))
    )
    ap.add_argument("--rows", type=int, default=8000, help="first N rows of a9a (0: all)")
    ap.add_argument("--kernel", choices=["rbf", "linear"], default="rbf")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--solver", default=None, help="ooc-svm solver (default: smo, perf if linear)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--shard-rows", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bins", type=int, default=10)
    args = ap.parse_args(argv)

    from libsvm import svmutil
    from sklearn.datasets import load_svmlight_file

    import ooc_svm
    from ooc_svm.evaluation.cross_validation import cross_val_decision_values, fit_platt
    from ooc_svm.model.probability import calibration, sigmoid_predict

    data = Path(args.data)
    train_txt = data / "a9a" / "a9a"
    test_txt = data / "a9a" / "a9a.t.gz"
    if not (train_txt.exists() and test_txt.exists()):
        ap.error(f"a9a not found under {data}: pass --data or set $OOC_SVM_DATA")
    X, y = load_svmlight_file(str(train_txt), n_features=123)
    Xt, yt = load_svmlight_file(str(test_txt), n_features=123)
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    solver = args.solver or ("smo" if args.kernel == "rbf" else "perf")
    params = {"C": args.C}
    if solver != "perf":
        params["kernel"] = args.kernel
        if args.kernel == "rbf":
            params["gamma"] = args.gamma
    print(
        f"a9a: {X.shape[0]} training rows, a9a.t: {Xt.shape[0]} rows; kernel={args.kernel} "
        f"C={args.C:g}" + (f" gamma={args.gamma:g}" if args.kernel == "rbf" else "")
    )

    # ---- LIBSVM -b 1
    t0 = time.perf_counter()
    opts = f"-s 0 -t {2 if args.kernel == 'rbf' else 0} -c {args.C!r} -b 1 -q"
    if args.kernel == "rbf":
        opts += f" -g {args.gamma!r}"
    m = svmutil.svm_train([float(v) for v in y], _libsvm_rows(X), opts)
    t_lib = time.perf_counter() - t0
    _, _, prob = svmutil.svm_predict([0.0] * Xt.shape[0], _libsvm_rows(Xt), m, "-b 1 -q")
    pos_col = [float(v) for v in m.get_labels()].index(1.0)
    p_lib = np.array(prob)[:, pos_col]
    A_lib, B_lib = float(m.probA[0]), float(m.probB[0])
    if pos_col != 0:  # LIBSVM's sigmoid is P(label[0]); ours is P(+1)
        A_lib, B_lib = -A_lib, -B_lib

    # ---- ooc-svm: shard folds
    tmp = tempfile.mkdtemp(prefix="bench-prob-")
    try:
        sub = os.path.join(tmp, "train.svm")
        from sklearn.datasets import dump_svmlight_file

        dump_svmlight_file(X, y, sub, zero_based=False)
        store_path = os.path.join(tmp, "train.zarr")
        ooc_svm.ingest(sub, store_path, shard_rows=args.shard_rows, n_features=123)
        store = ooc_svm.open_store(store_path)
        t0 = time.perf_counter()
        cv = cross_val_decision_values(
            store, args.folds, args.seed, train=ooc_svm.train, solver=solver, **params
        )
        probA, probB = fit_platt(cv)
        res = ooc_svm.train(store, solver=solver, **params)
        t_ooc = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    A, B = float(probA[0]), float(probB[0])
    dec = res.model.decision_function(Xt)
    p_ooc = sigmoid_predict(dec, A, B)

    print(
        f"{store.n_shards} shards of {args.shard_rows} rows, {args.folds} folds of shards; "
        f"ooc-svm solver={solver}"
    )
    print(
        f"sigmoid P(+1|f)=1/(1+exp(A f+B)):  LIBSVM A={A_lib:.6f} B={B_lib:.6f}   "
        f"ooc-svm A={A:.6f} B={B:.6f}"
    )
    print(f"training (CV + final model): LIBSVM {t_lib:.2f} s, ooc-svm {t_ooc:.2f} s")
    cal_lib = calibration(yt > 0, p_lib, args.bins)
    cal_ooc = calibration(yt > 0, p_ooc, args.bins)
    acc_lib = float(np.mean((p_lib > 0.5) == (yt > 0)))
    acc_ooc = float(np.mean((dec > 0) == (yt > 0)))
    print(f"\n{'a9a.t':<10} {'Brier':>8} {'logloss':>8} {'ECE':>8} {'accuracy':>9}")
    for name, c, a in (("LIBSVM", cal_lib, acc_lib), ("ooc-svm", cal_ooc, acc_ooc)):
        print(f"{name:<10} {c.brier:8.5f} {c.log_loss:8.5f} {c.ece:8.5f} {a:9.4f}")
    d = np.abs(p_ooc - p_lib)
    print(f"|p_ooc - p_libsvm| per row: mean {d.mean():.4f}, max {d.max():.4f}")
    print(f"\nreliability ({args.bins} bins): rows / mean p / observed fraction of +1")
    print(
        f"{'bin':>13} | {'LIBSVM rows':>11} {'mean p':>7} {'obs':>7} | "
        f"{'ooc rows':>8} {'mean p':>7} {'obs':>7}"
    )
    for b in range(args.bins):
        lo, hi = cal_lib.edges[b], cal_lib.edges[b + 1]
        print(
            f"[{lo:.2f}, {hi:.2f}) | {cal_lib.count[b]:11d} {cal_lib.mean_predicted[b]:7.4f} "
            f"{cal_lib.fraction_positive[b]:7.4f} | {cal_ooc.count[b]:8d} "
            f"{cal_ooc.mean_predicted[b]:7.4f} {cal_ooc.fraction_positive[b]:7.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
