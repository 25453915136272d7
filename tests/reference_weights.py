"""Reference optima of the class-weighted soft-margin SVM, for solver tests.

Not a test module: tests import it (``from reference_weights import ...``; pytest puts
``tests/`` on ``sys.path``). The conventions are those of docs/GUIDE.md, "Class weights".

The weighted problem, in LIBLINEAR units, with per-class costs ``C_k = C · weight_k``
(LIBLINEAR / LIBSVM ``-wk weight``; classes without a weight keep ``C``)::

    primal  P(w, b) = ½‖w‖² + Σ_i C_{y_i} max(0, 1 − y_i (w·x_i + b))
    dual    D(α)    = Σ_i α_i − ½ ‖Σ_i α_i y_i x_i‖²,   0 ≤ α_i ≤ C_{y_i}   (+ Σ α_i y_i = 0
                                                        when b is a free, unregularised bias)

Three references:

- :func:`liblinear_reference` — liblinear-official ``-s 3`` (L2-regularised L1-loss SVC, dual
  coordinate descent) with ``-wk``: no bias, or a *regularised* bias feature with ``-B value``
  (w then includes the bias weight; the model of ``--solver perf --bias``). Primal from the
  returned w; dual from LIBLINEAR's own printed ``Objective value`` (= −D, printed with 6
  decimals), captured through its print-function hook.
- :func:`libsvm_reference` — libsvm-official ``-s 0`` with ``-wk``: linear or RBF kernel,
  *unregularised* bias (the model of ``smo``, ``active-set``, ``irwls``). Primal and dual from
  the model's ``y_i α_i`` and ``rho``, evaluated in float64 here.
- :func:`dcd_reference` — the same dual coordinate descent as LIBLINEAR ``-s 3`` (Hsieh et al.
  2008), in numba, without LIBLINEAR's hard-coded iteration cap: LIBLINEAR stops after its
  cap with a warning (``max_iter_reached``) and on w8a with ``-w1 16.8`` (balanced) leaves a
  0.6 % primal–dual gap, too loose to test a solver against; this one runs until the largest
  projected-gradient violation is below ``eps`` and reports its own gap.
- :func:`qp_reference` — an independent check on tiny problems: the dual QP solved by
  ``scipy.optimize.minimize`` (SLSQP, box bounds ``[0, C_{y_i}]`` and the equality for a free
  bias), then w, b and the primal recovered from α.

Labels: any two values; ``positive`` (default: the larger) is +1, the other −1. Weights are
keyed by the labels as stored (e.g. ``{1: 10}`` or ``{1.0: 10.0}``).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp
from numba import njit


def signed_labels(y, positive=None) -> np.ndarray:
    """±1 labels: +1 where ``y == positive`` (default: the larger of the two label values)."""
    y = np.asarray(y, dtype=np.float64)
    vals = np.unique(y)
    if vals.size > 2:
        raise ValueError(f"two classes expected, got {vals.size}")
    pos = vals.max() if positive is None else float(positive)
    return np.where(y == pos, 1.0, -1.0)


def class_costs(y, C: float, weights: Mapping | None = None) -> np.ndarray:
    """Per-row cost ``C · weights.get(y_i, 1)`` (LIBLINEAR / LIBSVM ``-wi``)."""
    y = np.asarray(y, dtype=np.float64)
    c = np.full(y.shape, float(C))
    for label, w in (weights or {}).items():
        c[y == float(label)] *= float(w)
    return c


def balanced_weights(y) -> dict[float, float]:
    """scikit-learn's ``class_weight="balanced"``: ``n_samples / (n_classes · count_k)``."""
    vals, counts = np.unique(np.asarray(y, dtype=np.float64), return_counts=True)
    n = counts.sum()
    return {float(v): float(n / (vals.size * c)) for v, c in zip(vals, counts, strict=True)}


def primal_objective(X, y_pm, w, b: float, costs) -> float:
    """``½‖w‖² + Σ_i c_i max(0, 1 − y_i (x_i·w + b))`` (``w`` without the bias)."""
    w = np.asarray(w, dtype=np.float64)
    margins = np.asarray(X @ w).ravel() + b
    xi = np.maximum(0.0, 1.0 - np.asarray(y_pm) * margins)
    return float(0.5 * w @ w + np.dot(costs, xi))


def _weight_opts(weights: Mapping | None) -> str:
    parts = []
    for label, w in (weights or {}).items():
        lab = float(label)
        if lab != int(lab):
            raise ValueError(f"LIBLINEAR / LIBSVM class weights need integer labels, got {label}")
        parts.append(f"-w{int(lab)} {float(w)!r}")
    return " ".join(parts)


def liblinear_reference(
    X,
    y,
    C: float,
    weights: Mapping | None = None,
    *,
    bias: float = -1.0,
    eps: float = 1e-6,
    seed: int = 0,
) -> dict:
    """Optimum of the weighted problem by liblinear-official ``-s 3 -wk``.

    Parameters
    ----------
    X : sparse matrix (n, d)
    y : array_like (n,)
        Two label values (integers, as LIBLINEAR's ``-wk`` needs).
    C : float
    weights : mapping label → weight, optional
    bias : float
        ``-B``: < 0 no bias; ≥ 0 a bias feature of that value (regularised, as in LIBLINEAR).
    eps : float
        ``-e``: LIBLINEAR's stopping tolerance (maximal dual violation).
    seed : int
        ``srand(seed)`` of the C library before training: LIBLINEAR shuffles with ``rand()``,
        so without it two runs stopped by the iteration cap differ.

    Returns
    -------
    dict
        ``w`` (d,), ``b`` (bias weight × bias value, 0 without bias), ``primal`` (with the bias
        weight in ½‖w‖² when ``bias >= 0``), ``dual`` (LIBLINEAR's own value, 6 decimals),
        ``costs`` (per row), ``y`` (±1).
    """
    from liblinear import liblinear as ll
    from liblinear import liblinearutil as llu

    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ypm = signed_labels(y)
    costs = class_costs(y, C, weights)
    lines: list[str] = []
    cb = ll.PRINT_STRING_FUN(lambda s: lines.append(s.decode()))
    param = llu.parameter(
        f"-s 3 -c {float(C)!r} -e {float(eps)!r} -B {float(bias)!r} " + _weight_opts(weights)
    )
    param.print_func = cb
    prob = llu.problem(y.tolist(), X)
    ctypes.CDLL(None).srand(int(seed))
    m = llu.train(prob, param)
    ll.liblinear.set_print_string_function(ll.ctypes_print_null)  # drop the hook to `cb`
    d = X.shape[1]
    w, bb = m.get_decfun()
    w = np.asarray(w[:d], dtype=np.float64)
    if bias < 0:
        bb = 0.0
    # LIBLINEAR's w scores labels[0]; orient it to the +1 class
    if float(m.get_labels()[0]) != float(y[ypm > 0][0]):
        w, bb = -w, -bb
    bw = bb / bias if bias > 0 else 0.0  # the bias feature's weight
    primal = primal_objective(X, ypm, w, bb, costs) + 0.5 * bw * bw
    found = re.findall(r"Objective value = (-?[0-9.eE+-]+)", "".join(lines))
    dual = -float(found[-1]) if found else None
    text = "".join(lines)
    return {
        "w": w,
        "b": float(bb),
        "primal": primal,
        "dual": dual,
        "costs": costs,
        "y": ypm,
        "log": text,
        "max_iter_reached": "reaching max number of iterations" in text,
    }


def libsvm_reference(
    X,
    y,
    C: float,
    weights: Mapping | None = None,
    *,
    kernel: str = "linear",
    gamma: float | None = None,
    eps: float = 1e-6,
    cache_mb: float = 200.0,
) -> dict:
    """Optimum of the weighted problem (free bias) by libsvm-official ``-s 0 -wk``.

    Returns
    -------
    dict
        ``alpha`` (n,), ``b``, ``primal``, ``dual``, ``costs``, ``y`` (±1); ``w`` for linear.
    """
    from libsvm import svmutil

    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ypm = signed_labels(y)
    costs = class_costs(y, C, weights)
    t = {"linear": 0, "rbf": 2}[kernel]
    g = f" -g {float(gamma)!r}" if kernel == "rbf" and gamma is not None else ""
    opts = f"-s 0 -t {t}{g} -c {float(C)!r} -e {float(eps)!r} -m {float(cache_mb)!r} -q "
    m = svmutil.svm_train(y.tolist(), X, opts + _weight_opts(weights))
    idx = np.asarray(m.get_sv_indices(), dtype=np.int64) - 1  # 1-based
    coef = np.asarray(m.get_sv_coef(), dtype=np.float64).ravel()
    b = -float(m.rho[0])
    if float(m.get_labels()[0]) != float(y[ypm > 0][0]):  # LIBSVM scores labels[0]
        coef, b = -coef, -b
    alpha = np.zeros(X.shape[0])
    alpha[idx] = coef * ypm[idx]  # coef = y_i α_i
    Xs = X[idx]
    if kernel == "linear":
        w = np.asarray(Xs.T @ coef).ravel()
        quad = float(w @ w)
        f = np.asarray(X @ w).ravel() + b
    else:
        gam = float(gamma) if gamma is not None else 1.0 / X.shape[1]
        w = None
        K_ss = _rbf(Xs, Xs, gam)
        quad = float(coef @ K_ss @ coef)
        f = _rbf(X, Xs, gam) @ coef + b
    primal = 0.5 * quad + float(np.dot(costs, np.maximum(0.0, 1.0 - ypm * f)))
    dual = float(alpha.sum()) - 0.5 * quad
    out = {"alpha": alpha, "b": b, "primal": primal, "dual": dual, "costs": costs, "y": ypm}
    if w is not None:
        out["w"] = w
    return out


def _rbf(A, B, gamma: float) -> np.ndarray:
    a2 = np.asarray(A.multiply(A).sum(axis=1)).ravel()
    b2 = np.asarray(B.multiply(B).sum(axis=1)).ravel()
    d = a2[:, None] + b2[None, :] - 2.0 * np.asarray((A @ B.T).todense())
    return np.exp(-gamma * np.maximum(d, 0.0))


@njit(cache=True)
def _dcd(indptr, indices, data, y, costs, qii, w, alpha, perm_seed, eps, max_epochs):
    n = y.shape[0]
    np.random.seed(perm_seed)  # numba's own generator (per thread), seeded
    order = np.arange(n)
    epoch = 0
    viol = np.inf
    while epoch < max_epochs:
        np.random.shuffle(order)
        viol = 0.0
        for k in range(n):
            i = order[k]
            g = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                g += w[indices[p]] * data[p]
            g = y[i] * g - 1.0
            pg = g
            if alpha[i] <= 0.0:
                pg = min(g, 0.0)
            elif alpha[i] >= costs[i]:
                pg = max(g, 0.0)
            if abs(pg) > viol:
                viol = abs(pg)
            if pg != 0.0 and qii[i] > 0.0:
                a = min(max(alpha[i] - g / qii[i], 0.0), costs[i])
                d = (a - alpha[i]) * y[i]
                alpha[i] = a
                for p in range(indptr[i], indptr[i + 1]):
                    w[indices[p]] += d * data[p]
        epoch += 1
        if viol < eps:
            break
    return epoch, viol


def dcd_reference(
    X,
    y,
    C: float,
    weights: Mapping | None = None,
    *,
    bias: float = -1.0,
    eps: float = 1e-6,
    max_epochs: int = 200_000,
    seed: int = 0,
) -> dict:
    """Weighted problem without bias (``bias < 0``) or with a regularised bias feature, by dual
    coordinate descent to ``max |projected gradient| < eps`` (no iteration cap in practice).

    Returns
    -------
    dict
        ``w`` (d,), ``b`` (bias weight × bias), ``alpha``, ``primal``, ``dual``, ``epochs``,
        ``violation``, ``costs``, ``y`` (±1).
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ypm = signed_labels(y)
    costs = class_costs(y, C, weights)
    if bias >= 0:
        X = sp.hstack([X, np.full((X.shape[0], 1), float(bias))], format="csr")
    X.sort_indices()
    qii = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    w = np.zeros(X.shape[1])
    alpha = np.zeros(X.shape[0])
    epochs, viol = _dcd(
        X.indptr.astype(np.int64),
        X.indices.astype(np.int64),
        X.data,
        ypm,
        costs,
        qii,
        w,
        alpha,
        int(seed),
        float(eps),
        int(max_epochs),
    )
    # recompute w from alpha (no drift from the incremental updates)
    w = np.asarray(X.T @ (alpha * ypm)).ravel()
    primal = primal_objective(X, ypm, w, 0.0, costs)
    dual = float(alpha.sum() - 0.5 * w @ w)
    d = w.size - (1 if bias >= 0 else 0)
    return {
        "w": w[:d],
        "b": float(w[d] * bias) if bias >= 0 else 0.0,
        "alpha": alpha,
        "primal": primal,
        "dual": dual,
        "epochs": int(epochs),
        "violation": float(viol),
        "costs": costs,
        "y": ypm,
    }


def qp_reference(X, y, C: float, weights: Mapping | None = None, *, free_bias: bool = True) -> dict:
    """The weighted dual QP solved by SciPy (SLSQP) — for tiny problems (n ≲ 200), linear kernel.

    ``free_bias=True``: unregularised b with ``Σ α_i y_i = 0`` (LIBSVM); ``False``: no bias
    (LIBLINEAR without ``-B``; add a constant column to X for a regularised bias).

    Returns
    -------
    dict
        ``alpha``, ``w``, ``b``, ``primal``, ``dual``, ``costs``, ``y`` (±1).
    """
    from scipy.optimize import minimize

    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ypm = signed_labels(y)
    costs = class_costs(y, C, weights)
    Z = np.asarray(X.multiply(ypm[:, None]).todense())  # rows y_i x_i
    Q = Z @ Z.T
    n = Q.shape[0]

    def fun(a):
        Qa = Q @ a
        return 0.5 * a @ Qa - a.sum(), Qa - 1.0

    cons = [{"type": "eq", "fun": lambda a: a @ ypm, "jac": lambda a: ypm}] if free_bias else []
    res = minimize(
        fun,
        np.zeros(n),
        jac=True,
        method="SLSQP",
        bounds=[(0.0, c) for c in costs],
        constraints=cons,
        options={"ftol": 1e-14, "maxiter": 2000},
    )
    a = np.clip(res.x, 0.0, costs)
    w = Z.T @ a
    b = 0.0
    if free_bias:
        # the primal is convex and piecewise linear in b with kinks at y_i − w·x_i: take the
        # best kink (exact for this w, whatever SLSQP's accuracy on α)
        kinks = ypm - np.asarray(X @ w).ravel()
        b = float(min(kinks, key=lambda t: primal_objective(X, ypm, w, t, costs)))
    return {
        "alpha": a,
        "w": w,
        "b": b,
        "primal": primal_objective(X, ypm, w, b, costs),
        "dual": float(a.sum() - 0.5 * w @ w),
        "costs": costs,
        "y": ypm,
        "success": bool(res.success),
    }
