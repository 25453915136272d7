"""ooc_svm._util outputs: atomic replacement of regular files, in-place writes to special
files, symlinks kept, nothing left behind on failure, the process umask respected."""

from __future__ import annotations

import os
import stat

import pytest

from ooc_svm._util import atomic_dir, is_special_output, open_output


def test_regular_file_replaced_atomically(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with open_output(str(p)) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert p.read_text() == "old"  # untouched until the body completed
    assert os.listdir(tmp_path) == ["out.txt"]
    with open_output(str(p)) as f:
        f.write("new")
    assert p.read_text() == "new" and os.listdir(tmp_path) == ["out.txt"]


def test_symlink_to_regular_file_is_kept(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with open_output(str(link)) as f:
        f.write("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_special_files_written_in_place(tmp_path):
    assert is_special_output("-") and is_special_output("/dev/null")
    assert not is_special_output(str(tmp_path / "nope"))
    with open_output("/dev/null") as f:
        f.write("x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_directory_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        with open_output(str(tmp_path)):
            pass


def test_umask_applies(tmp_path):
    old = os.umask(0o027)
    try:
        with open_output(str(tmp_path / "f")) as f:
            f.write("x")
        with atomic_dir(str(tmp_path / "d")) as d:
            open(os.path.join(d, "a"), "w").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o750


def test_atomic_dir_replaces_directory_refuses_file(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "old").write_text("x")
    with atomic_dir(str(d)) as tmp:
        open(os.path.join(tmp, "new"), "w").close()
    assert sorted(os.listdir(d)) == ["new"]
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError):
        with atomic_dir(str(tmp_path / "f")):
            pass
    assert sorted(os.listdir(tmp_path)) == ["f", "m"]


def test_output_path_errors_name_the_output_and_the_fix(tmp_path):
    """-o under a file, or in a directory that cannot be made: one line naming the output
    as given and what is in the way, never a bare errno or "File exists"."""
    import subprocess
    import sys

    import numpy as np

    from ooc_svm.model.model import Model

    Model(kind="linear", n_features=3, classes=[-1.0, 1.0], coef_=np.ones(3)).save(
        str(tmp_path / "m")
    )
    (tmp_path / "d.svm").write_text("1 1:1\n-1 2:1\n")
    cases = [
        ("predict m d.svm -o d.svm/sub", "d.svm/sub: d.svm is a file, not a directory"),
        ("predict m d.svm -o d.svm/a/b.txt", "d.svm/a/b.txt: d.svm is a file, not a directory"),
        ("export m --format liblinear d.svm/x", "d.svm/x: d.svm is a file, not a directory"),
        ("train d.svm -o d.svm/m2", "d.svm/m2: d.svm is a file, not a directory"),
    ]
    if os.path.isdir("/proc/self"):
        cases.append(
            ("predict m d.svm -o /proc/nope/p.txt", "/proc/nope/p.txt: cannot create the directory")
        )
    for args, want in cases:
        r = subprocess.run(
            [sys.executable, "-m", "ooc_svm", *args.split()],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert r.returncode == 1, (args, r.stderr)
        err = r.stderr.strip()
        assert err.startswith(f"ooc-svm: error: {want}") and "\n" not in err, (args, err)
        assert "Errno" not in err and "exists" not in err, (args, err)
        assert "give an output path in a directory" in err, (args, err)
