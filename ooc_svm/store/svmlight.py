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
(:func:`resolve_fallbacks`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

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

# Status of _parse_number
_NUM_OK = 0
_NUM_BAD = 1
_NUM_NAN = 2
_NUM_INF = 3
_NUM_FALLBACK = 4

# byte values
_NL = 10
_COLON = 58
_HASH = 35
_PLUS = 43
_MINUS = 45
_DOT = 46

# ------------------------------------------------------------------------------------------
# Tables for exact decimal -> float64 conversion
# ------------------------------------------------------------------------------------------
POW10_MIN = -342
POW10_MAX = 308


def _pow10_table() -> tuple[np.ndarray, np.ndarray]:
    """128-bit truncated mantissas of 10**q, q in [POW10_MIN, POW10_MAX].

    Entry q is ``floor(10**q * 2**(127 - floor(log2(10**q))))``, a 128-bit integer with its
    top bit set, split into high and low 64-bit words.
    """
    hi = np.empty(POW10_MAX - POW10_MIN + 1, np.uint64)
    lo = np.empty_like(hi)
    mask = (1 << 64) - 1
    for i, q in enumerate(range(POW10_MIN, POW10_MAX + 1)):
        if q >= 0:
            v = 10**q
            b = v.bit_length()
            m = v << (128 - b) if b <= 128 else v >> (b - 128)
            e2 = b - 1  # floor(log2(10**q))
        else:
            v = 10 ** (-q)
            b = v.bit_length()
            m = (1 << (127 + b)) // v
            e2 = -b  # floor(log2(10**q)), 10**-q is never a power of two
        # the exponent formula used by _eisel_lemire must agree with the table
        if (217706 * q) >> 16 != e2:
            raise AssertionError(f"log2 approximation fails at 10**{q}")
        assert m >> 127 == 1
        hi[i] = (m >> 64) & mask
        lo[i] = m & mask
    return hi, lo


POW10_HI, POW10_LO = _pow10_table()
#: exact float64 powers of ten for Clinger's fast path
EXACT_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U3 = np.uint64(3)
_U9 = np.uint64(9)
_U32 = np.uint64(32)
_U53 = np.uint64(53)
_U63 = np.uint64(63)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK9 = np.uint64(0x1FF)
_UMAX = np.uint64(0xFFFFFFFFFFFFFFFF)
_TWO53 = 1 << 53


@njit(cache=True, nogil=True)
def _mul64(a, b):
    """Full 128-bit product of two uint64 as (hi, lo)."""
    a_lo = a & _MASK32
    a_hi = a >> _U32
    b_lo = b & _MASK32
    b_hi = b >> _U32
    p0 = a_lo * b_lo
    p1 = a_lo * b_hi
    p2 = a_hi * b_lo
    p3 = a_hi * b_hi
    mid = (p0 >> _U32) + (p1 & _MASK32) + (p2 & _MASK32)
    lo = (p0 & _MASK32) | (mid << _U32)
    hi = p3 + (p1 >> _U32) + (p2 >> _U32) + (mid >> _U32)
    return hi, lo


@njit(cache=True, nogil=True)
def _clz64(x):
    """Leading zero bits of a non-zero uint64."""
    n = 0
    if (x >> np.uint64(32)) == _U0:
        n += 32
        x = x << np.uint64(32)
    if (x >> np.uint64(48)) == _U0:
        n += 16
        x = x << np.uint64(16)
    if (x >> np.uint64(56)) == _U0:
        n += 8
        x = x << np.uint64(8)
    if (x >> np.uint64(60)) == _U0:
        n += 4
        x = x << np.uint64(4)
    if (x >> np.uint64(62)) == _U0:
        n += 2
        x = x << np.uint64(2)
    if (x >> _U63) == _U0:
        n += 1
    return n


@njit(cache=True, nogil=True)
def _eisel_lemire(man, exp10):
    """Correctly rounded float64 of ``man * 10**exp10`` (uint64 man > 0), or (False, 0.0).

    Eisel-Lemire (Lemire, "Number parsing at a gigabyte per second", 2021). Gives up on
    results that are subnormal or overflow and on the rare products too close to a halfway
    point for the 128-bit approximation to decide. The tables are module globals, which
    numba freezes into the compiled code (no reference counting on the hot path).
    """
    if exp10 < POW10_MIN or exp10 > POW10_MAX:
        return False, 0.0
    clz = _clz64(man)
    man = man << np.uint64(clz)
    ret_exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz
    t_hi = POW10_HI[exp10 - POW10_MIN]
    t_lo = POW10_LO[exp10 - POW10_MIN]
    x_hi, x_lo = _mul64(man, t_hi)
    if (x_hi & _MASK9) == _MASK9 and (x_lo + man) < man:
        y_hi, y_lo = _mul64(man, t_lo)
        merged_hi = x_hi
        merged_lo = x_lo + y_hi
        if merged_lo < x_lo:
            merged_hi = merged_hi + _U1
        if (merged_hi & _MASK9) == _MASK9 and merged_lo == _UMAX and (y_lo + man) < man:
            return False, 0.0
        x_hi = merged_hi
        x_lo = merged_lo
    msb = x_hi >> _U63
    ret_man = x_hi >> (msb + _U9)
    ret_exp2 -= 1 - np.int64(msb)
    if x_lo == _U0 and (x_hi & _MASK9) == _U0 and (ret_man & _U3) == _U1:
        return False, 0.0
    ret_man = ret_man + (ret_man & _U1)
    ret_man = ret_man >> _U1
    if (ret_man >> _U53) > _U0:
        ret_man = ret_man >> _U1
        ret_exp2 += 1
    if ret_exp2 <= 0 or ret_exp2 >= 0x7FF:
        return False, 0.0
    return True, math.ldexp(np.float64(ret_man), ret_exp2 - 1075)


@njit(cache=True, nogil=True)
def _decimal_to_double(man, exp10, truncated, f32):
    """Value of ``man * 10**exp10`` (0 < man < 10**18); status as in :func:`_parse_number`.

    ``truncated``: digits beyond the 18th were dropped (the value lies in
    [man, man + 1) * 10**exp10). With ``f32`` the caller rounds to float32, so values below
    1e-50 are 0 and values of 1e40 or more are infinite without exact conversion.
    """
    if f32:
        if exp10 + 18 < -50:
            return _NUM_OK, 0.0
        if exp10 > 39:
            return _NUM_INF, np.inf
    else:
        if exp10 < POW10_MIN:
            return _NUM_OK, 0.0
        if exp10 > POW10_MAX:
            return _NUM_INF, np.inf
    if not truncated and man > _TWO53:
        # "2123530481172480.0": drop trailing zeros so the exact fast path applies
        while man % 10 == 0:
            man = man // 10
            exp10 += 1
    if not truncated and man <= _TWO53 and -22 <= exp10 <= 22:
        # Clinger's fast path: both operands exact, one correctly rounded operation
        if exp10 >= 0:
            return _NUM_OK, np.float64(man) * EXACT_POW10[exp10]
        return _NUM_OK, np.float64(man) / EXACT_POW10[-exp10]
    ok, v = _eisel_lemire(np.uint64(man), exp10)
    if ok and truncated:
        ok2, v2 = _eisel_lemire(np.uint64(man + 1), exp10)
        ok = ok2 and v2 == v
    if not ok:
        return _NUM_FALLBACK, 0.0
    return _NUM_OK, v


@njit(cache=True, nogil=True)
def _lower(c):
    return c | 32 if 65 <= c <= 90 else c


@njit(cache=True, nogil=True)
def _special_word(buf, p, e):
    """buf[p:e] is "nan" (-> _NUM_NAN), "inf"/"infinity" (-> _NUM_INF) or neither."""
    m = e - p
    if m == 3:
        a, b, c = _lower(buf[p]), _lower(buf[p + 1]), _lower(buf[p + 2])
        if a == 110 and b == 97 and c == 110:
            return _NUM_NAN
        if a == 105 and b == 110 and c == 102:
            return _NUM_INF
    if m == 8:
        word = (105, 110, 102, 105, 110, 105, 116, 121)  # "infinity"
        for j in range(8):
            if _lower(buf[p + j]) != word[j]:
                return _NUM_BAD
        return _NUM_INF
    return _NUM_BAD


@njit(cache=True, nogil=True, inline="always")
def _parse_number(buf, s, e, f32):
    """Parse buf[s:e] as a decimal number the way Python's ``float`` does.

    Returns (status, value) with status _NUM_OK, _NUM_BAD (not a number), _NUM_NAN,
    _NUM_INF (infinite, or beyond float32 range with ``f32``) or _NUM_FALLBACK (exact value
    undecided here: convert with Python's ``float``). Digit separators ("1_000") are not
    accepted.
    """
    p = s
    neg = False
    if p < e and (buf[p] == _PLUS or buf[p] == _MINUS):
        neg = buf[p] == _MINUS
        p += 1
    if p >= e:
        return _NUM_BAD, 0.0
    if buf[p] > 57:  # letters
        st = _special_word(buf, p, e)
        if st == _NUM_NAN:
            return st, np.nan
        if st == _NUM_INF:
            return st, -np.inf if neg else np.inf
        return _NUM_BAD, 0.0
    man = 0
    nsig = 0
    ndig = 0
    exp10 = 0
    truncated = False
    while p < e:
        d = int(buf[p]) - 48
        if d < 0 or d > 9:
            break
        ndig += 1
        if nsig == 0 and d == 0:
            pass
        elif nsig < 18:
            man = man * 10 + d
            nsig += 1
        else:
            exp10 += 1
            if d != 0:
                truncated = True
        p += 1
    if p < e and buf[p] == _DOT:
        p += 1
        while p < e:
            d = int(buf[p]) - 48
            if d < 0 or d > 9:
                break
            ndig += 1
            if nsig == 0 and d == 0:
                exp10 -= 1
            elif nsig < 18:
                man = man * 10 + d
                nsig += 1
                exp10 -= 1
            elif d != 0:
                truncated = True
            p += 1
    if ndig == 0:
        return _NUM_BAD, 0.0
    if p < e and (buf[p] == 101 or buf[p] == 69):  # e / E
        p += 1
        eneg = False
        if p < e and (buf[p] == _PLUS or buf[p] == _MINUS):
            eneg = buf[p] == _MINUS
            p += 1
        ev = 0
        nd = 0
        while p < e:
            d = int(buf[p]) - 48
            if d < 0 or d > 9:
                break
            if ev < 100000:
                ev = ev * 10 + d
            nd += 1
            p += 1
        if nd == 0:
            return _NUM_BAD, 0.0
        exp10 += -ev if eneg else ev
    if p != e:
        return _NUM_BAD, 0.0
    if man == 0:
        return _NUM_OK, -0.0 if neg else 0.0
    if not truncated and exp10 == 0:  # integers such as labels and "1" values
        return _NUM_OK, -np.float64(man) if neg else np.float64(man)
    st, v = _decimal_to_double(man, exp10, truncated, f32)
    return st, -v if neg else v


#: byte classes for the tokenizer: 0 token byte, 1 blank (space, tab, CR, VT, FF), 2 '#', 3 LF
_CLS = np.zeros(256, np.uint8)
_CLS[[32, 9, 13, 11, 12]] = 1
_CLS[_HASH] = 2
_CLS[_NL] = 3


#: padding the parser may read past the end of the text (set to newlines by the caller)
PAD = 16

_M7F = np.uint64(0x7F7F7F7F7F7F7F7F)
_M80 = np.uint64(0x8080808080808080)
_C46 = np.uint64(0x4646464646464646)
_C50 = np.uint64(0x5050505050505050)
_M0F = np.uint64(0x0F0F0F0F0F0F0F0F)
_M00FF = np.uint64(0x00FF00FF00FF00FF)
_M0000FFFF = np.uint64(0x0000FFFF0000FFFF)
_MUL1 = np.uint64(2561)
_MUL2 = np.uint64(6553601)
_MUL3 = np.uint64(42949672960001)
_U7 = np.uint64(7)
_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U56 = np.uint64(56)
_UFF = np.uint64(0xFF)
#: 10**k as int64, k = 0..18
POW10_INT = np.array([10**k for k in range(19)], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _u(i):
    """An index as uint64: numba then skips the negative-index wrap-around code on every
    array access (about 20% of the parser's time); all indices here are non-negative."""
    return np.uint64(i)


@njit(cache=True, nogil=True, inline="always")
def _word_at(lo, hi, q):
    """The 8 bytes at offset q from the two aligned words around it (little-endian).

    The caller loads ``lo = b64[q >> 3]`` and ``hi = b64[(q >> 3) + 1]`` itself: a helper
    taking the array would cost an atomic reference count increment and decrement per call.
    """
    sh = np.uint64(q & 7) << np.uint64(3)
    return (lo >> sh) | ((hi << (_U56 + _U7 - sh)) << _U1)


@njit(cache=True, nogil=True, inline="always")
def _digit_run(w):
    """Number of leading ASCII digits (0..8) in the 8 bytes of w."""
    w7 = w & _M7F
    nd = ((w7 + _C46) | ~(w7 + _C50) | w) & _M80
    return np.int64(trailing_zeros(nd)) >> 3  # type: ignore[call-arg]  # numba intrinsic


@njit(cache=True, nogil=True, inline="always")
def _digits_value(w, k):
    """Integer value of the first k (1..8) ASCII digits of w, 8 digits at once (SWAR)."""
    v = w << (np.uint64(8 - k) << np.uint64(3))
    v = ((v & _M0F) * _MUL1) >> _U8
    v = ((v & _M00FF) * _MUL2) >> _U16
    v = ((v & _M0000FFFF) * _MUL3) >> _U32
    return np.int64(v)


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
):
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


def alloc_outputs(max_rows: int, max_nnz: int):
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


def parse_float(text: bytes | str, f32: bool = False) -> tuple[int, float]:
    """Parse one number with the kernel's parser (for tests): returns (status, value).

    Status 0 is a value, 1 not a number, 2 NaN, 3 infinite / out of range, 4 undecided
    (left to Python's ``float``).
    """
    b = np.frombuffer(text.encode() if isinstance(text, str) else bytes(text), np.uint8)
    st, v = _parse_number(b, 0, b.shape[0], bool(f32))
    return int(st), float(v)


def resolve_fallbacks(buf, fallback, n_fallback, data, labels):
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
