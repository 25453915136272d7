"""numba's cache is keyed by every source file of the package (ooc_svm._numba_cache): a
changed callee module used to leave its callers' cached code linked to the old version, and
every smo run of an updated editable install ended in a segmentation fault."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ooc_svm._numba_cache import _sources_key


def _cache_dir(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(env_extra)
    code = "import os, ooc_svm; print(os.environ.get('NUMBA_CACHE_DIR', ''))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_changed_source_file_gives_another_cache_key(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    k0 = _sources_key(tmp_path)
    assert _sources_key(tmp_path) == k0
    (tmp_path / "sub" / "b.py").write_text("y = 22\n")  # a callee changed, not the caller
    assert _sources_key(tmp_path) != k0


def test_cache_folder_is_under_xdg_cache_home_and_a_users_choice_is_kept(tmp_path):
    got = _cache_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert got and Path(got).is_dir() and Path(got).is_relative_to(tmp_path / "ooc-svm" / "numba")
    assert _cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == got  # same sources, same folder
    mine = str(tmp_path / "mine")
    assert _cache_dir({"NUMBA_CACHE_DIR": mine}) == mine


def test_unusable_cache_home_leaves_numba_its_default(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")  # mkdir under it fails, for root too
    assert _cache_dir({"XDG_CACHE_HOME": str(not_a_dir)}) == ""


def _no_home_run(tmp: Path, uid: int | None) -> subprocess.CompletedProcess:
    """``import ooc_svm`` and ``ooc-svm --version`` without HOME (and, as root, as a uid that
    has no passwd entry): the cache folder it chose."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    env.pop("NUMBA_CACHE_DIR", None)
    env["TMPDIR"] = str(tmp)
    code = (
        "import os, sys, ooc_svm; from ooc_svm.cli import main; "
        "print(os.environ.get('NUMBA_CACHE_DIR', '')); sys.argv = ['ooc-svm', '--version']; "
        "main()"
    )

    cmd = [sys.executable, "-c", code]
    if uid is not None:  # (setpriv: the interpreter may lie below a folder only root enters)
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    return subprocess.run(
        cmd, env=env, cwd=tmp, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=300,
    )  # fmt: skip


def test_no_home_folder_uses_a_private_temporary_cache(tmp_path):
    """Containers often run a uid with no passwd entry and no HOME: ooc-svm used to die at
    import ("Could not determine home directory")."""
    import pwd
    import shutil
    import stat
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="ooc-svm-test-"))  # reachable by another uid
    try:
        os.chmod(tmp, 0o1777)
        uid = None
        if os.geteuid() == 0 and shutil.which("setpriv"):  # a uid with no passwd entry
            uid = next(u for u in range(23456, 24000) if not _has_passwd(pwd, u))
        r = _no_home_run(tmp, uid)
        assert r.returncode == 0, r.stderr
        assert "ooc-svm" in r.stdout.splitlines()[-1]  # the version line
        me = os.getuid() if uid is None else uid
        folder = tmp / f"ooc-svm-cache-{me}"
        got = Path(r.stdout.splitlines()[0])
        if uid is not None or not Path("~").expanduser().is_dir():
            assert got.is_relative_to(folder)
        if got.is_relative_to(folder):
            st = folder.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (me, 0o700)
        if uid is not None:  # another user's folder there first: not used (numba's default)
            shutil.rmtree(folder)
            folder.mkdir()
            os.chmod(folder, 0o777)
            r = _no_home_run(tmp, uid)
            assert r.returncode == 0, r.stderr
            assert r.stdout.splitlines()[0] == ""
            assert not list(folder.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _has_passwd(pwd, uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_a_compile_is_said_once(monkeypatch, caplog):
    """The first kernel command of a fresh clone compiled for 159 s without a word: the first
    compile (a cache miss) is said in one log line, once per process."""
    import logging

    import numba

    from ooc_svm import _numba_cache

    monkeypatch.setitem(_numba_cache._ANNOUNCE, "said", False)
    _numba_cache.announce_compiles()
    _numba_cache.announce_compiles()  # one listener, however often it is asked for

    @numba.njit
    def twice(x):
        return 2 * x

    @numba.njit
    def thrice(x):
        return 3 * x

    with caplog.at_level(logging.INFO):
        assert twice(2) == 4 and twice(3) == 6  # compiled once
        assert thrice(2) == 6  # a second compile: already said
    said = [r.getMessage() for r in caplog.records if "compiling numba" in r.getMessage()]
    assert said == [_numba_cache.COMPILING]


def test_a_cold_cache_command_says_it_compiles(tmp_path, make_store):
    """Wired into the commands that run kernels: a cold cache says so, a warm one does not;
    -q keeps it quiet."""
    import numpy as np
    import scipy.sparse as sp

    make_store(sp.random(50, 5, density=0.5, format="csr", random_state=0), np.ones(50))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "OOC_SVM_SERVER": "0"}
    env.pop("NUMBA_CACHE_DIR", None)
    errs = []
    for quiet in ([], []):
        r = subprocess.run(
            [sys.executable, "-m", "ooc_svm", "verify", "s.zarr", *quiet],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        errs.append(r.stderr)
    assert errs[0].count("compiling numba kernels") == 1, errs[0]
    assert "compiling" not in errs[1], errs[1]
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache2")
    r = subprocess.run(
        [sys.executable, "-m", "ooc_svm", "-q", "verify", "s.zarr"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
