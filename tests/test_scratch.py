"""The reusable scratch buffers: one per name and thread, grown on demand."""

from __future__ import annotations

import threading

import numpy as np

from otbound._scratch import scratch


def test_a_name_reuses_its_memory_and_grows():
    first = scratch("test buffer", (3, 4))
    assert first.shape == (3, 4) and first.dtype == np.float64
    again = scratch("test buffer", (2, 5))
    assert np.shares_memory(first, again)  # reused, not a fresh allocation
    larger = scratch("test buffer", (1000,))
    assert larger.shape == (1000,)
    assert not np.shares_memory(first, larger)  # grown: a new buffer
    assert not np.shares_memory(scratch("other buffer", (4,)), scratch("test buffer", (4,)))


def test_each_thread_has_its_own_buffers():
    mine = scratch("test thread buffer", (8,))
    theirs: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: theirs.append(scratch("test thread buffer", (8,))))
    worker.start()
    worker.join()
    assert not np.shares_memory(mine, theirs[0])


def test_a_request_beyond_the_limit_is_fresh_and_not_kept():
    from otbound import _scratch

    small = scratch("test large buffer", (4,))
    large = scratch("test large buffer", (_scratch.KEEP_AT_MOST + 1,))
    assert large.size == _scratch.KEEP_AT_MOST + 1
    assert np.shares_memory(small, scratch("test large buffer", (4,)))  # the kept one stays
