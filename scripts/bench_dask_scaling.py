#!/usr/bin/env python
"""Strong scaling of the Dask engine: the same store and pass on 1, 2, 4 ... workers.

For every worker count N (each in its own child process):

- a ``DaskEngine("processes", n_workers=N, threads_per_worker=1)`` (printed: seconds to a
  ready cluster, of its first pass — workers open the store, load the kernels — and of
  ``close()``)
  and, in the same process, the reference ``LocalEngine(n_threads=N)``;
- one untimed pass on each (workers open the store, kernels load), then ``--repeat`` passes
  of the cutting-plane oracle (``ooc_svm.engine.passes.hinge_pass``: margins, Σ over violated
  rows of yᵢxᵢ, counts) **interleaved** local / Dask, so both see the same load: time per
  pass (best and median) and the median of the paired ratios Dask / local;
- where a Dask pass goes (one more pass under ``distributed.get_task_stream``): ``work`` =
  the longest worker task (its run of shards), ``join`` = the joins of the runs' partial
  sums on the critical path (transfers + reduce), ``rest`` = wall − work − join (broadcast
  scatter, scheduling, result to the client);
- bytes moved per pass: between workers (each worker's transfer log: mean in / out per
  worker) and between the client and the cluster (the pickled broadcast one way, the
  reduced result back);
- ``--train``: a real ``perf`` training (``ooc_svm.api.train``) on both engines, the models
  compared bit for bit, seconds per pass.

Results must be identical (``digest``), whatever N: the reduction is the fixed tree over the
shard order on every engine.

Usage::

    python scripts/bench_dask_scaling.py --workers 1,2            # 2 cores: 1 and 2 workers
    python scripts/bench_dask_scaling.py --workers 1,2,4,8,16 --train
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _peer_bytes(eng) -> dict[str, tuple[int, int]]:
    """(bytes received from, bytes sent to) other workers, per worker, so far."""

    def probe(dask_worker):
        inc = sum(int(d.get("total", 0)) for d in dask_worker.transfer_incoming_log)
        return inc, int(dask_worker.transfer_outgoing_bytes_total)

    return eng.client.run(probe)


def child(spec: dict) -> dict:
    import numpy as np
    from _bench_util import pass_digest, pass_weights
    from distributed import get_task_stream

    from ooc_svm.engine import LocalEngine
    from ooc_svm.engine.dask_engine import DaskEngine
    from ooc_svm.engine.passes import hinge_pass
    from ooc_svm.store import open_store

    n = int(spec["workers"])
    store = open_store(spec["store"])
    bc = pass_weights(store)
    out: dict = {"workers": n, "load_before": _loadavg()}
    t = time.perf_counter()
    dask = DaskEngine("processes", n_workers=n, threads_per_worker=1, cache_mb=spec["cache_mb"])
    out["startup_s"] = time.perf_counter() - t
    local = LocalEngine(n_threads=n, cache_mb=spec["cache_mb"])
    ref = local.map_reduce(store, hinge_pass, bc)
    t = time.perf_counter()
    got = dask.map_reduce(store, hinge_pass, bc)
    out["first_pass_s"] = time.perf_counter() - t
    assert pass_digest(got) == pass_digest(ref), "Dask and local results differ"
    tl, td = [], []
    before = _peer_bytes(dask)
    for _ in range(int(spec["repeat"])):
        t = time.perf_counter()
        local.map_reduce(store, hinge_pass, bc)
        tl.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = dask.map_reduce(store, hinge_pass, bc)
        td.append(time.perf_counter() - t)
    after = _peer_bytes(dask)
    reps = int(spec["repeat"])
    ins = [(after[w][0] - before[w][0]) / reps for w in after]
    outs = [(after[w][1] - before[w][1]) / reps for w in after]
    out.update(
        local_best=min(tl),
        local_median=statistics.median(tl),
        dask_best=min(td),
        dask_median=statistics.median(td),
        ratio=statistics.median([d / loc for d, loc in zip(td, tl, strict=True)]),
        peer_in_per_worker=statistics.mean(ins),
        peer_out_per_worker=statistics.mean(outs),
        client_bytes=len(pickle.dumps(bc, protocol=5)) + len(pickle.dumps(got, protocol=5)),
        digest=pass_digest(got),
        n_shards=store.n_shards,
        features=store.meta.n_features,
    )
    with get_task_stream(dask.client) as ts:
        t0 = time.time()
        dask.map_reduce(store, hinge_pass, bc)
        wall = time.time() - t0
    import re

    work = 0.0
    per_level: dict[int, float] = {}
    for rec in ts.data:
        span = sum(s["stop"] - s["start"] for s in rec["startstops"])
        if re.search(r"-b\d+$", rec["key"]):
            work = max(work, span)
        elif m := re.search(r"-j(\d+)-\d+$", rec["key"]):
            lev = int(m.group(1))
            per_level[lev] = max(per_level.get(lev, 0.0), span)
    join = sum(per_level.values())
    levels = max(0, int(np.ceil(np.log2(n)))) if n > 1 else 0
    out.update(stream_wall=wall, work=work, join=join, rest=wall - work - join, levels=levels)
    if spec.get("train"):
        from ooc_svm.api import train

        kw = dict(C=float(spec["C"]), max_iter=int(spec["max_iter"]))
        res = {}
        for name, eng in (("local", local), ("dask", dask)):
            p0 = eng.passes
            t = time.perf_counter()
            r = train(store, "perf", engine=eng, **kw)
            res[name] = (time.perf_counter() - t, eng.passes - p0, r.model)
        (tl_, pl, ml), (td_, pd, md) = res["local"], res["dask"]
        out.update(
            train_local_s=tl_,
            train_dask_s=td_,
            train_passes=pd,
            train_same_model=bool(
                pl == pd
                and np.array_equal(np.asarray(ml.coef_), np.asarray(md.coef_))
                and np.array_equal(np.asarray(ml.intercept_), np.asarray(md.intercept_))
            ),
        )
    local.close()
    t = time.perf_counter()
    dask.close()
    out["close_s"] = time.perf_counter() - t
    out["load_after"] = _loadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None, help="store to use (default: made with synth)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=50_000)
    ap.add_argument("--nnz", type=float, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="/tmp/bench")
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cache-mb", type=float, default=0.0, help="shard cache per process")
    ap.add_argument("--train", action="store_true", help="also time a perf training")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--max-iter", type=int, default=30)
    ap.add_argument("--json", default=None, help="write the rows to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(json.loads(a.child))), flush=True)
        return
    from _bench_util import run_child

    store = a.store
    if store is None:
        from ooc_svm.synth import synth

        name = f"pass_{a.rows}x{a.features}x{a.nnz:g}_s{a.seed}_lz4.zarr"
        store = os.path.join(a.dir, name)
        if not os.path.exists(store):
            os.makedirs(a.dir, exist_ok=True)
            synth(store, a.rows, a.features, a.nnz, a.seed, format="zarr", compression="lz4")
    print(
        f"# store {store}; {os.cpu_count()} cores; single-threaded workers; best/median of "
        f"{a.repeat} passes interleaved with the local engine on as many threads"
    )
    hdr = (
        f"{'workers':>7} {'start s':>7} {'1st s':>6} {'close s':>7} {'local s':>8} "
        f"{'dask s':>8} {'dask med':>8} "
        f"{'ratio':>6} {'speedup':>7} {'work s':>7} {'join s':>7} {'rest s':>7} "
        f"{'peer in MB/w':>12} {'peer out MB/w':>13} {'client kB':>9}  load"
    )
    print(hdr)
    rows = []
    base = None
    for n in [int(x) for x in a.workers.split(",") if x]:
        spec = {
            "workers": n,
            "store": store,
            "repeat": a.repeat,
            "cache_mb": a.cache_mb,
            "train": a.train,
            "C": a.C,
            "max_iter": a.max_iter,
            "what": f"{n} workers",
        }
        r = run_child(__file__, spec)
        rows.append(r)
        base = base or r["dask_best"]
        print(
            f"{n:>7} {r['startup_s']:>7.2f} {r['first_pass_s']:>6.2f} {r['close_s']:>7.2f} "
            f"{r['local_best']:>8.3f} {r['dask_best']:>8.3f} "
            f"{r['dask_median']:>8.3f} {r['ratio']:>6.2f} {base / r['dask_best']:>7.2f} "
            f"{r['work']:>7.3f} {r['join']:>7.3f} {r['rest']:>7.3f} "
            f"{r['peer_in_per_worker'] / 2**20:>12.2f} {r['peer_out_per_worker'] / 2**20:>13.2f} "
            f"{r['client_bytes'] / 1024:>9.0f}  {r['load_before']} -> {r['load_after']}",
            flush=True,
        )
        if a.train:
            print(
                f"#   train perf: local {r['train_local_s']:.2f}s, dask {r['train_dask_s']:.2f}s, "
                f"{r['train_passes']} passes ({r['train_dask_s'] / max(1, r['train_passes']):.3f} "
                f"s/pass), same model: {r['train_same_model']}",
                flush=True,
            )
    digests = {r["digest"] for r in rows}
    print(f"# results identical across worker counts and engines: {len(digests) == 1}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
