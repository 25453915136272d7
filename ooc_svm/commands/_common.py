"""Arguments and messages several commands share (predict, evaluate, info, verify).

Kept free of heavy imports: a command's parser is built before its ``run`` imports numpy.
"""

from __future__ import annotations

import logging
import sys

#: help of ``--scheduler`` (every command that runs passes through the engine)
SCHEDULER_HELP = (
    "local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
    "scheduler address tcp://HOST:PORT / scheduler-file.json"
)

log = logging.getLogger(__name__)


def _as_written(kind):
    """An argparse ``type`` like ``kind`` (int or float) that refuses what Python's parser
    forgives but a command line should not: spaces around the number (``--hash-bits ' 3'``)
    and underscores (``1_000``). Its ``__name__`` keeps argparse's message, "invalid int
    value: ' 3'"."""

    def parse(text: str):
        if text != text.strip() or "_" in text:
            raise ValueError(text)
        return kind(text)

    parse.__name__ = kind.__name__
    return parse


#: argparse types of integer and real options (:func:`_as_written`)
INT = _as_written(int)
FLOAT = _as_written(float)


def add_model_and_input(p) -> None:
    """The positional ``model`` and ``store`` of the commands that score a store."""
    p.add_argument("model", help="model directory written by `ooc-svm train`")
    p.add_argument("store", help="store, or SVMlight/LIBSVM text file (.gz .bz2 .xz, - for stdin)")
    p.add_argument(
        "--allow-wider",
        action="store_true",
        help="score data with more than 10%% more features than the model (refused by "
        "default: another feature space?); features beyond the model's weigh 0",
    )
    p.add_argument(
        "--allow-narrower",
        action="store_true",
        help="score a store with less than half the model's features (refused by default: "
        "another feature space?)",
    )


def load_scored_model(args):
    """The model of ``predict``/``evaluate``; when it is not one but the data argument is,
    the error says the model comes first (LIBLINEAR's ``predict`` takes DATA MODEL)."""
    import os

    from ..model.model import ModelError, load_model

    try:
        return load_model(args.model)
    except ModelError as e:
        if os.path.isfile(os.path.join(str(args.store), "model.json")):
            raise ModelError(
                f"{e}; {args.store} is a model: give the model first, then the data "
                f"(ooc-svm {args.command} MODEL DATA; LIBLINEAR's predict takes DATA MODEL)"
            ) from None
        raise


def open_scored_input(args, model):
    """The store or text input of ``predict``/``evaluate`` for ``model``: text is read at the
    model's width and hashed as the model's training store was (``ingest --hash-bits``)."""
    from ..evaluation.scoring import model_hashing
    from ..store.paths import is_store_path

    if is_store_path(args.store):  # (text_view.open_input's first case, without the parser)
        from ..store import open_store

        return open_store(args.store)
    from ..store.text_view import open_input

    h = model_hashing(model, args.model)
    return open_input(args.store, model.n_features, hash_bits=h["bits"] if h else None)


def add_scheduler(p) -> None:
    """``--scheduler`` (default None: ``$OOC_SVM_SCHEDULER``, else local)."""
    p.add_argument("--scheduler", default=None, help=SCHEDULER_HELP)


def warn_leftovers(path: str, left, *, count: bool = True) -> None:
    """On stderr: what interrupted writers left in the store at ``path`` (when ``count``)
    and which live writer holds it (:func:`ooc_svm.store.gc.find_leftovers`' answer)."""
    if count and left.count:
        print(f"ooc-svm: warning: {path}: {left.summary()}", file=sys.stderr)
    if left.busy:
        print(f"ooc-svm: note: {path} is being written by {left.busy}", file=sys.stderr)


def add_memory(p) -> None:
    """``--memory-mb``: the process's memory budget (every automatic size draws from it)."""
    p.add_argument(
        "--memory-mb",
        type=FLOAT,
        default=None,
        metavar="MB",
        help="memory budget of this process in MiB (also $OOC_SVM_MEMORY_MB); default: the "
        "tightest of the container's limit (cgroup v1/v2), ulimit -v / -d, the host's "
        "available memory and a Dask worker's limit. Every automatic size (shard cache, "
        "selective's rows, perf's planes, kernel caches, buffers) draws from it; a run that "
        "needs more is refused before it starts",
    )


def apply_memory(args) -> None:
    """Set the explicit budget of ``--memory-mb`` (checked) and report the budget: on stderr
    with ``-v``, in the debug log otherwise."""
    import logging

    from ..memory_budget import current, parse_memory_mb, set_explicit

    mb = getattr(args, "memory_mb", None)
    set_explicit(None if mb is None else parse_memory_mb(mb))
    level = logging.INFO if getattr(args, "verbose", 0) else logging.DEBUG
    log.log(level, "%s", current().describe())
