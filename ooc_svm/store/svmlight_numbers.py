"""Exact number parsing of the SVMlight parser (:mod:`ooc_svm.store.svmlight`), in numba.

A decimal string becomes the correctly rounded float64 (Clinger's fast path for short
mantissas, else the Eisel-Lemire algorithm with a 128-bit table of powers of ten computed
here from Python integers), then float32 for feature values: every value equals
``np.float32(float(text))`` bit for bit. Integers (indices, qids) are read eight digits at a
time from a 64-bit word. :func:`parse_float` exposes the number parser to tests.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

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


def parse_float(text: bytes | str, f32: bool = False) -> tuple[int, float]:
    """Parse one number with the kernel's parser (for tests): returns (status, value).

    Status 0 is a value, 1 not a number, 2 NaN, 3 infinite / out of range, 4 undecided
    (left to Python's ``float``).
    """
    b = np.frombuffer(text.encode() if isinstance(text, str) else bytes(text), np.uint8)
    st, v = _parse_number(b, 0, b.shape[0], bool(f32))
    return int(st), float(v)
