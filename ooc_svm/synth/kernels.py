"""numba kernels of synthetic data: a counter-based RNG (splitmix64), row generation
(Zipf–Mandelbrot columns valued tf-idf, binary or term counts, optional leading dense columns;
or click-log rows of one-hot hashed categorical fields), labels from a hidden weight vector.

Every row has its own random stream seeded from the dataset key and its global row index,
so a block's rows do not depend on the block size, the threads or the order of blocks.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ROWMUL = np.uint64(0xD1B54A32D192ED03)
_TWO_M53 = 1.0 / 9007199254740992.0
_LOW32 = np.uint64(0xFFFFFFFF)


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


#: value kinds of the Zipf-drawn columns (``SynthSpec.values``)
VALUES_TFIDF = 0
VALUES_BINARY = 1
VALUES_TF = 2
#: value kinds of the leading dense columns (``SynthSpec.dense_values``)
DENSE_REAL = 0
DENSE_COUNT = 1

#: stream tag of the dense columns' draws (their own stream: the sparse draws stay as before)
_DENSE_TAG = np.uint64(0x3C6EF372FE94F82B)


@njit(cache=True, nogil=True)
def _normal(st):
    u1 = _uniform(st)
    u2 = _uniform(st)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@njit(cache=True, nogil=True)
def _tf_count(st, decay):
    """A geometric term count ``tf >= 1``, P(tf > t) = decay**t (capped at 63)."""
    u = _uniform(st)
    tf = 1
    thr = decay
    while u < thr and tf < 63:
        tf += 1
        thr *= decay
    return np.float64(tf)


@njit(cache=True, nogil=True)
def _dense_value(st, kind):
    """A value of a leading dense column: ``real`` is logistic(N(0, 1)) in (0, 1); ``count``
    is ln(1 + c) of a count c = 1 + floor(exp(1 + 1.5 N(0, 1))) (heavy-tailed, >= 1)."""
    g = _normal(st)
    if kind == DENSE_COUNT:
        c = 1.0 + np.floor(np.exp(1.0 + 1.5 * g))
        return np.log1p(c)
    return 1.0 / (1.0 + np.exp(-g))


@njit(cache=True, nogil=True)
def _dense_present(st, n_dense, dense_p, mark):
    """Draw which of the ``n_dense`` leading columns a row holds (``mark[c]``); their count."""
    cnt = 0
    for c in range(n_dense):
        on = dense_p >= 1.0 or _uniform(st) < dense_p
        mark[c] = on
        if on:
            cnt += 1
    return cnt


@njit(cache=True, nogil=True)
def _gen_block(
    row0,
    n,
    key,
    mean,
    spread,
    tf_decay,
    tf_table,
    zp,
    perm,
    idf_rank,
    idf_col,
    w,
    values=VALUES_TFIDF,
    normalize=True,
    n_dense=0,
    dense_p=1.0,
    dense_kind=DENSE_REAL,
):
    """Generate rows ``row0 .. row0+n-1`` of one stream.

    Every row holds the leading dense columns ``0 .. n_dense-1`` it draws (each with
    probability ``dense_p``, from its own stream) and ``k`` distinct columns drawn by
    popularity rank (``perm`` maps a rank to its column, ``>= n_dense``), valued by
    ``values``; with ``normalize`` the row is scaled to unit L2 norm.
    Returns (indptr, indices, data, score); ``score`` is the hidden ``x · w`` of every row.
    Repeated columns within a row are rejected with a small per-block hash set.
    """
    d = perm.shape[0]
    st = np.empty(1, np.uint64)
    sd = np.empty(1, np.uint64)
    mark = np.zeros(max(n_dense, 1), np.bool_)
    dkey = key ^ _DENSE_TAG
    indptr = np.empty(n + 1, np.int64)
    indptr[0] = 0
    kmax = 1
    for i in range(n):
        _seed_row(st, key, row0 + i)
        k = _row_len(st, mean, spread, d)
        if k > kmax:
            kmax = k
        if n_dense > 0:
            _seed_row(sd, dkey, row0 + i)
            k += _dense_present(sd, n_dense, dense_p, mark)
        indptr[i + 1] = indptr[i] + k
    nnz = indptr[n]
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    score = np.empty(n, np.float64)
    packed = np.empty(kmax, np.uint64)
    row = np.empty(kmax, np.uint64)
    counts = np.empty(kmax + 1, np.int64)
    vals = np.empty(kmax, np.float64)
    dvals = np.empty(max(n_dense, 1), np.float64)
    bits = 6
    while (1 << bits) < 2 * kmax:
        bits += 1
    table = np.full(1 << bits, -1, np.int64)
    shift = 64 - bits
    for i in range(n):
        _seed_row(st, key, row0 + i)
        k = _row_len(st, mean, spread, d)
        nd = 0
        ss = 0.0
        if n_dense > 0:
            _seed_row(sd, dkey, row0 + i)
            _dense_present(sd, n_dense, dense_p, mark)
            for c in range(n_dense):
                if mark[c]:
                    v = _dense_value(sd, dense_kind)
                    dvals[nd] = v
                    ss += v * v
                    nd += 1
        cnt = 0
        tries = 0
        limit = 30 * k + 1000
        while cnt < k and tries < limit:
            tries += 1
            r = _draw_rank(_uniform(st), zp, d)
            j = int(perm[r])
            if _claim(table, shift, i, j):
                if values == VALUES_TFIDF:
                    vals[cnt] = _tf_weight(st, tf_decay, tf_table) * idf_rank[r]
                elif values == VALUES_TF:
                    vals[cnt] = _tf_count(st, tf_decay)
                else:
                    vals[cnt] = 1.0
                packed[cnt] = (np.uint64(j) << np.uint64(32)) | np.uint64(cnt)
                cnt += 1
        if cnt < k:
            # k close to n_features: rejection stalls; take the next free columns instead
            j = int(_uniform(st) * d)
            while cnt < k:
                jj = int(perm[j]) if n_dense > 0 else j
                if _claim(table, shift, i, jj):
                    if values == VALUES_TFIDF:
                        vals[cnt] = _tf_weight(st, tf_decay, tf_table) * idf_col[jj]
                    elif values == VALUES_TF:
                        vals[cnt] = _tf_count(st, tf_decay)
                    else:
                        vals[cnt] = 1.0
                    packed[cnt] = (np.uint64(jj) << np.uint64(32)) | np.uint64(cnt)
                    cnt += 1
                j += 1
                if j == d:
                    j = 0
        _sort_row(packed, row, k, d + n_dense, counts)
        for t in range(k):
            ss += vals[t] * vals[t]
        inv = 1.0 / np.sqrt(ss) if normalize else 1.0
        base = indptr[i]
        s = 0.0
        q = 0
        for c in range(n_dense):
            if mark[c]:
                v = np.float32(dvals[q] * inv)
                indices[base + q] = c
                data[base + q] = v
                s += np.float64(v) * w[c]
                q += 1
        base += nd
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
def _field_column(hkey, f, level, width):
    """Hashed column (in ``[0, width)``) of level ``level`` of categorical field ``f``."""
    h = _mix64(hkey ^ (np.uint64(f + 1) * _ROWMUL) ^ (np.uint64(level) * _GOLDEN))
    return np.int64(h % np.uint64(width))


@njit(cache=True, nogil=True)
def _gen_fields_block(row0, n, key, hkey, n_dense, dense_kind, fzp, card, w, normalize):
    """Rows of a click-log shape: the ``n_dense`` leading count/real columns (all present)
    and one level of every categorical field ``f`` (drawn by the Zipf law ``fzp[f]`` over its
    ``card[f]`` levels), one-hot and hashed into the columns ``n_dense ..`` (feature hashing:
    two fields of one row that meet on a column add up there, as a hashing trick does).

    Returns (indptr, indices, data, score) as :func:`_gen_block`.
    """
    nf = card.shape[0]
    width = w.shape[0] - n_dense
    k = n_dense + nf
    st = np.empty(1, np.uint64)
    cols = np.empty(nf, np.int64)
    indptr = np.empty(n + 1, np.int64)
    indices = np.empty(n * k, np.int32)
    data = np.empty(n * k, np.float32)
    score = np.empty(n, np.float64)
    dv = np.empty(max(n_dense, 1), np.float64)
    mult = np.empty(nf, np.float64)
    pos = 0
    indptr[0] = 0
    for i in range(n):
        _seed_row(st, key, row0 + i)
        ss = 0.0
        for c in range(n_dense):
            v = _dense_value(st, dense_kind)
            dv[c] = v
            ss += v * v
        for f in range(nf):
            lv = _draw_rank(_uniform(st), fzp[f], card[f])
            cols[f] = n_dense + _field_column(hkey, f, lv, width)
        # sort the few hashed columns (insertion sort), then merge equal ones
        for t in range(1, nf):
            v = cols[t]
            q = t - 1
            while q >= 0 and cols[q] > v:
                cols[q + 1] = cols[q]
                q -= 1
            cols[q + 1] = v
        m = 0
        for t in range(nf):
            if m > 0 and cols[m - 1] == cols[t]:
                mult[m - 1] += 1.0
            else:
                cols[m] = cols[t]
                mult[m] = 1.0
                m += 1
        for t in range(m):
            ss += mult[t] * mult[t]
        inv = 1.0 / np.sqrt(ss) if normalize else 1.0
        s = 0.0
        for c in range(n_dense):
            v = np.float32(dv[c] * inv)
            indices[pos] = c
            data[pos] = v
            s += np.float64(v) * w[c]
            pos += 1
        for t in range(m):
            v = np.float32(mult[t] * inv)
            indices[pos] = cols[t]
            data[pos] = v
            s += np.float64(v) * w[cols[t]]
            pos += 1
        indptr[i + 1] = pos
        score[i] = s
    return indptr, indices[:pos].copy(), data[:pos].copy(), score


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
