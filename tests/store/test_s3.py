"""Stores on ``s3://`` against a real S3-compatible server: moto's standalone server started on a
free loopback port by the fixture (a separate process, with authentication enforced), stopped
after the module. Nothing is mocked on the client side: s3fs, aiobotocore and the store code talk
HTTP to the server exactly as they would to AWS.

Quick tests (in-process, small synthetic stores) run in CI; the acceptance runs on a9a (the CLI
end to end, the local engine and a real 2-worker Dask cluster) are ``slow``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import STORE_FORMATS, build_store, dataset, ooc_cmd

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "ooc-svm-test"
POLICY = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto server did not start")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on loopback with authentication on; yields the client environment
    (endpoint, an IAM user's key) and sets it in this process for the module."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    # the first 3 requests (create user, attach policy, create key) are unauthenticated;
    # every later one must be signed with a key the server knows
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        _wait_port(port, proc)
        endpoint = f"http://127.0.0.1:{port}"
        boot = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="x", aws_secret_access_key="x", **boot)
        iam.create_user(UserName="ooc")
        iam.put_user_policy(UserName="ooc", PolicyName="all", PolicyDocument=POLICY)
        key = iam.create_access_key(UserName="ooc")["AccessKey"]
        client_env = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        boto3.client(
            "s3",
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
            **boot,
        ).create_bucket(Bucket=BUCKET)
        saved = {k: os.environ.get(k) for k in client_env}
        os.environ.update(client_env)
        _clear_fs_cache()
        try:
            yield client_env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _clear_fs_cache()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _clear_fs_cache() -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def _fs():
    from ooc_svm.store.paths import get_fs

    return get_fs(f"s3://{BUCKET}")[0]


def _data(n=600, d=40, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed, dtype=np.float32)
    w = rng.standard_normal(d)
    y = np.where(X @ w + 0.1 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _env(s3env, **extra):
    return {**os.environ, **s3env, **extra}


def _run(args, env, cwd, check=True, timeout=600):
    r = subprocess.run(
        ooc_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


# ------------------------------------------------------------------------------------------
# quick: in-process, small stores
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", STORE_FORMATS)
def test_s3_store_reads_and_trains_like_local(s3, tmp_path, suffix):
    """The same shards written to S3 and to local disk: identical metadata and arrays, and a
    training pass by pass identical (bit-identical weights)."""
    from ooc_svm import api
    from ooc_svm.store import open_store

    X, y = _data()
    url = f"s3://{BUCKET}/quick-{tmp_path.name}.{suffix}"
    local = build_store(tmp_path / f"s.{suffix}", X, y, shard_rows=150)
    remote = build_store(url, X, y, shard_rows=150)
    assert remote.backend == local.backend == suffix
    assert remote.n_shards == local.n_shards == 4
    lm, rm = local.meta, remote.meta
    assert [s.checksum for s in rm.shards] == [s.checksum for s in lm.shards]
    assert (rm.n_rows, rm.n_features, rm.nnz) == (lm.n_rows, lm.n_features, lm.nnz)
    for i in range(local.n_shards):
        a, b = local.read_shard(i), remote.read_shard(i)
        for k in ("indptr", "indices", "data", "y"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    # no temporary (dot-prefixed) objects left next to the store
    names = [p.rsplit("/", 1)[-1] for p in _fs().ls(BUCKET, refresh=True)]
    assert not [n for n in names if n.startswith(".")], names
    r_loc = api.train(str(tmp_path / f"s.{suffix}"), "perf", C=1.0, scheduler="local")
    r_s3 = api.train(url, "perf", C=1.0, scheduler="local")
    assert r_s3.passes == r_loc.passes
    np.testing.assert_array_equal(r_s3.model.coef_, r_loc.model.coef_)
    assert r_s3.model.intercept_ == r_loc.model.intercept_
    assert open_store(url).meta.uuid == rm.uuid


def test_s3_damaged_object_is_caught(s3, tmp_path, capsys):
    """Integrity checks apply to remote shards: one changed byte in a chunk object (same
    size) fails the checksum; a truncated one fails the size check; `verify` says which."""
    from ooc_svm.store import ShardCorruptError, open_store

    X, y = _data(seed=1)
    url = f"s3://{BUCKET}/damaged-{tmp_path.name}.zarr"
    build_store(url, X, y, shard_rows=200, compression="none")
    fs = _fs()
    key = f"{BUCKET}/damaged-{tmp_path.name}.zarr/s0000001/data/c/0"
    raw = bytearray(fs.cat_file(key))
    raw[8] ^= 0x01
    fs.pipe_file(key, bytes(raw))
    store = open_store(url)
    store.read_shard(0)
    with pytest.raises(ShardCorruptError, match=r"shard 1 .*checksum mismatch"):
        store.read_shard(1)
    fs.pipe_file(key, bytes(raw[:-4]))
    with pytest.raises(ShardCorruptError, match=r"shard 1 .*data has"):
        open_store(url).read_shard(1)
    fs.pipe_file(key, b"")
    with pytest.raises(ShardCorruptError, match=r"shard 1 .*data has 0 bytes"):
        open_store(url).read_shard(1)
    from ooc_svm.cli import main

    assert main(["-q", "verify", url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("ooc-svm: error: ") and "shard 1 (s0000001" in err[0], err
    assert "damaged" in err[0] and err[1:] == ["ooc-svm: 1 of 3 shards damaged"], err


def test_s3_errors_are_one_line(s3, tmp_path, monkeypatch):
    """Missing bucket, bad credentials, unreachable endpoint, s3fs missing: one-line
    StoreErrors naming the cause and the fix, within seconds."""
    from ooc_svm.store import StoreError, open_store
    from ooc_svm.store.writer import StoreWriter

    with pytest.raises(StoreError, match=r"bucket no-such-bucket-x does not exist"):
        open_store("s3://no-such-bucket-x/a.zarr")
    with pytest.raises(StoreError, match=r"bucket no-such-bucket-x does not exist"):
        StoreWriter("s3://no-such-bucket-x/a.zarr")
    with pytest.raises(StoreError, match=r"no such store"):
        open_store(f"s3://{BUCKET}/absent.zarr")

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    _clear_fs_cache()
    with pytest.raises(StoreError, match=r"access denied .*AWS_SECRET_ACCESS_KEY"):
        open_store(f"s3://{BUCKET}/absent.zarr")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["AWS_SECRET_ACCESS_KEY"])

    # a port nobody listens on: refused at once; botocore's retries are capped
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    _clear_fs_cache()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"cannot reach the object store at http://127\.0\.0\.1"):
        open_store(f"s3://{BUCKET}/a.zarr")
    assert time.monotonic() - t0 < 30
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["AWS_ENDPOINT_URL"])
    _clear_fs_cache()

    # s3fs not installed (import blocked): the fix is named
    monkeypatch.setitem(sys.modules, "s3fs", None)
    registry = sys.modules["fsspec.registry"]._registry
    for proto in ("s3", "s3a"):
        monkeypatch.delitem(registry, proto, raising=False)
    with pytest.raises(StoreError, match=r"pip install 'ooc-svm\[s3\]'"):
        open_store(f"s3://{BUCKET}/a.zarr")


@pytest.mark.slow
def test_s3_server_that_never_answers_times_out(tmp_path):
    """An endpoint that accepts connections and never answers: the CLI fails with one line
    (read timeout from fsspec's configuration, retries capped) instead of hanging."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FSSPEC_S3": json.dumps({"config_kwargs": {"read_timeout": 1, "connect_timeout": 1}}),
    }
    try:
        t0 = time.monotonic()
        r = _run(["info", f"s3://{BUCKET}/a.zarr"], env, tmp_path, check=False, timeout=120)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ooc-svm: error: "), r.stderr
    assert "cannot reach the object store" in lines[0] and "Timeout" in lines[0]
    assert took < 90


def test_s3_append_is_locked(s3, tmp_path):
    """A second writer on an S3 store fails at once naming the holder (conditional write of
    STORE/.lock); after release the append goes through."""
    from ooc_svm.store import StoreError, open_store
    from ooc_svm.store.lock import RemoteStoreLock
    from ooc_svm.store.writer import StoreWriter, csr_to_shards

    X, y = _data(n=200, seed=2)
    url = f"s3://{BUCKET}/locked-{tmp_path.name}.zarr"
    build_store(url, X, y, shard_rows=100)
    fs = _fs()
    root = f"{BUCKET}/locked-{tmp_path.name}.zarr"
    lock = RemoteStoreLock(fs, root, url).acquire()
    try:
        with pytest.raises(StoreError, match=rf"being written by PID {os.getpid()} on "):
            StoreWriter(url, append=True)
    finally:
        lock.release()
    with StoreWriter(url, append=True) as w:
        for s in csr_to_shards(X, y, shard_rows=100):
            w.add(s)
        w.commit()
    assert open_store(url).meta.n_rows == 400
    assert not fs.exists(f"{root}/.lock")


# ------------------------------------------------------------------------------------------
# slow acceptance: a9a through the CLI, local engine and a 2-worker Dask cluster
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("fmt", STORE_FORMATS)
def test_s3_cli_a9a_end_to_end(s3, tmp_path, fmt):
    """`ingest` a9a into s3://, then `info`, `verify`, `train` (local engine and
    `--scheduler processes`, a 2-worker LocalCluster whose workers read S3 themselves),
    `predict`, `evaluate` from s3://: everything identical to the same store on local disk."""
    a9a = str(dataset("a9a/a9a"))
    env = _env(s3)
    url = f"s3://{BUCKET}/a9a-{tmp_path.name}.{fmt}"
    loc = f"a9a.{fmt}"
    for dst in (url, loc):
        _run(["-q", "ingest", a9a, dst, "--shard-rows", "4000"], env, tmp_path)
    infos = [json.loads(_run(["info", s, "--json"], env, tmp_path).stdout) for s in (url, loc)]
    for d in infos:
        d.pop("path", None)
        d.pop("uuid", None)
    assert infos[0] == infos[1] and infos[0]["n_rows"] == 32561 and infos[0]["n_shards"] == 9
    assert "all checksums OK" in _run(["verify", url], env, tmp_path).stdout
    out = {}
    for name, store, extra in [
        ("loc", loc, []),
        ("s3", url, []),
        ("dask", url, ["--scheduler", "processes"]),
    ]:
        r = _run(
            ["-q", "train", "--solver", "perf", store, "-o", f"m-{name}", "--C", "1", "--json"]
            + extra,
            env,
            tmp_path,
        )
        out[name] = json.loads(r.stdout)
    for name in ("s3", "dask"):
        assert out[name]["objective"] == out["loc"]["objective"]
        assert out[name]["passes"] == out["loc"]["passes"]
        for f in ("arrays.npz",):
            assert (tmp_path / f"m-{name}" / f).read_bytes() == (
                tmp_path / "m-loc" / f
            ).read_bytes()
    # an explicit 2-worker LocalCluster(processes=True): the workers inherit this process's
    # AWS_* environment and read the shards from S3 themselves
    from ooc_svm import api, load_model
    from ooc_svm.engine import make_engine

    eng = make_engine("processes", n_workers=2)
    try:
        assert len(eng.client.scheduler_info()["workers"]) == 2
        res = api.train(url, "perf", engine=eng, C=1.0)
    finally:
        eng.close()
    ref = load_model(str(tmp_path / "m-loc"))
    np.testing.assert_array_equal(res.model.coef_, ref.coef_)
    for store, tag in ((url, "s3"), (loc, "loc")):
        _run(["-q", "predict", "m-loc", store, "-o", f"pred-{tag}.txt"], env, tmp_path)
    assert (tmp_path / "pred-s3.txt").read_bytes() == (tmp_path / "pred-loc.txt").read_bytes()
    ev = [
        json.loads(_run(["evaluate", "m-loc", s, "--json"], env, tmp_path).stdout)
        for s in (url, loc)
    ]
    assert ev[0] == ev[1] and ev[0]["accuracy"] > 0.84


@pytest.mark.slow
def test_s3_overwrite_and_cli_errors(s3, tmp_path):
    """`ingest --overwrite` on S3 replaces the store; the CLI's missing-bucket and
    bad-credential errors are one line; `--append` while another writer holds the lock is
    refused."""
    src = tmp_path / "small.svm"
    src.write_text("".join(f"{(-1) ** i} 1:{i % 7 + 1} 3:0.5\n" for i in range(300)))
    env = _env(s3)
    url = f"s3://{BUCKET}/ow-{tmp_path.name}.zarr"
    _run(["-q", "ingest", "small.svm", url], env, tmp_path)
    r = _run(["-q", "ingest", "small.svm", url], env, tmp_path, check=False)
    assert r.returncode == 1 and "destination exists" in r.stderr
    _run(["-q", "ingest", "small.svm", "small.svm", url, "--overwrite"], env, tmp_path)
    info = json.loads(_run(["info", url, "--json"], env, tmp_path).stdout)
    assert info["n_rows"] == 600
    for args, msg in [
        (["info", "s3://no-such-bucket-y/x.zarr"], "bucket no-such-bucket-y does not exist"),
        (["ingest", "small.svm", "s3://no-such-bucket-y/x.zarr"], "does not exist"),
    ]:
        r = _run(args, env, tmp_path, check=False)
        assert r.returncode == 1 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
    bad = _env(s3, AWS_SECRET_ACCESS_KEY="nope")
    r = _run(["info", url], bad, tmp_path, check=False)
    assert r.returncode == 1 and "access denied" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    shutil.rmtree(tmp_path / "nothing", ignore_errors=True)
    assert not Path(tmp_path / "nothing").exists()


@pytest.mark.slow
def test_readme_object_storage_block_runs_as_written(tmp_path):
    """The README's "Data on object storage" block, command by command in one shell, in a
    directory holding a (smaller) `test.svm`; the only addition is a wait for the server's
    port after the line that starts it in the background."""
    import re

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("## Data on object storage")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, start)
    assert m is not None
    lines = [c for c in (ln.split("  #")[0].strip() for ln in m.group(1).splitlines()) if c]
    assert lines[0].startswith("moto_server ") and lines[0].rstrip().endswith("&")
    port = re.search(r"-p (\d+)", lines[0]).group(1)
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", int(port))) == 0:
            pytest.skip(f"port {port} of the README's server is in use")
    wait = (
        f'{sys.executable} -c "import socket, time\n'
        f"for _ in range(600):\n"
        f"    try: socket.create_connection(('127.0.0.1', {port}), 0.5).close(); break\n"
        f'    except OSError: time.sleep(0.1)"'
    )
    script = "\n".join(["set -e", lines[0], "trap 'kill %1' EXIT", wait, *lines[1:]])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "FSSPEC_"))  # the block sets what it needs
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    _run(
        ["synth", "test.svm", "--rows", "5000", "--features", "2000", "--nnz-per-row", "20"]
        + ["--seed", "1", "--split", "test"],
        env,
        tmp_path,
    )
    r = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ev = json.loads(r.stdout.strip().splitlines()[-1])
    assert ev["n"] == 5000
    for out in ("model-s3", "model-s3d", "scores-s3.parquet"):
        assert (tmp_path / out).exists()
    assert (tmp_path / "model-s3" / "arrays.npz").read_bytes() == (
        tmp_path / "model-s3d" / "arrays.npz"
    ).read_bytes()
