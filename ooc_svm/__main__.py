"""``python -m ooc_svm``: the ``ooc-svm`` command."""

import sys

from . import _early

_early.guard()  # before the CLI is imported: a signal from here on is one line

from .cli import main  # noqa: E402

sys.exit(main())
