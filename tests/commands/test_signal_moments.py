"""A signal at any moment of an ``ooc-svm`` process ends it with one line and the status a
shell reports for the signal (130 for SIGINT, 143 for SIGTERM), never a traceback, never 0,
and nothing half-written. Each moment is reached by the process itself (a hook in the
process, not a timer racing it): while the command's module is imported (numpy, numba, zarr),
inside a finaliser (a ``__del__`` runs the handler: Python reports its exception as
"unraisable" and goes on), and after the command ended (the interpreter's exit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

_HOOKED = r"""
import atexit, importlib, os, sys
where, signum = sys.argv[1], int(sys.argv[2])
sys.argv = ["ooc-svm", *sys.argv[3:]]
if where == "import":  # while the command's module (numpy, numba, zarr, ...) is imported
    real = importlib.import_module
    def import_module(name, *a, **k):
        if name.startswith("ooc_svm.commands."):
            os.kill(os.getpid(), signum)
        return real(name, *a, **k)
    importlib.import_module = import_module
elif where == "finaliser":  # in a __del__ while the command runs: an unraisable exception
    from ooc_svm.commands import ingest
    summary = ingest._print_summary
    class Bomb:
        def __del__(self):
            os.kill(os.getpid(), signum)
    def print_summary(*a, **k):
        Bomb()
        return summary(*a, **k)
    ingest._print_summary = print_summary
elif where == "shard":  # ingest hands its first shard to the writer threads
    from ooc_svm.store import ingest_shards
    put = ingest_shards._ShardWriters.put
    def put_then_signal(self, item):
        put(self, item)
        os.kill(os.getpid(), signum)
    ingest_shards._ShardWriters.put = put_then_signal
elif where == "exit":  # the command ended: the interpreter's exit
    atexit.register(os.kill, os.getpid(), signum)
elif where in ("package", "cli", "cli-finaliser"):  # before ooc_svm.cli.main runs
    module = "ooc_svm._numba_cache" if where == "package" else "ooc_svm.cli"
    class Bomb:
        def __del__(self):
            os.kill(os.getpid(), signum)
    class Finder:  # asked for every module imported: fires when `module` is about to be
        def find_spec(self, name, path=None, target=None):
            if name == module and where == "cli-finaliser":
                Bomb()  # an unraisable exception, as in an import lock's weakref callback
            elif name == module:
                os.kill(os.getpid(), signum)
            return None
    sys.meta_path.insert(0, Finder())
elif where == "import-error":  # a C extension's import makes an ImportError of the signal
    real = importlib.import_module
    def import_module(name, *a, **k):
        if name.startswith("ooc_svm.commands."):
            hit = False
            try:
                os.kill(os.getpid(), signum)
            except KeyboardInterrupt:
                hit = True
            if hit:  # raised outside the handler: nothing chains the interrupt
                raise ImportError('PyCapsule_Import could not import module "datetime"')
        return real(name, *a, **k)
    importlib.import_module = import_module
from ooc_svm.cli import main
sys.exit(main())
"""


def _hooked(cwd, where: str, sig: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OOC_SVM_SERVER": "0"}
    return subprocess.run(
        [sys.executable, "-c", _HOOKED, where, str(int(sig)), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        # a suite run as a background job inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _line(sig: int) -> str:
    return "ooc-svm: interrupted" if sig == signal.SIGINT else "ooc-svm: terminated by SIGTERM"


@pytest.fixture
def text(tmp_path):
    (tmp_path / "t.svm").write_text("".join(f"{(-1) ** i} 1:{i} 3:0.5\n" for i in range(50)))
    return tmp_path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "t.svm", "s.zarr"],
        ["ingest", "t.svm", "s.zarr", "--overwrite"],
        ["train", "s.zarr", "-o", "m"],
    ],
)
def test_signal_during_start_up(text, sig, args):
    """The first fraction of a second (the command's imports) printed a 17-28-line
    KeyboardInterrupt traceback."""
    r = _hooked(text, "import", sig, *args)
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr
    assert sorted(os.listdir(text)) == ["t.svm"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("where", ["package", "cli"])
def test_signal_while_the_cli_is_imported(text, sig, where):
    """Before ``ooc_svm.cli.main`` set its handlers (the package's ``__init__``, the import
    of ``ooc_svm.cli``): a Ctrl-C printed a KeyboardInterrupt traceback and a SIGTERM killed
    the process without a word."""
    r = _hooked(text, where, sig, "ingest", "t.svm", "s.zarr")
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr
    assert sorted(os.listdir(text)) == ["t.svm"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_in_a_callback_while_the_cli_is_imported(text, sig):
    """A Ctrl-C that landed in an import lock's weakref callback while ``ooc_svm.cli`` was
    imported was "ignored" (a traceback) and the command went on to exit 0."""
    r = _hooked(text, "cli-finaliser", sig, "ingest", "t.svm", "s.zarr", "-q")
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_that_an_import_turned_into_another_error(text, sig):
    """numpy's C import turns a Ctrl-C into ``ImportError: PyCapsule_Import could not
    import module "datetime"``, chained to nothing: a 48-line traceback, exit 1."""
    r = _hooked(text, "import-error", sig, "ingest", "t.svm", "s.zarr")
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr
    assert sorted(os.listdir(text)) == ["t.svm"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_in_a_finaliser_is_not_lost(text, sig):
    """A SIGTERM whose exception lands in a finaliser printed an "Exception ignored"
    traceback and the ingest went on to exit 0."""
    r = _hooked(text, "finaliser", sig, "ingest", "t.svm", "s.zarr", "-q")
    assert r.returncode == 128 + sig, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == _line(sig), r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_at_exit(text, sig):
    """After the command (its store complete), the interpreter's exit: one line, the
    signal's status."""
    r = _hooked(text, "exit", sig, "ingest", "t.svm", "s.zarr", "-q")
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_ingest_writes_its_first_shard(text, sig):
    """ingest had its own SIGTERM handler, whose exception the CLI took for a Ctrl-C
    (status 130, "interrupted"); the partial store is removed either way."""
    r = _hooked(text, "shard", sig, "ingest", "t.svm", "s.zarr", "--shard-rows", "10")
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.strip().splitlines() == [_line(sig)], r.stderr
    assert sorted(os.listdir(text)) == ["t.svm"]
