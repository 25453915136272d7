"""Byte-bounded LRU caches of kernel rows / columns (``--cache-mb``).

Two flavours with the same policy (least recently used evicted first, hit / miss counts):

:class:`KernelCache` — Python level, for solvers that fetch rows a few at a time
    (active-set, irwls). Keys are **global row indices** (ints); values are 1-D arrays
    (a kernel row K(x_key, X_set) against whatever row set the caller works on). The caller
    clears the cache (:meth:`KernelCache.clear`) when that row set changes. Typical use::

        cache = KernelCache(max_bytes=int(cache_mb * 2**20))
        rows = cache.get_or_compute(keys, lambda missing: compute_rows(missing))  # (k, n_set)
        cache.stats()   # {'hits', 'misses', 'evictions', 'nbytes', 'max_bytes', 'entries'}

:class:`SlotCache` — numba level, for inner loops that must not return to Python (SMO).
    A fixed pool of ``n_slots`` float32 columns of length ``length`` (n_slots is derived from
    the byte budget); keys are local indices ``0 .. n_keys-1`` of an in-memory row set.
    Two validity schemes over the same arrays: :func:`slot_acquire` (each slot records the
    *generation* of the active set it was computed for, ``-1`` = complete) and
    :func:`slot_acquire_prefix` (each slot records how many leading positions of the caller's
    row order it covers, as LIBSVM's cache does; used by SMO). Use one scheme per cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

MB = 1 << 20


class KernelCache:
    """LRU cache of kernel rows keyed by global row index, bounded by ``max_bytes``.

    Parameters
    ----------
    max_bytes : int
        Budget for the cached arrays' ``nbytes`` (dictionary overhead not counted). A row
        larger than the whole budget is returned but not stored.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self._d: OrderedDict[int, np.ndarray] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @classmethod
    def from_mb(cls, cache_mb: float) -> KernelCache:
        """Cache with a budget of ``cache_mb`` MiB."""
        return cls(int(float(cache_mb) * MB))

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: int) -> bool:
        return int(key) in self._d

    def get(self, key: int) -> np.ndarray | None:
        """The cached row for ``key`` (marked most recently used) or None; counts hit/miss."""
        key = int(key)
        row = self._d.get(key)
        if row is None:
            self.misses += 1
            return None
        self._d.move_to_end(key)
        self.hits += 1
        return row

    def put(self, key: int, row: np.ndarray) -> None:
        """Store ``row`` under ``key`` (replacing an older one), evicting LRU rows to fit."""
        key = int(key)
        old = self._d.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        if row.nbytes > self.max_bytes:
            return
        while self._d and self.nbytes + row.nbytes > self.max_bytes:
            _, ev = self._d.popitem(last=False)
            self.nbytes -= ev.nbytes
            self.evictions += 1
        self._d[key] = row
        self.nbytes += row.nbytes

    def get_or_compute(
        self, keys: Sequence[int] | np.ndarray, compute: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """Rows for ``keys`` as a 2-D array (one row per key, in order).

        ``compute(missing_keys: int64 ndarray) -> ndarray (len(missing_keys), n)`` is called
        once with every key that is not cached; the new rows are cached.
        """
        keys = [int(k) for k in keys]
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        for k in keys:
            r = self.get(k)
            if r is None:
                if k not in missing:
                    missing.append(k)
            else:
                found[k] = r
        if missing:
            new = np.asarray(compute(np.asarray(missing, dtype=np.int64)))
            if new.shape[0] != len(missing):
                raise ValueError("compute() returned the wrong number of rows")
            for k, r in zip(missing, new, strict=True):
                r = np.array(r, copy=True)
                found[k] = r
                self.put(k, r)
        if not keys:
            return np.empty((0, 0))
        return np.stack([found[k] for k in keys])

    def invalidate(self, key: int) -> None:
        """Drop one row (e.g. its values changed)."""
        old = self._d.pop(int(key), None)
        if old is not None:
            self.nbytes -= old.nbytes

    def clear(self) -> None:
        """Drop every row (the row set the rows were computed against changed); keeps stats."""
        self._d.clear()
        self.nbytes = 0

    def stats(self) -> dict:
        """``hits, misses, evictions, nbytes, max_bytes, entries`` and ``hit_rate``."""
        total = self.hits + self.misses
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "nbytes": self.nbytes,
            "max_bytes": self.max_bytes,
            "entries": len(self._d),
            "hit_rate": (self.hits / total) if total else 0.0,
        }


# --------------------------------------------------------------------------------------------
# numba slot cache
# --------------------------------------------------------------------------------------------
#: indices into SlotCache.stats
HITS, MISSES, EVICTIONS, CLOCK = 0, 1, 2, 3


class SlotCache:
    """Arrays of a numba-level LRU column cache with a byte budget.

    Parameters
    ----------
    max_bytes : int
        Budget for the column buffer; ``n_slots = max(2, max_bytes // (4 * length))`` but never
        more than ``n_keys`` (everything fits).
    n_keys : int
        Keys are ``0 .. n_keys - 1``.
    length : int
        Length of one column (float32).

    Attributes
    ----------
    buf : float32 (n_slots, length)
    slot_key : int64 (n_slots,)    key held by each slot, -1 when empty
    slot_of : int64 (n_keys,)      slot holding each key, -1 when absent
    slot_gen : int64 (n_slots,)    generation (slot_acquire) or covered prefix (…_prefix)
    last_used : int64 (n_slots,)   LRU clock stamps
    stats : int64 (4,)             hits, misses, evictions, clock
    """

    def __init__(self, max_bytes: int, n_keys: int, length: int) -> None:
        per = max(4 * int(length), 4)
        n_slots = max(2, int(max_bytes) // per)
        n_slots = max(2, min(n_slots, int(n_keys)))
        self.n_slots = n_slots
        self.buf = np.empty((n_slots, max(int(length), 1)), dtype=np.float32)
        self.slot_key = np.full(n_slots, -1, dtype=np.int64)
        self.slot_of = np.full(max(int(n_keys), 1), -1, dtype=np.int64)
        self.slot_gen = np.full(n_slots, -2, dtype=np.int64)
        self.last_used = np.zeros(n_slots, dtype=np.int64)
        self.stats = np.zeros(4, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return int(
            self.buf.nbytes
            + self.slot_key.nbytes
            + self.slot_of.nbytes
            + self.slot_gen.nbytes
            + self.last_used.nbytes
        )

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``(buf, slot_key, slot_of, slot_gen, last_used, stats)`` for numba functions."""
        return self.buf, self.slot_key, self.slot_of, self.slot_gen, self.last_used, self.stats

    def stats_dict(self) -> dict:
        h, m, e = (int(v) for v in self.stats[:3])
        return {
            "hits": h,
            "misses": m,
            "evictions": e,
            "n_slots": self.n_slots,
            "nbytes": self.nbytes,
            "hit_rate": h / (h + m) if (h + m) else 0.0,
        }


@njit(cache=True, nogil=True, inline="always")
def _evict_lru(slot_key, slot_of, last_used, stats, key):
    """Give ``key`` a slot on a miss: a free one, else the least recently used (evicted).

    Counts the miss (``stats[1]``) and the eviction (``stats[2]``), stamps the slot as used
    now and returns it; the caller marks what the slot holds (``slot_gen`` / ``slot_len``).
    Inlined into its callers by numba.
    """
    stats[1] += 1
    n = slot_key.shape[0]
    best = 0
    bt = last_used[0]
    for t in range(n):
        if slot_key[t] < 0:
            best = t
            break
        if last_used[t] < bt:
            bt = last_used[t]
            best = t
    old = slot_key[best]
    if old >= 0:
        slot_of[old] = -1
        stats[2] += 1
    slot_key[best] = key
    slot_of[key] = best
    last_used[best] = stats[3]
    return best


@njit(cache=True, nogil=True)
def slot_acquire(slot_key, slot_of, slot_gen, last_used, stats, key, gen, need_full):
    """Find or make the slot for column ``key``.

    Returns ``(slot, hit)``. ``hit`` is True when the cached column is valid: computed for
    generation ``gen`` or complete (``slot_gen == -1``), and complete if ``need_full``.
    Otherwise the slot (the key's old slot, or the least recently used one, evicted) is
    assigned to ``key`` and the caller must fill ``buf[slot]`` and then call
    :func:`slot_filled`.
    """
    stats[3] += 1
    s = slot_of[key]
    if s >= 0:
        g = slot_gen[s]
        last_used[s] = stats[3]
        if g == -1 or (g == gen and not need_full):
            stats[0] += 1
            return s, True
        stats[1] += 1
        return s, False
    best = _evict_lru(slot_key, slot_of, last_used, stats, key)
    slot_gen[best] = -2
    return best, False


@njit(cache=True, nogil=True)
def slot_acquire_prefix(slot_key, slot_of, slot_len, last_used, stats, key, need):
    """Prefix-length variant of :func:`slot_acquire` (LIBSVM's cache semantics).

    Here ``slot_len`` (the ``slot_gen`` array of a :class:`SlotCache`) records how many
    leading positions of the caller's row order the column covers. Returns ``(slot, have)``:
    positions ``[have, need)`` are missing (none when ``have >= need``, a hit). The caller
    fills them and sets ``slot_len[slot] = need``. Valid as long as the caller only permutes
    rows *within* a covered prefix (shrinking) or appends rows after it.
    """
    stats[3] += 1
    s = slot_of[key]
    if s >= 0:
        last_used[s] = stats[3]
        have = slot_len[s]
        if have >= need:
            stats[0] += 1
            return s, have
        stats[1] += 1
        return s, max(have, 0)
    best = _evict_lru(slot_key, slot_of, last_used, stats, key)
    slot_len[best] = 0
    return best, 0


@njit(cache=True, nogil=True)
def slot_filled(slot_gen, slot, gen, full):
    """Record that ``buf[slot]`` now holds the column for generation ``gen`` (or all rows)."""
    slot_gen[slot] = -1 if full else gen


@njit(cache=True, nogil=True)
def slot_invalidate_all(slot_key, slot_of, slot_gen):
    """Forget every column (keys are reassigned)."""
    for t in range(slot_key.shape[0]):
        k = slot_key[t]
        if k >= 0:
            slot_of[k] = -1
        slot_key[t] = -1
        slot_gen[t] = -2


__all__ = [
    "KernelCache",
    "SlotCache",
    "slot_acquire",
    "slot_acquire_prefix",
    "slot_filled",
    "slot_invalidate_all",
]
