"""``ooc-svm drop STORE (--shards K | --keep-rows N)``: remove a store's oldest shards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._util import json_text

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "drop",
        formatter_class=HelpFormatter,
        epilog="examples:\n  ooc-svm drop train.zarr --shards 1          # the oldest shard"
        "\n  ooc-svm drop train.zarr --keep-rows 1000000  # a window of the newest rows"
        "\n  ooc-svm train train.zarr -o m2 --init m1     # warm, after the drop",
        help="remove a store's oldest shards (a sliding window over appended rows)",
        description="Remove the oldest shards of a store in one atomic step: a reader sees "
        "the store before the drop or after it, never a mix. The kept shards keep their "
        "bytes; their rows are numbered from 0 again. A model trained before the drop still "
        "warm-starts `train --init` (dcd keeps the dual variables of the kept rows, the "
        "kernel solvers their support vectors, perf starts from w). The dropped shards' "
        "files stay for readers that opened the store before, until `ooc-svm verify "
        "--repair` or --purge removes them.",
    )
    p.add_argument("store")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--shards", type=int, metavar="K", help="drop the K oldest shards")
    g.add_argument(
        "--keep-rows",
        type=int,
        metavar="N",
        help="drop the oldest shards while at least N rows are left (whole shards only)",
    )
    p.add_argument(
        "--purge",
        action="store_true",
        help="delete the dropped shards' files now (a reader still on the old table then "
        "fails on them); default: leave them for `ooc-svm verify --repair`",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: store, shards_dropped, rows_dropped, shards_left, "
        "rows_left, files_removed, files_left",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from ..store.drop import drop_oldest

    res = drop_oldest(args.store, shards=args.shards, keep_rows=args.keep_rows, purge=args.purge)
    if args.json:
        print(json_text({"store": args.store, **dataclasses.asdict(res)}))
    elif not getattr(args, "quiet", False):
        if res.shards_dropped == 0:
            print(
                f"{args.store}: nothing dropped ({res.rows_left} rows in {res.shards_left} shards)"
            )
        else:
            tail = ""
            if res.files_left:
                files = "1 shard file" if res.files_left == 1 else f"{res.files_left} shard files"
                tail = (
                    f"; {files} left for readers still open "
                    f"(`ooc-svm verify --repair {args.store}` removes them)"
                )
            print(
                f"{args.store}: dropped {_n(res.shards_dropped)} ({res.rows_dropped} rows); "
                f"{res.rows_left} rows in {_n(res.shards_left)} left{tail}"
            )
    return 0


def _n(k: int) -> str:
    return f"{k} shard" if k == 1 else f"{k} shards"
