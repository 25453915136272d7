"""The streamed-pass contract every solver uses, and the deterministic reduction it relies on.

A solver never touches a store directly: it calls

    engine.map_reduce(store, fn, broadcast, reduce=None, state=None)

``fn(shard, broadcast)`` (or ``fn(shard, broadcast, st)`` with ``state``) is a module-level,
picklable function that returns a *partial*: a numpy array, a float, or a tuple / dict of
those (``None`` for shards that contribute nothing). Partials are combined by ``reduce``
(default :func:`add_partials`) **in shard order** (local engine: a left fold; Dask: a fixed
binary tree over shard ids), so a result never depends on thread timing or worker count
beyond floating-point reduction order.

Per-shard solver state that lives as long as training does (dual variables, scores) is a
:class:`ShardState`: with ``state=handle``, ``fn`` receives the shard's current state and
returns ``(partial, new_state)``; the engine keeps the new states (local: in a list; Dask: as
futures on the workers) for the next pass. ``fn`` must *return* the new state: mutating the
old one in place does not survive on Dask. New states replace the old ones only when the
whole pass succeeded.

``shards=[...]`` visits only the listed shards, and partials are reduced in the order of
that list (default: all shards in ascending order). ``engine.passes`` counts full passes
(``shards=None``), ``engine.partial_passes`` calls with a shard list.

:meth:`Engine.map_state` is ``map_reduce`` for functions that only need the per-shard state
and the shard's position (``row_start``, ``n_rows``, ``nnz``): no shard data is read.

Shard arrays handed to ``fn`` are read-only (they may be memory-mapped or cached).

Recomputable per-process scratch of a run (e.g. a solver's kernel-column caches) is a
:class:`WorkerScratch` placed in the broadcast: owned by the run on the local engine, by the
Dask worker process on Dask; never module-global state.
"""

from __future__ import annotations

import abc
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..sizes import Sizes
    from ..store.base import Store


def add_partials(a: Any, b: Any) -> Any:
    """Element-wise sum of two partial results (arrays, scalars, tuples, lists, dicts, None)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, tuple):
        return tuple(add_partials(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, list):
        return [add_partials(x, y) for x, y in zip(a, b, strict=True)]
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = add_partials(out.get(k), v)
        return out
    return a + b


def concat_partials(a: Any, b: Any) -> Any:
    """Reduce that concatenates lists (e.g. per-row scores gathered in shard order)."""
    if a is None:
        return b
    if b is None:
        return a
    return list(a) + list(b)


def tree_reduce(parts: list[Any], reduce: Callable[[Any, Any], Any]) -> Any:
    """Reduce in a fixed binary tree over the list order (deterministic for a given list).

    Level by level, neighbours are paired left to right; an odd last element moves up a
    level unchanged. :class:`StreamingTreeReduce` builds the same tree incrementally.
    """
    if not parts:
        return None
    while len(parts) > 1:
        nxt = [reduce(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


class StreamingTreeReduce:
    """The tree of :func:`tree_reduce`, built as partials arrive in order.

    Keeps O(log n) partials: a stack of complete power-of-two subtrees (a binary counter);
    :meth:`result` joins the remaining subtrees right to left, which is exactly where the
    level-by-level pairing of :func:`tree_reduce` puts them. So the local engine (streaming)
    and the Dask engine (a task tree) reduce identical partials bit for bit identically.

    The partials pushed are the fold's own (fresh results of pass functions, used once), so
    a ``reduce`` with a ``consuming`` attribute — the same reduction that may write into
    its first argument, same bits — is called through that instead.
    """

    def __init__(self, reduce: Callable[[Any, Any], Any]) -> None:
        self.reduce = getattr(reduce, "consuming", None) or reduce
        self._stack: list[tuple[int, Any]] = []
        self.count = 0

    def push(self, part: Any) -> None:
        size, v = 1, part
        while self._stack and self._stack[-1][0] == size:
            _, u = self._stack.pop()
            v = self.reduce(u, v)
            size *= 2
        self._stack.append((size, v))
        self.count += 1

    def result(self) -> Any:
        if not self._stack:
            return None
        _, v = self._stack[-1]
        for _, u in reversed(self._stack[:-1]):
            v = self.reduce(u, v)
        return v


class EngineError(Exception):
    """A pass cannot run: the cluster cannot be reached, lost data it cannot recompute,
    or a pass function is unusable (e.g. not picklable). The message says what to do."""


class ShardStub:
    """Position of a shard without its data (what :meth:`Engine.map_state` passes to ``fn``)."""

    __slots__ = ("index", "row_start", "n_rows", "nnz", "name")

    def __init__(self, index: int, row_start: int, n_rows: int, nnz: int, name: str = "") -> None:
        self.index = index
        self.row_start = row_start
        self.n_rows = n_rows
        self.nnz = nnz
        self.name = name

    def __repr__(self) -> str:
        return f"ShardStub(index={self.index}, row_start={self.row_start}, n_rows={self.n_rows})"


def shard_stub(store: Store, sid: int) -> ShardStub:
    info = store.meta.shards[sid]
    return ShardStub(int(sid), int(info.row_start), int(info.n_rows), int(info.nnz), info.name)


class ShardState:
    """Handle to per-shard state kept by an engine between passes.

    Use :meth:`Engine.init_state` to create one and :meth:`Engine.gather_state` to fetch the
    states (a list in the order of ``ids``) for checkpoints or final results.

    Attributes
    ----------
    n_shards : int
        Number of shards of the store.
    ids : list of int
        Shard ids that have a state (all shards unless created for a subset).
    items : list
        The states (local engine) or handles to them (Dask: futures), aligned with ``ids``.
    """

    def __init__(
        self, engine: Engine, n_shards: int, items: list[Any], ids: Iterable[int] | None = None
    ) -> None:
        self.engine = engine
        self.n_shards = n_shards
        self.items = items
        self.ids = list(range(len(items))) if ids is None else [int(i) for i in ids]
        if len(self.ids) != len(self.items):
            raise ValueError("ShardState: one item per shard id is needed")
        self._pos = {sid: k for k, sid in enumerate(self.ids)}

    def check(self, sids: Iterable[int]) -> None:
        missing = [s for s in sids if s not in self._pos]
        if missing:
            raise EngineError(
                f"no per-shard state for shard(s) {missing[:5]}; create the state for them "
                "with engine.init_state(store, init, shards=...)"
            )

    def get(self, sid: int) -> Any:
        return self.items[self._pos[sid]]

    def set(self, sid: int, value: Any) -> None:
        self.items[self._pos[sid]] = value


class Engine(abc.ABC):
    """Runs streamed passes over the shards of a store."""

    #: number of full passes (``shards=None``) made so far (solvers report it)
    passes: int = 0
    #: number of calls with a shard list
    partial_passes: int = 0
    #: the automatic sizes of the run in progress, handed down by the command running it
    #: (:meth:`use_sizes`); ``None``: measured where needed (:func:`ooc_svm.sizes.sizes_of`)
    sizes: Sizes | None = None

    def use_sizes(self, sizes: Sizes | None) -> None:
        """Size the run in progress by ``sizes`` (the command's; ``None`` when it ends)."""
        self.sizes = sizes

    def map_reduce(
        self,
        store: Store,
        fn: Callable[..., Any],
        broadcast: Any = None,
        reduce: Callable[[Any, Any], Any] | None = None,
        state: ShardState | None = None,
        shards: list[int] | None = None,
    ) -> Any:
        """Apply ``fn`` to every shard (or the listed ``shards``) and combine the partials.

        Parameters
        ----------
        store : Store
            An opened store (``open_store``); the Dask engine reopens it on the workers
            from ``store.path``.
        fn : callable
            Module-level ``fn(shard, broadcast) -> partial`` or, with ``state``,
            ``fn(shard, broadcast, st) -> (partial, new_st)``.
        broadcast : picklable
            Sent once per pass to every worker.
        reduce : callable, optional
            Combines two partials (default :func:`add_partials`), applied in the fixed
            tree of :func:`tree_reduce` over the shard list.
        state : ShardState, optional
        shards : list of int, optional
            Visit only these shards, reducing in this order.

        Returns
        -------
        The reduced partial (``None`` when there are no shards).
        """
        return self._run(store, fn, broadcast, reduce, state, shards, read=True)

    def map_state(
        self,
        store: Store,
        fn: Callable[..., Any],
        broadcast: Any = None,
        state: ShardState | None = None,
        reduce: Callable[[Any, Any], Any] | None = None,
        shards: list[int] | None = None,
    ) -> Any:
        """Like :meth:`map_reduce` but ``fn`` gets a :class:`ShardStub` (no data is read).

        For updates of per-shard state that need only the rows' positions (e.g. setting
        α of given global rows). Counts as a partial pass.
        """
        return self._run(store, fn, broadcast, reduce, state, shards, read=False)

    @abc.abstractmethod
    def _run(
        self,
        store: Store,
        fn: Callable[..., Any],
        broadcast: Any,
        reduce: Callable[[Any, Any], Any] | None,
        state: ShardState | None,
        shards: list[int] | None,
        read: bool,
    ) -> Any:
        """One pass: :meth:`map_reduce` (``read=True``) or :meth:`map_state` (``read=False``:
        ``fn`` gets a :class:`ShardStub`)."""

    def init_state(
        self, store: Store, init: Callable[[Any, int], Any], shards: Iterable[int] | None = None
    ) -> ShardState:
        """Create per-shard state with ``init(shard_info, shard_index)`` (no data is read)."""
        ids = list(range(store.n_shards)) if shards is None else [int(i) for i in shards]
        items = [init(store.meta.shards[i], i) for i in ids]
        return ShardState(self, store.n_shards, items, ids)

    def set_state(
        self, store: Store, items: list[Any], shards: Iterable[int] | None = None
    ) -> ShardState:
        """Create per-shard state from explicit values (e.g. loaded from a checkpoint)."""
        items = list(items)
        ids = list(range(len(items))) if shards is None else [int(i) for i in shards]
        return ShardState(self, store.n_shards, items, ids)

    def gather_state(self, state: ShardState) -> list[Any]:
        """Return the per-shard states, in the order of ``state.ids``, to the caller."""
        return list(state.items)

    def memory_need(self, store: Store) -> int:
        """Bytes this process holds for a pass over ``store`` whatever the caches (the
        decoded shards in flight); the Dask engine's workers hold theirs."""
        return 0

    def release_buffers(self) -> None:
        """Drop the free read buffers kept for the next shards of a pass (a caller that holds
        the shards it has read and reads no more calls it; the next pass allocates again)."""

    def close(self) -> None:
        """Release threads / cluster connections."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WorkerScratch:
    """Scratch space of one run for its shard functions, local to the process running them.

    Only for recomputable performance aids (e.g. kernel columns): it is kept out of the
    per-shard state that engines replicate and checkpoints save. Put it in a pass's broadcast.
    On the local engine the broadcast is not copied, so this object itself holds the entries
    (they belong to the run and go with it). Pickled to a Dask worker it travels as its
    ``(kind, key)``; inside a task it resolves to that worker process's instance (kept on
    ``distributed.get_worker()``), which lives across passes; a new run of the same ``kind``
    drops the older runs' instances there. :meth:`clear` drops a run's entries (run it on the
    workers too, e.g. with ``engine.map_state``).
    """

    def __init__(self, kind: str, key: str | None = None) -> None:
        self.kind = kind
        self.key = key or uuid.uuid4().hex
        self._entries: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._remote = False

    def __reduce__(self) -> tuple[Callable[[str, str], WorkerScratch], tuple[str, str]]:
        return (_unpickled_scratch, (self.kind, self.key))

    def _space(self) -> WorkerScratch:
        if not self._remote:
            return self
        try:
            from distributed import get_worker

            worker = get_worker()
        except (ImportError, ValueError):
            return self  # not in a Dask task: scratch of this copy only
        with _RESOLVE_LOCK:
            spaces = worker.__dict__.setdefault("_ooc_svm_scratch", {})
            sc: WorkerScratch | None = spaces.get((self.kind, self.key))
            if sc is None:
                for k in [k for k in spaces if k[0] == self.kind]:
                    del spaces[k]
                sc = spaces[(self.kind, self.key)] = WorkerScratch(self.kind, self.key)
            return sc

    def get(self, name: Any, factory: Callable[[], Any]) -> Any:
        """The entry ``name``, made by ``factory()`` the first time."""
        sc = self._space()
        with sc._lock:
            v = sc._entries.get(name)
            if v is None:
                v = sc._entries[name] = factory()
            return v

    def clear(self) -> None:
        sc = self._space()
        with sc._lock:
            sc._entries.clear()


_RESOLVE_LOCK = threading.Lock()


def _unpickled_scratch(kind: str, key: str) -> WorkerScratch:
    sc = WorkerScratch(kind, key)
    sc._remote = True
    return sc
