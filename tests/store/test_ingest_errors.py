"""Bad input to ``ooc-svm ingest``: a clear message (file, line, what, fix), exit 1, and
nothing left at the destination (no store, no temporary directory)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess

import numpy as np
import pytest
from conftest import STORE_SUFFIXES, ooc_cmd

from ooc_svm.cli import main
from ooc_svm.store import open_store
from ooc_svm.store.ingest import IngestError, ingest, ingest_with_stats

OOC_SVM = ooc_cmd()

GOOD = "1 1:0.5 3:1\n-1 2:2\n1 1:1 4:0.25\n"


def run_bad(tmp_path, capsys, text, *extra, name="bad.svm", store="out.zarr", names_input=True):
    """Ingest ``text`` (bytes or str) and return the one-line error; check nothing is left."""
    src = tmp_path / name
    src.write_bytes(text.encode() if isinstance(text, str) else text)
    before = sorted(os.listdir(tmp_path))
    rc = main(["ingest", str(src), str(tmp_path / store), *extra])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert sorted(os.listdir(tmp_path)) == before, "something was left at the destination"
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("ooc-svm: error:")]
    assert len(lines) == 1, err
    if names_input:
        assert str(src) in lines[0]
    return lines[0]


# (case id, text, expected line number, fragments of the message)
CASES = [
    ("non_numeric_value", GOOD + "1 1:abc\n", 4, ["is not a number", "'1:abc'"]),
    ("index_zero", GOOD + "-1 0:1 2:1\n", 4, ["index 0", "--zero-based"]),
    ("negative_index", "1 -3:1\n", 1, ["negative feature index", "'-3:1'"]),
    ("not_increasing", "1 1:1\n1 3:1 2:1\n", 2, ["not strictly increasing", "3 then '2:1'"]),
    ("duplicate_index", "1 1:1 1:2\n", 1, ["not strictly increasing"]),
    ("nan_value", GOOD + "1 1:nan\n", 4, ["NaN"]),
    ("inf_value", "1 1:inf\n", 1, ["infinite"]),
    ("float32_overflow", "1 1:1e39\n", 1, ["float32 range"]),
    ("nan_label", "nan 1:1\n", 1, ["label 'nan' is NaN"]),
    ("inf_label", "1\n-inf 1:1\n", 2, ["infinite"]),
    ("missing_label", GOOD + "1:0.5 2:1\n", 4, ["missing label", "'1:0.5'"]),
    ("non_numeric_label", "yes 1:1\n", 1, ["label 'yes' is not a number"]),
    ("bad_qid", "1 qid:x 1:1\n", 1, ["bad qid", "qid:N"]),
    ("qid_without_value", "1 qid 1:1\n", 1, ["bad qid"]),
    ("qid_after_features", "1 1:1 qid:3\n", 1, ["right after the label"]),
    ("qid_on_some_lines", "1 qid:1 1:1\n2 1:1\n", 2, ["no qid:", "every line"]),
    ("qid_appears_later", "1 1:1\n2 qid:1 1:1\n", 2, ["has a qid:", "every line"]),
    ("no_colon", "1 5\n", 1, ["not INDEX:VALUE"]),
    ("non_integer_index", "1 1.5:1\n", 1, ["not an integer"]),
    ("empty_value", "1 1:\n", 1, ["is not a number"]),
    ("multilabel", "1,2 1:1\n", 1, ["not a number"]),
]


@pytest.mark.parametrize("text,line,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_line(tmp_path, capsys, text, line, fragments):
    msg = run_bad(tmp_path, capsys, text)
    assert f"bad.svm: line {line} " in msg, msg
    for f in fragments:
        assert f in msg, msg
    assert "--skip-invalid" in msg and "nothing was written" in msg


def test_bad_line_parquet_and_crlf(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, "1 1:1\r\n1 2:x\r\n", store="o.parquet")
    assert "line 2 " in msg and "'2:x'" in msg


def test_index_beyond_declared_features(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, GOOD + "1 7:1\n", "--n-features", "5")
    assert "line 4 " in msg and "--n-features 5" in msg


def test_line_number_in_later_block_and_compressed(tmp_path, capsys):
    lines = [f"{1 if i % 2 else -1} {i % 50 + 1}:0.5 {i % 50 + 60}:1" for i in range(20000)]
    lines[17345] = "1 3:0.5 2:1"
    text = ("\n".join(lines) + "\n").encode()
    src = tmp_path / "big.svm.gz"
    src.write_bytes(gzip.compress(text))
    with pytest.raises(IngestError, match=r"big\.svm\.gz: line 17,346 \(byte [\d,]+\)"):
        ingest(str(src), str(tmp_path / "o.zarr"), block_mb=0.01, threads=2)
    assert sorted(os.listdir(tmp_path)) == ["big.svm.gz"]


def test_error_in_second_input_names_it(tmp_path, capsys):
    (tmp_path / "a.svm").write_text(GOOD)
    (tmp_path / "b.svm").write_text(GOOD + GOOD + "1 0:1\n")
    rc = main(
        ["ingest", str(tmp_path / "a.svm"), str(tmp_path / "b.svm"), str(tmp_path / "o.zarr")]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "b.svm: line 7 " in err and "index 0" in err
    assert sorted(os.listdir(tmp_path)) == ["a.svm", "b.svm"]


# ------------------------------------------------------------------------------------------
# --skip-invalid
# ------------------------------------------------------------------------------------------
def test_skip_invalid(tmp_path, capsys):
    text = "1 1:1\n1 0:1\n-1 2:2\nfoo 1:1\n1 3:nan\n-1 4:4\n1 qid:3 1:1\n"
    (tmp_path / "s.svm").write_text(text)
    out = tmp_path / "s.zarr"
    rc = main(["ingest", str(tmp_path / "s.svm"), str(out), "--skip-invalid"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "skipped 4 invalid lines" in cap.err
    assert "line 2: index 0" in cap.err and "line 4: non-numeric label" in cap.err
    assert "line 5: NaN value" in cap.err
    assert "skipped 4 invalid lines" in cap.out  # also in the summary line
    store = open_store(str(out))
    assert store.meta.n_rows == 3
    ys = np.concatenate([store.read_shard(i).y for i in range(store.n_shards)])
    assert ys.tolist() == [1.0, -1.0, -1.0]


def test_skip_invalid_many_lines_across_blocks(tmp_path):
    lines = []
    for i in range(5000):
        lines.append(f"1 {i % 9 + 1}:1" if i % 3 else f"1 {i % 9 + 1}:x")
    (tmp_path / "m.svm").write_text("\n".join(lines) + "\n")
    meta, stats = ingest_with_stats(
        str(tmp_path / "m.svm"), str(tmp_path / "m.zarr"), skip_invalid=True, block_mb=0.004
    )
    assert stats.skipped == 1667 and meta.n_rows == 5000 - 1667
    assert len(stats.skipped_examples) == 5
    assert stats.skipped_examples[0] == f"{tmp_path / 'm.svm'} line 1: non-numeric value"


def test_skip_invalid_everything_invalid(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, "a 1:1\nb 2:2\n", "--skip-invalid")
    assert "no valid rows" in msg and "all 2 data lines were invalid" in msg


def test_value_only_python_can_decide(tmp_path):
    """A value the kernel leaves to Python's float (a halfway case with many digits) that
    turns out beyond float32 range: an error naming the line, or skipped."""
    from decimal import Decimal, localcontext

    from ooc_svm.store.svmlight_numbers import parse_float

    with localcontext() as ctx:
        ctx.prec = 200
        big = str((Decimal(1e39) + Decimal(float(np.nextafter(1e39, 2e39)))) / 2)
    assert parse_float(big, True)[0] == 4
    (tmp_path / "h.svm").write_text(f"-1 1:1\n1 1:{big}\n-1 1:2\n{big} 2:1\n")
    with pytest.raises(IngestError, match=r"h\.svm: line 2 .*float32 range"):
        ingest(str(tmp_path / "h.svm"), str(tmp_path / "h.zarr"))
    assert sorted(os.listdir(tmp_path)) == ["h.svm"]
    meta, stats = ingest_with_stats(
        str(tmp_path / "h.svm"), str(tmp_path / "h.zarr"), skip_invalid=True
    )
    assert meta.n_rows == 3 and stats.skipped == 1
    assert stats.skipped_examples == [f"{tmp_path / 'h.svm'} line 2: infinite value"]
    store = open_store(str(tmp_path / "h.zarr"))
    assert store.read_shard(0).y.tolist() == [-1.0, -1.0, float(big)]


# ------------------------------------------------------------------------------------------
# empty input, existing destination, truncated / corrupt compressed files, missing input
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["", "\n\n", "# only a comment\n  # another\n\r\n"], ids=["empty", "blank", "comments"]
)
def test_empty_input(tmp_path, capsys, text):
    msg = run_bad(tmp_path, capsys, text)
    assert "no data rows" in msg and "nothing was written" in msg


def test_empty_compressed_input(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, gzip.compress(b""), name="e.svm.gz")
    assert "e.svm.gz: no data rows" in msg


def test_destination_exists(tmp_path, capsys):
    (tmp_path / "a.svm").write_text(GOOD)
    out = tmp_path / "o.zarr"
    assert main(["ingest", str(tmp_path / "a.svm"), str(out)]) == 0
    capsys.readouterr()
    before = open_store(str(out)).meta
    rc = main(["ingest", str(tmp_path / "a.svm"), str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "destination exists" in err and "--overwrite" in err and str(out) in err
    assert open_store(str(out)).meta.shards == before.shards
    assert sorted(os.listdir(tmp_path)) == ["a.svm", "o.zarr"]


def test_overwrite_failure_keeps_old_store(tmp_path, capsys):
    (tmp_path / "a.svm").write_text(GOOD)
    (tmp_path / "b.svm").write_text(GOOD + "1 0:1\n")
    out = tmp_path / "o.parquet"
    assert main(["ingest", str(tmp_path / "a.svm"), str(out)]) == 0
    assert main(["ingest", str(tmp_path / "b.svm"), str(out), "--overwrite"]) == 1
    assert "index 0" in capsys.readouterr().err
    assert open_store(str(out)).meta.n_rows == 3
    assert sorted(os.listdir(tmp_path)) == ["a.svm", "b.svm", "o.parquet"]


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_append_failure_leaves_store_unchanged(tmp_path, capsys, suffix):
    (tmp_path / "a.svm").write_text(GOOD)
    (tmp_path / "b.svm").write_text(GOOD * 50 + "1 2:1 1:1\n")
    out = tmp_path / ("o" + suffix)
    assert main(["ingest", str(tmp_path / "a.svm"), str(out)]) == 0
    listing = sorted(os.listdir(out))
    rc = main(["ingest", str(tmp_path / "b.svm"), str(out), "--append", "--shard-rows", "10"])
    assert rc == 1 and "line 151 " in capsys.readouterr().err
    assert sorted(os.listdir(out)) == listing
    store = open_store(str(out))
    assert store.meta.n_rows == 3 and store.meta.n_shards == 1
    store.read_shard(0, verify=True)


def test_append_qid_mismatch(tmp_path, capsys):
    (tmp_path / "a.svm").write_text("1 qid:1 1:1\n0 qid:1 2:1\n")
    (tmp_path / "b.svm").write_text(GOOD)
    out = tmp_path / "o.zarr"
    assert main(["ingest", str(tmp_path / "a.svm"), str(out)]) == 0
    assert main(["ingest", str(tmp_path / "b.svm"), str(out), "--append"]) == 1
    err = capsys.readouterr().err
    assert "b.svm: line 1 " in err and "no qid:" in err
    assert open_store(str(out)).meta.n_rows == 2


def test_append_needs_store(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, GOOD, "--append", names_input=False)
    assert "out.zarr: --append needs an existing store" in msg


def test_append_format_mismatch(tmp_path, capsys):
    (tmp_path / "a.svm").write_text(GOOD)
    out = tmp_path / "o.zarr"
    assert main(["ingest", str(tmp_path / "a.svm"), str(out)]) == 0
    assert (
        main(["ingest", str(tmp_path / "a.svm"), str(out), "--append", "--format", "parquet"]) == 1
    )
    assert "is a zarr store" in capsys.readouterr().err


def _text(n=20000):
    return "".join(f"{(-1) ** i} {i % 40 + 1}:{i % 7 / 7:.6f} 77:1\n" for i in range(n)).encode()


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_truncated_compressed_file(tmp_path, capsys, kind):
    comp = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](_text())
    name = f"t.svm.{kind}"
    msg = run_bad(tmp_path, capsys, comp[: len(comp) * 2 // 3], name=name)
    assert f"{name}: the" in msg and "truncated" in msg and "nothing was written" in msg


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_corrupt_compressed_file(tmp_path, capsys, kind):
    comp = bytearray({"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](_text()))
    mid = len(comp) // 2
    comp[mid : mid + 64] = bytes(64)
    name = f"c.svm.{kind}"
    msg = run_bad(tmp_path, capsys, bytes(comp), name=name)
    assert name in msg
    assert "corrupt" in msg or "truncated" in msg


def test_unsupported_compression(tmp_path, capsys):
    msg = run_bad(tmp_path, capsys, b"\x28\xb5\x2f\xfd" + bytes(40), name="z.svm.zst")
    assert "zstd" in msg and "decompress it first" in msg


def test_input_not_found(tmp_path, capsys):
    rc = main(["ingest", str(tmp_path / "nope.svm"), str(tmp_path / "o.zarr")])
    err = capsys.readouterr().err
    assert rc == 1 and "nope.svm: no such file" in err
    assert os.listdir(tmp_path) == []


def test_input_is_directory(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    rc = main(["ingest", str(tmp_path / "d"), str(tmp_path / "o.zarr")])
    assert rc == 1 and "is a directory" in capsys.readouterr().err


def test_missing_store_argument(tmp_path, capsys):
    (tmp_path / "a.svm").write_text(GOOD)
    with pytest.raises(SystemExit) as e:
        main(["ingest", str(tmp_path / "a.svm")])
    assert e.value.code == 2
    assert "required: STORE" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.svm"]


def test_bad_options(tmp_path):
    (tmp_path / "a.svm").write_text(GOOD)
    with pytest.raises(IngestError, match="shard-rows"):
        ingest(str(tmp_path / "a.svm"), str(tmp_path / "o.zarr"), shard_rows=0)
    with pytest.raises(IngestError, match="label kind"):
        ingest(str(tmp_path / "a.svm"), str(tmp_path / "o.zarr"), label_kind="nominal")
    assert sorted(os.listdir(tmp_path)) == ["a.svm"]


# ------------------------------------------------------------------------------------------
# the installed command: exit codes and messages from a real process
# ------------------------------------------------------------------------------------------
def test_cli_subprocess_bad_line_exit_code(tmp_path):
    (tmp_path / "bad.svm").write_text(GOOD + "1 0:1\n")
    r = subprocess.run(
        [*OOC_SVM, "ingest", str(tmp_path / "bad.svm"), str(tmp_path / "o.zarr")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert r.stderr.strip().startswith("ooc-svm: error:")
    assert "bad.svm: line 4 " in r.stderr and "--zero-based" in r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.svm"]


def test_cli_subprocess_truncated_stdin(tmp_path):
    comp = gzip.compress(_text())
    r = subprocess.run(
        [*OOC_SVM, "ingest", "-", str(tmp_path / "o.zarr")],
        input=comp[: len(comp) // 2],
        capture_output=True,
    )
    assert r.returncode == 1
    assert b"<stdin>: the gzip stream ends early" in r.stderr
    assert b"Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("suffix", STORE_SUFFIXES)
def test_interrupt_leaves_nothing(tmp_path, suffix):
    """Ctrl-C in the middle (simulated from the progress callback, which runs in the main
    thread): the temporary store is removed and the threads stop."""
    (tmp_path / "a.svm").write_bytes(_text(30000))
    calls = []

    def progress(n):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ingest(
            str(tmp_path / "a.svm"),
            str(tmp_path / ("o" + suffix)),
            block_mb=0.02,
            shard_rows=2000,
            progress=progress,
        )
    assert sorted(os.listdir(tmp_path)) == ["a.svm"]
