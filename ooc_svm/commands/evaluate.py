"""``ooc-svm evaluate MODEL STORE [--json]``: prediction quality of a model on a store.

The store is scored in one streamed pass through the engine; what is kept in memory and the
metrics are described in :mod:`ooc_svm.evaluation.evaluation` (``--help`` shows that text).

Ranking models (perf --loss roc|ordinal) only order rows: evaluate says that their threshold
is not trained and lists the threshold-free metrics (auc, prbep, ranking metrics) first. A
store whose task or labels do not fit the model is refused (see ``ooc-svm predict --help``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .._util import json_text
from ._common import INT

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
examples:
  ooc-svm evaluate model test.zarr
  ooc-svm evaluate model a9a.t --json            # SVMlight text, streamed
  ooc-svm evaluate model test.zarr --plot roc.png
  ooc-svm evaluate ranker mq2008-test.zarr --k 10"""


def _description() -> str:
    """``--help``: :mod:`ooc_svm.evaluation.evaluation`'s account of memory and metrics, then
    the notes of this command. The text is read from that module's source, not imported:
    importing it loads numpy and numba, which ``--help`` does not need."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("ooc_svm.evaluation.evaluation")
    assert spec is not None and spec.origin is not None
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))
    assert doc is not None
    paras = doc.split("\n\n")
    # what is printed first, then the notes of this command, then what is kept in memory
    text = "\n\n".join(
        paras[3:-1]
        + [p.strip() for p in __doc__.split("\n\n")[2:]]
        + ["The store is scored in one streamed pass through the engine. " + paras[1], paras[2]]
    )
    return (
        text.replace("``", "")
        .replace(" See :mod:`ooc_svm.evaluation.metrics` for the definitions.", "")
        .replace("**", "")
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter
    from ._common import add_memory, add_model_and_input, add_scheduler

    p = sub.add_parser(
        "evaluate",
        help="accuracy, precision/recall/F1, PRBEP, ROC AUC (binary) or pairwise accuracy, "
        "Kendall tau, NDCG@10 (ranks) of a model on a store",
        description=_description(),
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model_and_input(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the metrics, n_rows and model",
    )
    p.add_argument("--k", type=INT, default=10, help="cut-off of NDCG (default 10)")
    add_scheduler(p)
    add_memory(p)
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="binary labels: draw the ROC and precision-recall curves (matplotlib)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.evaluation import PlotError, evaluate_store
    from ._common import apply_memory, load_scored_model, open_scored_input
    from ._startup import init_numba_target

    apply_memory(args)
    init_numba_target()
    model = load_scored_model(args)
    model.info.setdefault("path", args.model)  # named in the --plot title
    store = open_scored_input(args, model)  # a store, or SVMlight text
    plot_error = None
    try:
        res = evaluate_store(
            model,
            store,
            args.k,
            args.plot,
            args.scheduler,
            model_name=args.model,
            allow_wider=args.allow_wider,
            allow_narrower=args.allow_narrower,
        )
    except PlotError as e:  # the metrics first, then the one-line error
        res, plot_error = e.metrics, str(e)
    _print_metrics(args, model, res)
    if plot_error is not None:
        print(f"ooc-svm: error: {plot_error}", file=sys.stderr)
        return 1
    return 0


def _print_metrics(args: argparse.Namespace, model, res: dict) -> None:
    if args.json:
        # the metrics and what was scored; nothing that changes between two identical runs
        print(json_text({**res, "n_rows": res.get("n"), "model": args.model}))
        return
    if res.get("threshold_trained") is False:
        at_zero = [k for k in ("accuracy", "precision", "recall", "f1") if k in res]
        print(
            f"note: {args.model} is a ranking model (loss {model.info.get('loss')}): its "
            "threshold is not trained; "
            + (
                f"{'/'.join(at_zero)} use f(x) > 0"
                if at_zero
                else "the metrics below use only the order of the scores"
            )
        )
    for key, v in res.items():
        if key == "threshold_trained":
            continue
        print(f"{key:18s} {v:.6f}" if isinstance(v, float) else f"{key:18s} {v}")
