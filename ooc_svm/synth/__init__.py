"""Synthetic RCV1-like sparse datasets, generated in streamed blocks, deterministic by seed.

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
"""

from __future__ import annotations

import bz2
import lzma
import math
import os
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from numba import njit

from ._util import cpu_count
from .store.format import Shard

__all__ = [
    "SPLITS",
    "SynthError",
    "SynthModel",
    "SynthSpec",
    "format_svmlight",
    "synth",
    "synth_blocks",
    "synth_matrix",
]

#: split name -> stream id; the pilot sample (label thresholds) has its own stream
SPLITS = {"train": 0, "test": 1}
_PILOT_SPLIT = 1000
_MODEL_STREAM = 0x5EED_F00D
PILOT_ROWS = 20_000
PILOT_NNZ = 2_000_000

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ROWMUL = np.uint64(0xD1B54A32D192ED03)
_TWO_M53 = 1.0 / 9007199254740992.0
_LOW32 = np.uint64(0xFFFFFFFF)

#: target bytes of CSR (indices + data + indptr + labels) per store shard
SHARD_BYTES = 64 << 20
#: target non-zeros per generation block
BLOCK_NNZ = 1 << 20


class SynthError(ValueError):
    """Invalid synth parameters or destination; the message says what to change."""


# ----------------------------------------------------------------------------------------
# numba kernels: counter-based RNG, row generation, labels, SVMlight formatting
# ----------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _seed_row(st, key, row):
    st[0] = _mix64(key ^ (np.uint64(row) * _ROWMUL))


@njit(cache=True, nogil=True)
def _next(st):
    s = st[0] + _GOLDEN
    st[0] = s
    return _mix64(s)


@njit(cache=True, nogil=True)
def _uniform(st):
    """Uniform double in the open interval (0, 1)."""
    return (np.float64(_next(st) >> np.uint64(11)) + 0.5) * _TWO_M53


@njit(cache=True, nogil=True)
def _row_len(st, mean, spread, n_features):
    lam = mean - 1.0
    if spread > 0.0:
        u1 = _uniform(st)
        u2 = _uniform(st)
        g = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        lam = lam * np.exp(spread * g - 0.5 * spread * spread)
    k = 1 + np.int64(np.floor(lam + _uniform(st)))
    if k > n_features:
        k = n_features
    return k


@njit(cache=True, nogil=True)
def _draw_rank(u, zp, d):
    """Popularity rank (0-based) by inversion of the continuous Zipf–Mandelbrot law.

    ``zp = (c, sexp, A, B)``: with density ∝ (x + c)^-zipf on [0, d), sexp = 1 - zipf;
    x = c·(exp(u·A) - 1) when sexp == 0, else (A + u·B)^(1/sexp) - c.
    """
    c = zp[0]
    sexp = zp[1]
    if sexp == 0.0:
        x = c * (np.exp(u * zp[2]) - 1.0)
    else:
        x = (zp[2] + u * zp[3]) ** (1.0 / sexp) - c
    r = int(x)
    if r >= d:
        r = d - 1
    elif r < 0:
        r = 0
    return r


#: 1 + log(tf) for tf = 0 .. 63 (index 0 unused)
_TF_TABLE = np.concatenate([[0.0], 1.0 + np.log(np.arange(1, 64, dtype=np.float64))])


@njit(cache=True, nogil=True)
def _tf_weight(st, decay, table):
    """``1 + log(tf)`` for a geometric term count, P(tf > t) = decay**t (capped at 63)."""
    u = _uniform(st)
    tf = 1
    thr = decay
    while u < thr and tf < 63:
        tf += 1
        thr *= decay
    return table[tf]


@njit(cache=True, nogil=True)
def _claim(table, shift, tag, j):
    """Add column ``j`` to row ``tag``'s open-addressing set; False if it is already there.

    Entries are ``tag << 32 | j``; entries of earlier rows count as empty, so the table is
    never cleared between rows.
    """
    mask = table.shape[0] - 1
    h = np.int64((np.uint64(j) * _GOLDEN) >> np.uint64(shift))
    want = (tag << 32) | j
    while True:
        e = table[h]
        if e == want:
            return False
        if (e >> 32) != tag:
            table[h] = want
            return True
        h = (h + 1) & mask


@njit(cache=True, nogil=True)
def _sort_row(src, dst, k, d, counts):
    """Sort ``src[:k]`` (column << 32 | slot) into ``dst[:k]``: bucket by column, then an
    insertion sort that only fixes the few inversions left inside buckets (expected O(k),
    columns are spread uniformly by the random permutation)."""
    for b in range(k + 1):
        counts[b] = 0
    kk = np.uint64(k)
    dd = np.uint64(d)
    for t in range(k):
        b = int(((src[t] >> np.uint64(32)) * kk) // dd)
        counts[b + 1] += 1
    for b in range(k):
        counts[b + 1] += counts[b]
    for t in range(k):
        b = int(((src[t] >> np.uint64(32)) * kk) // dd)
        dst[counts[b]] = src[t]
        counts[b] += 1
    for t in range(1, k):
        v = dst[t]
        q = t - 1
        while q >= 0 and dst[q] > v:
            dst[q + 1] = dst[q]
            q -= 1
        dst[q + 1] = v


@njit(cache=True, nogil=True)
def _gen_block(row0, n, key, mean, spread, tf_decay, tf_table, zp, perm, idf_rank, idf_col, w):
    """Generate rows ``row0 .. row0+n-1`` of one stream.

    Returns (indptr, indices, data, score); ``score`` is the hidden ``x · w`` of every row.
    Repeated columns within a row are rejected with a small per-block hash set.
    """
    d = perm.shape[0]
    st = np.empty(1, np.uint64)
    indptr = np.empty(n + 1, np.int64)
    indptr[0] = 0
    kmax = 1
    for i in range(n):
        _seed_row(st, key, row0 + i)
        k = _row_len(st, mean, spread, d)
        indptr[i + 1] = indptr[i] + k
        if k > kmax:
            kmax = k
    nnz = indptr[n]
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    score = np.empty(n, np.float64)
    packed = np.empty(kmax, np.uint64)
    row = np.empty(kmax, np.uint64)
    counts = np.empty(kmax + 1, np.int64)
    vals = np.empty(kmax, np.float64)
    bits = 6
    while (1 << bits) < 2 * kmax:
        bits += 1
    table = np.full(1 << bits, -1, np.int64)
    shift = 64 - bits
    for i in range(n):
        _seed_row(st, key, row0 + i)
        k = _row_len(st, mean, spread, d)
        cnt = 0
        tries = 0
        limit = 30 * k + 1000
        while cnt < k and tries < limit:
            tries += 1
            r = _draw_rank(_uniform(st), zp, d)
            j = int(perm[r])
            if _claim(table, shift, i, j):
                vals[cnt] = _tf_weight(st, tf_decay, tf_table) * idf_rank[r]
                packed[cnt] = (np.uint64(j) << np.uint64(32)) | np.uint64(cnt)
                cnt += 1
        if cnt < k:
            # k close to n_features: rejection stalls; take the next free columns instead
            j = int(_uniform(st) * d)
            while cnt < k:
                if _claim(table, shift, i, j):
                    vals[cnt] = _tf_weight(st, tf_decay, tf_table) * idf_col[j]
                    packed[cnt] = (np.uint64(j) << np.uint64(32)) | np.uint64(cnt)
                    cnt += 1
                j += 1
                if j == d:
                    j = 0
        _sort_row(packed, row, k, d, counts)
        ss = 0.0
        for t in range(k):
            ss += vals[t] * vals[t]
        inv = 1.0 / np.sqrt(ss)
        base = indptr[i]
        s = 0.0
        for t in range(k):
            p = row[t]
            j = int(p >> np.uint64(32))
            slot = np.int64(p & _LOW32)
            v = np.float32(vals[slot] * inv)
            indices[base + t] = j
            data[base + t] = v
            s += np.float64(v) * w[j]
        score[i] = s
    return indptr, indices, data, score


@njit(cache=True, nogil=True)
def _label_draws(row0, score, key, sigma, s_out, u_out):
    """Per-row label randomness: the jittered score ``s + sigma * N(0, 1)`` and two uniforms
    (corrupt or not, replacement rank)."""
    st = np.empty(1, np.uint64)
    for i in range(score.shape[0]):
        _seed_row(st, key, row0 + i)
        u1 = _uniform(st)
        u2 = _uniform(st)
        s_out[i] = score[i] + sigma * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        u_out[i, 0] = _uniform(st)
        u_out[i, 1] = _uniform(st)


@njit(cache=True, nogil=True)
def _labels(s, u, cuts, n_ranks, noise, qid_size, within_query, y):
    """Labels from jittered scores ``s`` and uniforms ``u`` (see module docstring)."""
    n = s.shape[0]
    binary = n_ranks == 0
    if within_query:
        q0 = 0
        while q0 < n:
            q1 = min(n, q0 + qid_size)
            m = q1 - q0
            order = np.argsort(s[q0:q1], kind="mergesort")
            for t in range(m):
                y[q0 + order[t]] = 1 + (t * n_ranks) // m
            q0 = q1
    for i in range(n):
        if not within_query:
            if binary:
                y[i] = 1 if s[i] > cuts[0] else -1
            else:
                r = 1
                for c in range(cuts.shape[0]):
                    if s[i] > cuts[c]:
                        r += 1
                y[i] = r
        if u[i, 0] < noise:
            if binary:
                y[i] = -y[i]
            else:
                r = 1 + int(u[i, 1] * (n_ranks - 1))
                if r >= y[i]:
                    r += 1
                y[i] = r


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


# ----------------------------------------------------------------------------------------
# the dataset model: everything derived from the parameters alone
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SynthSpec:
    """Parameters that define a synthetic dataset (everything but its length and split).

    Attributes
    ----------
    features : int
        Number of columns ``D``.
    nnz_per_row : float
        Mean number of non-zeros per row (``>= 1``).
    seed : int
        Seed of everything random (``>= 0``).
    noise : float
        Fraction of labels flipped (binary) or replaced by another rank (ordinal).
    ranks : int or None
        Ordinal labels ``1..ranks`` instead of binary ``-1/+1``.
    qid_size : int or None
        Rows per query; adds ``qid`` and makes ranks relative to the query.
    zipf, zipf_offset : float
        Feature popularity ∝ ``(rank + zipf_offset) ** -zipf``.
    nnz_spread : float
        Log-sd of the row length (0: lengths vary only by rounding).
    positive_fraction : float
        Share of positives before noise (binary labels).
    w_density : float
        Fraction of features with a non-zero hidden weight.
    tf_decay : float
        Geometric term-count parameter: P(tf > t) = tf_decay ** t.
    score_noise : float
        Gaussian noise added to the hidden score before thresholding, in units of the
        score's standard deviation (breaks ties, e.g. rows without any weighted feature).
    """

    features: int
    nnz_per_row: float
    seed: int
    noise: float = 0.05
    ranks: int | None = None
    qid_size: int | None = None
    zipf: float = 1.0
    zipf_offset: float = 5.0
    nnz_spread: float = 0.5
    positive_fraction: float = 0.4
    w_density: float = 0.1
    tf_decay: float = 0.35
    score_noise: float = 0.01

    def validate(self) -> None:
        """Raise :class:`SynthError` on parameters that cannot produce a dataset."""

        def bad(msg):
            raise SynthError(msg)

        if not (isinstance(self.features, int | np.integer) and 1 <= self.features < 2**31):
            bad(f"--features must be an integer in [1, 2**31); got {self.features!r}")
        if not (1.0 <= float(self.nnz_per_row) <= self.features):
            bad(f"--nnz-per-row must be in [1, features={self.features}]; got {self.nnz_per_row}")
        if not (isinstance(self.seed, int | np.integer) and self.seed >= 0):
            bad(f"--seed must be a non-negative integer; got {self.seed!r}")
        if not (0.0 <= self.noise <= 0.5):
            bad(f"--noise must be in [0, 0.5]; got {self.noise}")
        if self.ranks is not None and not (2 <= self.ranks <= 1000):
            bad(f"--ranks must be in [2, 1000]; got {self.ranks}")
        if self.qid_size is not None and not (1 <= self.qid_size <= 1_000_000):
            bad(f"--qid-size must be in [1, 1000000]; got {self.qid_size}")
        if not (self.zipf >= 0.0 and self.zipf_offset >= 0.0):
            bad("--zipf and the Zipf offset must be >= 0")
        if not (0.0 <= self.nnz_spread <= 3.0):
            bad(f"--nnz-spread must be in [0, 3]; got {self.nnz_spread}")
        if not (0.0 < self.positive_fraction < 1.0):
            bad(f"--positive-fraction must be in (0, 1); got {self.positive_fraction}")
        if not (0.0 < self.w_density <= 1.0):
            bad(f"--w-density must be in (0, 1]; got {self.w_density}")
        if not (0.0 <= self.score_noise <= 10.0):
            bad(f"--score-noise must be in [0, 10]; got {self.score_noise}")
        if not (0.0 < self.tf_decay < 1.0):
            bad(f"tf_decay must be in (0, 1); got {self.tf_decay}")

    @property
    def label_kind(self) -> str:
        return "ordinal" if self.ranks else "binary"


class SynthModel:
    """Popularity law, column permutation, idf, hidden weights and label thresholds.

    Build with :meth:`SynthModel.get` (cached); all arrays are read-only.

    Attributes
    ----------
    zp : ndarray of float64, (4,)
        Parameters of the popularity law for :func:`_draw_rank`.
    perm : ndarray of int32, (D,)
        Column of every popularity rank.
    popularity : ndarray of float64, (D,)
        Draw probability of every *column*.
    idf : ndarray of float64, (D,)
        idf of every column (``idf_rank``: the same by popularity rank).
    w : ndarray of float64, (D,)
        Hidden weight vector (by column).
    cuts : ndarray of float64
        Score thresholds: one for binary labels, ``ranks - 1`` for ordinal labels.
    """

    def __init__(self, spec: SynthSpec):
        spec.validate()
        self.spec = spec
        d = int(spec.features)
        rng = np.random.default_rng(np.random.SeedSequence([int(spec.seed), _MODEL_STREAM]))
        # continuous law: density ∝ (x + c)^-zipf on [0, d); rank r covers [r, r + 1)
        c = 1.0 + float(spec.zipf_offset)
        sexp = 1.0 - float(spec.zipf)
        if abs(sexp) < 1e-6:  # the power form loses all precision near zipf = 1
            sexp = 0.0
        r = np.arange(d, dtype=np.float64)
        if sexp == 0.0:
            A = float(np.log1p(d / c))
            zp = np.array([c, 0.0, A, 0.0])
            p = np.log1p(1.0 / (r + c)) / A
        else:
            A = c**sexp
            B = (d + c) ** sexp - A
            zp = np.array([c, sexp, A, B])
            p = ((r + 1.0 + c) ** sexp - (r + c) ** sexp) / B
        perm = rng.permutation(d).astype(np.int32)
        # probability that a row of mean length holds the feature -> idf = 1 - log(df)
        df = -np.expm1(float(spec.nnz_per_row) * np.log1p(-np.minimum(p, 1 - 1e-12)))
        idf_rank = 1.0 - np.log(np.maximum(df, 1e-300))
        popularity = np.empty(d)
        popularity[perm] = p
        idf = np.empty(d)
        idf[perm] = idf_rank
        self.idf_rank = idf_rank
        mask = rng.random(d) < spec.w_density
        w = np.where(mask, rng.standard_normal(d), 0.0)
        if not mask.any():
            w[int(rng.integers(d))] = 1.0
        self.zp, self.perm = zp, perm
        self.popularity, self.idf, self.w = popularity, idf, w
        for a in (zp, perm, popularity, idf, idf_rank, w):
            a.flags.writeable = False
        self.cuts = self._thresholds()

    @staticmethod
    @lru_cache(maxsize=4)
    def get(spec: SynthSpec) -> SynthModel:
        """The (cached) model of ``spec``."""
        return SynthModel(spec)

    def keys(self, split: str | int) -> tuple[np.uint64, np.uint64]:
        """Row-stream and label-noise keys of a split."""
        sid = SPLITS.get(split, split) if isinstance(split, str) else int(split)
        if not isinstance(sid, int):
            raise SynthError(f"unknown split {split!r}; use one of {sorted(SPLITS)}")
        k = np.random.SeedSequence([int(self.spec.seed), _MODEL_STREAM, sid]).generate_state(
            2, np.uint64
        )
        return np.uint64(k[0]), np.uint64(k[1])

    def label_scores(self, key_labels, row0: int, score: np.ndarray):
        """Jittered scores and label uniforms of rows ``row0 ..`` (see :func:`_label_draws`)."""
        s_out = np.empty_like(score)
        u = np.empty((score.shape[0], 2))
        _label_draws(np.int64(row0), score, key_labels, self.sigma, s_out, u)
        return s_out, u

    def rows(self, key: np.uint64, row0: int, n: int):
        """Raw rows ``row0 .. row0+n-1`` of a stream: (indptr, indices, data, score)."""
        s = self.spec
        return _gen_block(
            np.int64(row0),
            np.int64(n),
            key,
            float(s.nnz_per_row),
            float(s.nnz_spread),
            float(s.tf_decay),
            _TF_TABLE,
            self.zp,
            self.perm,
            self.idf_rank,
            self.idf,
            self.w,
        )

    def _thresholds(self) -> np.ndarray:
        s = self.spec
        key, key_labels = self.keys(_PILOT_SPLIT)
        n_pilot = int(min(PILOT_ROWS, max(PILOT_ROWS // 4, PILOT_NNZ // s.nnz_per_row)))
        score = self.rows(key, 0, n_pilot)[3]
        sd = float(np.std(score))
        self.sigma = s.score_noise * (sd if sd > 0 else 1.0)
        score, _ = self.label_scores(key_labels, 0, score)
        if s.ranks:
            q = np.arange(1, s.ranks) / s.ranks
        else:
            q = np.array([1.0 - s.positive_fraction])
        return np.ascontiguousarray(np.quantile(score, q), dtype=np.float64)

    def block(self, split: str | int, row0: int, n: int) -> Shard:
        """Rows ``row0 .. row0+n-1`` of a split as a :class:`Shard` (``row_start=row0``).

        With ``qid_size`` set and ranks, ``row0`` must be a multiple of ``qid_size`` and ``n``
        too unless the block ends the dataset (queries must not be cut).
        """
        s = self.spec
        key_rows, key_labels = self.keys(split)
        indptr, indices, data, score = self.rows(key_rows, row0, n)
        y = np.empty(n, np.float64)
        within = bool(s.ranks and s.qid_size)
        if within and s.qid_size and row0 % s.qid_size:
            raise SynthError(f"block start {row0} cuts a query of {s.qid_size} rows")
        s_j, u = self.label_scores(key_labels, row0, score)
        _labels(
            s_j,
            u,
            self.cuts,
            np.int64(s.ranks or 0),
            float(s.noise),
            np.int64(s.qid_size or 1),
            within,
            y,
        )
        qid = None
        if s.qid_size:
            qid = np.arange(row0, row0 + n, dtype=np.int64) // s.qid_size + 1
        return Shard(indptr, indices, data, y, qid, row_start=int(row0))


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


def _make_spec(features, nnz_per_row, seed, **options) -> SynthSpec:
    opts = {k: v for k, v in options.items() if v is not None}
    spec = SynthSpec(features=int(features), nnz_per_row=float(nnz_per_row), seed=int(seed), **opts)
    spec.validate()
    return spec


def _check_rows(rows: int) -> int:
    if not (isinstance(rows, int | np.integer) and rows >= 1):
        raise SynthError(f"--rows must be a positive integer; got {rows!r}")
    return int(rows)


def synth_blocks(
    rows: int,
    features: int,
    nnz_per_row: float,
    seed: int,
    *,
    split: str = "train",
    block_rows: int | None = None,
    threads: int | None = None,
    **options,
) -> Iterator[Shard]:
    """Generate a synthetic dataset as consecutive blocks of rows, without touching disk.

    Parameters
    ----------
    rows, features, nnz_per_row, seed
        Length, width, mean row length and seed of the dataset.
    split : {"train", "test"}
        Which row stream (same hidden weights, independent rows).
    block_rows : int, optional
        Rows per yielded block (rounded up to whole queries); the data does not depend on it.
    threads : int, optional
        Generator threads (default: usable CPUs); the data does not depend on it.
    **options
        Further :class:`SynthSpec` fields: ``noise``, ``ranks``, ``qid_size``, ``zipf``,
        ``zipf_offset``, ``nnz_spread``, ``positive_fraction``, ``w_density``, ``tf_decay``.

    Yields
    ------
    Shard
        ``indptr`` (int64), ``indices`` (int32, sorted, 0-based), ``data`` (float32),
        ``y`` (float64: -1/+1 or ranks 1..R), ``qid`` (int64 or None), ``row_start``.
    """
    rows = _check_rows(rows)
    spec = _make_spec(features, nnz_per_row, seed, **options)
    model = SynthModel.get(spec)
    model.keys(split)
    step = _round_to_query(int(block_rows), spec) if block_rows else default_block_rows(spec)
    threads = threads or cpu_count()
    yield from _ordered_map(
        lambda ab: model.block(split, ab[0], ab[1] - ab[0]), _ranges(0, rows, step), threads
    )


def synth_matrix(rows: int, features: int, nnz_per_row: float, seed: int, **kwargs):
    """The whole dataset in memory: ``(X, y, qid)`` with ``X`` a scipy CSR matrix (float32).

    For tests and small benchmarks; keyword arguments as :func:`synth_blocks`.
    """
    import scipy.sparse as sp

    blocks = list(synth_blocks(rows, features, nnz_per_row, seed, **kwargs))
    X = sp.vstack([b.to_scipy(int(features)) for b in blocks], format="csr")
    y = np.concatenate([b.y for b in blocks])
    qid = np.concatenate([b.qid for b in blocks]) if blocks[0].qid is not None else None
    return X, y, qid


# ----------------------------------------------------------------------------------------
# writing: SVMlight text (optionally compressed) or a store
# ----------------------------------------------------------------------------------------
_TEXT_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}
_STORE_SUFFIXES = {".zarr": "zarr", ".parquet": "parquet", ".pq": "parquet"}


def output_format(out: str, fmt: str | None = None) -> str:
    """``svmlight``, ``zarr`` or ``parquet``: explicit ``fmt``, else from the suffix of ``out``."""
    if fmt:
        if fmt == "store":
            fmt = _STORE_SUFFIXES.get(os.path.splitext(str(out).rstrip("/"))[1].lower(), "zarr")
        if fmt not in ("svmlight", "zarr", "parquet"):
            raise SynthError(f"unknown output format {fmt!r}; use svmlight, zarr or parquet")
        return fmt
    return _STORE_SUFFIXES.get(os.path.splitext(str(out).rstrip("/"))[1].lower(), "svmlight")


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
    from .store.paths import get_fs, is_local, local_path

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
    features: int,
    nnz_per_row: float,
    seed: int,
    *,
    split: str = "train",
    format: str | None = None,
    shard_rows: int | None = None,
    compression: str | None = None,
    compress_level: int | None = None,
    overwrite: bool = False,
    block_rows: int | None = None,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
    **options,
) -> dict:
    """Write a synthetic dataset to ``out`` (SVMlight text or a store), streaming.

    Parameters
    ----------
    out : str
        Destination. ``*.zarr`` / ``*.parquet`` / ``*.pq`` (or ``format``) write a store,
        anything else SVMlight text (``.gz`` / ``.bz2`` / ``.xz`` compressed); ``-`` writes
        text to standard output.
    rows, features, nnz_per_row, seed, split, block_rows, threads, **options
        As :func:`synth_blocks`.
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
    spec = _make_spec(features, nnz_per_row, seed, **options)
    model = SynthModel.get(spec)
    model.keys(split)
    fmt = output_format(out, format)
    threads = threads or cpu_count()
    step = _round_to_query(int(block_rows), spec) if block_rows else default_block_rows(spec)
    params = {"rows": rows, "split": split, **asdict(spec)}
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
    from .store.paths import get_fs

    fs, root = get_fs(out)
    if fs.exists(root) and not overwrite:
        raise SynthError(f"{out}: destination exists; use --overwrite to replace it")


def _write_text(job: _Job, level: int | None) -> int:
    """SVMlight text to ``job.out`` (a temporary sibling renamed into place), or stdout."""
    import sys

    from .store.paths import get_fs, is_local, local_path, temp_sibling

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

    from .store import StoreWriter

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
