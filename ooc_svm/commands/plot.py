"""``ooc-svm plot HISTORY.jsonl -o conv.png``: convergence plot of a training history."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "plot",
        help="plot a training history or a C sweep (needs matplotlib)",
        description="Draw a training history written by `ooc-svm train --history FILE.jsonl`:\n"
        "the certified gap (perf: primal - lower bound; dual solvers: primal - dual) and the\n"
        "stopping quantity (violation) with the solver's tolerance, against passes and\n"
        "seconds, log scale; one line per class for one-vs-rest runs (the worst class when\n"
        "there are many). Quantities the solver did not record are said to be missing.\n"
        "A C sweep table (`train --C 0.01,0.1,1 --validation V --sweep-table t.json`) is\n"
        "drawn as the validation metric and the training objective against C (log x).",
        epilog="example:\n  ooc-svm train --solver perf a9a.zarr -o model --history h.jsonl\n"
        "  ooc-svm plot h.jsonl -o convergence.png\n"
        "  ooc-svm plot sweep.json -o sweep.png",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "history",
        help="JSON-lines history file, or a C sweep table (train --sweep-table FILE.json)",
    )
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        from ..api import history_labels
        from ..evaluation.reports import plot_history, plot_sweep, read_sweep

        sweep = read_sweep(args.history)
        if sweep is not None:
            plot_sweep(sweep, args.output)
        else:
            plot_history(args.history, args.output, history_labels)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("matplotlib"):
            raise OSError("plotting needs matplotlib: pip install 'ooc-svm[plot]'") from None
        raise
    except ValueError as e:
        raise OSError(str(e)) from None
    if not getattr(args, "quiet", False):
        print(f"wrote {args.output}")
    return 0
