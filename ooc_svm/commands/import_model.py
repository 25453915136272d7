"""``ooc-svm import FILE MODEL``: read a LIBLINEAR, LIBSVM or SVMlight/SVMperf model file
into an ooc-svm model directory (``import`` is a Python keyword, hence the module name)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._util import json_text
from ._common import INT

if TYPE_CHECKING:
    import argparse

#: the command's name on the command line
COMMAND = "import"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        COMMAND,
        help="read a LIBLINEAR, LIBSVM or SVMlight model file into an ooc-svm model",
        description=(
            "Read a model file written by LIBLINEAR's train (-s 0..7 classifiers), "
            "LIBSVM's svm-train (C-SVC / nu-SVC, any kernel, one-vs-one multiclass) or "
            "SVMlight's svm_learn / SVMperf (linear and kernel models) and save it as an "
            "ooc-svm model: `ooc-svm predict` / `evaluate` then give the decision values those "
            "tools give. The format is recognised from the first line."
        ),
        epilog="examples:\n"
        "  ooc-svm import a9a.model model && ooc-svm evaluate model a9a.t\n"
        "  ooc-svm import rbf.model model --n-features 123",
        formatter_class=HelpFormatter,
    )
    p.add_argument("file", help="model file (plain, .gz, .bz2 or .xz)")
    p.add_argument("model", help="model directory to write")
    p.add_argument(
        "--format",
        choices=["liblinear", "libsvm", "svmlight"],
        default=None,
        dest="fmt",
        help="format of FILE (default: recognised from its first line)",
    )
    p.add_argument(
        "--n-features",
        type=INT,
        default=None,
        help="width of the data the model will score (default: from the file; LIBSVM files "
        "do not record it: RBF models then ignore features beyond the largest index in a "
        "support vector, where LIBSVM counts them)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing MODEL")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from ..interop import import_model
    from ..interop.describe import model_summary
    from ..model.model import ModelError

    if os.path.exists(args.model) and not args.overwrite:
        raise ModelError(f"{args.model}: exists; pass --overwrite to replace it")
    if args.n_features is not None and args.n_features < 1:
        raise ModelError("--n-features must be at least 1")
    model = import_model(args.file, args.fmt, args.n_features)
    model.save(args.model)
    d = {"model": args.model, **model_summary(model)}
    if args.json:
        print(json_text(d))
    elif not getattr(args, "quiet", False):
        print(
            f"import: {args.file} ({d['format']}) -> {args.model}: {d['kind']} model, "
            f"{d['n_classes']} classes, {d['n_features']} features"
            + (f", {d['n_support_vectors']} support vectors" if d["n_support_vectors"] else "")
        )
    return 0
