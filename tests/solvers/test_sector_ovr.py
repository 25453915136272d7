"""One-vs-rest on the real 105-class `sector` data against scikit-learn's LinearSVC."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import dataset
from sklearn.datasets import load_svmlight_file
from sklearn.svm import LinearSVC as SkLinearSVC

from ooc_svm.api import train
from ooc_svm.engine import LocalEngine
from ooc_svm.store.ingest import ingest


@pytest.mark.slow
def test_sector_ovr_accuracy_close_to_liblinear(tmp_path):
    tr, te = dataset("sector/sector.scale.bz2"), dataset("sector/sector.t.scale.bz2")
    store = str(tmp_path / "sector.zarr")
    ingest([str(tr)], store, label_kind="multiclass", n_features=55197)
    X, y = load_svmlight_file(str(tr), n_features=55197, zero_based=False)
    Xt, yt = load_svmlight_file(str(te), n_features=55197, zero_based=False)
    for M in (X, Xt):  # LIBLINEAR through sklearn needs 32-bit indices
        M.indices = M.indices.astype(np.int32)
        M.indptr = M.indptr.astype(np.int32)
    t0 = time.perf_counter()
    with LocalEngine(n_threads=2) as eng:
        res = train(store, "perf", engine=eng, C=1.0, eps=1e-3)
    ours_s = time.perf_counter() - t0
    ours = float((res.model.predict(Xt) == yt).mean())
    t0 = time.perf_counter()
    ref = SkLinearSVC(C=1.0, loss="hinge", dual=True, tol=1e-4, max_iter=20000).fit(X, y)
    ref_s = time.perf_counter() - t0
    ref_acc = float((ref.predict(Xt) == yt).mean())
    print(
        f"sector OvR: ooc-svm perf {ours:.4f} ({ours_s:.1f}s, {res.passes} passes), "
        f"LIBLINEAR {ref_acc:.4f} ({ref_s:.1f}s)"
    )
    assert res.model.coef_.shape == (105, 55197)
    # all 105 classes share each pass: passes = those of the slowest class, not the sum
    its = res.summary["per_class_iterations"]
    print(f"per-class iterations: max {max(its)}, sum {sum(its)}")
    assert res.summary["shared_passes"] and res.passes == 1 + max(its)
    assert abs(ours - ref_acc) <= 0.01
