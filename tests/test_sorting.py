"""``otbound._sorting.stable_argsort`` is numpy's stable argsort, element for element."""

from __future__ import annotations

import numpy as np
import pytest

from otbound._sorting import stable_argsort


@pytest.mark.parametrize("seed", range(6))
def test_stable_argsort_is_numpys_stable_argsort(seed):
    """Distinct keys, small integers (long tied runs), signed zeros with infinities, rounded
    normals with -inf: the same permutation as ``kind="stable"``."""
    rng = np.random.default_rng(seed)
    for trial in range(60):
        size = int(rng.integers(0, 3_000)) if trial else 40_000
        kind = trial % 4
        if kind == 0:
            key = rng.random(size) ** 3
        elif kind == 1:
            key = rng.integers(0, 5, size).astype(float)
        elif kind == 2:
            key = np.where(rng.random(size) < 0.5, 0.0, -0.0)
            key[rng.random(size) < 0.2] = np.inf
        else:
            key = np.round(rng.normal(size=size), 1)
            key[rng.random(size) < 0.1] = -np.inf
        got = stable_argsort(key)
        assert got.dtype == np.intp
        assert np.array_equal(got, np.argsort(key, kind="stable")), (seed, trial, kind)


def test_a_default_argsort_that_is_not_stable_is_repaired():
    """Ties that the default argsort leaves out of index order (checked to happen here) come
    back in index order: the repair is what makes the result stable."""
    key = np.repeat(np.arange(50.0), 200)[np.random.default_rng(1).permutation(10_000)]
    assert not np.array_equal(np.argsort(key), np.argsort(key, kind="stable"))
    assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable"))
