"""Nothing lost, nothing misread, nothing crashes.

Every test works on real stores on disk and runs the CLI as a user would
(``sys.executable -m ooc_svm`` in a temporary working directory, relative paths).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import kernel_solvers

from ooc_svm.store import (
    StoreChangedError,
    StoreError,
    check_feature_bound,
    open_store,
)
from ooc_svm.store.ingest import ingest

BACKENDS = ["s.zarr", "s.parquet"]


def cli(*args, cwd, timeout=300, **kw):
    return subprocess.run(
        [sys.executable, "-m", "ooc_svm", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def one_line_error(r) -> str:
    """The single ``ooc-svm: error:`` line of a failed command (no traceback)."""
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("ooc-svm: error:")]
    assert len(lines) >= 1, r.stderr
    return lines[-1]


def _text(n=600, d=40, seed=0, labels=(-1, 1)) -> str:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        cols = np.sort(rng.choice(d, 6, replace=False)) + 1
        lab = rng.choice(labels)
        out.append(f"{lab} " + " ".join(f"{c}:{rng.random():.4f}" for c in cols))
    return "\n".join(out) + "\n"


def make_store(tmp_path, name="s.zarr", compression="none", n=600, shard_rows=200, seed=0):
    src = tmp_path / f"{name}.svm"
    src.write_text(_text(n, seed=seed))
    ingest(str(src), str(tmp_path / name), shard_rows=shard_rows, compression=compression)
    return tmp_path / name


def _edit_meta(path, fn, reseal=True):
    """Edit the store metadata with ``fn``; ``reseal``: record the edited document's metadata
    checksum too, as a deliberate editor would, so that the checks of the shards against the
    metadata are what must catch the edit."""
    from ooc_svm.store.format import META_CHECKSUM_KEY, meta_checksum

    if str(path).endswith(".zarr"):
        f = path / "zarr.json"
        doc = json.loads(f.read_text())
        m = doc["attributes"]["ooc_svm"]
    else:
        f = path / "_ooc_svm.json"
        doc = m = json.loads(f.read_text())
    fn(m)
    if reseal and META_CHECKSUM_KEY in m:
        m[META_CHECKSUM_KEY] = meta_checksum(m)
    f.write_text(json.dumps(doc))


def _array_file(path, shard, key):
    """Uncompressed Zarr chunk of one array, or the Parquet file of the shard."""
    if str(path).endswith(".zarr"):
        return path / shard / key / "c" / "0"
    return path / f"{shard}.parquet"


# -- 1. every read is validated; a damaged shard stops train / predict ------------------------
@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_damaged_shard_stops_train_and_predict(tmp_path, name, compression):
    path = make_store(tmp_path, name, compression)
    r = cli("train", "--solver", "perf", name, "-o", "good.model", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    if name.endswith(".zarr") and compression == "none":
        # a different, perfectly finite value: only the checksum can tell
        f = _array_file(path, "s0000001", "data")
        raw = bytearray(f.read_bytes())
        raw[40:44] = np.float32(7.25).tobytes()
        f.write_bytes(bytes(raw))
    elif name.endswith(".zarr"):
        (path / "s0000001" / "data" / "c" / "0").unlink()  # reads as zeros in Zarr
    else:
        f = _array_file(path, "s0000001", None)
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        f.write_bytes(bytes(raw))
    for args in (
        ("train", "--solver", "perf", name, "-o", "m.model"),
        ("predict", "good.model", name, "-o", "pred.txt"),
        ("evaluate", "good.model", name),
    ):
        r = cli(*args, cwd=tmp_path)
        line = one_line_error(r)
        assert "shard 1 (s0000001, rows 200-399) is damaged" in line, line
        assert "ooc-svm verify" in line
    assert not (tmp_path / "m.model").exists()
    assert not (tmp_path / "pred.txt").exists()
    r = cli("verify", name, cwd=tmp_path)
    assert r.returncode == 1 and "s0000001" in r.stderr


# -- 2. memory safety: edited numbers, flipped index bytes ----------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_edited_n_features_is_refused_not_a_crash(tmp_path, name):
    path = make_store(tmp_path, name)
    _edit_meta(path, lambda m: m.update(n_features=3))  # indices now beyond w
    r = cli("train", "--solver", "perf", name, "-o", "m.model", cwd=tmp_path)
    line = one_line_error(r)
    assert "is damaged: feature index out of range" in line, line


@pytest.mark.parametrize("key", ["indices", "indptr"])
def test_flipped_index_byte_uncompressed_is_refused(tmp_path, key):
    path = make_store(tmp_path, "s.zarr", "none")
    f = _array_file(path, "s0000001", key)
    raw = bytearray(f.read_bytes())
    raw[8 * 5 + 3] ^= 0x7F  # a high byte: a huge index / row pointer
    f.write_bytes(bytes(raw))
    for solver in ("perf", "smo"):
        r = cli("train", "--solver", solver, "s.zarr", "-o", "m.model", cwd=tmp_path)
        assert r.returncode != -signal.SIGSEGV
        line = one_line_error(r)
        assert "shard 1" in line and "is damaged" in line, line


@pytest.mark.parametrize("name", BACKENDS)
def test_shifted_shard_table_numbers_are_refused(tmp_path, name):
    """nnz moved from one shard to the next: the totals still add up, the arrays do not."""
    path = make_store(tmp_path, name)

    def shift(m):
        m["shards"][0]["nnz"] += 6
        m["shards"][1]["nnz"] -= 6

    _edit_meta(path, shift)
    r = cli("train", "--solver", "perf", name, "-o", "m.model", cwd=tmp_path)
    line = one_line_error(r)
    assert "shard 0" in line and "damaged" in line, line


# -- edited labels: the metadata checksum, and every shard's y against the labels -------------
@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("how", ["edited", "resealed", "checksum_removed"])
def test_edited_labels_in_store_metadata_are_refused_by_verify_and_train(tmp_path, name, how):
    """labels [-1, 1] edited to [5, 7]: train used to exit 0 with a garbage model."""
    path = make_store(tmp_path, name)

    def edit(m):
        m["labels"] = [5.0, 7.0]
        if how == "checksum_removed":  # as a store written before the metadata checksum
            m.pop("meta_checksum")

    _edit_meta(path, edit, reseal=how == "resealed")
    for args in (("verify", name), ("train", name, "-o", "m.model")):
        r = cli(*args, cwd=tmp_path, stdin=subprocess.DEVNULL)
        line = one_line_error(r)
        if how == "edited":
            assert "store metadata was changed after ingest" in line, line
        else:
            assert re.search(r"label -?1 at row \d+ is not one of the labels in the store me", line)
        assert name in line
    assert not (tmp_path / "m.model").exists()


@pytest.mark.parametrize("name", BACKENDS)
def test_metadata_fields_a_solver_trusts_are_covered_by_the_checksum(tmp_path, name):
    path = make_store(tmp_path, name)
    for edit in (
        lambda m: m.update(label_kind="real", labels=None),
        lambda m: m.update(has_qid=True),
        lambda m: m.update(n_features=m["n_features"] + 100),
        lambda m: m["shards"][0].update(checksum="0" * 16),
    ):
        before = {p: p.read_bytes() for p in path.glob("*.json")}
        _edit_meta(path, edit, reseal=False)
        r = cli("train", name, "-o", "m.model", cwd=tmp_path, stdin=subprocess.DEVNULL)
        assert "store metadata was changed after ingest" in one_line_error(r)
        for p, b in before.items():
            p.write_bytes(b)
    assert cli("verify", name, cwd=tmp_path).returncode == 0


# -- 3. bounded I/O ---------------------------------------------------------------------------
def _peak_rss_kb(r_stderr: str) -> int | None:
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r_stderr)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("target", ["/dev/zero", "sparse"])
def test_shard_file_symlinked_to_device_or_huge_file_is_refused(tmp_path, name, target):
    path = make_store(tmp_path, name)
    f = _array_file(path, "s0000001", "data")
    f.unlink()
    if target == "sparse":
        big = tmp_path / "huge.bin"
        with open(big, "wb") as h:
            h.truncate(64 << 30)  # 64 GiB, sparse
        target = str(big)
    os.symlink(target, f)
    time_v = os.path.exists("/usr/bin/time")
    cmd = ["/usr/bin/time", "-v"] if time_v else []
    r = subprocess.run(
        [*cmd, sys.executable, "-m", "ooc_svm", "train", "--solver", "perf", name, "-o", "m"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_line_error(r)
    assert "shard 1" in line and ("not a regular file" in line or "bytes, more than" in line)
    rss = _peak_rss_kb(r.stderr)
    assert rss is None or rss < 500_000, rss


def test_array_metadata_claiming_a_huge_shape_is_refused(tmp_path):
    path = make_store(tmp_path, "s.zarr", "lz4")
    f = path / "s0000000" / "data" / "zarr.json"
    doc = json.loads(f.read_text())
    doc["shape"] = [1 << 40]
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [1 << 40]
    f.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="shard 0 .* is damaged: .*does not match the shard table"):
        open_store(str(path)).read_shard(0)


def test_feature_bound_refuses_a_dense_w_beyond_the_limit(tmp_path):
    src = tmp_path / "two.svm"
    src.write_text("1 2147483648:1\n-1 1:1\n")
    meta = ingest(str(src), str(tmp_path / "w.zarr"))
    assert meta.n_features == 2147483648
    with pytest.raises(StoreError, match="16,384 MiB.*hash the features.*--n-features"):
        check_feature_bound(meta, limit_mb=1024)
    meta.n_features = 1000
    check_feature_bound(meta, limit_mb=1)  # 8 kB: fine


# -- 5. concurrent appends ----------------------------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_concurrent_appends_serialise(tmp_path, name):
    for k in range(2):
        (tmp_path / f"in{k}.svm").write_text(_text(3000, seed=10 + k, labels=(k + 1, k + 3)))
    deadline = time.monotonic() + 240  # bounded; at least two trials even on a loaded machine
    trials = outcomes = 0
    while trials < 6 and time.monotonic() < deadline:
        trials += 1
        store = f"t{trials}-{name}"
        r = cli("ingest", "in0.svm", store, "--shard-rows", "700", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        results: list = [None, None]
        barrier = threading.Barrier(2)

        def run(k, store=store, results=results, barrier=barrier):
            barrier.wait()
            results[k] = cli(
                "ingest", f"in{k}.svm", store, "--append", "--shard-rows", "500", cwd=tmp_path
            )

        ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ok = [r.returncode == 0 for r in results]
        for r in results:
            if r.returncode != 0:
                line = one_line_error(r)
                assert "store is being written by PID" in line, line
                outcomes += 1
        st = open_store(str(tmp_path / store))
        assert st.meta.n_rows == 3000 * (1 + sum(ok)), (ok, st.meta.n_rows)
        v = cli("verify", store, cwd=tmp_path)
        assert v.returncode == 0, v.stderr
        assert "orphan" not in v.stderr and "stale" not in v.stderr, v.stderr
        assert not (tmp_path / store / ".lock").exists()
    assert trials >= 2


# -- 6. readers during ingest --overwrite ----------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_reader_fails_when_store_is_overwritten(tmp_path, name):
    from ooc_svm.engine.reader import shard_reader

    make_store(tmp_path, name, "lz4", seed=1)
    st = open_store(str(tmp_path / name))
    read = shard_reader(st)
    read(0)
    st.read_shard(0)
    src2 = tmp_path / "new.svm"
    src2.write_text(_text(600, seed=2))
    ingest(str(src2), str(tmp_path / name), shard_rows=200, compression="lz4", overwrite=True)
    with pytest.raises(StoreChangedError, match="changed while reading .*rerun"):
        read(1)
    with pytest.raises(StoreChangedError, match="changed while reading"):
        st.read_shard(1)
    # a fresh open reads the new store
    st2 = open_store(str(tmp_path / name))
    assert st2.read_shard(1).n_rows == 200


# -- 7. leftovers -------------------------------------------------------------------------------
def test_failed_parquet_append_leaves_no_orphans(tmp_path):
    path = make_store(tmp_path, "s.parquet", "zstd")
    before = sorted(os.listdir(path))
    bad = tmp_path / "bad.svm"
    bad.write_text(_text(4000, seed=3) + "1 1:abc\n")
    with pytest.raises(Exception, match="not a number"):
        ingest(str(bad), str(path), append=True, shard_rows=300, block_mb=0.02)
    assert sorted(os.listdir(path)) == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_sighup_during_ingest_clean_up(tmp_path, sig):
    p = subprocess.Popen(
        [sys.executable, "-m", "ooc_svm", "ingest", "-", "s.zarr"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a suite started under nohup passes SIGHUP on ignored (and ooc-svm keeps it so:
        # the ingest then ended 0)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    p.stdin.write(_text(2000).encode())
    p.stdin.flush()
    t0 = time.monotonic()
    while not any(n.startswith(".s.zarr.ingest-") for n in os.listdir(tmp_path)):
        assert time.monotonic() - t0 < 600 and p.poll() is None  # a hang guard
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    assert b"Traceback" not in err, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def _signal_when(p: subprocess.Popen, ready, sig, limit: float = 600.0) -> bytes:
    """Send ``sig`` to ``p`` once ``ready()`` is true (or after ``limit`` s, a hang guard:
    a signal at any moment must end the command the same way); its stderr."""
    t0 = time.monotonic()
    while not ready() and p.poll() is None and time.monotonic() - t0 < limit:
        time.sleep(0.005)
    assert p.poll() is None, "the command ended before it could be signalled"
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    return err


def _temp_of(cwd, prefix: str):
    return lambda: any(n.startswith(prefix) for n in os.listdir(cwd))


@pytest.fixture(scope="module")
def writers_dir(tmp_path_factory):
    """A store of 400 small shards, a linear model ``m`` and a kernel model ``k`` with 60,000
    support vectors (predict, train and export of them run for seconds)."""
    import scipy.sparse as sp

    from ooc_svm.model.model import Model

    d = tmp_path_factory.mktemp("writers")
    (d / "d.svm").write_text(_text(20_000, seed=5))
    ingest(str(d / "d.svm"), str(d / "s.zarr"), shard_rows=50)
    Model(kind="linear", n_features=40, classes=[-1.0, 1.0], coef_=np.ones(40)).save(str(d / "m"))
    rng = np.random.default_rng(0)
    sv = sp.random(60_000, 40, density=0.2, format="csr", random_state=rng)
    Model(
        kind="kernel", n_features=40, classes=[-1.0, 1.0], support_vectors_=sv,
        dual_coef_=rng.standard_normal(60_000), intercept_=0.1, kernel="rbf", gamma=0.1,
    ).save(str(d / "k"))  # fmt: skip
    os.mkfifo(d / "k.fifo")  # import reads it: the test keeps it open, half-written
    return d


#: command -> (arguments, what shows it is writing: a temporary name prefix, or a file)
_WRITING = {
    "predict": ("predict m s.zarr -o p.txt --batch-rows 50", ".predict-"),
    "export": ("export k --format libsvm out.model", ".export-"),
    "train": ("train s.zarr -o t --history h.jsonl --C 1000 --eps 1e-12", "h.jsonl"),
    "import": ("import k.fifo imported --n-features 40", None),
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
@pytest.mark.parametrize(
    "name, sig",
    [(name, signal.SIGTERM) for name in _WRITING] + [("predict", signal.SIGHUP)],
)
def test_sigterm_sighup_every_writing_command_cleans_up(writers_dir, name, sig):
    """predict -o, export, train -o, import: SIGTERM/SIGHUP unwind as Ctrl-C does: exit
    128 + signal, one line, nothing left but what was there (and the history so far)."""
    cwd = writers_dir
    args, mark = _WRITING[name]
    before = set(os.listdir(cwd))
    p = subprocess.Popen(
        [sys.executable, "-m", "ooc_svm", *args.split()],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # a suite started under nohup passes SIGHUP on ignored (and ooc-svm keeps it so)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    fifo = None
    if name == "import":  # a model file that arrives slowly: half of it, then nothing
        fifo = open(cwd / "k.fifo", "w")
        fifo.write("svm_type c_svc\nkernel_type rbf\ngamma 0.5\nnr_class 2\n")
        fifo.flush()
        t0 = time.monotonic()
        ready = lambda: time.monotonic() - t0 > 1.0  # noqa: E731
    elif mark.startswith("."):
        ready = _temp_of(cwd, mark)
    else:
        ready = lambda: (cwd / mark).exists() and (cwd / mark).stat().st_size > 0  # noqa: E731
    try:
        err = _signal_when(p, ready, sig).decode()
    finally:
        if fifo is not None:
            fifo.close()
    assert p.returncode == 128 + sig, (name, p.returncode, err)
    assert "Traceback" not in err and f"terminated by {signal.Signals(sig).name}" in err, err
    left = set(os.listdir(cwd)) - before - {"h.jsonl"}
    assert not left, (name, left)


def test_sigkill_leftovers_listed_and_repaired(tmp_path):
    path = make_store(tmp_path, "s.zarr", "lz4")
    p = subprocess.Popen(
        [sys.executable, "-m", "ooc_svm", "ingest", "-", "s.zarr", "--append"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    p.stdin.write(_text(100).encode())
    p.stdin.flush()
    t0 = time.monotonic()
    while not (path / ".lock").exists():
        assert time.monotonic() - t0 < 600 and p.poll() is None  # a hang guard
        time.sleep(0.05)
    p.kill()
    p.wait()
    p.stdin.close()
    # what a killed writer leaves: a temporary store, an orphan shard, a half-written meta file
    tmp_store = tmp_path / ".s.zarr.ingest-0123456789ab"
    tmp_store.mkdir()
    (tmp_store / "zarr.json").write_text("{}")
    import shutil

    shutil.copytree(path / "s0000001", path / "s0000007")
    (path / ".zarr.json.part-0123456789ab").write_text("{")
    r = cli("info", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (
        "1 stale temporary directory, 1 orphan shard file (dropped shards or an interrupted "
        "append), 1 half-written metadata file, a stale writer lock: run `ooc-svm verify "
        "--repair`" in r.stderr
    ), r.stderr
    r = cli("verify", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0 and "1 orphan shard file" in r.stderr, r.stderr
    r = cli("verify", "--repair", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0 and "removed 4 leftover entries" in r.stdout, (r.stdout, r.stderr)
    assert sorted(os.listdir(tmp_path)) == ["s.zarr", "s.zarr.svm"]
    assert sorted(os.listdir(path)) == ["s0000000", "s0000001", "s0000002", "zarr.json"]
    r = cli("verify", "s.zarr", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr


# -- 8. malformed metadata ----------------------------------------------------------------------
MALFORMED = [
    ("zarr_format", None),
    ("n_rows", "600"),
    ("n_features", 40.5),
    ("has_qid", "no"),
    ("labels", "abc"),
    ("shards", {"a": 1}),
    ("shard_nnz", "5"),
    ("shard_extra", 1),
    ("version", True),
]


@pytest.mark.parametrize("key,value", MALFORMED)
def test_malformed_metadata_one_line_same_verdict(tmp_path, key, value):
    path = make_store(tmp_path, "s.zarr", "lz4")
    f = path / "zarr.json"
    doc = json.loads(f.read_text())
    m = doc["attributes"]["ooc_svm"]
    if key == "zarr_format":
        doc["zarr_format"] = 2
    elif key == "shard_nnz":
        m["shards"][0]["nnz"] = value
    elif key == "shard_extra":
        m["shards"][0]["extra"] = value
    else:
        m[key] = value
    f.write_text(json.dumps(doc))
    verdicts = []
    for args in (("verify", "s.zarr"), ("train", "--solver", "perf", "s.zarr", "-o", "m")):
        verdicts.append(one_line_error(cli(*args, cwd=tmp_path)))
    assert verdicts[0] == verdicts[1]
    assert "s.zarr" in verdicts[0]


def test_million_shard_table_is_refused_quickly_in_bounded_memory(tmp_path):
    path = make_store(tmp_path, "s.parquet", "zstd")
    meta = json.loads((path / "_ooc_svm.json").read_text())
    meta["shards"] = [
        {"name": f"s{i:07d}", "row_start": i, "n_rows": 1, "nnz": 1, "checksum": "0" * 16}
        for i in range(1_000_000)
    ]
    meta["n_rows"] = meta["nnz"] = 1_000_000
    (path / "_ooc_svm.json").write_text(json.dumps(meta))
    import resource

    cmd = ["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(
        [*cmd, sys.executable, "-m", "ooc_svm", "verify", "s.parquet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: wall time grows with the machine's load
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = one_line_error(r)
    assert "16 MiB, about 100,000 shards) store metadata is limited to" in line, line
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 60, f"{cpu:.1f} CPU s"  # quickly: CPU seconds, not wall
    rss = _peak_rss_kb(r.stderr)
    assert rss is None or rss < 500_000, rss


# -- label kinds -----------------------------------------------------------------
def test_label_kind_is_chosen_and_said(tmp_path):
    (tmp_path / "c.svm").write_text(_text(300, labels=(1, 2, 3, 4, 5)))
    r = cli("ingest", "c.svm", "c.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    note = (
        "labels: 5 classes → multiclass (one-vs-rest); for ordinal regression re-ingest "
        "with --label-kind ordinal"
    )
    assert note in r.stdout
    assert note in cli("info", "c.zarr", cwd=tmp_path).stdout
    assert open_store(str(tmp_path / "c.zarr")).meta.label_kind == "multiclass"
    r = cli("ingest", "c.svm", "o.zarr", "--label-kind", "ordinal", cwd=tmp_path)
    assert r.returncode == 0 and "→ ordinal" in r.stdout
    assert open_store(str(tmp_path / "o.zarr")).meta.label_kind == "ordinal"
    (tmp_path / "q.svm").write_text("2 qid:1 1:1\n1 qid:1 2:1\n0 qid:2 1:1\n3 qid:2 3:1\n")
    r = cli("ingest", "q.svm", "q.zarr", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["label_kind"] == "ordinal"


# -- stores follow the umask -----------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_store_modes_follow_umask(tmp_path, umask):
    (tmp_path / "a.svm").write_text(_text(100))
    for name in BACKENDS:
        r = cli(
            "ingest",
            "a.svm",
            name,
            cwd=tmp_path,
            preexec_fn=lambda: os.umask(umask),
        )
        assert r.returncode == 0, r.stderr
        for dirpath, _dirs, filenames in os.walk(tmp_path / name):
            assert os.stat(dirpath).st_mode & 0o777 == 0o777 & ~umask, dirpath
            for fn in filenames:
                mode = os.stat(os.path.join(dirpath, fn)).st_mode & 0o777
                assert mode == 0o666 & ~umask, (fn, oct(mode))


# -- format version 2 (XXH3-64) reads version 1 (CRC-32) stores; the Store protocol ---------------
@pytest.mark.parametrize("name", BACKENDS)
def test_version_1_crc32_store_still_read_verified_and_appended(tmp_path, name):
    from ooc_svm.store import FORMAT_VERSION, shard_checksum

    path = make_store(tmp_path, name, "lz4")
    st = open_store(str(path))
    assert FORMAT_VERSION == 2 and st.meta.version == 2
    assert all(len(s.checksum) == 16 for s in st.meta.shards)
    crcs = [shard_checksum(st.read_shard(i), 1) for i in range(st.n_shards)]

    def to_v1(m):
        m["version"] = 1
        m.pop("uuid", None)
        m.pop("meta_checksum", None)  # version 1 stores had none
        for s, c in zip(m["shards"], crcs, strict=True):
            s["checksum"] = c

    _edit_meta(path, to_v1)
    assert cli("verify", name, cwd=tmp_path).returncode == 0
    (tmp_path / "more.svm").write_text(_text(100, seed=5))
    r = cli("ingest", "more.svm", name, "--append", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    st = open_store(str(path))
    assert st.meta.version == 1 and len(st.meta.shards[-1].checksum) == 8
    assert cli("verify", name, cwd=tmp_path).returncode == 0


def test_backends_and_views_implement_the_store_protocol(tmp_path):
    from ooc_svm.store import Store
    from ooc_svm.store.views import BinaryView

    for name in BACKENDS:
        st = open_store(str(make_store(tmp_path, name)))
        view = BinaryView(st, 1.0)
        for s in (st, view):
            assert isinstance(s, Store)
            read = s.shard_reader(fast=True)
            a, b = read(1), s.read_shard(1)
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_array_equal(a.y, b.y)
        assert set(np.unique(view.read_shard(0).y)) <= {0.0, 1.0}


@pytest.mark.parametrize("solver", kernel_solvers())
def test_dual_solvers_refuse_a_huge_feature_index_up_front(tmp_path, solver):
    """Finding 3 (dual solvers): one legal line ``1 2147483648:1`` made smo / active-set /
    irwls allocate 16 GiB per dense vector (killed by the OOM killer at 23 GB here); now a
    one-line refusal before anything is allocated. The child runs under a 6 GB address-space
    limit so the old code fails instead of exhausting the machine."""
    import resource
    import subprocess
    import sys

    (tmp_path / "big.svm").write_text("1 1:1 2147483648:1\n-1 2:1\n1 1:0.5\n-1 2:0.7\n")
    cmd = [sys.executable, "-m", "ooc_svm"]
    subprocess.run([*cmd, "ingest", "big.svm", "big.zarr", "-q"], cwd=tmp_path, check=True)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    # a wrapper reports the peak RSS of its one child (RUSAGE_CHILDREN of this test process
    # would be the largest child of the whole test session)
    wrapper = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
        "print('peak_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
        "file=sys.stderr); sys.exit(r.returncode)"
    )
    r = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd, "train", "--solver", solver, "big.zarr"]
        + ["-o", "m", "--kernel", "linear"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    peak_kb = int(lines.pop().split()[1])
    assert len(lines) == 1 and lines[0].startswith("ooc-svm: error: the store has 2,147,483,648")
    assert "--n-features" in lines[0]
    assert not (tmp_path / "m").exists()
    assert peak_kb < 500_000, peak_kb


@pytest.mark.parametrize("out", ["scores.txt", "scores.parquet"])
def test_predict_on_a_full_disk_leaves_nothing(tmp_path, out):
    """Finding 7: ``predict -o x.txt`` on a full disk left its temporary file. ENOSPC is one
    line, exit 1, and the (small tmpfs) output directory is empty afterwards."""
    import subprocess
    import sys

    from test_hostile_input import _try_mount_tmpfs

    mnt = tmp_path / "small"
    if not _try_mount_tmpfs(mnt, size="256k"):
        pytest.skip("needs root to mount a small tmpfs (simulated full disk)")
    try:
        rng = np.random.default_rng(0)
        with open(tmp_path / "s.svm", "w") as f:
            for i in range(30000):
                cols = np.sort(rng.choice(200, 5, replace=False)) + 1
                f.write(
                    f"{1 if i % 2 else -1} " + " ".join(f"{c}:{rng.random():.4f}" for c in cols)
                )
                f.write("\n")
        cmd = [sys.executable, "-m", "ooc_svm"]
        subprocess.run([*cmd, "ingest", "s.svm", "s.zarr", "-q"], cwd=tmp_path, check=True)
        subprocess.run(
            [*cmd, "train", "s.zarr", "-o", "m", "-q", "--max-iter", "5"], cwd=tmp_path, check=True
        )
        r = subprocess.run(
            [*cmd, "predict", "m", "s.zarr", "-o", str(mnt / out)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ooc-svm: error:"), r.stderr
        assert "Traceback" not in r.stderr
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
