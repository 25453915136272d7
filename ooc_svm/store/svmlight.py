"""Numba parser for SVMlight / LIBSVM text, one call per block of bytes.

:func:`parse_block` turns a block of complete lines (a ``uint8`` array) into CSR arrays in a
single ``@njit(nogil=True)`` call: int64 ``indptr``, int32 0-based ``indices``, float32
``data``, float64 labels and int64 qids. It never raises: a malformed line comes back as an
error code with the line (relative to the block) and the byte range of the offending token,
and :mod:`ooc_svm.store.ingest` turns that into a message.

Line grammar (what ``sklearn.datasets.load_svmlight_file`` accepts, minus NaN/inf)::

    line    := [ws] label [ws "qid:" int] {ws index ":" value} [ws] ["#" comment]
    label   := decimal number (float64), e.g. +1, -1, 0, 2, 0.5, 1e-3
    index   := ["+"] digits          (1-based unless zero_based)
    value   := decimal number, parsed as float64 then rounded to float32

Whitespace is any of space, tab, CR, VT, FF (so CRLF files parse); ``#`` starts a comment
anywhere on a line; blank and comment-only lines are skipped. Explicit zeros (``5:0``) are
kept as stored entries, as ``load_svmlight_file`` keeps them. Indices must be strictly
increasing within a line.

Number parsing is exact: a decimal string is converted to the correctly rounded float64
(Clinger's fast path for short mantissas, else the Eisel-Lemire algorithm with a 128-bit
table of powers of ten computed here from Python integers), then rounded to float32 for
feature values. So every value equals ``np.float32(float(text))`` bit for bit, which is what
``load_svmlight_file`` produces. The rare strings neither method can decide (more than 19
significant digits right at a rounding boundary, subnormal float64 labels) are returned in
a small "fallback" table and converted by Python's ``float`` afterwards
(:func:`resolve_fallbacks`). The number parsing itself: :mod:`ooc_svm.store.svmlight_numbers`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .svmlight_numbers import (
    _COLON,
    _DOT,
    _HASH,
    _MINUS,
    _NL,
    _NUM_BAD,
    _NUM_FALLBACK,
    _NUM_INF,
    _NUM_NAN,
    _NUM_OK,
    _PLUS,
    _TWO53,
    _UFF,
    EXACT_POW10,
    POW10_INT,
    _decimal_to_double,
    _digit_run,
    _digits_value,
    _parse_number,
    _u,
    _word_at,
)

# ------------------------------------------------------------------------------------------
# Error codes (info[I_STATUS]); 0 = OK.
# ------------------------------------------------------------------------------------------
E_VALUE = 1  # feature value is not a number
E_INDEX = 2  # feature index is not an integer
E_INDEX_ZERO = 3  # index 0 in a 1-based file
E_INDEX_NEG = 4  # negative index
E_NOT_INCREASING = 5  # indices not strictly increasing
E_VALUE_NAN = 6  # feature value NaN
E_VALUE_INF = 7  # feature value infinite or beyond float32 range
E_LABEL_MISSING = 8  # the first token is INDEX:VALUE (or qid:), not a label
E_LABEL = 9  # label is not a number
E_LABEL_NAN = 10
E_LABEL_INF = 11
E_QID = 12  # qid value is not an integer
E_QID_POS = 13  # qid: somewhere else than right after the label
E_QID_MIXED = 14  # some lines have qid:, this one does not (or the other way round)
E_NO_COLON = 15  # feature token without ':'
E_INDEX_LIMIT = 16  # index beyond the declared number of features / int32 range

N_ERROR_CODES = 17
#: internal: the fallback table passed in is full (the wrapper retries with a bigger one)
E_FALLBACK_FULL = 99

#: Layout of the ``info`` array returned by :func:`parse_block`.
I_STATUS = 0  # error code of the first error (0 when none, or when skipped)
I_ROWS = 1  # rows parsed (without skipped lines)
I_NNZ = 2  # stored entries
I_ERR_LINE = 3  # 0-based line within the block of the error
I_ERR_START = 4  # byte range of the offending token within the block
I_ERR_END = 5
I_ERR_EXTRA = 6  # code-specific detail (previous column for E_NOT_INCREASING)
I_QID_STATE = 7  # -1 unknown (no row yet), 0 rows have no qid, 1 rows have qid
I_SKIPPED = 8  # lines skipped (skip_invalid)
I_SKIP_RECORDED = 9  # rows of the ``skips`` table filled in
I_FALLBACK = 10  # rows of the fallback table filled in
I_MAX_COL = 11  # largest column index seen (-1 when none)
I_LINES = 12  # lines in the block (newlines, plus one for a final unterminated line)
N_INFO = 16


#: byte classes for the tokenizer: 0 token byte, 1 blank (space, tab, CR, VT, FF), 2 '#', 3 LF
_CLS = np.zeros(256, np.uint8)
_CLS[[32, 9, 13, 11, 12]] = 1
_CLS[_HASH] = 2
_CLS[_NL] = 3


#: padding the parser may read past the end of the text (set to newlines by the caller)
PAD = 16


@njit(cache=True, nogil=True)
def count_block(buf, n):
    """(newlines, colons) in buf[:n]: bounds on the rows (newlines + 1) and non-zeros."""
    n_nl = 0
    n_colon = 0
    for i in range(n):
        c = buf[i]
        if c == _NL:
            n_nl += 1
        elif c == _COLON:
            n_colon += 1
    return n_nl, n_colon


@njit(cache=True, nogil=True)
def _parse_block(
    buf,
    b64,
    n,
    zero_based,
    col_limit,
    qid_state,
    skip_invalid,
    max_skip_records,
    indptr,
    indices,
    data,
    labels,
    qids,
    fb,
):
    """See :func:`parse_block`.

    One fused pass over the bytes. Feature tokens of the common shape ``123:-0.456`` are
    parsed in a single scan (index digits, colon, value digits); anything else (exponents,
    signs on indices, qid:, errors) takes the general path through :func:`_parse_number`.
    Per-token helper calls that take arrays are avoided: numba reference-counts array
    arguments on every call, which cost more than the parsing itself.
    """
    skips = np.zeros((max_skip_records, 3), np.int64)
    info = np.zeros(N_INFO, np.int64)
    indptr[_u(0)] = 0
    row = 0
    k = 0
    n_fb = 0
    line = 0
    pos = 0
    max_col = -1
    n_skipped = 0
    n_rec = 0
    n_lines = 0
    while pos < n:
        n_lines += 1
        k0 = k
        fb0 = n_fb
        err = 0
        es = 0
        ee = 0
        extra = 0
        is_row = False
        has_qid = False
        row_max = -1
        p = pos
        while p < n and _CLS[buf[_u(p)]] == 1:
            p += 1
        if p < n and _CLS[buf[_u(p)]] == 0:
            is_row = True
            # ---------------- label
            ts = p
            colon = -1
            while p < n and _CLS[buf[_u(p)]] == 0:
                if buf[_u(p)] == _COLON and colon < 0:
                    colon = p
                p += 1
            te = p
            if colon >= 0:
                err = E_LABEL_MISSING
            else:
                st, v = _parse_number(buf, ts, te, False)
                if st == _NUM_BAD:
                    err = E_LABEL
                elif st == _NUM_NAN:
                    err = E_LABEL_NAN
                elif st == _NUM_INF:
                    err = E_LABEL_INF
                elif st == _NUM_FALLBACK:
                    if n_fb == fb.shape[0]:
                        err = E_FALLBACK_FULL
                    else:
                        fb[n_fb, 0] = -(row + 1)
                        fb[n_fb, 1] = ts
                        fb[n_fb, 2] = te
                        fb[n_fb, 3] = line
                        n_fb += 1
                    v = 0.0
                labels[_u(row)] = v
            if err != 0:
                es = ts
                ee = te
            # ---------------- features
            first = True
            prev = -1
            while err == 0:
                while p < n and _CLS[buf[_u(p)]] == 1:
                    p += 1
                if p >= n or _CLS[buf[_u(p)]] != 0:
                    break
                ts = p
                # fast path, 8 bytes at a time (SWAR): up to 7 index digits, ':', ['-'], up
                # to 18 value digits with an optional '.', then a separator; anything
                # else (signs on indices, exponents, qid:, errors) takes the general path
                fast = False
                idx = 0
                ineg = False
                st = _NUM_OK
                v = 0.0
                w = _word_at(b64[_u(p >> 3)], b64[_u((p >> 3) + 1)], p)
                kd = _digit_run(w)
                if 0 < kd < 8 and ((w >> np.uint64(8 * kd)) & _UFF) == _COLON:
                    idx = _digits_value(w, kd)
                    colon = p + kd
                    q = colon + 1
                    vneg = False
                    if buf[_u(q)] == _MINUS:
                        vneg = True
                        q += 1
                    w = _word_at(b64[_u(q >> 3)], b64[_u((q >> 3) + 1)], q)
                    kd = _digit_run(w)
                    man = 0
                    if 0 < kd:
                        man = _digits_value(w, kd)
                    ndig = kd
                    nfrac = 0
                    c = (w >> np.uint64(8 * kd)) & _UFF if kd < 8 else np.uint64(buf[_u(q + 8)])
                    q += kd
                    if kd < 8 and c == _DOT:
                        q += 1
                        w = _word_at(b64[_u(q >> 3)], b64[_u((q >> 3) + 1)], q)
                        kd = _digit_run(w)
                        if kd > 0:
                            man = man * POW10_INT[kd] + _digits_value(w, kd)
                        nfrac = kd
                        q += kd
                        while kd == 8 and nfrac <= 16:
                            w = _word_at(b64[_u(q >> 3)], b64[_u((q >> 3) + 1)], q)
                            kd = _digit_run(w)
                            if kd > 0:
                                man = man * POW10_INT[kd] + _digits_value(w, kd)
                            nfrac += kd
                            q += kd
                        ndig += nfrac
                    if 0 < ndig <= 18 and _CLS[buf[_u(q)]] != 0:
                        fast = True
                        te = q
                        p = q
                        if man == 0:
                            v = 0.0
                        elif nfrac == 0:
                            v = np.float64(man)
                        elif man <= _TWO53 and nfrac <= 22:
                            v = np.float64(man) / EXACT_POW10[nfrac]  # exact: Clinger
                        else:
                            st, v = _decimal_to_double(man, -nfrac, False, True)
                        if vneg:
                            v = -v
                    else:
                        idx = 0
                if not fast:
                    # general path
                    colon = -1
                    while p < n and _CLS[buf[_u(p)]] == 0:
                        if buf[_u(p)] == _COLON and colon < 0:
                            colon = p
                        p += 1
                    te = p
                    is_qid = te - ts >= 3 and buf[_u(ts)] == 113 and buf[_u(ts + 1)] == 105
                    if is_qid and buf[_u(ts + 2)] == 100:
                        # "qid" -> qid:N, only right after the label
                        if not first:
                            err = E_QID_POS
                            break
                        first = False
                        if colon != ts + 3:
                            err = E_QID
                            break
                        q = ts + 4
                        qneg = False
                        if q < te and (buf[_u(q)] == _PLUS or buf[_u(q)] == _MINUS):
                            qneg = buf[_u(q)] == _MINUS
                            q += 1
                        if q >= te or te - q > 18:
                            err = E_QID
                            break
                        qv = 0
                        while q < te:
                            d = int(buf[_u(q)]) - 48
                            if d < 0 or d > 9:
                                break
                            qv = qv * 10 + d
                            q += 1
                        if q != te:
                            err = E_QID
                            break
                        qids[_u(row)] = -qv if qneg else qv
                        has_qid = True
                        continue
                    if colon < 0:
                        err = E_NO_COLON
                        break
                    q = ts
                    if buf[_u(q)] == _PLUS or buf[_u(q)] == _MINUS:
                        ineg = buf[_u(q)] == _MINUS
                        q += 1
                    if q >= colon:
                        err = E_INDEX
                        break
                    idx = 0
                    while q < colon:
                        d = int(buf[_u(q)]) - 48
                        if d < 0 or d > 9:
                            break
                        if idx < (1 << 40):
                            idx = idx * 10 + d
                        q += 1
                    if q != colon:
                        err = E_INDEX
                        break
                    st, v = _parse_number(buf, colon + 1, te, True)
                first = False
                # checks shared by both paths
                if ineg and idx != 0:
                    err = E_INDEX_NEG
                    break
                if zero_based:
                    col = idx
                elif idx == 0:
                    err = E_INDEX_ZERO
                    break
                else:
                    col = idx - 1
                if col <= prev:
                    err = E_NOT_INCREASING
                    extra = prev
                    break
                if col >= col_limit:
                    err = E_INDEX_LIMIT
                    extra = col
                    break
                if st != _NUM_OK:
                    if st == _NUM_BAD:
                        err = E_VALUE
                        break
                    if st == _NUM_NAN:
                        err = E_VALUE_NAN
                        break
                    if st == _NUM_INF:
                        err = E_VALUE_INF
                        break
                    # _NUM_FALLBACK: Python converts it after the kernel
                    if n_fb == fb.shape[0]:
                        err = E_FALLBACK_FULL
                        break
                    fb[n_fb, 0] = k
                    fb[n_fb, 1] = colon + 1
                    fb[n_fb, 2] = te
                    fb[n_fb, 3] = line
                    n_fb += 1
                    v = 0.0
                v32 = np.float32(v)
                if np.isinf(v32):
                    err = E_VALUE_INF
                    break
                indices[_u(k)] = col
                data[_u(k)] = v32
                k += 1
                prev = col
            if err != 0:
                es = ts
                ee = te
            row_max = prev
        eol = p
        while eol < n and buf[_u(eol)] != _NL:
            eol += 1
        if err == 0 and is_row:
            hq = 1 if has_qid else 0
            if qid_state == -1:
                qid_state = hq
            elif qid_state != hq:
                err = E_QID_MIXED
                es = pos
                ee = eol
                extra = qid_state
        if err != 0:
            if not skip_invalid or err == E_FALLBACK_FULL:
                info[I_STATUS] = err
                info[I_ERR_LINE] = line
                info[I_ERR_START] = es
                info[I_ERR_END] = ee
                info[I_ERR_EXTRA] = extra
                info[I_ROWS] = row
                info[I_NNZ] = k0
                info[I_FALLBACK] = fb0
                info[I_QID_STATE] = qid_state
                info[I_MAX_COL] = max_col
                info[I_LINES] = n_lines
                return skips, info
            k = k0
            n_fb = fb0
            n_skipped += 1
            if n_rec < max_skip_records:
                skips[n_rec, 0] = line
                skips[n_rec, 1] = err
                skips[n_rec, 2] = es
                n_rec += 1
        elif is_row:
            if row_max > max_col:
                max_col = row_max
            indptr[_u(row + 1)] = k
            row += 1
        pos = eol + 1
        line += 1
    info[I_ROWS] = row
    info[I_NNZ] = k
    info[I_QID_STATE] = qid_state
    info[I_SKIPPED] = n_skipped
    info[I_SKIP_RECORDED] = n_rec
    info[I_FALLBACK] = n_fb
    info[I_MAX_COL] = max_col
    info[I_LINES] = n_lines
    return skips, info


def parse_block(
    buf: np.ndarray,
    n: int | None = None,
    *,
    zero_based: bool = False,
    col_limit: int = 1 << 31,
    qid_state: int = -1,
    skip_invalid: bool = False,
    max_skip_records: int = 8,
    padded: bool = False,
    out: tuple | None = None,
) -> tuple:
    """Parse complete lines of SVMlight text into CSR arrays (one numba call, no GIL).

    Parameters
    ----------
    buf : ndarray of uint8
        The text. Only ``buf[:n]`` is read; it should end at a line end (or end of input).
    n : int, optional
        Number of bytes to parse (default ``buf.size``).
    zero_based : bool
        Indices in the text are 0-based (default: 1-based, column = index - 1).
    col_limit : int
        Columns must be below this (the declared number of features, at most 2**31).
    qid_state : int
        -1: decide from the first row whether rows carry ``qid:``; 0 / 1: rows must not /
        must carry it (a line that differs is an ``E_QID_MIXED`` error).
    skip_invalid : bool
        Skip malformed lines (counted, the first ``max_skip_records`` recorded) instead of
        stopping at the first one.
    max_skip_records : int
        Size of the table of skipped lines.
    padded : bool
        ``buf`` is 8-byte aligned and has at least :data:`PAD` spare bytes after ``n`` that
        the parser may overwrite (the fast path reads 8 bytes at a time); otherwise the text
        is copied into such a buffer first.
    out : tuple of arrays, optional
        Output arrays (indptr, indices, data, labels, qids) to fill, e.g. from
        :func:`alloc_outputs`, with room for ``newlines + 1`` rows and ``colons`` entries
        (see :func:`count_block`); default: allocated here.

    Returns
    -------
    indptr, indices, data, labels, qids : ndarrays
        Over-allocated; the first ``info[I_ROWS]`` rows / ``info[I_NNZ]`` entries are valid
        (``qids`` only meaningful when ``info[I_QID_STATE] == 1``).
    fallback : ndarray of int64, shape (m, 4)
        First ``info[I_FALLBACK]`` rows: (slot, start, end, line) of numbers left for
        :func:`resolve_fallbacks`; slot >= 0 is an entry of ``data``, slot < 0 the label of
        row ``-slot - 1``.
    skips : ndarray of int64, shape (max_skip_records, 3)
        (line, error code, byte offset of the bad token) of the first skipped lines.
    info : ndarray of int64
        See the ``I_*`` constants; ``info[I_STATUS]`` is the error code (0 when fine).
    """
    n = int(buf.shape[0]) if n is None else int(n)
    buf = _padded_text(buf, n, padded)
    if out is None:
        n_nl, n_colon = count_block(buf, n)
        out = alloc_outputs(n_nl + 1, n_colon)
    indptr, indices, data, labels, qids = out
    words = buf[: (buf.shape[0] // 8) * 8].view(np.uint64)
    fb_rows = 1024
    while True:
        fb = np.empty((fb_rows, 4), np.int64)
        skips, info = _parse_block(
            buf, words, n, bool(zero_based), int(col_limit), int(qid_state), bool(skip_invalid),
            int(max(1, max_skip_records)), indptr, indices, data, labels, qids, fb,
        )  # fmt: skip
        if info[I_STATUS] != E_FALLBACK_FULL:
            return indptr, indices, data, labels, qids, fb, skips, info
        fb_rows *= 16  # rare: many numbers only Python's float can convert; parse again


def _padded_text(buf: np.ndarray, n: int, padded: bool) -> np.ndarray:
    """``buf`` (or, unless ``padded``, a copy of ``buf[:n]``) checked to be 8-byte aligned
    with :data:`PAD` spare bytes after the text, which are set to newlines."""
    if not padded:
        tmp = np.empty(n + PAD + 8, np.uint8)
        tmp[:n] = buf[:n]
        buf = tmp
    m = (buf.shape[0] // 8) * 8
    if m < n + PAD or buf.ctypes.data % 8:
        raise ValueError(
            "parse_block needs PAD spare bytes after the text and an 8-byte "
            "aligned buffer (or padded=False)"
        )
    buf[n : n + PAD] = _NL
    return buf


def alloc_outputs(max_rows: int, max_nnz: int) -> tuple[np.ndarray, ...]:
    """Output arrays for :func:`parse_block`: indptr, indices, data, labels, qids."""
    return (
        np.empty(max_rows + 1, np.int64),
        np.empty(max_nnz, np.int32),
        np.empty(max_nnz, np.float32),
        np.empty(max_rows, np.float64),
        np.empty(max_rows, np.int64),
    )


@njit(cache=True, nogil=True)
def rfind_newline(buf, end):
    """Index of the last newline in buf[:end], or -1."""
    for i in range(end - 1, -1, -1):
        if buf[i] == _NL:
            return i
    return -1


def resolve_fallbacks(
    buf: np.ndarray, fallback: np.ndarray, n_fallback: int, data: np.ndarray, labels: np.ndarray
) -> list[tuple[int, int, int, int, int]]:
    """Convert the numbers the kernel left undecided with Python's ``float``.

    Returns a list of ``(slot, line, code)`` for values that turn out infinite (code
    ``E_VALUE_INF`` / ``E_LABEL_INF``); the caller reports or skips those lines.
    """
    bad = []
    for i in range(int(n_fallback)):
        slot, s, e, line = (int(x) for x in fallback[i])
        v = float(bytes(buf[s:e]))
        if slot >= 0:
            with np.errstate(over="ignore"):
                v32 = np.float32(v)
            if not np.isfinite(v32):
                bad.append((slot, line, E_VALUE_INF, s, e))
            data[slot] = v32
        else:
            if not math.isfinite(v):
                bad.append((slot, line, E_LABEL_INF, s, e))
            labels[-slot - 1] = v
    return bad
