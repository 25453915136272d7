"""``--variant auto``: perf's algorithm chosen from the store's shape and the memory budget.

One row per algorithm, tried in order; the first whose condition holds is run, and ``-v`` /
``--json`` name it with its reason. A row is taken only where its algorithm (its row of
:data:`.algorithms.ALGORITHMS`) trains the loss and the class weights asked for, and
checkpoints when asked; what the algorithms do is read from that table, never from their
names. Every algorithm stays selectable by name, and all of them stop on the same
certificate P(w) − lower bound ≤ C·n·ε.

- ``accelerated`` for ranks, ROC area, a checkpoint or ``--init`` (except a model that
  keeps dcd's α for the store's rows, on a wide store: :mod:`.dcd_warm`): the only one
  that does them all;
- ``dcd`` on stores of at least :data:`DCD_MIN_FEATURES` columns: on wide sparse data the
  cutting plane needs hundreds of passes (click-log and kdd2010 shapes: ~1,000), and each
  pass's planes are as wide as the store; dual coordinate descent needs tens to hundreds of
  cheap epochs over the rows held in memory when they fit, and reads them shard by shard
  (block minimization) when they do not, holding only w and 45 bytes a row (a click-log
  shaped 1M-row store inside an 800 MB container: accelerated's pass was killed by the
  kernel, dcd's blocks train in it);
- ``selective`` when the decoded store is larger than the shard cache's share and its pass's
  planes fit half the budget: few full passes when every pass reads the disk;
- ``accelerated`` otherwise: narrow stores take ~30–80 passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .algorithms import ALGORITHMS, DENSE_VECTORS

if TYPE_CHECKING:
    from ...store.format import StoreMeta
    from .algorithms import Algorithm
    from .params import Params

#: stores at least this wide train with dcd under ``auto`` (rows held or read shard by shard)
DCD_MIN_FEATURES = 1 << 18


@dataclass(frozen=True)
class Row:
    """One algorithm of the table: its name, when ``auto`` picks it, and why."""

    variant: str
    when: Callable[[Params, StoreMeta, bool, int], bool]
    why: str


def _needs_accelerated(p: Params, meta: StoreMeta, checkpoint: bool, room: int) -> bool:
    """What no row picked by the store's shape does (their capabilities in
    :data:`.algorithms.ALGORITHMS`): a checkpoint, a loss other than theirs (ranks, ROC
    area); or ``--init`` (but from dcd's α for a wide store's rows)."""
    shaped = [ALGORITHMS[row.variant] for row in TABLE if row.when in _SHAPED]
    return (
        (checkpoint and not any(a.checkpoint for a in shaped))
        or meta.label_kind != "binary"
        or not any(p.resolve_loss(meta) in a.losses for a in shaped)
        or (getattr(p, "init", None) is not None and not _dcd_warm(p, meta))
    )


def _dcd_warm(p: Params, meta: StoreMeta) -> bool:
    """``--init`` a model whose α starts dcd on this store (:func:`.dcd_warm.has_alpha`),
    and the store is dcd's (wide): the warm start is dcd's; else accelerated's from w."""
    from .dcd_warm import has_alpha

    return _wide(p, meta, False, 0) and has_alpha(p.init, meta)


#: the budget's claims that are perf's own (made for the variant chosen here): the room the
#: choice reads counts them as free (the ``room`` of :class:`ooc_svm.sizes.Sizes`, resolved
#: once by the command), so it is the same before and after them
PERF_CLAIMS = ("perf dense vectors", "--dense-limit-mb", "selective pass accumulators")


def _wide(p: Params, meta: StoreMeta, checkpoint: bool, room: int) -> bool:
    return int(meta.n_features) >= DCD_MIN_FEATURES


def _out_of_core(p: Params, meta: StoreMeta, checkpoint: bool, room: int) -> bool:
    from ..._util import AUTO_CACHE_CAP_MB, AUTO_CACHE_SHARE

    if DENSE_VECTORS * 8.0 * (int(meta.n_features) + 1) > p.dense_limit_mb * 2**20:
        return False
    decoded = 8 * int(meta.nnz) + 16 * int(meta.n_rows)
    left = room
    if decoded <= min(AUTO_CACHE_SHARE * left, AUTO_CACHE_CAP_MB * 2**20):
        return False
    from .selective import pass_accumulator_bytes

    # selective's pass holds a few planes a thread over the columns: where they take more
    # than half the budget, accelerated (one plane a pass) is the one that fits, and a
    # refusal names the limit for the variant that will then run
    return pass_accumulator_bytes(int(meta.n_features) + 1) <= 0.5 * left


#: the rows picked by the store's shape (wide: dcd; out of core: selective)
_SHAPED = (_wide, _out_of_core)


def _able(a: Algorithm, p: Params, meta: StoreMeta, checkpoint: bool) -> bool:
    """The row's algorithm trains this loss and class weights, and checkpoints if asked
    (the loss as given or its default: :meth:`.params.Params.resolve_loss` checks it)."""
    loss = p.loss or ("ordinal" if meta.label_kind == "ordinal" else "error")
    return (
        loss in a.losses
        and (p.class_weight is None or a.class_weight)
        and (a.checkpoint or not checkpoint)
    )


TABLE: tuple[Row, ...] = (
    Row(
        "accelerated",
        _needs_accelerated,
        "ranks, ROC area, a checkpoint or --init (but from a model with dcd's dual variables "
        "for these rows, on a wide store): only the accelerated cutting plane does them",
    ),
    Row(
        "dcd",
        _wide,
        f"at least {DCD_MIN_FEATURES:,} columns: dual coordinate descent, the rows held when "
        "they fit the memory budget and read shard by shard when not (cutting planes need "
        "hundreds of passes on wide sparse data, each as wide as the store)",
    ),
    Row(
        "selective",
        _out_of_core,
        "the decoded store is larger than the shard cache's share of the memory budget: "
        "selective needs few full passes",
    ),
    Row(
        "accelerated",
        lambda p, m, c, r: True,
        "a narrow store: the cutting plane (few passes on narrow data, one plane at a time)",
    ),
)


def choose(
    params: Params, meta: StoreMeta, checkpoint: bool = False, *, room: int
) -> tuple[str, str]:
    """``(variant, why)``: the first row of :data:`TABLE` whose condition holds and whose
    algorithm (:data:`.algorithms.ALGORITHMS`) trains what is asked: the loss, the class
    weights, a checkpoint. ``room``: bytes of the memory budget not claimed by anything but
    perf's own sizes (``room`` of :class:`ooc_svm.sizes.Sizes`, handed down by the command)."""
    for row in TABLE:
        if row.when(params, meta, checkpoint, room) and _able(
            ALGORITHMS[row.variant], params, meta, checkpoint
        ):
            return row.variant, row.why
    raise AssertionError("the last row always holds")
