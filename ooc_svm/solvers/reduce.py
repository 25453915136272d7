"""The None identity of the solvers' reduce functions (an engine reduces ``None`` partials of
empty shards and starts its fold from ``None``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def none_is_identity(merge: Callable[[T, T], T]) -> Callable[[T | None, T | None], T | None]:
    """``merge`` as a reduce in which ``None`` is the identity: ``f(None, b) = b``,
    ``f(a, None) = a``; ``merge`` itself sees two partials."""

    @functools.wraps(merge)
    def reduce(a: T | None, b: T | None) -> T | None:
        if a is None:
            return b
        if b is None:
            return a
        return merge(a, b)

    return reduce
