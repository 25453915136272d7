"""Shared helpers of the model-format readers and writers: bounded line reading with line
numbers, one-line errors, atomic text output and number formatting."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..model.model import ModelError

#: Longest line a model file may have (an SVMperf linear model holds all of w on one line).
MAX_LINE_BYTES = 1 << 28

_MAGIC = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


class FormatError(ModelError):
    """A model file in a foreign format cannot be read or written; names file and line."""


#: widest model ooc-svm loads (``n_features``; as :func:`ooc_svm.model.model.load_model` checks)
MAX_WIDTH = 1 << 31


def check_width(path: str, width: int, what: str = "highest feature index") -> int:
    """``width`` if a model that wide can be loaded; :class:`FormatError` before anything that
    wide is allocated otherwise."""
    if width > MAX_WIDTH:
        raise FormatError(
            f"{path}: {what} {width:,} is more than the {MAX_WIDTH:,} features an ooc-svm model "
            "may have; nothing was imported"
        )
    return width


class LineReader:
    """Lines of a (possibly gz/bz2/xz compressed) text file with their 1-based numbers.

    A line longer than :data:`MAX_LINE_BYTES` is an error, so memory stays bounded per line.
    """

    def __init__(self, path: str, max_line: int | None = None):
        self.path = str(path)
        self.max_line = int(MAX_LINE_BYTES if max_line is None else max_line)
        self.lineno = 0
        try:
            with open(self.path, "rb") as f:
                head = f.read(6)
        except FileNotFoundError:
            raise FormatError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise FormatError(f"{self.path}: is a directory, not a model file") from None
        except OSError as e:
            raise FormatError(f"{self.path}: cannot open ({e.strerror or e})") from None
        opener: Callable[..., Any] = open
        for magic, op in _MAGIC:
            if head.startswith(magic):
                opener = op
        self._f = opener(self.path, "rb")

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def error(self, what: str, lineno: int | None = None) -> FormatError:
        n = self.lineno if lineno is None else lineno
        return FormatError(f"{self.path}: line {n}: {what}")

    def readline(self) -> str | None:
        """Next line without its end (None at end of file)."""
        try:
            raw = self._f.readline(self.max_line + 1)
        except (OSError, EOFError, ValueError) as e:
            raise FormatError(f"{self.path}: read error after line {self.lineno} ({e})") from None
        if not raw:
            return None
        self.lineno += 1
        if len(raw) > self.max_line and not raw.endswith(b"\n"):
            raise self.error(f"line longer than {self.max_line:,} bytes; not a model file?")
        try:
            return raw.decode("ascii").rstrip("\r\n")
        except UnicodeDecodeError:
            raise self.error("not ASCII text; is this a model file?") from None

    def __iter__(self) -> Iterator[str]:
        while True:
            line = self.readline()
            if line is None:
                return
            yield line

    def need(self, what: str) -> str:
        """Next line, or an error naming what was expected."""
        line = self.readline()
        if line is None:
            raise FormatError(f"{self.path}: ends after line {self.lineno}; expected {what}")
        return line


def read_header(
    r: LineReader,
    keys: tuple[str, ...],
    *,
    name: str,
    first: str,
    end: str,
    others: str,
    end_alone: bool = False,
    unique: bool = False,
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Header lines ``KEY VALUE ...`` of a model file, up to the line starting with ``end``.

    Parameters
    ----------
    r : LineReader
        The file, before its first line.
    keys : tuple of str
        The keys a header line may start with.
    name, first, others : str
        For the messages: the format's name (``LIBSVM``), the key its files start with
        (``svm_type``) and where the other formats' files start.
    end : str
        The line that ends the header (``SV``); with ``end_alone`` only when it stands alone.
    unique : bool
        A key given twice is an error (else the last one counts).

    Returns
    -------
    head : dict
        The values of each key.
    lines : dict
        The line number of each key.
    """
    head: dict[str, list[str]] = {}
    lines: dict[str, int] = {}
    while True:
        line = r.need(f"the header of a {name} model ending with a line '{end}'")
        toks = line.split()
        if not toks:
            continue
        key = toks[0]
        if key == end and (len(toks) == 1 or not end_alone):
            return head, lines
        if unique and key in head:
            raise r.error(f"'{key}' given twice")
        if key not in keys:
            if r.lineno == 1:
                raise r.error(
                    f"starts with {line[:40]!r}, not '{first}'; not a {name} model ({others})"
                )
            raise r.error(f"unknown header line {line[:60]!r} in a {name} model")
        head[key] = toks[1:]
        lines[key] = r.lineno


def expect_end(r: LineReader, what: str) -> None:
    """Only blank lines may follow; ``what`` names the text found otherwise."""
    for line in r:
        if line.strip():
            raise r.error(what)


def to_float(reader: LineReader, tok: str, what: str, lineno: int | None = None) -> float:
    """``tok`` as a finite float; else a one-line error naming ``what`` and the line
    (``lineno``: a header line read earlier; the current line by default)."""
    try:
        v = float(tok)
    except ValueError:
        raise reader.error(f"{what} {tok[:40]!r} is not a number", lineno) from None
    if not np.isfinite(v):
        raise reader.error(f"{what} {tok[:40]!r} is not finite", lineno)
    return v


def to_int(
    reader: LineReader, tok: str, what: str, minimum: int = 0, lineno: int | None = None
) -> int:
    """``tok`` as an integer of at least ``minimum``; else a one-line error as
    :func:`to_float`'s."""
    try:
        v = int(tok)
    except ValueError:
        raise reader.error(f"{what} {tok[:40]!r} is not an integer", lineno) from None
    if v < minimum:
        raise reader.error(f"{what} {v} is below {minimum}", lineno)
    return v


class GrowingRows:
    """Rows of ``width`` floats appended one by one, in an array grown as the file delivers
    them (doubling): a header that claims more rows than the file holds costs nothing before
    the file ends early (:meth:`LineReader.need` then fails with one line)."""

    def __init__(self, claimed: int, width: int):
        self.width = max(1, int(width))
        self.n = 0
        first = max(1, min(int(claimed), (1 << 20) // self.width))
        self.a = np.empty((first, self.width))

    def row(self) -> np.ndarray:
        """The next row (to be filled in by the caller)."""
        if self.n == self.a.shape[0]:
            grown = np.empty((2 * self.a.shape[0], self.width))
            grown[: self.n] = self.a
            self.a = grown
        self.n += 1
        return self.a[self.n - 1]

    def array(self) -> np.ndarray:
        """The rows so far, (n, width)."""
        return self.a[: self.n]


class SparseRows:
    """Accumulates ``INDEX:VALUE`` rows (1-based indices) into a CSR matrix."""

    def __init__(self) -> None:
        self.indptr = [0]
        self.indices: list[np.ndarray] = []
        self.data: list[np.ndarray] = []
        self.nnz = 0
        self.max_col = -1

    def add(self, reader: LineReader, toks: list[str]) -> None:
        n = len(toks)
        idx: np.ndarray | None = None
        val: np.ndarray | None = None
        if all(t.count(":") == 1 for t in toks):
            try:  # fast path: one conversion for the whole line
                arr = np.array(":".join(toks).split(":"), dtype=np.float64)
                idx, val = arr[0::2], arr[1::2]
                if not (np.all(idx == np.floor(idx)) and np.all(idx >= 1)):
                    idx = None
                elif not np.all(np.isfinite(val)):
                    idx = None
                else:
                    idx = idx.astype(np.int64)
            except ValueError:
                idx = None
        if idx is None:  # slow path: find the bad token for the message
            idx = np.empty(n, np.int64)
            val = np.empty(n, np.float64)
            for k, t in enumerate(toks):
                i, sep, v = t.partition(":")
                if not sep:
                    raise reader.error(f"feature {t[:40]!r} is not INDEX:VALUE")
                idx[k] = to_int(reader, i, "feature index", 1)
                val[k] = to_float(reader, v, "feature value")
        assert val is not None  # set with idx on both paths
        if n > 1 and np.any(np.diff(idx) <= 0):
            raise reader.error("feature indices are not strictly increasing")
        if n and idx[-1] > (1 << 31):
            raise reader.error(f"feature index {int(idx[-1])} is too large")
        self.indices.append(idx - 1)
        self.data.append(val)
        self.nnz += n
        self.indptr.append(self.nnz)
        if n:
            self.max_col = max(self.max_col, int(idx[-1]) - 1)

    def matrix(self, n_features: int) -> sp.csr_matrix:
        ind = np.concatenate(self.indices) if self.indices else np.zeros(0, np.int64)
        dat = np.concatenate(self.data) if self.data else np.zeros(0)
        return sp.csr_matrix(
            (dat, ind.astype(np.int32), np.asarray(self.indptr, dtype=np.int64)),
            shape=(len(self.indptr) - 1, n_features),
        )


def fmt(v: float) -> str:
    """Shortest text that reads back as the same float64 (``1`` for 1.0)."""
    s = repr(float(v))
    return s[:-2] if s.endswith(".0") else s


def sparse_row_text(indices: np.ndarray, data: np.ndarray) -> str:
    """``i:v i:v ...`` with 1-based indices (explicit zeros dropped)."""
    return " ".join(f"{int(i) + 1}:{fmt(v)}" for i, v in zip(indices, data, strict=True) if v != 0)


@contextmanager
def atomic_text(out: str):
    """Write a text file under a temporary name; rename into place only when complete."""
    out = os.fspath(out)
    parent = os.path.dirname(os.path.abspath(out)) or "."
    if os.path.isdir(out):
        raise FormatError(f"{out}: is a directory; give a file name for the exported model")
    from .._util import OutputError, make_output_parent

    make_output_parent(os.path.abspath(out), out)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".export-", dir=parent)
    except OSError as e:
        raise OutputError(
            f"{out}: cannot write ({e.strerror or e}); give an output path in a directory you "
            "can write"
        ) from None
    try:
        with os.fdopen(fd, "w") as f:
            yield f
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_finite(model, where: str) -> None:
    for name in ("coef_", "intercept_", "dual_coef_"):
        a = getattr(model, name, None)
        if a is not None and not np.all(np.isfinite(np.asarray(a, dtype=np.float64))):
            raise FormatError(f"{where}: the model's {name} has non-finite values; not exported")


def linear_weights(model) -> np.ndarray:
    """w of a binary linear model, or of a binary kernel model with the linear kernel."""
    if model.kind == "linear":
        return np.asarray(model.coef_, dtype=np.float64).ravel()
    sv = sp.csr_matrix(model.support_vectors_)
    coef = np.asarray(model.dual_coef_, dtype=np.float64).ravel()
    w = np.asarray(sv.T @ coef).ravel()
    out = np.zeros(max(int(model.n_features), w.shape[0]))
    out[: w.shape[0]] = w
    return out
