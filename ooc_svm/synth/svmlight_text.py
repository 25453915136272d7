"""SVMlight text of synthetic rows: numba formatting of labels, qids and float32 values.

Every float32 value is printed with the fewest significant digits (6 to 9) that parse back
to the same float32, so the text reads back to the stored data exactly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..store.format import Shard

#: exact integer powers of ten 10**0 .. 10**19 (uint64) for digit counting
_U10 = np.array([10**k for k in range(20)], dtype=np.uint64)
#: float64 powers of ten 10**-60 .. 10**60 (correctly rounded), index k + 60
_F10 = np.array([float(10**k) if k >= 0 else 1.0 / 10**-k for k in range(-60, 61)])
#: "00" "01" ... "99" for two digits at a time
_DIG2 = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), dtype=np.uint8).copy()


@njit(cache=True, nogil=True)
def _n_digits(v):
    """Number of decimal digits of v >= 1 (uint64); branch-free below 10**10."""
    if v >= _U10[10]:
        n = 11
        while n < 20 and v >= _U10[n]:
            n += 1
        return n
    return (
        1
        + np.int64(v >= _U10[1])
        + np.int64(v >= _U10[2])
        + np.int64(v >= _U10[3])
        + np.int64(v >= _U10[4])
        + np.int64(v >= _U10[5])
        + np.int64(v >= _U10[6])
        + np.int64(v >= _U10[7])
        + np.int64(v >= _U10[8])
        + np.int64(v >= _U10[9])
    )


@njit(cache=True, nogil=True)
def _put_digits(buf, end, v, n):
    """Write the lowest ``n`` decimal digits of ``v`` (uint64) ending before buf[end]."""
    q = end
    while n >= 2:
        r = np.int64(v % np.uint64(100))
        v //= np.uint64(100)
        buf[q - 1] = _DIG2[2 * r + 1]
        buf[q - 2] = _DIG2[2 * r]
        q -= 2
        n -= 2
    if n == 1:
        buf[q - 1] = 48 + np.int64(v % np.uint64(10))
        v //= np.uint64(10)
    return v


@njit(cache=True, nogil=True)
def _put_short(buf, pos, u, n):
    """Write the ``n``-digit number ``u < 10**10`` at buf[pos:] without data-dependent
    branches: 10 zero-padded digits, then a fixed 10-byte shift left (uses 20 bytes)."""
    _put_digits(buf, pos + 10, u, 10)
    off = 10 - n
    for q in range(10):
        buf[pos + q] = buf[pos + off + q]
    return pos + n


@njit(cache=True, nogil=True)
def _write_uint(buf, pos, v):
    """Decimal digits of v >= 0 at buf[pos:]; returns the new position."""
    u = np.uint64(v)
    if u < _U10[10]:
        return _put_short(buf, pos, u, _n_digits(u) if v > 0 else 1)
    n = _n_digits(u)
    _put_digits(buf, pos + n, u, n)
    return pos + n


@njit(cache=True, nogil=True)
def _write_int(buf, pos, v):
    if v < 0:
        buf[pos] = 45
        pos += 1
        return _write_uint(buf, pos, -v)
    return _write_uint(buf, pos, v)


@njit(cache=True, nogil=True)
def _round_digits(x, x32, p, e):
    """Nearest ``p``-significant-digit decimal of x: (parses back to x32?, m, k), x ≈ m·10^-k.

    The check is exact: for |k| <= 22 both m and 10^|k| are exact doubles, so ``m / 10^k``
    is the correctly rounded double of the decimal, as strtod computes it.
    """
    k = p - 1 - e
    if 0 <= k <= 22:
        pk = _F10[k + 60]
        m = np.rint(x * pk)
        return np.float32(m / pk) == x32, np.uint64(m), k
    if -22 <= k < 0:
        pk = _F10[-k + 60]
        m = np.rint(x / pk)
        return np.float32(m * pk) == x32, np.uint64(m), k
    return False, np.uint64(np.rint(x * _F10[k + 60])), k


@njit(cache=True, nogil=True)
def _write_f32(buf, pos, x32):
    """Shortest of 6..9 significant digits that parse (strtod, then float32) back to x32.

    9 significant digits always round-trip a float32 (the decimal is within 5e-9 relative
    of it, far from the half-way points at >= 3e-8), so that is the fallback.
    """
    x = np.float64(x32)
    if x != x or x == np.inf or x == -np.inf:
        buf[pos] = 110  # 'nan' never occurs in synth data; kept for completeness
        buf[pos + 1] = 97
        buf[pos + 2] = 110
        return pos + 3
    if x == 0.0:
        buf[pos] = 48
        return pos + 1
    if x < 0.0:
        buf[pos] = 45
        pos += 1
        x = -x
        x32 = -x32
    # decimal exponent of x: log10(x) is in [(e2-1) log10 2, e2 log10 2) for x = f 2^e2
    e2 = math.frexp(x)[1]
    e = np.int64(np.floor((e2 - 1) * 0.30102999566398120))
    if x >= _F10[e + 61]:
        e += 1
    ok, m, k = _round_digits(x, x32, 7, e)
    if ok:
        ok6, m6, k6 = _round_digits(x, x32, 6, e)
        if ok6:
            m = m6
            k = k6
    else:
        ok, m, k = _round_digits(x, x32, 8, e)
        if not ok:
            ok, m, k = _round_digits(x, x32, 9, e)
    while m % np.uint64(10) == 0:
        m //= np.uint64(10)
        k -= 1
    nd = _n_digits(m)
    ex = nd - 1 - k  # decimal exponent of the leading digit
    if -5 <= ex < 0:
        buf[pos] = 48
        buf[pos + 1] = 46
        for q in range(4):
            buf[pos + 2 + q] = 48
        return _put_short(buf, pos + 1 - ex, m, nd)
    if 0 <= ex < 9:
        if nd <= ex + 1:
            _put_digits(buf, pos + nd, m, nd)
            for q in range(nd, ex + 1):
                buf[pos + q] = 48
            return pos + ex + 1
        end = pos + nd + 1
        frac = nd - ex - 1
        m = _put_digits(buf, end, m, frac)
        buf[end - frac - 1] = 46
        _put_digits(buf, end - frac - 1, m, ex + 1)
        return end
    # scientific: d[.ddd]e[-]x
    if nd > 1:
        m = _put_digits(buf, pos + nd + 1, m, nd - 1)
        buf[pos + 1] = 46
        buf[pos] = 48 + np.int64(m)
        pos += nd + 1
    else:
        buf[pos] = 48 + np.int64(m)
        pos += 1
    buf[pos] = 101
    pos += 1
    if ex < 0:
        buf[pos] = 45
        pos += 1
        ex = -ex
    return _write_uint(buf, pos, ex)


#: bytes the formatter may use per row (label, qid, newline) and per non-zero
_ROW_BYTES = 64
_NNZ_BYTES = 32
_SCRATCH_BYTES = 32


@njit(cache=True, nogil=True)
def _format_rows(indptr, indices, data, y, qid, has_qid, out):
    """SVMlight lines (1-based indices) into ``out``; returns the number of bytes written."""
    n = indptr.shape[0] - 1
    pos = 0
    for i in range(n):
        yi = y[i]
        iy = np.int64(yi)
        if np.float64(iy) == yi:
            pos = _write_int(out, pos, iy)
        else:
            pos = _write_f32(out, pos, np.float32(yi))
        if has_qid:
            out[pos] = 32
            out[pos + 1] = 113
            out[pos + 2] = 105
            out[pos + 3] = 100
            out[pos + 4] = 58
            pos = _write_int(out, pos + 5, qid[i])
        for t in range(indptr[i], indptr[i + 1]):
            out[pos] = 32
            pos = _write_uint(out, pos + 1, np.int64(indices[t]) + 1)
            out[pos] = 58
            pos = _write_f32(out, pos + 1, data[t])
        out[pos] = 10
        pos += 1
    return pos


def format_svmlight(shard: Shard) -> memoryview:
    """SVMlight text of a block of rows (1-based indices, float32-exact values).

    Parameters
    ----------
    shard : Shard
        Rows to format; ``y`` must be integer-valued or representable as float32.

    Returns
    -------
    memoryview
        The bytes of the lines, each ending in ``\\n``.
    """
    n = shard.n_rows
    out = np.empty(n * _ROW_BYTES + shard.nnz * _NNZ_BYTES + _SCRATCH_BYTES, np.uint8)
    has_qid = shard.qid is not None
    qid = shard.qid if has_qid else np.zeros(0, np.int64)
    used = _format_rows(
        np.ascontiguousarray(shard.indptr, np.int64),
        np.ascontiguousarray(shard.indices, np.int32),
        np.ascontiguousarray(shard.data, np.float32),
        np.ascontiguousarray(shard.y, np.float64),
        np.ascontiguousarray(qid, np.int64),
        has_qid,
        out,
    )
    return out.data[:used]
