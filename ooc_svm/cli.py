"""The ``ooc-svm`` command. Each sub-command lives in ``ooc_svm/commands/<name>.py`` and
provides ``add_parser(subparsers)`` and ``run(args) -> int``; this module only dispatches.

Start-up is kept cheap: only the module of the command being run is imported (``ooc-svm``
alone, ``ooc-svm --help`` and ``--version`` import no command module, hence no numpy, numba,
zarr, pyarrow or dask); the other commands appear in ``--help`` by their one-line summary.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import re
import sys
from typing import Any, NoReturn

from . import __version__, _early
from ._early import Terminated

#: sub-commands in the order ``--help`` lists them, with their one-line summary
COMMANDS: dict[str, str] = {
    "ingest": "convert SVMlight/LIBSVM text into a store",
    "info": "show a store's metadata",
    "verify": "re-read every shard and check its checksum",
    "drop": "remove a store's oldest shards (a sliding window over appended rows)",
    "synth": "generate a synthetic RCV1-like dataset",
    "train": "train an SVM on a store",
    "predict": "score a store with a model (streamed); write scores and labels",
    "evaluate": "accuracy, precision/recall/F1, PRBEP, ROC AUC (binary) or pairwise accuracy, "
    "Kendall tau, NDCG@10 (ranks) of a model on a store",
    "plot": "plot a training history (needs matplotlib)",
    "export": "write a model as a LIBLINEAR, LIBSVM or SVMlight model file",
    "import": "read a LIBLINEAR, LIBSVM or SVMlight/SVMperf model file as a model",
    "server": "start/stop a warm server that takes the start-up off every command",
}
#: command name -> module name where they differ (``import`` is a Python keyword)
_MODULES = {"import": "import_model"}

log = logging.getLogger(__name__)

_DESCRIPTION = (
    "Out-of-core SVM training on sparse data larger than memory: ingest SVMlight "
    "files into sharded Zarr/Parquet stores once, then train linear or kernel SVMs "
    "(perf, smo, active-set, irwls) in bounded memory, locally or on a Dask cluster."
)


#: flags of LIBLINEAR's train, LIBSVM's svm-train / svm-predict and SVMperf's svm_perf_learn
#: that ooc-svm spells otherwise (or does not have): flag -> what to use. Said when a command
#: line with one of them fails to parse (``train -c 4 a9a.zarr -o m``).
HABITS: dict[str, str] = {
    "-c": "ooc-svm uses --C (LIBLINEAR's and LIBSVM's -c)",
    "-C": "ooc-svm chooses C with --C 0.01,0.1,1,10 --folds 5 (LIBLINEAR's -C)",
    "-s": "ooc-svm uses --solver (perf, smo, active-set, irwls) and --loss (LIBLINEAR's -s "
    "solver type)",
    "-e": "ooc-svm uses --eps (perf) or --tol (smo, active-set, irwls) (LIBLINEAR's and "
    "LIBSVM's -e)",
    "-B": "ooc-svm uses --bias (LIBLINEAR's -B)",
    "-wi": "ooc-svm uses --class-weight LABEL=W,... (LIBLINEAR's and LIBSVM's -wi)",
    "-b": "ooc-svm uses --probability, in train and predict (LIBSVM's -b 1)",
    "-t": "ooc-svm uses --kernel linear|poly|rbf|sigmoid (LIBSVM's -t)",
    "-g": "ooc-svm uses --gamma (LIBSVM's -g)",
    "-d": "ooc-svm uses --degree (LIBSVM's -d)",
    "-r": "ooc-svm uses --coef0 (LIBSVM's -r)",
    "-m": "ooc-svm uses --cache-mb (LIBSVM's -m)",
    "-v N": "ooc-svm's -v is --verbose; cross-validation is --folds K with --C values "
    "(LIBLINEAR's and LIBSVM's -v N)",
    "-n": "ooc-svm trains C-SVMs only (--C); LIBSVM's -n (nu) has no equivalent",
    "-p": "ooc-svm trains classifiers and rankers only; LIBSVM's -p (epsilon-SVR) has no "
    "equivalent",
    "-l": "ooc-svm uses --loss error|roc|ordinal (SVMperf's -l)",
}


def _habits(argv: list[str]) -> list[tuple[str, str]]:
    """``(flag as given, HABITS key)`` of the foreign flags in ``argv``, in order, each key
    once."""
    found: list[tuple[str, str]] = []
    for k, tok in enumerate(argv):
        if tok == "--":
            break
        key = None
        if re.fullmatch(r"-w[+-]?[0-9]+(\.[0-9]+)?", tok):
            key = "-wi"
        elif tok == "-v" and k + 1 < len(argv) and argv[k + 1].isdigit():
            key = "-v N"
        elif tok[:2] in HABITS and tok[:2] != "-v" and (len(tok) == 2 or tok[2:3].isdigit()):
            key = tok[:2]
        if key is not None and key not in [f[1] for f in found]:
            found.append((tok if key != "-wi" else tok.rstrip("0123456789.") + "N", key))
    return found


#: the arguments being parsed (for :meth:`_Parser.error`'s hints)
_ARGV: list[str] = []


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line that points to ``--help`` (one line per
    LIBLINEAR / LIBSVM / SVMperf flag given, saying ooc-svm's spelling)."""

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        command = _command_in(_ARGV)
        if prog == "ooc-svm" and command:  # extra arguments are the top parser's error
            prog = f"ooc-svm {command}"
        if habits := _habits(_ARGV):
            lines = [f"{prog}: error: {flag}: {HABITS[key]}" for flag, key in habits]
            self.exit(2, "\n".join(lines) + f" (see {prog} --help)\n")
        if hint := self._case_hint(message):
            self.exit(2, f"{self.prog}: error: {hint} (see {prog} --help)\n")
        self.exit(2, f"{self.prog}: error: {message} (see {prog} --help)\n")

    def _case_hint(self, message: str) -> str | None:
        """``--c: did you mean --C?`` for a flag that is an option of this parser but for
        its case (``--c 4`` listed nine options that start with --c, not --C)."""
        m = re.match(r"(?:ambiguous option|unrecognized arguments): (-[^\s=]+)", message)
        if m is None:
            return None
        given = m.group(1)
        same = [o for o in self._option_string_actions if o != given and o.lower() == given.lower()]
        return f"{given}: did you mean {same[0]}? (options are case-sensitive)" if same else None


def _command_in(argv: list[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word not starting with ``-``)."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def _add_verbosity(p: argparse.ArgumentParser, suppress: bool) -> None:
    # after the sub-command too (``ooc-svm train -q ...``); SUPPRESS keeps the top-level
    # value when the flag is not repeated there
    taken = set(p._option_string_actions)
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    if not {"-v", "--verbose"} & taken:
        p.add_argument("-v", "--verbose", action="count", help="more log output (-vv: debug)", **d)
    if not {"-q", "--quiet"} & taken:
        p.add_argument("-q", "--quiet", action="store_true", help="only errors", **d)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``ooc-svm``; the full parser of ``command`` only (all when ``"*"``)."""
    p = _Parser(prog="ooc-svm", description=_DESCRIPTION)
    p.add_argument("--version", action="version", version=f"ooc-svm {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if command in (name, "*"):
            importlib.import_module(f"ooc_svm.commands.{_MODULES.get(name, name)}").add_parser(sub)
            _add_verbosity(sub.choices[name], suppress=True)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return p


def _known_errors():
    from .checkpoint import CheckpointError
    from .engine.base import EngineError
    from .memory_budget import MemoryBudgetError
    from .model.model import ModelError
    from .solvers import SolverError
    from .store.format import StoreError

    errs = [StoreError, SolverError, ModelError, CheckpointError, EngineError, MemoryBudgetError]
    try:
        from .store.ingest import IngestError

        errs.append(IngestError)
    except ImportError:
        pass
    return tuple(errs)


_DASK_LOGGING_SET: str | None = None  # the value this module put in $DASK_LOGGING


def _quiet_dask(verbose: int) -> None:
    """Dask's own log lines (this process and the worker processes it starts): none by
    default, its warnings and errors with ``-v`` (a lost worker, say; our INFO lines tell
    when the cluster is ready and closed), its INFO lines with ``-vv``, DEBUG with ``-vvv``.

    A ``$DASK_LOGGING`` the user set is left alone.
    """
    global _DASK_LOGGING_SET
    if os.environ.get("DASK_LOGGING") not in (None, _DASK_LOGGING_SET):
        return
    if verbose:
        levels = {"distributed": ("warning", "info")[verbose - 1] if verbose < 3 else "debug"}
    else:  # Dask sets some child loggers explicitly: they need their own entry
        names = ("distributed", "distributed.client", "distributed.gc", "tornado.application")
        levels = dict.fromkeys(names, "critical")
    # read by dask.config when (and if) dask is imported, here and in spawned workers
    os.environ["DASK_LOGGING"] = _DASK_LOGGING_SET = repr(levels)
    if "distributed" in sys.modules:  # already imported (e.g. main() called from Python)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level.upper())


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status.

    Without ``argv`` (the ``ooc-svm`` process itself), the cyclic garbage collector is
    paused during start-up and everything is frozen before the process exits
    (:mod:`ooc_svm.commands._startup`: 0.2 s of CPU of a small training), and a warm
    server started by ``ooc-svm server start`` runs the command when one serves this
    install (:mod:`ooc_svm.server.server_link`).
    """
    if argv is not None:
        return _main(list(argv))
    # a signal at any moment, start-up included, ends the command with one line
    _install_signal_handlers()
    sys.unraisablehook = _early.unraisable
    try:
        from .server.server_link import forward

        status = forward(sys.argv[1:])  # a warm server runs it (``ooc-svm server start``)
        if status is None:
            from .commands._startup import pause_gc

            pause_gc()
            try:
                status = _main(sys.argv[1:])
            finally:
                gc.freeze()  # the interpreter's final collections would walk every object
    except KeyboardInterrupt as e:  # before (or after) _main's own handling
        status = _interrupted(e)
    except Exception as e:  # an import a signal broke before _main's handling (numpy's)
        cause = _caused_by_interrupt(e) or _early.received()
        if cause is None:
            raise
        status = _interrupted(cause)
    if _early.SWALLOWED and status == 0:  # a signal's exception was lost in a finaliser
        status = _interrupted(_early.SWALLOWED[0])
    _exit_on_signal()  # from here to the exit a signal ends the process at once
    return status


def _main(argv: list[str]) -> int:
    parser = build_parser(_command_in(argv))
    _ARGV[:] = argv
    if not argv:
        parser.print_help()
        return 2
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:  # only top-level options
        parser.print_help()
        return 2
    level = logging.ERROR if args.quiet else (logging.DEBUG if args.verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    _quiet_dask(args.verbose)
    old_handlers = _install_signal_handlers()
    n_signals = len(_early.RECEIVED)
    from . import memory_budget

    old_budget = memory_budget.explicit_state()
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except KeyboardInterrupt as e:
        return _interrupted(e)
    except BrokenPipeError:
        return _broken_pipe()
    except Exception as e:
        # Ctrl-C inside numba's dispatcher surfaces as "SystemError: ... returned a result
        # with an exception set" (or another error raised while handling it); numpy's C
        # import turns it into an ImportError that does not chain it: any error after a
        # signal this command received is the signal's
        cause = _caused_by_interrupt(e) or _early.received(n_signals)
        if cause is not None:
            return _interrupted(cause)
        oom = memory_budget.out_of_memory_line(e)  # the last resort: no check foresaw it
        if oom is not None:
            gc.collect()
            print(f"ooc-svm: error: {oom}", file=sys.stderr)
            return 1
        if not isinstance(e, (*_known_errors(), OSError)):
            raise
        print(f"ooc-svm: error: {e}", file=sys.stderr)
        return 1
    finally:
        _restore_signal_handlers(old_handlers)
        memory_budget.set_explicit(old_budget)  # this command's --memory-mb ends with it


def _exit_on_signal() -> None:
    """From the command's end to the process's exit (the interpreter's finalisation), a
    SIGINT, SIGTERM or SIGHUP prints its line and exits with its status at once: there is
    nothing left to clean up, and an exception there would be a traceback."""
    import signal

    def now(signum, frame) -> None:
        sigint = signum == signal.SIGINT
        status = _interrupted(KeyboardInterrupt() if sigint else Terminated(signum))
        from ._util import flush_and_exit

        flush_and_exit(status)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, now)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def _install_signal_handlers() -> dict:
    """SIGTERM and SIGHUP clean up like SIGINT, every signal recorded (main thread only;
    :func:`ooc_svm._early.install`); the previous handlers.

    A signal the parent set to be ignored (``nohup`` ignores SIGHUP) stays ignored.
    """
    return _early.install()


def _restore_signal_handlers(old: dict) -> None:
    import signal

    for sig, handler in old.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):  # pragma: no cover
            pass


def _interrupted(e: BaseException | None = None) -> int:
    # exit within a second: the interpreter's final garbage collections over numba's
    # objects took ~1 s on a loaded machine; frozen objects are skipped
    gc.freeze()
    text, status = _early.line(e if e is not None else KeyboardInterrupt())
    print(text, file=sys.stderr)
    return status


def _broken_pipe() -> int:
    """The reader of standard output went away (``| head``, ``| true``): end quietly with
    the status of a process killed by SIGPIPE (128 + 13), as cat or grep report it."""
    try:  # the exit flush must not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass
    return 141


def _caused_by_interrupt(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or :class:`Terminated`) ``e`` was raised by, or while
    handling; None if none."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
