"""Arguments and messages several commands share (predict, evaluate, info, verify).

Kept free of heavy imports: a command's parser is built before its ``run`` imports numpy.
"""

from __future__ import annotations

import sys

#: help of ``--scheduler`` (every command that runs passes through the engine)
SCHEDULER_HELP = (
    "local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
    "scheduler address tcp://HOST:PORT / scheduler-file.json"
)


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


def open_scored_input(args, model):
    """The store or text input of ``predict``/``evaluate`` for ``model``: text is read at the
    model's width and hashed as the model's training store was (``ingest --hash-bits``)."""
    from ..evaluation.scoring import model_hashing
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
