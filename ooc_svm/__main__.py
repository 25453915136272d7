"""``python -m ooc_svm``: the ``ooc-svm`` command."""

import sys

from .cli import main

sys.exit(main())
