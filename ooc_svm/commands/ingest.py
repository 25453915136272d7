"""``ooc-svm ingest INPUT... STORE``: SVMlight / LIBSVM text into a sharded store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._util import json_text
from ._common import FLOAT, INT


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "ingest",
        help="convert SVMlight/LIBSVM text into a store",
        formatter_class=HelpFormatter,
        description=(
            "Convert SVMlight/LIBSVM text files into one sharded store (Zarr or Parquet),\n"
            "streaming: memory is bounded by the block and shard sizes, not by the input.\n\n"
            "Lines are 'LABEL [qid:N] INDEX:VALUE ... [# comment]' with 1-based, strictly\n"
            "increasing indices (column j of the store is feature j+1; --zero-based for\n"
            "0-based files). Inputs may be plain, .gz, .bz2 or .xz (detected from the\n"
            "content) or '-' for stdin; rows of several inputs are stored in input order.\n"
            "A bad line stops the ingest with the file, line and fix, and leaves nothing at\n"
            "STORE; --skip-invalid skips such lines instead and reports how many.\n\n"
            "examples:\n"
            "  ooc-svm ingest a9a a9a.zarr\n"
            "  ooc-svm ingest train.txt.xz vali.txt.xz mq2008.parquet\n"
            "  ooc-svm ingest abalone_scale abalone.zarr --label-kind ordinal\n"
            "  ooc-svm ingest url.svm url.zarr --hash-bits 22\n"
            "  zcat big.svm.gz | ooc-svm ingest - big.zarr --shard-mb 128"
        ),
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="SVMlight/LIBSVM text file: plain, .gz, .bz2, .xz, or '-' for stdin",
    )
    p.add_argument(
        "store", metavar="STORE", help="destination store (*.parquet / *.pq: Parquet, else Zarr)"
    )
    _add_options(p, _LAYOUT_OPTIONS)
    _add_options(p.add_mutually_exclusive_group(), _MODE_OPTIONS)
    _add_options(p, _PARSE_OPTIONS)
    from ._common import add_memory

    add_memory(p)
    p.set_defaults(func=run)


def _add_options(p, options: tuple[tuple[str, dict[str, Any]], ...]) -> None:
    from ..store.backends import backend_names

    for flag, keywords in options:
        if flag == "--format":  # the store formats of the registry
            keywords = {**keywords, "choices": backend_names()}
        p.add_argument(flag, **keywords)


#: Options of ``ingest`` (flag, ``add_argument`` keywords) in ``--help`` order: the store's
#: layout, then --append / --overwrite (one of them), then how the text is read.
_LAYOUT_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--format", {"default": None,
                  "help": "store backend (default: parquet for *.parquet / *.pq, else zarr)"}),
    ("--zero-based", {"action": "store_true",
                      "help": "indices in the text start at 0 (default: 1-based)"}),
    ("--shard-rows", {"type": INT, "default": None, "metavar": "N",
                      "help": "at most N rows per shard"}),
    ("--shard-mb", {"type": FLOAT, "default": None, "metavar": "M",
                    "help": "at most M MB of decoded CSR per shard (default 64 unless "
                    "--shard-rows is given; less when the memory budget is small)"}),
)  # fmt: skip
_MODE_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--append", {"action": "store_true",
                  "help": "add the rows to an existing store (new shards; metadata replaced "
                  "atomically)"}),
    ("--overwrite", {"action": "store_true", "help": "replace an existing store"}),
)  # fmt: skip
_PARSE_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--compression", {"choices": ["zstd", "lz4", "none"], "default": None,
                       "help": "shard compression (default lz4 for Zarr, zstd for Parquet; "
                       "--append keeps the store's)"}),
    ("--label-kind", {"choices": ["auto", "binary", "ordinal", "multiclass", "real"],
                      "default": "auto",
                      "help": "label kind (auto: 2 values -> binary; 3+ integers -> ordinal "
                      "(ranks) with qid:, else multiclass (one-vs-rest); other values -> real); "
                      "--label-kind ordinal for ordinal regression without qids"}),
    ("--n-features", {"type": INT, "default": None, "metavar": "N",
                      "help": "declare the number of features (an index beyond it is an "
                      "error)"}),
    ("--hash-bits", {"type": INT, "default": None, "metavar": "B",
                     "help": "hash the features into 2^B columns (signed MurmurHash3_32 of the "
                     "feature number, as scikit-learn's FeatureHasher and Vowpal Wabbit's -b): "
                     "for very wide or open-ended feature spaces; predict/evaluate hash text "
                     "input the same way (docs/WIDTH.md)"}),
    ("--skip-invalid", {"action": "store_true",
                        "help": "skip invalid lines (reported with a count) instead of "
                        "failing"}),
    ("--threads", {"type": INT, "default": None,
                   "help": "parser threads (default: usable CPUs, at most 4)"}),
    ("--block-mb", {"type": FLOAT, "default": None, "help": argparse.SUPPRESS}),
    ("--json", {"action": "store_true", "help": "print the summary as one JSON object"}),
)  # fmt: skip


#: Options passed on to :func:`~ooc_svm.store.ingest.ingest_with_stats` as keywords of the
#: same name.
_PASSED_ON = (
    "format", "zero_based", "shard_rows", "shard_mb", "append", "overwrite", "compression",
    "label_kind", "n_features", "hash_bits", "skip_invalid", "threads",
)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import gc

    from ..memory_budget import current
    from ..progress import Meter, progress_mode
    from ..store.ingest import budget_sizes, ingest_with_stats
    from ._common import apply_memory
    from ._startup import init_numba_target

    apply_memory(args)
    shard_mb, block_mb = budget_sizes(current(), args.threads, args.shard_mb, args.block_mb)
    if args.shard_rows is None:
        args.shard_mb = shard_mb
    init_numba_target()  # before the parser threads start
    inputs, store = args.inputs, args.store
    total = _total_bytes(inputs)
    # Everything imported so far lives until exit: keep it out of the cyclic GC, whose full
    # collections (triggered by the store writer's many small objects) would otherwise walk
    # every module object again and again.
    gc.freeze()
    mode = progress_mode(args)
    bar = Meter("ingest", mode, total=total or None, unit="B")
    try:  # SIGTERM and SIGHUP unwind like Ctrl-C (cli.py): the partial store is removed
        meta, stats = ingest_with_stats(
            inputs,
            store,
            block_mb=block_mb,
            progress=bar.update if mode != "off" else None,
            **{name: getattr(args, name) for name in _PASSED_ON},
        )
    finally:
        bar.close()
    _print_summary(args, store, meta, stats)
    return 0


def _total_bytes(inputs: list[str]) -> int | None:
    """Bytes of all inputs, None when unknown (stdin, a pipe)."""
    import os

    total: int | None = 0
    for path in inputs:
        try:
            size = os.path.getsize(path) if path != "-" and os.path.isfile(path) else None
        except OSError:
            size = None
        if size is None or total is None:
            return None
        total += size
    return total


def _print_summary(args, store: str, meta, stats) -> None:
    """The skip warning, then the summary line (and the label-kind note) or ``--json``."""

    from ..store.format import label_kind_note

    note = label_kind_note(meta)
    if stats.skipped:
        print(f"ooc-svm: warning: {stats.skip_report()}", file=sys.stderr)
    if args.json:
        print(
            json_text(
                {
                    "store": store,
                    "rows": stats.rows,
                    "nnz": stats.nnz,
                    "shards": stats.shards,
                    "seconds": stats.seconds,
                    "text_bytes": stats.text_bytes,
                    "input_bytes": stats.input_bytes,
                    "skipped": stats.skipped,
                    "skipped_examples": stats.skipped_examples,
                    "n_rows": meta.n_rows,
                    "n_features": meta.n_features,
                    "hashing": meta.hashing,
                    "n_shards": meta.n_shards,
                    "label_kind": meta.label_kind,
                    "label_note": note,
                    "has_qid": meta.has_qid,
                    "format": meta.backend,
                }
            )
        )
    elif not getattr(args, "quiet", False):
        print(stats.summary(store))
        if meta.label_kind != "binary":
            print(note)
