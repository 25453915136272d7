"""On-disk format shared by every backend: the shard dataclass, store metadata, checksums.

See ``docs/FORMAT.md`` for the layout on disk.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .backends import backend_names
from .errors import CODECS
from .errors import ShardCorruptError as ShardCorruptError  # where the errors were named first
from .errors import StoreChangedError as StoreChangedError
from .errors import StoreError as StoreError

if TYPE_CHECKING:
    import scipy.sparse as sp

FORMAT_NAME = "ooc-svm-csr"
#: version 2: shard checksums are XXH3-64 (version 1 stores, CRC-32, are still read)
FORMAT_VERSION = 2

#: checksum algorithm of each format version
CHECKSUM_ALGOS = {1: "crc32", 2: "xxh3_64"}

#: Key of the checksum of the metadata document itself (every field but this one): what a
#: solver trusts without reading the shards (``labels``, ``label_kind``, ``n_features``,
#: ``has_qid``, the shard table) cannot be edited unnoticed. Stores written before it existed
#: have none and are still read; their labels are checked against every shard's ``y``.
META_CHECKSUM_KEY = "meta_checksum"

#: Label kinds a store can hold.
LABEL_KINDS = ("binary", "ordinal", "multiclass", "real")

#: Above this many distinct label values a store's labels are considered real-valued.
MAX_DISCRETE_LABELS = 1000

#: Sanity bounds checked before anything is read from a store (hostile metadata).
#: A 100,000-shard table is about 12 MB of JSON; a 1,000,000-shard one would take ~0.5 GB
#: to parse, so metadata files are refused above MAX_META_BYTES before they are parsed.
MAX_SHARDS = 100_000
MAX_META_BYTES = 16 << 20
MAX_ROWS_PER_SHARD = 1 << 31
MAX_NNZ_PER_SHARD = 1 << 31
MAX_FEATURES = 1 << 31

#: Default bound on the dense weight vector ``w`` (float64) a solver may allocate: MiB.
DEFAULT_DENSE_LIMIT_MB = 4096


@dataclass
class Shard:
    """A block of consecutive rows in CSR form.

    Attributes
    ----------
    indptr : ndarray of int64, shape (n_rows + 1,)
    indices : ndarray of int32, shape (nnz,)
        0-based column indices, strictly increasing within a row.
    data : ndarray of float32, shape (nnz,)
    y : ndarray of float64, shape (n_rows,)
        Labels as written in the input.
    qid : ndarray of int64 or None
        Query id of every row when the store has qids.
    row_start : int
        Global index of the shard's first row.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray
    qid: np.ndarray | None = None
    row_start: int = 0

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0]) if self.indptr.shape[0] else 0

    @property
    def nbytes(self) -> int:
        n = self.indptr.nbytes + self.indices.nbytes + self.data.nbytes + self.y.nbytes
        return n + (self.qid.nbytes if self.qid is not None else 0)

    def to_scipy(self, n_features: int) -> sp.csr_matrix:
        """Return the rows as a ``scipy.sparse.csr_matrix`` (shares memory where it can)."""
        import scipy.sparse as sp

        return sp.csr_matrix(
            (self.data, self.indices, self.indptr), shape=(self.n_rows, n_features)
        )


def shard_checksum(shard: Shard, version: int = FORMAT_VERSION) -> str:
    """Checksum of the shard's arrays in a fixed order, as hex digits.

    Format version 1: CRC-32 (zlib), 8 hex digits; version 2: XXH3-64, 16 hex digits
    (about 8x faster here: 4 GB/s against 0.5 GB/s).
    """
    arrays = [shard.indptr, shard.indices, shard.data, shard.y]
    if shard.qid is not None:
        arrays.append(shard.qid)
    if version == 1:
        crc = 0
        for arr in arrays:
            crc = zlib.crc32(np.ascontiguousarray(arr).view(np.uint8).data, crc)
        return f"{crc & 0xFFFFFFFF:08x}"
    import xxhash

    h = xxhash.xxh3_64()
    for arr in arrays:
        h.update(np.ascontiguousarray(arr).view(np.uint8).data)
    return h.hexdigest()


_FP_K = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
    np.uint64(0x27D4EB2F165667C5),
)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def rows_fingerprint(shard: Shard) -> int:
    """A 64-bit fingerprint of the shard's rows at their global positions (``row_start``):
    the wrapping sum over rows of a hash of the row's index, label, qid, columns and float32
    values. Sums over shards add up to the same value however the rows are cut into shards,
    so two stores of the same rows in the same order have the same
    :attr:`StoreMeta.fingerprints` (``ingest`` with other ``--shard-rows``)."""
    K1, K2, K3, K4 = _FP_K
    with np.errstate(over="ignore"):
        ix = np.asarray(shard.indices).astype(np.uint64)
        vb = np.asarray(shard.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
        cs = np.zeros(ix.shape[0] + 1, dtype=np.uint64)
        np.cumsum(_mix64(ix * K1 + vb), out=cs[1:])
        ip = np.asarray(shard.indptr, dtype=np.int64)
        h = (cs[ip[1:]] - cs[ip[:-1]]) ^ (np.diff(ip).astype(np.uint64) * K2)
        h ^= _mix64(np.asarray(shard.y, dtype=np.float64).view(np.uint64) + K3)
        if shard.qid is not None:
            h ^= _mix64(np.asarray(shard.qid).astype(np.uint64) * K1 + K2)
        rows = np.arange(h.shape[0], dtype=np.uint64) + np.uint64(int(shard.row_start) + 1)
        return int(_mix64(h + rows * K4).sum(dtype=np.uint64))


def fingerprint_hex(value: int) -> str:
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


@dataclass(slots=True)
class ShardInfo:
    """One row of the shard table."""

    name: str
    row_start: int
    n_rows: int
    nnz: int
    checksum: str


@dataclass
class StoreMeta:
    """Store-wide metadata, stored as JSON (Zarr group attributes / Parquet ``_ooc_svm.json``)."""

    backend: str
    n_rows: int = 0
    n_features: int = 0
    nnz: int = 0
    label_kind: str = "real"
    labels: list[float] | None = None
    has_qid: bool = False
    shards: list[ShardInfo] = field(default_factory=list)
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    compression: str = "zstd"
    sources: list[str] = field(default_factory=list)
    #: identity of this store's contents, new at every ingest and append (not in version 1)
    uuid: str = ""
    #: ``ingest --hash-bits``: ``{"bits", "hash", "key", "collisions"}`` (None: not hashed;
    #: left out of the JSON then), see :func:`hashing_info`
    hashing: dict[str, Any] | None = None
    #: ``[[n_rows, hex], ...]``: after each ingest or append, the rows so far and the
    #: :func:`rows_fingerprint` of all of them (left out of the JSON when empty: stores
    #: written before it, views of a part of a store)
    fingerprints: list[list[Any]] = field(default_factory=list)

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def to_dict(self) -> dict[str, Any]:
        """The metadata document as written, with its :data:`META_CHECKSUM_KEY`."""
        d = dataclasses.asdict(self)
        if d.get("hashing") is None:
            d.pop("hashing", None)
        if not d.get("fingerprints"):
            d.pop("fingerprints", None)
        d[META_CHECKSUM_KEY] = meta_checksum(d)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: object, where: str = "store") -> StoreMeta:
        """Validate and build metadata; refuse unknown formats, newer versions, absurd sizes.

        ``d`` is the document as read from disk: anything, checked here.
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise StoreError(
                f"{where}: not an ooc-svm store (no '{FORMAT_NAME}' metadata); "
                "create one with `ooc-svm ingest INPUT STORE`"
            )
        version = d.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise StoreError(f"{where}: invalid store format version {version!r}")
        if version > FORMAT_VERSION:
            raise StoreError(
                f"{where}: store format version {version} is newer than this ooc-svm supports "
                f"(version {FORMAT_VERSION}); upgrade ooc-svm"
            )
        try:
            meta = cls(
                backend=_get(d, "backend", str, where),
                n_rows=_get(d, "n_rows", int, where),
                n_features=_get(d, "n_features", int, where),
                nnz=_get(d, "nnz", int, where),
                label_kind=_get(d, "label_kind", str, where),
                labels=_labels(d.get("labels"), where),
                has_qid=_get(d, "has_qid", bool, where),
                shards=_shard_table(d.get("shards"), where),
                format=FORMAT_NAME,
                version=version,
                compression=_get(d, "compression", str, where, "zstd"),
                sources=_str_list(d.get("sources", []), "sources", where),
                uuid=_get(d, "uuid", str, where, ""),
                hashing=_hashing(d.get("hashing"), where),
                fingerprints=_fingerprints(d.get("fingerprints", [])),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(
                f"{where}: malformed store metadata ({e}); re-ingest the store"
            ) from None
        meta.validate(where)
        if META_CHECKSUM_KEY in d:
            try:
                ok = d[META_CHECKSUM_KEY] == meta_checksum(d)
            except (TypeError, ValueError):  # not JSON-serialisable back (NaN, ...)
                ok = False
            if not ok:
                raise StoreError(
                    f"{where}: the store metadata was changed after ingest (metadata "
                    "checksum mismatch: labels, label kind, sizes or shard table edited); "
                    "re-ingest the store"
                )
        return meta

    def validate(self, where: str = "store") -> None:
        """Check internal consistency and sanity bounds; raise StoreError on anything absurd."""
        if self.label_kind not in LABEL_KINDS:
            raise StoreError(f"{where}: unknown label kind {self.label_kind!r}")
        if self.backend not in backend_names():
            raise StoreError(f"{where}: unknown backend {self.backend!r}")
        if self.compression not in CODECS:
            raise StoreError(f"{where}: unknown compression {self.compression!r}")
        if self.labels is not None and (
            any(b <= a for a, b in zip(self.labels, self.labels[1:], strict=False))
        ):
            raise StoreError(
                f"{where}: the store metadata's labels are not sorted and distinct; "
                "re-ingest the store"
            )
        if self.label_kind != "real" and self.labels is None:
            raise StoreError(
                f"{where}: label kind {self.label_kind!r} without a list of labels in the "
                "store metadata; re-ingest the store"
            )
        if self.n_rows < 0 or self.nnz < 0:
            raise StoreError(f"{where}: negative n_rows / nnz in the store metadata")
        if not (0 <= self.n_features <= MAX_FEATURES):
            raise StoreError(f"{where}: absurd n_features {self.n_features}")
        if self.hashing is not None and self.n_features != 1 << int(self.hashing["bits"]):
            raise StoreError(
                f"{where}: the metadata says the features are hashed into 2^"
                f"{self.hashing['bits']} columns but n_features is {self.n_features}; "
                "re-ingest the store"
            )
        if len(self.shards) > MAX_SHARDS:
            raise StoreError(
                f"{where}: {len(self.shards):,} shards, more than the {MAX_SHARDS:,} a store may "
                "have; ingest with larger shards (--shard-mb)"
            )
        row = 0
        nnz = 0
        for i, s in enumerate(self.shards):
            if not _safe_name(s.name):
                raise StoreError(
                    f"{where}: shard {i} has an unsafe name {s.name!r} (paths must stay "
                    "inside the store); refusing to read it"
                )
            if (
                s.row_start != row
                or not (0 <= s.n_rows <= MAX_ROWS_PER_SHARD)
                or not (0 <= s.nnz <= MAX_NNZ_PER_SHARD)
            ):
                raise StoreError(f"{where}: shard table is inconsistent at shard {i} ({s.name})")
            row += s.n_rows
            nnz += s.nnz
        if row != self.n_rows or nnz != self.nnz:
            raise StoreError(
                f"{where}: shard table sums to {row} rows / {nnz} nnz but metadata says "
                f"{self.n_rows} / {self.nnz}"
            )


#: ``ingest --hash-bits``: the hash function and its key, as recorded in the metadata
HASH_NAME = "murmurhash3_32"
HASH_KEY = "decimal text of the 1-based feature number (sklearn FeatureHasher, pairs)"
#: the largest ``--hash-bits`` (2^31 columns: the store's limit)
MAX_HASH_BITS = 31


def hashing_info(bits: int, collisions: int = 0) -> dict[str, Any]:
    """The metadata entry of a store whose features are hashed into 2^``bits`` columns."""
    return {"bits": int(bits), "hash": HASH_NAME, "key": HASH_KEY, "collisions": int(collisions)}


def hashing_label(h: dict[str, Any] | None) -> str:
    """One line describing a hashing entry (of a store or a model) for messages."""
    if not h:
        return "no feature hashing"
    return f"--hash-bits {h['bits']} ({h.get('hash', HASH_NAME)}, signed)"


def same_hashing(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """True when two hashing entries map features to the same columns."""
    if not a or not b:
        return not a and not b
    return (a["bits"], a.get("hash"), a.get("key")) == (b["bits"], b.get("hash"), b.get("key"))


def _fingerprints(v: Any) -> list[list[Any]]:
    ok = isinstance(v, list) and all(
        isinstance(e, list)
        and len(e) == 2
        and isinstance(e[0], int)
        and not isinstance(e[0], bool)
        and e[0] >= 0
        and isinstance(e[1], str)
        and len(e[1]) == 16
        for e in v
    )
    if not ok:
        raise TypeError("'fingerprints' must be a list of [rows, 16 hex digits]")
    return [list(e) for e in v]


def _hashing(v: Any, where: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise TypeError("hashing must be an object")
    bits = _get(v, "bits", int, where)
    collisions = _get(v, "collisions", int, where, 0)
    if not 1 <= bits <= MAX_HASH_BITS or collisions < 0:
        raise ValueError(f"hashing bits {bits} / collisions {collisions} out of range")
    if v.get("hash") != HASH_NAME or v.get("key") != HASH_KEY:
        raise ValueError(f"unknown feature hashing {v.get('hash')!r}")
    return hashing_info(bits, collisions)


def meta_checksum(doc: dict[str, Any]) -> str:
    """XXH3-64 of a metadata document (its fields but :data:`META_CHECKSUM_KEY`) in canonical
    JSON (sorted keys, no spaces), as hex digits."""
    import xxhash

    body = {k: v for k, v in doc.items() if k != META_CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return xxhash.xxh3_64_hexdigest(text.encode())


def _safe_name(name: str) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 64
        and all(c.isalnum() or c in "_-." for c in name)
        and not name.startswith(".")
    )


def shard_name(i: int) -> str:
    """Canonical name of the i-th shard."""
    return f"s{i:07d}"


def infer_label_kind(values: np.ndarray, has_qid: bool = False) -> tuple[str, list[float] | None]:
    """Decide the label kind from the sorted distinct label values of a store.

    Two values → ``binary``; 3+ integer values → ``ordinal`` (ranks) when the rows have
    ``qid:`` (SVMrank data), else ``multiclass`` (class ids, one-vs-rest, as LIBSVM /
    LIBLINEAR read them); non-integers or too many values → ``real``.
    """
    values = np.unique(np.asarray(values, dtype=np.float64))
    if values.size > MAX_DISCRETE_LABELS:
        return "real", None
    if values.size <= 2:
        return "binary", [float(v) for v in values]
    if np.all(values == np.round(values)):
        return ("ordinal" if has_qid else "multiclass"), [float(v) for v in values]
    return "real", None


def label_kind_note(meta: StoreMeta) -> str:
    """One line saying which label kind a store has and how to choose another."""
    kind, labels = meta.label_kind, meta.labels
    n = len(labels) if labels is not None else None
    if kind == "multiclass":
        return (
            f"labels: {n} classes → multiclass (one-vs-rest); for ordinal regression "
            "re-ingest with --label-kind ordinal"
        )
    if kind == "ordinal":
        how = "ranks within each qid" if meta.has_qid else "ordered targets"
        return (
            f"labels: {n} integer values → ordinal ({how}); for classes (one-vs-rest) "
            "re-ingest with --label-kind multiclass"
        )
    if kind == "binary":
        vals = ", ".join(f"{v:g}" for v in labels or [])
        return f"labels: {n} values ({vals}) → binary"
    return "labels: real-valued (regression targets)"


def check_feature_bound(meta: StoreMeta, limit_mb: float = DEFAULT_DENSE_LIMIT_MB) -> None:
    """Refuse a store whose dense float64 weight vector would exceed ``limit_mb`` MiB.

    Linear solvers keep ``w`` (and a few vectors like it) dense over ``n_features``; a single
    input line such as ``1 2147483648:1`` would otherwise make them ask for 16 GiB.

    Raises
    ------
    StoreError
        Naming the store, the size and the fixes.
    """
    need = 8 * int(meta.n_features) / 2**20
    if need > float(limit_mb):
        raise StoreError(
            f"store has {meta.n_features:,} features: a dense weight vector needs "
            f"{need:,.0f} MiB, more than the limit of {float(limit_mb):,.0f} MiB; hash the "
            "features into fewer columns, or re-ingest with a smaller --n-features, or raise "
            "the limit (--dense-limit-mb)"
        )


def _get(d: dict[str, Any], key: str, typ: type, where: str, default: Any = KeyError) -> Any:
    if key not in d:
        if default is KeyError:
            raise KeyError(f"missing key {key!r}")
        return default
    v = d[key]
    ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
    if not ok:
        raise TypeError(f"{key!r} must be {typ.__name__}, not {type(v).__name__} {v!r:.40}")
    return v


def _labels(v: Any, where: str) -> list[float] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > MAX_DISCRETE_LABELS:
        raise TypeError("'labels' must be a list of at most 1000 numbers or null")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x):
            raise TypeError(f"'labels' holds {x!r:.40}, not a finite number")
        out.append(float(x))
    return out


def _str_list(v: Any, key: str, where: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"{key!r} must be a list of strings")
    return list(v)


def _shard_table(v: Any, where: str) -> list[ShardInfo]:
    if not isinstance(v, list):
        raise TypeError("'shards' must be a list")
    if len(v) > MAX_SHARDS:
        raise ValueError(
            f"{len(v):,} shards, more than the {MAX_SHARDS:,} a store may have; ingest with "
            "larger shards (--shard-mb)"
        )
    out = []
    for i, s in enumerate(v):
        if not isinstance(s, dict) or set(s) != {"name", "row_start", "n_rows", "nnz", "checksum"}:
            raise TypeError(f"shard {i} must have exactly name, row_start, n_rows, nnz, checksum")
        out.append(
            ShardInfo(
                _get(s, "name", str, where),
                _get(s, "row_start", int, where),
                _get(s, "n_rows", int, where),
                _get(s, "nnz", int, where),
                _get(s, "checksum", str, where),
            )
        )
    return out
