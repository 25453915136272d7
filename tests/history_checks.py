"""Assertions shared by the solver tests (imported like ``conftest``)."""

from __future__ import annotations


def assert_history_timed(res) -> None:
    """Every history record of ``res`` carries elapsed ``seconds`` and
    streamed ``passes``, both non-decreasing, the last at most the result's passes."""
    recs = res.history
    assert len(recs) > 3
    for a, b in zip(recs, recs[1:], strict=False):
        assert b["seconds"] >= a["seconds"] >= 0.0
        assert b["passes"] >= a["passes"] >= 1
    assert recs[-1]["passes"] <= res.passes
