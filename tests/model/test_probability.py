"""Probability outputs (Platt scaling, pairwise coupling), shard folds and calibration.

How the comparison with LIBSVM is made exact
--------------------------------------------
LIBSVM's ``sigmoid_train`` is a ``static`` function of svm.cpp: the libsvm-official wheel does
not export it (``nm -D libsvm/clib*.so`` lists ``svm_train``, ``svm_predict_values``,
``svm_predict_probability`` … but no ``sigmoid_train``). What ``svm_train -b 1`` does instead
is, per pair of classes, ``svm_binary_svc_probability``: shuffle the pair's rows with the C
library's ``rand()`` (``j = i + rand() % (l - i)``), train 5 sub-models with ``-c 1 -w+1 C_p
-w-1 C_n``, score each held-out fifth with ``svm_predict_values`` (times the sub-model's first
label), and call ``sigmoid_train`` on those decision values. The wheel's ``clib`` calls the
process's glibc ``rand()``, so after ``srand(seed)`` (through ``ctypes``) the shuffle is
reproducible: :func:`libsvm_cv_decision_values` replays the same ``rand()`` calls, trains the
same 5 sub-models *with LIBSVM itself* (its public Python API) and collects the same decision
values. Those decision values are the fixed set both sides fit: ours with
:func:`ooc_svm.model.probability.sigmoid_train`, LIBSVM's inside ``svm_train -b 1`` after the same
``srand(seed)``, read back as ``probA`` / ``probB``. Nothing is transcribed by hand, and if the
replay drifted from LIBSVM's internal run the (A, B) comparison would fail, not pass.
The probabilities are compared on held-out rows: ours = ``sigmoid_predict`` (binary) or
``ovo_probability`` (pairwise coupling) of LIBSVM's decision values with *our* (A, B), LIBSVM's
= ``svm_predict -b 1``.
"""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path

import numpy as np
import pytest

from ooc_svm.evaluation.cross_validation import (
    cross_val_decision_values,
    fit_platt,
    fold_assignment,
)
from ooc_svm.model.probability import (
    calibration,
    multiclass_probability,
    ovo_probability,
    ovr_probability,
    sigmoid_predict,
    sigmoid_train,
)

svmutil = pytest.importorskip("libsvm.svmutil", reason="libsvm-official (dev extra) not installed")

_LIBC = ctypes.CDLL(None)


def _grouped(ys: list[float]) -> tuple[list[float], list[list[int]]]:
    """LIBSVM's ``svm_group_classes``: labels by first appearance (-1/+1 swapped to +1/-1
    for two classes), rows of each class in input order."""
    labels: list[float] = []
    for v in ys:
        if v not in labels:
            labels.append(v)
    if labels == [-1.0, 1.0]:
        labels = [1.0, -1.0]
    return labels, [[i for i, v in enumerate(ys) if v == c] for c in labels]


def libsvm_cv_decision_values(sub_x: list, sub_y: list[float], Cp: float, Cn: float, opts: str):
    """Replay ``svm_binary_svc_probability`` (5 folds, glibc ``rand()`` already seeded)."""
    n = len(sub_y)
    perm = list(range(n))
    for i in range(n):
        j = i + _LIBC.rand() % (n - i)
        perm[i], perm[j] = perm[j], perm[i]
    dec = np.empty(n)
    for f in range(5):
        b, e = f * n // 5, (f + 1) * n // 5
        tr = perm[:b] + perm[e:]
        ty = [sub_y[t] for t in tr]
        if len(set(ty)) < 2:  # LIBSVM's one-class folds
            dec[perm[b:e]] = 0.0 if not ty else ty[0]
            continue
        m = svmutil.svm_train(ty, [sub_x[t] for t in tr], f"{opts} -c 1 -w1 {Cp!r} -w-1 {Cn!r} -q")
        _, _, vals = svmutil.svm_predict([0.0] * (e - b), [sub_x[t] for t in perm[b:e]], m, "-q")
        lab0 = m.get_labels()[0]
        for t, v in zip(perm[b:e], vals, strict=True):
            dec[t] = v[0] * lab0
    return dec


def libsvm_fit(ys, xs, C: float, opts: str, seed: int):
    """LIBSVM ``-b 1`` model plus the cross-validation decision values it fitted, per pair."""
    labels, groups = _grouped(ys)
    _LIBC.srand(seed)
    pairs = []
    for a in range(len(labels)):
        for b in range(a + 1, len(labels)):
            rows = groups[a] + groups[b]
            sub_y = [1.0] * len(groups[a]) + [-1.0] * len(groups[b])
            dec = libsvm_cv_decision_values([xs[i] for i in rows], sub_y, C, C, opts)
            pairs.append((dec, np.array(sub_y)))
    _LIBC.srand(seed)
    model = svmutil.svm_train(ys, xs, f"{opts} -c {C!r} -b 1 -q")
    return model, labels, pairs


def _to_libsvm(X) -> list[dict]:
    X = X.tocsr() if hasattr(X, "tocsr") else X
    if hasattr(X, "indptr"):
        return [
            {int(j) + 1: float(v) for j, v in zip(X.indices[a:b], X.data[a:b], strict=True)}
            for a, b in zip(X.indptr[:-1], X.indptr[1:], strict=True)
        ]
    return [{j + 1: float(v) for j, v in enumerate(row)} for row in X]


def _synthetic(n: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(k, 3))
    lab = rng.integers(0, k, size=n)
    X = centers[lab] + rng.normal(size=(n, 3))
    return X, lab


def _compare_binary(ys, xs, test_x, C, opts, seed):
    model, labels, [(dec, sub_y)] = libsvm_fit(ys, xs, C, opts, seed)
    A, B = sigmoid_train(dec, sub_y)
    # the same fit: LIBSVM's probA / probB from its internal run of the same computation
    assert A == pytest.approx(model.probA[0], rel=1e-9, abs=1e-12)
    assert B == pytest.approx(model.probB[0], rel=1e-9, abs=1e-12)
    _, _, dtest = svmutil.svm_predict([0.0] * len(test_x), test_x, model, "-q")
    _, _, ptest = svmutil.svm_predict([0.0] * len(test_x), test_x, model, "-b 1 -q")
    dtest = np.array([v[0] for v in dtest])
    ours = ovo_probability(dtest[:, None], [A], [B])  # columns in LIBSVM's label order
    ref = np.array(ptest)
    assert np.abs(ours - ref).max() <= 1e-6
    # the unclipped sigmoid is the same number where LIBSVM does not clip
    p = sigmoid_predict(dtest, A, B)
    inside = (ref[:, 0] > 1e-7) & (ref[:, 0] < 1 - 1e-7)
    assert np.abs(p[inside] - ref[inside, 0]).max() <= 1e-6
    return A, B, np.abs(ours - ref).max()


def test_sigmoid_train_reproduces_libsvm_synthetic():
    X, lab = _synthetic(300, 2, seed=5)
    ys = [1.0 if v else -1.0 for v in lab]
    xs = _to_libsvm(X)
    Xt, _ = _synthetic(200, 2, seed=6)
    A, B, diff = _compare_binary(ys[:200], xs[:200], _to_libsvm(Xt), 0.5, "-s 0 -t 0", 7)
    assert A < 0


def test_sigmoid_train_reproduces_libsvm_a9a_rbf(data_path):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(data_path("a9a/a9a")), n_features=123)
    Xt, _ = load_svmlight_file(str(data_path("a9a/a9a.t.gz")), n_features=123)
    xs, ys = _to_libsvm(X[:600]), [float(v) for v in y[:600]]
    A, B, diff = _compare_binary(ys, xs, _to_libsvm(Xt[:2000]), 1.0, "-s 0 -t 2 -g 0.05", 11)
    assert A < 0 and diff <= 1e-6


def test_multiclass_coupling_and_pairwise_sigmoids_reproduce_libsvm():
    X, lab = _synthetic(240, 4, seed=9)
    ys = [float(v) + 1 for v in lab]
    xs = _to_libsvm(X)
    model, labels, pairs = libsvm_fit(ys, xs, 2.0, "-s 0 -t 2 -g 0.3", 13)
    assert [float(v) for v in model.get_labels()] == labels
    probA, probB = [], []
    for p, (dec, sub_y) in enumerate(pairs):
        A, B = sigmoid_train(dec, sub_y)
        assert A == pytest.approx(model.probA[p], rel=1e-9, abs=1e-12)
        assert B == pytest.approx(model.probB[p], rel=1e-9, abs=1e-12)
        probA.append(A)
        probB.append(B)
    Xt, _ = _synthetic(300, 4, seed=10)
    xt = _to_libsvm(Xt)
    _, _, dtest = svmutil.svm_predict([0.0] * len(xt), xt, model, "-q")
    _, _, ptest = svmutil.svm_predict([0.0] * len(xt), xt, model, "-b 1 -q")
    ours = ovo_probability(np.array(dtest), probA, probB)
    assert np.abs(ours - np.array(ptest)).max() <= 1e-6
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=1e-12)


def test_multiclass_probability_consistent_pairs_recover_p():
    # r_ij = p_i / (p_i + p_j) is solved exactly by p (Wu, Lin & Weng 2004, method 2)
    p = np.array([0.5, 0.2, 0.2, 0.1])
    r = p[:, None] / (p[:, None] + p[None, :])
    np.testing.assert_allclose(multiclass_probability(r), p, atol=2e-3)


def test_ovr_probability_normalises():
    d = np.array([[2.0, -1.0, -3.0], [-50.0, -60.0, -70.0], [1e6, -1e6, 0.0]])
    P = ovr_probability(d, [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.all(np.isfinite(P)) and np.all(P >= 0)
    assert np.argmax(P[0]) == 0 and np.argmax(P[1]) == 0 and P[2, 0] == pytest.approx(2 / 3)


def test_extreme_decision_values_no_overflow():
    rng = np.random.default_rng(1)
    f = rng.normal(size=2000)
    y = np.where(f + 0.3 * rng.normal(size=2000) > 0, 1, -1)
    A1, B1 = sigmoid_train(f, y)
    scale = 1e5
    with np.errstate(all="raise"):
        A, B = sigmoid_train(f * scale, y)  # A·f spans ±1e5: exp(±A·f) overflows naively
        p = sigmoid_predict(f * scale, A, B)
    assert np.isfinite([A, B]).all() and np.all(np.isfinite(p))
    assert np.all((p >= 0) & (p <= 1))
    # the optimum is scale-equivariant: the same probabilities as the unscaled fit
    np.testing.assert_allclose(p, sigmoid_predict(f, A1, B1), atol=1e-4)
    # a naive 1/(1+exp(A f + B)) overflows here — the stable form is what keeps this finite
    with pytest.raises(FloatingPointError), np.errstate(over="raise"):
        _ = 1.0 / (1.0 + np.exp(-(f * scale) * 1.0))
    # perfectly separated, huge scores: still finite (the prior-corrected targets bound A, B)
    fs = np.concatenate([np.full(50, -1e8), np.full(30, 1e8)])
    ys = np.concatenate([-np.ones(50), np.ones(30)])
    A, B = sigmoid_train(fs, ys)
    p = sigmoid_predict(np.array([-1e300, -1e8, 0.0, 1e8, 1e300]), A, B)
    assert np.isfinite([A, B]).all() and np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert p[1] < 0.05 and p[3] > 0.95


def test_sigmoid_train_invariant_to_row_order():
    rng = np.random.default_rng(2)
    f = rng.normal(size=5000) * 3
    y = (f + rng.normal(size=5000) > 0.5).astype(np.int8)  # 0/1 labels: positive where > 0
    A, B = sigmoid_train(f, y)
    for s in range(3):
        perm = np.random.default_rng(s).permutation(f.size)
        A2, B2 = sigmoid_train(f[perm], y[perm])
        assert A2 == pytest.approx(A, rel=1e-10) and B2 == pytest.approx(B, rel=1e-10, abs=1e-12)


def test_sigmoid_train_rejects_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        sigmoid_train([0.0, np.nan], [1, -1])
    with pytest.raises(ValueError, match="labels"):
        sigmoid_train([0.0, 1.0], [1, -1, 1])


# ------------------------------------------------------------------------- folds of shards
class _Info:
    def __init__(self, n_rows):
        self.n_rows = n_rows


class _Meta:
    def __init__(self, rows):
        self.shards = [_Info(r) for r in rows]


def test_fold_assignment_deterministic_and_balanced():
    meta = _Meta([1000] * 37 + [412])
    a = fold_assignment(meta, 5, seed=3)
    assert a.shape == (38,) and set(a.tolist()) == set(range(5))
    np.testing.assert_array_equal(a, fold_assignment(meta, 5, seed=3))
    assert not np.array_equal(a, fold_assignment(meta, 5, seed=4))
    rows = np.bincount(a, weights=[s.n_rows for s in meta.shards], minlength=5)
    assert rows.max() - rows.min() <= 1000
    with pytest.raises(ValueError, match="at least 5 shards"):
        fold_assignment(_Meta([10, 10, 10]), 5, seed=0)
    with pytest.raises(ValueError, match="at least 2 folds"):
        fold_assignment(meta, 1, seed=0)


@pytest.fixture
def small_store(tmp_path, data_path, monkeypatch):
    import ooc_svm

    monkeypatch.chdir(tmp_path)
    lines = Path(data_path("a9a/a9a")).read_text().splitlines(True)[:1200]
    Path("a.svm").write_text("".join(lines))
    ooc_svm.ingest("a.svm", "a.zarr", shard_rows=100, n_features=123)
    return ooc_svm.open_store("a.zarr"), lines


def test_shard_subset_view_trains_like_the_subset_store(small_store):
    import ooc_svm
    from ooc_svm.store.views import ShardSubsetView

    store, lines = small_store
    keep = [1, 2, 4, 7, 8, 11]
    Path("sub.svm").write_text("".join(lines[k * 100 + i] for k in keep for i in range(100)))
    ooc_svm.ingest("sub.svm", "sub.zarr", shard_rows=100, n_features=123)
    view = ShardSubsetView(store, keep)
    assert view.meta.n_rows == 600 and view.meta.nnz == ooc_svm.open_store("sub.zarr").meta.nnz
    sub = ooc_svm.open_store("sub.zarr")
    shards = [view.read_shard(i) for i in range(view.n_shards)]
    assert [s.n_rows for s in shards] == [100 if i in keep else 0 for i in range(12)]
    assert [s.row_start for s in shards] == [r.row_start for r in view.meta.shards]
    np.testing.assert_array_equal(
        np.concatenate([s.y for s in shards]),
        np.concatenate([sub.read_shard(i).y for i in range(sub.n_shards)]),
    )
    for solver, params in [("perf", {"C": 1.0}), ("smo", {"C": 1.0, "kernel": "linear"})]:
        r1 = ooc_svm.train(view, solver=solver, **params)
        r2 = ooc_svm.train("sub.zarr", solver=solver, **params)
        assert r1.objective == pytest.approx(r2.objective, rel=1e-9)


def test_cross_val_decision_values_over_shard_folds(small_store):
    import ooc_svm
    from ooc_svm.store.views import ShardSubsetView

    store, _ = small_store
    cv = cross_val_decision_values(store, k=3, seed=1, train=ooc_svm.train, solver="perf", C=1.0)
    assert cv.dec_values.shape == (1200,) and cv.dec_values.dtype == np.float64
    # every row scored by the model trained without its fold
    for c in range(3):
        model = ooc_svm.train(
            ShardSubsetView(store, np.flatnonzero(cv.folds != c)), solver="perf", C=1.0
        ).model
        for sid in np.flatnonzero(cv.folds == c):
            s = store.read_shard(int(sid))
            d = model.decision_function(s.to_scipy(123))
            np.testing.assert_allclose(cv.dec_values[s.row_start : s.row_start + 100], d)
            np.testing.assert_array_equal(cv.y[s.row_start : s.row_start + 100], s.y)
    probA, probB = fit_platt(cv)
    assert probA.shape == (1,) and probA[0] < 0
    cal = calibration(cv.y > 0, sigmoid_predict(cv.dec_values, probA[0], probB[0]))
    assert cal.brier < 0.15  # a9a: a linear SVM's calibrated Brier score is ~0.11


def test_cross_val_one_vs_rest_multiclass(tmp_path, monkeypatch):
    from sklearn.datasets import dump_svmlight_file

    import ooc_svm

    monkeypatch.chdir(tmp_path)
    X, lab = _synthetic(900, 4, seed=21)
    dump_svmlight_file(X, lab + 1, "m.svm", zero_based=False)
    ooc_svm.ingest("m.svm", "m.zarr", shard_rows=90, label_kind="multiclass")
    ooc_svm.ingest("m.svm", "o.zarr", shard_rows=90, label_kind="ordinal")
    cv = cross_val_decision_values("m.zarr", k=3, seed=0, train=ooc_svm.train, solver="perf", C=1.0)
    assert cv.dec_values.shape == (900, 4) and cv.classes == [1.0, 2.0, 3.0, 4.0]
    probA, probB = fit_platt(cv)
    assert probA.shape == (4,) and np.all(probA < 0)
    P = ovr_probability(cv.dec_values, probA, probB)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.mean(np.argmax(P, axis=1) == lab) > 0.7
    with pytest.raises(ValueError, match="ordinal"):
        cross_val_decision_values("o.zarr", k=3, train=ooc_svm.train, solver="perf", C=1.0)


# ------------------------------------------------------------------------- calibration
def test_calibration_matches_sklearn():
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss, log_loss

    rng = np.random.default_rng(4)
    p = rng.beta(0.7, 1.5, size=3000)
    y = (rng.random(3000) < p).astype(int)
    cal = calibration(y, p, bins=10)
    assert cal.brier == pytest.approx(brier_score_loss(y, p), rel=1e-12)
    assert cal.log_loss == pytest.approx(log_loss(y, p), rel=1e-9)
    frac, mean = calibration_curve(y, p, n_bins=10, strategy="uniform")
    ok = cal.count > 0
    np.testing.assert_allclose(cal.fraction_positive[ok], frac, rtol=1e-12)
    np.testing.assert_allclose(cal.mean_predicted[ok], mean, rtol=1e-12)
    assert cal.count.sum() == 3000 and cal.ece < 0.05
    assert "observed" in cal.table()


def test_calibration_rejects_bad_probabilities():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration([1, 0], [0.5, 1.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = calibration(np.array([1, 0, 1]), np.array([1.0, 0.0, 1.0]), bins=4)
    assert cal.brier == 0.0 and np.isnan(cal.mean_predicted[1])


# ------------------------------------------------------------------------- class-weight refs
def test_reference_weights_agree_on_a_tiny_problem(data_path):
    """The class-weight references (tests/reference_weights.py) agree with each other."""
    import scipy.sparse as sp
    from reference_weights import (
        balanced_weights,
        dcd_reference,
        liblinear_reference,
        libsvm_reference,
        qp_reference,
    )
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(data_path("a9a/a9a")), n_features=123)
    X, y = X[:150], y[:150]
    wts = {1: 5.0}
    # free bias: LIBSVM -w1 5 against the SciPy dual QP
    q = qp_reference(X, y, 0.5, wts, free_bias=True)
    r = libsvm_reference(X, y, 0.5, wts, eps=1e-8)
    assert r["dual"] == pytest.approx(q["dual"], rel=1e-7)
    assert r["primal"] == pytest.approx(q["primal"], rel=1e-5)
    # regularised bias feature: LIBLINEAR -s 3 -B 1, dual CD and the QP on [X, 1]
    Xb = sp.hstack([X, np.ones((150, 1))]).tocsr()
    q = qp_reference(Xb, y, 0.5, wts, free_bias=False)
    d = dcd_reference(X, y, 0.5, wts, bias=1.0, eps=1e-8)
    ll = liblinear_reference(X, y, 0.5, wts, bias=1.0)
    assert d["dual"] == pytest.approx(q["dual"], rel=1e-8)
    assert d["primal"] - d["dual"] < 1e-5 * d["primal"]
    assert ll["dual"] <= d["primal"] + 1e-6 and ll["primal"] >= d["dual"] - 1e-6
    # LIBLINEAR's hard-coded iteration cap can stop it short even here: a bracket only
    bw = balanced_weights(y)
    n1 = np.count_nonzero(y > 0)
    assert bw[1.0] == pytest.approx(150 / (2 * n1))
    assert np.all(q["costs"][y > 0] == 2.5) and np.all(q["costs"][y < 0] == 0.5)
