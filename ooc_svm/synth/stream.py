"""Synthetic data streamed in blocks: generated in a thread pool, consumed in row order.

:func:`synth_blocks` yields the shards of a dataset block by block; :func:`synth_matrix`
returns a small one in memory (tests, examples).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._util import cpu_count
from ..store.format import Shard
from .dataset import (
    SynthError,
    SynthModel,
    SynthSpec,
)

#: target bytes of CSR (indices + data + indptr + labels) per store shard
SHARD_BYTES = 64 << 20
#: target non-zeros per generation block
BLOCK_NNZ = 1 << 20


# ----------------------------------------------------------------------------------------
# streaming: blocks in a thread pool, consumed in order
# ----------------------------------------------------------------------------------------
def default_block_rows(spec: SynthSpec) -> int:
    """Rows per generation block (about ``BLOCK_NNZ`` non-zeros, whole queries)."""
    b = max(256, int(BLOCK_NNZ // max(1.0, float(spec.nnz_per_row))))
    return _round_to_query(b, spec)


def default_shard_rows(spec: SynthSpec) -> int:
    """Rows per store shard: about ``SHARD_BYTES`` of CSR, whole queries."""
    per_row = 8.0 * float(spec.nnz_per_row) + 16 + (8 if spec.qid_size else 0)
    return _round_to_query(max(1024, int(SHARD_BYTES // per_row)), spec)


def _round_to_query(n: int, spec: SynthSpec) -> int:
    q = spec.qid_size or 1
    return max(q, (n + q - 1) // q * q)


def _ranges(start: int, stop: int, step: int) -> Iterator[tuple[int, int]]:
    for a in range(start, stop, step):
        yield a, min(stop, a + step)


def _ordered_map(fn: Callable, items, threads: int) -> Iterator:
    """``map(fn, items)`` in order, ``threads`` at a time, bounded look-ahead."""
    items = iter(items)
    if threads <= 1:
        for it in items:
            yield fn(it)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="ooc-svm-synth") as ex:
        pending: deque = deque()
        try:
            for it in items:
                pending.append(ex.submit(fn, it))
                if len(pending) > 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def _make_spec(features, nnz_per_row, seed, like: str | None = None, **options) -> SynthSpec:
    """The spec of explicit options over the profile ``like`` (if any) over the defaults."""
    from .profiles import profile

    opts = {k: v for k, v in options.items() if v is not None}
    if features is not None:
        opts["features"] = int(features)
    if nnz_per_row is not None:
        opts["nnz_per_row"] = float(nnz_per_row)
    if like is not None:
        opts = {**profile(like).spec_options(), **opts}
    for name, flag in (("features", "--features"), ("nnz_per_row", "--nnz-per-row")):
        if name not in opts:
            raise SynthError(f"{flag} is required unless --like names a profile")
    if seed is None:
        raise SynthError("--seed is required (the dataset is defined by it)")
    if "fields" in opts and opts["fields"] is not None:
        opts["fields"] = tuple(int(c) for c in opts["fields"])
    spec = SynthSpec(seed=int(seed), **opts)
    spec.validate()
    return spec


def _check_rows(rows: int) -> int:
    if not (isinstance(rows, int | np.integer) and rows >= 1):
        raise SynthError(f"--rows must be a positive integer; got {rows!r}")
    return int(rows)


def synth_blocks(
    rows: int,
    features: int | None = None,
    nnz_per_row: float | None = None,
    seed: int | None = None,
    *,
    like: str | None = None,
    split: str = "train",
    block_rows: int | None = None,
    threads: int | None = None,
    **options: Any,
) -> Iterator[Shard]:
    """Generate a synthetic dataset as consecutive blocks of rows, without touching disk.

    Parameters
    ----------
    rows, features, nnz_per_row, seed
        Length, width, mean row length and seed of the dataset (width and row length may
        be left out with ``like``; the seed is required).
    like : str, optional
        A profile of :data:`~ooc_svm.synth.profiles.PROFILES` (``rcv1``, ``url``,
        ``kdd2010``, ``webspam``, ``criteo``): its width, row lengths, value kinds,
        popularity and label balance; explicit arguments override it.
    split : {"train", "test"}
        Which row stream (same hidden weights, independent rows).
    block_rows : int, optional
        Rows per yielded block (rounded up to whole queries); the data does not depend on it.
    threads : int, optional
        Generator threads (default: usable CPUs); the data does not depend on it.
    **options
        Further :class:`SynthSpec` fields: ``noise``, ``ranks``, ``qid_size``, ``zipf``,
        ``zipf_offset``, ``nnz_spread``, ``positive_fraction``, ``w_density``, ``tf_decay``,
        ``values``, ``normalize``, ``dense_features``, ``dense_fraction``, ``dense_values``,
        ``fields``, ``field_zipf``.

    Yields
    ------
    Shard
        ``indptr`` (int64), ``indices`` (int32, sorted, 0-based), ``data`` (float32),
        ``y`` (float64: -1/+1 or ranks 1..R), ``qid`` (int64 or None), ``row_start``.
    """
    rows = _check_rows(rows)
    spec = _make_spec(features, nnz_per_row, seed, like, **options)
    model = SynthModel.get(spec)
    model.keys(split)
    step = _round_to_query(int(block_rows), spec) if block_rows else default_block_rows(spec)
    threads = threads or cpu_count()
    yield from _ordered_map(
        lambda ab: model.block(split, ab[0], ab[1] - ab[0]), _ranges(0, rows, step), threads
    )


def synth_matrix(
    rows: int,
    features: int | None = None,
    nnz_per_row: float | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """The whole dataset in memory: ``(X, y, qid)`` with ``X`` a scipy CSR matrix (float32).

    For tests and small benchmarks; keyword arguments as :func:`synth_blocks`.
    """
    import scipy.sparse as sp

    opts = {k: v for k, v in kwargs.items() if k not in ("split", "block_rows", "threads")}
    width = _make_spec(features, nnz_per_row, seed, **opts).features
    blocks = list(synth_blocks(rows, features, nnz_per_row, seed, **kwargs))
    X = sp.vstack([b.to_scipy(int(width)) for b in blocks], format="csr")
    y = np.concatenate([b.y for b in blocks])
    qid = np.concatenate([b.qid for b in blocks]) if blocks[0].qid is not None else None
    return X, y, qid
