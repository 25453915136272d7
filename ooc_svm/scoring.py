"""Streamed decision values of any model over a store, and the ``predict`` output files.

One entry point per shard, :func:`score_shard(shard, broadcast) <score_shard>`, for every
kind of model: linear (binary or one-vs-rest: the numba CSR kernels), kernel (binary or
one-vs-rest: the SV expansion of :mod:`ooc_svm.expansion`). :func:`make_broadcast` builds the
picklable broadcast once per pass; the engine runs the shards next to the data (threads
locally, workers on Dask). Memory: the model plus one shard and its scores per engine thread.

- :func:`iter_scored` yields (labels, scores, qid) per batch of whole shards (at most
  ``max_rows`` rows), in store order; :func:`score_store` returns all scores (n_rows values).
- :func:`check_compatible` refuses a store the model cannot score meaningfully (different
  task, disjoint labels) and warns when the store has more features than the model.
- :func:`predict_to_file` writes label / score / prediction / qid columns (Parquet or text)
  through :func:`ooc_svm._util.open_output` (atomic for regular files, in place for special
  files, ``-`` = standard output).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import concat_partials
from .expansion import ScoringBroadcast, scoring_broadcast
from .expansion import score_shard as expansion_score_shard
from .kernels.csr import csr_matvec, u32
from .model import Model, ModelError

log = logging.getLogger(__name__)

#: ``info["loss"]`` values of ranking models: their scores order rows, no threshold is trained
RANKING_LOSSES = ("roc", "ordinal")


class MismatchError(ModelError):
    """The store does not fit the model (different task, labels or features)."""


def is_ranking_model(model: Model) -> bool:
    """True for ROC-area and ordinal-regression models (perf ``--loss roc|ordinal``)."""
    return str(model.info.get("loss")) in RANKING_LOSSES


def is_ovr(model: Model) -> bool:
    """True for one-vs-rest models (one intercept per class)."""
    return np.ndim(model.intercept_) != 0


# ------------------------------------------------------------------------------------------
# one shard
# ------------------------------------------------------------------------------------------


@dataclass
class LinearBroadcast:
    """Scoring data of a linear model: W (n_outputs, width) and b (n_outputs,)."""

    W: np.ndarray
    b: np.ndarray


@dataclass
class OvoBroadcast:
    """Scoring data of a one-vs-one model (LIBSVM's layout, imported): the model itself,
    scored per shard in blocks of rows by :func:`ooc_svm.model.ovo_decision_function`."""

    model: Model


Broadcast = LinearBroadcast | ScoringBroadcast | OvoBroadcast


def make_broadcast(model: Model, n_features: int) -> Broadcast:
    """Picklable scoring data for ``model`` on a store with ``n_features`` columns."""
    if model.kind == "ovo":
        return OvoBroadcast(model)
    if model.kind == "linear":
        coef = np.atleast_2d(np.asarray(model.coef_, dtype=np.float64))
        # the model's width, never the store's: store columns the model never saw weigh 0
        # (score_shard drops them), so a wide store costs no dense vector of its width
        W = np.zeros((coef.shape[0], int(model.n_features)))
        W[:, : coef.shape[1]] = coef
        b = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
        if b.shape[0] != W.shape[0]:
            b = np.full(W.shape[0], float(b[0]))
        return LinearBroadcast(W, b)
    return scoring_broadcast(model)


def score_shard(shard, bc: Broadcast) -> np.ndarray:
    """Decision values of every row of a shard: (n,) binary, (n, n_classes) one-vs-rest,
    (n, n_pairs) one-vs-one."""
    if isinstance(bc, ScoringBroadcast):
        return expansion_score_shard(shard, bc)
    if isinstance(bc, OvoBroadcast):
        from .model import ovo_decision_function

        ix = shard.indices
        width = max(bc.model.n_features, int(ix.max()) + 1 if ix.size else 0)
        return ovo_decision_function(bc.model, shard.to_scipy(width))
    W, b = bc.W, bc.b
    n = shard.n_rows
    indptr, ix, data = _within(shard, W.shape[1])
    out = np.empty((n, W.shape[0]))
    col = np.empty(n)
    for k in range(W.shape[0]):
        csr_matvec(indptr, ix, data, W[k], float(b[k]), col)
        out[:, k] = col
    return out[:, 0] if W.shape[0] == 1 else out


def _within(shard, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shard's CSR arrays without the entries in columns >= ``width`` (weight 0)."""
    ix = u32(shard.indices)
    if not ix.size or int(ix.max()) < width:
        return shard.indptr, ix, shard.data
    a, z = int(shard.indptr[0]), int(shard.indptr[-1])
    ix, data = ix[a:z], shard.data[a:z]
    keep = ix < width
    rows = np.repeat(np.arange(shard.n_rows), np.diff(shard.indptr))
    indptr = np.zeros(shard.n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=shard.n_rows), out=indptr[1:])
    return indptr, ix[keep], data[keep]


# ------------------------------------------------------------------------------------------
# a store
# ------------------------------------------------------------------------------------------


def _predict_fn(shard, bc):
    sbc, with_qid = bc
    s = score_shard(shard, sbc)
    q = shard.qid if (with_qid and shard.qid is not None) else None
    return [
        (
            np.asarray(shard.y, dtype=np.float64).copy(),
            s,
            None if q is None else np.asarray(q, dtype=np.int64).copy(),
        )
    ]


def shard_batches(store, max_rows: int) -> list[list[int]]:
    """Consecutive shard ids grouped so that a group holds at most ``max_rows`` rows
    (a single shard larger than that forms its own group)."""
    groups: list[list[int]] = []
    cur: list[int] = []
    rows = 0
    for i, s in enumerate(store.meta.shards):
        if cur and rows + s.n_rows > max_rows:
            groups.append(cur)
            cur, rows = [], 0
        cur.append(i)
        rows += s.n_rows
    if cur:
        groups.append(cur)
    return groups


def iter_scored(
    store, engine, model: Model, max_rows: int, with_qid: bool = True
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Yield (labels, scores, qid or None) per batch of shards, in store order."""
    bc = (make_broadcast(model, store.meta.n_features), with_qid and store.meta.has_qid)
    for ids in shard_batches(store, max(1, int(max_rows))):
        parts = engine.map_reduce(store, _predict_fn, bc, reduce=concat_partials, shards=ids)
        y = np.concatenate([p[0] for p in parts])
        s = np.concatenate([p[1] for p in parts])
        q = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
        yield y, s, q


def score_store(model: Model, store, engine=None, max_rows: int = 1_000_000) -> np.ndarray:
    """All decision values of ``store`` (store order), computed shard by shard: only the
    scores are kept, never the rows. ``engine=None`` uses the default local engine."""
    from .engine import make_engine

    if engine is None:
        with make_engine(None) as eng:
            return score_store(model, store, eng, max_rows)
    parts = [s for _, s, _ in iter_scored(store, engine, model, max_rows, with_qid=False)]
    if parts:
        return np.concatenate(parts)
    return np.zeros((0, len(model.classes)) if is_ovr(model) else 0)


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
    meta,
    model_name: str,
    store_name: str,
    *,
    labels_matter: bool = True,
    allow_wider: bool = False,
) -> None:
    """Refuse a store whose task differs from the model's, or (``labels_matter``) whose labels
    share no value with the model's classes, or hashed unlike the model, or much wider than
    the model (:func:`check_width`, unless ``allow_wider``); warn when it has a few more
    features than the model.

    A store with fewer features than the model is fine (LIBLINEAR's behaviour: a test split
    that never uses the last features, as a9a.t vs a9a).

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
    check_width(model, meta, model_name, store_name, allow_wider=allow_wider)


#: ``check_compatible`` refuses a store with more than this share of columns beyond the
#: model's width (without ``allow_wider``)
WIDER_SHARE = 0.10


def check_width(
    model: Model, meta, model_name: str, store_name: str, *, allow_wider: bool = False
) -> None:
    """Refuse a store hashed unlike the model, or (unless ``allow_wider``) much wider than
    the model: more than :data:`WIDER_SHARE` more columns (another feature space, such as an
    a9a model on w8a); warn when it is a little wider (those columns weigh 0)."""
    from .store.format import hashing_label, same_hashing

    mh, sh = model_hashing(model, model_name), getattr(meta, "hashing", None)
    if not same_hashing(mh, sh):
        raise MismatchError(
            f"{store_name} has {hashing_label(sh)} but {model_name} was trained with "
            f"{hashing_label(mh)}; re-ingest the data "
            + (f"with --hash-bits {mh['bits']}" if mh else "without --hash-bits")
        )
    nf, mf = int(meta.n_features), int(model.n_features)
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
    from .store.format import HASH_KEY, HASH_NAME, MAX_HASH_BITS

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
    per class, from the model's sigmoid(s) (see :meth:`ooc_svm.model.Model.predict_proba`)."""
    from .model import probabilities

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
    store,
    engine,
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
    from ._util import open_output

    if probability:
        from .model import require_probability

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
    store,
    out: str,
    fmt: str | None = None,
    max_rows: int = 1_000_000,
    scheduler: str | None = None,
    progress: Callable[[int], None] | None = None,
    probability: bool = False,
) -> dict[str, Any]:
    """:func:`predict_to_file` on an engine made for ``scheduler`` (None: local default);
    ``progress(rows)`` is called after each batch is written."""
    from .engine import make_engine

    with make_engine(scheduler) as engine:
        return predict_to_file(
            model, store, engine, out, fmt, max_rows, progress, probability=probability
        )


__all__ = [
    "LinearBroadcast",
    "MismatchError",
    "OvoBroadcast",
    "RANKING_LOSSES",
    "check_compatible",
    "check_width",
    "model_hashing",
    "is_ovr",
    "is_ranking_model",
    "iter_scored",
    "label_name",
    "make_broadcast",
    "output_format",
    "predict_store",
    "predict_to_file",
    "predictions",
    "probability_columns",
    "score_columns",
    "score_shard",
    "score_store",
    "shard_batches",
]
