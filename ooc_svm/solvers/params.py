"""The typed parameter contract of the solvers.

Every solver module defines one frozen dataclass of its parameters (``Params``), derived from
:class:`SolverParams` (perf) or :class:`KernelSolverParams` (smo, active-set, irwls). Each
field carries its type, its default and, in ``field(metadata=...)``, its help text (and its
``choices``); ``ooc-svm train`` generates its solver flags, and the defaults ``train --help``
shows, from these fields (flag ``--name-with-dashes``), so the command line, the TOML files in
``conf/`` and ``ooc_svm.train(store, solver, **params)`` share one list of names.

Validation happens once:

- :meth:`SolverParams.__post_init__` checks every rule that needs no data (types, ranges,
  choices), one wording per rule (``--C must be positive (got -1.0)``);
- :meth:`SolverParams.validate` checks what depends on the store (label kind, ...).

Both raise :class:`~ooc_svm.solvers.SolverError`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import SolverError

if TYPE_CHECKING:
    from ..memory_budget import MemoryBudget
    from ..sizes import Sizes
    from ..store.format import StoreMeta

log = logging.getLogger(__name__)

P = TypeVar("P", bound="SolverParams")

KERNELS = ("linear", "rbf", "poly", "sigmoid")


def param(
    default: Any,
    help: str,
    *,
    choices: tuple[Any, ...] | None = None,
    cli: str | None = None,
    gt: float | None = None,
    ge: float | None = None,
    note: str = "",
) -> Any:
    """A dataclass field with its help text, allowed values and range in the metadata.

    ``cli`` overrides how the flag is generated: ``"bool"`` (``--x/--no-x``), ``"no"`` (a
    ``--no-x`` flag that sets False) or ``"hidden"`` (no flag). ``gt`` / ``ge``: the value
    (when not None) must be > ``gt`` / >= ``ge``, checked at construction with one wording
    (``--C must be positive (got -1.0)``), ``note`` appended to the message.
    """
    meta = {"help": help, "choices": choices, "cli": cli, "gt": gt, "ge": ge, "note": note}
    return field(default=default, metadata=meta)


def check_range(name: str, v: Any, meta: Mapping[str, Any]) -> None:
    """The range a field declares (:func:`param`'s ``gt`` / ``ge``), as a rule."""
    gt, ge, note = meta.get("gt"), meta.get("ge"), meta.get("note", "")
    if v is None:
        return
    if gt is not None and not v > gt:
        bound = "positive" if gt == 0 else f"> {gt}"
        raise SolverError(f"{flag_name(name)} must be {bound} (got {v}){note}")
    if ge is not None and not v >= ge:
        raise SolverError(f"{flag_name(name)} must be >= {ge} (got {v}){note}")


def flag_name(name: str) -> str:
    """Command-line flag of a parameter: ``cache_mb`` -> ``--cache-mb``."""
    return "--" + name.replace("_", "-")


def _base_type(tp: Any) -> type:
    """``float | None`` -> float; ``int`` -> int."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    base: type = args[0] if args else tp
    return base


def _optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


@dataclass(frozen=True)
class SolverParams:
    """Parameters every solver takes."""

    #: ``--solver`` name (set by subclasses; not a parameter)
    SOLVER: typing.ClassVar[str] = ""
    #: whether the solver implements ``class_weight`` (others refuse it)
    SUPPORTS_CLASS_WEIGHT: typing.ClassVar[bool] = False
    #: sizes in MiB that draw from the process's memory budget, and the share of the budget
    #: left unclaimed that each may take at most (:meth:`fit_memory`)
    BUDGET_SHARES: typing.ClassVar[dict[str, float]] = {}
    #: the budget's claims that are the solver's own sizes: the ``room`` of
    #: :class:`ooc_svm.sizes.Sizes` counts them as free (the room its automatic choices
    #: read, the same before and after them)
    OWN_CLAIMS: typing.ClassVar[tuple[str, ...]] = ()

    C: float = param(
        1.0, "regularisation: minimise 1/2 |w|^2 + C * sum_i xi_i (LIBLINEAR units)", gt=0
    )
    max_iter: int = param(10_000, "iteration limit; reaching it is reported as not converged", ge=0)
    seed: int = param(0, "seed of every randomised step")
    class_weight: str | None = param(
        None,
        "per-class C multipliers, as LIBLINEAR/LIBSVM -wi, every solver (perf: --loss error "
        "and roc): 'pos=10', 'neg=2,pos=5', 'LABEL=W,...' (store labels) or 'balanced' "
        "(n / (2 n_class)); default: all 1",
    )
    checkpoint_seconds: float = param(
        60.0, "with --checkpoint: save at least every this many seconds (solvers that can)", gt=0
    )
    init: str | None = field(
        default=None,
        compare=False,
        metadata={
            "help": "warm start from MODEL, a model of this store or of its first rows (before "
            "`ingest --append`): perf starts from its w and its cutting plane, smo, "
            "active-set and irwls from its alpha (rows found by index, or by fingerprint "
            "in a rebuilt store; new rows at 0); the result is the one a cold start reaches, "
            "usually in far fewer passes",
            "choices": None,
            "cli": None,
            "gt": None,
            "ge": None,
            "note": "",
            # in Python: a model directory or a Model (kept as given)
            "object": True,
        },
    )

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def fields(cls) -> list[dataclasses.Field[Any]]:
        return list(dataclasses.fields(cls))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def types(cls) -> dict[str, Any]:
        return typing.get_type_hints(cls)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``{name: default}`` of every parameter (the solver module's ``DEFAULTS``)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    @classmethod
    def from_mapping(cls: type[P], params: Mapping[str, Any] | None = None, **kw: Any) -> P:
        """Parameters from a dict (None values take the default); unknown names are refused
        with the list of valid ones (and the right flag for ``tol`` / ``eps``)."""
        given = {**(params or {}), **kw}
        given = {k.replace("-", "_"): v for k, v in given.items() if v is not None}
        cls.check_names(given)
        return cls(**given)

    @classmethod
    def check_names(cls, names: Iterable[str]) -> None:
        """Refuse names that are not parameters of this solver."""
        valid = set(cls.names())
        unknown = sorted(set(names) - valid)
        if not unknown:
            return
        hint = cls.misplaced_hint(unknown)
        if hint:
            raise SolverError(hint)
        raise SolverError(
            f"--solver {cls.SOLVER} does not take {', '.join(flag_name(k) for k in unknown)}; "
            f"its parameters are {', '.join(sorted(valid))}"
        )

    @classmethod
    def misplaced_hint(cls, unknown: list[str]) -> str | None:
        """A message naming the right flag for a parameter of another solver, or None."""
        return None

    def __post_init__(self) -> None:
        types = self.types()
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            tp = types[f.name]
            if v is None:
                if not _optional(tp):
                    object.__setattr__(self, f.name, f.default)
                continue
            if f.metadata.get("object") and not isinstance(v, str | os.PathLike):
                from .warm import Start

                if not isinstance(v, Start) and (
                    not hasattr(v, "kind") or not hasattr(v, "n_features")
                ):
                    raise SolverError(
                        f"{flag_name(f.name)} must be a model directory or a Model "
                        f"(got {type(v).__name__})"
                    )
                continue
            if f.metadata.get("object") and isinstance(v, os.PathLike):
                v = os.fspath(v)
            object.__setattr__(self, f.name, _coerce(f.name, v, _base_type(tp)))
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise SolverError(
                    f"{flag_name(f.name)} must be one of {', '.join(map(str, choices))} (got {v!r})"
                )
        for f in dataclasses.fields(self):
            check_range(f.name, getattr(self, f.name), f.metadata)
        self.rules()

    def rules(self) -> None:
        """Store-independent rules beyond the fields' declared ranges (called once, at
        construction)."""
        if self.class_weight is not None:
            if not self.SUPPORTS_CLASS_WEIGHT:
                raise SolverError(f"--solver {self.SOLVER} does not support --class-weight yet")
            parse_class_weight(self.class_weight)

    def class_costs(
        self, negative: float, positive: float, counts: Mapping[float, int] | None = None
    ) -> tuple[float, float]:
        """``(C_neg, C_pos)``: C times each class's weight (LIBLINEAR/LIBSVM ``-wi``).

        ``negative`` / ``positive`` are the store's label values of the binary problem;
        ``counts`` (label value -> rows) is needed for ``balanced`` only.
        """
        weights = class_weights(self.class_weight, negative, positive, counts)
        return self.C * weights[0], self.C * weights[1]

    def validate(self, meta: StoreMeta) -> None:
        """Rules that depend on the store (``meta``: its metadata)."""
        if meta.n_rows == 0:
            raise SolverError("the store has no rows")
        self.check_costs(int(meta.n_rows))

    def base_C(self, n_rows: int) -> float:
        """The C the run uses (LIBLINEAR units) on ``n_rows`` rows."""
        return float(self.C)

    def C_text(self, C: float) -> str:
        """How the user gave C, for messages."""
        return f"--C {C:g}"

    def check_costs(self, n_rows: int) -> None:
        """Refuse a C or class weight whose products overflow or vanish in the solvers'
        arithmetic (a dual variable is at most C·weight; their sum, C·weight·n, is squared
        in objectives and Gram products): ``COST_MIN <= C·weight`` and
        ``C·weight·n <= COST_MAX``, naming the culprit."""
        C = self.base_C(n_rows)
        weights: dict[str, float] = {}
        if self.class_weight is not None:
            parsed = parse_class_weight(self.class_weight)
            if isinstance(parsed, dict):
                weights = parsed
        for key, w in [("", 1.0), *weights.items()]:
            c = C * w
            blame_weight = bool(key)  # C alone passed (checked first, with weight 1)
            what = f"--class-weight {key}={w:g}" if blame_weight else self.C_text(C)
            product = "C x weight x rows" if key else "C x rows"
            if not c * n_rows <= COST_MAX:
                raise SolverError(
                    f"{what} is too large: {product} = {c * n_rows:.3g} overflows the "
                    f"solvers' arithmetic (limit {COST_MAX:g}); use a smaller "
                    + ("class weight" if blame_weight else "--C")
                )
            if not c >= COST_MIN:
                raise SolverError(
                    f"{what} is too small: {'C x weight' if key else 'C'} = {c:.3g} vanishes "
                    "in the solvers' "
                    f"arithmetic (limit {COST_MIN:g}); use a larger "
                    + ("class weight" if blame_weight else "--C")
                )

    def memory_needs(self, meta: StoreMeta) -> dict[str, int]:
        """Bytes this solver cannot do without on this store (name -> bytes); none here."""
        return {}

    def memory_floor(self, meta: StoreMeta) -> dict[str, int]:
        """The least :meth:`fit_memory` claims on this store, whatever the budget: the
        :meth:`memory_needs` and every :attr:`BUDGET_SHARES` size at the least it may be
        lowered to (name -> bytes)."""
        out = dict(self.memory_needs(meta))
        for name in self.BUDGET_SHARES:
            mib = min(float(getattr(self, name)), self._budget_floor_mib(name, meta))
            out[flag_name(name)] = self._claim_bytes(name, mib, meta)
        return out

    def fit_memory(self: P, meta: StoreMeta, budget: MemoryBudget) -> P:
        """These parameters within the process's memory budget.

        First the solver's :meth:`memory_needs` are claimed (a budget below them is refused
        before any work, :class:`~ooc_svm.memory_budget.MemoryBudgetError`); then every size
        of :attr:`BUDGET_SHARES` is lowered to its share of what is left (``-vv`` logs it;
        ``--json`` reports the claims), and
        claimed, so the sizes sized after it (the shard cache) share what remains.
        """
        for name, nbytes in self.memory_needs(meta).items():
            budget.require(name, nbytes, f"--solver {self.SOLVER} on this store")
        changes: dict[str, float] = {}
        for name, share in self.BUDGET_SHARES.items():
            mib = float(getattr(self, name))
            cap = budget.share(share) / 2**20
            if mib > cap:
                floor = self._budget_floor_mib(name, meta)
                cap = max(cap, floor)
                if mib > cap:
                    log.debug(
                        "%s %g lowered to %.0f MiB: its share of the %s",
                        flag_name(name), mib, cap, budget.describe(),
                    )  # fmt: skip
                    changes[name] = cap
                    mib = cap
            budget.require(
                flag_name(name), self._claim_bytes(name, mib, meta), f"--solver {self.SOLVER}"
            )
        return self.replace(**changes) if changes else self

    def chooses_by_budget(self) -> bool:
        """Whether :meth:`for_sizes` resolves anything (perf's ``--variant auto``)."""
        return False

    def for_sizes(self: P, meta: StoreMeta, sizes: Sizes) -> P:
        """These parameters with what they choose from the memory budget resolved for the
        run's ``sizes`` (perf: ``--variant auto``), for :meth:`memory_floor` and
        :meth:`fit_memory` to claim what will run; as they are here."""
        return self

    def _budget_floor_mib(self, name: str, meta: StoreMeta) -> float:
        """The least a :attr:`BUDGET_SHARES` size may be lowered to (MiB)."""
        return 1.0

    def _claim_bytes(self, name: str, mib: float, meta: StoreMeta) -> int:
        """What a :attr:`BUDGET_SHARES` size of ``mib`` claims beyond :meth:`memory_needs`."""
        return int(mib * 2**20)

    def to_dict(self) -> dict[str, Any]:
        """The parameters as plain values (a Model given as ``init`` is named, not copied;
        a :class:`~ooc_svm.solvers.warm.Start` by its directory, or as a Model)."""
        from .warm import Start

        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(out.get("init"), Start):
            out["init"] = out["init"].name()
        elif out.get("init") is not None and not isinstance(out["init"], str):
            out["init"] = "<model>"
        return out

    def replace(self: P, **changes: Any) -> P:
        return dataclasses.replace(self, **changes)


def _coerce(name: str, v: Any, tp: type) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
            return v.lower() in ("true", "1", "yes")
        if isinstance(v, (int,)) and v in (0, 1):
            return bool(v)
        raise SolverError(f"{flag_name(name)} must be true or false (got {v!r})")
    if tp is int:
        if isinstance(v, bool) or not (
            isinstance(v, int) or (isinstance(v, float) and float(v).is_integer())
        ):
            try:
                if isinstance(v, str) and str(int(v)) == v.strip():
                    return int(v)
            except ValueError:
                pass
            raise SolverError(f"{flag_name(name)} must be an integer (got {v!r})")
        return int(v)
    if tp is float:
        try:
            if isinstance(v, bool):
                raise ValueError
            return float(v)
        except (TypeError, ValueError):
            raise SolverError(f"{flag_name(name)} must be a number (got {v!r})") from None
    if tp is str:
        return str(v)
    return v


@dataclass(frozen=True)
class KernelSolverParams(SolverParams):
    """Parameters of the dual (kernel) solvers: smo, active-set, irwls."""

    kernel: str = param("rbf", "kernel (perf: linear only)", choices=KERNELS)
    gamma: float | None = param(
        None,
        "kernel gamma, > 0 (default: 1/n_features, LIBSVM's)",
        gt=0,
        note="; omit --gamma for 1/n_features",
    )
    degree: int = param(3, "poly kernel degree", ge=0)
    coef0: float = param(0.0, "poly / sigmoid kernel coef0")
    tol: float = param(1e-3, "stopping tolerance on the KKT conditions (LIBSVM -e)", gt=0)
    cache_mb: float = param(
        256.0, "kernel cache budget in MiB (at most a quarter of the memory budget)", ge=0
    )

    BUDGET_SHARES: typing.ClassVar[dict[str, float]] = {"cache_mb": 0.25}

    @classmethod
    def misplaced_hint(cls, unknown: list[str]) -> str | None:
        if "eps" in unknown:
            return (
                f"--solver {cls.SOLVER} stops on --tol (the KKT tolerance, as LIBSVM's -e); "
                "--eps is for perf (the duality gap)"
            )
        return None

    def validate(self, meta: StoreMeta) -> None:
        """Binary labels (rank data is refused, pointing to ``--solver perf``)."""
        from . import binary_classes

        super().validate(meta)
        binary_classes(meta)
        if self.kernel == "linear":  # the other kernels keep nothing dense over the features
            check_dense_features(meta)

    def kernel_dict(self) -> dict[str, Any]:
        """``kernel, gamma, degree, coef0`` for :meth:`KernelParams.from_params`."""
        return {
            "kernel": self.kernel,
            "gamma": self.gamma,
            "degree": self.degree,
            "coef0": self.coef0,
        }


def as_params(cls: type[P], params: SolverParams | Mapping[str, Any] | None) -> P:
    """``params`` as a ``cls`` instance (a dict is converted and checked)."""
    if isinstance(params, cls):
        return params
    if isinstance(params, SolverParams):
        raise SolverError(f"--solver {cls.SOLVER} got the parameters of --solver {params.SOLVER}")
    return cls.from_mapping(params or {})


def parse_class_weight(spec: str) -> dict[str, float] | str:
    """``'pos=10,neg=1'`` / ``'1=10,-1=2'`` -> ``{key: weight}``; ``'balanced'`` as is.

    Keys are ``pos``, ``neg`` or a label value; weights must be positive numbers.
    """
    text = str(spec).strip()
    if text == "balanced":
        return text
    out: dict[str, float] = {}
    for item in text.split(","):
        key, sep, val = item.partition("=")
        key = key.strip()
        try:
            w = float(val)
        except ValueError:
            w = float("nan")
        if not sep or not key or not w > 0 or w == float("inf"):
            raise SolverError(
                f"--class-weight: bad item {item.strip()!r} in {spec!r}; use 'pos=10', "
                "'neg=2,pos=5', 'LABEL=WEIGHT,...' with positive weights, or 'balanced'"
            )
        if key not in ("pos", "neg"):
            try:
                key = repr(float(key))
            except ValueError:
                raise SolverError(
                    f"--class-weight: {key!r} is neither pos, neg nor a label value"
                ) from None
        if key in out:
            raise SolverError(f"--class-weight: {key!r} given twice in {spec!r}")
        out[key] = w
    return out


def class_weights(
    spec: str | None,
    negative: float,
    positive: float,
    counts: Mapping[float, int] | None = None,
) -> tuple[float, float]:
    """``(w_neg, w_pos)`` of a binary problem whose labels are ``negative`` / ``positive``.

    ``balanced`` is scikit-learn's and LIBLINEAR users' convention: ``w_k = n / (2 n_k)``.
    A label value that is neither class of the problem is an error.
    """
    if spec is None:
        return 1.0, 1.0
    parsed = parse_class_weight(spec)
    if parsed == "balanced":
        if counts is None:
            raise SolverError("--class-weight balanced needs the label counts of the store")
        n_neg, n_pos = int(counts.get(negative, 0)), int(counts.get(positive, 0))
        if n_neg == 0 or n_pos == 0:
            raise SolverError("--class-weight balanced: one class has no rows")
        n = n_neg + n_pos
        return n / (2.0 * n_neg), n / (2.0 * n_pos)
    assert isinstance(parsed, dict)
    w_neg, w_pos = 1.0, 1.0
    known = {"neg", "pos", repr(float(negative)), repr(float(positive))}
    for key, w in parsed.items():
        if key not in known:
            raise SolverError(
                f"--class-weight: label {key} is not a class of this problem "
                f"(classes {negative:g} and {positive:g})"
            )
        if key in ("neg", repr(float(negative))):
            w_neg = w
        else:
            w_pos = w
    return w_neg, w_pos


#: range of a class's cost C·weight (lower bound) and of C·weight·rows (upper bound), the
#: scale of the dual variables and of their sum: squared in the objectives they stay finite
#: and above float64's underflow
COST_MIN = 1e-100
COST_MAX = 1e100


#: MiB a dense float64 vector over the features may take in the dual solvers (their linear
#: ``w``, the support vectors' feature index): a store beyond it is refused up front
DUAL_DENSE_LIMIT_MB = 4096
#: MiB of dense per-feature vectors a dual solver may always take; beyond it they must not
#: be larger than the store's decoded non-zeros (a width the data does not use)
DUAL_WIDE_FREE_MB = 256


def check_dense_features(meta: Any, limit_mb: float = DUAL_DENSE_LIMIT_MB) -> None:
    """Refuse a store whose dense per-feature vectors would not fit ``limit_mb`` MiB.

    One legal input line such as ``1 2147483648:1`` makes ``n_features`` 2^31: a dense ``w``
    (or the CSC index of the support vectors) would need 16 GiB.
    """
    need = 8 * int(meta.n_features) / 2**20
    if need > limit_mb:
        raise SolverError(
            f"the store has {int(meta.n_features):,} features: a dense vector over them needs "
            f"{need:,.0f} MiB, more than this solver's bound of {limit_mb:,.0f} MiB; hash the "
            "features into fewer columns or re-ingest with a smaller --n-features"
        )
    # a width the data does not use: 2 rows declaring 2e8 features took 3.2 GB to train
    nnz = int(getattr(meta, "nnz", 0) or 0)
    data_mb = 12.0 * nnz / 2**20  # the store's own non-zeros (value + column), decoded
    if need > max(DUAL_WIDE_FREE_MB, data_mb):
        raise SolverError(
            f"the store declares {int(meta.n_features):,} features but holds only {nnz:,} "
            f"non-zeros: the linear kernel's dense w over that width needs {need:,.0f} MiB, "
            f"more than the data itself ({data_mb:,.1f} MiB) and {DUAL_WIDE_FREE_MB:g} MiB; "
            "re-ingest with --hash-bits B or a smaller --n-features, or use a non-linear "
            "--kernel (kernel models keep no vector over the features)"
        )
