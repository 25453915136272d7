"""Starting or reaching the cluster of the Dask engine, and closing it.

:class:`DaskConnection` (a base of :class:`~ooc_svm.engine.dask_engine.DaskEngine`) starts a
``distributed.LocalCluster`` of threads or processes (workers forked from a fork server that
imported Dask and this package once: :func:`_fork_server_config`) or connects to an existing
scheduler by address or scheduler file; an unreachable scheduler raises
:class:`~ooc_svm.engine.base.EngineError` after ``connect_timeout`` seconds. ``close`` closes
the client first, then gives the workers time to exit by themselves.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._util import cpu_count
from .base import EngineError

if TYPE_CHECKING:
    from distributed import Client

    from ..store.base import Store

log = logging.getLogger(__name__)


class DaskConnection:
    """The client of a Dask cluster: a local cluster this engine starts, or an existing
    scheduler (``scheduler`` is ``threads``, ``processes``, an address or a scheduler file)."""

    scheduler: str
    _address: str
    _cluster: Any
    _client: Client | None
    #: (workers, bytes each, threads each) of a local cluster sized from the memory budget
    _worker_limit: tuple[int, int, int] | None = None
    #: seconds the scheduler went without answering, once the watchdog gave up on it
    _frozen: float | None = None
    _watch_stop: threading.Event | None = None

    def _start_watchdog(self, timeout: float) -> None:
        """Ask the scheduler who it is every few seconds (a daemon thread); after
        ``timeout`` seconds without an answer, record it in ``_frozen`` and close the
        client, so that whatever waits on the cluster fails at once (the engine then says
        why, see ``DaskEngine._lost_scheduler``)."""
        stop = threading.Event()
        self._watch_stop = stop
        client = self._client
        every = max(0.5, min(5.0, timeout / 2))

        def watch() -> None:
            while not stop.wait(every):
                sched = None if client is None else client.scheduler
                if client is None or sched is None or client.status != "running":
                    return
                try:
                    client.sync(sched.identity, callback_timeout=timeout)
                except Exception as e:
                    if stop.is_set() or client.status != "running":
                        return
                    if not isinstance(e, TimeoutError):
                        log.debug("scheduler watchdog: %r", e)
                        continue  # a lost connection: the client notices by itself
                    self._frozen = timeout
                    log.debug("the scheduler did not answer within %g s: closing", timeout)
                    try:
                        client.close(timeout=min(timeout, 5.0))
                    except Exception:  # pragma: no cover - best effort
                        pass
                    return

        threading.Thread(target=watch, name="ooc-svm-scheduler-watchdog", daemon=True).start()

    def memory_need(self, store: Store) -> int:
        """Nothing in this process (the workers hold the decoded shards); but the workers of
        a local cluster sized from the memory budget must hold a pass: their code, their
        shard cache and, per worker thread, a decoded shard plus the reader's two free
        buffers, below Dask's pause
        threshold (80 % of a worker's limit). A store whose pass does not fit is refused
        here, before any work, in one line naming the minimum."""
        if self._worker_limit is None or not store.n_shards:
            return 0
        from ..memory_budget import CODE_MB, MemoryBudgetError, MiB
        from .local import _decoded_bytes

        workers, limit, threads = self._worker_limit
        largest = max(_decoded_bytes(store, s) for s in range(store.n_shards))
        # its decoded-shard cache: an automatic one takes at most a quarter of the limit
        cache = int(getattr(self, "cache_bytes", 0) or 0)
        cache = limit // 4 if cache < 0 else min(cache, limit)
        need = int(CODE_MB * MiB) + (threads + 2) * largest + cache
        if need > 0.8 * limit:
            raise MemoryBudgetError(
                f"--scheduler processes: each of the {workers} workers gets "
                f"{limit / MiB:,.0f} MiB of the memory budget, but a pass over {store.path} "
                f"needs about {need / 0.8 / MiB:,.0f} MiB in a worker (its code and "
                f"{threads + 2} decoded shards of up to {largest / MiB:,.0f} MiB, its shard cache "
                f"{cache / MiB:,.0f} MiB, under Dask's "
                "80 % pause threshold): give more memory (--memory-mb, the container's limit), "
                "fewer workers, a store of smaller shards, or use --scheduler local"
            )
        return 0

    def _connect(self, n_workers, threads_per_worker, timeout, memory_limit, cluster_kwargs):
        s = self.scheduler
        if s in ("threads", "processes"):
            self._start_local_cluster(
                n_workers, threads_per_worker, timeout, memory_limit, cluster_kwargs
            )
            return
        from distributed import Client

        address = self._scheduler_address(s)
        t0 = time.monotonic()
        # a scheduler that accepts the connection but never answers (SIGSTOPped, hung) would
        # keep Client() waiting for ever: ask it who it is first, within the timeout
        try:
            probe_scheduler(address, timeout)
        except TimeoutError:
            raise EngineError(
                f"the Dask scheduler at {address} accepted the connection but did not answer "
                f"within {timeout:g} s (stopped or hung?); check it, or give it longer with "
                "--scheduler-timeout SECONDS"
            ) from None
        except Exception as e:  # refused, unreachable: Client() retries until the timeout
            log.debug("probing %s: %r", address, e)
        try:
            self._client = Client(address, timeout=timeout)
        except Exception as e:
            raise EngineError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
                f"({type(e).__name__}: {str(e)[:200]}); check the address and that the "
                "scheduler is running, or use --scheduler local"
            ) from None
        self._address = address
        self._probe_direct()
        log.debug("connected to %s in %.2fs", address, time.monotonic() - t0)

    def _probe_direct(self, timeout: float = 3.0) -> None:
        """Send broadcasts to the workers and fetch results from them directly when this
        client can reach them (the usual case), not through the scheduler (two hops, and
        every pass's O(features) through one process); otherwise keep the scheduler route,
        which works wherever the client reaches only the scheduler."""
        client = self._client
        if client is None:
            return
        try:
            import dask

            if not client.nthreads():  # no worker yet: keep Dask's default
                return
            with dask.config.set({"distributed.comm.timeouts.connect": f"{timeout}s"}):
                [probe] = client.scatter([b"ooc-svm"], direct=True, hash=False, timeout=timeout)
                ok = client.gather(probe, direct=True) == b"ooc-svm"
                probe.release()
        except Exception as e:
            log.debug("workers not reachable directly (%r): transfers go via the scheduler", e)
            return
        if ok:
            client.direct_to_workers = True

    @staticmethod
    def _scheduler_address(s: str) -> str:
        """The scheduler address of a ``--scheduler`` value (an address or a scheduler file)."""
        if s.endswith(".json"):
            if not os.path.exists(s):
                raise EngineError(
                    f"scheduler file {s} does not exist; start a scheduler with "
                    f"`dask scheduler --scheduler-file {s}` or pass its tcp:// address"
                )
            try:
                with open(s) as f:
                    return json.load(f)["address"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise EngineError(f"scheduler file {s} is unreadable ({e!r})") from None
        if "://" not in s:
            raise EngineError(
                f"unknown scheduler {s!r}: use local, threads, processes, a scheduler "
                "address tcp://HOST:PORT or a scheduler file *.json"
            )
        return s

    def _start_local_cluster(
        self, n_workers, threads_per_worker, timeout, memory_limit, cluster_kwargs
    ) -> None:
        """A ``distributed.LocalCluster`` of threads or processes, and its client."""
        from distributed import Client, LocalCluster

        s = self.scheduler
        procs = s == "processes"
        cores = cpu_count()
        kw = dict(
            processes=procs,
            n_workers=n_workers or (cores if procs else 1),
            threads_per_worker=threads_per_worker or (1 if procs else cores),
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        if procs and memory_limit is None and "memory_limit" not in cluster_kwargs:
            # the worker processes share this process's memory budget (the container's
            # limit, or --memory-mb) with it: each worker and this process get one part
            # (this one holds the solver's own state: its QP, selective's rows, the model);
            # each worker's own budget honours its part
            from ..sizes import sizes_of

            measure = getattr(self, "_measure", None)
            sizes = measure() if measure is not None else sizes_of(self)
            workers = int(n_workers or (cores if procs else 1))
            memory_limit = max(1, sizes.free // (workers + 1))
            sizes.claim(
                "Dask workers", memory_limit * workers, "--scheduler processes",
                "use --scheduler local (one process)",
            )  # fmt: skip
            self._worker_limit = (workers, memory_limit, int(threads_per_worker or 1))
        if memory_limit is not None:
            kw["memory_limit"] = memory_limit
        kw.update(cluster_kwargs)
        try:
            import dask

            cfg = _local_cluster_config(procs)
            with (
                dask.config.set(cfg),
                warnings.catch_warnings(),
            ):
                # the scheduler's HTTP endpoint falls back to a free port: not our concern
                warnings.filterwarnings("ignore", message="Port .* is already in use")
                t0 = time.monotonic()
                self._cluster = LocalCluster(**kw)
            # the workers are on this machine: the broadcast goes to a worker and the
            # result comes back directly, not through the scheduler (one hop, not two)
            self._client = Client(self._cluster, timeout=timeout, direct_to_workers=True)
            self._address = str(self._cluster.scheduler_address)
            log.debug(  # -vv: a normal run prints no cluster lines
                "Dask: local cluster (%s) of %d worker(s) x %d thread(s) ready in %.1f s",
                s,
                kw["n_workers"],
                kw["threads_per_worker"],
                time.monotonic() - t0,
            )
        except Exception as e:
            self.close()
            raise EngineError(f"cannot start a local Dask cluster ({s}): {e}") from None

    # -- a scheduler that went away -------------------------------------------------------
    def _scheduler_gone(self) -> bool:
        """True once the client lost its scheduler (and did not reconnect in time: the
        client retries for ``connect_timeout`` seconds before it gives up)."""
        c = self._client
        return c is None or c.status != "running" or getattr(c, "scheduler", None) is None

    def _lost_scheduler(self, e: BaseException) -> EngineError:
        if self._frozen is not None:
            return EngineError(
                f"the Dask scheduler at {self._address} did not answer for {self._frozen:g} s "
                "(stopped, hung or overloaded?); gave up (--scheduler-timeout "
                f"{self._frozen:g}); the cluster's state is lost: check the scheduler and run "
                "again (a run with --checkpoint can --resume)"
            )
        detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return EngineError(
            f"lost the Dask scheduler at {self._address}: {detail[:200]}; the cluster's state "
            "(per-shard state, results) is gone: restart the scheduler and workers and run "
            "again (a run with --checkpoint can --resume)"
        )

    def _guarded(self, call: Callable, *args) -> Any:
        """Run ``call``; an error raised because the scheduler went away becomes one
        :class:`EngineError` that says so."""
        if self._scheduler_gone():
            raise self._lost_scheduler(ConnectionError("not connected"))
        try:
            return call(*args)
        except EngineError:
            if self._scheduler_gone():
                raise self._lost_scheduler(ConnectionError("connection closed")) from None
            raise
        except Exception as e:
            if self._scheduler_gone():
                raise self._lost_scheduler(e) from None
            raise

    @property
    def client(self) -> Client | None:
        return self._client

    def _connected(self) -> Client:
        """The client; an :class:`EngineError` once the engine is closed."""
        if self._client is None:
            raise EngineError("the Dask engine is closed")
        return self._client

    def close(self, timeout: float = 20.0) -> None:
        """Disconnect; a local cluster this engine started is shut down.

        The client goes first (nothing is left waiting on the cluster), then the workers are
        asked to stop and given up to ``0.8 * timeout`` seconds to exit before their nannies
        kill them (Dask's default, 4 s, is short on a loaded machine: the kill is what
        prints "Worker process ... was killed by signal 9"), then the scheduler.
        """
        if self._watch_stop is not None:
            self._watch_stop.set()
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        t0 = time.monotonic()
        if client is not None:
            try:
                client.close(timeout=timeout)
            except Exception:  # pragma: no cover
                pass
        if cluster is not None:
            try:
                cluster.sync(_stop_workers, cluster, timeout)
            except Exception as e:  # pragma: no cover
                log.debug("stopping the local workers: %r", e)
            try:
                cluster.close(timeout=timeout)
            except Exception:  # pragma: no cover
                pass
            log.debug("Dask: local cluster closed in %.1f s", time.monotonic() - t0)

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


async def _identity(address: str, timeout: float) -> dict:
    from distributed.core import rpc

    async with rpc(address, timeout=timeout) as r:
        return await r.identity()


def probe_scheduler(address: str, timeout: float) -> dict:
    """The scheduler's ``identity`` over a fresh connection; ``TimeoutError`` when it does
    not answer within ``timeout`` seconds (connection errors are raised as they are)."""
    import asyncio
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme in ("tcp", "tls") and parts.hostname and parts.port:
        # refused or unreachable is said at once (distributed's connect would retry a
        # refused connection until the timeout, which reads as "accepted, no answer")
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
        except TimeoutError:  # not the "accepted, no answer" of a hung scheduler
            raise ConnectionError(f"no connection to {address} within {timeout:g} s") from None
    return asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))


async def _stop_workers(cluster, timeout: float) -> None:
    """Close the nannies (and their worker processes) of a local cluster, waiting up to
    ``0.8 * timeout`` seconds for each worker to exit by itself."""
    import asyncio

    nannies = [w for w in list(getattr(cluster, "workers", {}).values()) if hasattr(w, "kill")]
    if nannies:
        await asyncio.gather(
            *(w.close(timeout=timeout, reason="ooc-svm-done") for w in nannies),
            return_exceptions=True,
        )


#: what the fork server of a local cluster imports once, before it forks the workers
_FORK_PRELOAD = (
    "distributed",
    "ooc_svm.engine.dask_engine",
    "ooc_svm.store",
    "ooc_svm.kernels.csr",
)


def _local_cluster_config(procs: bool) -> dict[str, Any]:
    """The Dask configuration a local cluster of this engine starts with.

    Our placement keeps shard j (its cache and state) on one worker; stealing would move
    tasks away from their data for little gain on equal shards. The AMM stays off: its
    ReduceReplicas would drop the copies of a pass's broadcast that workers fetched, only for
    them to be fetched again. Dask's nannies set MALLOC_TRIM_THRESHOLD_ in their workers,
    which also turns off glibc's dynamic mmap threshold: every decoded shard array then comes
    from fresh pages (page faults ~2x the decode CPU, measured). Our workers allocate
    shard-sized arrays over and over, so they keep glibc's defaults.
    """
    import dask

    env = {
        k: v
        for k, v in (
            dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
        ).items()
        if k != "MALLOC_TRIM_THRESHOLD_"
    }
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") == "65536":  # left by a nanny
        os.environ.pop("MALLOC_TRIM_THRESHOLD_")
    cfg: dict[str, Any] = {
        "distributed.scheduler.work-stealing": False,
        "distributed.scheduler.active-memory-manager.start": False,
        "distributed.nanny.pre-spawn-environ": env,
    }
    if procs:
        cfg.update(_fork_server_config())
    return cfg


def _fork_server_config() -> dict[str, str]:
    """Start the workers of a ``processes`` cluster from a fork server that imported Dask,
    the store readers and the kernels' module once (``_FORK_PRELOAD``).

    Dask's default, ``spawn``, starts every worker as a new interpreter that imports all of
    that itself (and ends with a full interpreter shutdown): N times the CPU, which on a
    loaded machine made a 2-worker cluster take 15 s to its first pass and 2 s to close.
    Dask's own fork server preload imports every optional package Dask knows (pandas...)
    in this process first; ours replaces it. A user's explicit
    ``distributed.worker.multiprocessing-method`` setting (other than the default
    ``spawn``) is kept.
    """
    import multiprocessing

    import dask

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") != "spawn":
        return {}
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover
        return {}
    try:
        import distributed.utils as du

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(_FORK_PRELOAD))
        du._forkserver_preload_set = True  # keep ours (else Dask sets and imports its own)
    except Exception:  # pragma: no cover - keep Dask's default
        return {}
    return {"distributed.worker.multiprocessing-method": "forkserver"}
