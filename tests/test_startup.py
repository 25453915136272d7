"""Issue 16 goal 3: no start-up tax. ``ooc-svm train --solver perf`` on a Zarr store imports
only what the command needs: no zarr, pyarrow or fsspec (a local store is read through its
chunk files with os calls), no scipy.sparse (a linear model does not need it), no Dask.

(``ooc-svm --help`` importing no heavy library is tested in ``test_cli_basics.py``; the
timing against LIBLINEAR is ``scripts/bench_startup.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

#: what the perf train path of a Zarr store must not import (scipy.linalg is not listed: numba
#: imports it itself when its CPU target loads, for the BLAS behind np.dot)
NOT_NEEDED = ["zarr", "pyarrow", "fsspec", "scipy.sparse", "dask", "distributed", "sklearn"]


def _imported_by(argv: list[str], cwd) -> list[str]:
    code = (
        "import json, sys\n"
        "from ooc_svm.cli import main\n"
        f"rc = main({argv!r})\n"
        f"print(json.dumps([rc, sorted(m for m in {NOT_NEEDED!r} if m in sys.modules)]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    assert r.returncode == 0, r.stderr
    rc, mods = json.loads(r.stdout.strip().splitlines()[-1])
    assert rc == 0, r.stderr
    return mods


def test_perf_train_on_zarr_imports_only_what_it_needs(tmp_path, make_store):
    X = sp.random(400, 30, density=0.2, format="csr", random_state=3, dtype=np.float32)
    y = np.where(np.arange(400) % 3 == 0, 1.0, -1.0)
    make_store(X, y, shard_rows=150, name="s.zarr", compression="lz4")
    argv = ["train", "-q", "--solver", "perf", "--bias", "1", "s.zarr", "-o", "m"]
    assert _imported_by(argv, tmp_path) == []
    assert (tmp_path / "m" / "model.json").is_file()
