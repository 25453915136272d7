"""``ooc-svm evaluate MODEL STORE [--json]``: prediction quality of a model on a store.

The store is scored in one streamed pass through the engine. What is kept in memory:

- binary labels: confusion counts (exact, from float64 decision values, summed per shard)
  plus, for ROC AUC and PRBEP, which need the order of all scores, the decision values as
  **float32 and one byte per label: 5 bytes per row** (50 MB for 10 million rows);
- rank labels: float32 scores and labels (8 bytes per row, plus 8 for the qid when the store
  has query ids) for pairwise accuracy, Kendall τ and NDCG@10;
- multiclass (one-vs-rest models): counts only.

Metrics: binary — n, accuracy, precision, recall, f1 (prediction: f(x) > 0), prbep, auc
(plus ndcg@10 and pairwise_accuracy when the store has qids); ranks — n, pairwise_accuracy,
kendall_tau (per query and averaged when there are qids), ndcg@10 (with qids); multiclass —
n, accuracy. See :mod:`ooc_svm.metrics` for the definitions.

Ranking models (perf --loss roc|ordinal) only order rows: evaluate says that their threshold
is not trained and lists the threshold-free metrics (auc, prbep, ranking metrics) first. A
store whose task or labels do not fit the model is refused (see ``ooc-svm predict --help``).
"""

from __future__ import annotations

import json

EXAMPLES = """\
examples:
  ooc-svm evaluate model test.zarr
  ooc-svm evaluate model a9a.t --json            # SVMlight text, streamed
  ooc-svm evaluate model test.zarr --plot roc.png
  ooc-svm evaluate ranker mq2008-test.zarr --k 10"""


def add_parser(sub) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "evaluate",
        help="accuracy, precision/recall/F1, PRBEP, ROC AUC (binary) or pairwise accuracy, "
        "Kendall tau, NDCG@10 (ranks) of a model on a store",
        description=__doc__.split("\n\n", 1)[1]
        .replace("``", "")
        .replace(" See :mod:`ooc_svm.metrics` for the definitions.", "")
        .replace("**", ""),
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    p.add_argument("model", help="model directory written by `ooc-svm train`")
    p.add_argument("store", help="store, or SVMlight/LIBSVM text file (.gz .bz2 .xz, - for stdin)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the metrics, n_rows and model",
    )
    p.add_argument("--k", type=int, default=10, help="cut-off of NDCG (default 10)")
    p.add_argument(
        "--scheduler",
        default=None,
        help="local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
        "scheduler address tcp://HOST:PORT / scheduler-file.json",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="binary labels: draw the ROC and precision-recall curves (matplotlib)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..evaluation import evaluate_store
    from ..model import load_model
    from ..store.text_view import open_input

    model = load_model(args.model)
    model.info.setdefault("path", args.model)  # named in the --plot title
    store = open_input(args.store, model.n_features)  # a store, or SVMlight text
    res = evaluate_store(model, store, args.k, args.plot, args.scheduler, model_name=args.model)
    if args.json:
        # the metrics and what was scored; nothing that changes between two identical runs
        print(json.dumps({**res, "n_rows": res.get("n"), "model": args.model}))
        return 0
    if res.get("threshold_trained") is False:
        print(
            f"note: {args.model} is a ranking model (loss {model.info.get('loss')}): its "
            "threshold is not trained; accuracy/precision/recall/f1 use f(x) > 0"
        )
    for key, v in res.items():
        if key == "threshold_trained":
            continue
        print(f"{key:18s} {v:.6f}" if isinstance(v, float) else f"{key:18s} {v}")
    return 0
