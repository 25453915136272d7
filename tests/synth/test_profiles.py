"""`synth --like`: each profile has its public set's statistics, is deterministic by seed,
streams in bounded memory, and writes the same rows as text and as a store."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from ooc_svm.store import open_store
from ooc_svm.synth import PROFILES, SynthError, SynthModel, synth, synth_blocks, synth_matrix
from ooc_svm.synth.stream import _make_spec

#: rows sampled per profile (webspam rows hold ~3,700 non-zeros each)
SAMPLE_ROWS = {"rcv1": 4000, "url": 4000, "kdd2010": 4000, "webspam": 400, "criteo": 4000}


def _sample(name, rows=None, seed=3, **kw):
    return synth_matrix(rows or SAMPLE_ROWS[name], seed=seed, like=name, **kw)


def _row_norms(X):
    return np.sqrt(np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel())


#: the profiles, webspam (rows of ~3,700 non-zeros: seconds of CPU) marked slow
_NAMES = [
    pytest.param(n, marks=pytest.mark.slow) if n == "webspam" else n for n in sorted(PROFILES)
]


@pytest.mark.parametrize("name", _NAMES)
def test_sample_matches_published_statistics(name):
    """Columns, mean non-zeros a row, label balance and value kinds of a small sample are
    the profile's within sampling error (4 standard errors, plus 1 % for the label
    thresholds, which come from a pilot sample of 20,000 rows)."""
    p = PROFILES[name]
    X, y, qid = _sample(name)
    n = X.shape[0]
    assert qid is None and X.shape[1] == p.features and X.dtype == np.float32
    lens = np.diff(X.indptr)
    tol = 4 * lens.std() / np.sqrt(n) + 0.01 * p.nnz_per_row
    assert abs(lens.mean() - p.nnz_per_row) < tol, (lens.mean(), p.nnz_per_row, tol)
    pos = np.mean(y == 1)
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert abs(pos - p.positive) < 4 * np.sqrt(p.positive * (1 - p.positive) / n) + 0.01, pos
    o = p.options
    nd = o.get("dense_features", 0)
    dense = X.indices < nd
    vals, rest = X.data[dense], X.data[~dense]
    if o.get("normalize", True):
        np.testing.assert_allclose(_row_norms(X), 1.0, atol=1e-5)
    if o.get("fields"):  # click logs: every count column in every row, one-hot fields
        assert np.all(np.diff(X.indptr) <= nd + len(o["fields"]))
        assert vals.size == n * nd and np.all(vals >= np.float32(np.log(2.0)) - 1e-6)
        assert np.mean(rest == 1.0) > 0.99 and np.all(np.isin(rest, [1.0, 2.0, 3.0]))
        assert np.mean(lens == nd + len(o["fields"])) > 0.98  # hash collisions are rare
    elif o["values"] == "binary":
        assert np.all(rest == 1.0)
        if nd:  # real-valued columns in (0, 1), each in a fraction dense_fraction of rows
            assert np.all((vals > 0) & (vals < 1))
            share = vals.size / (n * nd)
            assert abs(share - o["dense_fraction"]) < 0.02, share
    elif o["values"] == "tf":  # normalised counts: every row's values are integer multiples
        for i in range(0, n, max(1, n // 20)):
            v = X.data[X.indptr[i] : X.indptr[i + 1]].astype(np.float64)
            ratio = v / v.min()
            np.testing.assert_allclose(ratio, np.round(ratio), atol=1e-3)
    else:  # tf-idf: many distinct positive values
        assert np.all(rest > 0) and np.unique(rest).size > rest.size // 10


@pytest.mark.parametrize("name", ["rcv1", "url", pytest.param("kdd2010", marks=pytest.mark.slow)])
def test_columns_used_and_popularity_exponent(name):
    """The distinct columns a sample uses match the popularity law's expectation within
    5 %, and the log-log slope of column counts against rank is the Zipf exponent."""
    p = PROFILES[name]
    X, _, _ = _sample(name)
    n = X.shape[0]
    model = SynthModel.get(_make_spec(None, None, 3, name))
    nd = p.options.get("dense_features", 0)
    used = np.unique(X.indices).size
    expected = model.expected_columns_used(n)
    assert abs(used - expected) < 0.05 * expected, (used, expected)
    counts = np.sort(np.bincount(X.indices[X.indices >= nd]))[::-1].astype(np.float64)
    ranks = np.arange(30, 1000)
    slope = np.polyfit(np.log(ranks + 1 + p.options["zipf_offset"]), np.log(counts[ranks]), 1)[0]
    assert abs(-slope - p.options["zipf"]) < 0.15, slope


def test_criteo_field_levels_follow_their_zipf_law():
    """Within a categorical field the most popular levels take the share the law gives."""
    X, _, _ = _sample("criteo", rows=4000)
    nd = PROFILES["criteo"].options["dense_features"]
    counts = np.sort(np.bincount(X.indices[X.indices >= nd]))[::-1]
    # fields with 3 and 4 levels: their top level is in >= 40 % of the rows
    assert counts[0] > 0.4 * X.shape[0]
    # and the columns used grow far slower than the rows' 26 draws (heavy reuse)
    assert np.unique(X.indices).size < 0.5 * 26 * X.shape[0]


@pytest.mark.parametrize("name", ["url", "criteo", pytest.param("webspam", marks=pytest.mark.slow)])
def test_deterministic_by_seed_threads_and_blocks(name):
    rows = 300 if name == "webspam" else 3000
    X1, y1, _ = _sample(name, rows=rows, threads=2, block_rows=1024)
    X2, y2, _ = _sample(name, rows=rows, threads=1, block_rows=77)
    assert (X1 != X2).nnz == 0 and np.array_equal(X1.indices, X2.indices)
    assert np.array_equal(y1, y2)
    X3, _, _ = _sample(name, rows=rows, seed=4)
    assert X3.shape == X1.shape and (X3 != X1).nnz > 0
    Xt, _, _ = _sample(name, rows=rows, split="test")
    assert (Xt != X1).nnz > 0


@pytest.mark.parametrize("name", ["url", "criteo"])
def test_text_and_store_hold_the_same_rows(tmp_path, name):
    txt, zs = str(tmp_path / "d.svm"), str(tmp_path / "d.zarr")
    synth(txt, 2500, seed=5, like=name)
    synth(zs, 2500, seed=5, like=name, shard_rows=1000)
    Xt, yt = load_svmlight_file(txt, n_features=PROFILES[name].features)
    st = open_store(zs)
    shards = [st.read_shard(i, verify=True) for i in range(st.n_shards)]
    X = sp.vstack([s.to_scipy(st.meta.n_features) for s in shards], format="csr")
    assert st.meta.n_features == PROFILES[name].features and st.n_shards == 3
    assert np.array_equal(Xt.indptr, X.indptr) and np.array_equal(Xt.indices, X.indices)
    np.testing.assert_array_equal(Xt.data.astype(np.float32), X.data)
    np.testing.assert_array_equal(yt, np.concatenate([s.y for s in shards]))


def test_streaming_memory_does_not_grow_with_rows(tmp_path):
    """Ten times the rows, the same peak of traced allocations: blocks are generated,
    written and dropped; nothing is held per row."""
    SynthModel.get(_make_spec(None, None, 6, "url"))  # the model: O(width), built once

    def peak(rows):
        tracemalloc.start()
        synth(str(tmp_path / f"u{rows}.svm"), rows, seed=6, like="url", block_rows=500,
              threads=1)  # fmt: skip
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    small, large = peak(1000), peak(10000)
    assert large < 1.3 * small + (1 << 20), (small, large)
    assert all(b.n_rows <= 500 for b in synth_blocks(2000, seed=6, like="url", block_rows=500))


def test_explicit_options_override_the_profile_and_errors_are_one_line():
    X, _, _ = synth_matrix(500, seed=1, like="kdd2010", features=100_000, nnz_per_row=10)
    assert X.shape[1] == 100_000 and abs(np.diff(X.indptr).mean() - 10) < 1.5
    with pytest.raises(SynthError, match="--features is required unless --like"):
        synth_matrix(10, seed=1)
    with pytest.raises(SynthError, match="unknown --like 'news20'; choose one of"):
        synth_matrix(10, seed=1, like="news20")
    with pytest.raises(SynthError, match="--seed is required"):
        synth_matrix(10, like="rcv1")
    with pytest.raises(SynthError, match="dense_features \\+ number of fields"):
        synth_matrix(10, seed=1, like="criteo", nnz_per_row=30)


def main(argv):
    """``ooc-svm`` with only the synth sub-command."""
    import argparse

    from ooc_svm.commands import synth as cmd

    p = argparse.ArgumentParser(prog="ooc-svm")
    cmd.add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    return args.func(args)


def test_cli_like(tmp_path, capsys):
    out = str(tmp_path / "c.svm")
    assert main(["synth", out, "--like", "criteo", "--rows", "200", "--seed", "2"]) == 0
    Xc, _ = load_svmlight_file(out, n_features=1_000_000)
    X, _, _ = synth_matrix(200, seed=2, like="criteo")
    assert np.array_equal(Xc.indices, X.indices)
    assert main(["synth", str(tmp_path / "n.svm"), "--rows", "20", "--seed", "2"]) == 1
    assert "--features is required unless --like" in capsys.readouterr().err
