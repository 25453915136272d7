"""``python -m ooc_svm.server --socket PATH``: run the warm server (:mod:`.server`)."""

import sys

from .server import main

sys.exit(main())
