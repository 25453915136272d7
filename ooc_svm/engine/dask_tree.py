"""The fixed reduction tree of a Dask pass cut along runs of shards.

:func:`tree_nodes` gives the complete subtrees of :func:`~ooc_svm.engine.base.tree_reduce`
that lie inside a run of positions (what a worker reduces its run into);
:func:`tree_join` rebuilds the root from such subtrees, as the tree does, so results are
bit-identical across engines and worker counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _tree_sizes(a: int, b: int, n: int) -> list[tuple[int, int]]:
    out = []
    while a < b:
        lev = 0
        while (1 << lev) < n:
            size = 1 << (lev + 1)
            if a % size or min(a + size, n) > b:
                break
            lev += 1
        out.append((a, 1 << lev))
        a = min(a + (1 << lev), n)
    return out


def tree_nodes(a: int, b: int, n: int) -> list[tuple[int, int]]:
    """The largest subtrees of :func:`~ooc_svm.engine.base.tree_reduce` over ``n`` positions
    that lie inside positions ``[a, b)``, left to right, as ``(start, stop)``.

    Node ``i`` of level ``L`` of that tree covers ``[i·2^L, min((i+1)·2^L, n))`` (an odd last
    element moves up unchanged), and reducing its positions alone with ``tree_reduce``
    builds the same subtree, so a worker can reduce its run of shards into these nodes.
    """
    return [(s, min(s + size, n)) for s, size in _tree_sizes(a, b, n)]


def _node_value(have: dict, s: int, e: int, n: int, reduce: Callable[[Any, Any], Any]) -> Any:
    """Value of the tree node ``[s, e)`` over ``n`` positions from the values of complete
    subtrees ``have[(start, stop)]`` that cover it (``reduce`` joins them as the tree does)."""
    size = 1
    while size < e - s:
        size *= 2

    def node(s: int, size: int) -> Any:
        key = (s, min(s + size, n))
        if key in have:
            return have[key]
        if size <= 1:
            raise ValueError(f"position {s} is in no subtree")
        half = size // 2
        if s + half >= n:  # no right half: the left one moves up unchanged
            return node(s, half)
        return reduce(node(s, half), node(s + half, half))

    return node(s, size)


def tree_join(n: int, nodes: dict[tuple[int, int], Any], reduce: Callable[[Any, Any], Any]) -> Any:
    """The root of :func:`~ooc_svm.engine.base.tree_reduce` over ``n`` positions, given the
    values of complete subtrees ``nodes[(start, stop)]`` that cover every position (e.g. from
    :func:`tree_nodes` of consecutive runs)."""
    return _node_value(nodes, 0, n, n, reduce) if n > 0 else None
