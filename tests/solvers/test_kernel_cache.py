"""Byte-bounded LRU kernel caches (Python and numba flavours)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ooc_svm.solvers.kernel_cache import KernelCache, SlotCache, slot_acquire, slot_filled


def test_lru_eviction_and_budget():
    c = KernelCache(max_bytes=3 * 80)  # three rows of 10 float64
    for k in range(3):
        c.put(k, np.full(10, float(k)))
    assert len(c) == 3 and c.nbytes == 240
    assert c.get(0)[0] == 0.0  # 0 becomes most recently used
    c.put(3, np.full(10, 3.0))  # evicts 1 (LRU)
    assert 1 not in c and 0 in c and 3 in c
    assert c.get(1) is None
    st = c.stats()
    assert st["hits"] == 1 and st["misses"] == 1 and st["evictions"] == 1
    assert st["nbytes"] <= st["max_bytes"]
    c.put(9, np.zeros(1000))  # larger than the budget: not stored
    assert 9 not in c and c.nbytes == 240
    c.invalidate(0)
    assert 0 not in c and c.nbytes == 160
    c.clear()
    assert len(c) == 0 and c.nbytes == 0


def test_get_or_compute():
    c = KernelCache.from_mb(1)
    calls = []

    def compute(keys):
        calls.append(keys.tolist())
        return np.outer(keys, np.ones(4))

    r = c.get_or_compute([5, 2, 5], compute)
    assert r.shape == (3, 4) and r[0, 0] == 5 and r[1, 0] == 2
    assert calls == [[5, 2]]
    r = c.get_or_compute([2, 7], compute)
    assert calls[-1] == [7] and r[1, 0] == 7
    assert c.stats()["hits"] == 1


@njit(cache=False)
def _use(buf, slot_key, slot_of, slot_gen, last_used, stats, keys, gen):
    out = np.empty(keys.shape[0], dtype=np.int64)
    for t in range(keys.shape[0]):
        k = keys[t]
        s, hit = slot_acquire(slot_key, slot_of, slot_gen, last_used, stats, k, gen, False)
        if not hit:
            buf[s, :] = k
            slot_filled(slot_gen, s, gen, False)
        out[t] = int(buf[s, 0])
    return out


def test_slot_cache_lru():
    sc = SlotCache(max_bytes=2 * 4 * 8, n_keys=10, length=8)  # two slots
    assert sc.n_slots == 2
    got = _use(*sc.arrays(), np.array([1, 2, 1, 3, 1, 2], dtype=np.int64), 0)
    assert got.tolist() == [1, 2, 1, 3, 1, 2]
    st = sc.stats_dict()
    # 1 miss, 2 miss, 1 hit, 3 miss (evicts 2), 1 hit, 2 miss (evicts 3)
    assert (st["hits"], st["misses"], st["evictions"]) == (2, 4, 2)
    # a new generation makes partial columns stale
    _use(*sc.arrays(), np.array([1], dtype=np.int64), 1)
    assert sc.stats_dict()["misses"] == 5
