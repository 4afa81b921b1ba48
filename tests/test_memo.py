"""The verifiers' per-step cache (``BaseVerifier._memo``) and the read-only rows it keys on
their objects: it never serves a value built from other values."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import otbound as ob
from otbound.problem import Step, read_only
from otbound.verifiers.base import BaseVerifier


def _rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(16), size=2)
    return p, q


def _counting_memo(v: BaseVerifier, p: np.ndarray, q: np.ndarray, builds: list[float]) -> float:
    def build() -> float:
        builds.append(float(p @ q))
        return builds[-1]

    return v._memo("test", p, q, 2, build)


def test_read_only_follows_the_views_down_to_the_owner() -> None:
    a = np.zeros(4)
    assert not read_only(a) and not read_only(a[1:])
    view = a[1:]
    view.flags.writeable = False
    assert not read_only(view)  # its owner still writes
    a.flags.writeable = False
    assert read_only(a) and read_only(a[1:]) and read_only(a.reshape(2, 2)[0])
    borrowed = np.frombuffer(b"\0" * 32, dtype=np.float64)
    assert not borrowed.flags.writeable and not read_only(borrowed)  # memory of a bytes object


def test_writable_rows_changed_in_place_are_never_served_stale() -> None:
    v = ob.get_verifier("rrs")
    p, q = _rows()
    builds: list[float] = []
    first = _counting_memo(v, p, q, builds)
    assert _counting_memo(v, p, q, builds) == first and len(builds) == 1
    assert _counting_memo(v, p.copy(), q.copy(), builds) == first and len(builds) == 1  # equal
    p[[0, 1]] = p[[1, 0]]  # the same object, other values
    assert _counting_memo(v, p, q, builds) == float(p @ q) and len(builds) == 2


def test_read_only_rows_are_known_by_their_objects_without_keeping_them() -> None:
    v = ob.get_verifier("rrs")
    step = Step.validate(*_rows()).freeze()
    builds: list[float] = []
    first = _counting_memo(v, step.p, step.q, builds)
    assert _counting_memo(v, step.p, step.q, builds) == first and len(builds) == 1
    other = Step.validate(step.p.copy(), step.q.copy()).freeze()  # equal values, new objects
    assert _counting_memo(v, other.p, other.q, builds) == first and len(builds) == 2
    entries = list(v.__dict__["_cache"].values())
    del step, other
    gc.collect()
    assert all(e[0]() is None and e[1]() is None for e in entries)  # weak references only


def test_compare_freezes_its_own_copies_only() -> None:
    p, q = _rows()
    mine = Step.validate(p, q)
    ob.compare(mine, None, n=2, verifiers=["rrs"], designs=["iid"])
    assert mine.p.flags.writeable and mine.q.flags.writeable  # a caller's step: untouched
    assert p.flags.writeable and q.flags.writeable

    class Overwriting(BaseVerifier):
        """A verifier that writes into its rows (a bug): compare's rows refuse it."""

        name = "overwriting"

        def _acceptance(self, p, q, n):
            p[0] = 0.0
            return 0.5

        def _verify_one(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return int(drafts[0])

        def _verify_batch(self, drafts, p, q, rng):  # pragma: no cover - not reached
            return drafts[:, 0]

    with pytest.raises(ValueError, match="read-only"):
        ob.compare(p, q, n=2, verifiers=[Overwriting()], designs=["iid"])
