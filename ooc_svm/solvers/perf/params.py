"""Parameters of ``--solver perf``: the :class:`Params` dataclass and its checks."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .. import SolverError, binary_classes
from ..params import KERNELS, SolverParams, param, parse_class_weight
from .algorithms import (
    NAMES,
    Algorithm,
    algorithm,
    check_parameter,
    resolved,
)
from .auto import PERF_CLAIMS

if TYPE_CHECKING:
    from ...sizes import Sizes
    from ...store.format import StoreMeta

#: ``--inner-mb auto``: this share of the memory budget not claimed at the start of the
#: training (:mod:`ooc_svm.memory_budget`); the shard cache takes its share of the rest. Rows
#: near the margin cut passes, a cached shard only a pass's reads of itself: on a 4M-row store
#: under a 1,500 MB limit a quarter of the budget took 13 passes (11.9 reads of the store from
#: disk), half of it 10 passes (8.4 reads; docs/BENCHMARKS.md)
AUTO_INNER_SHARE = 0.5

#: the share of the memory budget left unclaimed that ``dense_limit_mb`` may take at most
#: (it bounds the working set of cutting planes, which rarely grows to it)
DENSE_BUDGET_SHARE = 0.0625

#: ... but never below the dense vectors plus this many dense planes
DENSE_FLOOR_PLANES = 16

#: stores with at least this many columns train over the columns they hold (accelerated,
#: selective, dcd; ``ooc_svm.solvers.perf.REMAP_MIN_DIM`` overrides it, as tests do)
REMAP_MIN_DIM = 1 << 20

LOSSES = ("error", "roc", "ordinal")
#: ``--variant``'s choices: the rows of :data:`.algorithms.ALGORITHMS`
VARIANTS = NAMES

HINGES = ("l1", "l2")


@dataclass(frozen=True)
class Params(SolverParams):
    """Parameters of ``--solver perf`` (see the module docstring)."""

    SOLVER: ClassVar[str] = "perf"
    SUPPORTS_CLASS_WEIGHT: ClassVar[bool] = True
    BUDGET_SHARES: ClassVar[dict[str, float]] = {"dense_limit_mb": DENSE_BUDGET_SHARE}
    #: the claims of perf's own sizes: ``--variant auto`` chooses by the room they leave as
    #: if they were not made (``room`` of :class:`ooc_svm.sizes.Sizes`)
    OWN_CLAIMS: ClassVar[tuple[str, ...]] = PERF_CLAIMS

    eps: float = param(
        0.001,
        "stopping tolerance epsilon: P(w) <= P* + C*n*eps (SVMperf's -e is in percent: "
        "-e 0.1 is --eps 0.001); dcd also stops no later than P(w) <= P*/(1 - eps)",
        gt=0,
    )
    bias: float = param(
        1.0, "value of the constant bias feature; 0 = no bias", ge=0, note=" (0 = no bias)"
    )
    loss: str | None = param(
        None,
        "error (binary, OP2), roc (binary labels, ROC area), ordinal (rank labels, OP5; with "
        "qids pairs only within a query). Default: error for binary stores, ordinal for rank "
        "labels",
        choices=LOSSES,
    )
    variant: str = param(
        "auto",
        "auto = chosen from the store's shape and the memory budget (solvers/perf/auto.py; -v and "
        "--json say which and why): dcd on wide stores (rows held when they fit the budget, else "
        "read shard by shard), selective when the decoded store does not fit the shard cache's "
        "share, accelerated otherwise and for ranks, ROC area, checkpoints and --init; all stop on"
        " the same certificate. paper = Joachims 2006 Algorithms 1/2; accelerated = OCAS-style "
        "line search to the best point, same single pass per iteration; selective = many inner "
        "cutting planes on the rows near the margin kept in memory (--inner-mb), full passes only "
        "to refresh them and certify (loss error; ooc_svm/solvers/perf/selective.py); svmperf = "
        "SVMperf 3.00's loop (loose QP, shrinking; loss error; solvers/perf/svmperf.py) plus the "
        "dual-gap certificate; dcd = block-minimization dual coordinate descent over the shards "
        "(LIBLINEAR -s 3 / -s 1 in blocks, Yu et al. KDD 2010; loss error; solvers/perf/dcd.py) "
        "with the same certificate: fastest on wide sparse stores",
        choices=VARIANTS,
    )
    c_perf: float | None = param(
        None,
        "SVMperf's -c instead of --C: C = 100*c/n (error) or 100*c/m (roc/ordinal, m pairs), "
        "since SVMperf measures loss in percent (c_light = c_perf*100/n)",
        gt=0,
    )
    max_inactive: int = param(
        50,
        "drop a cutting plane inactive (alpha=0) this many iterations in a row (0 = never)",
        ge=0,
    )
    dense_limit_mb: float = param(
        1024.0,
        "memory for the working set of cutting planes (float64 up to half of it, float32 "
        "beyond; sparse where smaller); perf's dense vectors over the features (10 per "
        "problem, 8 bytes per feature each) must fit it too, else the store is refused; at "
        "most a sixteenth of the memory budget (--memory-mb)",
        gt=0,
    )
    line_points: int = param(32, "accelerated: line-search grid points in (0, 1]", ge=1)
    cut_points: int = param(5, "accelerated: candidate cutting planes accumulated per pass", ge=1)
    mu: float = param(0.1, "accelerated: cut at k* + mu*(1 - k*) (OCAS)")
    kernel: str = param("linear", "perf trains linear SVMs only", choices=KERNELS)
    inner_mb: str = param(
        "auto",
        "selective: MiB for the rows near the margin kept in memory between full passes (64 "
        "bytes per row + 8 per non-zero; their share of a pass's candidates is bounded by it "
        "too), or auto (auto:SHARE): SHARE (0.5) of the memory budget (--memory-mb) at the "
        "start, at most what every row of the store needs (then one pass suffices); svmperf: "
        "MiB of the rows kept for its partial rounds (auto: 256); dcd: MiB of decoded shards "
        "held between epochs (auto: SHARE of the memory budget, all the blocks when they fit; "
        "else read every epoch)",
    )
    hinge: str = param(
        "l1",
        "dcd: l1 = hinge loss (LIBLINEAR -s 3, perf's problem), l2 = squared hinge "
        "(LIBLINEAR -s 1); the other variants train the hinge only",
        choices=HINGES,
    )
    shrinking: bool = param(
        True,
        "dcd: drop rows at a bound from the sweeps until they may move (LIBLINEAR)",
        cli="bool",
    )
    warm_state: bool = param(
        True,
        "keep in the model what a later train --init starts from besides w (the aggregated "
        "cutting plane and a few plane points, over the columns they touch); "
        "--no-warm-state: a model of w and b alone, as LIBLINEAR's",
        cli="bool",
    )
    max_inner: int = param(2000, "selective: inner cutting planes between two full passes", ge=1)
    inner_share: float = param(
        0.25, "selective: inner loop stops at gap <= inner_share * eps * C * n", gt=0
    )

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None = None, **kw: Any) -> Params:
        given = {k: v for k, v in {**(params or {}), **kw}.items() if v is not None}
        if "C" in given and "c_perf" in given:
            raise SolverError(
                "give --C or --c-perf, not both (--c-perf is SVMperf's scale: C = 100*c_perf/n)"
            )
        return super().from_mapping(given)

    @classmethod
    def misplaced_hint(cls, unknown: list[str]) -> str | None:
        if "tol" in unknown:
            return (
                "perf stops on --eps (the duality gap, as SVMperf's -e); --tol is for the "
                "dual solvers"
            )
        return None

    def rules(self) -> None:
        if self.kernel != "linear":
            raise SolverError(
                f"--solver perf trains linear SVMs only (got --kernel {self.kernel}); use smo, "
                "active-set or irwls for kernels"
            )
        if self.class_weight is not None:
            parse_class_weight(self.class_weight)
        # a parameter the algorithm does not read, a loss or class weight it does not train
        check_parameter(self)
        self.inner_auto_share()  # a number >= 0, auto or auto:SHARE

    @property
    def algorithm(self) -> Algorithm:
        """The row of ``--variant`` (:mod:`.algorithms`)."""
        return algorithm(self.variant)

    def inner_auto_share(self) -> float | None:
        """SHARE of ``--inner-mb auto[:SHARE]`` (:data:`AUTO_INNER_SHARE` for ``auto``), or
        ``None`` for a number of MiB (checked: >= 0)."""
        v = str(self.inner_mb).strip().lower()
        if v == "auto" or v.startswith("auto:"):
            try:
                share = float(v[5:]) if v != "auto" else AUTO_INNER_SHARE
            except ValueError:
                share = -1.0
            if not 0.0 < share <= 1.0:
                raise SolverError(f"--inner-mb auto:SHARE needs 0 < SHARE <= 1 (got {v})")
            return share
        try:
            mib = float(v)
        except ValueError:
            mib = -1.0
        if not mib >= 0:
            raise SolverError(
                f"--inner-mb must be MiB >= 0, auto or auto:SHARE (got {self.inner_mb})"
            )
        return None

    def inner_mib(
        self, sizes: Sizes, whole_mib: float | None = None, auto_mib: float = 256.0
    ) -> float:
        """``inner_mb`` in MiB: the number given, or for ``auto[:SHARE]`` SHARE
        (:data:`AUTO_INNER_SHARE`) of the memory budget not claimed yet (``sizes``: the run's,
        handed down by the command), at most ``whole_mib`` (what the whole store needs);
        ``auto_mib`` when ``whole_mib`` is not given (at most the budget's share)."""
        share = self.inner_auto_share()
        if share is None:
            return float(str(self.inner_mb).strip())
        avail = sizes.share(share) / 2**20
        if whole_mib is None:
            return float(min(auto_mib, avail))
        return float(min(avail, whole_mib))

    def base_C(self, n_rows: int) -> float:
        """C in LIBLINEAR units: ``--C``, or ``100·c_perf/n`` (SVMperf's scale)."""
        if self.c_perf is not None:
            return 100.0 * float(self.c_perf) / max(1, n_rows)
        return float(self.C)

    def C_text(self, C: float) -> str:
        if self.c_perf is not None:
            return f"--c-perf {self.c_perf:g} (C = {C:g})"
        return f"--C {C:g}"

    def validate(self, meta: StoreMeta, room: int | None = None) -> None:
        """The rules on this store; ``room`` (of :class:`ooc_svm.sizes.Sizes`) resolves
        ``--variant auto`` for :meth:`check_dense`."""
        super().validate(meta)
        self.resolve_loss(meta)
        self.check_dense(meta, room=room)

    def resolve_variant(
        self, meta: StoreMeta, checkpoint: bool = False, room: int | None = None
    ) -> str:
        """The variant to run: for ``auto`` the first row of :mod:`.auto`'s table that fits
        the store and ``room`` (of :class:`ooc_svm.sizes.Sizes`); other values as given."""
        if not self.algorithm.chooses:
            return self.variant
        from .auto import choose

        return choose(self, meta, checkpoint, room=self._room(room))[0]

    def effective(self, meta: StoreMeta, room: int | None = None) -> Params:
        """These parameters with ``auto`` resolved for ``room`` (bytes of the memory budget not
        claimed but by perf's own sizes: the ``room`` of :class:`ooc_svm.sizes.Sizes`, which
        the command resolves once and hands down; :mod:`.auto` reads the room as if perf had
        claimed nothing, so the choice is the same when the driver makes it again)."""
        if not self.algorithm.chooses:
            return self
        from .auto import choose

        return resolved(self, choose(self, meta, room=self._room(room))[0])

    def chooses_by_budget(self) -> bool:
        return self.algorithm.chooses

    def for_sizes(self, meta: StoreMeta, sizes: Sizes) -> Params:
        return self.effective(meta, sizes.room)

    def room_of(self, engine: Any) -> int | None:
        """For ``--variant auto``, the room the command handed ``engine``
        (:func:`ooc_svm.sizes.sizes_of`) that auto chooses by; else ``None``."""
        if not self.algorithm.chooses:
            return None
        from ...sizes import sizes_of

        return sizes_of(engine, self.OWN_CLAIMS).room

    def _room(self, room: int | None) -> int:
        """``room``, or for a call no command sized (a library call) the room measured now."""
        if room is not None:
            return int(room)
        from ...sizes import sizes_of

        return sizes_of(None, self.OWN_CLAIMS).room

    def memory_needs(self, meta: StoreMeta) -> dict[str, int]:
        """perf's dense vectors over the features (:meth:`dense_vectors`; over the columns the
        rows hold where the variant remaps a wide store). A store too wide for
        ``--dense-limit-mb`` is refused first, with its own message (:meth:`check_dense`)."""
        if self.algorithm.chooses:
            return self.effective(meta).memory_needs(meta)
        self.check_dense(meta)
        needs = {"perf dense vectors": int(self._dense_bytes(meta)[0])}
        if self.algorithm.pass_accumulators:  # its pass's planes over the columns it trains
            from .selective import ACC_CLAIM, pass_accumulator_bytes

            d = int(meta.n_features)
            dim = (min(d, int(meta.nnz)) if d >= remap_min_dim() else d) + 1
            needs[ACC_CLAIM] = pass_accumulator_bytes(dim)
        return needs

    def _dense_bytes(self, meta: StoreMeta, copies: int = 1) -> tuple[float, int, int]:
        """``(bytes, vectors, dim)`` of the dense vectors one problem holds (times
        ``copies``); selective on a wide store counts them once its columns are known."""
        dim = int(meta.n_features) + 1
        vectors = self.dense_vectors(meta)
        extra = 0.0
        wide = self.algorithm.wide if dim - 1 >= remap_min_dim() else "features"
        if wide == "deferred":
            return 0.0, vectors, dim
        if wide == "columns":
            # w over the columns the rows hold (at most their non-zeros) and the int32 map
            dim = min(dim, int(meta.nnz) + 1)
            vectors = 1
            extra = 4.0 * int(meta.n_features)
        return vectors * 8.0 * dim * max(1, copies) + extra, vectors, dim

    def _budget_floor_mib(self, name: str, meta: StoreMeta) -> float:
        # the dense vectors and a few dense planes: check_dense and the working set's needs
        if self.algorithm.chooses:
            return self.effective(meta)._budget_floor_mib(name, meta)
        if not self.algorithm.cutting_planes:  # its dense vectors alone
            return self._dense_bytes(meta)[0] / 2**20
        dim = int(meta.n_features) + 1
        return (self.dense_vectors(meta) + DENSE_FLOOR_PLANES) * 8.0 * dim / 2**20

    def _claim_bytes(self, name: str, mib: float, meta: StoreMeta) -> int:
        # the dense vectors are inside --dense-limit-mb and claimed already; dcd keeps no
        # cutting planes
        if self.algorithm.chooses:
            return self.effective(meta)._claim_bytes(name, mib, meta)
        if not self.algorithm.cutting_planes:
            return 0
        return max(0, int(mib * 2**20) - int(self._dense_bytes(meta)[0]))

    def dense_vectors(self, meta: StoreMeta) -> int:
        """Dense vectors over the features this run holds at once (per problem)."""
        loss = self.loss or ("ordinal" if meta.label_kind == "ordinal" else "error")
        return self.algorithm.dense_vectors_for(loss)

    def check_dense(
        self,
        meta: StoreMeta,
        copies: int = 1,
        extra_bytes: float = 0.0,
        room: int | None = None,
    ) -> None:
        """Refuse up front a store whose dense vectors would not fit ``dense_limit_mb``.

        perf keeps about ``DENSE_VECTORS`` dense float64 vectors over the features (w, the
        best point, the cutting-plane solution, their difference, the new cut, ...) per
        problem (``DENSE_VECTORS_ACCELERATED`` for the default variant and loss; ``copies``:
        one-vs-rest classes); together they must fit the limit, which
        also bounds the working set of cutting planes. A legal line such as
        ``1 2147483648:1`` would otherwise make training ask for tens of GiB. ``room``
        (of :class:`ooc_svm.sizes.Sizes`) resolves ``--variant auto``.
        """
        if self.algorithm.chooses:
            self.effective(meta, room).check_dense(meta, copies, extra_bytes)
            return
        if self.algorithm.wide == "deferred" and int(meta.n_features) >= remap_min_dim():
            return  # checked over the columns the store holds, once counted (selective.py)
        dense, vectors, dim = self._dense_bytes(meta, copies)
        need = dense + float(extra_bytes)
        limit = float(self.dense_limit_mb) * 2**20
        if need > limit:
            raise SolverError(
                f"perf: the store has {int(meta.n_features):,} features: a dense w needs "
                f"{8.0 * dim / 2**20:,.0f} MiB and perf keeps {vectors * max(1, copies)} "
                f"such vectors ({need / 2**20:,.0f} MiB), more than --dense-limit-mb "
                f"{self.dense_limit_mb:g}; re-ingest with hashing or a smaller --n-features, "
                "or raise --dense-limit-mb"
            )

    def resolve_loss(self, meta: StoreMeta) -> str:
        """The loss for this store (default: error for binary, ordinal for rank labels)."""
        loss = self.loss
        if loss is None:
            loss = "ordinal" if meta.label_kind == "ordinal" else "error"
        if loss in ("error", "roc") and meta.label_kind != "binary":
            if loss == "error":
                binary_classes(meta)  # raises the standard message
            raise SolverError(
                f"--loss roc needs binary labels; the store has label kind {meta.label_kind!r} "
                "(use --loss ordinal for rank labels)"
            )
        if loss == "ordinal" and meta.label_kind == "binary":
            raise SolverError(
                "--loss ordinal needs rank labels; the store's labels are binary: use --loss roc "
                "(ROC area, the ordinal loss of two ranks)"
            )
        if loss == "ordinal" and meta.label_kind != "ordinal":
            raise SolverError(
                f"--loss ordinal needs rank labels (integers); the store has label kind "
                f"{meta.label_kind!r}"
            )
        return loss


def remap_min_dim() -> int:
    """:data:`REMAP_MIN_DIM`, or ``ooc_svm.solvers.perf.REMAP_MIN_DIM`` where set."""
    pkg = sys.modules.get(__name__.rsplit(".", 1)[0])
    return int(getattr(pkg, "REMAP_MIN_DIM", REMAP_MIN_DIM))


DEFAULTS: dict[str, Any] = Params.defaults()
