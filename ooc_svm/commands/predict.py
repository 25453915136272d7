"""``ooc-svm predict MODEL STORE -o OUT``: decision values and labels, streamed shard by shard.

The store is scored in batches of whole shards (at most ``--batch-rows`` rows, default
1,000,000) through the engine, and every batch is appended to the output before the next one
is scored, so memory stays bounded by one batch whatever the size of the store. The output
is written under a temporary name and renamed into place when complete; ``-o -`` writes to
standard output, and special files (``/dev/stdout``, a FIFO) are written in place.

Output columns: ``label`` (the store's label), ``score`` (decision value f(x); one
``score_<label>`` column per class for one-vs-rest models, e.g. ``score_1 … score_105``),
``prediction`` (predicted label; not for ranking models, whose scores only order rows) and
``qid`` when the store has query ids.
Parquet when OUT ends in ``.parquet`` / ``.pq`` (or ``--format parquet``), else text: a
header line and one line per row, tab-separated (comma-separated when OUT ends in ``.csv``).

The model and the store must match: a store whose task differs from the model's (a binary
model on a multiclass store, a ranking model on class labels) is refused; a store with more
features than the model is scored with a warning (the extra features are ignored); labels
that are not the model's classes are refused, unless the store has one label value only
(unlabelled test data with a dummy label).

Linear models are scored with the numba CSR kernels; kernel models (binary and one-vs-rest)
with the streamed kernel expansion (see :mod:`ooc_svm.evaluation.scoring`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from ._common import INT

if TYPE_CHECKING:
    import argparse

DESCRIPTION = """\
Score a store (or an SVMlight/LIBSVM text file, as svm-predict users have them) with a model and
write one line per row: label, score (decision value f(x); score_<label> per class for
one-vs-rest models, e.g. score_1 ... score_105), prediction (not for ranking models, whose
scores only order rows) and qid when the store has query ids. The store is scored in batches of
whole shards (--batch-rows), each written before the next is scored: memory stays bounded
whatever the size of the store.

OUT ending in .parquet / .pq is Parquet; .csv comma-separated text; anything else
tab-separated text with a header line; - is standard output. A regular file is written under a
temporary name and renamed into place when complete.

The model and the store must match: a store whose task differs from the model's (a binary
model on a multiclass store, a ranking model on class labels) is refused; a store with more
features than the model is scored with a warning; labels that are not the model's classes are
refused, unless the store has one label value only (unlabelled test data with a dummy label).

examples:
  ooc-svm predict model test.zarr -o scores.parquet
  ooc-svm predict model a9a.t -o scores.csv            # SVMlight text, streamed
  xzcat test.svm.xz | ooc-svm predict model - -o - | head
  ooc-svm predict model test.zarr -o scores.txt --json"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter
    from ._common import add_memory, add_model_and_input, add_scheduler

    p = sub.add_parser(
        "predict",
        help="score a store with a model (streamed); write scores and labels",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    add_model_and_input(p)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="output file (.parquet, .csv or text; - = standard output)",
    )
    p.add_argument(
        "--format",
        choices=["parquet", "text"],
        default=None,
        help="output format (default: from the suffix of OUT)",
    )
    p.add_argument(
        "--batch-rows",
        type=INT,
        metavar="N",
        default=None,
        help="rows scored per batch of shards (bounds memory; default 1000000, fewer when a "
        "batch's scores would take more than a quarter of the memory budget)",
    )
    add_scheduler(p)
    add_memory(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: model, store, output, format, n_rows, seconds (on "
        "stderr when OUT is standard output)",
    )
    p.add_argument(
        "--probability",
        action="store_true",
        help="add P(y=1|x) (column probability; multiclass: one probability_<label> column per "
        "class) from the sigmoid `train --probability` stored in the model",
    )
    p.set_defaults(func=run)


#: rows of a batch of ``predict`` unless the memory budget asks for fewer
BATCH_ROWS = 1_000_000

#: the share of the memory budget a batch's output columns may take
BATCH_SHARE = 0.25


def batch_rows(model) -> int:
    """Rows of a batch: :data:`BATCH_ROWS`, fewer when the batch's columns (label, one score
    per class, prediction, qid: 8 bytes each, twice for their text or Arrow form) would take
    more than :data:`BATCH_SHARE` of the memory budget."""
    from ..memory_budget import current

    classes = getattr(model, "classes", None)
    per_row = 2 * 8 * (3 + (len(classes) if classes is not None and len(classes) > 2 else 1))
    return max(1, min(BATCH_ROWS, current().share(BATCH_SHARE) // per_row))


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit flush stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass


def run(args: argparse.Namespace) -> int:
    from .._util import is_special_output, json_text
    from ..evaluation.scoring import check_compatible, predict_store
    from ..memory_budget import current
    from ..progress import Meter, progress_mode
    from ._common import apply_memory, load_scored_model, open_scored_input
    from ._startup import init_numba_target

    apply_memory(args)
    init_numba_target()
    t0 = time.perf_counter()
    model = load_scored_model(args)
    if args.probability:
        from ..model.model import require_probability

        require_probability(model, args.model)
    store = open_scored_input(args, model)  # a store, or SVMlight text
    # a store whose labels are all one dummy value (unlabelled test data, as svm-predict
    # accepts it) is scored with a warning; real labels that do not fit the model are refused
    labels = store.meta.labels
    dummy = labels is not None and len(labels) == 1
    check_compatible(
        model,
        store.meta,
        args.model,
        args.store,
        labels_matter=not dummy,
        allow_wider=args.allow_wider,
        allow_narrower=args.allow_narrower,
    )
    streamed = is_special_output(args.output)
    meter = Meter("predict", progress_mode(args), total=store.meta.n_rows, unit="rows")
    try:
        info = predict_store(
            model,
            store,
            args.output,
            args.format,
            args.batch_rows or batch_rows(model),
            args.scheduler,
            progress=meter.update,
            probability=args.probability,
        )
    except BrokenPipeError:
        # the reader went away (`| head`): end quietly with the status of a process killed by
        # SIGPIPE (128 + 13), as cat, grep or sort report it
        _quiet_stdout()
        return 141
    finally:
        meter.close()
    where = "standard output" if args.output == "-" else info["output"]
    if args.json:
        summary = {
            "model": args.model,
            "store": args.store,
            "output": info["output"],
            "format": info["format"],
            "n_rows": info["rows"],
            "seconds": time.perf_counter() - t0,
            "memory_budget": current().as_dict(),
        }
        print(json_text(summary), file=sys.stderr if streamed else sys.stdout)
        return 0
    if getattr(args, "quiet", False):
        return 0
    print(
        f"predict: {info['rows']} rows -> {where} ({info['format']})",
        file=sys.stderr if streamed else sys.stdout,
    )
    return 0
