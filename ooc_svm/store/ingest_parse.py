"""Ingest's parse results: one numba call per block, checked in input order, and the
one-line messages of a bad line (what, where, what to do) or a skipped one.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field

import numpy as np

from . import svmlight as sv
from .format import MAX_FEATURES
from .ingest_input import _Block

#: Lines listed in the report of ``skip_invalid``.
MAX_SKIP_EXAMPLES = 5


@dataclass
class IngestStats:
    """What an ingest did (returned by :func:`ooc_svm.store.ingest.ingest_with_stats`)."""

    rows: int = 0
    nnz: int = 0
    shards: int = 0
    seconds: float = 0.0
    text_bytes: int = 0
    input_bytes: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    #: ``hash_bits``: entries of a row summed because they hashed to one column
    collisions: int = 0
    hash_bits: int | None = None

    def skip_report(self) -> str:
        """``skipped N invalid lines (first: FILE line L: what; ...)``, or "" when none."""
        if not self.skipped:
            return ""
        s = "s" if self.skipped != 1 else ""
        first = "; ".join(self.skipped_examples)
        return f"skipped {self.skipped:,} invalid line{s} (first: {first})"

    def summary(self, store: str) -> str:
        """One line: rows, non-zeros, shards, seconds, throughput."""
        mb = self.text_bytes / 1e6
        rate = mb / self.seconds if self.seconds > 0 else float("inf")
        rows_s = self.rows / self.seconds if self.seconds > 0 else float("inf")
        shards = f"{self.shards} shard{'s' if self.shards != 1 else ''}"
        s = (
            f"ingested {self.rows:,} rows, {self.nnz:,} non-zeros into {shards} "
            f"from {len(self.inputs)} input{'s' if len(self.inputs) != 1 else ''} "
            f"({mb:,.1f} MB of text) in {self.seconds:.2f} s ({rate:,.1f} MB/s, "
            f"{rows_s:,.0f} rows/s) -> {store}"
        )
        if self.hash_bits is not None:
            s += (
                f"; features hashed into 2^{self.hash_bits} columns "
                f"({self.collisions:,} in-row collisions)"
            )
        if self.skipped:
            s += f"; skipped {self.skipped:,} invalid lines"
        return s


# ------------------------------------------------------------------------------------------
# Parsing results
# ------------------------------------------------------------------------------------------
@dataclass
class _Parsed:
    block: _Block
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    fallback: np.ndarray
    skips: np.ndarray
    info: np.ndarray
    qid_state_in: int
    out: tuple  # the output arrays, returned to the pool once copied into a shard


class _OutputPool:
    """Recycles the parser's output arrays (one set per block in flight)."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue = queue.SimpleQueue()

    def get(self, rows: int, nnz: int) -> tuple:
        while True:
            try:
                out = self._free.get_nowait()
            except queue.Empty:
                # a little slack so blocks of about the same size reuse each other's arrays
                return sv.alloc_outputs(rows + rows // 8 + 16, nnz + nnz // 8 + 16)
            if out[3].shape[0] >= rows and out[1].shape[0] >= nnz:
                return out

    def put(self, out: tuple) -> None:
        self._free.put(out)


def _parse(
    block: _Block,
    zero_based: bool,
    col_limit: int,
    qid_state: int,
    skip: bool,
    outputs: _OutputPool,
):
    n_nl, n_colon = sv.count_block(block.buf, block.n)
    out = outputs.get(n_nl + 1, n_colon)
    res = sv.parse_block(
        block.buf,
        block.n,
        zero_based=zero_based,
        col_limit=col_limit,
        qid_state=qid_state,
        skip_invalid=skip,
        max_skip_records=MAX_SKIP_EXAMPLES,
        padded=True,
        out=out,
    )
    indptr, indices, data, labels, qids, fallback, skips, info = res
    return _Parsed(
        block,
        indptr,
        indices,
        data,
        labels,
        qids,
        fallback,
        skips,
        info,
        qid_state_in=qid_state,
        out=out,
    )


def _token(buf, s: int, e: int) -> str:
    raw = bytes(buf[s : min(e, s + 60)])
    text = raw.decode("utf-8", errors="replace")
    return text + ("…" if e - s > 60 else "")


#: Messages of the parser's error codes that need no more than the token ``tok``.
_MESSAGES = {
    sv.E_VALUE: (
        "feature value in {tok!r} is not a number; write INDEX:VALUE with a decimal "
        "VALUE such as 0.25, -3 or 1e-4"
    ),
    sv.E_INDEX: (
        "feature index in {tok!r} is not an integer; write INDEX:VALUE with an integer INDEX"
    ),
    sv.E_INDEX_ZERO: (
        "feature index 0 in {tok!r}, but SVMlight/LIBSVM indices start at 1; if this "
        "file is 0-based, pass --zero-based"
    ),
    sv.E_VALUE_NAN: "feature value in {tok!r} is NaN; replace it by a number or drop the line",
    sv.E_VALUE_INF: (
        "feature value in {tok!r} is infinite or beyond the float32 range (±3.4e38); "
        "rescale the feature or drop the line"
    ),
    sv.E_LABEL_MISSING: (
        "missing label: the line starts with {tok!r}; every line must be "
        "'LABEL [qid:N] INDEX:VALUE ...'"
    ),
    sv.E_LABEL: (
        "label {tok!r} is not a number; the first item of a line must be a numeric "
        "label such as +1, -1, 0, 2 or 0.5"
    ),
    sv.E_LABEL_NAN: "label {tok!r} is NaN; give the line a numeric label or drop it",
    sv.E_LABEL_INF: "label {tok!r} is infinite; give the line a finite label or drop it",
    sv.E_QID: "bad qid {tok!r}; write qid:N with an integer N right after the label",
    sv.E_QID_POS: "{tok!r} must come right after the label, before the features",
    sv.E_NO_COLON: "feature {tok!r} is not INDEX:VALUE",
}


def _describe(code: int, tok: str, extra: int, zero_based: bool, n_features: int | None) -> str:
    """What is wrong and what to do, for an error code of the parser."""
    base = 0 if zero_based else 1
    if code in _MESSAGES:
        return _MESSAGES[code].format(tok=tok)
    if code == sv.E_INDEX_NEG:
        return f"negative feature index in {tok!r}; indices must be >= {base}" + (
            "" if zero_based else " (>= 0 with --zero-based)"
        )
    if code == sv.E_NOT_INCREASING:
        return (
            f"feature indices are not strictly increasing ({extra + base} then {tok!r}); "
            "sort each line's features by index and remove duplicates"
        )
    if code == sv.E_QID_MIXED:
        if extra == 1:
            return (
                "this line has no qid: but earlier lines (or the store appended to) have "
                "one; give every line a qid: or none"
            )
        return (
            "this line has a qid: but earlier lines (or the store appended to) have none; "
            "give every line a qid: or none"
        )
    if code == sv.E_INDEX_LIMIT:
        if n_features is not None and extra < MAX_FEATURES - 1:
            return (
                f"feature index in {tok!r} is beyond --n-features {n_features}; raise "
                "--n-features or drop it"
            )
        return (
            f"feature index in {tok!r} is too large (the largest supported index is "
            f"{MAX_FEATURES - 1 + base})"
        )
    return f"invalid line (parser code {code}) near {tok!r}"


_HINT = "; fix the line or pass --skip-invalid to skip invalid lines"


def _status_error(
    info: np.ndarray,
    buf: np.ndarray,
    offset: int,
    name: str,
    first_line: int,
    zero_based: bool,
    n_features: int | None,
) -> str:
    """``NAME: line L (byte B): what is wrong and what to do`` for a block of text the parser
    stopped in (``info`` from :func:`~.svmlight.parse_block`; ``buf`` the block's text,
    ``offset`` its byte offset in the input, ``first_line`` the number of its first line)."""
    code = int(info[sv.I_STATUS])
    s, e = int(info[sv.I_ERR_START]), int(info[sv.I_ERR_END])
    if code == sv.E_QID_MIXED:
        e = min(e, s + 40)
    tok = _token(buf, s, e)
    what = _describe(code, tok, int(info[sv.I_ERR_EXTRA]), zero_based, n_features)
    return f"{name}: line {first_line + int(info[sv.I_ERR_LINE]):,} (byte {offset + s:,}): {what}"


def _fallback_error(buf, bad: tuple, zero_based: bool, n_features: int | None) -> str:
    """What is wrong with a value :func:`~.svmlight.resolve_fallbacks` found infinite."""
    _slot, _line, code, s, e = bad
    return _describe(code, _token(buf, s, e), 0, zero_based, n_features)


def _note_skip(
    stats: IngestStats, name: str, line: int, code: int, _tok: str, count: bool = True
) -> None:
    if count:
        stats.skipped += 1
    if len(stats.skipped_examples) < MAX_SKIP_EXAMPLES:
        stats.skipped_examples.append(f"{name} line {line:,}: {_SHORT.get(code, 'invalid')}")


_SHORT = {
    sv.E_VALUE: "non-numeric value",
    sv.E_INDEX: "non-integer index",
    sv.E_INDEX_ZERO: "index 0 in a 1-based file",
    sv.E_INDEX_NEG: "negative index",
    sv.E_NOT_INCREASING: "indices not increasing",
    sv.E_VALUE_NAN: "NaN value",
    sv.E_VALUE_INF: "infinite value",
    sv.E_LABEL_MISSING: "missing label",
    sv.E_LABEL: "non-numeric label",
    sv.E_LABEL_NAN: "NaN label",
    sv.E_LABEL_INF: "infinite label",
    sv.E_QID: "bad qid",
    sv.E_QID_POS: "qid: not after the label",
    sv.E_QID_MIXED: "qid: on some lines only",
    sv.E_NO_COLON: "feature not INDEX:VALUE",
    sv.E_INDEX_LIMIT: "index too large",
}


def _drop_rows(indptr, indices, data, labels, qids, n_rows, drop):
    """Remove rows (rare path: values only Python could convert turned out infinite)."""
    keep = np.ones(n_rows, bool)
    keep[drop] = False
    counts = np.diff(indptr[: n_rows + 1])
    entry_keep = np.repeat(keep, counts)
    nnz = int(indptr[n_rows])
    new_indices = indices[:nnz][entry_keep]
    new_data = data[:nnz][entry_keep]
    new_counts = counts[keep]
    new_indptr = np.zeros(new_counts.shape[0] + 1, np.int64)
    np.cumsum(new_counts, out=new_indptr[1:])
    return (
        new_indptr,
        new_indices,
        new_data,
        labels[:n_rows][keep],
        qids[:n_rows][keep],
        int(keep.sum()),
        int(new_indptr[-1]),
    )
