"""ooc_svm.evaluation.metrics against scikit-learn / scipy and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import kendalltau
from sklearn import metrics as skm

from ooc_svm.evaluation import metrics as M


@pytest.mark.parametrize("seed", range(5))
def test_binary_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = 300
    y = rng.choice([-1.0, 1.0], n, p=[0.7, 0.3])
    s = rng.normal(size=n) + 0.8 * y
    if seed % 2:
        s = np.round(s, 1)  # ties
    pred = np.where(s > 0, 1.0, -1.0)
    assert M.accuracy(y, pred) == pytest.approx(skm.accuracy_score(y, pred))
    assert M.precision(y, pred, 1.0) == pytest.approx(skm.precision_score(y, pred))
    assert M.recall(y, pred, 1.0) == pytest.approx(skm.recall_score(y, pred))
    assert M.f1(y, pred, 1.0) == pytest.approx(skm.f1_score(y, pred))
    assert M.roc_auc(y, s, 1.0) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    d = M.binary_metrics(y, s, 1.0, -1.0)
    assert d["n"] == n and d["auc"] == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    assert d["f1"] == pytest.approx(skm.f1_score(y, pred))


def test_labels_other_than_pm1():
    y = np.array([1.0, 2.0, 2.0, 1.0, 2.0])
    s = np.array([-1.0, 2.0, 0.5, 0.3, -0.2])
    assert M.roc_auc(y, s, positive=2.0) == pytest.approx(skm.roc_auc_score(y == 2.0, s))
    assert M.precision(y, np.where(s > 0, 2.0, 1.0), 2.0) == pytest.approx(2 / 3)


def test_prbep():
    rng = np.random.default_rng(1)
    y = rng.choice([0.0, 1.0], 200)
    s = rng.normal(size=200) + y
    k = int(y.sum())
    top = np.argsort(-s)[:k]
    assert M.prbep(y, s, 1.0) == pytest.approx(y[top].mean())
    # precision = recall at the break-even point
    assert M.prbep(y, s, 1.0) == pytest.approx(y[top].sum() / k)
    # ties at the cut: proportional
    assert M.prbep(np.array([1, 0, 1, 0.0]), np.array([1, 0, 0, 0.0]), 1.0) == pytest.approx(
        (1 + 1 * (1 / 3)) / 2
    )


def _brute_pairs(y, s, qid):
    good = tot = 0.0
    for i, j in itertools.permutations(range(len(y)), 2):
        if y[i] > y[j] and (qid is None or qid[i] == qid[j]):
            tot += 1
            good += 1.0 if s[i] > s[j] else (0.5 if s[i] == s[j] else 0.0)
    return good / tot


@pytest.mark.parametrize("with_qid", [False, True])
def test_pairwise_accuracy_and_auc(with_qid):
    rng = np.random.default_rng(2)
    n = 60
    y = rng.integers(0, 4, n).astype(float)
    s = np.round(rng.normal(size=n) + 0.5 * y, 1)
    qid = rng.integers(0, 5, n) if with_qid else None
    assert M.pairwise_accuracy(y, s, qid) == pytest.approx(_brute_pairs(y, s, qid))
    if not with_qid:
        yb = (y > 1).astype(float)
        assert M.pairwise_accuracy(yb, s) == pytest.approx(skm.roc_auc_score(yb, s))


def test_kendall_tau():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 100).astype(float)
    s = rng.normal(size=100) + y
    assert M.kendall_tau(y, s) == pytest.approx(kendalltau(y, s).statistic)
    qid = np.repeat(np.arange(5), 20)
    per = [kendalltau(y[qid == q], s[qid == q]).statistic for q in range(5)]
    assert M.kendall_tau(y, s, qid) == pytest.approx(np.mean(per))


@pytest.mark.parametrize("ties", [False, True])
def test_ndcg_matches_sklearn(ties):
    rng = np.random.default_rng(4)
    qid = np.repeat(np.arange(8), 15)
    y = rng.integers(0, 3, qid.size).astype(float)
    y[qid == 3] = 0  # a query without relevant documents scores 0 (as sklearn)
    s = rng.normal(size=qid.size)
    if ties:
        s = np.round(s, 0)
    ref = []
    for q in range(8):
        m = qid == q
        g = (2.0 ** y[m] - 1)[None, :]
        ref.append(skm.ndcg_score(g, s[m][None, :], k=10))
    assert M.ndcg_at_k(y, s, qid, 10) == pytest.approx(np.mean(ref), abs=1e-12)


def test_objectives():
    rng = np.random.default_rng(5)
    X = sp.random(50, 7, density=0.5, random_state=5, format="csr")
    y = rng.choice([-1.0, 1.0], 50)
    w = rng.normal(size=7)
    b = 0.3
    m = y * (X @ w + b)
    ref = 0.5 * (w @ w + (b / 2.0) ** 2) + 2.0 * np.maximum(0, 1 - m).sum()
    assert M.primal_objective(X, y, w, b, 2.0, bias=2.0) == pytest.approx(ref)
    yr = rng.integers(0, 3, 50).astype(float)
    qid = rng.integers(0, 3, 50)
    sc = X @ w
    loss = sum(
        max(0.0, 1 - (sc[i] - sc[j]))
        for i, j in itertools.permutations(range(50), 2)
        if yr[i] > yr[j] and qid[i] == qid[j]
    )
    npairs = sum(
        1 for i, j in itertools.permutations(range(50), 2) if yr[i] > yr[j] and qid[i] == qid[j]
    )
    obj, mm = M.pairwise_objective(X, yr, w, 0.5, qid)
    assert mm == npairs
    assert obj == pytest.approx(0.5 * w @ w + 0.5 * loss)
    assert M.duality_gap(10.0, -9.5) == pytest.approx(0.5)
