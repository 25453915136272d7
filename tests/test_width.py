"""Every width: feature hashing at ingest, scoring with the model's width, the
refusal of much wider data, and imports sized by what the file holds.

Each refusal runs under a 2 GB address-space limit, as a user's crafted input would meet it.
"""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import kernel_solvers, ooc_cmd, run_ooc

from ooc_svm.store import open_store

#: the address-space limit of the refusal tests (bytes)
AS_LIMIT = 2_000_000_000


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_capped(*args: str, cwd=None, timeout: float = 300):
    """``ooc-svm ARGS`` under a 2 GB address-space limit (stdin closed)."""
    return subprocess.run(
        ooc_cmd(*args),
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        preexec_fn=_limited,
    )


def one_line_error(r, *needles: str) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc-svm: error:"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _write_text(path: Path, rows: list[tuple[float, list[tuple[int, float]]]]) -> None:
    with open(path, "w") as f:
        for y, feats in rows:
            f.write(f"{y:g} " + " ".join(f"{j}:{v:g}" for j, v in feats) + "\n")


def _random_rows(n: int, width: int, nnz: int, seed: int):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        cols = np.sort(rng.choice(width, size=nnz, replace=False)) + 1
        vals = np.round(rng.uniform(-2, 2, size=nnz), 3)
        rows.append(
            (float(rng.choice([-1.0, 1.0])), list(zip(cols.tolist(), vals.tolist(), strict=True)))
        )
    return rows


def _store_matrix(path) -> tuple[sp.csr_matrix, np.ndarray]:
    st = open_store(str(path))
    parts = [st.read_shard(i) for i in range(st.meta.n_shards)]
    X = sp.vstack([p.to_scipy(st.meta.n_features) for p in parts]).tocsr()
    return X, np.concatenate([p.y for p in parts])


# ------------------------------------------------------------------------------------------
# hashing at ingest
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 12])
def test_hash_bits_matches_sklearn_feature_hasher(tmp_path, bits):
    """The store holds what scikit-learn's FeatureHasher makes of the same file (signed
    MurmurHash3 of the feature number), and info reports B and the in-row collisions."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.utils import murmurhash3_32

    rows = _random_rows(300, 50_000, 30, seed=bits)
    rows.append((1.0, [(2**31, 1.5)]))  # the largest index a store may hold
    _write_text(tmp_path / "d.svm", rows)
    r = run_ooc("ingest", "d.svm", "d.zarr", "--hash-bits", str(bits), "--shard-rows", "77",
                cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    X, y = _store_matrix(tmp_path / "d.zarr")
    ref = FeatureHasher(n_features=2**bits, input_type="pair").transform(
        [[(str(j), v) for j, v in feats] for _, feats in rows]
    )
    assert X.shape == ref.shape == (len(rows), 2**bits)
    assert abs(X - ref).max() < 1e-5
    np.testing.assert_array_equal(y, [r_[0] for r_ in rows])
    meta = open_store(str(tmp_path / "d.zarr")).meta
    # in-row collisions: entries that meet another one of their row on a column
    # (sklearn's FeatureHasher skips zero values, so its nnz does not tell them)
    collisions = sum(
        len(f) - len({abs(murmurhash3_32(str(j), seed=0)) % 2**bits for j, _ in f}) for _, f in rows
    )
    assert meta.hashing["bits"] == bits and meta.hashing["collisions"] == collisions
    assert meta.hashing["hash"] == "murmurhash3_32"
    info = run_ooc("info", "d.zarr", cwd=tmp_path)
    assert f"--hash-bits {bits}" in info.stdout and f"{collisions:,} in-row collisions" in (
        info.stdout
    )
    j = json.loads(run_ooc("info", "d.zarr", "--json", cwd=tmp_path).stdout)
    assert j["hashing"]["bits"] == bits and j["n_features"] == 2**bits


def test_hashed_model_scores_text_and_store_alike(tmp_path):
    """A model trained on a hashed store remembers the hashing; predict hashes SVMlight text
    the same way (same scores as on the store) and refuses a store hashed otherwise."""
    rows = _random_rows(400, 100_000, 20, seed=3)
    _write_text(tmp_path / "d.svm", rows)
    for args in (
        ("ingest", "d.svm", "h.zarr", "--hash-bits", "10"),
        ("ingest", "d.svm", "h8.zarr", "--hash-bits", "8"),
        ("ingest", "d.svm", "plain.zarr"),
        ("train", "h.zarr", "-o", "m", "--C", "0.1"),
        ("predict", "m", "h.zarr", "-o", "s.txt"),
        ("predict", "m", "d.svm", "-o", "t.txt"),
    ):
        r = run_ooc(*args, cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
    model = json.loads((tmp_path / "m" / "model.json").read_text())
    assert model["info"]["hashing"]["bits"] == 10
    assert (tmp_path / "s.txt").read_text() == (tmp_path / "t.txt").read_text()
    for other in ("h8.zarr", "plain.zarr"):
        one_line_error(run_ooc("evaluate", "m", other, cwd=tmp_path), other, "--hash-bits 10")
    # the other way round: an unhashed model on a hashed store
    assert run_ooc("train", "plain.zarr", "-o", "mp", "--C", "0.1", cwd=tmp_path).returncode == 0
    one_line_error(run_ooc("evaluate", "mp", "h.zarr", cwd=tmp_path), "without --hash-bits")


def test_hash_bits_bad_values_and_append(tmp_path):
    _write_text(tmp_path / "d.svm", _random_rows(20, 1000, 5, seed=1))
    for bad in ("0", "32"):
        one_line_error(run_ooc("ingest", "d.svm", "x.zarr", "--hash-bits", bad, cwd=tmp_path))
    one_line_error(
        run_ooc(
            "ingest", "d.svm", "x.zarr", "--hash-bits", "8", "--n-features", "9", cwd=tmp_path
        )  # fmt: skip
    )
    assert not (tmp_path / "x.zarr").exists()
    assert run_ooc("ingest", "d.svm", "h.zarr", "--hash-bits", "8", cwd=tmp_path).returncode == 0
    one_line_error(run_ooc("ingest", "d.svm", "h.zarr", "--append", cwd=tmp_path), "--hash-bits 8")
    r = run_ooc("ingest", "d.svm", "h.zarr", "--append", "--hash-bits", "8", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert open_store(str(tmp_path / "h.zarr")).meta.n_rows == 40


def test_hashing_metadata_is_validated(tmp_path):
    """A hashing entry that contradicts the store's width is refused in one line."""
    _write_text(tmp_path / "d.svm", _random_rows(20, 1000, 5, seed=1))
    assert run_ooc("ingest", "d.svm", "h.zarr", "--hash-bits", "8", cwd=tmp_path).returncode == 0
    p = tmp_path / "h.zarr" / "zarr.json"
    d = json.loads(p.read_text())
    d["attributes"]["ooc_svm"]["hashing"]["bits"] = 9
    p.write_text(json.dumps(d))
    one_line_error(run_ooc("info", "h.zarr", cwd=tmp_path), "hashed")


# ------------------------------------------------------------------------------------------
# predict / evaluate: the model's width
# ------------------------------------------------------------------------------------------


@pytest.fixture
def narrow_model(tmp_path):
    """A linear model trained on 500 features, and its training text."""
    _write_text(tmp_path / "d.svm", _random_rows(300, 500, 10, seed=5))
    assert run_ooc("ingest", "d.svm", "d.zarr", "--n-features", "500", cwd=tmp_path).returncode == 0
    r = run_ooc("train", "d.zarr", "-o", "m", "--C", "0.1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path


@pytest.mark.parametrize("index", [10**9, 2**31])
def test_wide_text_refused_or_scored_in_bounded_memory(narrow_model, index):
    """Text with one index 10^9 / 2^31 against a 500-feature model: refused in one line
    (another feature space?), and with --allow-wider scored with the model's width (the
    column weighs 0) under 2 GB: today a dense vector of the text's width is allocated."""
    t = narrow_model
    with open(t / "w.svm", "w") as f:
        f.write(f"1 3:1 {index}:5\n-1 4:1\n")
        f.write((t / "d.svm").read_text())
    for cmd in ("predict", "evaluate"):
        extra = ("-o", "p.txt") if cmd == "predict" else ()
        one_line_error(run_capped(cmd, "m", "w.svm", *extra, cwd=t), "--allow-wider")
    r = run_capped("predict", "m", "w.svm", "-o", "p.txt", "--allow-wider", cwd=t)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_capped("predict", "m", "d.svm", "-o", "q.txt", cwd=t)
    assert r.returncode == 0, r.stderr[-2000:]
    wide = (t / "p.txt").read_text().splitlines()
    plain = (t / "q.txt").read_text().splitlines()
    assert wide[3:] == plain[1:]  # the header, then the two extra rows
    r = run_capped("evaluate", "m", "w.svm", "--allow-wider", "--json", cwd=t)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["n"] == 302


def test_store_of_width_2_31_refused_or_scored(narrow_model):
    """A store whose n_features is 2^31 (one index 2^31): the same under 2 GB."""
    t = narrow_model
    (t / "w.svm").write_text("1 3:1 2147483648:5\n-1 4:1\n")
    assert run_ooc("ingest", "w.svm", "w.zarr", cwd=t).returncode == 0
    assert open_store(str(t / "w.zarr")).meta.n_features == 2**31
    one_line_error(run_capped("evaluate", "m", "w.zarr", cwd=t), "--allow-wider", "2,147,483,648")
    r = run_capped("predict", "m", "w.zarr", "-o", "p.txt", "--allow-wider", cwd=t)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_little_wider_is_a_warning(narrow_model):
    """Up to 10 % more columns (a test split) is scored with a warning, as before."""
    t = narrow_model
    (t / "w.svm").write_text("1 3:1 540:5\n-1 4:1\n")
    r = run_ooc("evaluate", "m", "w.svm", cwd=t)
    assert r.returncode == 0 and "features beyond 500 are ignored" in r.stderr


# ------------------------------------------------------------------------------------------
# import: arrays sized by what the file holds
# ------------------------------------------------------------------------------------------

_SVMLIGHT_HEAD = (
    "SVM-light Version V6.02\n0 # kernel type\n3 # kernel parameter -d\n1 # kernel parameter "
    "-g\n1 # kernel parameter -s\n1 # kernel parameter -r\nempty# kernel parameter -u\n"
)

CRAFTED = {
    "liblinear": (
        "solver_type L2R_L2LOSS_SVC_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature 2000000000\n"
        "bias -1\nw\n0.5\n0.25\n",
        "weight line 3 of 2000000000",
    ),
    "libsvm": (
        "svm_type c_svc\nkernel_type rbf\ngamma 0.5\nnr_class 2\ntotal_sv 1000000000\nrho 0.1\n"
        "label 1 -1\nnr_sv 500000000 500000000\nSV\n1 1:1\n-1 2:1\n",
        "support vector 3 of 1000000000",
    ),
    "svmlight": (
        _SVMLIGHT_HEAD + "10 # highest feature index\n100 # number of training documents\n"
        "1000000001 # number of support vectors plus 1\n0.1 # threshold b\n1 1:1\n-1 2:1\n",
        "support vector 3 of 1000000000",
    ),
}


@pytest.mark.parametrize("fmt", sorted(CRAFTED))
def test_import_header_claiming_more_than_the_file_holds(tmp_path, fmt):
    text, needle = CRAFTED[fmt]
    (tmp_path / "x.model").write_text(text)
    one_line_error(run_capped("import", "x.model", "m", "--format", fmt, cwd=tmp_path), needle)
    assert not (tmp_path / "m").exists()


def test_import_svmlight_claimed_width_is_not_allocated(tmp_path):
    """A linear SVMlight model whose header claims 2^31 - 1 features but whose one support
    vector uses feature 1: imported with the width the file justifies, under 2 GB."""
    (tmp_path / "x.model").write_text(
        _SVMLIGHT_HEAD + "2147483647 # highest feature index\n100 # number of training "
        "documents\n2 # number of support vectors plus 1\n0.1 # threshold b\n1 1:1\n"
    )
    r = run_capped("import", "x.model", "m", "--format", "svmlight", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "m" / "model.json").read_text())["n_features"] == 1


# ------------------------------------------------------------------------------------------
# perf at any width
# ------------------------------------------------------------------------------------------


def test_perf_default_flags_accept_20m_features():
    """The dense-limit check passes a 20,000,000-column store at the default flags (it
    refused it: 10 dense vectors of 153 MiB > 1024 MiB) and still refuses 2^31 columns."""
    from ooc_svm.solvers.perf import Params, SolverError
    from ooc_svm.store.format import StoreMeta

    meta = StoreMeta(backend="zarr", n_features=20_000_000, label_kind="binary", labels=[-1, 1])
    Params().check_dense(meta)
    with pytest.raises(SolverError, match="dense w needs"):
        Params().check_dense(StoreMeta(backend="zarr", n_features=2**31, label_kind="binary"))
    with pytest.raises(SolverError, match="dense w needs"):  # the other variants: 10 vectors
        Params(variant="paper").check_dense(meta)


@pytest.mark.slow
def test_perf_default_flags_train_20m_features(tmp_path):
    """A store 20,000,000 columns wide trains with the default flags (today: refused, "a
    dense w needs 153 MiB and perf keeps 10 such vectors ... more than --dense-limit-mb
    1024"), and predict scores it with the model."""
    rows = ["1 1:1 20000000:1", "-1 2:1 3:1", "1 1:0.5 19999999:1", "-1 3:1 20000000:-1"]
    (tmp_path / "d.svm").write_text("\n".join(rows) + "\n")
    assert run_ooc("ingest", "d.svm", "d.zarr", cwd=tmp_path).returncode == 0
    r = run_ooc("train", "d.zarr", "-o", "m", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["converged"] is True
    r = run_ooc("evaluate", "m", "d.zarr", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["accuracy"] == 1.0


def test_working_set_sparse_planes_and_aggregation():
    """Planes given sparse give the Gram matrix and w of the same planes given dense; at the
    byte limit the planes are aggregated without changing w or the dual value."""
    from ooc_svm.solvers.perf import WorkingSet

    rng = np.random.default_rng(0)
    dim = 50_000
    planes = []
    for k in range(6):
        idx = np.sort(rng.choice(dim, size=300 + 50 * k, replace=False))
        planes.append((idx.astype(np.int64), rng.normal(size=idx.size) / 100, 0.1 + 0.05 * k))
    dense, sparse = WorkingSet(dim, 1 << 30), WorkingSet(dim, 1 << 30)
    for idx, val, r in planes:
        g = np.zeros(dim)
        g[idx] = val
        dense.add(g, r)
        sparse.add((idx, val), r)
    np.testing.assert_array_equal(dense.Q, sparse.Q)
    w1, dual1, _ = dense.solve(10.0, 1e-12)
    w2, dual2, _ = sparse.solve(10.0, 1e-12)
    np.testing.assert_array_equal(w1, w2)
    assert dual1 == dual2
    # a limit the next plane crosses: planes with alpha = 0 go, the others are aggregated
    assert np.count_nonzero(sparse.alpha) >= 2
    small = WorkingSet(dim, sparse.nbytes // 4)
    small.restore(*sparse.state())
    w_before = small.combine(small.alpha)
    idx = np.sort(rng.choice(dim, size=400, replace=False))
    small.add((idx, rng.normal(size=400) / 100), 0.3)
    assert len(small) == 2 and small.alpha[0] == 0.0
    w_after = small.combine(small.alpha)
    np.testing.assert_allclose(w_after, w_before, rtol=1e-6, atol=1e-12)
    dual_after = float(small.alpha @ np.asarray(small.r) - 0.5 * w_after @ w_after)
    assert dual_after == pytest.approx(dual1, rel=1e-6)


@pytest.mark.slow
def test_shard_column_map_built_once():
    """The column map of a shard is built on its first pass and kept with it."""
    from ooc_svm.solvers.perf.passes import shard_columns
    from ooc_svm.store.format import Shard

    rng = np.random.default_rng(1)
    X = sp.random(50, 10**7, density=2e-6, format="csr", random_state=2, dtype=np.float32)
    sh = Shard(X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, np.ones(50))
    cols, gidx = shard_columns(sh)
    ref = np.unique(sh.indices)
    np.testing.assert_array_equal(cols, ref)
    np.testing.assert_array_equal(gidx, np.searchsorted(ref, sh.indices))
    assert shard_columns(sh)[1] is gidx
    assert rng is not None


def test_perf_remapped_columns_same_guarantee_and_bytes_for_any_threads(tmp_path, make_store):
    """A wide store (columns most rows never use, Zipf-like popularity) trains over the
    columns it holds, most frequent first: one counting pass more, w of the store's width
    with zeros on the unused columns, the objective of the plain path within the
    certificate, and the same model bytes for 1, 2 and 3 threads."""
    import sys

    from sklearn.svm import LinearSVC

    sys.path.insert(0, str(Path(__file__).parent / "solvers"))  # also when run on its own
    from test_perf import check_guarantee

    from ooc_svm.api import train
    from ooc_svm.engine import LocalEngine, blocks
    from ooc_svm.evaluation.metrics import primal_objective
    from ooc_svm.solvers import perf

    rng = np.random.default_rng(28)
    n, d, nnz = 1200, 40_000, 12
    p = 1.0 / np.arange(1, d + 1)
    p /= p.sum()
    perm = rng.permutation(d)
    rows = [np.unique(perm[rng.choice(d, size=nnz, p=p)]) for _ in range(n)]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    X = sp.csr_matrix(
        (rng.random(int(indptr[-1])) + 0.1, np.concatenate(rows), indptr), shape=(n, d)
    )
    X.data = X.data.astype(np.float32)
    X.indices = X.indices.astype(np.int32)
    wt = rng.normal(size=d)
    y = np.where(X @ wt + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    st = make_store(X, y, shard_rows=400)
    held = np.unique(X.indices).size
    assert held < d / 2
    plain = train(st, "perf", C=1.0, eps=1e-3)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(perf, "REMAP_MIN_DIM", 1000, raising=False)
        mp.setattr(blocks, "BLOCK_NNZ", 3000)
        got = {}
        for threads in (1, 2, 3):
            with LocalEngine(n_threads=threads, inline_nnz=0) as eng:
                got[threads] = train(open_store(st.path), "perf", C=1.0, eps=1e-3, engine=eng)
    finally:
        mp.undo()
    res = got[1]
    assert res.passes == res.iterations + 2  # the counting pass, iteration 0, one per iteration
    coef = np.asarray(res.model.coef_).ravel()
    assert coef.shape[0] == d
    unused = np.setdiff1d(np.arange(d), np.unique(X.indices))
    assert not np.any(coef[unused])
    m = LinearSVC(C=1.0, loss="hinge", tol=1e-10, max_iter=10**6, random_state=0).fit(X, y)
    p_ref = primal_objective(X, y, m.coef_.ravel(), float(m.intercept_[0]), 1.0)
    check_guarantee(res, p_ref, 1.0, n, 1e-3)
    assert abs(res.objective - plain.objective) <= 1.0 * n * 1e-3
    for r in got.values():
        assert r.objective == res.objective and r.passes == res.passes
        np.testing.assert_array_equal(np.asarray(r.model.coef_), np.asarray(res.model.coef_))


def _wide_store(path: Path, width: int, col: int) -> None:
    """Two rows of a store declaring ``width`` features; one uses column ``col``."""
    from ooc_svm.store import csr_to_shards, write_store

    X = sp.csr_matrix(
        (np.array([1.0, 0.5, 1.0, 0.2], np.float32), np.array([0, col, 1, 4]), [0, 2, 4]),
        shape=(2, width),
    )
    write_store(str(path), csr_to_shards(X, np.array([1.0, -1.0])), n_features=width)


def test_kernel_active_set_on_a_hashed_width_stays_small(tmp_path):
    """active-set (RBF) on a store hashed into 2^31 columns allocated a 14.5 GiB workspace
    (the largest column used + 1); it now spans the columns the rows use."""
    _wide_store(tmp_path / "h.zarr", 2**31, 2_000_000_000)
    r = run_capped("train", "h.zarr", "-o", "m", "--solver", "active-set", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_capped("predict", "m", "h.zarr", "-o", "p.txt", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 3  # header + 2 rows


@pytest.mark.parametrize("solver", kernel_solvers())
def test_linear_dual_solvers_refuse_a_width_the_data_does_not_use(tmp_path, solver):
    """smo --kernel linear on 2 rows declaring 2e8 features took 3.2 GB (its dense w) and
    wrote a 1.6 GB model; the dense w is refused when it outgrows both the data and 256 MiB."""
    _wide_store(tmp_path / "w.zarr", 200_000_000, 199_999_998)
    r = run_capped(
        "train", "w.zarr", "-o", "m", "--solver", solver, "--kernel", "linear", cwd=tmp_path
    )
    assert r.returncode == 1, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "declares 200,000,000 features but holds only 4" in lines[0]
    assert "--hash-bits" in lines[0] and not (tmp_path / "m").exists()


def test_kernel_active_set_same_model_over_spread_columns(tmp_path, make_store):
    """The renumbered columns change no kernel value: the same rows with their columns
    spread over a 2^31-wide space train to the same dual objective and support vectors."""
    from sklearn.datasets import make_classification

    from ooc_svm.api import train

    X, y = make_classification(n_samples=400, n_features=12, random_state=3)
    X = sp.csr_matrix(X.astype(np.float32))
    spread = sp.csr_matrix((X.data, X.indices * 150_000_001 + 7, X.indptr), shape=(400, 2**31))
    a = make_store(X, y, shard_rows=100, name="a.zarr")
    b = make_store(spread, y, shard_rows=100, name="b.zarr")
    kw = {"kernel": "rbf", "gamma": 0.1, "C": 10.0, "sprint_size": 60}
    ra, rb = train(a, "active-set", **kw), train(b, "active-set", **kw)
    # (the passes take the sparse path over the wide store: round-off differs)
    assert rb.dual_objective == pytest.approx(ra.dual_objective, rel=1e-7)
    np.testing.assert_array_equal(rb.model.support_, ra.model.support_)
