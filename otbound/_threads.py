"""How many of numba's threads a compiled kernel's call gets.

A parallel kernel wakes numba's other threads for each call. Where they have gone to sleep
since the last call (the OpenMP layer lets them sleep soon after a parallel region ends),
waking them costs tens of microseconds (70 µs per call on a 2-core Xeon,
``benchmarks/bench_without_replacement.py``), more than a small call's whole work. Such calls
run on this thread alone (the caller compares its work with :data:`SERIAL_WORK`); the kernels
give the same bits on any number of threads, so only the time changes.

numba's threading layer starts at the first parallel call or ``numba.get_num_threads()``.
A compiled function loaded from numba's on-disk cache that calls a parallel kernel inside
(``bucketed_row`` through the without-replacement levels, say) does not start it, and
crashes the interpreter when it is the process's first compiled call (numba issue 8578,
numba 0.68: ``bucketed_row`` called straight from a fresh process). Every
Python entry point into such a kernel passes ``numba.get_num_threads()`` (or calls a
parallel kernel) first; a script that calls a compiled kernel directly must do the same.
Starting the layer when this module is imported would cost 20 ms at every import and
start OpenMP's threads before the main job forks its workers.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import numba

__all__ = ["SERIAL_WORK", "numba_threads", "serial_build"]

#: A call of at most this much work (the caller's unit: tokens times nodes for the
#: without-replacement sweep) runs on one thread: up to about 0.15 ms of work alone, where
#: a second thread saved less than its wake-up cost (measured level by level on a 2-core
#: Xeon).
SERIAL_WORK = 1 << 18


@contextlib.contextmanager
def numba_threads(threads: int) -> Iterator[None]:
    """numba's parallel kernels called in this block use at most ``threads`` threads
    (``numba.set_num_threads``, restored afterwards; per calling thread)."""
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, before)))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def serial_build(kernel: Any) -> Any:
    """``kernel`` (a ``numba.njit(parallel=True)`` dispatcher) compiled without parallel loops:
    ``numba.prange`` runs as ``range`` on the calling thread, whatever numba's thread count.

    For a compiled caller that picks by the size of the work: the thread count itself can
    only be changed from compiled code through a pointer that keeps the caller out of
    numba's on-disk cache. The copy of the Python function gets its own name (its own cache
    entry: numba keys its cache on the function's qualified name, not on its options), and
    is cached on disk as every kernel of the project is.
    """
    function = kernel.py_func
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        f"{function.__name__}_serial",
        function.__defaults__,
        function.__closure__,
    )
    copy.__qualname__ = f"{function.__qualname__}_serial"
    copy.__doc__ = function.__doc__
    copy.__module__ = function.__module__
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    return numba.njit(cache=True, **options)(copy)
