"""No start-up tax. ``ooc-svm train --solver perf`` on a Zarr store imports
only what the command needs: no zarr, pyarrow or fsspec (a local store is read through its
chunk files with os calls), no scipy.sparse (a linear model does not need it), no Dask; not
scipy.linalg nor cffi, which numba imports while its CPU target loads (cached kernels load
without the target, and the target loads without them: ``ooc_svm.commands._startup``; numba
itself imports the ``scipy`` package for its version check); not the other solvers'
algorithms. ``ooc-svm train --help`` imports no solver's algorithm (hence no numba) and no
numpy (``api`` imports the store, the engine and the C sweep when they are used). A shard's
validation kernel is compiled once for every kind of store.

(``ooc-svm --help`` importing no heavy library is tested in ``test_cli_basics.py``; the
timing against LIBLINEAR is ``scripts/bench_startup.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

#: what the perf train path of a Zarr store must not import
NOT_NEEDED = [
    "zarr",
    "pyarrow",
    "fsspec",
    "scipy.sparse",
    "scipy.linalg",
    "cffi",
    "dask",
    "distributed",
    "sklearn",
    "ooc_svm.solvers.smo.working_set",
    "ooc_svm.solvers.smo.driver",
    "ooc_svm.solvers.active_set.driver",
    "ooc_svm.solvers.irwls.driver",
]


def _imported_by(argv: list[str], cwd, not_needed: list[str] = NOT_NEEDED) -> list[str]:
    """The modules of ``not_needed`` that ``ooc-svm ARGV`` imported (run in a fresh Python)."""
    code = (
        "import json, sys\n"
        "from ooc_svm.cli import main\n"
        "try:\n"
        f"    rc = main({argv!r})\n"
        "except SystemExit as e:\n"
        "    rc = e.code\n"
        f"print(json.dumps([rc, sorted(m for m in {not_needed!r} if m in sys.modules)]))\n"
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


def test_train_help_imports_no_solver_algorithm(tmp_path):
    # the flags and --help come from the solvers' Params classes, not from their algorithms
    heavy = ["numba", "numpy", "scipy", "zarr", "pyarrow", "dask", "ooc_svm.kernels"]
    heavy += ["ooc_svm.store", "ooc_svm.engine.local", "ooc_svm.c_sweep"]  # (they import numpy)
    heavy += [f"ooc_svm.solvers.{m}" for m in ("perf.error", "smo.working_set", "irwls.driver")]
    heavy += ["ooc_svm.solvers.active_set.driver"]
    assert _imported_by(["train", "--help"], tmp_path, heavy) == []


def test_shard_check_compiled_once_for_every_kind_of_store(tmp_path, make_store):
    """Shards arrive as writable arrays (lz4 Zarr chunks) or read-only ones (uncompressed
    Zarr chunks, Parquet columns); the validation kernel sees one signature for all of them,
    so a warm numba cache serves every store (a new signature compiled for seconds)."""
    from ooc_svm.kernels import validate

    X = sp.random(300, 20, density=0.2, format="csr", random_state=1, dtype=np.float32)
    y = np.where(np.arange(300) % 2 == 0, 1.0, -1.0)
    stores = [
        make_store(X, y, shard_rows=100, name="lz4.zarr", compression="lz4"),
        make_store(X, y, shard_rows=100, name="raw.zarr", compression="none"),
        make_store(X, y, shard_rows=100, name="s.parquet"),
    ]
    writable = set()
    for st in stores:
        for i in range(st.n_shards):
            shard = st.read_shard(i, verify=True)
            writable.add(bool(shard.data.flags.writeable))
    assert writable == {True, False}  # both kinds were read (else this test proves nothing)
    kernel = getattr(validate, "_check_csr", validate.check_csr)
    assert len(kernel.signatures) == 1, kernel.signatures


def test_console_process_freezes_its_objects_before_exit(tmp_path, make_store):
    """``ooc-svm`` (main() without arguments) pauses the cyclic GC during start-up, restarts
    it for the run and freezes everything before exiting (the interpreter's final
    collections walked numba's objects: 0.2 s of CPU); main(argv) from Python changes
    nothing of the caller's GC."""
    X = sp.random(200, 10, density=0.3, format="csr", random_state=2, dtype=np.float32)
    y = np.where(np.arange(200) % 2 == 0, 1.0, -1.0)
    make_store(X, y, shard_rows=100, name="s.zarr", compression="lz4")
    argv = ["train", "-q", "--solver", "perf", "s.zarr", "-o", "m", "--overwrite"]  # twice
    code = (
        "import gc, json, sys\n"
        "from ooc_svm.cli import main\n"
        "import ooc_svm.solvers.perf.error as err\n"
        f"rc1 = main({argv!r})\n"
        "after_call = [gc.isenabled(), gc.get_freeze_count()]\n"
        "seen = []\n"
        "solve = err._solve_error\n"
        "def spy(*a, **k):\n"
        "    seen.append(gc.isenabled())\n"
        "    return solve(*a, **k)\n"
        "err._solve_error = spy\n"
        f"sys.argv = ['ooc-svm', *{argv!r}]\n"
        "rc2 = main()\n"
        "print(json.dumps([rc1, rc2, after_call, seen, gc.get_freeze_count()]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr
    rc1, rc2, after_call, seen, frozen = json.loads(r.stdout.strip().splitlines()[-1])
    assert rc1 == rc2 == 0
    assert after_call == [True, 0]  # main(argv): the caller's GC untouched
    assert seen == [True]  # the training runs with the collector on
    assert frozen > 10_000  # numba's and numpy's objects frozen before exit


def test_cached_kernels_load_without_numbas_target_and_give_the_same_bits(tmp_path, make_store):
    """A kernel loaded from numba's cache without its CPU target (the default) links the same
    object code as one loaded after the whole target (``init_numba_target(eager=True)``, as
    the warm server does): the same model, bit for bit; and the lazy run never loads the
    target's implementation modules (``numba.np.arraymath``, the BLAS check)."""
    X = sp.random(500, 40, density=0.15, format="csr", random_state=5, dtype=np.float32)
    y = np.where(np.arange(500) % 4 == 0, 1.0, -1.0)
    make_store(X, y, shard_rows=200, name="s.zarr", compression="lz4")
    code = (
        "import json, sys\n"
        "import ooc_svm.commands._startup as s\n"
        "eager = sys.argv[1] == 'eager'\n"
        "if eager:\n"
        "    s._load_lazily = lambda: False\n"
        "from ooc_svm.cli import main\n"
        "rc = main(['train', '-q', '--solver', 'perf', '--bias', '1', '--eps', '0.0001',\n"
        "           's.zarr', '-o', sys.argv[1]])\n"
        "from numba.core import caching\n"
        "print(json.dumps([rc, 'numba.np.arraymath' in sys.modules,\n"
        "                  getattr(caching.Cache.load_overload, '_ooc_svm', False)]))\n"
    )
    seen = {}
    for how in ("eager", "lazy"):  # eager first: it compiles what the cache lacks
        r = subprocess.run(
            [sys.executable, "-c", code, how],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        seen[how] = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["eager"] == [0, True, False]
    assert seen["lazy"] == [0, False, True]
    arrays = {how: np.load(tmp_path / how / "arrays.npz") for how in seen}
    assert sorted(arrays["eager"].files) == sorted(arrays["lazy"].files)
    assert "coef" in arrays["lazy"].files
    for name in arrays["eager"].files:
        assert arrays["eager"][name].tobytes() == arrays["lazy"][name].tobytes(), name


def test_predict_and_evaluate_of_a_linear_model_import_only_what_they_need(tmp_path, make_store):
    """A linear model scores a store with numpy and numba only: no scipy.sparse (only a
    kernel model's support vectors need it: 0.15 s of CPU on a loaded machine) and no text
    parser (the input is a store)."""
    X = sp.random(300, 20, density=0.2, format="csr", random_state=4, dtype=np.float32)
    y = np.where(np.arange(300) % 3 == 0, 1.0, -1.0)
    make_store(X, y, shard_rows=100, name="s.zarr", compression="lz4")
    assert _imported_by(["train", "-q", "--solver", "perf", "s.zarr", "-o", "m"], tmp_path) == []
    not_needed = [*NOT_NEEDED, "ooc_svm.store.text_view", "ooc_svm.interop"]
    argv = ["predict", "-q", "m", "s.zarr", "-o", "scores.tsv"]
    assert _imported_by(argv, tmp_path, not_needed) == []
    assert (tmp_path / "scores.tsv").read_text().count("\n") == 301  # header + one per row
    assert _imported_by(["evaluate", "m", "s.zarr"], tmp_path, not_needed) == []
