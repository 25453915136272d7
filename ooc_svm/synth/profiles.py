"""Dataset profiles for ``synth --like``: the shapes of public benchmark sets.

Each profile sets the :class:`~ooc_svm.synth.dataset.SynthSpec` fields so that generated
rows have the public set's published statistics — number of columns, mean non-zeros a row,
value kind, label balance — and, where nothing is published, a stated assumption (row-length
spread, popularity exponent, label noise). The number of rows is the caller's (``--rows``):
the columns and the per-row statistics do not change with it. docs/CLI.md ("synth --like")
lists the figures with their sources; :data:`PROFILES` holds them with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dataset import SynthError

#: levels of the 26 categorical fields of the Criteo Display Advertising Challenge (Kaggle)
#: training set, as used by the DLRM reference implementation's Kaggle configuration
CRITEO_FIELD_LEVELS = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
    14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip


@dataclass(frozen=True)
class Profile:
    """A public dataset's shape and where its figures come from.

    Attributes
    ----------
    name : str
        ``--like`` name.
    title : str
        The public set it imitates.
    rows, test_rows : int
        Published rows of its training (and test) set (``--rows`` is the caller's).
    features : int
        Published number of columns.
    nnz_per_row : float
        Published mean non-zeros a row.
    positive : float
        Share of positive labels (after label noise).
    options : dict
        Further :class:`~ooc_svm.synth.dataset.SynthSpec` fields.
    sources : tuple of str
        Where the published figures come from.
    assumptions : tuple of str
        What is not published and was chosen.
    """

    name: str
    title: str
    rows: int
    test_rows: int
    features: int
    nnz_per_row: float
    positive: float
    options: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()

    def spec_options(self) -> dict[str, Any]:
        """``SynthSpec`` keywords (all but ``seed``) of this profile."""
        noise = float(self.options.get("noise", 0.05))
        # labels are thresholded at positive_fraction, then a fraction `noise` is flipped
        pf = (self.positive - noise) / (1.0 - 2.0 * noise)
        return {
            "features": self.features,
            "nnz_per_row": self.nnz_per_row,
            "positive_fraction": pf,
            **self.options,
        }

    @property
    def value_kind(self) -> str:
        """Words for the values (docs and the benchmark table)."""
        o = self.options
        if o.get("fields"):
            return f"{o['dense_features']} {o['dense_values']}s + {len(o['fields'])} one-hot hashed"
        kind = {"tfidf": "tf-idf", "tf": "term counts", "binary": "binary"}[o["values"]]
        if o.get("dense_features"):
            kind += f" + {o['dense_features']} {o.get('dense_values', 'real')}-valued"
        return kind + (", rows L2-normalised" if o.get("normalize", True) else "")


_LIBSVM = "LIBSVM data sets page (www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html)"

PROFILES: dict[str, Profile] = {
    "rcv1": Profile(
        name="rcv1",
        title="rcv1.binary (Reuters RCV1-v2, CCAT+ECAT against GCAT+MCAT)",
        rows=20_242,
        test_rows=677_399,
        features=47_236,
        nnz_per_row=1_498_952 / 20_242,  # 74.05
        positive=0.52,
        options={
            "values": "tfidf",
            "normalize": True,
            "nnz_spread": 0.6,
            "zipf": 1.0,
            "zipf_offset": 5.0,
            "noise": 0.03,
            "w_density": 0.1,
        },  # fmt: skip
        sources=(
            f"{_LIBSVM}: rcv1.binary 20,242 / 677,399 rows, 47,236 features",
            "1,498,952 non-zeros in rcv1_train.binary (rleblond/asaga, src utils.scala)",
            "Lewis et al., JMLR 5 (2004): log tf-idf (ltc), cosine-normalised rows; Joachims, "
            "KDD 2006: 47,236 features, density 0.16 % (~76 a row), CCAT almost balanced",
        ),
        assumptions=(
            "positive share 0.52, row-length log-sd 0.6, Zipf exponent 1.0 (offset 5), "
            "3 % label noise",
        ),
    ),
    "url": Profile(
        name="url",
        title="url (Ma, Saul, Savage, Voelker, ICML 2009: malicious URLs, 121 days)",
        rows=2_396_130,
        test_rows=0,
        features=3_231_961,
        nnz_per_row=277_058_644 / 2_396_130,  # 115.63
        positive=0.33,
        options={
            "values": "binary",
            "normalize": False,
            "dense_features": 64,
            "dense_fraction": 0.9,
            "dense_values": "real",
            "nnz_spread": 0.3,
            "zipf": 1.0,
            "zipf_offset": 5.0,
            "noise": 0.02,
            "w_density": 0.1,
        },  # fmt: skip
        sources=(
            f"{_LIBSVM}: url 2,396,130 rows, 3,231,961 features",
            "277,058,644 non-zeros in url_combined (rleblond/asaga, src utils.scala): 115.6 a row",
            "Ma et al. 2009: binary lexical and host-based features plus real-valued ones",
        ),
        assumptions=(
            "64 real-valued columns (values in (0, 1), each in 90 % of rows), the rest binary; "
            "positive (malicious) share 0.33; row-length log-sd 0.3; Zipf exponent 1.0; "
            "2 % label noise",
        ),
    ),
    "kdd2010": Profile(
        name="kdd2010",
        title="kdd2010 (algebra) (KDD Cup 2010, Yu et al.'s features; LIBSVM kdda)",
        rows=8_407_752,
        test_rows=510_302,
        features=20_216_830,
        nnz_per_row=305_613_510 / 8_407_752,  # 36.35
        positive=0.85,
        options={
            "values": "binary",
            "normalize": False,
            "nnz_spread": 0.25,
            "zipf": 1.0,
            "zipf_offset": 5.0,
            "noise": 0.1,
            "w_density": 0.1,
        },  # fmt: skip
        sources=(
            f"{_LIBSVM}: kdda 8,407,752 / 510,302 rows, 20,216,830 features",
            "305,613,510 non-zeros (LIBSVM page as quoted in the brief; not re-checked here)",
            "binary features (Yu et al., KDD Cup 2010 workshop: indicator features)",
        ),
        assumptions=(
            "positive (correct first attempt) share 0.85; row-length log-sd 0.25; Zipf "
            "exponent 1.0; 10 % label noise",
        ),
    ),
    "webspam": Profile(
        name="webspam",
        title="webspam (trigram) (PASCAL Large Scale Learning Challenge; LIBSVM webspam)",
        rows=350_000,
        test_rows=0,
        features=16_609_143,
        nnz_per_row=1_304_697_446 / 350_000,  # 3,727.7
        positive=0.606,
        options={
            "values": "tf",
            "normalize": True,
            "nnz_spread": 0.8,
            "zipf": 1.0,
            "zipf_offset": 50.0,
            "noise": 0.005,
            "w_density": 0.1,
        },  # fmt: skip
        sources=(
            f"{_LIBSVM}: webspam trigram 350,000 rows, 16,609,143 features",
            "1,304,697,446 non-zeros, ~3,730 a row (LIBSVM page as quoted in the brief; "
            "not re-checked here); rows of normalised trigram counts (webspam_wc_normalized)",
        ),
        assumptions=(
            "positive (spam) share 0.606; row-length log-sd 0.8; Zipf exponent 1.0 (offset "
            "50); 0.5 % label noise",
        ),
    ),
    "criteo": Profile(
        name="criteo",
        title="criteo (Criteo Display Advertising Challenge; LIBSVM criteo, hashed)",
        rows=45_840_617,
        test_rows=6_042_135,
        features=1_000_000,
        nnz_per_row=39.0,
        positive=11_745_438 / 45_840_617,  # 0.2562
        options={
            "values": "binary",
            "normalize": False,
            "dense_features": 13,
            "dense_values": "count",
            "fields": CRITEO_FIELD_LEVELS,
            "field_zipf": 1.1,
            "noise": 0.15,
            "w_density": 0.1,
        },  # fmt: skip
        sources=(
            f"{_LIBSVM}: criteo 45,840,617 / 6,042,135 rows, 1,000,000 hashed features, "
            "39 a row (as quoted in the brief)",
            "Kaggle challenge data page: 13 integer (mostly count) and 26 categorical fields",
            "field levels: DLRM's Kaggle configuration (1460, 583, 10131227, ...); clicks "
            "11,745,438 of 45,840,617 (public class counts)",
        ),
        assumptions=(
            "counts c = 1 + floor(exp(1 + 1.5 N(0, 1))) stored as ln(1 + c), every field "
            "present; levels Zipf with exponent 1.1; 15 % label noise",
        ),
    ),
}


def profile(name: str) -> Profile:
    """The profile ``name``; :class:`SynthError` naming the choices otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise SynthError(
            f"unknown --like {name!r}; choose one of {', '.join(sorted(PROFILES))}"
        ) from None
