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


def test_keys_crowded_into_one_bucket_take_the_nested_counting_sort():
    """A far outlier stretches the bucket range so that the other keys (with ties) share a
    few buckets larger than the insertion limit: the counting sort inside them is stable too."""
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


def test_keys_crowded_at_every_scale_are_sorted_through_many_rounds():
    """Clusters at scales far apart, each of nearly equal keys with ties: buckets inside
    buckets, several rounds deep, and the same permutation as ``kind="stable"``."""
    rng = np.random.default_rng(7)
    parts = []
    for scale in (1e-300, 1e-100, 1e-5, 1.0, 1e100):
        centre = scale * (1.0 + np.round(rng.random(2_000), 3) * 1e-12)
        parts.append(np.where(rng.random(2_000) < 0.5, centre, -centre))
    key = rng.permutation(np.concatenate(parts))
    assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable"))
