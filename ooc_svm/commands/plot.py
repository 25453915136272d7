"""``ooc-svm plot HISTORY.jsonl -o conv.png``: convergence plot of a training history."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="plot a training history (needs matplotlib)",
        description="Draw objective gap and violation against passes and time (log scale) "
        "from a history file written by `ooc-svm train --history FILE.jsonl`.",
    )
    p.add_argument("history", help="JSON-lines history file")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        from ..reports import plot_history

        plot_history(args.history, args.output)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("matplotlib"):
            raise OSError("plotting needs matplotlib: pip install 'ooc-svm[plot]'") from None
        raise
    except ValueError as e:
        raise OSError(str(e)) from None
    print(f"wrote {args.output}")
    return 0
