"""Tampered, truncated and crafted models: every edit is refused on
load with a one-line ``ModelError`` naming the model and the field, or is harmless (the same
scores bit for bit). ``predict`` runs in a subprocess so that a crash (SIGSEGV) would show as
a negative exit status instead of taking the test runner down."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_svm.model.model import Model, ModelError, load_model

NF = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A store, a binary RBF kernel model, a binary linear model and a 3-class linear model,
    with the reference predictions of each."""
    from conftest import build_store

    tmp = tmp_path_factory.mktemp("tamper")
    rng = np.random.default_rng(0)
    X = sp.random(40, NF, density=0.6, random_state=0, format="csr", dtype=np.float32)
    y = np.where(rng.random(40) > 0.5, 1.0, -1.0)
    build_store(tmp / "s.zarr", X, y, shard_rows=16)
    sv = sp.csr_matrix(X[:5], dtype=np.float64)
    models = {
        "kernel": Model(
            kind="kernel",
            n_features=NF,
            classes=[-1.0, 1.0],
            support_vectors_=sv,
            dual_coef_=np.linspace(-1, 1, 5),
            support_=np.arange(5),
            intercept_=0.1,
            kernel="rbf",
            gamma=0.5,
        ),
        "linear": Model(
            kind="linear",
            n_features=NF,
            classes=[-1.0, 1.0],
            coef_=rng.normal(size=NF),
            intercept_=-0.2,
        ),
        "ovr": Model(
            kind="linear",
            n_features=NF,
            classes=[-1.0, 1.0, 2.0],
            coef_=rng.normal(size=(3, NF)),
            intercept_=rng.normal(size=3),
        ),
    }
    for name, m in models.items():
        m.save(str(tmp / name))
    return tmp


#: Runs ``ooc-svm predict MODEL s.zarr -o OUT`` for every (model, out) pair given as JSON on
#: the command line, each in its own forked child process (a crash there is a signal in the
#: exit status, not the end of the run), and prints {model: [exit status, stderr]} as JSON.
#: Forking after one import keeps ~70 cases fast; every child is a separate process.
_DRIVER = r"""
import json, os, sys, time
from ooc_svm.cli import build_parser, main
import ooc_svm.model, ooc_svm.store, ooc_svm.engine  # noqa: imported once, before forking
build_parser()
res = {}
for model, out in json.loads(sys.argv[1]):
    err = out + ".err"
    pid = os.fork()
    if pid == 0:
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, 1)
        try:
            rc = main(["predict", model, "s.zarr", "-o", out])
        except BaseException:
            import traceback
            traceback.print_exc()
            rc = 99
        sys.stderr.flush()
        os._exit(rc)
    for _ in range(6000):  # a child that hangs (e.g. opened a FIFO) is killed after 300 s
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = None
    with open(err) as f:
        rc = "hung" if status is None else os.waitstatus_to_exitcode(status)
        res[model] = [rc, f.read()]
print(json.dumps(res))
"""


def _predict_all(cwd, pairs) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps([[str(m), str(o)] for m, o in pairs])],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- tampering helpers ---------------------------------------------------------------------


def _arrays(path):
    with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _write_arrays(path, arrays):
    np.savez(os.path.join(path, "arrays.npz"), **arrays)


def edit_array(name, fn):
    def apply(path):
        a = _arrays(path)
        v = fn(a.get(name))
        if v is None:
            a.pop(name, None)
        else:
            a[name] = v
        _write_arrays(path, a)

    return apply


def edit_meta(fn):
    def apply(path):
        p = os.path.join(path, "model.json")
        with open(p) as f:
            meta = json.load(f)
        fn(meta)
        with open(p, "w") as f:
            json.dump(meta, f)

    return apply


def _set(key, value):
    def fn(meta):
        if value is _DELETE:
            meta.pop(key, None)
        else:
            meta[key] = value

    return fn


_DELETE = object()


def _set_at(i, v):
    def fn(a):
        a = a.copy()
        a[i] = v
        return a

    return fn


def _pickled_member(path):
    a = _arrays(path)
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(os.path.join(path, "arrays.npz"), "w") as z:
        for k, v in a.items():
            if k != "dual_coef":
                b = io.BytesIO()
                np.save(b, v)
                z.writestr(f"{k}.npy", b.getvalue())
        z.writestr("dual_coef.npy", buf.getvalue())


def _zip_bomb(path):
    """coef.npy: 200 MB of zeros deflated to ~200 kB (declared size far above the model's)."""
    a = _arrays(path)
    big = io.BytesIO()
    np.save(big, np.zeros(25_000_000))
    with zipfile.ZipFile(os.path.join(path, "arrays.npz"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("intercept.npy", _npy(a["intercept"]))
        z.writestr("coef.npy", big.getvalue())


def _lying_header(path):
    """coef.npy whose header declares 10**9 values but stores six."""
    a = _arrays(path)
    raw = bytearray(_npy(a["coef"]))
    hdr_end = raw.index(b"\n") + 1
    header = bytes(raw[10:hdr_end]).replace(b"(6,)", b"(1000000000,)")
    header = header.rstrip(b"\n").rstrip(b" ")
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + b" " * pad + b"\n"
    new = bytes(raw[:8]) + len(header).to_bytes(2, "little") + header + bytes(raw[hdr_end:])
    with zipfile.ZipFile(os.path.join(path, "arrays.npz"), "w") as z:
        z.writestr("intercept.npy", _npy(a["intercept"]))
        z.writestr("coef.npy", new)


def _npy(v):
    b = io.BytesIO()
    np.save(b, v)
    return b.getvalue()


def _replace_file(name, how):
    def apply(path):
        p = os.path.join(path, name)
        os.unlink(p)
        if how == "devzero":
            os.symlink("/dev/zero", p)
        elif how == "fifo":
            os.mkfifo(p)
        elif how == "dir":
            os.mkdir(p)
        elif how == "empty":
            open(p, "w").close()

    return apply


def _truncate(name, frac):
    def apply(path):
        p = os.path.join(path, name)
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.truncate(int(size * frac))

    return apply


def _text(name, text):
    def apply(path):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)

    return apply


CASES = {
    # --- kernel model: support-vector arrays (findings 2 and 4)
    "sv_indices_huge": ("kernel", edit_array("sv_indices", _set_at(0, 10**9))),
    "sv_indices_negative": ("kernel", edit_array("sv_indices", _set_at(0, -7))),
    "sv_indices_float": ("kernel", edit_array("sv_indices", lambda a: a.astype(np.float64))),
    "sv_indices_missing": ("kernel", edit_array("sv_indices", lambda a: None)),
    "sv_indptr_cut": ("kernel", edit_array("sv_indptr", lambda a: a[:-1])),
    "sv_indptr_end_beyond_nnz": ("kernel", edit_array("sv_indptr", _set_at(-1, 10**6))),
    "sv_indptr_not_monotone": ("kernel", edit_array("sv_indptr", _set_at(2, 10**5))),
    "sv_indptr_not_from_zero": ("kernel", edit_array("sv_indptr", _set_at(0, 1))),
    "sv_indptr_missing": ("kernel", edit_array("sv_indptr", lambda a: None)),
    "sv_data_cut": ("kernel", edit_array("sv_data", lambda a: a[:-2])),
    "sv_data_nan": ("kernel", edit_array("sv_data", _set_at(0, np.nan))),
    "sv_data_complex": ("kernel", edit_array("sv_data", lambda a: a.astype(np.complex128))),
    "dual_coef_cut": ("kernel", edit_array("dual_coef", lambda a: a[:-1])),
    "dual_coef_nan": ("kernel", edit_array("dual_coef", _set_at(1, np.nan))),
    "dual_coef_inf": ("kernel", edit_array("dual_coef", _set_at(1, np.inf))),
    "dual_coef_complex": ("kernel", edit_array("dual_coef", lambda a: a + 1j)),
    "dual_coef_2d": ("kernel", edit_array("dual_coef", lambda a: a.reshape(1, -1))),
    "dual_coef_missing": ("kernel", edit_array("dual_coef", lambda a: None)),
    "dual_coef_pickled": ("kernel", _pickled_member),
    "intercept_missing": ("kernel", edit_array("intercept", lambda a: None)),
    "intercept_two_values": ("kernel", edit_array("intercept", lambda a: np.r_[a, a])),
    "intercept_nan": ("kernel", edit_array("intercept", lambda a: a * np.nan)),
    "support_negative": ("kernel", edit_array("support", _set_at(0, -1))),
    "support_wrong_length": ("kernel", edit_array("support", lambda a: a[:2])),
    "unknown_member": ("kernel", edit_array("evil", lambda a: np.zeros(3))),
    "n_support_vectors_wrong": ("kernel", edit_meta(_set("n_support_vectors", 3))),
    "kernel_unknown": ("kernel", edit_meta(_set("kernel", "evil"))),
    "gamma_nan": ("kernel", edit_meta(_set("gamma", float("nan")))),
    "gamma_string": ("kernel", edit_meta(_set("gamma", "0.5"))),
    "degree_huge": ("kernel", edit_meta(_set("degree", 10**9))),
    "n_features_below_sv_index": ("kernel", edit_meta(_set("n_features", 2))),
    "kernel_has_coef": ("kernel", edit_array("coef", lambda a: np.zeros(NF))),
    # --- linear model (finding 4)
    "coef_cut": ("linear", edit_array("coef", lambda a: a[:-1])),
    "coef_zero_padded": ("linear", edit_array("coef", lambda a: np.r_[a, 0.0, 0.0])),
    "coef_missing": ("linear", edit_array("coef", lambda a: None)),
    "coef_complex": ("linear", edit_array("coef", lambda a: a.astype(np.complex64))),
    "coef_2d_binary": ("linear", edit_array("coef", lambda a: np.vstack([a, a]))),
    "coef_nan": ("linear", edit_array("coef", _set_at(0, np.nan))),
    "coef_object": ("linear", edit_array("coef", lambda a: a.astype(str))),
    "classes_three_on_binary": ("linear", edit_meta(_set("classes", [1, 2, 3]))),
    "classes_duplicate": ("linear", edit_meta(_set("classes", [1, 1]))),
    "classes_strings": ("linear", edit_meta(_set("classes", ["a", "b"]))),
    "classes_missing": ("linear", edit_meta(_set("classes", _DELETE))),
    "classes_bool": ("linear", edit_meta(_set("classes", [True, False]))),
    "n_features_zero": ("linear", edit_meta(_set("n_features", 0))),
    "n_features_negative": ("linear", edit_meta(_set("n_features", -5))),
    "n_features_string": ("linear", edit_meta(_set("n_features", "6"))),
    "n_features_huge": ("linear", edit_meta(_set("n_features", 10**12))),
    "kind_unknown": ("linear", edit_meta(_set("kind", "quantum"))),
    "intercept_is_scalar_string": ("linear", edit_meta(_set("intercept_is_scalar", "yes"))),
    "info_not_object": ("linear", edit_meta(_set("info", [1, 2]))),
    "version_newer": ("linear", edit_meta(_set("version", 99))),
    "version_string": ("linear", edit_meta(_set("version", "1"))),
    "format_wrong": ("linear", edit_meta(_set("format", "pickle"))),
    "linear_has_svs": ("linear", edit_array("sv_indptr", lambda a: np.zeros(1, np.int64))),
    "ovr_classes_vs_rows": ("ovr", edit_meta(_set("classes", [1, 2]))),
    "ovr_intercept_short": ("ovr", edit_array("intercept", lambda a: a[:2])),
    # --- files (finding 3)
    "zip_bomb": ("linear", _zip_bomb),
    "npy_header_lies": ("linear", _lying_header),
    "npz_devzero": ("linear", _replace_file("arrays.npz", "devzero")),
    "npz_fifo": ("linear", _replace_file("arrays.npz", "fifo")),
    "npz_directory": ("linear", _replace_file("arrays.npz", "dir")),
    "npz_empty": ("linear", _replace_file("arrays.npz", "empty")),
    "npz_truncated": ("kernel", _truncate("arrays.npz", 0.6)),
    "json_fifo": ("linear", _replace_file("model.json", "fifo")),
    "json_devzero": ("linear", _replace_file("model.json", "devzero")),
    "json_truncated": ("linear", _truncate("model.json", 0.5)),
    "json_not_json": ("linear", _text("model.json", "\x00\x01 not json")),
    "json_a_list": ("linear", _text("model.json", "[1, 2, 3]")),
}


@pytest.fixture(scope="module")
def tampered(base):
    """Every case applied to a copy of its model, then all predicted in one driver run."""
    tmp = base
    pairs = [(tmp / name, tmp / f"{name}.ref.tsv") for name in ("kernel", "linear", "ovr")]
    for case, (kind, tamper) in sorted(CASES.items()):
        path = tmp / f"t_{case}"
        shutil.copytree(tmp / kind, path, symlinks=True)
        tamper(str(path))
        pairs.append((path, tmp / f"t_{case}.tsv"))
    res = _predict_all(tmp, pairs)
    ref = {}
    for name in ("kernel", "linear", "ovr"):
        assert res[str(tmp / name)][0] == 0, res[str(tmp / name)]
        ref[name] = (tmp / f"{name}.ref.tsv").read_bytes()
    return tmp, res, ref


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampered_model_is_refused_or_harmless(tampered, case):
    tmp, res, ref = tampered
    kind, _ = CASES[case]
    path = tmp / f"t_{case}"
    out = tmp / f"t_{case}.tsv"
    rc, err = res[str(path)]
    if rc == 0 and out.read_bytes() == ref[kind]:
        return  # harmless: bit-identical scores
    assert rc == 1, (case, rc, err[-2000:])  # a crash would be negative (signal) or 99
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ooc-svm: error: "), (case, err)
    assert path.name in lines[0], lines[0]
    assert not out.exists()
    # the library raises the same one-line ModelError
    with pytest.raises(ModelError):
        load_model(str(path))


def test_model_error_names_the_field(base):
    tmp = base
    path = tmp / "named"
    shutil.copytree(tmp / "kernel", path)
    edit_array("sv_indices", _set_at(0, 10**9))(str(path))
    with pytest.raises(ModelError, match=r"named: invalid model: sv_indices .*n_features = 6"):
        load_model(str(path))
    path = tmp / "named2"
    shutil.copytree(tmp / "linear", path)
    edit_array("coef", lambda a: a[:-1])(str(path))
    with pytest.raises(ModelError, match=r"coef has shape \(5,\); expected \(6,\)"):
        load_model(str(path))


def test_untampered_models_round_trip(base):
    tmp = base
    for name in ("kernel", "linear", "ovr"):
        m = load_model(str(tmp / name))
        assert m.n_features == NF
