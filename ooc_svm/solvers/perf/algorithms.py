"""perf's algorithms, one row each: what ``--variant NAME`` solves, reads, supports and runs.

This is the one place that knows perf's algorithms (LIBLINEAR's ``solver_type`` table and
``check_parameter``, scikit-learn's ``_get_liblinear_solver_type`` are the models): every
capability question elsewhere (``--variant auto`` in :mod:`.auto`, the memory a run claims in
:mod:`.params`, one-vs-rest and the C sweep in :mod:`ooc_svm.solvers.perf`, which loop
:mod:`.driver` runs) reads a row of :data:`ALGORITHMS`; no variant name is compared
elsewhere (``tests/solvers/test_perf_algorithms.py`` checks it).

:func:`check_parameter` refuses, in one line naming the flag, a parameter set away from its
default that the row does not read (``--max-inner 7`` with ``--variant dcd``). It compares
with the field's default, so a default given explicitly (``--config perf``, which writes every
default) is accepted. ``auto`` reads what any row it may pick reads, except ``--hinge``: its
picks differ in the problem the squared hinge would change.

The table is light: no algorithm is imported until its :attr:`Algorithm.entry` is called.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

from .. import SolverError
from ..contract import Entry
from ..params import SolverParams

#: perf's ``Params`` (named by its base: this table sits below :mod:`.params`, which reads it)
P = TypeVar("P", bound=SolverParams)

_PKG = __name__.rsplit(".", 1)[0]

#: the fields every row reads: the problem (C, c_perf, eps, bias, loss, class_weight, kernel),
#: the run around the algorithm (max_iter, init, checkpoint_seconds; seed: dcd's orders, and
#: the split of ``--folds`` for every row) and the dense vectors' limit that every row checks
#: (--dense-limit-mb)
COMMON = frozenset(
    {
        "C",
        "c_perf",
        "eps",
        "bias",
        "loss",
        "variant",
        "kernel",
        "class_weight",
        "max_iter",
        "seed",
        "init",
        "checkpoint_seconds",
        "dense_limit_mb",
    }
)

#: dense float64 vectors over the features perf holds at once per problem (w, w_b, w_c,
#: w_c − w_b, the two-column copy for the pass, the new cut and temporaries), all within
#: ``dense_limit_mb``
DENSE_VECTORS = 10

#: the same for the default (``--variant accelerated``, ``--loss error``), which keeps its
#: cutting planes sparse when that is smaller and holds w_b and the pass's (w_b, w_c) copy,
#: plus w_c while that copy is made (solvers/perf/error.py; docs/WIDTH.md)
DENSE_VECTORS_ACCELERATED = 4

#: dense vectors over the features of ``--variant dcd``: w, and the column map of a wide
#: store with its counts (int32, counted as one more float64 vector)
DENSE_VECTORS_DCD = 2

#: the problems (``Algorithm.problem``)
PROBLEM = "LIBLINEAR's L1-loss primal (-s 3), the bias a regularised constant feature"
PROBLEM_RANKS = PROBLEM + "; roc/ordinal: Joachims' OP5 over the ranked pairs"
PROBLEM_SQUARED = PROBLEM + "; --hinge l2: the squared hinge (LIBLINEAR -s 1)"


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of ``--solver perf`` (one choice of ``--variant``).

    Attributes
    ----------
    name : str
        The ``--variant`` value.
    summary : str
        One line: what the algorithm does.
    problem : str
        The problem it solves (loss, bias).
    losses : tuple of str
        The ``--loss`` values it trains.
    hinges : tuple of str
        The ``--hinge`` values it trains (l1: the hinge, l2: the squared hinge).
    class_weight : bool
        It trains ``--class-weight`` (per-class C).
    reads : frozenset of str
        The fields of :class:`~.params.Params` it reads; any other one set away from its
        default is refused (:func:`check_parameter`).
    checkpoint : bool
        ``--checkpoint`` / ``--resume`` are supported.
    warm_start : bool
        ``train --init MODEL`` starts it.
    ovr : bool
        One-vs-rest on a multiclass store is supported.
    ovr_fused : bool
        ... with every class's pass fused into one (``solve_ovr``); else one class after the
        other.
    sweep_shared : bool
        A C sweep (error loss) runs every C in shared passes (``solve_sweep``).
    dask : bool
        It runs on the Dask engine.
    chooses : bool
        It picks another row from the store's shape and the memory budget (``auto``:
        :mod:`.auto`); the others run as named.
    fused_as : str
        The row whose steps run for it in fused passes (one-vs-rest, a shared C sweep);
        empty: its own.
    line_search : bool
        The cutting-plane step moves to the best point of a line search (OCAS); else to the
        cutting-plane QP's solution (Joachims 2006).
    stopping : str
        Its stopping rule, one phrase (``train --help``; empty: that of the row it picks).
    stop : str
        What the stop test measures: ``"gap"`` (P(w) − lower bound) or ``"violation"`` (the
        most violated constraint's, Joachims' Algorithm 1): the progress lines' label.
    cutting_planes : bool
        It keeps a working set of cutting planes (within ``--dense-limit-mb``).
    dense_vectors, dense_vectors_error : int
        Dense float64 vectors over the features it holds at once per problem (the second
        with ``--loss error``).
    wide : str
        On a store of at least ``REMAP_MIN_DIM`` columns, its dense vectors span
        ``"features"`` (every column), ``"columns"`` (the columns the rows hold, plus an int32
        map of them) or ``"deferred"`` (checked once those columns are counted, in the run).
    pass_accumulators : bool
        Its pass holds several cutting planes a thread over the columns (a memory need).
    entry : Entry
        ``entry(store, engine, params, *, callback=None, checkpoint=None) -> Result``.
    """

    name: str
    summary: str
    problem: str
    losses: tuple[str, ...]
    reads: frozenset[str]
    entry: Entry
    hinges: tuple[str, ...] = ("l1",)
    class_weight: bool = True
    checkpoint: bool = False
    warm_start: bool = True
    ovr: bool = True
    ovr_fused: bool = True
    sweep_shared: bool = True
    dask: bool = True
    chooses: bool = False
    fused_as: str = ""
    line_search: bool = True
    stopping: str = ""
    stop: str = "gap"
    cutting_planes: bool = True
    dense_vectors: int = DENSE_VECTORS
    dense_vectors_error: int = DENSE_VECTORS
    wide: str = "features"
    pass_accumulators: bool = False

    @property
    def fused(self) -> str:
        """The row whose steps run for this one in fused passes (:attr:`fused_as`)."""
        return self.fused_as or self.name

    def dense_vectors_for(self, loss: str) -> int:
        """:attr:`dense_vectors_error` for ``loss`` error, else :attr:`dense_vectors`."""
        return self.dense_vectors_error if loss == "error" else self.dense_vectors


def _entry(module: str, name: str) -> Entry:
    return Entry(f"{_PKG}.{module}", name)


_PLANES = COMMON | {"max_inactive", "warm_state"}
_ACCELERATED = _PLANES | {"line_points", "cut_points", "mu"}
_SELECTIVE = COMMON | {"max_inactive", "mu", "inner_mb", "max_inner", "inner_share"}
_SVMPERF = COMMON | {"max_inactive", "inner_mb"}
_DCD = COMMON | {"hinge", "shrinking", "inner_mb", "warm_state"}

#: every algorithm, in ``--variant``'s order of choices
ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "auto",
            "chosen from the store's shape and the memory budget (solvers/perf/auto.py)",
            PROBLEM_RANKS,
            ("error", "roc", "ordinal"),
            (_ACCELERATED | _SELECTIVE | _SVMPERF | _DCD) - {"hinge"},
            _entry("driver", "solve"),
            checkpoint=True,
            chooses=True,
            fused_as="accelerated",
            dense_vectors_error=DENSE_VECTORS_ACCELERATED,
        ),
        Algorithm(
            "paper",
            "Joachims 2006 Algorithms 1/2: the cutting-plane QP's solution, one pass each",
            PROBLEM_RANKS,
            ("error", "roc", "ordinal"),
            _PLANES,
            _entry("driver", "solve_planes"),
            checkpoint=True,
            line_search=False,
            stop="violation",
            stopping="most violated constraint violated by <= eps (xi' <= xi_W + eps, "
            "Joachims 2006 Alg. 1 line 9)",
        ),
        Algorithm(
            "accelerated",
            "OCAS-style line search to the best point, in the same single pass",
            PROBLEM_RANKS,
            ("error", "roc", "ordinal"),
            _ACCELERATED,
            _entry("driver", "solve_planes"),
            checkpoint=True,
            dense_vectors_error=DENSE_VECTORS_ACCELERATED,
            stopping="P(w_best) - dual(W) <= eps * C * n (n: rows, or pairs for roc/ordinal)",
        ),
        Algorithm(
            "selective",
            "many inner cutting planes on the rows near the margin held in memory",
            PROBLEM,
            ("error",),
            _SELECTIVE,
            _entry("selective", "solve_selective"),
            class_weight=False,
            ovr=False,
            sweep_shared=False,
            wide="deferred",
            pass_accumulators=True,
            stopping="the accelerated certificate, P(w_best) measured by a full pass",
        ),
        Algorithm(
            "svmperf",
            "SVMperf 3.00's loop (loose QP, shrinking) plus the dual-gap certificate",
            PROBLEM,
            ("error",),
            _SVMPERF,
            _entry("svmperf", "solve_svmperf"),
            class_weight=False,
            ovr=False,
            # as before the table: a shared C sweep runs accelerated's steps for it
            # (solvers/perf/ovr.py, solve_sweep), a known difference kept as it was
            sweep_shared=True,
            stopping="a full round with ceps <= eps (SVMperf 3.00), then P(w) - dual(W) <= "
            "eps * C * n",
        ),
        Algorithm(
            "dcd",
            "block-minimization dual coordinate descent over the shards (Yu et al. 2010)",
            PROBLEM_SQUARED,
            ("error",),
            _DCD,
            _entry("dcd", "solve_dcd"),
            hinges=("l1", "l2"),
            ovr_fused=False,
            sweep_shared=False,
            cutting_planes=False,
            dense_vectors=DENSE_VECTORS_DCD,
            dense_vectors_error=DENSE_VECTORS_DCD,
            wide="columns",
            stopping="P(w) - D(alpha) <= eps * C * n after an epoch",
        ),
    )
}

#: ``--variant``'s choices
NAMES: tuple[str, ...] = tuple(ALGORITHMS)


def algorithm(name: str) -> Algorithm:
    """The row of ``--variant name``."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise SolverError(f"--variant must be one of {', '.join(NAMES)} (got {name!r})") from None


def _listed(names: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def _given(name: str, value: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def readers(name: str) -> list[str]:
    """The rows (not ``auto``) that read the field ``name``, in table order."""
    return [a.name for a in ALGORITHMS.values() if name in a.reads and not a.chooses]


def check_parameter(params: Any, row: Algorithm | None = None) -> None:
    """Refuse, in one line, a parameter set away from its default that ``row`` (default:
    that of ``params.variant``) does not read; then a loss or class weight it does not
    train."""
    row = row or algorithm(params.variant)
    for f in fields(params):
        if f.name in row.reads:
            continue
        value = getattr(params, f.name)
        if value == f.default:
            continue
        by = _listed(readers(f.name)) or "none"
        raise SolverError(
            f"{_given(f.name, value)} needs --variant {by}; --variant {row.name} does not read it"
        )
    if params.class_weight is not None and not row.class_weight:
        able = _listed([a.name for a in ALGORITHMS.values() if a.class_weight and not a.chooses])
        raise SolverError(
            f"perf: --class-weight is not supported with --variant {row.name} yet; use "
            f"--variant {able}"
        )
    if params.loss is not None and params.loss not in row.losses:
        train = [a.name for a in ALGORITHMS.values() if params.loss in a.losses and not a.chooses]
        raise SolverError(
            f"--variant {row.name} trains --loss {' or '.join(row.losses)} only (got --loss "
            f"{params.loss}); use --variant {_listed(train)} for {params.loss}"
        )


def resolved(params: P, name: str) -> P:
    """``params`` with ``--variant name`` (a row ``auto`` picked): the fields that row does
    not read are put back to their defaults (``auto`` accepts what any of its picks reads)."""
    row = algorithm(name)
    reset = {f.name: f.default for f in fields(params) if f.name not in row.reads}
    return params.replace(variant=name, **reset)
