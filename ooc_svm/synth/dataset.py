"""The synthetic dataset's model: everything derived from the parameters alone.

:class:`SynthSpec` holds the parameters (checked once); :class:`SynthModel` derives the
popularity law, the column permutation, the hidden weights ``w`` and the label thresholds
(from a fixed pilot sample), and generates any block of rows. See :mod:`ooc_svm.synth`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..store.format import Shard
from .kernels import (
    _TF_TABLE,
    DENSE_COUNT,
    DENSE_REAL,
    VALUES_BINARY,
    VALUES_TF,
    VALUES_TFIDF,
    _gen_block,
    _gen_fields_block,
    _label_draws,
    _labels,
)

#: ``SynthSpec.values`` -> kernel code
VALUE_KINDS = {"tfidf": VALUES_TFIDF, "binary": VALUES_BINARY, "tf": VALUES_TF}
#: ``SynthSpec.dense_values`` -> kernel code
DENSE_KINDS = {"real": DENSE_REAL, "count": DENSE_COUNT}

#: split name -> stream id; the pilot sample (label thresholds) has its own stream
SPLITS = {"train": 0, "test": 1}
_PILOT_SPLIT = 1000
_MODEL_STREAM = 0x5EED_F00D
PILOT_ROWS = 20_000
PILOT_NNZ = 2_000_000


class SynthError(ValueError):
    """Invalid synth parameters or destination; the message says what to change."""


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
    values : {"tfidf", "binary", "tf"}
        Values of the popularity-drawn columns: ``(1 + log tf) * idf``, ``1``, or the term
        count ``tf`` itself.
    normalize : bool
        Scale every row to unit L2 norm.
    dense_features : int
        Leading columns ``0 .. dense_features-1`` outside the popularity law, each held by a
        row with probability ``dense_fraction`` (all of them with ``fields``).
    dense_fraction : float
        Probability that a row holds a given leading dense column.
    dense_values : {"real", "count"}
        Values of the dense columns: ``real`` in (0, 1), or ``count``: ln(1 + c) of a
        heavy-tailed count c >= 1.
    fields : tuple of int, optional
        Click-log rows: one level of each categorical field (its number of levels given
        here) after the dense columns, one-hot and hashed into the columns
        ``dense_features ..``; ``nnz_per_row`` must then be ``dense_features + len(fields)``.
    field_zipf : float
        Popularity exponent of the levels within a field (rank ``r`` ∝ ``(r + 1) ** -field_zipf``).
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
    values: str = "tfidf"
    normalize: bool = True
    dense_features: int = 0
    dense_fraction: float = 1.0
    dense_values: str = "real"
    fields: tuple[int, ...] | None = None
    field_zipf: float = 1.0

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
        if self.values not in VALUE_KINDS:
            bad(f"--values must be one of {sorted(VALUE_KINDS)}; got {self.values!r}")
        if self.dense_values not in DENSE_KINDS:
            bad(f"dense_values must be one of {sorted(DENSE_KINDS)}; got {self.dense_values!r}")
        if not (
            isinstance(self.dense_features, int | np.integer)
            and 0 <= self.dense_features < self.features
        ):
            bad(f"dense_features must be in [0, features={self.features}); "
                f"got {self.dense_features!r}")  # fmt: skip
        if not (0.0 < self.dense_fraction <= 1.0):
            bad(f"dense_fraction must be in (0, 1]; got {self.dense_fraction}")
        if self.fields is not None:
            if not (len(self.fields) >= 1 and all(int(c) >= 1 for c in self.fields)):
                bad(f"fields must list at least one field of >= 1 level; got {self.fields!r}")
            k = self.dense_features + len(self.fields)
            if float(self.nnz_per_row) != k:
                bad(f"with fields, --nnz-per-row must be dense_features + number of fields = "
                    f"{k}; got {self.nnz_per_row}")  # fmt: skip
            if not self.field_zipf >= 0.0:
                bad(f"field_zipf must be >= 0; got {self.field_zipf}")
        elif self.sparse_mean < 1.0:
            bad(f"--nnz-per-row {self.nnz_per_row} leaves less than 1 non-zero a row beyond "
                f"the {self.dense_features} dense columns (x {self.dense_fraction})")  # fmt: skip

    @property
    def sparse_mean(self) -> float:
        """Mean number of popularity-drawn non-zeros a row (beyond the dense columns)."""
        return float(self.nnz_per_row) - self.dense_features * self.dense_fraction

    @property
    def label_kind(self) -> str:
        return "ordinal" if self.ranks else "binary"


def zipf_law(d: int, zipf: float, offset: float) -> np.ndarray:
    """Parameters ``(c, sexp, A, B)`` of the continuous popularity law on ``[0, d)`` with
    density ∝ ``(x + c) ** -zipf``, ``c = 1 + offset`` (rank ``r`` covers ``[r, r + 1)``),
    for :func:`~ooc_svm.synth.kernels._draw_rank`."""
    c = 1.0 + float(offset)
    sexp = 1.0 - float(zipf)
    if abs(sexp) < 1e-6:  # the power form loses all precision near zipf = 1
        return np.array([c, 0.0, float(np.log1p(d / c)), 0.0])
    A = c**sexp
    return np.array([c, sexp, A, (d + c) ** sexp - A])


def rank_probabilities(zp: np.ndarray, d: int, ranks: np.ndarray | None = None) -> np.ndarray:
    """Draw probability of every popularity rank (or of ``ranks``) under the law ``zp``."""
    c, sexp, A, B = (float(v) for v in zp)
    r = np.arange(d, dtype=np.float64) if ranks is None else np.asarray(ranks, np.float64)
    if sexp == 0.0:
        return np.log1p(1.0 / (r + c)) / A
    return ((r + 1.0 + c) ** sexp - (r + c) ** sexp) / B


class SynthModel:
    """Popularity law, column permutation, idf, hidden weights and label thresholds.

    Build with :meth:`SynthModel.get` (cached); all arrays are read-only. Memory: a few
    arrays of the dataset's width (never of its length).

    Attributes
    ----------
    zp : ndarray of float64, (4,)
        Parameters of the popularity law for :func:`_draw_rank` (with ``fields``: one row
        per field, ``(F, 4)``).
    perm : ndarray of int32, (D - dense_features,)
        Column of every popularity rank (empty with ``fields``).
    popularity : ndarray of float64, (D,)
        Draw probability of every *column* of the popularity law (computed on access; 0 on
        the dense columns; not defined with ``fields``).
    idf : ndarray of float64, (D,)
        idf of every column (``idf_rank``: the same by popularity rank); length 1 unless
        ``values == "tfidf"``.
    w : ndarray of float64, (D,)
        Hidden weight vector (by column).
    cuts : ndarray of float64
        Score thresholds: one for binary labels, ``ranks - 1`` for ordinal labels.
    """

    def __init__(self, spec: SynthSpec) -> None:
        spec.validate()
        self.spec = spec
        d = int(spec.features)
        nd = int(spec.dense_features)
        rng = np.random.default_rng(np.random.SeedSequence([int(spec.seed), _MODEL_STREAM]))
        one = np.ones(1)
        if spec.fields is not None:
            self.card = np.asarray(spec.fields, dtype=np.int64)
            zp = np.stack([zipf_law(int(c), spec.field_zipf, 0.0) for c in self.card])
            perm = np.zeros(0, np.int32)
            idf_rank = idf = one
            self.hkey = np.uint64(
                np.random.SeedSequence([int(spec.seed), _MODEL_STREAM, 0xF1E1D]).generate_state(
                    1, np.uint64
                )[0]
            )
        else:
            ds = d - nd
            zp = zipf_law(ds, spec.zipf, spec.zipf_offset)
            perm = rng.permutation(ds).astype(np.int32)
            if nd:
                perm += np.int32(nd)
            if spec.values == "tfidf":
                # probability that a row of mean length holds the feature -> idf = 1 - log(df)
                p = rank_probabilities(zp, ds)
                df = -np.expm1(spec.sparse_mean * np.log1p(-np.minimum(p, 1 - 1e-12)))
                del p
                idf_rank = 1.0 - np.log(np.maximum(df, 1e-300))
                del df
                idf = np.ones(d)
                idf[perm] = idf_rank
            else:
                idf_rank = idf = one
        self.idf_rank = idf_rank
        mask = rng.random(d) < spec.w_density
        w = np.where(mask, rng.standard_normal(d), 0.0)
        if not mask.any():
            w[int(rng.integers(d))] = 1.0
        del mask
        self.zp, self.perm = zp, perm
        self.idf, self.w = idf, w
        for a in (zp, perm, idf, idf_rank, w):
            a.flags.writeable = False
        self.cuts = self._thresholds()

    @property
    def popularity(self) -> np.ndarray:
        """Draw probability of every column under the popularity law (module docstring)."""
        s = self.spec
        if s.fields is not None:
            raise SynthError("a click-log (fields) dataset has no single popularity law")
        out = np.zeros(int(s.features))
        out[self.perm] = rank_probabilities(self.zp, self.perm.shape[0])
        return out

    def expected_columns_used(self, rows: int) -> float:
        """Expected number of distinct columns that ``rows`` rows hold (popularity law and
        dense columns; the Poisson approximation of drawing ``rows * sparse_mean`` times)."""
        s = self.spec
        if s.fields is not None:
            raise SynthError("a click-log (fields) dataset has no single popularity law")
        ds = self.perm.shape[0]
        draws = float(rows) * s.sparse_mean
        used = 0.0
        for a in range(0, ds, 1 << 22):  # in chunks: bounded memory at any width
            p = rank_probabilities(self.zp, ds, np.arange(a, min(ds, a + (1 << 22))))
            used += float(-np.expm1(-draws * p).sum())
        dense = s.dense_features * -np.expm1(rows * np.log1p(-min(s.dense_fraction, 1 - 1e-12)))
        return used + float(dense)

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

    def label_scores(self, key_labels: Any, row0: int, score: np.ndarray) -> tuple[Any, Any]:
        """Jittered scores and label uniforms of rows ``row0 ..`` (see :func:`_label_draws`)."""
        s_out = np.empty_like(score)
        u = np.empty((score.shape[0], 2))
        _label_draws(np.int64(row0), score, key_labels, self.sigma, s_out, u)
        return s_out, u

    def rows(self, key: np.uint64, row0: int, n: int) -> tuple:
        """Raw rows ``row0 .. row0+n-1`` of a stream: (indptr, indices, data, score)."""
        s = self.spec
        if s.fields is not None:
            return _gen_fields_block(
                np.int64(row0),
                np.int64(n),
                key,
                self.hkey,
                np.int64(s.dense_features),
                np.int64(DENSE_KINDS[s.dense_values]),
                self.zp,
                self.card,
                self.w,
                bool(s.normalize),
            )
        return _gen_block(
            np.int64(row0),
            np.int64(n),
            key,
            float(s.sparse_mean),
            float(s.nnz_spread),
            float(s.tf_decay),
            _TF_TABLE,
            self.zp,
            self.perm,
            self.idf_rank,
            self.idf,
            self.w,
            np.int64(VALUE_KINDS[s.values]),
            bool(s.normalize),
            np.int64(s.dense_features),
            float(s.dense_fraction),
            np.int64(DENSE_KINDS[s.dense_values]),
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
