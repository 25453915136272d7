"""Dask engine: passes as tasks over shard ids on a ``distributed`` cluster.

``DaskEngine(scheduler)`` with ``scheduler`` one of

- ``"threads"``: a ``LocalCluster(processes=False)``, one worker with a thread per core;
- ``"processes"``: a ``LocalCluster`` with one single-threaded worker process per core;
- ``"tcp://HOST:PORT"`` (or any address ``distributed.Client`` accepts): an existing cluster;
- ``"PATH.json"``: the scheduler file of an existing cluster (``dask scheduler
  --scheduler-file``).

An unreachable scheduler raises :class:`~ooc_svm.engine.base.EngineError` after
``connect_timeout`` seconds (a missing scheduler file at once) instead of hanging; one that
stops answering (SIGSTOPped, hung) while passes run is noticed by a watchdog that asks it
every few seconds and gives up after ``scheduler_timeout`` seconds without an answer: the
waiting call then raises one :class:`~ooc_svm.engine.base.EngineError` that says so.

A ``processes`` cluster forks its workers from a fork server that imported Dask and this
package once (see :mod:`ooc_svm.engine.dask_cluster`); :meth:`DaskEngine.close` closes the
client first, then gives the workers time to exit by themselves.

One pass (``map_reduce``):

1. the broadcast is scattered once (to one worker; the others fetch it from whoever has it);
2. every shard has a *home* worker: contiguous blocks of the shard ids, sized by the workers'
   threads, the same in every pass while the workers stay (:meth:`DaskEngine._placement`),
   so each worker keeps its decoded shards in its own byte-bounded cache (``cache_mb`` per
   worker process) and its per-shard state. A pass is **one task per run** of consecutive
   shards of the pass that share a home (a full pass: one task per worker, a single
   scheduler message each), restricted loosely to that worker (clusters this engine starts
   run without work stealing). Workers open the store from its path themselves
   (``open_store`` is cached per worker process, keyed by path and a token of the shard
   table, so a store rewritten on disk is never confused with the old one);
3. the task (``_block_task`` of :mod:`ooc_svm.engine.dask_worker`) runs ``fn`` over its
   shards on all the worker's threads, in order, and reduces them into the complete
   subtrees of the fixed binary tree of :func:`~ooc_svm.engine.base.tree_reduce` over the
   pass's shard list that lie inside its run (:func:`~ooc_svm.engine.dask_tree.tree_nodes`)
   — the tree the local engine builds too — so results are bit-identical across engines
   and worker counts;
4. neighbouring runs are joined pairwise, level by level (``_join_task``, on the left
   run's worker, ⌈log2 runs⌉ levels): each join receives the right run's few subtrees
   (O(features) each, at most about 2·log2(shards) of them, one when the boundary falls on
   a subtree boundary) and returns the largest subtrees of their union;
5. only the root travels to the client.

Per-shard state lives on the workers. A state pass gives each run's task the states of its
shards and splits its result into the subtrees (which travel) and one future per new
state (which stays on the worker).
Forgetting the pass's broadcast at its end cuts the lineage of the new states, so the
scheduler's graph does not grow with the number of passes.

Worker failures. Tasks lost with a worker are recomputed by the scheduler from their inputs
(the shard is re-read from the store path; the broadcast is scattered to one worker, the
others fetch it, and the client scatters it again if every copy is gone). Per-shard states
cannot be recomputed from lineage without keeping every past broadcast, so each is **kept
twice**: at the end of each state pass a small task copies every new state to a second
worker under its own key (a backup, which Dask's active memory manager leaves alone, unlike
extra replicas of one key). ``Client.replicate`` and ``scatter(broadcast=True)`` are not
used: the scheduler's replicate loop never ends when a target worker dies during it
(distributed 2026.8), which hung a training whose worker was killed. A worker that dies
mid-pass then loses no state: the scheduler reruns its tasks elsewhere from the backups,
and if results were nevertheless lost (e.g. every copy of the broadcast) the engine submits
the whole pass again (the same shard list, the same tree). The partial of a shard is a
deterministic function of (shard, broadcast, state), so the result equals the one without
the failure. Losing both copies of a state raises :class:`EngineError`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._util import AUTO_CACHE_SHARE, parse_cache_mb
from .base import (
    Engine,
    EngineError,
    ShardState,
    add_partials,
    shard_stub,
)
from .dask_state import DaskStates, _Lost, _StateRef
from .dask_worker import (
    _block_task,
    _join_task,
    _pick,
    _worker_cache_stats,
    _worker_rss_kb,
    store_identity,
)
from .options import DEFAULT_SCHEDULER_TIMEOUT
from .options import scheduler_timeout as scheduler_timeout_option

if TYPE_CHECKING:
    from distributed import Client

    from ..sizes import Sizes


log = logging.getLogger(__name__)


def _is_lost_error(e: BaseException) -> bool:
    from asyncio import CancelledError as AioCancelled
    from concurrent.futures import CancelledError as CfCancelled

    from distributed.scheduler import KilledWorker
    from distributed.utils import CancelledError as DCancelled

    if isinstance(e, KilledWorker):
        return False
    if isinstance(e, CfCancelled | AioCancelled | DCancelled):
        return True
    from distributed.comm.core import CommClosedError

    if isinstance(e, CommClosedError):  # a connection to a worker that died
        return True
    name = type(e).__name__
    return name in ("FutureCancelledError", "CancelledError", "FuturesCancelledError")


class DaskEngine(DaskStates, Engine):
    """Streamed passes on a Dask ``distributed`` cluster.

    Parameters
    ----------
    scheduler : str
        ``threads``, ``processes``, a scheduler address or a scheduler-file path (``*.json``).
    n_workers : int, optional
        Workers of a ``processes`` cluster (default: one per core).
    threads_per_worker : int, optional
        Default 1 for ``processes``, the number of cores for ``threads``.
    cache_mb : float
        Decoded-shard cache per worker process, MiB (0 = none).
    connect_timeout : float, optional
        Seconds to wait for an existing scheduler before raising :class:`EngineError`
        (default ``scheduler_timeout`` when that is given, else 15).
    scheduler_timeout : float, optional
        Seconds an existing scheduler may leave the watchdog's request unanswered while the
        engine is open before the run stops with :class:`EngineError` (default
        ``$OOC_SVM_SCHEDULER_TIMEOUT``, else 60).
    state_replicas : int
        Copies of every per-shard state kept on distinct workers (1 or 2).
    max_attempts : int
        Attempts of a pass whose results were lost with a worker before giving up.
    fast_read : bool
        Workers use the direct Zarr reader (see :mod:`ooc_svm.engine.reader`).
    memory_limit : str or float, optional
        Per-worker memory limit of a local cluster (Dask's ``memory_limit``).
    """

    def __init__(
        self,
        scheduler: str = "processes",
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        cache_mb: float = 0.0,
        connect_timeout: float | None = None,
        scheduler_timeout: float | None = None,
        state_replicas: int = 2,
        max_attempts: int = 4,
        fast_read: bool = True,
        memory_limit: str | float | None = None,
        prefetch: int | None = None,
        n_threads: int | None = None,
        measure: Callable[[], Sizes] | None = None,
        **cluster_kwargs: Any,
    ) -> None:
        #: the command's measure of the memory budget, which a local cluster's workers share
        self._measure = measure
        self.scheduler = str(scheduler)
        self._address = self.scheduler
        spec = parse_cache_mb(cache_mb if cache_mb is not None else 0)
        # auto: each worker sizes its own cache (-SHARE travels in the task spec)
        self.auto_cache = isinstance(spec, str)
        if isinstance(spec, str):
            share = float(spec[5:]) if spec.startswith("auto:") else AUTO_CACHE_SHARE
            self.cache_bytes = -share
        else:
            self.cache_bytes = int(spec * 2**20)
        self._warm: set[str] = set()
        self.state_replicas = max(1, min(2, int(state_replicas)))
        self.max_attempts = max(1, int(max_attempts))
        self.fast_read = bool(fast_read)
        self.passes = 0
        self.partial_passes = 0
        self.retried_shards = 0
        self._slots: tuple[float, list[str]] | None = None
        self._cluster: Any = None  # a distributed.LocalCluster for threads / processes
        self._client: Client | None = None
        self._npass = 0
        try:
            import distributed  # noqa: F401
        except ImportError:  # pragma: no cover
            raise EngineError(
                "the Dask engine needs the 'distributed' package: pip install 'dask[distributed]'"
            ) from None
        if n_threads is not None and threads_per_worker is None:
            threads_per_worker = n_threads
        given = scheduler_timeout_option(scheduler_timeout)
        self.scheduler_timeout = DEFAULT_SCHEDULER_TIMEOUT if given is None else given
        if connect_timeout is None:
            connect_timeout = 15.0 if given is None else given
        self._connect(n_workers, threads_per_worker, connect_timeout, memory_limit, cluster_kwargs)
        if self.scheduler not in ("threads", "processes"):  # a cluster of its own is local
            self._start_watchdog(self.scheduler_timeout)

    def worker_cache_stats(self) -> dict[str, dict[str, int]]:
        """Shard cache of every worker process: ``budget``, ``used`` (bytes), hits, misses."""
        return self._connected().run(_worker_cache_stats)

    def worker_peak_rss_kb(self) -> dict[str, int]:
        """Peak RSS (ru_maxrss, KiB) of every worker process."""
        return self._connected().run(_worker_rss_kb)

    # -- helpers ---------------------------------------------------------------------------
    def _spec(self, store) -> tuple:
        from ..store.paths import is_local, local_path

        transform = None
        if hasattr(store, "base") and hasattr(store, "transform"):
            # views travel as their (small, picklable) transform; workers open the base store
            store, transform = store.base, store.transform
        path = str(store.path)
        if is_local(path):
            # workers may run in another working directory: send an absolute path
            path = local_path(path)
        # content identity (checked by the workers) | absolute path (keys their shard cache)
        token = f"{store_identity(store)}|{path}"
        # an automatic cache fills from the second pass over a store on (shards a worker
        # cached earlier, for another training, are used from the first)
        fill = not self.auto_cache or token in self._warm
        return (path, token, self.cache_bytes, self.fast_read, transform, fill)

    def _scatter_bc(self, broadcast):
        # Always scattered (even None): forgetting this key at the end of the pass is what
        # cuts the lineage of the new per-shard states, so the scheduler's graph does not
        # grow with the number of passes.
        # A worker dying while the broadcast is copied to it closes the scatter's stream
        # (CommClosedError, an OSError); the surviving workers take the retry.
        for attempt in range(1, self.max_attempts + 1):
            try:
                [fut] = self._connected().scatter([broadcast], hash=False)
                return fut
            except (TypeError, AttributeError, ValueError) as e:
                if "pickle" in f"{type(e).__name__} {e}".lower():
                    raise EngineError(
                        f"the broadcast of a pass cannot be pickled for the Dask workers ({e}); "
                        "send numpy arrays, tuples or small dataclasses"
                    ) from None
                raise
            except OSError as e:
                if attempt >= self.max_attempts:
                    raise EngineError(
                        f"sending the broadcast to the Dask workers failed {attempt} times "
                        f"({type(e).__name__}: {e})"
                    ) from None
                log.info("broadcast scatter failed (%r); retrying", e)
                time.sleep(0.5 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- passes ----------------------------------------------------------------------------
    def _run(self, store, fn, broadcast, reduce, state, shards, read: bool) -> Any:
        return self._guarded(self._run_pass, store, fn, broadcast, reduce, state, shards, read)

    def _run_pass(self, store, fn, broadcast, reduce, state, shards, read: bool) -> Any:
        reduce = reduce or add_partials
        full = shards is None
        ids = list(range(store.n_shards)) if full else [int(s) for s in shards]
        if state is not None:
            if state.engine is not self:
                raise EngineError("this ShardState belongs to another engine")
            state.check(ids)
        if not ids:
            self._count(full)
            return None
        self._npass += 1
        tag = f"ooc-p{self._npass}-{os.getpid()}-{id(self) & 0xFFFF:x}"
        spec = self._spec(store) if read else None
        n = len(ids)
        news: list = []
        bc_f = None
        attempt = 0
        try:
            while True:
                attempt += 1
                if bc_f is None or bc_f.status not in ("finished", "pending"):
                    bc_f = self._scatter_bc(broadcast)
                if attempt > 1:
                    self.retried_shards += n
                    log.info("pass %s: running again (results lost with a worker)", tag)
                job = _PassJob(f"{tag}-a{attempt}", store, fn, spec, state, bc_f, ids)
                root, news = self._submit_blocks(job, reduce, refresh=attempt > 1)
                try:
                    [(_, result)] = root.result()
                    backups = self._settle_states(tag, news) if state is not None else None
                    break
                except BaseException as e:
                    if not isinstance(e, KeyboardInterrupt) and self._scheduler_gone():
                        raise self._lost_scheduler(e) from None
                    if not (isinstance(e, _Lost) or _is_lost_error(e)):
                        raise self._explain(e) from e
                    if attempt >= self.max_attempts:
                        raise EngineError(
                            f"pass lost results to failing workers {attempt} times; giving up "
                            f"({type(e).__name__}: {e})"
                        ) from None
                    time.sleep(0.2 * attempt)
        finally:
            del bc_f
        if state is not None:
            assert backups is not None
            for k, sid in enumerate(ids):
                state.set(sid, _StateRef(news[k], backups[k]))
        if spec is not None:
            self._warm.add(spec[1])
        self._count(full)
        return result

    def _submit_blocks(self, job: _PassJob, reduce: Callable, refresh: bool) -> tuple:
        """Submit a pass: one task per run of consecutive shards of the pass that share a
        home worker (a full pass: one per worker), then the tree above the runs' subtrees.

        Returns the future of the tree's root and the futures of the new per-shard states
        (in the order of the pass; empty without state). A run's task reduces its shards into
        the complete subtrees of the pass's tree that lie inside the run; the tasks that join
        them run on the workers (the scheduler places each by its inputs), so only O(features)
        partials travel between workers and only the root travels to the client.
        """
        client = self._connected()
        home = self._placement(job.store.n_shards, refresh)
        n = len(job.ids)
        runs: list[list] = []  # [worker, start, stop] over positions of the pass
        for k, sid in enumerate(job.ids):
            w = home.get(sid)
            if runs and runs[-1][0] == w:
                runs[-1][2] = k + 1
            else:
                runs.append([w, k, k + 1])
        read = job.spec is not None
        news: list = []
        groups = []  # (worker, future of the run's subtrees), in the order of the pass
        for j, (worker, a, b) in enumerate(runs):
            sids = job.ids[a:b]
            src = job.spec if read else [shard_stub(job.store, sid) for sid in sids]
            states = None
            if job.state is not None:
                states = [self._state_src(job.state, sid) for sid in sids]
            bkey = f"{job.tag}-b{j}"
            dsk: dict = {bkey: (_block_task, job.fn, read, src, sids, a, n, job.bc, reduce, states)}
            want = [bkey]
            if states is not None:  # split: the subtrees travel, the states stay
                want = [f"{bkey}-t"] + [f"{bkey}-s{sid}" for sid in sids]
                dsk[want[0]] = (_pick, bkey, 0)
                for i, sid in enumerate(sids):
                    dsk[f"{bkey}-s{sid}"] = (_pick, bkey, 1, i)
            where = {"workers": [worker], "allow_other_workers": True} if worker else {}
            futs = client.get(dsk, want, sync=False, **where)
            groups.append((worker, futs[0]))
            news += futs[1:]
        # join neighbouring runs pairwise, level by level (log2(runs) levels): each join
        # runs on the left run's worker and receives the right one's few subtrees
        level = 0
        while len(groups) > 1:
            nxt = []
            for i in range(0, len(groups) - 1, 2):
                (wl, fl), (_, fr) = groups[i], groups[i + 1]
                where = {"workers": [wl], "allow_other_workers": True} if wl else {}
                key = f"{job.tag}-j{level}-{i // 2}"
                f = client.submit(_join_task, reduce, n, fl, fr, key=key, pure=False, **where)
                nxt.append((wl, f))
            if len(groups) % 2:
                nxt.append(groups[-1])
            groups, level = nxt, level + 1
        return groups[0][1], news

    def _explain(self, e: BaseException) -> BaseException:
        from distributed.scheduler import KilledWorker

        if isinstance(e, KilledWorker):
            return EngineError(
                f"a task kept killing Dask workers ({e}); the pass function crashes its worker "
                "process (out of memory?)"
            )
        return e

    def _count(self, full: bool) -> None:
        if full:
            self.passes += 1
        else:
            self.partial_passes += 1


@dataclass(frozen=True)
class _PassJob:
    """What the tasks of one attempt of a pass are made of."""

    tag: str  # key prefix, unique per pass and attempt
    store: Any
    fn: Callable
    spec: tuple | None  # the workers' store spec (None: stub shards, no read)
    state: ShardState | None
    bc: Any  # the broadcast's future
    ids: list[int]
