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
