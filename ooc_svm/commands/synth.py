"""``ooc-svm synth OUT``: write a synthetic dataset (SVMlight text or a store): RCV1-like, or
shaped like a public benchmark set with ``--like``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._util import json_text
from ._common import FLOAT, INT


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "synth",
        help="generate a synthetic dataset (RCV1-like, or --like a public set's shape)",
        formatter_class=HelpFormatter,
        description=(
            "Generate an RCV1-like sparse dataset: Zipf-like feature popularity, tf-idf-like\n"
            "positive values, L2-normalised rows, labels from a hidden sparse weight vector\n"
            "with label noise. Deterministic by --seed for any --rows, in bounded memory;\n"
            "--split test gives new rows with the same hidden weights as --split train.\n\n"
            "--like rcv1|url|kdd2010|webspam|criteo takes the width, row lengths, value kinds\n"
            "(tf-idf, binary, term counts, counts + one-hot hashed fields), feature popularity\n"
            "and label balance of that public set (docs/CLI.md lists the figures and their\n"
            "sources); --rows scales it, other options override it.\n\n"
            "OUT ending in .zarr / .parquet / .pq (or --format) writes a store; anything else\n"
            "SVMlight text (.gz/.bz2/.xz compressed; '-' for standard output).\n\n"
            "examples: ooc-svm synth train.svm --rows 200000 --features 20000 "
            "--nnz-per-row 40 --seed 1\n"
            "          ooc-svm synth url.zarr --like url --rows 300000 --seed 1"
        ),
    )
    p.add_argument("out", help="output file (SVMlight text), store (.zarr/.parquet/.pq) or '-'")
    from ..store.backends import backend_names

    for flag, options in _OPTIONS:
        if flag == "--format":  # text, or a store format of the registry
            options = {**options, "choices": ["svmlight", *backend_names()]}
        p.add_argument(flag, **options)
    p.set_defaults(func=run)


#: The options of ``synth`` (flag, ``add_argument`` keywords), in ``--help`` order.
_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--rows", {"type": INT, "required": True, "help": "number of rows"}),
    ("--like", {"choices": ["rcv1", "url", "kdd2010", "webspam", "criteo"], "default": None,
                "help": "shape of a public data set: its columns, non-zeros a row, value "
                "kinds, popularity and label balance (explicit options override it)"}),
    ("--features", {"type": INT, "default": None,
                    "help": "number of features (columns); required without --like"}),
    ("--nnz-per-row", {"type": FLOAT, "default": None,
                       "help": "mean non-zeros per row (row lengths vary, at least 1); "
                       "required without --like"}),
    ("--seed", {"type": INT, "required": True, "help": "seed of the whole dataset"}),
    ("--split", {"choices": ["train", "test"], "default": "train",
                 "help": "row stream: test has the same hidden weights, different rows "
                 "(default: train)"}),
    ("--noise", {"type": FLOAT, "default": None,
                 "help": "fraction of labels flipped / replaced by another rank (default "
                 "0.05, or the --like profile's)"}),
    ("--ranks", {"type": INT, "default": None,
                 "help": "ordinal labels 1..R from quantiles of the hidden score"}),
    ("--qid-size", {"type": INT, "default": None,
                    "help": "group consecutive rows into queries of this size (adds qid:; "
                    "ranks become relevance within the query)"}),
    ("--zipf", {"type": FLOAT, "default": None,
                "help": "exponent of the feature popularity law (default 1.0, or the "
                "profile's)"}),
    ("--nnz-spread", {"type": FLOAT, "default": None,
                      "help": "log-sd of the row length (default 0.5, or the profile's; "
                      "0 = nearly constant)"}),
    ("--positive-fraction", {"type": FLOAT, "default": None,
                             "help": "share of positive labels before noise (default 0.4, "
                             "or the profile's)"}),
    ("--w-density", {"type": FLOAT, "default": None,
                     "help": "fraction of features with a non-zero hidden weight (default "
                     "0.1, or the profile's)"}),
    ("--score-noise", {"type": FLOAT, "default": None,
                       "help": "Gaussian noise added to the hidden score, in units of its sd "
                       "(default 0.01)"}),
    ("--format", {"default": None,
                  "help": "output kind (default: from the suffix of OUT)"}),
    ("--store", {"action": "store_true",
                 "help": "write a store even without a .zarr/.parquet suffix (Zarr)"}),
    ("--shard-rows", {"type": INT, "default": None,
                      "help": "rows per store shard (default: about 64 MB of CSR)"}),
    ("--compression", {"choices": ["zstd", "lz4", "none"], "default": None,
                       "help": "store compression (default lz4 for Zarr, zstd for Parquet)"}),
    ("--compress-level", {"type": INT, "default": None,
                          "help": "level of .gz/.bz2/.xz text compression"}),
    ("--threads", {"type": INT, "default": None,
                   "help": "generator threads (default: usable CPUs; output does not depend "
                   "on it)"}),
    ("--block-rows", {"type": INT, "default": None, "help": argparse.SUPPRESS}),
    ("--overwrite", {"action": "store_true", "help": "replace an existing OUT"}),
    ("--json", {"action": "store_true", "help": "print the summary as one JSON object"}),
)  # fmt: skip


#: Options passed on to :func:`ooc_svm.synth.synth` as keywords of the same name.
_PASSED_ON = (
    "like", "split", "shard_rows", "compression", "compress_level", "overwrite", "block_rows",
    "threads",
    "noise", "ranks", "qid_size", "zipf", "nnz_spread", "positive_fraction", "w_density",
    "score_noise",
)  # fmt: skip


def _return_freed_memory() -> None:
    """glibc: serve allocations of 1 MB and more with mmap, so the blocks this command
    allocates and frees by the thousand go back to the OS instead of fragmenting the heap
    (measured: without it the peak RSS of a long store write creeps up by ~shard size every
    million rows; with it it stays flat)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_mmap_threshold = -3
        libc.mallopt(m_mmap_threshold, 1 << 20)
    except (OSError, AttributeError):
        pass


def run(args: argparse.Namespace) -> int:

    from ..progress import Meter, progress_mode
    from ..synth import SynthError, synth
    from ._startup import init_numba_target

    init_numba_target()
    _return_freed_memory()
    fmt = args.format or ("store" if args.store else None)
    summary_stream = sys.stderr if args.out == "-" else sys.stdout
    bar = Meter("synth", progress_mode(args), total=args.rows, unit="rows")
    try:
        s = synth(
            args.out,
            args.rows,
            args.features,
            args.nnz_per_row,
            args.seed,
            format=fmt,
            progress=bar.update,
            **{name: getattr(args, name) for name in _PASSED_ON},
        )
    except SynthError as e:
        bar.close()
        print(f"ooc-svm: error: {e}", file=sys.stderr)
        return 1
    bar.close()
    if args.json:
        print(json_text(s), file=summary_stream)
    elif not getattr(args, "quiet", False):
        mb = s["bytes"] / 1e6
        secs = max(s["seconds"], 1e-9)
        print(
            f"synth: {s['rows']} rows, {s['nnz']} nnz, {mb:.1f} MB ({s['format']}) in "
            f"{s['seconds']:.1f}s ({s['rows'] / secs:,.0f} rows/s, {mb / secs:.1f} MB/s) "
            f"-> {s['path']}",
            file=summary_stream,
        )
    return 0
