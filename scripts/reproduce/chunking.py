#!/usr/bin/env python
"""Plain chunking (Vapnik's chunking, as benchmarked in Platt 1998 section 3): the comparator
of ``platt1998.py``. Not part of the package.

The algorithm (Platt 1998, section 2.1 / Burges 1998): solve the dual QP exactly on a chunk,
keep the chunk's support vectors (every example with alpha > 0, bound ones included), add
the ``--chunk`` examples outside the chunk that violate the KKT conditions most (margin
y f(x) < 1 - tol at alpha = 0), and repeat until no example outside the chunk violates them.
The chunk's QP uses its dense kernel matrix (the "matrix computation" whose size grows as the
square of the number of non-zero multipliers); the exact inner solver is LIBSVM's, through
scikit-learn's ``SVC(kernel="precomputed")`` at a tight tolerance (1e-6), in place of
Platt's projected conjugate gradient (the QP's solution is the same to that tolerance).
When the chunk's matrix would exceed ``--memory-mb`` the run stops with ``"too_large"``: the
analogue of the paper's "N/A" (matrices too large for 128 MB).

Usage::

    python scripts/reproduce/chunking.py DATA.txt --C 0.05 --kernel linear [--gamma 0.05]

prints one JSON object: seconds (wall), cpu, n_sv, n_bound, n_free, steps, chunk_peak.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp


def kernel(A: sp.csr_matrix, B: sp.csr_matrix, kind: str, gamma: float) -> np.ndarray:
    """Dense kernel block K(A, B)."""
    K = np.asarray((A @ B.T).todense(), dtype=np.float64)
    if kind == "linear":
        return K
    na = np.asarray(A.multiply(A).sum(axis=1)).ravel()
    nb = np.asarray(B.multiply(B).sum(axis=1)).ravel()
    K *= 2.0
    K -= na[:, None]
    K -= nb[None, :]
    K *= gamma
    np.exp(K, out=K)
    return K


def chunking(
    X: sp.csr_matrix,
    y: np.ndarray,
    C: float,
    kind: str,
    gamma: float,
    chunk: int = 500,
    tol: float = 1e-3,
    memory_mb: float = 1024.0,
) -> dict:
    """Vapnik chunking with an exact inner QP; see the module docstring."""
    from sklearn.svm import SVC

    n = X.shape[0]
    W = np.arange(min(chunk, n))
    steps, peak = 0, 0
    coef = np.zeros(0)
    S = np.zeros(0, dtype=np.int64)
    b = 0.0
    while True:
        if len(W) ** 2 * 8 / 2**20 > memory_mb:
            return {"too_large": True, "steps": steps, "chunk_peak": int(len(W))}
        peak = max(peak, len(W))
        steps += 1
        XW = X[W]
        K = kernel(XW, XW, kind, gamma)
        yW = y[W]
        if len(np.unique(yW)) < 2:  # one class only: every alpha is 0 for now
            S, coef, b = W[:0], np.zeros(0), float(yW[0])
        else:
            svc = SVC(C=C, kernel="precomputed", tol=1e-6, shrinking=False, cache_size=200)
            svc.fit(K, yW)
            S = W[svc.support_]
            coef = svc.dual_coef_.ravel().astype(np.float64)  # y_i alpha_i
            b = float(svc.intercept_[0])
        del K
        inW = np.zeros(n, dtype=bool)
        inW[W] = True
        rest = np.flatnonzero(~inW)
        viol = np.zeros(len(rest))
        XS = X[S]
        for lo in range(0, len(rest), 4096):
            idx = rest[lo : lo + 4096]
            f = (kernel(X[idx], XS, kind, gamma) @ coef + b) if len(S) else np.full(len(idx), b)
            viol[lo : lo + 4096] = 1.0 - y[idx] * f
        bad = np.flatnonzero(viol > tol)
        if len(bad) == 0:
            break
        worst = rest[bad[np.argsort(-viol[bad], kind="stable")[:chunk]]]
        W = np.concatenate([S, worst])
    alpha = np.abs(coef)
    n_bound = int(np.sum(alpha >= C * (1 - 1e-8)))
    return {
        "n_sv": int(len(S)),
        "n_bound": n_bound,
        "n_free": int(len(S)) - n_bound,
        "steps": steps,
        "chunk_peak": int(peak),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("data", help="SVMlight text file")
    ap.add_argument("--n-features", type=int, default=None)
    ap.add_argument("--C", type=float, required=True)
    ap.add_argument("--kernel", choices=("linear", "rbf"), default="linear")
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--chunk", type=int, default=500, help="examples added per step")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--memory-mb", type=float, default=1024.0)
    args = ap.parse_args()
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(args.data, n_features=args.n_features)
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.where(y > 0, 1.0, -1.0)
    c0, t0 = time.process_time(), time.perf_counter()
    res = chunking(X, y, args.C, args.kernel, args.gamma, args.chunk, args.tol, args.memory_mb)
    res["seconds"] = time.perf_counter() - t0
    res["cpu"] = time.process_time() - c0
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
