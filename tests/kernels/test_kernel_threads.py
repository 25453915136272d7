"""Kernel work on every core and kernel solvers at any width.

- the parallel kernels of :mod:`ooc_svm.kernels.parallel` give the serial kernels' values bit
  for bit, with 1 and 2 threads, on the scatter (narrow) and the merge (wide) paths;
- smo, active-set and irwls on an a9a subset: the dual objective within 1e-6 relative of
  LIBSVM's (scikit-learn SVC at tol 1e-7) with 1 and 2 threads, and the same model to the bit;
- on 600 distinct Gaussian rows (a unique dual solution): every dual coefficient within 1e-6
  relative (2-norm) of LIBSVM's (SVC at tol 1e-10) with 1, 2 and 3 threads (3 in a process
  started with ``NUMBA_NUM_THREADS=3``), the models identical to the bit;
- a two-row store with 2×10^8 features trains with every kernel solver (RBF) under a 2 GB
  address-space limit (the old code reserved dense vectors over the features and failed).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import build_store, kernel_solvers, sklearn_kernel
from conftest import load_svmlight_int32 as _load

from ooc_svm.api import train
from ooc_svm.kernels import parallel
from ooc_svm.kernels.kernel_functions import (
    csr_parts,
    kernel_block,
    kernel_scores_csc,
    sq_norms,
)

TWO = int(getattr(numba.config, "NUMBA_NUM_THREADS", 1)) >= 2
THREADS = [1, 2] if TWO else [1]


@contextlib.contextmanager
def _threads(n: int):
    """Kernel work on ``n`` threads in this process (numba's threads of the main thread and
    the share of :func:`ooc_svm.kernels.parallel.thread_share`)."""
    old_env = os.environ.get("OOC_SVM_KERNEL_THREADS")
    old = numba.get_num_threads()
    os.environ["OOC_SVM_KERNEL_THREADS"] = str(n)
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)
        if old_env is None:
            os.environ.pop("OOC_SVM_KERNEL_THREADS", None)
        else:
            os.environ["OOC_SVM_KERNEL_THREADS"] = old_env


def _random_csr(rng, n, width, nnz_row):
    rows, cols = [], []
    for i in range(n):
        c = rng.choice(width, size=nnz_row, replace=False)
        rows += [i] * nnz_row
        cols += list(c)
    data = rng.normal(size=len(rows)).astype(np.float32)
    return sp.csr_matrix((data, (rows, cols)), shape=(n, width))


@pytest.mark.parametrize("width", [300, parallel.WORK_MAX + 5000])
def test_parallel_kernels_equal_serial_bit_for_bit(width):
    rng = np.random.default_rng(0)
    A = _random_csr(rng, 40, width, 12)
    B = _random_csr(rng, 3000, width, 12)  # enough work for the parallel chunks
    a, b = csr_parts(A), csr_parts(B)
    asq, bsq = sq_norms(*a), sq_norms(*b)
    kp = (2, 0.05, 3, 0.0)
    ref = kernel_block(*a, asq, *b, bsq, *kp, np.zeros(width), np.empty((40, 3000)))
    coef = rng.normal(size=40)
    T = sp.csr_matrix(A, dtype=np.float64).T.tocsr()
    T.sort_indices()
    svt = (T.indptr.astype(np.int64), T.indices.astype(np.int64), T.data)
    ref_s = kernel_scores_csc(*b, bsq, *svt, asq, coef, *kp, np.empty(40), np.empty(3000))
    y = np.where(rng.random(3000) > 0.5, 1.0, -1.0)
    X = (b[0], b[1], b[2], bsq, y)
    order = rng.permutation(3000).astype(np.int64)
    ref_col = y[7] * y * ref_block_row(b, bsq, 7, kp, width)
    for n in THREADS:
        with _threads(n):
            got = parallel.kernel_block_par(*a, asq, *b, bsq, *kp, width, np.empty((40, 3000)))
            np.testing.assert_array_equal(got, ref)
            s = parallel.kernel_scores_csc_par(*b, bsq, *svt, asq, coef, *kp, np.empty(3000))
            np.testing.assert_array_equal(s, ref_s)
            col = np.full(3000, np.nan, dtype=np.float32)
            parallel.column_par(7, 0, 3000, order, X, kp, col, True, width)
            np.testing.assert_array_equal(col, ref_col.astype(np.float32))


def ref_block_row(b, bsq, i, kp, width):
    ip, ix, data = b
    one = (ip[i : i + 2] - ip[i], ix[ip[i] : ip[i + 1]], data[ip[i] : ip[i + 1]])
    out = np.empty((1, ip.shape[0] - 1))
    kernel_block(*one, bsq[i : i + 1], *b, bsq, *kp, np.zeros(width), out)
    return out[0]


def test_smo_scans_on_threads_equal_serial_loops():
    """smo's WSS2 scans and gradient update on all threads: the same rows, values
    and gradients as one serial loop, ties included (the serial loops keep the last row of a
    tie; many tied and ±0 values here), with 1 and 2 threads."""
    from ooc_svm.solvers.smo._numba import wss2 as sk

    rng = np.random.default_rng(1)
    m = 40_000  # above the scans' parallel threshold
    y = np.where(rng.random(m) < 0.4, 1.0, -1.0)
    alpha = np.where(rng.random(m) < 0.4, 1.0, 0.0)
    alpha[rng.random(m) < 0.1] = 0.5
    C = np.ones(m)
    G = np.round(rng.normal(size=m), 1)  # many ties
    G[rng.random(m) < 0.05] = -0.0
    QD = np.ones(m)
    qi = np.round(rng.normal(size=m), 1).astype(np.float32)
    qj = rng.normal(size=m).astype(np.float32)
    active = rng.permutation(m).astype(np.int64)
    n_active = m - 1234
    ref_up = sk._up_chunk(active, 0, n_active, y, alpha, G, C)
    i = int(ref_up[1])
    ref_low = sk._low_chunk(active, 0, n_active, y, alpha, G, QD, C, i, qi, ref_up[0])
    ref_G = G.copy()
    sk._update_chunk(active, 0, n_active, ref_G, qi, qj, 0.3, -0.7)
    for n in THREADS:
        with _threads(n):
            up = sk._up_par(active, n_active, y, alpha, G, C)
            assert up == ref_up and str(up[0]) == str(ref_up[0]), (n, up, ref_up)
            low = sk._low_par(active, n_active, y, alpha, G, QD, C, i, qi, up[0])
            assert low == ref_low and str(low[2]) == str(ref_low[2]), (n, low, ref_low)
            G2 = G.copy()
            sk._update_par(active, n_active, G2, qi, qj, 0.3, -0.7)
            np.testing.assert_array_equal(G2, ref_G)


def test_dense_sv_block_scores_equal_sparse_bit_for_bit(monkeypatch):
    """Expansions of dense, narrow SVs (ijcnn1: 22 features) score rows on a dense SV block
    (the KKT pass, predict): the same scores to the bit as the sparse (CSC) kernel, explicit
    zeros and features the SVs lack included, with 1 and 2 threads; not pickled."""
    import pickle

    from ooc_svm.kernels.kernel_functions import KernelParams
    from ooc_svm.model import expansion as E

    rng = np.random.default_rng(2)
    sv = _random_csr(rng, 700, 22, 13)
    sv.data[::7] = 0.0  # explicit zeros, as ijcnn1 has
    rows = _random_csr(rng, 3000, 22, 9)
    kp = KernelParams.from_params({"kernel": "rbf", "gamma": 0.7}, 22)
    coef = rng.normal(size=700)
    ip, ix, data = csr_parts(rows)
    sip, six, sdata = csr_parts(sv)

    def make():
        return E.Expansion.from_csr(kp, 22, sip, six.view(np.int32), sdata, coef)

    for n in THREADS:
        with _threads(n):
            dense = make()
            got = dense.scores(ip, ix, data)
            assert "_Dt" in dense.__dict__
            assert "_Dt" not in pickle.loads(pickle.dumps(dense)).__dict__
            with monkeypatch.context() as mp:
                mp.setattr(E, "DENSE_SV_MAX", 0)
                sparse = make()
                ref = sparse.scores(ip, ix, data)
                assert "_Dt" not in sparse.__dict__
            np.testing.assert_array_equal(got, ref)


# --------------------------------------------------------------------------------------------
# the solvers against LIBSVM, 1 and 2 threads
# --------------------------------------------------------------------------------------------
N_ROWS, GAMMA, C = 3000, 0.05, 1.0


@pytest.fixture(scope="module")
def a9a_problem(tmp_path_factory):
    svm = pytest.importorskip("sklearn.svm")
    X, y = _load("a9a/a9a", N_ROWS, 123)
    store = build_store(tmp_path_factory.mktemp("a9a") / "s.zarr", X, y, shard_rows=1000)
    Xd = sp.csr_matrix(X, dtype=np.float64)
    clf = svm.SVC(C=C, kernel="rbf", gamma=GAMMA, tol=1e-7, cache_size=200).fit(Xd, y)
    c = np.asarray(clf.dual_coef_.todense()).ravel()
    Xs = Xd[clf.support_]
    ref = 0.5 * c @ sklearn_kernel(Xs, Xs, "rbf", GAMMA) @ c - np.abs(c).sum()
    return store, float(ref)


@pytest.mark.parametrize("solver", kernel_solvers())
def test_duals_as_libsvm_and_same_model_for_any_thread_count(solver, a9a_problem):
    store, ref = a9a_problem
    models = []
    for n in THREADS:
        with _threads(n):
            res = train(store, solver, C=C, kernel="rbf", gamma=GAMMA, tol=1e-5)
        rel = abs(res.dual_objective - ref) / abs(ref)
        assert rel <= 1e-6, (solver, n, res.dual_objective, ref, rel)
        models.append(res.model)
    for m in models[1:]:
        np.testing.assert_array_equal(m.dual_coef_, models[0].dual_coef_)
        np.testing.assert_array_equal(m.support_, models[0].support_)
        assert m.intercept_ == models[0].intercept_


# --------------------------------------------------------------------------------------------
# the duals themselves against LIBSVM, 1, 2 and 3 threads (an odd count: uneven chunk shares)
# --------------------------------------------------------------------------------------------
N_G, D_G, TOL_G = 600, 60, 1e-9  # 36,000 non-zeros: above PAR_MIN_WORK, the kernels run in chunks

_THREE = """
import sys
import numpy as np
from ooc_svm.api import train
from ooc_svm.kernels.parallel import max_threads
assert max_threads() == 3, max_threads()
store, out, gamma, tol = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
res = {}
from ooc_svm.solvers.contract import solver_specs
for s in [spec.name for spec in solver_specs() if spec.kernels]:
    m = train(store, s, C=1.0, kernel="rbf", gamma=gamma, tol=tol).model
    res[s + ":support"] = np.asarray(m.support_)
    res[s + ":coef"] = np.asarray(m.dual_coef_)
    res[s + ":b"] = np.asarray(m.intercept_)
np.savez(out, **res)
"""


@pytest.fixture(scope="module")
def dense_problem(tmp_path_factory):
    """600 Gaussian rows (distinct, so the RBF kernel matrix is positive definite and the dual
    solution unique), LIBSVM's duals (scikit-learn SVC at tol 1e-10), and the models of a
    process with 3 kernel threads (``NUMBA_NUM_THREADS=3``: more threads than this machine's
    cores is allowed, and the chunks are dealt out unevenly)."""
    svm = pytest.importorskip("sklearn.svm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_G, D_G)).astype(np.float32)
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] + 0.5 * rng.normal(size=N_G) > 0, 1.0, -1.0)
    tmp = tmp_path_factory.mktemp("dense")
    store = build_store(tmp / "g.zarr", sp.csr_matrix(X), y, shard_rows=N_G // 3 + 1)
    gamma = 1.0 / D_G
    clf = svm.SVC(C=1.0, kernel="rbf", gamma=gamma, tol=1e-10, cache_size=200)
    clf.fit(X.astype(np.float64), y)
    ref = np.zeros(N_G)
    ref[clf.support_] = clf.dual_coef_.ravel()
    env = {k: v for k, v in os.environ.items() if k != "OOC_SVM_KERNEL_THREADS"}
    env["NUMBA_NUM_THREADS"] = "3"
    out = tmp / "three.npz"
    subprocess.run(
        [sys.executable, "-c", _THREE, str(tmp / "g.zarr"), str(out), repr(gamma), repr(TOL_G)],
        check=True,
        env=env,
        timeout=600,
    )
    three = dict(np.load(out))
    return store, gamma, ref, float(clf.intercept_[0]), three


@pytest.mark.parametrize("solver", kernel_solvers())
def test_duals_within_1e6_of_libsvm_for_1_2_and_3_threads(solver, dense_problem):
    """Every dual coefficient y_i α_i (not only the objective) within 1e-6
    relative of LIBSVM's, with 1, 2 and 3 kernel threads; the models identical to the bit."""
    store, gamma, ref, b_ref, three = dense_problem
    models = []
    for n in THREADS:
        with _threads(n):
            m = train(store, solver, C=1.0, kernel="rbf", gamma=gamma, tol=TOL_G).model
        models.append((np.asarray(m.support_), np.asarray(m.dual_coef_), m.intercept_))
    models.append((three[solver + ":support"], three[solver + ":coef"], three[solver + ":b"]))
    for support, coef, b in models:
        a = np.zeros(N_G)
        a[support] = coef.ravel()
        rel = np.linalg.norm(a - ref) / np.linalg.norm(ref)
        assert rel <= 1e-6, (solver, rel)
        assert abs(float(b) - b_ref) <= 1e-6 * max(1.0, abs(b_ref)), (solver, b, b_ref)
    for support, coef, b in models[1:]:
        np.testing.assert_array_equal(support, models[0][0])
        np.testing.assert_array_equal(coef, models[0][1])
        assert float(b) == float(models[0][2])


# --------------------------------------------------------------------------------------------
# wide stores: nothing dense over the features
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", kernel_solvers())
def test_two_rows_with_2e8_features_train_under_2_gb(tmp_path, solver):
    """smo on a two-row store with 2×10^8 features used 2.5–3.3 GB (a dense
    workspace per kernel row, the support vectors' CSC index over every feature); under a
    2 GB address-space limit it failed. Now the kernel solvers keep nothing dense over the
    features: exit 0, the two rows are the support vectors."""
    import resource

    (tmp_path / "w.svm").write_text("1 1:1 200000000:1\n-1 2:1\n")
    cmd = [sys.executable, "-m", "ooc_svm"]
    subprocess.run([*cmd, "ingest", "w.svm", "w.zarr", "-q"], cwd=tmp_path, check=True)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = subprocess.run(
        [*cmd, "train", "--solver", solver, "w.zarr", "-o", "m", "--gamma", "0.5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    from ooc_svm.model.model import load_model

    m = load_model(str(tmp_path / "m"))
    assert m.n_features == 200_000_000
    assert sorted(m.support_.tolist()) == [0, 1]
    # K(x1, x2) = exp(-0.5 * 3): the two-point optimum α = 1 / (1 − K) ≈ 1.29 is cut to C = 1
    assert 1.0 / (1.0 - np.exp(-0.5 * 3.0)) > 1.0
    np.testing.assert_allclose(np.abs(m.dual_coef_), 1.0, rtol=1e-9)
