"""Ingest: SVMlight text -> store, compared with sklearn.datasets.load_svmlight_file.

Every real dataset is ingested into both backends with small shards and must read back
identical to ``load_svmlight_file(path, zero_based=False)`` (indices, float32 values,
labels, qids). Synthetic cases cover the grammar (comments, CRLF, qid, explicit zeros,
exponents), block boundaries, several inputs, stdin, --append and --overwrite.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_SUFFIXES, dataset, ooc_cmd

from ooc_svm.cli import main
from ooc_svm.store import open_store
from ooc_svm.store.ingest import IngestError, ingest, ingest_with_stats
from ooc_svm.store.svmlight_numbers import parse_float

sklearn_datasets = pytest.importorskip("sklearn.datasets")

OOC_SVM = ooc_cmd()


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def read_back(path):
    store = open_store(path)
    shards = [store.read_shard(i, verify=True) for i in range(store.n_shards)]
    for s in shards:
        assert s.indptr.dtype == np.int64 and s.indices.dtype == np.int32
        assert s.data.dtype == np.float32 and s.y.dtype == np.float64
    X = sp.vstack([s.to_scipy(store.meta.n_features) for s in shards], format="csr")
    y = np.concatenate([s.y for s in shards])
    q = np.concatenate([s.qid for s in shards]) if store.meta.has_qid else None
    return store, X, y, q


def _open_any(path):
    p = str(path)
    if p.endswith(".xz"):
        return lzma.open(p, "rb")
    if p.endswith(".bz2"):
        return bz2.open(p, "rb")
    if p.endswith(".gz"):
        return gzip.open(p, "rb")
    return open(p, "rb")


@functools.lru_cache(maxsize=4)
def sk_load(path: str, qid: bool):
    with _open_any(path) as f:
        raw = f.read()
    return sklearn_datasets.load_svmlight_file(io.BytesIO(raw), zero_based=False, query_id=qid)


def sk_load_text(text: bytes, qid: bool = False, zero_based=False):
    return sklearn_datasets.load_svmlight_file(
        io.BytesIO(text), zero_based=zero_based, query_id=qid
    )


def assert_same(store_path, ref, qid=False):
    store, X, y, q = read_back(store_path)
    Xr = ref[0]
    Xr.sort_indices()
    assert X.shape[0] == Xr.shape[0]
    np.testing.assert_array_equal(X.indptr, Xr.indptr)
    np.testing.assert_array_equal(X.indices, Xr.indices)
    np.testing.assert_array_equal(X.data, Xr.data.astype(np.float32))
    np.testing.assert_array_equal(y, ref[1])
    assert store.meta.n_features == Xr.shape[1]
    if qid:
        np.testing.assert_array_equal(q, ref[2])
    else:
        assert q is None
    return store


# ------------------------------------------------------------------------------------------
# real datasets, both backends
# ------------------------------------------------------------------------------------------
DATASETS = [
    # (file under ../shared/data, has qid, label kind, shard rows: several shards each)
    ("a9a/a9a", False, "binary", 5000),
    ("a9a/a9a.t.gz", False, "binary", 5000),
    ("w8a/w8a.bz2", False, "binary", 12000),
    ("ijcnn1/ijcnn1.bz2", False, "binary", 15000),
    ("ijcnn1/ijcnn1.t.bz2", False, "binary", 25000),
    ("mushrooms/mushrooms", False, "binary", 2000),
    ("reuters_acq/train.dat", False, "binary", 600),
    ("reuters_acq/test.dat", False, "binary", 250),
    ("abalone/abalone_scale", False, "ordinal", 1000),
    ("mq2008/train.txt.xz", True, "ordinal", 3000),
    ("mq2008/vali.txt.xz", True, "ordinal", 1000),
    ("mq2008/test.txt.xz", True, "ordinal", 1000),
    ("sector/sector.scale.bz2", False, "multiclass", 2000),
    ("sector/sector.t.scale.bz2", False, "multiclass", 1000),
]


def _check_dataset(tmp_path, rel, qid, kind, shard_rows, suffix):
    path = dataset(rel)
    ref = sk_load(str(path), qid)
    out = tmp_path / ("store" + suffix)
    meta = ingest(
        [str(path)],
        str(out),
        shard_rows=shard_rows,
        # abalone's integer targets are ranks: ordinal on request (auto gives multiclass)
        label_kind="ordinal" if rel.startswith("abalone") else "auto",
    )
    assert meta.n_shards >= 2, "small shard_rows must give several shards"
    assert meta.label_kind == kind
    assert meta.has_qid == qid
    store = assert_same(out, ref, qid)
    assert store.meta.backend == suffix[1:]
    assert store.meta.sources == [os.path.abspath(path)]
    assert sorted(os.listdir(tmp_path)) == ["store" + suffix]


# every dataset, both backends: about 20 s in all on this machine, so not marked slow
@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
@pytest.mark.parametrize("rel,qid,kind,shard_rows", DATASETS, ids=[s[0] for s in DATASETS])
def test_real_dataset_matches_sklearn(tmp_path, rel, qid, kind, shard_rows, suffix):
    _check_dataset(tmp_path, rel, qid, kind, shard_rows, suffix)


def test_mushrooms_crlf_labels_1_2(tmp_path):
    """mushrooms has CRLF line ends and labels 1/2."""
    path = dataset("mushrooms/mushrooms")
    meta = ingest(str(path), str(tmp_path / "m.zarr"))
    assert meta.labels == [1.0, 2.0] and meta.label_kind == "binary"


# ------------------------------------------------------------------------------------------
# grammar
# ------------------------------------------------------------------------------------------
GRAMMAR = (
    b"# header comment\n"
    b"+1 1:0.5 3:1e-3 7:-2.5E2   # trailing comment\r\n"
    b"\n"
    b"   \t \n"
    b"-1 2:0 4:0.0 5:-0 9:1.\n"  # explicit zeros are stored entries
    b"0 1:.5 2:+3 3:1e+2 4:-1.5e-7\n"
    b"2 10:123456789012345678901234567890\n"
    b"0.25 1:0.1 2:0.30000000000000004 3:3.4028234663852886e38 4:1e-50 5:7e-46\n"
    b"-3.5e1\n"  # a row with no features
    b"1\t1:1\t2:2 #c:3 4:4\n"
    b"1 6:1#comment right after a value\n"
    b"   1 8:8   "  # leading blanks, trailing blanks, no final newline
)


@pytest.mark.parametrize("block_mb", [8.0, 1e-9])
def test_grammar_matches_sklearn(tmp_path, block_mb):
    src = tmp_path / "g.svm"
    src.write_bytes(GRAMMAR)
    ref = sk_load_text(GRAMMAR)
    out = tmp_path / "g.zarr"
    ingest(str(src), str(out), shard_rows=3, block_mb=block_mb)
    _, X, y, _ = read_back(out)
    assert_same(out, ref)
    # explicit zeros are kept as stored entries, like load_svmlight_file keeps them
    assert X[1].nnz == 4
    assert np.signbit(X.data[X.indptr[1] + 2])  # "-0" stays -0.0


def test_qid_and_docid_comments(tmp_path):
    text = (
        b"2 qid:1 1:0.5 2:0.25 #docid = A\n"
        b"0 qid:1 1:0.1 #docid = B\n"
        b"1 qid:-7 3:1\n"
        b"0 qid:+8 2:1 # x:y\n"
    )
    src = tmp_path / "q.txt"
    src.write_bytes(text)
    ingest(str(src), str(tmp_path / "q.parquet"))
    store = assert_same(tmp_path / "q.parquet", sk_load_text(text, qid=True), qid=True)
    assert store.meta.has_qid


def test_zero_based(tmp_path):
    text = b"1 0:1 3:2\n-1 1:5\n"
    src = tmp_path / "z.svm"
    src.write_bytes(text)
    ingest(str(src), str(tmp_path / "z.zarr"), zero_based=True)
    assert_same(tmp_path / "z.zarr", sk_load_text(text, zero_based=True))
    _, X, _, _ = read_back(tmp_path / "z.zarr")
    assert X.indices.tolist() == [0, 3, 1]


def test_float_parsing_is_exact_on_random_strings():
    """The kernel's decimal -> float64 (-> float32) equals Python's float() bit for bit."""
    rng = random.Random(12345)
    np_rng = np.random.default_rng(12345)
    cases = []
    for x in np_rng.standard_normal(3000) * 10.0 ** np_rng.integers(-40, 40, 3000):
        with np.errstate(over="ignore"):
            x32 = float(np.float32(x))
        cases += [repr(float(x)), f"{x:.9g}", f"{x:.17e}", f"{x:.25g}", repr(x32)]
    bits = np_rng.integers(0, 2**63, 3000, dtype=np.uint64).view(np.float64)
    cases += [repr(float(b)) for b in bits if np.isfinite(b)]
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
        j = rng.randint(0, len(digits))
        cases.append(digits[:j] + "." + digits[j:] + f"e{rng.randint(-330, 310)}")
    cases += [
        "0",
        "-0",
        "1",
        "+1",
        "-1",
        "9007199254740993",
        "1e22",
        "1e23",
        "4.9e-324",
        "2.2250738585072011e-308",
        "1.7976931348623157e308",
        "0.1",
        ".5",
        "5.",
        "3.4028235677973366e38",
        "1.401298464324817e-45",
        "7.006492321624085e-46",
    ]
    n_fallback = 0
    for s in cases:
        ref = float(s)
        for f32 in (False, True):
            st, v = parse_float(s, f32)
            if st == 4:  # left to Python's float by design
                n_fallback += 1
                continue
            if f32:
                with np.errstate(over="ignore"):
                    r32 = np.float32(ref)
                    got = np.float32(v)
                if np.isinf(r32):
                    assert st == 3 or np.isinf(got), s
                else:
                    assert st == 0 and got == r32 and np.signbit(got) == np.signbit(r32), s
            elif np.isinf(ref):
                assert st == 3, s
            else:
                assert st == 0 and v == ref and np.signbit(v) == np.signbit(ref), s
    assert n_fallback < 0.05 * 2 * len(cases)


@pytest.mark.parametrize(
    "bad", ["", ".", "-", "e5", "1e", "1e+", "1.2.3", "0x10", "1_000", "abc", "1,5", "--1"]
)
def test_parse_float_rejects(bad):
    assert parse_float(bad)[0] == 1


@pytest.mark.parametrize(
    "word,status", [("nan", 2), ("NaN", 2), ("-inf", 3), ("Infinity", 3), ("1e400", 3)]
)
def test_parse_float_special(word, status):
    assert parse_float(word)[0] == status


def _halfway(x: float) -> str:
    """Exact decimal of the midpoint between x and the next double: only an exact big-number
    conversion can round it, so the kernel leaves it to Python's float."""
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 200
        return str((Decimal(x) + Decimal(float(np.nextafter(x, 2 * x)))) / 2)


def test_fallback_values_are_converted(tmp_path):
    """Numbers the kernel leaves to Python (halfway cases with many digits), in values and
    labels, more of them in one block than the kernel's first fallback table holds."""
    halves = [_halfway(x) for x in (0.1, 0.3, 1.7, 123.456, 2.5e-3)]
    assert all(parse_float(h)[0] == 4 for h in halves)
    lines = [
        f"{halves[i % 5]} 1:{halves[(i + 1) % 5]} 3:{halves[(i + 2) % 5]} 4:0.5" for i in range(800)
    ]
    text = ("\n".join(lines) + "\n").encode()
    src = tmp_path / "f.svm"
    src.write_bytes(text)
    ingest(str(src), str(tmp_path / "f.zarr"))
    assert_same(tmp_path / "f.zarr", sk_load_text(text))


# ------------------------------------------------------------------------------------------
# inputs, blocks, shards, threads
# ------------------------------------------------------------------------------------------
def _random_text(n_rows, seed, qid=False, n_features=300):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n_rows):
        k = int(rng.integers(0, 30))
        cols = np.sort(rng.choice(n_features, size=k, replace=False)) + 1
        vals = rng.standard_normal(k).astype(np.float32)
        feats = " ".join(f"{c}:{v:.7g}" for c, v in zip(cols, vals, strict=True))
        q = f" qid:{i // 7}" if qid else ""
        lines.append(f"{rng.choice([-1, 1])}{q} {feats}".rstrip())
    return ("\n".join(lines) + "\n").encode()


def test_blocks_threads_and_shard_sizes_agree(tmp_path):
    text = _random_text(3000, 1)
    src = tmp_path / "r.svm"
    src.write_bytes(text)
    ref = sk_load_text(text)
    for i, (block_mb, threads, kw) in enumerate(
        [
            (8.0, 1, {"shard_rows": 1000}),
            (0.005, 2, {"shard_rows": 211, "writer_threads": 3}),
            (0.002, 3, {"shard_mb": 0.05, "writer_threads": 1}),
            (1e-9, 2, {"shard_rows": 500, "shard_mb": 0.04}),
        ]
    ):
        out = tmp_path / f"r{i}.zarr"
        meta, stats = ingest_with_stats(
            str(src), str(out), block_mb=block_mb, threads=threads, **kw
        )
        assert_same(out, ref)
        assert stats.rows == 3000 and stats.nnz == ref[0].nnz and stats.shards == meta.n_shards
        sizes = [s.n_rows for s in meta.shards]
        if "shard_rows" in kw:
            assert max(sizes) <= kw["shard_rows"]
        if "shard_mb" in kw:
            budget = kw["shard_mb"] * 1e6
            for s in meta.shards:
                assert s.n_rows == 1 or s.n_rows * 16 + s.nnz * 8 <= budget


def test_compressed_inputs_detected_by_content(tmp_path):
    text = _random_text(500, 2)
    ref = sk_load_text(text)
    (tmp_path / "a.data").write_bytes(gzip.compress(text))  # no telling suffix
    (tmp_path / "b.data").write_bytes(bz2.compress(text))
    (tmp_path / "c.data").write_bytes(lzma.compress(text))
    (tmp_path / "d.gz").write_bytes(text)  # a lying suffix: plain text
    # multi-member gzip (concatenated streams)
    half = text.index(b"\n", len(text) // 2) + 1
    (tmp_path / "e.gz").write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    for name in ("a.data", "b.data", "c.data", "d.gz", "e.gz"):
        out = tmp_path / (name + ".zarr")
        ingest(str(tmp_path / name), str(out), block_mb=0.01)
        assert_same(out, ref)


def test_several_inputs_in_order(tmp_path):
    t1, t2, t3 = _random_text(100, 3), _random_text(50, 4), _random_text(70, 5)
    (tmp_path / "1.svm").write_bytes(t1)
    (tmp_path / "2.svm.gz").write_bytes(gzip.compress(t2))
    (tmp_path / "3.svm").write_bytes(t3)
    out = tmp_path / "all.parquet"
    rc = main(
        [
            "ingest",
            str(tmp_path / "1.svm"),
            str(tmp_path / "2.svm.gz"),
            str(tmp_path / "3.svm"),
            str(out),
            "--shard-rows",
            "40",
        ]
    )
    assert rc == 0
    ref = sk_load_text(t1 + t2 + t3)
    store = assert_same(out, ref)
    assert len(store.meta.sources) == 3


def test_n_features_declared(tmp_path):
    text = b"1 1:1 5:2\n"
    (tmp_path / "a.svm").write_bytes(text)
    meta = ingest(str(tmp_path / "a.svm"), str(tmp_path / "a.zarr"), n_features=100)
    assert meta.n_features == 100


def test_label_kinds(tmp_path):
    (tmp_path / "r.svm").write_bytes(b"0.5 1:1\n1.25 2:1\n-3 1:2\n")
    assert ingest(str(tmp_path / "r.svm"), str(tmp_path / "r.zarr")).label_kind == "real"
    (tmp_path / "o.svm").write_bytes(b"1 1:1\n2 2:1\n3 1:2\n")
    # integer class ids without qid are classes (LIBSVM); ordinal on request
    assert ingest(str(tmp_path / "o.svm"), str(tmp_path / "o.zarr")).label_kind == "multiclass"
    m = ingest(str(tmp_path / "o.svm"), str(tmp_path / "od.zarr"), label_kind="ordinal")
    assert m.label_kind == "ordinal"
    (tmp_path / "q.svm").write_bytes(b"1 qid:1 1:1\n2 qid:1 2:1\n3 qid:2 1:2\n")
    assert ingest(str(tmp_path / "q.svm"), str(tmp_path / "q.zarr")).label_kind == "ordinal"
    m = ingest(str(tmp_path / "o.svm"), str(tmp_path / "m.zarr"), label_kind="multiclass")
    assert m.label_kind == "multiclass" and m.labels == [1.0, 2.0, 3.0]
    m = ingest(str(tmp_path / "o.svm"), str(tmp_path / "x.zarr"), label_kind="real")
    assert m.label_kind == "real"


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_append(tmp_path, suffix):
    t1, t2 = _random_text(120, 6), _random_text(80, 7)
    (tmp_path / "1.svm").write_bytes(t1)
    (tmp_path / "2.svm").write_bytes(t2)
    out = str(tmp_path / ("s" + suffix))
    assert main(["ingest", str(tmp_path / "1.svm"), out, "--shard-rows", "50"]) == 0
    assert main(["ingest", str(tmp_path / "2.svm"), out, "--append", "--shard-rows", "50"]) == 0
    store = assert_same(out, sk_load_text(t1 + t2))
    assert store.meta.n_shards == 3 + 2
    assert [s.row_start for s in store.meta.shards] == [0, 50, 100, 120, 170]
    assert sorted(os.listdir(tmp_path)) == ["1.svm", "2.svm", "s" + suffix]


def test_overwrite(tmp_path, capsys):
    t1, t2 = _random_text(30, 8), _random_text(20, 9)
    (tmp_path / "1.svm").write_bytes(t1)
    (tmp_path / "2.svm").write_bytes(t2)
    out = str(tmp_path / "s.zarr")
    assert main(["ingest", str(tmp_path / "1.svm"), out]) == 0
    assert main(["ingest", str(tmp_path / "2.svm"), out, "--overwrite"]) == 0
    assert_same(out, sk_load_text(t2))
    assert sorted(os.listdir(tmp_path)) == ["1.svm", "2.svm", "s.zarr"]
    assert "ingested 20 rows" in capsys.readouterr().out


def test_format_flag_and_compression(tmp_path):
    text = _random_text(60, 10)
    (tmp_path / "a.svm").write_bytes(text)
    for comp in ("zstd", "lz4", "none"):
        out = tmp_path / f"a_{comp}.store"
        assert (
            main(
                [
                    "ingest",
                    str(tmp_path / "a.svm"),
                    str(out),
                    "--format",
                    "parquet",
                    "--compression",
                    comp,
                ]
            )
            == 0
        )
        store = assert_same(out, sk_load_text(text))
        assert store.meta.backend == "parquet" and store.meta.compression == comp


def test_summary_line_and_json(tmp_path, capsys):
    text = _random_text(40, 11)
    (tmp_path / "a.svm").write_bytes(text)
    assert main(["ingest", str(tmp_path / "a.svm"), str(tmp_path / "a.zarr")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert "ingested 40 rows" in out[0] and " into 1 shard from " in out[0] and "MB/s" in out[0]
    import json

    assert main(["ingest", str(tmp_path / "a.svm"), str(tmp_path / "b.zarr"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rows"] == 40 and d["shards"] == 1 and d["format"] == "zarr"


def test_stdin_subprocess(tmp_path):
    text = _random_text(200, 12, qid=True)
    out = tmp_path / "stdin.zarr"
    r = subprocess.run(
        [*OOC_SVM, "ingest", "-", str(out), "--shard-rows", "64"],
        input=gzip.compress(text),
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert "ingested 200 rows" in r.stdout.decode()
    store = assert_same(out, sk_load_text(text, qid=True), qid=True)
    assert store.meta.sources == ["<stdin>"]


def test_stdin_in_process(tmp_path, monkeypatch):
    text = _random_text(50, 13)

    class FakeStdin:
        buffer = io.BufferedReader(io.BytesIO(text))

    monkeypatch.setattr(sys, "stdin", FakeStdin)
    ingest(["-"], str(tmp_path / "s.zarr"))
    assert_same(tmp_path / "s.zarr", sk_load_text(text))


def test_long_line_longer_than_block(tmp_path):
    cols = np.arange(1, 20001)
    line = "1 " + " ".join(f"{c}:{c % 7 / 8}" for c in cols) + "\n"
    text = (line + "-1 3:1\n" + line).encode()
    (tmp_path / "l.svm").write_bytes(text)
    ingest(str(tmp_path / "l.svm"), str(tmp_path / "l.zarr"), block_mb=0.01, shard_mb=0.05)
    assert_same(tmp_path / "l.zarr", sk_load_text(text))


def test_progress_callback_counts_input_bytes(tmp_path):
    text = _random_text(500, 14)
    (tmp_path / "p.svm.gz").write_bytes(gzip.compress(text))
    seen = []
    meta, stats = ingest_with_stats(
        str(tmp_path / "p.svm.gz"), str(tmp_path / "p.zarr"), block_mb=0.01, progress=seen.append
    )
    assert sum(seen) == stats.input_bytes == os.path.getsize(tmp_path / "p.svm.gz")
    assert stats.text_bytes == len(text)


def test_ingest_error_is_exception_class():
    assert issubclass(IngestError, Exception)
