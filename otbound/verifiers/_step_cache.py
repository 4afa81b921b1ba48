"""Per-step work that several verifiers (and several calls of one) share, kept across calls.

:func:`otbound.compare` asks for one ``n`` at a time over every step of a batch, so the work a
verifier does on a step's ``(p, q)`` alone (a sort of ``p / q``) comes back once per ``n`` and
per Monte Carlo block (pilot and final), after all the other steps of the batch.

Two kinds of keys: :func:`step_digest` (SHA-256 of the arrays' bytes) where a cached value is
used as it is, and the cheaper :func:`step_key` (CRC-32) where a cached value is checked before
it is used (:func:`ratio_order`) or is only a hint that cannot change a result: a collision of
the cheap key costs time, never a wrong value.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import OrderedDict
from typing import Any

import numba
import numpy as np

from otbound._sorting import ratio_argsort

__all__ = [
    "RATIO_CACHE_BYTES",
    "ByteBudgetCache",
    "compact",
    "ratio_order",
    "step_digest",
    "step_key",
]

#: Most bytes of sort orders :func:`ratio_order` keeps (the newest first): 2,048 steps of
#: ``V = 8,192`` as uint16.
RATIO_CACHE_BYTES = 32 << 20


class ByteBudgetCache:
    """Arrays, or lists of arrays, kept by key under a budget of bytes: the least recently
    used entries go once the total passes ``budget`` (the newest always stays).

    Attributes
    ----------
    budget : int
        Most bytes kept.
    entries : collections.OrderedDict
        The entries, the least recently used first.
    nbytes : int
        Their bytes.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: OrderedDict[object, np.ndarray | list[np.ndarray]] = OrderedDict()
        self.nbytes = 0

    def get(self, key: object) -> Any:
        """The entry of ``key`` (now the most recently used), or ``None``."""
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key: object, value: np.ndarray | list[np.ndarray]) -> None:
        """Keep ``value`` under ``key`` (replacing an entry there), then evict."""
        self.drop(key)
        self.entries[key] = value
        self.grew(_size(value))

    def drop(self, key: object) -> None:
        """Forget the entry of ``key``, if any."""
        old = self.entries.pop(key, None)
        if old is not None:
            self.nbytes -= _size(old)

    def grew(self, extra: int) -> None:
        """Count ``extra`` bytes added to an entry in place (a list appended to), then evict."""
        self.nbytes += extra
        while self.nbytes > self.budget and len(self.entries) > 1:
            _, old = self.entries.popitem(last=False)
            self.nbytes -= _size(old)

    def clear(self) -> None:
        """Forget every entry."""
        self.entries.clear()
        self.nbytes = 0


def _size(value: np.ndarray | list[np.ndarray]) -> int:
    """Bytes of an entry of :class:`ByteBudgetCache`."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    return sum(int(part.nbytes) for part in value)


_ratio_orders = ByteBudgetCache(RATIO_CACHE_BYTES)


def step_digest(p: np.ndarray, q: np.ndarray) -> bytes:
    """A SHA-256 digest of ``p`` and ``q`` (values, dtypes and shapes)."""
    digest = hashlib.sha256()
    digest.update(repr((p.shape, p.dtype.str, q.shape, q.dtype.str)).encode())
    digest.update(np.ascontiguousarray(p).data)
    digest.update(np.ascontiguousarray(q).data)
    return digest.digest()


def step_key(p: np.ndarray, q: np.ndarray) -> tuple[object, ...]:
    """A cheap key of ``p`` and ``q`` (shapes, dtypes, CRC-32 of the bytes): only for caches
    whose values are checked or are hints (module docstring)."""
    p_crc = zlib.crc32(np.ascontiguousarray(p).data)
    q_crc = zlib.crc32(np.ascontiguousarray(q).data)
    return (p.shape, p.dtype.str, q.shape, q.dtype.str, p_crc, q_crc)


def compact(order: np.ndarray, vocab: int) -> np.ndarray:
    """Token ids below ``vocab`` in a small dtype (uint16 up to ``V = 65,536``, else int32)."""
    small: np.ndarray = order.astype(np.uint16 if vocab <= 1 << 16 else np.int32)
    return small


@numba.njit(cache=True)
def _is_ratio_order(p, q, order):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Whether ``order`` lists each token with ``q > 0`` once, by increasing ``p / q`` and
    ties by token id: then it is the stable argsort of the ratios (the only such order)."""
    vocab = q.shape[0]
    count = 0
    for i in range(vocab):
        if q[i] > 0.0:
            count += 1
    if count != order.shape[0]:
        return False
    seen = np.zeros(vocab, dtype=np.bool_)
    prev_ratio = 0.0
    prev_token = -1
    for i in range(order.shape[0]):
        token = order[i]
        if token < 0 or token >= vocab or seen[token] or not q[token] > 0.0:
            return False
        seen[token] = True
        ratio = p[token] / q[token]
        if i > 0 and (ratio < prev_ratio or (ratio == prev_ratio and token < prev_token)):
            return False
        prev_ratio = ratio
        prev_token = token
    return True


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The tokens with ``q > 0`` in increasing ``p / q``, ties by token id (int64).

    ``live[np.argsort(p[live] / q[live], kind="stable")]`` with ``live = flatnonzero(q > 0)``,
    cached across calls on :func:`step_key` (:data:`RATIO_CACHE_BYTES`); a cached order is
    used only after an ``O(V)`` check that it is that argsort.
    """
    key = step_key(p, q)
    hit = _ratio_orders.get(key)
    if hit is not None:
        order: np.ndarray = hit.astype(np.int64)
        if _is_ratio_order(p, q, order):
            return order
    fresh = ratio_argsort(p, q)
    _ratio_orders.put(key, compact(fresh, q.size))  # replaces a stale entry (a collision)
    return fresh
