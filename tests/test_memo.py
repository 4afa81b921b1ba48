"""The verifiers' per-step cache (``BaseVerifier._memo``) and the frozen rows it keys on their
objects: it never serves a value built from other values."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import otbound as ob
from otbound.problem import Step, frozen
from otbound.verifiers.base import BaseVerifier, _layout


def _rows(seed: int = 0, vocab: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(vocab), size=2)
    return p, q


def _counting_memo(v: BaseVerifier, p: np.ndarray, q: np.ndarray, builds: list[float]) -> float:
    def build() -> float:
        builds.append(float(np.sum(p * q)) + p.size)
        return builds[-1]

    return v._memo("test", p, q, 2, build)


def test_only_arrays_otbound_froze_are_frozen() -> None:
    step = Step.validate(*_rows())
    assert not frozen(step.p) and not frozen(step.p[1:])
    step.freeze()
    assert frozen(step.p) and frozen(step.p[1:]) and frozen(step.q.reshape(2, 8)[0])
    theirs = np.zeros(4)
    earlier = theirs[:]  # a writable view taken before
    theirs.flags.writeable = False
    assert not frozen(theirs) and not frozen(theirs[1:])  # read-only, but not otbound's
    earlier[0] = 1.0
    borrowed = np.frombuffer(b"\0" * 32, dtype=np.float64)
    assert not borrowed.flags.writeable and not frozen(borrowed)  # memory of a bytes object
    step.p.flags.writeable = True  # its owner may make it writable again
    assert not frozen(step.p) and not frozen(step.p[1:])


def test_writable_rows_changed_in_place_are_never_served_stale() -> None:
    v = ob.get_verifier("rrs")
    p, q = _rows()
    builds: list[float] = []
    first = _counting_memo(v, p, q, builds)
    assert _counting_memo(v, p, q, builds) == first and len(builds) == 1
    assert _counting_memo(v, p.copy(), q.copy(), builds) == first and len(builds) == 1  # equal
    p[[0, 1]] = p[[1, 0]]  # the same object, other values
    assert _counting_memo(v, p, q, builds) == builds[-1] and len(builds) == 2


def test_a_callers_read_only_rows_are_checked_bit_for_bit() -> None:
    """A read-only array with a writable view taken before it was made read-only: the
    cache does not trust the object."""
    v = ob.get_verifier("rrs")
    p, q = _rows()
    writer = p[:]
    p.flags.writeable = False
    q.flags.writeable = False
    builds: list[float] = []
    _counting_memo(v, p, q, builds)
    writer[[0, 1]] = writer[[1, 0]]
    _counting_memo(v, p, q, builds)
    assert len(builds) == 2


def test_frozen_rows_are_known_by_their_objects_without_keeping_them() -> None:
    v = ob.get_verifier("rrs")
    step = Step.validate(*_rows()).freeze()
    builds: list[float] = []
    first = _counting_memo(v, step.p, step.q, builds)
    assert _counting_memo(v, step.p, step.q, builds) == first and len(builds) == 1
    other = Step.validate(step.p.copy(), step.q.copy()).freeze()  # equal values, new objects
    assert _counting_memo(v, other.p, other.q, builds) == first and len(builds) == 2
    entries = list(v.__dict__["_cache"].values())
    assert len(entries) == 2  # one entry per object
    del step, other
    gc.collect()
    assert all(e[0]() is None and e[1]() is None for e in entries)  # weak references only


def test_an_object_that_takes_a_dead_rows_id_is_not_served_its_value() -> None:
    """CPython hands a freed array's id to a later array: an entry whose rows died (its weak
    references dead) under the key the new rows have serves them nothing."""
    v = ob.get_verifier("rrs")
    step = Step.validate(*_rows()).freeze()
    dead = np.zeros(1)
    gone = weakref.ref(dead)
    del dead
    assert gone() is None
    key = ("test", 2, *_layout(step.p), *_layout(step.q))  # the freed rows' key, as it was
    v.__dict__.setdefault("_cache", {})[key] = (gone, gone, -1.0)
    builds: list[float] = []
    assert _counting_memo(v, step.p, step.q, builds) == builds[-1] != -1.0


def test_a_frozen_rows_layout_is_part_of_its_key() -> None:
    v = ob.get_verifier("rrs")
    step = Step.validate(*_rows()).freeze()
    p, q = step.p[:], step.q[:]
    builds: list[float] = []
    _counting_memo(v, p, q, builds)
    p.shape, q.shape = (2, 8), (2, 8)  # the same objects, another shape
    _counting_memo(v, p, q, builds)
    assert len(builds) == 2


def test_compare_gives_its_verifiers_frozen_rows_and_leaves_a_callers_alone() -> None:
    seen: list[bool] = []

    class Spy(BaseVerifier):
        """Records whether its rows are frozen."""

        name = "spy"

        def _acceptance(self, p, q, n):
            seen.append(frozen(p) and frozen(q))
            return 0.5

        def _verify_one(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return int(drafts[0])

        def _verify_batch(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return drafts[:, 0]

    p, q = _rows()
    ob.compare(np.stack([p, q]), np.stack([q, p]), n=2, verifiers=[Spy()], designs=["iid"])
    assert seen == [True, True]
    mine = Step.validate(p, q)
    ob.compare(mine, None, n=2, verifiers=["rrs"], designs=["iid"])
    assert mine.p.flags.writeable and mine.q.flags.writeable  # a caller's step: untouched
    assert p.flags.writeable and q.flags.writeable


def test_a_verifier_cannot_change_the_rows_the_others_read() -> None:
    """Rows whose broadcast needs a copy to flatten (``p`` (2, 1, V) against ``q``
    (2, 3, V)) are read-only too, as the views of every other batch are."""

    class Overwriting(BaseVerifier):
        """A verifier that writes into its rows (a bug)."""

        name = "overwriting"

        def _acceptance(self, p, q, n):
            p[0] = 0.0
            return 0.5

        def _verify_one(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return int(drafts[0])

        def _verify_batch(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return drafts[:, 0]

    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(8), size=(2, 1))
    q = rng.dirichlet(np.ones(8), size=(2, 3))
    with pytest.raises(ValueError, match="read-only"):
        ob.compare(p, q, n=2, verifiers=[Overwriting()], designs=["iid"])
