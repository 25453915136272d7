"""``ooc-svm export MODEL --format liblinear|libsvm|svmlight OUT``: write a model for
LIBLINEAR's ``predict``, LIBSVM's ``svm-predict`` or SVMlight's ``svm_classify``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._util import json_text

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import HelpFormatter

    p = sub.add_parser(
        "export",
        help="write a model as a LIBLINEAR, LIBSVM or SVMlight model file",
        description=(
            "Write an ooc-svm model in the text format of LIBLINEAR (linear models, "
            "binary or one-vs-rest), LIBSVM (binary kernel or linear models, one-vs-one "
            "models imported from LIBSVM) or SVMlight/SVMperf (binary models). The decision "
            "values those tools compute from the file are the ones ooc-svm computes."
        ),
        epilog="examples:\n"
        "  ooc-svm export model --format liblinear a9a.model && predict a9a.t a9a.model out\n"
        "  ooc-svm export rbf_model --format libsvm rbf.model && svm-predict test rbf.model out\n"
        "  ooc-svm export model --format svmlight svm.model && svm_classify test svm.model out",
        formatter_class=HelpFormatter,
    )
    p.add_argument("model", help="model directory written by `ooc-svm train` or `import`")
    p.add_argument(
        "--format",
        required=True,
        choices=["liblinear", "libsvm", "svmlight"],
        dest="fmt",
        help="LIBLINEAR (linear models), LIBSVM or SVMlight/SVMperf model file",
    )
    p.add_argument("output", help="model file to write")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUTPUT (else refused)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from ..interop import export_model
    from ..model.model import load_model

    model = load_model(args.model)
    if args.output != "-" and os.path.lexists(args.output) and not args.overwrite:
        from .._util import OutputError

        raise OutputError(
            f"{args.output}: exists; pass --overwrite to replace it (or give another output)"
        )
    export_model(model, args.fmt, args.output)
    if args.json:
        print(json_text({"model": args.model, "format": args.fmt, "output": args.output}))
    elif not getattr(args, "quiet", False):
        print(f"export: {args.model} -> {args.output} ({args.fmt})")
    return 0
