"""Hostile input: fuzzed SVMlight bytes, crafted stores and models, disk full, racing ingests.

The fuzz property: ingest either accepts the bytes and the store equals what
``sklearn.datasets.load_svmlight_file`` reads (when it accepts them too), or it fails with a
clean :class:`IngestError` that names the line — never another exception, never a partial store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ooc_svm.model.model import ModelError, load_model
from ooc_svm.store import StoreError, open_store
from ooc_svm.store.ingest import IngestError, ingest

sklearn_datasets = pytest.importorskip("sklearn.datasets")


# -- fuzzing ingest -------------------------------------------------------------------------

_good_num = st.one_of(
    st.integers(-5, 5).map(str),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.6g}"),
    st.sampled_from(["1e-3", "2.5E+2", ".5", "-0", "+1", "0.0", "1.000000001"]),
)
_bad_num = st.sampled_from(["nan", "inf", "x", "", "1e999", "1..2", "--1", "0x10"])


@st.composite
def _num(draw):
    return draw(_bad_num if draw(st.integers(0, 149)) == 0 else _good_num)


@st.composite
def _line(draw, with_qid: bool = False):
    label = draw(st.one_of(st.sampled_from(["+1", "-1", "1", "0", "2", "3.5"]), _num()))
    n = draw(st.integers(0, 6))
    idx = sorted(draw(st.sets(st.integers(1, 40), min_size=n, max_size=n)))
    if draw(st.integers(0, 39)) == 0 and idx:
        # occasionally break the ordering or use index 0 / negative indices
        k = draw(st.integers(0, len(idx) - 1))
        idx[k] = draw(st.sampled_from([0, -3, idx[0], 41]))
    parts = [label]
    if with_qid:
        bad = draw(st.integers(0, 49)) == 0
        q = st.sampled_from(["x", "-1", "", "1.5"]) if bad else st.sampled_from(["1", "2", "7"])
        parts.append(f"qid:{draw(q)}")
    for j in idx:
        parts.append(f"{j}:{draw(_num())}")
    line = " ".join(parts)
    if draw(st.integers(0, 7)) == 0:
        line += " # comment " + draw(st.text(alphabet="ab:1 #", max_size=8))
    return line


@st.composite
def _document(draw):
    with_qid = draw(st.integers(0, 3)) == 0
    lines = draw(st.lists(_line(with_qid), min_size=0, max_size=12))
    sep = draw(st.sampled_from(["\n", "\r\n"]))
    text = sep.join(lines) + draw(st.sampled_from(["", "\n"]))
    data = bytearray(text.encode())
    # byte-level mutations
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            data[pos] = draw(st.integers(0, 255))
        elif op == 1:
            del data[pos]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=3))
    return bytes(data)


def _sk_load(path):
    try:
        X, y = sklearn_datasets.load_svmlight_file(str(path), zero_based=False)
    except Exception:  # whatever sklearn refuses
        return None
    return sp.csr_matrix(X), y


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=_document())
def test_fuzzed_svmlight_bytes(tmp_path, doc):
    src = tmp_path / "in.svm"
    src.write_bytes(doc)
    dest = tmp_path / "out.zarr"
    import shutil

    shutil.rmtree(dest, ignore_errors=True)
    try:
        meta = ingest([str(src)], str(dest), shard_rows=3)
    except IngestError as e:
        msg = str(e)
        assert str(src) in msg or "in.svm" in msg, msg
        # an error about a specific line names it; empty input has its own message
        low = msg.lower()
        # a document that happens to start with a compression magic (b"BZh", gzip, xz) is
        # refused as corrupt compressed data, which names the file and the check to run
        magic = doc.startswith((b"BZh", b"\x1f\x8b", b"\xfd7zXZ"))
        assert (
            re.search(r"line \d+", msg)
            or "empty" in low
            or "no rows" in low
            or (magic and ("corrupt" in low or "truncated" in low))
        ), msg
        assert not dest.exists()
        assert [p.name for p in tmp_path.iterdir()] == ["in.svm"], list(tmp_path.iterdir())
        event("ingest refused")
        return
    ref = _sk_load(src)
    if ref is None:
        event("only ingest accepted")
        return
    event("both accepted: compared")
    X_ref, y_ref = ref
    store = open_store(str(dest))
    shards = [store.read_shard(i, verify=True) for i in range(store.n_shards)]
    X = sp.vstack([s.to_scipy(store.meta.n_features) for s in shards]).tocsr()
    y = np.concatenate([s.y for s in shards])
    assert meta.n_rows == X_ref.shape[0]
    np.testing.assert_array_equal(y, y_ref)
    n = max(X.shape[1], X_ref.shape[1])
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n))
    X_ref = sp.csr_matrix((X_ref.data, X_ref.indices, X_ref.indptr), shape=(X.shape[0], n))
    np.testing.assert_array_equal(X.indptr, X_ref.indptr)
    np.testing.assert_array_equal(X.indices, X_ref.indices)
    np.testing.assert_array_equal(X.data, X_ref.data.astype(np.float32))


# -- crafted stores and models --------------------------------------------------------------


# a small store of two shards: "1 1:1 3:2", "-1 2:1", "1 1:0.5", "-1 3:1"
SMALL_X = np.array([[1, 0, 2], [0, 1, 0], [0.5, 0, 0], [0, 0, 1]], dtype=np.float32)
SMALL_Y = np.array([1.0, -1.0, 1.0, -1.0])


@pytest.mark.parametrize("name", ["s.zarr", "s.parquet"])
def test_crafted_store_metadata_refused_before_reading(tmp_path, make_store, name):
    make_store(SMALL_X, SMALL_Y, shard_rows=2, name=name)
    path = tmp_path / name
    if name.endswith(".zarr"):
        meta_file = path / "zarr.json"
        doc = json.loads(meta_file.read_text())
        meta = doc["attributes"]["ooc_svm"]
    else:
        meta_file = path / "_ooc_svm.json"
        doc = json.loads(meta_file.read_text())
        meta = doc
    good = json.dumps(doc)
    for mutate, pattern in [
        (lambda m: m["shards"][0].update(name="../../outside"), "unsafe name"),
        (lambda m: m["shards"][0].update(name="/etc/passwd"), "unsafe name"),
        (lambda m: m.update(n_rows=10**15), "shard table|absurd|inconsistent|sums"),
        (lambda m: m["shards"][0].update(n_rows=-5), "inconsistent"),
        (lambda m: m.update(n_features=1 << 40), "absurd"),
        (lambda m: m.update(version=1000), "newer"),
        (lambda m: m.update(format="something-else"), "not an ooc-svm store"),
    ]:
        doc = json.loads(good)
        target = doc["attributes"]["ooc_svm"] if name.endswith(".zarr") else doc
        mutate(target)
        meta_file.write_text(json.dumps(doc))
        with pytest.raises(StoreError, match=pattern):
            open_store(str(path))
    assert meta  # the untouched metadata was a real store's


def test_model_file_cannot_execute_code(tmp_path):
    """A model whose arrays.npz holds a pickled object is refused, and nothing runs."""
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "model.json").write_text(
        json.dumps(
            {
                "format": "ooc-svm-model",
                "version": 1,
                "kind": "linear",
                "n_features": 3,
                "classes": [-1.0, 1.0],
                "intercept_is_scalar": True,
            }
        )
    )
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    obj = np.empty(1, dtype=object)
    obj[0] = Evil()
    np.savez(model_dir / "arrays.npz", coef=obj, intercept=np.zeros(1))
    with pytest.raises(ModelError):
        load_model(str(model_dir))
    assert not marker.exists()


# -- disk full and racing ingests -----------------------------------------------------------


def _try_mount_tmpfs(where, size="3m") -> bool:
    where.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    return r.returncode == 0


def test_disk_full_during_ingest(tmp_path):
    """ENOSPC while writing shards: clean error, nothing left at the destination."""
    mnt = tmp_path / "small"
    if not _try_mount_tmpfs(mnt):
        pytest.skip("needs root to mount a small tmpfs (simulated full disk)")
    try:
        rng = np.random.default_rng(0)
        src = tmp_path / "big.svm"
        with open(src, "w") as f:
            for i in range(60000):
                cols = np.sort(rng.choice(5000, 10, replace=False)) + 1
                f.write(
                    f"{1 if i % 2 else -1} "
                    + " ".join(f"{c}:{rng.random():.6f}" for c in cols)
                    + "\n"
                )
        dest = mnt / "s.zarr"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "ooc_svm.cli",
                "ingest",
                str(src),
                str(dest),
                "--shard-rows",
                "5000",
                "--compression",
                "none",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode != 0
        err = r.stderr.strip().splitlines()
        assert err and err[-1].startswith("ooc-svm: error:"), r.stderr
        assert "No space left" in r.stderr or "space" in r.stderr.lower(), r.stderr
        assert "Traceback" not in r.stderr
        assert os.listdir(mnt) == [], os.listdir(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_racing_ingests_one_wins(tmp_path):
    rng = np.random.default_rng(1)
    srcs = []
    for k in range(2):
        src = tmp_path / f"in{k}.svm"
        with open(src, "w") as f:
            for _ in range(20000):
                cols = np.sort(rng.choice(300, 8, replace=False)) + 1
                f.write(f"{k + 1} " + " ".join(f"{c}:{rng.random():.5f}" for c in cols) + "\n")
        srcs.append(src)
    dest = tmp_path / "race.zarr"
    results: list = [None, None]
    barrier = threading.Barrier(2)

    def run(k):
        barrier.wait()
        results[k] = subprocess.run(
            [
                sys.executable,
                "-m",
                "ooc_svm.cli",
                "ingest",
                str(srcs[k]),
                str(dest),
                "--shard-rows",
                "2000",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.returncode for r in results)
    assert codes[0] == 0 and codes[1] != 0, [r.stderr for r in results]
    loser = next(r for r in results if r.returncode != 0)
    assert "ooc-svm: error:" in loser.stderr and "Traceback" not in loser.stderr
    winner = results.index(next(r for r in results if r.returncode == 0))
    store = open_store(str(dest))
    assert store.meta.n_rows == 20000 and store.meta.labels == [float(winner + 1)]
    for i in range(store.n_shards):
        store.read_shard(i, verify=True)
    # nothing but the inputs and the winning store
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in0.svm", "in1.svm", "race.zarr"]


# -- the command line on hostile paths: devices, FIFOs, nested JSON (run as a user would) ----


def _cli(cwd, *args, timeout: float = 60):
    """``ooc-svm ARGS`` run in ``cwd`` with stdin closed; the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def _small_model_and_text(cwd) -> None:
    """A linear model ``m`` (5 features) and 40 rows of matching SVMlight text ``d.svm``."""
    from ooc_svm.model.model import Model

    Model(kind="linear", n_features=5, classes=[-1.0, 1.0], coef_=np.arange(5.0) - 2).save(
        str(cwd / "m")
    )
    rng = np.random.default_rng(0)
    lines = [f"{1 if k % 2 else -1} 1:{rng.random():.3f} 4:{rng.random():.3f}" for k in range(40)]
    (cwd / "d.svm").write_text("\n".join(lines) + "\n")


def _one_line_error(r, *words: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ooc-svm: error: "), r.stderr
    for w in words:
        assert w in err[0], err[0]


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_text_input_that_is_a_device_is_refused_at_once(tmp_path, command):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    _small_model_and_text(tmp_path)
    os.symlink("/dev/zero", tmp_path / "z.txt")
    extra = ["-o", "p.txt"] if command == "predict" else []
    r = _cli(tmp_path, command, "m", "z.txt", *extra, timeout=30)
    _one_line_error(r, "z.txt", "character device", "regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.svm", "m", "z.txt"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_text_input_from_a_fifo_is_read_once(tmp_path, command):
    _small_model_and_text(tmp_path)
    os.mkfifo(tmp_path / "in.fifo")
    data = (tmp_path / "d.svm").read_bytes()

    def feed():
        with open(tmp_path / "in.fifo", "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    extra = ["-o", "p.txt"] if command == "predict" else ["--json"]
    r = _cli(tmp_path, command, "m", "in.fifo", *extra)
    writer.join(5)
    assert r.returncode == 0, r.stderr
    if command == "predict":
        assert len((tmp_path / "p.txt").read_text().splitlines()) == 41
    else:
        assert json.loads(r.stdout)["n_rows"] == 40


def _nest(path, depth: int = 200_000) -> None:
    path.write_text("[" * depth)


@pytest.mark.parametrize(
    "target, commands",
    [
        ("s.zarr/zarr.json", ["info s.zarr", "verify s.zarr", "train s.zarr -o x"]),
        ("p.parquet/_ooc_svm.json", ["info p.parquet", "train p.parquet -o x"]),
        ("SHARD_ARRAY", ["train s.zarr -o x"]),
        ("m/model.json", ["predict m d.svm -o p.txt", "export m --format liblinear x.model"]),
    ],
)
def test_deeply_nested_json_is_one_line(tmp_path, target, commands):
    """'[' * 200000 in any JSON ooc-svm reads: one line naming the file, never RecursionError."""
    _small_model_and_text(tmp_path)
    ingest([str(tmp_path / "d.svm")], str(tmp_path / "s.zarr"))
    ingest([str(tmp_path / "d.svm")], str(tmp_path / "p.parquet"))
    if target == "SHARD_ARRAY":
        target = "s.zarr/s0000000/data/zarr.json"  # read up to 64 KiB
    _nest(tmp_path / target, 60_000 if "s0000000" in target else 200_000)
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in commands:
        r = _cli(tmp_path, *command.split())
        _one_line_error(r, command.split()[1])
        assert "RecursionError" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("how", ["path", "symlink"])
def test_ingest_refuses_a_device_given_as_a_path(tmp_path, how):
    """/dev/zero (or a link to it) is endless: refused before reading, nothing written."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    src = "/dev/zero"
    if how == "symlink":
        os.symlink("/dev/zero", tmp_path / "z.svm")
        src = "z.svm"
    r = _cli(tmp_path, "ingest", src, "s.zarr", timeout=60)
    _one_line_error(r, src, "character device", "'-'")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["z.svm"] if how == "symlink" else [])


_LINE_LIMIT = (
    "import sys; from ooc_svm.store import ingest_input; ingest_input.MAX_LINE_BYTES = 1 << 20; "
    "from ooc_svm.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_ingest_of_endless_stdin_stops_at_the_line_limit(tmp_path):
    """``ingest - < /dev/zero`` used to grow without bound (1 GB at 72 s): a line longer than
    the limit (here lowered to 1 MiB) ends it with the line number and the limit."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run(
            [sys.executable, "-c", _LINE_LIMIT, "ingest", "-", "s.zarr", "--block-mb", "0.1"],
            cwd=tmp_path, stdin=zero, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    _one_line_error(r, "<stdin>: line 1 (byte 0)", "1,048,576 bytes")
    assert list(tmp_path.iterdir()) == []


def test_ingest_names_the_over_long_line(tmp_path, monkeypatch):
    """Lines before the long one are counted (the blocks before it are parsed first); a long
    line under the limit is read."""
    from ooc_svm.store import ingest_input

    monkeypatch.setattr(ingest_input, "MAX_LINE_BYTES", 1 << 16)
    ok = "1 " + " ".join(f"{j}:1" for j in range(1, 5000)) + "\n"  # ~37 KB
    (tmp_path / "a.svm").write_text("1 1:1\n-1 2:1\n" * 500 + ok + "1 1:" + "0" * 70_000 + "\n")
    with pytest.raises(IngestError, match=r"a\.svm: line 1,002 \(byte [0-9,]+\) is longer than "):
        ingest(str(tmp_path / "a.svm"), str(tmp_path / "s.zarr"), block_mb=0.004)
    assert not (tmp_path / "s.zarr").exists()
    (tmp_path / "b.svm").write_text("1 1:1\n-1 2:1\n" * 500 + ok)
    ingest(str(tmp_path / "b.svm"), str(tmp_path / "t.zarr"), block_mb=0.004)
    assert open_store(str(tmp_path / "t.zarr")).meta.n_rows == 1001
