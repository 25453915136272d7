"""The automatic sizes of one run, handed down from the command to the engine and the solver.

The memory budget (:mod:`ooc_svm.memory_budget`) is measured by the command that runs a
training (:func:`ooc_svm.api.claim_memory`), which makes the run's claims and then resolves
a :class:`Sizes` from it: the room perf's ``--variant auto`` chooses by (and dcd holds its
blocks by), fixed once, and the run's budget itself, for the shares taken of what is left
when a size is first needed (the shard cache, the pages read ahead, ``--inner-mb auto``)
and the claims a solver makes while it runs (selective's rows). The engine is handed it
(:meth:`ooc_svm.engine.base.Engine.use_sizes`) and the solver reads it from the engine
(:func:`sizes_of`); nothing below the command reads the process's budget itself.

A solver or an engine called without a command (a library call, as the tests make) has no
sizes handed down: :func:`sizes_of` then measures them here, the one place below the command
that reads the process's budget (``tests/test_sizes.py`` checks it).

Standard library only (below the engine and the solvers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .memory_budget import MemoryBudget

__all__ = ["Sizes", "measure", "sizes_of"]


@dataclass(frozen=True)
class Sizes:
    """The automatic sizes of one run (see the module doc).

    ``room``: bytes of the budget not claimed by anything but the solver's own sizes, read
    once when the run's claims are made (perf: what ``--variant auto`` chooses by and dcd's
    ``--inner-mb auto`` holds its blocks by; the same before and after the solver's claims).
    ``budget``: the run's budget, for the shares of what is left and the run-time claims.
    """

    room: int
    budget: MemoryBudget = field(repr=False, compare=False)

    @classmethod
    def of(cls, budget: MemoryBudget, own_claims: Iterable[str] = ()) -> Sizes:
        """The sizes of a run on ``budget``; ``own_claims`` names the claims that are the
        solver's own (counted in :attr:`room`, so that it is the same before and after them)."""
        room = budget.free + sum(int(budget.claims.get(k, 0)) for k in own_claims)
        return cls(int(room), budget)

    # ------------------------------------------------------------------ shares of what is left

    @property
    def free(self) -> int:
        """Bytes of the budget not claimed now."""
        return self.budget.free

    def share(self, fraction: float, cap: int | None = None) -> int:
        """``fraction`` of the budget not claimed now, at most ``cap`` bytes."""
        return self.budget.share(fraction, cap)

    def room_share(self, fraction: float) -> int:
        """``fraction`` of :attr:`room`."""
        return int(max(0.0, float(fraction)) * self.room)

    # ------------------------------------------------------------------ claims while it runs

    def claim(self, name: str, nbytes: int, what: str = "this run", fix: str = "") -> None:
        """Claim ``nbytes`` a run cannot do without (:meth:`MemoryBudget.require`: refused
        in one line, :class:`~ooc_svm.memory_budget.MemoryBudgetError`, above the budget)."""
        self.budget.require(name, nbytes, what, fix)

    def release(self, name: str) -> None:
        """Drop the claim ``name`` (its owner is done)."""
        self.budget.release(name)

    def claims(self) -> dict[str, int]:
        """The claims made so far (name -> bytes)."""
        return dict(self.budget.claims)


def measure(own_claims: Iterable[str] = ()) -> Sizes:
    """Sizes from the process's budget, for a run no command handed any to (see the
    module doc): the one read of the budget below the command."""
    from .memory_budget import current

    return Sizes.of(current(), own_claims)


def sizes_of(engine: Any, own_claims: Iterable[str] = ()) -> Sizes:
    """The sizes handed to ``engine`` by the command running it, else measured now
    (:func:`measure`: a solver or engine called without a command)."""
    sizes = getattr(engine, "sizes", None)
    return sizes if isinstance(sizes, Sizes) else measure(own_claims)
