"""The first run's compilation: said in one line, done before the progress bar starts.

otbound's compiled kernels (``@numba.njit(cache=True)``) are compiled at their first call and
kept in numba's on-disk cache (the ``*.nbi`` and ``*.nbc`` files in each ``__pycache__``, or
under ``NUMBA_CACHE_DIR``); every later process loads them from there. On a fresh install the
first run compiles them all, about a minute, which a progress bar over the steps would show as
a bar stuck at 0 % with an estimate of several minutes. So when the cache is cold the run
prints :data:`COMPILING`, analyses one step (its rows discarded), which compiles the kernels
and writes the cache, and only then starts the bar; the workers load the kernels from the cache
instead of each compiling them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from otbound.analysis._config import AnalysisConfig
from otbound.analysis._shard import analyse_shard, forget_part_shard

if TYPE_CHECKING:
    from otbound.dumps import Dump

#: What a run prints while the kernels compile.
COMPILING = "compiling kernels (first run only)"
#: The steps analysed to compile the kernels: two, so that a batch of rows takes the
#: kernels that share its rows among numba's threads, as the run's chunks do.
WARM_STEPS = 2


def cached_kernels() -> list[Any]:
    """otbound's compiled kernels with an on-disk cache, in the modules imported so far.

    Returns
    -------
    list of numba dispatchers
        Each module-level ``numba.njit(cache=True)`` function of an imported ``otbound``
        module (empty when numba is not imported, or with ``NUMBA_DISABLE_JIT``).
    """
    found = []
    for name, module in list(sys.modules.items()):
        if not (name == "otbound" or name.startswith("otbound.")) or module is None:
            continue
        for value in list(vars(module).values()):
            cache = getattr(value, "_cache", None)
            if getattr(value, "__module__", None) == name and hasattr(cache, "_cache_file"):
                found.append(value)
    return found


def _has_cache_entry(kernel: Any) -> bool:
    """Whether numba's cache holds a compiled version of ``kernel`` for its current source
    (an index whose source stamp and numba version match, with at least one entry)."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:  # numba's cache layout is not public: unknown counts as cached
        return True


def kernels_cold(kernels: Iterable[Any] | None = None) -> bool:
    """Whether numba's on-disk cache holds none of ``kernels``: a fresh install, or caches
    deleted (a run then compiles every kernel it calls).

    Parameters
    ----------
    kernels : iterable of numba dispatchers, optional
        Default: :func:`cached_kernels`.

    Returns
    -------
    bool
        True when there is at least one kernel and none has a cache entry for its source.
    """
    kernels = cached_kernels() if kernels is None else list(kernels)
    return bool(kernels) and not any(_has_cache_entry(kernel) for kernel in kernels)


def _first_shard(pending: dict[int, int]) -> int | None:
    """The first shard of ``pending`` (shard position -> steps to analyse) with a step."""
    return next((shard for shard, steps in pending.items() if steps > 0), None)


@contextlib.contextmanager
def kernels_compiled(
    dump: Dump,
    pending: dict[int, int],
    config: AnalysisConfig,
    *,
    announce: bool,
    one_thread: bool = False,
    file: TextIO | None = None,
) -> Iterator[bool]:
    """On entry, when the kernels' cache is cold (:func:`kernels_cold`): print
    :data:`COMPILING` (if ``announce``) and analyse the first :data:`WARM_STEPS` pending
    steps as the run will (on one numba thread where the run has workers), so that the
    kernels the run calls are compiled and cached before the progress bar starts.

    Parameters
    ----------
    dump : Dump
    pending : dict of int to int
        The shards still to analyse (position in ``dump.shards`` -> steps).
    config : AnalysisConfig
    announce : bool
        Print :data:`COMPILING` on ``file`` (default ``sys.stderr``).
    one_thread : bool, default False
        The run analyses in this process on one numba thread (it has workers): the kernels
        then take a row at a time; with more threads, a batch's rows go to the threads, which
        other kernels do (:func:`otbound.drafts._row_batch.rows_on_threads`).
    file : text stream, optional

    Yields
    ------
    bool
        Whether the kernels were compiled here.
    """
    shard = _first_shard(pending)
    cold = shard is not None and kernels_cold()
    if cold and shard is not None:
        if announce:
            print(COMPILING, file=file or sys.stderr, flush=True)
        from otbound._threads import numba_threads  # numba: imported where it is used

        steps = (0, min(WARM_STEPS, pending[shard]))
        threads = numba_threads(1) if one_thread else contextlib.nullcontext()
        # the steps' rows are analysed again by the run; an error here is the run's to
        # report, with its own rules (a bad shard, a bug), when it reaches these steps
        with threads, contextlib.suppress(Exception):
            analyse_shard(dump, shard, config, steps=steps)
        forget_part_shard()
    yield cold
