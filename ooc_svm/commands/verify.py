"""``ooc-svm verify STORE [--repair]``: re-read and check every shard; list or remove leftovers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .._util import json_text

if TYPE_CHECKING:
    import argparse

#: at most this many damaged shards are named (the count covers all)
MAX_LISTED = 20


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "verify",
        formatter_class=HelpFormatter,
        epilog="examples:\n  ooc-svm verify train.zarr\n  ooc-svm verify train.zarr --repair"
        "\n  ooc-svm verify train.zarr --json",
        help="re-read every shard and check it; --repair removes leftovers of killed writers",
        description="Re-read every shard and check it (sizes, structure, checksum recorded at "
        "ingest). Exits non-zero naming the damaged or missing shards. Also lists what "
        "interrupted writers left behind (hidden .NAME.ingest-* / .NAME.old-* directories, "
        "orphan shard files, half-written metadata, a stale lock); --repair removes them.",
    )
    p.add_argument("store")
    p.add_argument(
        "--repair",
        action="store_true",
        help="remove stale temporary directories, orphan shard files and stale locks",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: store, n_shards, n_rows, n_damaged, damaged, ok, seconds",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from ..progress import Meter, progress_mode
    from ..store import StoreError, open_store
    from ..store.format import StoreChangedError
    from ..store.gc import find_leftovers, remove_leftovers
    from ._common import warn_leftovers
    from ._startup import init_numba_target

    init_numba_target()
    t0 = time.perf_counter()
    quiet = getattr(args, "quiet", False)
    try:
        store = open_store(args.store)
        names: list[str] | None = [s.name for s in store.meta.shards]
    except StoreError:
        if not args.repair:
            raise
        store, names = None, None
    left = find_leftovers(args.store, names)
    if args.repair and left.count:
        n = remove_leftovers(left)
        if not quiet:
            print(f"{args.store}: removed {n} leftover entries ({left.summary().split(':')[0]})")
    warn_leftovers(args.store, left, count=not args.repair)
    if store is None:
        open_store(args.store)  # re-raises the store's own error after the repair
        return 1
    bad: list[str] = []
    bar = Meter("verify", progress_mode(args), total=store.n_shards, unit="shards")
    for i in range(store.n_shards):
        try:
            store.read_shard(i, verify=True)
        except StoreChangedError:
            raise
        except StoreError as e:
            bad.append(str(e))
        bar.update(1)
    bar.close()
    if args.json:
        print(
            json_text(
                {
                    "store": args.store,
                    "n_shards": store.n_shards,
                    "n_rows": store.meta.n_rows,
                    "n_damaged": len(bad),
                    "damaged": bad,
                    "ok": not bad,
                    "seconds": time.perf_counter() - t0,
                }
            )
        )
    if bad:
        for msg in bad[:MAX_LISTED]:
            print(f"ooc-svm: error: {msg}", file=sys.stderr)
        if len(bad) > MAX_LISTED:
            print(f"ooc-svm: ... and {len(bad) - MAX_LISTED} more", file=sys.stderr)
        print(f"ooc-svm: {len(bad)} of {store.n_shards} shards damaged", file=sys.stderr)
        return 1
    if not (args.json or quiet):
        n, rows = store.n_shards, store.meta.n_rows
        print(
            f"{store.path}: {n} shard{'' if n == 1 else 's'}, {rows} row{'' if rows == 1 else 's'}"
            ", all checksums OK"
        )
    return 0
