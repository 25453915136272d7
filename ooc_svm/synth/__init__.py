"""Synthetic sparse datasets (RCV1-like by default, or shaped like a public set with
``like=``), generated in streamed blocks, deterministic by seed.

What a dataset looks like
-------------------------
* **Features** follow a Zipf–Mandelbrot popularity law: the feature of popularity rank ``r``
  (1-based) is drawn with probability ≈ ∝ ``(r + zipf_offset) ** -zipf`` (exactly: the
  mass of ``[r - 1, r)`` under the density ∝ ``(x + 1 + zipf_offset) ** -zipf`` on
  ``[0, features)``, sampled by closed-form inversion). Ranks are mapped to column indices by
  a random permutation, so popular columns are scattered like in real text data. Each row
  holds distinct column indices drawn without replacement (repeats are rejected), sorted.
* **Row lengths** have mean ``nnz_per_row``: ``1 + floor(L + u)`` with ``L`` log-normal of
  mean ``nnz_per_row - 1`` and log-sd ``nnz_spread`` and ``u`` uniform (stochastic rounding
  keeps the mean exact); capped at ``features``.
* **Values** are tf-idf-like and positive: ``(1 + log tf) * idf`` with a geometric term count
  ``tf`` and ``idf = 1 - log(df)``, ``df`` the probability that a row holds the feature;
  every row is then L2-normalised and stored as float32.
* **Labels** come from a hidden sparse weight vector ``w`` (a fraction ``w_density`` of the
  features get N(0, 1) weights): ``s = x · w + e`` with a small Gaussian ``e`` (sd
  ``score_noise`` times the sd of ``x · w``; it breaks ties). Binary labels are ``+1`` when
  ``s`` exceeds the ``1 - positive_fraction`` quantile of ``s`` (estimated once on a fixed
  pilot sample), else ``-1``, and a fraction ``noise`` of them is flipped. With ``ranks=R``
  labels are ordinal ``1..R`` from the quantiles of ``s`` (``R`` equally populated classes)
  and a fraction ``noise`` is replaced by a different, uniformly drawn rank. With ``qid_size=Q``
  consecutive rows form queries ``qid = row // Q + 1``; ranks are then the relevance *within*
  each query (the ``R`` quantile classes of ``s`` among the query's rows).

Other shapes (``like=`` a profile of :mod:`~ooc_svm.synth.profiles`, or the same fields set
one by one): ``values`` ``binary`` (all 1) or ``tf`` (the geometric term count itself) instead
of tf-idf; ``normalize=False`` keeps the raw values; ``dense_features`` leading columns
outside the popularity law (each in a fraction ``dense_fraction`` of the rows; ``real`` values
in (0, 1) or ``count`` values ln(1 + c)); ``fields`` makes click-log rows: the dense columns,
then one level of every categorical field (levels by a Zipf law of exponent
``field_zipf``), one-hot and hashed into the remaining columns.

Determinism
-----------
The popularity law, the permutation, ``w`` and the label thresholds depend only on the
parameters (``seed``, ``features``, …), never on ``rows`` or on the split. Every row is
generated from its own counter-based random stream (splitmix64 seeded from
``SeedSequence([seed, split])`` and the global row index), so the output does not depend on
the block size, the number of threads or the order in which blocks are processed; the
``train`` and ``test`` splits share ``w`` but have independent rows.

Text output prints every float32 value with the fewest significant digits (6 to 9) that
parse back to the same float32, so ``load_svmlight_file(...).astype(float32)`` equals the
stored data exactly.

Modules: :mod:`~ooc_svm.synth.dataset` (the parameters and what they alone determine),
:mod:`~ooc_svm.synth.stream` (blocks generated in a thread pool, in row order),
:mod:`~ooc_svm.synth.kernels` (numba RNG, rows, labels), :mod:`~ooc_svm.synth.svmlight_text`
(numba text formatting), :mod:`~ooc_svm.synth.profiles` (the public sets' shapes); this
module writes text or a store (:func:`synth`).
"""

from __future__ import annotations

import bz2
import lzma
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._util import cpu_count
from ..store.backends import backends
from ..store.format import Shard
from .dataset import (
    SPLITS,
    SynthError,
    SynthModel,
    SynthSpec,
)
from .profiles import PROFILES, Profile, profile
from .stream import (
    _check_rows,
    _make_spec,
    _ordered_map,
    _ranges,
    _round_to_query,
    default_block_rows,
    default_shard_rows,
    synth_blocks,
    synth_matrix,
)
from .svmlight_text import (
    format_svmlight,
)

__all__ = [
    "PROFILES",
    "Profile",
    "SPLITS",
    "SynthError",
    "SynthModel",
    "SynthSpec",
    "format_svmlight",
    "profile",
    "synth",
    "synth_blocks",
    "synth_matrix",
]


# ----------------------------------------------------------------------------------------
# writing: SVMlight text (optionally compressed) or a store
# ----------------------------------------------------------------------------------------
_TEXT_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}


def _store_suffixes() -> dict[str, str]:
    """Path suffix -> store format, from the store backends' registry."""
    return {s: b.name for b in backends() for s in b.suffixes}


def output_format(out: str, fmt: str | None = None) -> str:
    """``svmlight`` or a store format (``zarr``, ``parquet``, ...): explicit ``fmt``, else
    from the suffix of ``out``."""
    suffix = os.path.splitext(str(out).rstrip("/"))[1].lower()
    if fmt:
        if fmt == "store":
            fmt = _store_suffixes().get(suffix, backends()[0].name)
        formats = ["svmlight", *(b.name for b in backends())]
        if fmt not in formats:
            raise SynthError(
                f"unknown output format {fmt!r}; use {', '.join(formats[:-1])} or {formats[-1]}"
            )
        return fmt
    return _store_suffixes().get(suffix, "svmlight")


def _text_compressor(out: str, level: int | None) -> Callable[[memoryview], bytes] | None:
    kind = _TEXT_COMPRESSION.get(os.path.splitext(str(out))[1].lower())
    if kind == "gzip":
        lv = 6 if level is None else level

        def gz(buf):
            # one gzip member per block (mtime 0: reproducible bytes); readers concatenate them
            c = zlib.compressobj(lv, zlib.DEFLATED, 31)
            return c.compress(buf) + c.flush()

        return gz
    if kind == "bz2":
        lv = 9 if level is None else level
        return lambda buf: bz2.compress(buf, lv)
    if kind == "xz":
        lv = 6 if level is None else level
        return lambda buf: lzma.compress(buf, preset=lv)
    return None


def _path_size(path: str) -> int:
    from ..store.paths import get_fs, is_local, local_path

    if is_local(path):
        p = local_path(path)
        if os.path.isfile(p):
            return os.path.getsize(p)
        total = 0
        for dirpath, _, files in os.walk(p):
            for f in files:
                total += os.path.getsize(os.path.join(dirpath, f))
        return total
    fs, root = get_fs(path)
    return int(fs.du(root))


def synth(
    out: str,
    rows: int,
    features: int | None = None,
    nnz_per_row: float | None = None,
    seed: int | None = None,
    *,
    like: str | None = None,
    split: str = "train",
    format: str | None = None,
    shard_rows: int | None = None,
    compression: str | None = None,
    compress_level: int | None = None,
    overwrite: bool = False,
    block_rows: int | None = None,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> dict:
    """Write a synthetic dataset to ``out`` (SVMlight text or a store), streaming.

    Parameters
    ----------
    out : str
        Destination. ``*.zarr`` / ``*.parquet`` / ``*.pq`` (or ``format``) write a store,
        anything else SVMlight text (``.gz`` / ``.bz2`` / ``.xz`` compressed); ``-`` writes
        text to standard output.
    rows, features, nnz_per_row, seed, like, split, block_rows, threads, **options
        As :func:`synth_blocks` (``like``: a profile of :data:`PROFILES`).
    format : {"svmlight", "zarr", "parquet", "store"}, optional
        Output kind (``store``: Zarr unless the suffix says Parquet).
    shard_rows : int, optional
        Rows per store shard (default: about 64 MB of CSR).
    compression : str
        Store compression (``zstd``, ``lz4``, ``none``; default lz4 for Zarr, zstd for
        Parquet).
    compress_level : int, optional
        Level of text compression (gzip 6, bz2 9, xz 6 by default).
    overwrite : bool
        Replace an existing destination.
    progress : callable, optional
        Called with the number of rows just written.

    Returns
    -------
    dict
        ``path, format, rows, nnz, bytes, seconds`` and the dataset parameters.
    """
    t0 = time.perf_counter()
    rows = _check_rows(rows)
    spec = _make_spec(features, nnz_per_row, seed, like, **options)
    model = SynthModel.get(spec)
    model.keys(split)
    fmt = output_format(out, format)
    threads = threads or cpu_count()
    step = _round_to_query(int(block_rows), spec) if block_rows else default_block_rows(spec)
    params = {"rows": rows, "split": split, **({"like": like} if like else {}), **asdict(spec)}
    job = _Job(out, model, split, rows, step, threads, overwrite, progress)
    if fmt == "svmlight":
        nnz = _write_text(job, compress_level)
    else:
        nnz = _write_store(job, fmt, compression, shard_rows, params)
    seconds = time.perf_counter() - t0
    size = 0 if out == "-" else _path_size(out)
    return {"path": out, "format": fmt, "rows": rows, "nnz": int(nnz), "bytes": size,
            "seconds": seconds, **params}  # fmt: skip


@dataclass
class _Job:
    """What both writers need: destination, generator, row range, block size, threads."""

    out: str
    model: SynthModel
    split: str
    rows: int
    step: int
    threads: int
    overwrite: bool
    progress: Callable[[int], None] | None


def _check_destination(out: str, overwrite: bool) -> None:
    from ..store.paths import get_fs

    fs, root = get_fs(out)
    if fs.exists(root) and not overwrite:
        raise SynthError(f"{out}: destination exists; use --overwrite to replace it")


def _write_text(job: _Job, level: int | None) -> int:
    """SVMlight text to ``job.out`` (a temporary sibling renamed into place), or stdout."""
    import sys

    from ..store.paths import get_fs, is_local, local_path, temp_sibling

    out = job.out
    if out == "-":
        f = sys.stdout.buffer
        nnz = _write_text_blocks(f, job, None)
        f.flush()
        return nnz
    compress = _text_compressor(out, level)
    _check_destination(out, job.overwrite)
    fs, root = get_fs(out)
    tmp = temp_sibling(root, "synth")
    ok = False
    try:
        with fs.open(tmp, "wb") as f:
            nnz = _write_text_blocks(f, job, compress)
        if is_local(out):
            os.replace(local_path(tmp), local_path(out))
        else:
            if fs.exists(root):
                fs.rm(root)
            fs.mv(tmp, root)
        ok = True
    finally:
        if not ok:
            try:
                fs.rm(tmp)
            except (FileNotFoundError, OSError):
                pass
    return nnz


def _write_text_blocks(f, job: _Job, compress: Callable[[memoryview], bytes] | None) -> int:
    """Generate, format (and compress) the rows block by block in threads; write them to
    ``f`` in order. Returns the number of non-zeros."""

    def work(ab):
        blk = job.model.block(job.split, ab[0], ab[1] - ab[0])
        buf = format_svmlight(blk)
        return blk.n_rows, blk.nnz, (compress(buf) if compress else buf)

    nnz = 0
    for n, z, buf in _ordered_map(work, _ranges(0, job.rows, job.step), job.threads):
        f.write(buf)
        nnz += z
        if job.progress:
            job.progress(n)
    return nnz


def _write_store(
    job: _Job, fmt: str, compression: str | None, shard_rows: int | None, params: dict
) -> int:
    import json

    from ..store import StoreWriter

    spec = job.model.spec
    rows, model, split, progress = job.rows, job.model, job.split, job.progress
    _check_destination(job.out, job.overwrite)
    srows = _round_to_query(int(shard_rows), spec) if shard_rows else default_shard_rows(spec)
    step = min(job.step, srows)

    def ranges():
        for a, b in _ranges(0, rows, srows):
            yield from _ranges(a, b, step)

    def work(ab):
        return model.block(split, ab[0], ab[1] - ab[0])

    with StoreWriter(
        job.out,
        backend=fmt,
        compression=compression,
        overwrite=job.overwrite,
        label_kind=spec.label_kind,
        n_features=spec.features,
    ) as w:
        parts: list[Shard] = []
        have = 0
        for blk in _ordered_map(work, ranges(), job.threads):
            parts.append(blk)
            have += blk.n_rows
            if have == srows or blk.row_start + blk.n_rows == rows:
                w.add(_concat(parts), n_features=spec.features)
                parts, have = [], 0
            if progress:
                progress(blk.n_rows)
        w.commit(sources=["synth " + json.dumps(params, sort_keys=True)])
        return w.nnz


def _concat(parts: list[Shard]) -> Shard:
    if len(parts) == 1:
        return parts[0]
    nnz = np.cumsum([0] + [p.nnz for p in parts])
    indptr = np.concatenate(
        [parts[0].indptr[:1]] + [p.indptr[1:] + o for p, o in zip(parts, nnz[:-1], strict=True)]
    )
    qid = np.concatenate([p.qid for p in parts]) if parts[0].qid is not None else None
    return Shard(
        indptr,
        np.concatenate([p.indices for p in parts]),
        np.concatenate([p.data for p in parts]),
        np.concatenate([p.y for p in parts]),
        qid,
        row_start=parts[0].row_start,
    )
