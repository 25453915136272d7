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
    _gen_block,
    _label_draws,
    _labels,
)

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

    def __init__(self, spec: SynthSpec) -> None:
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

    def label_scores(self, key_labels: Any, row0: int, score: np.ndarray) -> tuple[Any, Any]:
        """Jittered scores and label uniforms of rows ``row0 ..`` (see :func:`_label_draws`)."""
        s_out = np.empty_like(score)
        u = np.empty((score.shape[0], 2))
        _label_draws(np.int64(row0), score, key_labels, self.sigma, s_out, u)
        return s_out, u

    def rows(self, key: np.uint64, row0: int, n: int) -> tuple:
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
