"""`ooc-svm synth`: determinism, data properties, text ↔ store agreement, CLI behaviour."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_SUFFIXES
from sklearn.datasets import load_svmlight_file

from ooc_svm.store import open_store
from ooc_svm.store.format import Shard
from ooc_svm.synth import (
    SynthError,
    SynthModel,
    SynthSpec,
    format_svmlight,
    synth,
    synth_blocks,
    synth_matrix,
)

SMALL = dict(rows=3000, features=2000, nnz_per_row=15, seed=7)


def _read_store(path):
    st = open_store(path)
    shards = [st.read_shard(i, verify=True) for i in range(st.n_shards)]
    X = sp.vstack([s.to_scipy(st.meta.n_features) for s in shards], format="csr")
    y = np.concatenate([s.y for s in shards])
    q = np.concatenate([s.qid for s in shards]) if st.meta.has_qid else None
    return st, X, y, q


def _same_csr(A, B):
    return (
        A.shape == B.shape
        and np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


# -- determinism ---------------------------------------------------------------------------
def test_text_byte_identical_across_runs_threads_and_block_sizes(tmp_path):
    a, b, c = (tmp_path / f"{n}.svm" for n in "abc")
    synth(str(a), **SMALL)
    synth(str(b), **SMALL)
    synth(str(c), **SMALL, threads=1, block_rows=333)
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp files left


def test_compressed_text_reproducible_and_decompresses_to_plain(tmp_path):
    synth(str(tmp_path / "p.svm"), **SMALL)
    synth(str(tmp_path / "a.svm.gz"), **SMALL, block_rows=500)
    synth(str(tmp_path / "b.svm.gz"), **SMALL, block_rows=500, threads=1)
    synth(str(tmp_path / "c.svm.gz"), **SMALL, block_rows=1024)
    assert (tmp_path / "a.svm.gz").read_bytes() == (tmp_path / "b.svm.gz").read_bytes()
    plain = (tmp_path / "p.svm").read_bytes()
    for n in "abc":
        assert gzip.decompress((tmp_path / f"{n}.svm.gz").read_bytes()) == plain
    synth(str(tmp_path / "d.svm.bz2"), **SMALL, block_rows=1000)
    synth(str(tmp_path / "e.svm.xz"), **SMALL, block_rows=1000, compress_level=1)
    assert bz2.decompress((tmp_path / "d.svm.bz2").read_bytes()) == plain
    assert lzma.decompress((tmp_path / "e.svm.xz").read_bytes()) == plain
    # multi-member files are read whole by the usual readers
    X, y = load_svmlight_file(str(tmp_path / "c.svm.gz"), n_features=2000)
    Xp, yp = load_svmlight_file(str(tmp_path / "p.svm"), n_features=2000)
    assert _same_csr(X, Xp) and np.array_equal(y, yp)


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_store_identical_across_runs_threads_and_block_sizes(tmp_path, suffix):
    p1, p2 = str(tmp_path / f"a{suffix}"), str(tmp_path / f"b{suffix}")
    synth(p1, **SMALL, shard_rows=1000)
    synth(p2, **SMALL, shard_rows=1000, threads=1, block_rows=77)
    m1, m2 = open_store(p1).meta, open_store(p2).meta
    assert [s.checksum for s in m1.shards] == [s.checksum for s in m2.shards]
    assert m1.n_shards == 3 and m1.n_rows == SMALL["rows"] and m1.n_features == 2000
    assert _same_csr(_read_store(p1)[1], _read_store(p2)[1])


def test_blocks_do_not_depend_on_block_size_or_threads():
    X1, y1, _ = synth_matrix(**SMALL, block_rows=4096, threads=2)
    X2, y2, _ = synth_matrix(**SMALL, block_rows=101, threads=1)
    assert _same_csr(X1, X2) and np.array_equal(y1, y2)
    starts = [b.row_start for b in synth_blocks(**SMALL, block_rows=1000)]
    assert starts == [0, 1000, 2000]


def test_prefix_property_and_different_seed_or_split():
    X, y, _ = synth_matrix(**SMALL)
    Xp, yp, _ = synth_matrix(**{**SMALL, "rows": 1234})
    assert _same_csr(X[:1234], Xp) and np.array_equal(y[:1234], yp)
    Xs, _, _ = synth_matrix(**{**SMALL, "seed": 8})
    assert not _same_csr(X, Xs)
    Xt, _, _ = synth_matrix(**SMALL, split="test")
    assert not _same_csr(X, Xt)
    # same hidden weights and popularity law for both splits (they depend on the seed alone)
    spec = SynthSpec(features=2000, nnz_per_row=15.0, seed=7)
    assert SynthModel(spec).w is not None
    np.testing.assert_array_equal(SynthModel(spec).w, SynthModel.get(spec).w)


# -- data properties -----------------------------------------------------------------------
def test_rows_normalised_sorted_unique_and_in_range():
    X, y, qid = synth_matrix(20000, 5000, 30, 3)
    assert qid is None and X.dtype == np.float32
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel())
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    assert X.indices.min() >= 0 and X.indices.max() < 5000
    lens = np.diff(X.indptr)
    assert lens.min() >= 1
    starts = X.indptr[:-1]
    d = np.diff(X.indices.astype(np.int64))
    within_row = np.ones(X.nnz - 1, bool)
    within_row[starts[1:] - 1] = False
    assert np.all(d[within_row] > 0)  # strictly increasing: sorted and unique
    assert np.all(X.data > 0)
    assert abs(lens.mean() - 30) < 0.6, lens.mean()
    assert lens.std() > 5  # lengths vary per row
    pos = np.mean(y == 1)
    assert set(np.unique(y)) == {-1.0, 1.0} and 0.3 <= pos <= 0.5, pos
    # Zipf-like skew: the top 1% of features hold a large share of the non-zeros
    df = np.sort(np.bincount(X.indices, minlength=5000))[::-1]
    share = df[:50].sum() / df.sum()
    assert share > 0.25, share
    assert (df > 0).mean() > 0.9  # and there is a long tail


def test_short_feature_space_fallback():
    X, _, _ = synth_matrix(500, 10, 8, 0, nnz_spread=1.0)
    lens = np.diff(X.indptr)
    assert lens.max() == 10 and lens.min() >= 1
    for i in range(X.shape[0]):
        r = X.indices[X.indptr[i] : X.indptr[i + 1]]
        assert np.all(np.diff(r) > 0)


def test_label_noise_flips_requested_fraction():
    X0, y0, _ = synth_matrix(**SMALL, noise=0.0)
    X1, y1, _ = synth_matrix(**SMALL, noise=0.2)
    assert _same_csr(X0, X1)
    flipped = np.mean(y0 != y1)
    assert 0.17 < flipped < 0.23, flipped


def test_ranks_and_qid():
    X, y, q = synth_matrix(3000, 2000, 15, 5, ranks=4)
    assert q is None and set(np.unique(y)) == {1.0, 2.0, 3.0, 4.0}
    counts = np.bincount(y.astype(int))[1:] / y.size
    assert np.all(np.abs(counts - 0.25) < 0.05), counts
    X, y, q = synth_matrix(3003, 2000, 15, 5, ranks=3, qid_size=10, block_rows=64)
    np.testing.assert_array_equal(q, np.arange(3003) // 10 + 1)
    # relevance within each query: every full query spans all three grades
    for g in range(300):
        assert len(np.unique(y[g * 10 : (g + 1) * 10])) >= 2
    X2, y2, q2 = synth_matrix(3003, 2000, 15, 5, ranks=3, qid_size=10, threads=1)
    assert np.array_equal(y, y2) and _same_csr(X, X2)
    _, yb, qb = synth_matrix(1000, 2000, 15, 5, qid_size=7)
    assert set(np.unique(yb)) == {-1.0, 1.0} and qb[-1] == 999 // 7 + 1


def test_model_generalises_from_train_to_test_split():
    from sklearn.svm import LinearSVC

    X, y, _ = synth_matrix(6000, 2000, 20, 11)
    Xt, yt, _ = synth_matrix(4000, 2000, 20, 11, split="test")
    acc = LinearSVC(C=1.0).fit(X, y).score(Xt, yt)
    chance = max(np.mean(yt == 1), np.mean(yt == -1))
    assert acc > chance + 0.12, (acc, chance)


# -- text output ---------------------------------------------------------------------------
def test_float_formatting_round_trips_float32_exactly():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    vals = bits.view(np.float32)
    vals = vals[np.isfinite(vals)]
    extra = np.array(
        [
            0.0,
            -0.0,
            1.0,
            0.5,
            0.1,
            1e-7,
            3.4028235e38,
            1.4e-45,
            123456.7,
            1e9,
            16777216.0,
            0.30000001,
        ],
        np.float32,
    )
    vals = np.concatenate([vals, extra, rng.random(20000).astype(np.float32)])
    n = vals.size
    shard = Shard(np.arange(n + 1, dtype=np.int64), np.zeros(n, np.int32), vals, np.ones(n), None)
    lines = bytes(format_svmlight(shard)).decode().splitlines()
    assert len(lines) == n
    parsed = np.array([float(line.split(":")[1]) for line in lines]).astype(np.float32)
    np.testing.assert_array_equal(parsed, vals)
    digits = [
        len(line.split(":")[1].split("e")[0].lstrip("-0.").replace(".", ""))
        for line in lines[-20000:]
    ]
    assert max(digits) <= 9


@pytest.mark.parametrize("kw", [{}, {"ranks": 5, "qid_size": 20}])
def test_text_parses_back_identical_to_store(tmp_path, kw):
    txt, zs, pq = tmp_path / "d.svm", str(tmp_path / "d.zarr"), str(tmp_path / "d.pq")
    params = dict(rows=2500, features=3000, nnz_per_row=25, seed=2, **kw)
    synth(str(txt), **params)
    synth(zs, **params, shard_rows=1000)
    synth(pq, **params)
    if kw:
        Xt, yt, qt = load_svmlight_file(str(txt), n_features=3000, query_id=True)
    else:
        Xt, yt = load_svmlight_file(str(txt), n_features=3000)
        qt = None
    for path in (zs, pq):
        st, X, y, q = _read_store(path)
        assert st.meta.label_kind == ("ordinal" if kw else "binary")
        assert np.array_equal(Xt.indptr, X.indptr) and np.array_equal(Xt.indices, X.indices)
        np.testing.assert_array_equal(Xt.data.astype(np.float32), X.data)
        np.testing.assert_array_equal(yt, y)
        if kw:
            np.testing.assert_array_equal(qt, q)
        else:
            assert q is None


# -- CLI -----------------------------------------------------------------------------------
def main(argv):
    """``ooc-svm`` with only the synth sub-command (isolated from other commands' imports)."""
    import argparse

    from ooc_svm.commands import synth as cmd

    p = argparse.ArgumentParser(prog="ooc-svm")
    cmd.add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    return args.func(args)


#: a small synth run: 500 rows, 300 features, 10 non-zeros per row, seed 1
_SMALL = ["--rows", "500", "--features", "300", "--nnz-per-row", "10", "--seed", "1"]


def test_cli_writes_refuses_existing_and_overwrites(tmp_path, capsys):
    out = str(tmp_path / "x.svm")
    args = ["synth", out, *_SMALL]
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert "500 rows" in summary and "nnz" in summary and "MB" in summary
    before = open(out, "rb").read()
    assert main(args + ["--noise", "0.3"]) == 1
    err = capsys.readouterr().err
    assert "destination exists" in err and "--overwrite" in err
    assert open(out, "rb").read() == before
    assert main(args + ["--noise", "0.3", "--overwrite"]) == 0
    assert open(out, "rb").read() != before
    store = str(tmp_path / "s")
    assert main(["synth", store, "--store", *_SMALL, "--json"]) == 0
    assert open_store(store).meta.n_rows == 500
    assert (
        main(
            [
                "synth",
                str(tmp_path / "y.svm"),
                "--rows",
                "5",
                "--features",
                "3",
                "--nnz-per-row",
                "10",
                "--seed",
                "1",
            ]
        )
        == 1
    )
    assert "--nnz-per-row" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "y.svm")


def test_cli_stdout(tmp_path, capfdbinary):
    assert (
        main(
            ["synth", "-", "--rows", "50", "--features", "100", "--nnz-per-row", "5", "--seed", "3"]
        )
        == 0
    )
    out = capfdbinary.readouterr().out
    ref = tmp_path / "r.svm"
    synth(str(ref), 50, 100, 5, 3)
    assert out == ref.read_bytes()


def test_failure_leaves_nothing(tmp_path):
    def boom(n):
        raise RuntimeError("stop")

    for name in ("t.svm", "t.zarr"):
        with pytest.raises(RuntimeError):
            synth(str(tmp_path / name), **SMALL, block_rows=500, progress=boom)
    assert os.listdir(tmp_path) == []
    with pytest.raises(SynthError, match="split"):
        synth(str(tmp_path / "u.svm"), **SMALL, split="validation")
    with pytest.raises(SynthError, match="--rows"):
        synth(str(tmp_path / "u.svm"), 0, 10, 2, 1)
