"""``ooc-svm info STORE``: what a store holds."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from .._util import json_text

if TYPE_CHECKING:
    import argparse

    from ..store.base import Store


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "info",
        help="show a store's metadata",
        description="Show a store's metadata (rows, features, non-zeros, shards, labels), or "
        "describe a model directory (kind, solver, C, features, support vectors, objective, "
        "training store).",
        epilog="examples:\n  ooc-svm info train.zarr\n  ooc-svm info train.zarr --json --shards"
        "\n  ooc-svm info model",
        formatter_class=HelpFormatter,
    )
    p.add_argument("store", help="store path (Zarr or Parquet directory), or a model directory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--shards", action="store_true", help="also list the shard table")
    p.set_defaults(func=run)


def store_summary(store: Store) -> dict:
    m = store.meta
    return {
        "path": store.path,
        "format": m.backend,
        "version": m.version,
        "n_rows": m.n_rows,
        "n_features": m.n_features,
        "nnz": m.nnz,
        "n_shards": m.n_shards,
        "label_kind": m.label_kind,
        "labels": m.labels,
        "has_qid": m.has_qid,
        "compression": m.compression,
        "sources": m.sources,
        "hashing": m.hashing,
    }


def _hashing_line(h) -> str:
    """``info``'s hashing line: B, the hash and the collisions (entries summed in rows)."""
    return (
        f"--hash-bits {h['bits']} (2^{h['bits']} columns, signed {h['hash']} of the feature "
        f"number), {h['collisions']:,} in-row collisions (entries summed)"
    )


def run(args: argparse.Namespace) -> int:
    if os.path.isfile(os.path.join(str(args.store), "model.json")):  # `ooc-svm info MODEL`
        # (interop.describe.is_model_dir; interop imports scipy, which a store never needs)
        from ..interop.describe import print_model_info

        return print_model_info(args.store, args.json)

    from ..store import open_store
    from ..store.format import label_kind_note
    from ..store.gc import find_leftovers
    from ._common import warn_leftovers

    store = open_store(args.store)
    d = store_summary(store)
    d["label_note"] = label_kind_note(store.meta)
    left = find_leftovers(store.path, [s.name for s in store.meta.shards])
    d["leftovers"] = left.to_dict() if left.count else None
    if args.shards:
        d["shards"] = [dataclasses.asdict(s) for s in store.meta.shards]
    if args.json:
        print(json_text(d))
        return 0
    for k, v in d.items():
        if k == "labels" and v is not None and len(v) > 20:
            v = f"{v[:20]} … ({len(v)} values)"
        if k in ("shards", "label_note", "leftovers"):
            continue
        if k == "hashing":
            if not v:
                continue
            v = _hashing_line(v)
        print(f"{k:12s} {v}")
    print(d["label_note"])
    warn_leftovers(store.path, left)
    if args.shards:
        for s in store.meta.shards:
            print(
                f"  {s.name} row_start={s.row_start} n_rows={s.n_rows} nnz={s.nnz} crc={s.checksum}"
            )
    return 0
