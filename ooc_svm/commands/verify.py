"""``ooc-svm verify STORE [--repair]``: re-read and check every shard; list or remove leftovers."""

from __future__ import annotations

import sys

#: at most this many damaged shards are named (the count covers all)
MAX_LISTED = 20


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify",
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
    p.set_defaults(func=run)


def run(args) -> int:
    from tqdm import tqdm

    from ..store import StoreError, open_store
    from ..store.format import StoreChangedError
    from ..store.gc import find_leftovers, remove_leftovers

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
        print(f"{args.store}: removed {n} leftover entries ({left.summary().split(':')[0]})")
    elif left.count:
        print(f"ooc-svm: warning: {args.store}: {left.summary()}", file=sys.stderr)
    if left.busy:
        print(f"ooc-svm: note: {args.store} is being written by {left.busy}", file=sys.stderr)
    if store is None:
        open_store(args.store)  # re-raises the store's own error after the repair
        return 1
    bad: list[str] = []
    bar = tqdm(total=store.n_shards, unit="shard", disable=not sys.stderr.isatty())
    for i in range(store.n_shards):
        try:
            store.read_shard(i, verify=True)
        except StoreChangedError:
            raise
        except StoreError as e:
            bad.append(str(e))
        bar.update(1)
    bar.close()
    if bad:
        for msg in bad[:MAX_LISTED]:
            print(f"ooc-svm: error: {msg}", file=sys.stderr)
        if len(bad) > MAX_LISTED:
            print(f"ooc-svm: ... and {len(bad) - MAX_LISTED} more", file=sys.stderr)
        print(f"ooc-svm: {len(bad)} of {store.n_shards} shards damaged", file=sys.stderr)
        return 1
    print(f"{store.path}: {store.n_shards} shards, {store.meta.n_rows} rows, all checksums OK")
    return 0
