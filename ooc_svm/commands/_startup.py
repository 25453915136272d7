"""Start-up of the commands that run numba kernels: numba's CPU target without the imports
ooc-svm never uses (issue 16, "no start-up tax").

numba loads the implementations of its CPU target (``BaseContext.refresh``) the first time a
function is compiled *or loaded from its on-disk cache*, so every command pays it once. Two of
those imports cost more than loading all of ooc-svm's cached kernels and serve nothing
ooc-svm compiles:

- ``numba.np.arraymath`` checks at import time whether ``np.dot`` can use a BLAS
  (``_HAVE_BLAS = _check_blas()``) by importing ``scipy.linalg.cython_blas``, which imports
  the whole of ``scipy.linalg`` (0.13 s of CPU on an idle machine, 0.4 s of wall time on a
  loaded one; numba 0.68.1, scipy 1.17.1). No ooc-svm kernel calls a BLAS-backed numpy
  function (``np.dot``, ``np.linalg``), and scipy is a dependency of ooc-svm, so the answer
  is known: yes. numba still runs the check that matters, ``_check_lapack_int_width`` (it
  reads ``scipy.__config__``), and a kernel that did use ``np.dot`` would import the real
  ``scipy.linalg.cython_blas`` when compiled and called (``ensure_blas`` imports it again).
- ``numba.core.typing.cffi_utils`` builds a ``cffi.FFI()`` when cffi is installed (it is
  when ``cryptography`` is, e.g. through the ``dev`` extra): 0.04 s of CPU, to type cffi
  functions, which ooc-svm never passes to a kernel. numba then supports no cffi functions
  in this process.

:func:`init_numba_target` runs that one initialisation up front, in the main thread before
any engine thread starts, with ``scipy.linalg.cython_blas`` standing as an empty placeholder
module in ``sys.modules`` and ``cffi`` marked unimportable (``None``: Python's documented way
to block an import); both entries are removed right after, so a later ``import scipy.linalg``
or ``import cffi`` is a normal import. It relies on numba importing those two names while
its target loads, as numba 0.68.1 does (measured); with a numba that does not, it changes
nothing but the moment the target loads. ``tests/test_startup.py`` checks that the perf
training path imports neither.
"""

from __future__ import annotations

import sys
import types


def init_numba_target() -> None:
    """Load numba's CPU target now, without scipy.linalg and cffi (see the module docstring).

    Does nothing when the target is already loaded in this process.
    """
    if "numba.np.arraymath" in sys.modules:  # loaded (a compile or cache load happened)
        return
    from numba.core.registry import cpu_target

    stand_ins: dict[str, types.ModuleType | None] = {}
    if "scipy.linalg" not in sys.modules:
        stand_ins["scipy.linalg.cython_blas"] = types.ModuleType("scipy.linalg.cython_blas")
    if "cffi" not in sys.modules:
        stand_ins["cffi"] = None
    sys.modules.update(stand_ins)
    try:
        cpu_target.target_context.refresh()
    finally:
        for name, value in stand_ins.items():
            if name in sys.modules and sys.modules[name] is value:
                del sys.modules[name]
