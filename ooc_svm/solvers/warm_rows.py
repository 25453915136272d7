"""What a model records about its training rows, and how those rows are found again in a
store (the part of :mod:`ooc_svm.solvers.warm` below the warm starts themselves).

:func:`rows_record` is a model's ``info["rows"]``: its rows, shards, a hash of the shard table
and each shard's rows, non-zeros and checksum. :func:`rows_status` says how those rows sit
in a store (the store's first shards, the same rows by fingerprint, what ``ooc-svm drop``
left of them, or changed); :func:`locate_rows` finds rows by a fingerprint of their columns,
values and label in one streamed pass (a store re-ingested with other shard sizes).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..model.model import Model
    from ..store.base import Store
    from ..store.format import Shard, StoreMeta


def _shards_hash(meta: StoreMeta, k: int) -> str:
    h = hashlib.sha256()
    for info in meta.shards[:k]:
        h.update(f"{info.row_start}:{info.n_rows}:{info.nnz}:{info.checksum};".encode())
    return h.hexdigest()


def rows_record(meta: StoreMeta) -> dict[str, Any]:
    """``info["rows"]`` of a model trained on a store with ``meta``: its rows, shards and
    the SHA-256 of the shard table (a later append keeps it as the table's prefix)."""
    rec: dict[str, Any] = {
        "n_rows": int(meta.n_rows),
        "n_shards": len(meta.shards),
        "shards_sha256": _shards_hash(meta, len(meta.shards)),
        "n_features": int(meta.n_features),
        # each shard's rows, non-zeros and checksum: what `ooc-svm drop` leaves is matched
        # by them (the shards' row_start moves, their bytes do not)
        "shards": [[int(s.n_rows), int(s.nnz), str(s.checksum)] for s in meta.shards],
    }
    prints = getattr(meta, "fingerprints", None) or []
    if prints and prints[-1][0] == meta.n_rows:  # the rows' own fingerprint (any shards)
        rec["fingerprint"] = str(prints[-1][1])
    return rec


def _fingerprint_at(meta: StoreMeta, n_rows: int) -> str | None:
    """The store's fingerprint of its first ``n_rows`` rows, when it has one there."""
    for n, fp in getattr(meta, "fingerprints", None) or []:
        if n == n_rows:
            return str(fp)
    return None


def rows_status(model: Model, meta: StoreMeta) -> str:
    """How the model's training rows sit in a store: ``"prefix"`` (its first shards are the
    model's, unchanged: global row indices carry over), ``"dropped"`` (``ooc-svm drop``
    removed some of its oldest shards, the rest of its shards begin the store: global row
    indices move down by :func:`dropped_rows`), ``"changed"`` (overwritten, re-ingested or
    other shards removed), ``"unknown"`` (the model records no rows: its row indices are
    taken as they are) or ``"any"`` (:func:`lenient`: any rows will do)."""
    rec = model.info.get("rows") if isinstance(model.info, dict) else None
    if isinstance(rec, dict) and rec.get("any"):
        return "any"
    if not isinstance(rec, dict) or "shards_sha256" not in rec:
        return "unknown"
    k = int(rec.get("n_shards", -1))
    n = int(rec.get("n_rows", -1))
    if n <= meta.n_rows:
        if 0 <= k <= len(meta.shards) and _shards_hash(meta, k) == rec["shards_sha256"]:
            return "prefix"
        # the same rows in other shards (re-ingested with other shard sizes): their fingerprint
        fp = rec.get("fingerprint")
        if fp is not None and _fingerprint_at(meta, n) == fp:
            return "prefix"
    if dropped_rows(model, meta) is not None:
        return "dropped"
    return "changed"


def dropped_rows(model: Model, meta: StoreMeta) -> int | None:
    """Rows of the model's oldest shards that ``ooc-svm drop`` removed from the store, when
    the model's other shards (by rows, non-zeros and checksum, in order) begin the store;
    None otherwise (nothing dropped, or other changes). The model's row r is then the
    store's row r − that count (rows below it are gone)."""
    rec = model.info.get("rows") if isinstance(model.info, dict) else None
    table = rec.get("shards") if isinstance(rec, dict) else None
    if not isinstance(table, list) or not table:
        return None
    have = [[int(s.n_rows), int(s.nnz), str(s.checksum)] for s in meta.shards]
    if not have:
        return None
    for j in range(1, len(table)):
        if list(table[j]) != have[0]:  # only where the store's first shard sits is compared
            continue
        kept = table[j:]
        if [list(e) for e in kept] == have[: len(kept)]:
            return int(sum(int(e[0]) for e in table[:j]))
    return None


def lenient(model: Model, meta: StoreMeta) -> Model:
    """``model`` as a start for any rows (scikit-learn's ``warm_start``: the next ``fit``
    may get other rows): its row record is dropped unless the store still begins with its
    rows, so that nothing is refused for the rows (perf starts from w and its planes'
    points, valid cuts on any rows; the dual solvers from the support vectors found)."""
    if rows_status(model, meta) == "prefix":
        return model
    out = _copy_model(model)
    out.info["rows"] = {"any": True}
    return out


def trained_rows(model: Model) -> int | None:
    """Rows the model was trained on (``info["rows"]``), or None."""
    rec = model.info.get("rows") if isinstance(model.info, dict) else None
    return int(rec["n_rows"]) if isinstance(rec, dict) and "n_rows" in rec else None


def _copy_model(model: Model) -> Model:
    import dataclasses

    return dataclasses.replace(model, info=dict(model.info))


_K1 = np.uint64(0x9E3779B97F4A7C15)


_K2 = np.uint64(0xC2B2AE3D27D4EB4F)


_K3 = np.uint64(0x165667B19E3779F9)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def row_fingerprints(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, ysign: np.ndarray
) -> np.ndarray:
    """A 64-bit fingerprint per CSR row of its columns, its float32 values and its label
    sign (independent of the order of the entries within the row)."""
    ix = np.asarray(indices).astype(np.uint64)
    vb = np.asarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        e = _mix(ix * _K1 + vb)
        cs = np.zeros(e.shape[0] + 1, dtype=np.uint64)
        np.cumsum(e, out=cs[1:])
        ip = np.asarray(indptr, dtype=np.int64)
        s = cs[ip[1:]] - cs[ip[:-1]]
        nnz = np.diff(ip).astype(np.uint64)
        lab = (np.asarray(ysign) > 0).astype(np.uint64)
        return _mix(s ^ (nnz * _K2) ^ (lab * _K3))


def fingerprint_fn(shard: Shard, bc: Any) -> tuple[np.ndarray, np.ndarray]:
    """(global rows, fingerprints) of the shard's rows whose fingerprint is in ``bc[0]``
    (sorted); ``bc[1]``: the positive label."""
    targets, pos = bc
    y = np.where(np.asarray(shard.y) == pos, 1.0, -1.0)
    fp = row_fingerprints(shard.indptr, shard.indices, shard.data, y)
    hit = np.flatnonzero(np.isin(fp, targets))
    return hit.astype(np.int64) + int(shard.row_start), fp[hit]


def concat_reduce(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])


def locate_rows(
    store: Store, engine: Engine, X: Any, ysign: np.ndarray, pos: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, found)``: the global rows of ``store`` holding the rows of ``X`` with labels
    ``ysign`` (±1), found by fingerprint in one streamed pass (identical rows matched one to
    one), and whether each was found (its row is -1 where not)."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    X.sort_indices()
    fps = row_fingerprints(X.indptr, X.indices, X.data, ysign)
    targets = np.unique(fps)
    found = engine.map_reduce(store, fingerprint_fn, (targets, pos), reduce=concat_reduce)
    rows, rfp = (np.zeros(0, np.int64), np.zeros(0, np.uint64)) if found is None else found
    order = np.lexsort((rows, rfp))
    rows, rfp = rows[order], rfp[order]
    out = np.full(fps.shape[0], -1, dtype=np.int64)
    # the j-th support vector with fingerprint f takes the j-th store row with it
    seen: dict[int, int] = {}
    lo = np.searchsorted(rfp, fps, side="left")
    hi = np.searchsorted(rfp, fps, side="right")
    for i, f in enumerate(fps.tolist()):
        j = seen.get(f, 0)
        seen[f] = j + 1
        if lo[i] + j < hi[i]:
            out[i] = rows[lo[i] + j]
    return out, out >= 0
