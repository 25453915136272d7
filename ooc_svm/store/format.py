"""On-disk format shared by every backend: the shard dataclass, store metadata, checksums.

See ``docs/FORMAT.md`` for the layout on disk.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FORMAT_NAME = "ooc-svm-csr"
FORMAT_VERSION = 1

#: Label kinds a store can hold.
LABEL_KINDS = ("binary", "ordinal", "multiclass", "real")

#: Above this many distinct label values a store's labels are considered real-valued.
MAX_DISCRETE_LABELS = 1000

#: Sanity bounds checked before anything is read from a store (hostile metadata).
MAX_SHARDS = 10_000_000
MAX_ROWS_PER_SHARD = 1 << 31
MAX_FEATURES = 1 << 31


class StoreError(Exception):
    """A store cannot be opened, read or written; the message says what to do."""


class ShardCorruptError(StoreError):
    """A shard's bytes do not match the checksum recorded when it was written."""


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

    def to_scipy(self, n_features: int):
        """Return the rows as a ``scipy.sparse.csr_matrix`` (shares memory where it can)."""
        import scipy.sparse as sp

        return sp.csr_matrix(
            (self.data, self.indices, self.indptr), shape=(self.n_rows, n_features)
        )


def shard_checksum(shard: Shard) -> str:
    """CRC32 over the shard's arrays in a fixed order, as 8 hex digits."""
    crc = 0
    for arr in (shard.indptr, shard.indices, shard.data, shard.y):
        crc = zlib.crc32(np.ascontiguousarray(arr).view(np.uint8), crc)
    if shard.qid is not None:
        crc = zlib.crc32(np.ascontiguousarray(shard.qid).view(np.uint8), crc)
    return f"{crc & 0xFFFFFFFF:08x}"


@dataclass
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

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "store") -> StoreMeta:
        """Validate and build metadata; refuse unknown formats, newer versions, absurd sizes."""
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise StoreError(
                f"{where}: not an ooc-svm store (no '{FORMAT_NAME}' metadata); "
                "create one with `ooc-svm ingest INPUT STORE`"
            )
        version = d.get("version")
        if not isinstance(version, int) or version < 1:
            raise StoreError(f"{where}: invalid store format version {version!r}")
        if version > FORMAT_VERSION:
            raise StoreError(
                f"{where}: store format version {version} is newer than this ooc-svm supports "
                f"(version {FORMAT_VERSION}); upgrade ooc-svm"
            )
        try:
            shards = [ShardInfo(**s) for s in d["shards"]]
            meta = cls(
                backend=str(d["backend"]),
                n_rows=int(d["n_rows"]),
                n_features=int(d["n_features"]),
                nnz=int(d["nnz"]),
                label_kind=str(d["label_kind"]),
                labels=None if d.get("labels") is None else [float(v) for v in d["labels"]],
                has_qid=bool(d["has_qid"]),
                shards=shards,
                format=d["format"],
                version=version,
                compression=str(d.get("compression", "zstd")),
                sources=list(d.get("sources", [])),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"{where}: malformed store metadata ({e!r})") from None
        meta.validate(where)
        return meta

    def validate(self, where: str = "store") -> None:
        """Check internal consistency and sanity bounds; raise StoreError on anything absurd."""
        if self.label_kind not in LABEL_KINDS:
            raise StoreError(f"{where}: unknown label kind {self.label_kind!r}")
        if self.backend not in ("zarr", "parquet"):
            raise StoreError(f"{where}: unknown backend {self.backend!r}")
        if not (0 <= self.n_features <= MAX_FEATURES):
            raise StoreError(f"{where}: absurd n_features {self.n_features}")
        if len(self.shards) > MAX_SHARDS:
            raise StoreError(f"{where}: absurd number of shards {len(self.shards)}")
        row = 0
        nnz = 0
        for i, s in enumerate(self.shards):
            if not _safe_name(s.name):
                raise StoreError(
                    f"{where}: shard {i} has an unsafe name {s.name!r} (paths must stay "
                    "inside the store); refusing to read it"
                )
            if s.row_start != row or not (0 <= s.n_rows <= MAX_ROWS_PER_SHARD) or s.nnz < 0:
                raise StoreError(f"{where}: shard table is inconsistent at shard {i} ({s.name})")
            row += s.n_rows
            nnz += s.nnz
        if row != self.n_rows or nnz != self.nnz:
            raise StoreError(
                f"{where}: shard table sums to {row} rows / {nnz} nnz but metadata says "
                f"{self.n_rows} / {self.nnz}"
            )


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


def infer_label_kind(values: np.ndarray) -> tuple[str, list[float] | None]:
    """Decide the label kind from the sorted distinct label values of a store.

    Two values → ``binary``; integer values 3+ → ``ordinal`` (ranks; ``multiclass`` can be
    requested by the solver); non-integers or too many values → ``real``.
    """
    values = np.unique(np.asarray(values, dtype=np.float64))
    if values.size > MAX_DISCRETE_LABELS:
        return "real", None
    if values.size <= 2:
        return "binary", [float(v) for v in values]
    if np.all(values == np.round(values)):
        return "ordinal", [float(v) for v in values]
    return "real", None
