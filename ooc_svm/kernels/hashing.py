"""Signed feature hashing of CSR rows (``ingest --hash-bits B``).

Feature number f (1-based, as written in a 1-based file; column + 1) is hashed as
scikit-learn's ``FeatureHasher(n_features=2**B, input_type="pair")`` hashes the feature name
``str(f)``: h = MurmurHash3_x86_32 (seed 0) of the decimal digits of f, read as a signed
32-bit integer; the column is |h| mod 2^B and the value is multiplied by +1 when h >= 0 and
by -1 otherwise (``alternate_sign``). Entries of one row that fall on the same column are
summed (as ``FeatureHasher``'s ``sum_duplicates``); each such merge counts as one collision.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


@njit(cache=True, nogil=True)
def murmur3_32_decimal(f):
    """MurmurHash3_x86_32 (seed 0) of the decimal text of ``f`` >= 0, as a signed int32."""
    digits = np.empty(20, np.uint8)
    n = 0
    v = np.int64(f)
    if v == 0:
        digits[0] = 48
        n = 1
    while v > 0:
        digits[n] = 48 + v % 10
        v //= 10
        n += 1
    # reverse into text order
    buf = np.empty(n, np.uint8)
    for i in range(n):
        buf[i] = digits[n - 1 - i]
    c1 = np.int64(0xCC9E2D51)
    c2 = np.int64(0x1B873593)
    mask = np.int64(0xFFFFFFFF)
    h = np.int64(0)
    nb = n // 4
    for b in range(nb):
        k = (
            np.int64(buf[4 * b])
            | (np.int64(buf[4 * b + 1]) << np.int64(8))
            | (np.int64(buf[4 * b + 2]) << np.int64(16))
            | (np.int64(buf[4 * b + 3]) << np.int64(24))
        )
        k = (k * c1) & mask
        k = _rotl(k, np.int64(15))
        k = (k * c2) & mask
        h ^= k
        h = _rotl(h, np.int64(13))
        h = (h * np.int64(5) + np.int64(0xE6546B64)) & mask
    t = n & 3
    if t:
        k = np.int64(0)
        base = 4 * nb
        if t >= 3:
            k ^= np.int64(buf[base + 2]) << np.int64(16)
        if t >= 2:
            k ^= np.int64(buf[base + 1]) << np.int64(8)
        k ^= np.int64(buf[base])
        k = (k * c1) & mask
        k = _rotl(k, np.int64(15))
        k = (k * c2) & mask
        h ^= k
    h ^= np.int64(n)
    h ^= h >> np.int64(16)
    h = (h * np.int64(0x85EBCA6B)) & mask
    h ^= h >> np.int64(13)
    h = (h * np.int64(0xC2B2AE35)) & mask
    h ^= h >> np.int64(16)
    s = np.int64(h)
    if s >= 2147483648:
        s -= 4294967296
    return s


@njit(cache=True, nogil=True)
def hash_column(col: int, bits: int, base: int) -> tuple:
    """(hashed column, sign) of store column ``col`` (feature number ``col + base``)."""
    h = murmur3_32_decimal(col + base)
    a = -h if h < 0 else h  # |-2^31| = 2^31: fine in int64, 2^31 mod 2^B = 0
    return a & ((np.int64(1) << bits) - 1), 1.0 if h >= 0 else -1.0


@njit(cache=True, nogil=True)
def hash_csr_inplace(indptr, indices, data, n_rows, bits):
    """Hash the first ``n_rows`` rows of a CSR block in place (columns sorted, duplicates of
    a row summed); returns (non-zeros after, collisions, largest column or -1)."""
    out = indptr[0]
    merged = 0
    max_col = -1
    start = indptr[0]
    maxlen = 0
    for r in range(n_rows):
        ln = indptr[r + 1] - indptr[r]
        if ln > maxlen:
            maxlen = ln
    cols = np.empty(maxlen, np.int64)
    vals = np.empty(maxlen, np.float64)
    for r in range(n_rows):
        end = indptr[r + 1]
        m = end - start
        for t in range(m):
            c, s = hash_column(int(indices[start + t]), bits, 1)
            cols[t] = c
            vals[t] = s * np.float64(data[start + t])
        order = np.argsort(cols[:m], kind="mergesort")
        t = 0
        while t < m:
            c = cols[order[t]]
            acc = vals[order[t]]
            t += 1
            while t < m and cols[order[t]] == c:
                acc += vals[order[t]]
                merged += 1
                t += 1
            indices[out] = c
            data[out] = acc
            out += 1
            if c > max_col:
                max_col = c
        start = end
        indptr[r + 1] = out
    return out - indptr[0], merged, max_col
