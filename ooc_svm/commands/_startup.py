"""Start-up of the commands that run numba kernels: numba's CPU target without the imports
ooc-svm never uses (a command pays no start-up it does not need).

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
nothing but the moment the target loads. ``tests/commands/test_startup.py`` checks that the perf
training path imports neither.

The cyclic garbage collector, in the ``ooc-svm`` process (:func:`ooc_svm.cli.main` called
without arguments, not from Python): start-up makes hundreds of thousands of long-lived
objects (numba's types, templates and registries) and almost no garbage, so collections
during it, and the interpreter's final ones at exit, only walk them: 0.2-0.25 s of CPU of
a 0.95 s a9a training (measured, numba 0.68.1). :func:`pause_gc` stops the collector from
the start of the command to the end of :func:`init_numba_target`, where :func:`resume_gc`
freezes what exists (``gc.freeze``: kept out of every later collection; it lives until exit
anyway) and restarts it for the run; the command's end freezes again before the interpreter
exits. A command that loads no numba kernel (``info``, ``export``, ``import``, ``plot``)
runs with the collector paused; it is short and its garbage is bounded.

Cached kernels without the target at all. numba calls ``refresh`` before it even looks in
its on-disk cache (``Cache.load_overload``), yet rebuilding a cached kernel only links its
object code: it needs the context made when the target is first used (numba's C helpers,
math functions and exception classes in LLVM's symbol table), the NRT runtime's symbols when
the code calls the NRT, and the hash secret's symbols (``numba.cpython.hashing``, at import)
when it hashes; parallel kernels start their thread pool through the cache's own
``reload_init``. The full target (~200 modules: 0.12 s of CPU of a 0.45 s a9a training,
measured, numba 0.68.1) serves only compiling. So :func:`init_numba_target` replaces the
cache's ``load_overload`` (:func:`_load_cached`): a kernel found in the cache loads with only
what its object code names (``NRT_``, ``_numba_hashsecret_``); a kernel not found loads the
target first (in the main thread with the stand-ins above; elsewhere numba's own refresh
when it compiles). The same object code is linked either way: the same machine code, the
same bits (``tests/commands/test_startup.py`` compares the models of both ways). A numba
whose cache lacks the private methods this relies on gets the eager target, as before.
"""

from __future__ import annotations

import gc
import sys
import threading
import types

#: whether :func:`pause_gc` stopped the collector (and :func:`resume_gc` has not restarted it)
_gc_paused = False


def pause_gc() -> None:
    """Stop the cyclic garbage collector for the start-up of the ``ooc-svm`` process."""
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


def resume_gc() -> None:
    """End of start-up: freeze the objects made so far (they live until exit) and restart
    the collector, if :func:`pause_gc` stopped it."""
    global _gc_paused
    if _gc_paused:
        gc.freeze()
        gc.enable()
        _gc_paused = False


def init_numba_target(eager: bool = False) -> None:
    """Make numba ready for this command's kernels (see the module docstring): cached
    kernels load without the CPU target, which loads (without scipy.linalg and cffi) when a
    kernel must be compiled, or now with ``eager`` (the warm server: every later fork
    has it).

    Ends the start-up (:func:`resume_gc`).
    """
    try:
        if eager or not _load_lazily():
            _load_numba_target()
        from .._numba_cache import announce_compiles

        announce_compiles()  # a kernel compiled (not in the cache) is said in one line
    finally:
        resume_gc()


#: markers of what a cached kernel's object code links against, beyond numba's context
_NRT = b"NRT_"
_HASH_SECRET = b"_numba_hashsecret_"


def _load_lazily() -> bool:
    """Install :func:`_load_cached` as numba's ``Cache.load_overload``; False (nothing
    changed) when this numba's cache lacks what it relies on."""
    from numba.core import caching

    cache = caching.Cache
    if getattr(cache.load_overload, "_ooc_svm", False):
        return True
    needed = ("_load_overload", "_index_key", "_guard_against_spurious_io_errors")
    if not all(hasattr(cache, name) for name in needed):
        return False
    _NUMBAS[:] = [cache.load_overload]
    cache.load_overload = _load_cached  # type: ignore[method-assign]
    return True


#: numba's own ``Cache.load_overload``, replaced by :func:`_load_cached`
_NUMBAS: list = []


def _load_cached(self, sig, target_context):
    """numba's ``Cache.load_overload`` without the target's ``refresh`` on a cache hit."""
    try:
        enabled, cache_file, impl = self._enabled, self._cache_file, self._impl
    except AttributeError:  # a cache of another shape: numba's own way
        return _NUMBAS[0](self, sig, target_context)
    with self._guard_against_spurious_io_errors():
        if not enabled:
            return None
        data = cache_file.load(self._index_key(sig, target_context.codegen()))
        if data is None:  # numba compiles it next: the whole target is needed
            if threading.current_thread() is threading.main_thread():
                _load_numba_target()
            return None
        _link_needs(data[0], target_context)
        return impl.rebuild(target_context, data)
    return None  # the `with` swallowed a spurious I/O error (numba's own behaviour)


_load_cached._ooc_svm = True  # type: ignore[attr-defined]


def _link_needs(libdata, target_context) -> None:
    """Put into LLVM's symbol table what the cached library ``libdata`` (numba's
    ``serialize_using_object_code``: name, ``"object"``, (object code, shared bitcode))
    links against; anything else: the whole target, as numba would."""
    _, kind, payload = libdata
    if kind != "object":
        target_context.refresh()
        return
    if any(_NRT in blob for blob in payload):
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
    if any(_HASH_SECRET in blob for blob in payload):
        import numba.cpython.hashing  # noqa: F401  (its import adds the symbols)


def _load_numba_target() -> None:
    if "numba.np.arraymath" in sys.modules:  # loaded (a compile or cache load happened)
        return
    from numba.core.registry import cpu_target

    stand_ins: dict[str, types.ModuleType | None] = {}
    if "scipy.linalg" not in sys.modules:
        stand_ins["scipy.linalg.cython_blas"] = types.ModuleType("scipy.linalg.cython_blas")
    if "cffi" not in sys.modules:
        stand_ins["cffi"] = None
    modules: dict[str, types.ModuleType | None] = sys.modules  # type: ignore[assignment]
    modules.update(stand_ins)  # None: "import cffi" raises ImportError (documented)
    try:
        cpu_target.target_context.refresh()
    finally:
        for name, value in stand_ins.items():
            if name in sys.modules and sys.modules[name] is value:
                del sys.modules[name]
