"""``ooc-svm verify STORE``: re-read every shard and check its checksum."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="re-read every shard and check its checksum",
        description="Re-read every shard and check it against the checksum recorded at ingest. "
        "Exits non-zero naming every damaged or missing shard.",
    )
    p.add_argument("store")
    p.set_defaults(func=run)


def run(args) -> int:
    from tqdm import tqdm

    from ..store import ShardCorruptError, open_store

    store = open_store(args.store)
    bad = []
    bar = tqdm(total=store.n_shards, unit="shard", disable=not sys.stderr.isatty())
    for i in range(store.n_shards):
        try:
            store.read_shard(i, verify=True)
        except ShardCorruptError as e:
            bad.append(str(e))
        bar.update(1)
    bar.close()
    if bad:
        for msg in bad:
            print(f"ooc-svm: error: {msg}", file=sys.stderr)
        print(f"ooc-svm: {len(bad)} of {store.n_shards} shards damaged", file=sys.stderr)
        return 1
    print(f"{store.path}: {store.n_shards} shards, {store.meta.n_rows} rows, all checksums OK")
    return 0
