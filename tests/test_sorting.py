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


def test_keys_crowded_into_one_bucket_take_the_merge_sort_path():
    """A far outlier stretches the bucket range so that the other keys (with ties) share a
    few buckets larger than the insertion limit: the merge sort inside them is stable too."""
    from otbound._sorting import INSERTION_LIMIT

    rng = np.random.default_rng(1)
    key = np.round(rng.random(10_000), 2)
    key[17] = 1e300
    key[4_000] = -1e300
    crowded = np.bincount(np.searchsorted(np.unique(key), key))
    assert crowded.max() > INSERTION_LIMIT
    assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable"))


@pytest.mark.parametrize("seed", range(3))
def test_every_float_class_keeps_numpys_order(seed):
    """Subnormals of both signs, signed zeros, infinities, the extremes of the float range
    and float32 keys: the same permutation as ``kind="stable"``."""
    rng = np.random.default_rng(seed)
    pool = np.array(
        [
            0.0,
            -0.0,
            5e-324,
            -5e-324,
            2.2e-308,
            -2.2e-308,
            1.0,
            -1.0,
            np.inf,
            -np.inf,
            np.finfo(float).max,
            -np.finfo(float).max,
            1e-320,
            3.0,
        ]
    )
    for size in (1, 2, 5, 50, 3_000):
        key = rng.choice(pool, size) * rng.choice([1.0, 1.0, 0.5], size)
        assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable"))
        key32 = rng.standard_normal(size).astype(np.float32)
        assert np.array_equal(stable_argsort(key32), np.argsort(key32, kind="stable"))
