"""``ooc-svm predict MODEL STORE -o OUT``: decision values and labels, streamed shard by shard.

The store is scored in batches of whole shards (at most ``--batch-rows`` rows, default
1,000,000) through the engine, and every batch is appended to the output before the next one
is scored, so memory stays bounded by one batch whatever the size of the store. The output
is written under a temporary name and renamed into place when complete.

Output columns: ``label`` (the store's label), ``score`` (decision value f(x); one
``score_<k>`` column per class for one-vs-rest models), ``prediction`` (predicted label; not
for ranking models, whose scores only order rows) and ``qid`` when the store has query ids.
Parquet when OUT ends in ``.parquet`` / ``.pq`` (or ``--format parquet``), else text: a
tab-separated header line and one line per row.

Linear models are scored with the numba CSR kernels; kernel models with the streamed kernel
expansion of :mod:`ooc_svm.solvers.dual_common` (binary models).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import numpy as np

from ..kernels.csr import csr_matvec, u32

RANKING_LOSSES = ("roc", "ordinal")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="score a store with a model (streamed); write scores and labels",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="model directory written by `ooc-svm train`")
    p.add_argument("store", help="store, or SVMlight/LIBSVM text file (.gz .bz2 .xz, - for stdin)")
    p.add_argument("-o", "--output", required=True, help="output file (.parquet or text)")
    p.add_argument(
        "--format",
        choices=["parquet", "text"],
        default=None,
        help="output format (default: from the suffix of OUT)",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=1_000_000,
        help="rows scored per batch of shards (bounds memory; default 1000000)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        help="local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
        "scheduler address tcp://HOST:PORT / scheduler-file.json",
    )
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------
# scoring (shared with evaluate)
# ------------------------------------------------------------------------------------------


def is_ranking_model(model) -> bool:
    return str(model.info.get("loss")) in RANKING_LOSSES


def scoring_broadcast(model, n_features: int) -> tuple:
    """Picklable scoring data: ("linear", W (d, k), b (k,)) or ("kernel", dual_common bc)."""
    from ..solvers import SolverError

    if model.kind == "linear":
        coef = np.atleast_2d(np.asarray(model.coef_, dtype=np.float64))
        d = max(int(model.n_features), int(n_features))
        W = np.zeros((coef.shape[0], d))
        W[:, : coef.shape[1]] = coef  # store columns the model never saw weigh 0
        b = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
        if b.shape[0] != W.shape[0]:
            b = np.full(W.shape[0], float(b[0]))
        return ("linear", W, b)
    if np.ndim(model.intercept_) != 0:
        raise SolverError(
            "streamed scoring of one-vs-rest kernel models is not supported yet; score each "
            "class's binary model"
        )
    try:
        from ..solvers.dual_common import scoring_broadcast as kernel_broadcast
    except ImportError as e:  # pragma: no cover - depends on the dual solvers' module
        raise SolverError(f"kernel models cannot be scored in this build ({e})") from None
    return ("kernel", kernel_broadcast(model))


def score_shard(shard, bc: tuple) -> np.ndarray:
    """Decision values of every row of a shard: (n,) for binary, (n, k) for one-vs-rest."""
    if bc[0] == "kernel":
        from ..solvers.dual_common import score_shard as kernel_score_shard

        return kernel_score_shard(shard, bc[1])
    _, W, b = bc
    n = shard.n_rows
    ix = u32(shard.indices)
    if ix.size and int(ix.max()) >= W.shape[1]:
        raise ValueError(
            f"shard at row {shard.row_start} has column {int(ix.max())} beyond the store's "
            f"n_features {W.shape[1]}"
        )
    out = np.empty((n, W.shape[0]))
    col = np.empty(n)
    for k in range(W.shape[0]):
        csr_matvec(shard.indptr, ix, shard.data, W[k], float(b[k]), col)
        out[:, k] = col
    return out[:, 0] if W.shape[0] == 1 else out


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


def iter_scored(store, engine, model, max_rows: int, with_qid: bool = True):
    """Yield (labels, scores, qid or None) per batch of shards, in store order."""
    from ..engine import concat_partials

    bc = (scoring_broadcast(model, store.meta.n_features), with_qid and store.meta.has_qid)
    for ids in shard_batches(store, max(1, int(max_rows))):
        parts = engine.map_reduce(store, _predict_fn, bc, reduce=concat_partials, shards=ids)
        y = np.concatenate([p[0] for p in parts])
        s = np.concatenate([p[1] for p in parts])
        q = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
        yield y, s, q


def predictions(model, scores: np.ndarray) -> np.ndarray | None:
    """Predicted labels from decision values (None for ranking models)."""
    if is_ranking_model(model):
        return None
    classes = np.asarray(model.classes, dtype=np.float64)
    if scores.ndim == 2:
        return classes[np.argmax(scores, axis=1)]
    return np.where(scores > 0, classes[-1], classes[0])


# ------------------------------------------------------------------------------------------
# writers
# ------------------------------------------------------------------------------------------


class _TextWriter:
    """Tab-separated text: a header line, then one line per row."""

    def __init__(self, path: str):
        self.f = open(path, "w")  # noqa: SIM115 - closed in close()
        self.header = False

    def write(self, cols: dict[str, np.ndarray]) -> None:
        names = list(cols)
        if not self.header:
            self.f.write("\t".join(names) + "\n")
            self.header = True
        fmt = [
            "%d" if k == "qid" else ("%.17g" if k.startswith("score") else "%.10g") for k in names
        ]
        table = np.column_stack([np.asarray(cols[k], dtype=np.float64) for k in names])
        np.savetxt(self.f, table, fmt=fmt, delimiter="\t")

    def close(self) -> None:
        self.f.close()


class _ParquetWriter:
    def __init__(self, path: str):
        self.path = path
        self.w = None

    def write(self, cols: dict[str, np.ndarray]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(cols)
        if self.w is None:
            self.w = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self.w.write_table(table)

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


def output_format(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    return "parquet" if str(path).lower().endswith((".parquet", ".pq")) else "text"


def predict_to_file(
    model, store, engine, out: str, fmt: str | None = None, max_rows: int = 1_000_000
) -> dict[str, Any]:
    """Score ``store`` and write ``out`` atomically; returns a small summary."""
    fmt = output_format(out, fmt)
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".predict-", dir=parent)
    os.close(fd)
    writer = _ParquetWriter(tmp) if fmt == "parquet" else _TextWriter(tmp)
    n = 0
    try:
        wrote = False
        for y, s, q in iter_scored(store, engine, model, max_rows):
            cols: dict[str, np.ndarray] = {"label": y}
            if s.ndim == 2:
                for k in range(s.shape[1]):
                    cols[f"score_{k}"] = s[:, k]
            else:
                cols["score"] = s
            pred = predictions(model, s)
            if pred is not None:
                cols["prediction"] = pred
            if q is not None:
                cols["qid"] = q
            writer.write(cols)
            wrote = True
            n += y.shape[0]
        if not wrote:
            writer.write({"label": np.zeros(0), "score": np.zeros(0)})
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {"rows": n, "output": out, "format": fmt}


def run(args) -> int:
    from ..engine import make_engine
    from ..model import load_model
    from ..store.text_view import open_input

    model = load_model(args.model)
    store = open_input(args.store, model.n_features)  # a store, or SVMlight text
    with make_engine(args.scheduler) as engine:
        info = predict_to_file(model, store, engine, args.output, args.format, args.batch_rows)
    print(f"predict: {info['rows']} rows -> {info['output']} ({info['format']})")
    return 0
