"""Scratch buffers that a thread reuses from call to call.

A compiled kernel's temporaries of several megabytes (the power sums and the stored count
distributions of :mod:`otbound.drafts._sequential_mass`) are allocated once per row and level.
Fresh memory of that size comes from the operating system page by page on first touch, which
cost about 7 % of the without-replacement bound at V = 32,000 (``benchmarks/``). Here each
thread keeps one growing buffer per name; a caller takes a view of it, uses it within its own
call and never returns it (two live uses of one name would share memory, so each name belongs
to one place in the code).
"""

from __future__ import annotations

import math
import threading

import numpy as np

__all__ = ["kept", "scratch"]

_local = threading.local()
#: A thread keeps buffers of at most this many float64 (32 MiB); a larger request gets fresh
#: memory that is not kept.
KEEP_AT_MOST = 1 << 22


def scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float64 array of ``shape``, a view of this thread's buffer ``name``.

    Parameters
    ----------
    name : str
        The buffer's name: one per place in the code that uses it.
    shape : tuple of int

    Returns
    -------
    numpy.ndarray
        Valid until the next call with the same ``name`` on this thread; its values are
        whatever was left there. Above ``KEEP_AT_MOST`` elements, a fresh array.
    """
    size = math.prod(shape)
    if size > KEEP_AT_MOST:
        return np.empty(shape)
    return kept(name, size)[:size].reshape(shape)


def kept(name: str, size: int = 1) -> np.ndarray:
    """This thread's whole buffer ``name`` (float64, 1-D), grown to at least ``size`` where
    shorter, for a compiled caller that takes what it needs of it (and says how much it
    needed, so that the next call's buffer fits). Same rules as :func:`scratch`; above
    ``KEEP_AT_MOST`` the buffer is not grown (the caller takes fresh memory)."""
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    buffer = buffers.get(name)
    if buffer is None or buffer.size < min(size, KEEP_AT_MOST):
        buffer = buffers[name] = np.empty(max(min(size, KEEP_AT_MOST), 1))
    return buffer
