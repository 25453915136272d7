"""``train --follow``: a real second process appends rows; the follow process refits warm and
replaces the model; it stops on an overwritten store, on SIGTERM and after --max-refits."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import default_sigint, ooc_cmd
from sklearn.datasets import dump_svmlight_file, make_classification

from ooc_svm.model.model import ModelError, load_model
from ooc_svm.store import csr_to_shards, write_store

DEADLINE = 300.0


@pytest.fixture
def grown(tmp_path):
    X, y = make_classification(n_samples=900, n_features=15, flip_y=0.05, random_state=1)
    y = np.where(y > 0, 1.0, -1.0)
    store = str(tmp_path / "s.zarr")
    write_store(store, csr_to_shards(sp.csr_matrix(X[:600]), y[:600], shard_rows=300))
    parts = []
    for k, (a, b) in enumerate([(600, 700), (700, 800)]):
        f = tmp_path / f"part{k}.svm"
        dump_svmlight_file(X[a:b], y[a:b], str(f), zero_based=False)
        parts.append(str(f))
    other = tmp_path / "other.svm"
    dump_svmlight_file(X[800:], y[800:], str(other), zero_based=False)
    return store, parts, str(other)


def _follow(store, model, *flags):
    return subprocess.Popen(
        ooc_cmd(
            "train", store, "-o", model, "--follow", "--follow-seconds", "0.05", "--json", *flags
        ),  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )


def _rows_of(model) -> int:
    try:
        return int(load_model(model).info["rows"]["n_rows"])
    except ModelError:  # between the two renames of the replacement
        return -1


def _wait_rows(model, n: int, p) -> None:
    """Poll the model directory until it holds a model of ``n`` rows."""
    t0 = time.monotonic()
    while _rows_of(model) != n:
        assert p.poll() is None, p.stderr.read()
        assert time.monotonic() - t0 < DEADLINE, "the model was not replaced"
        time.sleep(0.02)


def _ingest(*args):
    r = subprocess.run(ooc_cmd("-q", "ingest", *args), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_follow_refits_after_appends_and_stops_on_overwrite(grown, tmp_path):
    store, parts, other = grown
    model = str(tmp_path / "m")
    p = _follow(store, model)
    try:
        first = json.loads(p.stdout.readline())
        assert first["converged"] and _rows_of(model) == 600
        for n, part in ((700, parts[0]), (800, parts[1])):
            _ingest(part, store, "--append")  # another process appends
            _wait_rows(model, n, p)
            rec = json.loads(p.stdout.readline())
            assert rec["rows_added"] == 100 and rec["n_rows"] == n and rec["converged"]
            assert rec["passes"] >= 1 and rec["stop"]["value"] <= rec["stop"]["target"]
        _ingest(other, store, "--overwrite")  # not the model's rows any more: it stops
        _, err = p.communicate(timeout=DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1
    last = err.strip().splitlines()[-1]  # one line says why
    assert "no longer begins with the 800 rows" in last and "last complete model" in last
    assert _rows_of(model) == 800  # the last complete model stays


def test_follow_refits_after_a_drop_a_sliding_window(grown, tmp_path):
    """`ooc-svm drop` in another process (the oldest shard leaves): the follower refits warm
    on the rows left (it stopped there before, "shards removed"), then follows appends."""
    store, parts, _ = grown
    model = str(tmp_path / "m")
    p = _follow(store, model)
    try:
        first = json.loads(p.stdout.readline())
        assert first["converged"] and _rows_of(model) == 600
        r = subprocess.run(ooc_cmd("-q", "drop", store, "--shards", "1"), capture_output=True)
        assert r.returncode == 0, r.stderr
        _wait_rows(model, 300, p)
        rec = json.loads(p.stdout.readline())
        assert rec["rows_dropped"] == 300 and rec["rows_added"] == 0 and rec["n_rows"] == 300
        assert rec["converged"]
        _ingest(parts[0], store, "--append")
        _wait_rows(model, 400, p)
        rec = json.loads(p.stdout.readline())
        assert rec["rows_added"] == 100 and rec["rows_dropped"] == 0 and rec["converged"]
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143


def test_follow_sigterm_and_max_refits(grown, tmp_path):
    store, parts, _ = grown
    model = str(tmp_path / "m")
    p = _follow(store, model, "--scheduler", "threads")
    try:
        json.loads(p.stdout.readline())
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "terminated by SIGTERM" in err
    assert _rows_of(model) == 600  # complete, and no temporary directory left beside it
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("m")) == ["m"]
    # --max-refits 1: one refit, then exit 0
    p = _follow(store, model, "--overwrite", "--max-refits", "1", "--init", model)
    try:
        json.loads(p.stdout.readline())
        _ingest(parts[0], store, "--append")
        out, err = p.communicate(timeout=DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["n_rows"] == 700
    assert _rows_of(model) == 700


def test_follow_flags_are_checked(grown, tmp_path):
    store, _, _ = grown
    from conftest import run_ooc

    r = run_ooc("train", store, "-o", str(tmp_path / "m"), "--max-refits", "2")
    assert r.returncode == 1 and "--max-refits belongs to --follow" in r.stderr
    r = run_ooc("train", store, "-o", str(tmp_path / "m"), "--follow", "--C", "0.1,1")
    assert r.returncode == 1 and "--follow refits one model" in r.stderr
    assert not (tmp_path / "m").exists()
