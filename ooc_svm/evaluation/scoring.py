"""Model and store must match, and the ``predict`` output files (above the model).

The decision values themselves are streamed by :mod:`ooc_svm.model.shard_scores` (below the model);
this module checks a store against a model before it is scored and writes what ``predict``
prints.

- :func:`check_compatible` refuses a store the model cannot score meaningfully (different
  task, disjoint labels) and warns when the store has more features than the model.
- :func:`predict_to_file` writes label / score / prediction / qid columns (Parquet or text)
  through :func:`ooc_svm._util.open_output` (atomic for regular files, in place for special
  files, ``-`` = standard output).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.model import Model, ModelError
from ..model.shard_scores import is_ovr, iter_scored

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..store.base import Store
    from ..store.format import StoreMeta

log = logging.getLogger(__name__)

#: ``info["loss"]`` values of ranking models: their scores order rows, no threshold is trained
RANKING_LOSSES = ("roc", "ordinal")


class MismatchError(ModelError):
    """The store does not fit the model (different task, labels or features)."""


def is_ranking_model(model: Model) -> bool:
    """True for ROC-area and ordinal-regression models (perf ``--loss roc|ordinal``)."""
    return str(model.info.get("loss")) in RANKING_LOSSES


def predictions(model: Model, scores: np.ndarray) -> np.ndarray | None:
    """Predicted labels from decision values (None for ranking models)."""
    if is_ranking_model(model):
        return None
    return model.labels_of(scores)


# ------------------------------------------------------------------------------------------
# model and data must match
# ------------------------------------------------------------------------------------------


def _fmt_labels(values) -> str:
    vals = [label_name(v) for v in values]
    return ", ".join(vals[:6]) + (", …" if len(vals) > 6 else "")


def check_compatible(
    model: Model,
    meta: StoreMeta,
    model_name: str,
    store_name: str,
    *,
    labels_matter: bool = True,
    allow_wider: bool = False,
    allow_narrower: bool = False,
) -> None:
    """Refuse a store whose task differs from the model's, or (``labels_matter``) whose labels
    share no value with the model's classes, or hashed unlike the model, or much wider than
    the model (:func:`check_width`, unless ``allow_wider``); warn when it has a few more
    features than the model.

    A store with a few fewer features than the model is fine (LIBLINEAR's behaviour: a test
    split that never uses the last features, as a9a.t vs a9a); one with less than
    ``1 - NARROWER_SHARE`` of the model's is refused unless ``allow_narrower``.

    Raises
    ------
    MismatchError
        One line naming the model, the store and what differs.
    """
    labels = None if meta.labels is None else [float(v) for v in meta.labels]
    kind = meta.label_kind
    classes = [float(c) for c in model.classes]
    if is_ranking_model(model):
        if kind == "multiclass":
            raise MismatchError(
                f"{model_name} is a ranking model (loss {model.info.get('loss')}) but "
                f"{store_name} has class labels ({len(labels or [])} classes); score it with a "
                "classifier trained on those classes"
            )
    elif is_ovr(model):
        if meta.has_qid and kind == "ordinal":
            raise MismatchError(
                f"{model_name} is a one-vs-rest classifier but {store_name} is a ranking store "
                "(ranks with qid); score it with a ranking model (train --solver perf)"
            )
    elif labels is not None and len(labels) > 2:
        raise MismatchError(
            f"{model_name} is a binary classifier (classes {_fmt_labels(classes)}) but "
            f"{store_name} has {len(labels)} {'ranks' if kind == 'ordinal' else 'classes'} "
            f"({_fmt_labels(labels)}); use a model trained on the same kind of labels"
        )
    if labels is not None:
        _check_labels(model, labels, classes, model_name, store_name, labels_matter)
    check_width(
        model, meta, model_name, store_name, allow_wider=allow_wider, allow_narrower=allow_narrower
    )


#: ``check_compatible`` refuses a store with more than this share of columns beyond the
#: model's width (without ``allow_wider``)
WIDER_SHARE = 0.10
#: ``check_compatible`` refuses a store with fewer than ``1 - NARROWER_SHARE`` of the
#: model's columns (without ``allow_narrower``): a test split that never uses the last few
#: features is a little narrower (a9a.t: 122 of a9a's 123), another feature space can be
#: much narrower (a9a's 123 under w8a's 300-feature model scored silently, AUC 0.34)
NARROWER_SHARE = 0.5


def check_width(
    model: Model,
    meta: StoreMeta,
    model_name: str,
    store_name: str,
    *,
    allow_wider: bool = False,
    allow_narrower: bool = False,
) -> None:
    """Refuse a store hashed unlike the model, or (unless ``allow_wider``) much wider than
    the model: more than :data:`WIDER_SHARE` more columns (another feature space, such as an
    a9a model on w8a); warn when it is a little wider (those columns weigh 0). Refuse one
    (unless ``allow_narrower``) with fewer than ``1 - NARROWER_SHARE`` of the model's
    columns (such as a w8a model on a9a)."""
    from ..store.format import hashing_label, same_hashing

    mh, sh = model_hashing(model, model_name), getattr(meta, "hashing", None)
    if not same_hashing(mh, sh):
        raise MismatchError(
            f"{store_name} has {hashing_label(sh)} but {model_name} was trained with "
            f"{hashing_label(mh)}; re-ingest the data "
            + (f"with --hash-bits {mh['bits']}" if mh else "without --hash-bits")
        )
    nf, mf = int(meta.n_features), int(model.n_features)
    if nf < mf * (1.0 - NARROWER_SHARE) and not allow_narrower:
        raise MismatchError(
            f"{store_name} has {nf:,} features, {model_name} was trained on {mf:,} "
            f"({(mf - nf) / max(mf, 1):.0%} fewer): is it from another feature space? Pass "
            f"--allow-narrower to score it anyway (or ingest it with --n-features {mf})"
        )
    if nf <= mf:
        return
    if nf > mf * (1.0 + WIDER_SHARE) and not allow_wider:
        raise MismatchError(
            f"{store_name} has {nf:,} features, {model_name} was trained on {mf:,} "
            f"({(nf - mf) / max(mf, 1):.0%} more): is it from another feature space? Pass "
            "--allow-wider to score it anyway (features beyond the model's weigh 0)"
        )
    log.warning(
        "ooc-svm: warning: %s has %d features, %s was trained on %d: features beyond %d "
        "are ignored",
        store_name,
        nf,
        model_name,
        mf,
        mf,
    )


def model_hashing(model: Model, model_name: str = "the model") -> dict | None:
    """The model's ``info["hashing"]`` (``ingest --hash-bits`` of its training store),
    checked; None when its features were not hashed."""
    from ..store.format import HASH_KEY, HASH_NAME, MAX_HASH_BITS

    h = model.info.get("hashing")
    if h is None:
        return None
    bits = h.get("bits") if isinstance(h, dict) else None
    if (
        isinstance(bits, bool)
        or not isinstance(bits, int)
        or not 1 <= bits <= MAX_HASH_BITS
        or h.get("hash") != HASH_NAME
        or h.get("key") != HASH_KEY
        or int(model.n_features) != 1 << bits
    ):
        raise ModelError(
            f"{model_name}: model.json has an invalid 'hashing' entry; retrain the model"
        )
    return dict(h)


def _check_labels(model, labels, classes, model_name, store_name, labels_matter) -> None:
    """Disjoint labels: refuse; for classifiers, a two-label store with a label the model
    does not know is refused too (0/1 against -1/+1, a multiclass model on a binary store);
    unknown labels in a multiclass store are a warning (those rows can never be right)."""
    unknown = sorted(set(labels) - set(classes))
    msg = None
    if not set(labels) & set(classes):
        msg = (
            f"the labels of {store_name} ({_fmt_labels(labels)}) share no value with the "
            f"classes of {model_name} ({_fmt_labels(classes)})"
        )
    elif unknown and not is_ranking_model(model):
        msg = (
            f"label{'s' if len(unknown) > 1 else ''} {_fmt_labels(unknown)} of {store_name} "
            f"{'are' if len(unknown) > 1 else 'is'} not among the classes of {model_name} "
            f"({_fmt_labels(classes)})"
        )
        if len(labels) > 2:
            log.warning("ooc-svm: warning: %s: those rows can never be predicted right", msg)
            return
    if msg is None:
        return
    if labels_matter:
        raise MismatchError(msg + "; is this the right model for this store?")
    log.warning("ooc-svm: warning: %s; the label column cannot be compared", msg)


# ------------------------------------------------------------------------------------------
# output files
# ------------------------------------------------------------------------------------------


def label_name(c: float) -> str:
    """A class label as text: ``1``, ``-1``, ``0.5``."""
    c = float(c)
    return str(int(c)) if c == int(c) and abs(c) < 1e15 else repr(c)


def score_columns(model: Model, n_outputs: int) -> list[str]:
    """``score`` for one output, else ``score_<class label>`` per one-vs-rest class."""
    if n_outputs == 1 and model.kind != "ovo":
        return ["score"]
    if model.kind == "ovo":  # one column per pair, LIBSVM's order: (0,1), (0,2), …, (1,2), …
        c = [label_name(v) for v in model.classes]
        names = [f"score_{c[i]}_{c[j]}" for i in range(len(c)) for j in range(i + 1, len(c))]
    else:
        names = [f"score_{label_name(c)}" for c in model.classes]
    if len(names) != n_outputs or len(set(names)) != n_outputs:
        names = [f"score_{k}" for k in range(n_outputs)]
    return names


class _TextWriter:
    """Delimited text: a header line, then one line per row (tab, or comma for .csv)."""

    def __init__(self, f, delimiter: str = "\t"):
        self.f = f
        self.delimiter = delimiter
        self.header = False

    def write(self, cols: dict[str, np.ndarray]) -> None:
        names = list(cols)
        if not self.header:
            self.f.write(self.delimiter.join(names) + "\n")
            self.header = True
        fmt = [
            "%d" if k == "qid" else ("%.17g" if k.startswith("score") else "%.10g") for k in names
        ]
        table = np.column_stack([np.asarray(cols[k], dtype=np.float64) for k in names])
        np.savetxt(self.f, table, fmt=fmt, delimiter=self.delimiter)

    def close(self) -> None:
        self.f.flush()


class _ParquetWriter:
    def __init__(self, f):
        self.f = f
        self.w = None

    def write(self, cols: dict[str, np.ndarray]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(cols)
        if self.w is None:
            self.w = pq.ParquetWriter(self.f, table.schema, compression="zstd")
        self.w.write_table(table)

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


def probability_columns(model: Model, scores: np.ndarray) -> dict[str, np.ndarray]:
    """``probability`` (binary: P(y = classes[1] | x)) or one ``probability_<label>`` column
    per class, from the model's sigmoid(s) (see :meth:`ooc_svm.model.model.Model.predict_proba`)."""
    from ..model.model import probabilities

    P = probabilities(model, scores)
    if P.ndim == 1:
        return {"probability": P}
    names = [f"probability_{label_name(c)}" for c in model.classes]
    if len(set(names)) != len(names):
        names = [f"probability_{k}" for k in range(len(names))]
    return {name: P[:, k] for k, name in enumerate(names)}


def output_format(path: str, fmt: str | None) -> str:
    """``parquet`` for .parquet / .pq (or when asked), else ``text``."""
    if fmt:
        return fmt
    return "parquet" if str(path).lower().endswith((".parquet", ".pq")) else "text"


def predict_to_file(
    model: Model,
    store: Store,
    engine: Engine,
    out: str,
    fmt: str | None = None,
    max_rows: int = 1_000_000,
    progress: Callable[[int], None] | None = None,
    probability: bool = False,
) -> dict[str, Any]:
    """Score ``store`` and write ``out`` (see :func:`ooc_svm._util.open_output`: atomic for a
    regular file, in place for a special file, ``-`` = standard output); returns a summary.

    Text outputs are tab-separated, comma-separated when ``out`` ends in ``.csv``.
    ``probability``: add the probability column(s) (:func:`probability_columns`); a model
    without a sigmoid is refused before anything is written.
    """
    from .._util import open_output

    if probability:
        from ..model.model import require_probability

        require_probability(model)

    fmt = output_format(out, fmt)
    delimiter = "," if str(out).lower().endswith(".csv") else "\t"
    n = 0
    with open_output(out, binary=fmt == "parquet", prefix="predict") as f:
        writer = _ParquetWriter(f) if fmt == "parquet" else _TextWriter(f, delimiter)
        wrote = False
        try:
            for y, s, q in iter_scored(store, engine, model, max_rows):
                cols: dict[str, np.ndarray] = {"label": y}
                names = score_columns(model, 1 if s.ndim == 1 else s.shape[1])
                if s.ndim == 2 and len(names) == s.shape[1]:
                    for k, name in enumerate(names):
                        cols[name] = s[:, k]
                else:
                    cols["score"] = s
                pred = predictions(model, s)
                if pred is not None:
                    cols["prediction"] = pred
                if probability:
                    cols.update(probability_columns(model, s))
                if q is not None:
                    cols["qid"] = q
                writer.write(cols)
                wrote = True
                n += y.shape[0]
                if progress is not None:  # rows scored and written, for the command's meter
                    progress(y.shape[0])
            if not wrote:
                writer.write({"label": np.zeros(0), "score": np.zeros(0)})
        finally:
            writer.close()
    return {"rows": n, "output": out, "format": fmt}


def predict_store(
    model: Model,
    store: Store,
    out: str,
    fmt: str | None = None,
    max_rows: int = 1_000_000,
    scheduler: str | None = None,
    progress: Callable[[int], None] | None = None,
    probability: bool = False,
) -> dict[str, Any]:
    """:func:`predict_to_file` on an engine made for ``scheduler`` (None: local default);
    ``progress(rows)`` is called after each batch is written."""
    from ..engine import make_engine

    with make_engine(scheduler) as engine:
        return predict_to_file(
            model, store, engine, out, fmt, max_rows, progress, probability=probability
        )


__all__ = [
    "MismatchError",
    "RANKING_LOSSES",
    "check_compatible",
    "check_width",
    "model_hashing",
    "is_ranking_model",
    "label_name",
    "output_format",
    "predict_store",
    "predict_to_file",
    "predictions",
    "probability_columns",
    "score_columns",
]
