#!/usr/bin/env python
"""Benchmark one streamed pass over a store on S3 against the same store on local disk.

A moto S3 server (``moto[server]``, a separate process on a free loopback port) is started
unless ``--endpoint`` names one (then ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` must
be set and ``--bucket`` exist). The store (``ooc_svm.synth``, default 200,000 x 20,000, 40
non-zeros per row, Zarr lz4) is made once in ``--dir`` and uploaded object by object, so both
copies hold the same bytes.

Each configuration runs in its own child process (its own peak RSS): the local engine
(``LocalEngine(n_threads=2, cache_mb=0)``: every pass reads every shard; shards are read
ahead ``--prefetch`` deep and decoded on I/O threads) making the pass of ``perf`` (w·x for
every row and the violated-constraint sum, ``ooc_svm.engine.passes.hinge_pass``) over

- ``local``: the store on local disk (warm: just written, in the page cache);
- ``s3``: the same store on S3 (loopback moto), prefetch ``--prefetch``;
- ``s3-noprefetch``: the same with prefetch 0 (each shard fetched only when a compute thread
  asks for it) — what read-ahead buys.

Figures: best and median of ``--repeat`` timed passes after one untimed pass; the ratio of
each to ``local`` measured in the same run; peak RSS of the child; a digest of the pass
result (must be equal: the same bytes give bit-identical results). Print the load average
with the numbers (a loaded machine makes every figure noisy; the ratio less so).

Usage::

    python scripts/bench_s3.py
    python scripts/bench_s3.py --rows 1000000 --features 50000 --nnz 80 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from _bench_util import pass_digest, pass_weights, peak_rss_mb, synth_once

HERE = os.path.dirname(os.path.abspath(__file__))


def child(a) -> None:
    from ooc_svm.engine import LocalEngine
    from ooc_svm.engine.passes import hinge_pass
    from ooc_svm.store import open_store

    store = open_store(a.store)
    bc = pass_weights(store)
    eng = LocalEngine(n_threads=a.threads, prefetch=a.prefetch, cache_mb=0.0)
    res = eng.map_reduce(store, hinge_pass, bc)  # untimed: kernels loaded, store opened
    times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        res = eng.map_reduce(store, hinge_pass, bc)
        times.append(time.perf_counter() - t)
    eng.close()
    out = {
        "best": min(times),
        "median": statistics.median(times),
        "digest": pass_digest(res),
        "peak_rss_mb": peak_rss_mb(),
    }
    print("RESULT " + json.dumps(out), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


def _run_child(a, store: str, prefetch: int, env: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--store", store]
    cmd += ["--prefetch", str(prefetch), "--threads", str(a.threads), "--repeat", str(a.repeat)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"child failed ({store}):\n{r.stderr}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=20_000)
    p.add_argument("--nnz", type=float, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shard-rows", type=int, default=10_000)
    p.add_argument("--codec", default="lz4", choices=["lz4", "zstd", "none"])
    p.add_argument("--format", default="zarr", choices=["zarr", "parquet"])
    p.add_argument("--dir", default="/tmp/bench")
    p.add_argument("--endpoint", default=None, help="an S3 endpoint (default: start moto)")
    p.add_argument("--bucket", default="ooc-svm-bench")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return

    os.makedirs(a.dir, exist_ok=True)
    name = f"s3bench_{a.rows}x{a.features}x{a.nnz:g}_s{a.seed}_r{a.shard_rows}_{a.codec}.{a.format}"
    local = os.path.join(a.dir, name)
    synth_once(local, a, format=a.format, compression=a.codec, shard_rows=a.shard_rows)
    proc = None
    env = dict(os.environ)
    if a.endpoint is None:
        proc, endpoint = _start_moto()
        env.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
        )
    else:
        endpoint = a.endpoint
    env["AWS_ENDPOINT_URL"] = endpoint
    os.environ.update(env)
    try:
        import s3fs

        fs = s3fs.S3FileSystem()
        if not fs.exists(a.bucket):
            fs.mkdir(a.bucket)
        remote = f"s3://{a.bucket}/{name}"
        if fs.exists(remote):
            fs.rm(remote, recursive=True)
        t = time.perf_counter()
        fs.put(local, f"{a.bucket}/{name}", recursive=True)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs_ in os.walk(local) for f in fs_)
        print(
            f"# uploaded {size / 2**20:.1f} MiB to {remote} at {endpoint} in "
            f"{time.perf_counter() - t:.1f}s",
            flush=True,
        )
        n_shards = len(fs.ls(f"{a.bucket}/{name}")) - 1
        print(f"# {n_shards} shards; load average before: {os.getloadavg()}", flush=True)
        rows = [
            ("local", local, a.prefetch),
            ("s3", remote, a.prefetch),
            ("s3-noprefetch", remote, 0),
        ]
        results = {}
        for label, store, pf in rows:
            results[label] = _run_child(a, store, pf, env)
        ref = results["local"]
        print(
            f"{'config':<14} {'prefetch':>8} {'best s':>8} {'median s':>9} {'x local':>8} "
            f"{'MB/s':>7} {'peak RSS MB':>11}  digest"
        )
        for label, _store, pf in rows:
            r = results[label]
            print(
                f"{label:<14} {pf:>8} {r['best']:>8.3f} {r['median']:>9.3f} "
                f"{r['best'] / ref['best']:>8.2f} {size / 2**20 / r['best']:>7.1f} "
                f"{r['peak_rss_mb']:>11.0f}  {r['digest']}"
            )
        same = len({r["digest"] for r in results.values()}) == 1
        print(f"# results identical: {same}; load average after: {os.getloadavg()}")
        print("# local store warm (page cache); S3 over loopback HTTP to moto (in memory)")
        if not same:
            raise SystemExit(1)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
