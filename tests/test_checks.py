"""Input validation: every bad input raises ValueError naming the argument and the problem."""

from __future__ import annotations

import re

import numpy as np
import pytest

import otbound as ob
from otbound._checks import as_distribution, as_num_drafts

P = [0.2, 0.3, 0.5]
Q = [0.5, 0.3, 0.2]


def _call(p=P, q=Q, **kwargs):
    return ob.optimal_acceptance(p, q, **kwargs)


@pytest.mark.parametrize(
    ("p", "q", "match"),
    [
        ([np.nan, 0.5, 0.5], Q, r"^p contains NaN at index \(0,\)"),
        (P, [0.5, np.nan, 0.5], r"^q contains NaN at index \(1,\)"),
        ([0.2, np.inf, 0.5], Q, r"^p contains an infinite value at index \(1,\)"),
        (P, [0.5, 0.5, -np.inf], r"^q contains an infinite value at index \(2,\)"),
        ([-0.1, 0.6, 0.5], Q, r"^p has a negative entry -0\.1 at index \(0,\)$"),
        (P, [0.5, 0.6, -0.1], r"^q has a negative entry -0\.1 at index \(2,\)$"),
    ],
)
def test_non_finite_and_negative_entries(p, q, match):
    with pytest.raises(ValueError, match=match):
        _call(p, q)


@pytest.mark.parametrize(
    "logits",
    [[-1.2, 0.3, 2.0], [3.0, 1.0, 0.5], [[0.1, -4.0, 2.5], [1.0, 0.0, -3.0]]],
)
@pytest.mark.parametrize("name", ["p", "q"])
def test_logits_are_recognised(logits, name):
    q = Q if np.ndim(logits) == 1 else [Q, Q]
    p = P if np.ndim(logits) == 1 else [P, P]
    args = {"p": p, "q": q, name: logits}
    with pytest.raises(ValueError, match=rf"^(rows of )?{name}\b.*looks like logits"):
        _call(**args)


def test_rows_must_sum_to_one():
    with pytest.raises(
        ValueError, match=r"rows of p must sum to 1 within 1e-06; .*sums to 0\.9\b.*normalize=True"
    ):
        _call([0.5, 0.3, 0.1], Q)
    with pytest.raises(ValueError, match=r"rows of q must sum to 1 .*sums to 1\.1\b"):
        _call(P, [0.5, 0.3, 0.3])
    # the offending row of a batch is named
    with pytest.raises(ValueError, match=r"rows of p must sum to 1 .*\(1,\).* sums to 0\.9\b"):
        _call([P, [0.5, 0.3, 0.1]], Q)


def test_normalize_rescales_rows():
    fixed = _call([0.5, 0.3, 0.1], Q, normalize=True)
    assert fixed == pytest.approx(_call(np.array([0.5, 0.3, 0.1]) / 0.9, Q), abs=1e-15)
    both = _call([5.0, 3.0, 1.0], [2.0, 2.0, 2.0], n=2, normalize=True)
    assert both == pytest.approx(_call(np.array([5, 3, 1]) / 9, [1 / 3] * 3, n=2), abs=1e-15)
    # rescaling does not make negative entries valid
    with pytest.raises(ValueError, match=r"^p has a negative entry"):
        _call([-1.0, 2.0, 0.5], Q, normalize=True)


def test_sums_within_tolerance_are_accepted():
    off = np.array(P) * (1 + 5e-7)
    assert _call(off, Q) == pytest.approx(_call(P, Q), abs=1e-12)
    with pytest.raises(ValueError, match="rows of p must sum to 1"):
        _call(np.array(P) * (1 + 5e-6), Q)


@pytest.mark.parametrize(
    ("p", "q", "match"),
    [
        ([0.5, 0.5], Q, r"p and q must have the same vocabulary size .*got 2 and 3"),
        (P, [0.25] * 4, r"p and q must have the same vocabulary size .*got 3 and 4"),
        ([P, P], [Q, Q, Q], r"batch shapes of p \(2,\) and q \(3,\) do not broadcast"),
        ([0.0, 0.0, 0.0], Q, r"^p has a row of zeros"),
        ([], [], r"^p has an empty vocabulary"),
        (0.5, Q, r"^p must have at least 1 axis.*got shape \(\)"),
        ("abc", Q, r"^p must be an array of probabilities, got str"),
    ],
)
def test_shapes_and_vocabularies(p, q, match):
    with pytest.raises(ValueError, match=match):
        _call(p, q)


@pytest.mark.parametrize("n", [0, -1, 1.5, 2.0, "2", True, None])
def test_number_of_drafts_must_be_a_positive_integer(n):
    with pytest.raises(ValueError, match=rf"^n must be an integer >= 1, got {re.escape(repr(n))}$"):
        _call(n=n)


def test_numpy_integer_drafts_are_accepted():
    assert as_num_drafts(np.int64(3)) == 3
    assert _call(n=np.int32(2)) == pytest.approx(_call(n=2), abs=0)


@pytest.mark.parametrize("design", ["without_replacement", "conditional_poisson", "greedy"])
def test_more_distinct_drafts_than_the_support(design):
    with pytest.raises(
        ValueError,
        match=rf"n=3 is larger than the support of q \(2 tokens with q > 0\); design '{design}'",
    ):
        _call(P, [0.5, 0.5, 0.0], n=3, design=design)
    with pytest.raises(ValueError, match=r"support of q in row \(1,\) \(1 tokens"):
        _call(P, [Q, [0.0, 1.0, 0.0]], n=2, design=design)
    # the same n is fine when the support is large enough
    assert 0.0 <= _call(P, Q, n=3, design=design) <= 1.0


def test_hub_support_and_number_of_drafts():
    with pytest.raises(ValueError, match=r"n=2 is larger than the support of q .*design 'hub'"):
        _call(P, [1.0, 0.0, 0.0], n=2, design="hub")
    for n in (1, 3):
        with pytest.raises(ValueError, match=rf"design 'hub' is defined for n=2 only, got n={n}"):
            _call(n=n, design="hub")


def test_topk_needs_n_tokens():
    with pytest.raises(ValueError, match=r"n=4 is larger than the vocabulary size V=3"):
        _call(n=4, design="topk")


def test_per_slot_needs_one_row_per_slot():
    with pytest.raises(ValueError, match=r"^q must have at least 2 axis"):
        _call(n=2, design="per_slot")
    with pytest.raises(
        ValueError,
        match=r"design 'per_slot' needs one draft distribution per slot.*n=2, got \(3, 3\)",
    ):
        _call(q=[Q, Q, Q], n=2, design="per_slot")
    assert 0.0 <= _call(q=[Q, P], n=2, design="per_slot") <= 1.0


@pytest.mark.parametrize("design", ["nope", "IID", "without-replacement", 3, None])
def test_unknown_design_lists_the_valid_ones(design):
    valid = ", ".join(ob.DESIGNS)
    with pytest.raises(
        ValueError, match=rf"unknown design {re.escape(repr(design))}; valid designs"
    ):
        _call(design=design)
    with pytest.raises(ValueError) as info:
        _call(design=design)
    assert valid in str(info.value)
    for name in ("iid", "without_replacement", "conditional_poisson", "greedy", "topk", "hub"):
        assert name in str(info.value)


def test_as_distribution_returns_a_clean_copy():
    x = np.array([[1, 1], [1, 3]], dtype=np.int64)
    out = as_distribution(x, "w", normalize=True)
    assert out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.25, 0.75]], rtol=0, atol=1e-16)
    assert x[0, 0] == 1  # the input is not modified
    src = np.array([0.25, 0.75])
    as_distribution(src, "w")[0] = 9.0
    assert src[0] == 0.25
    with pytest.raises(ValueError, match=r"^w contains NaN"):
        as_distribution([np.nan, 1.0], "w")


def test_as_distribution_writes_the_normalised_rows_once_whatever_the_layout():
    """A float64 array is read as it is (C, Fortran or strided) and the result is a new
    C-contiguous array of ``x / x.sum(-1)``, bit for bit as the copy-then-divide path."""
    rng = np.random.default_rng(5)
    base = rng.random((6, 40)) + 1e-3
    for x in (base, np.asfortranarray(base), base[:, ::2], base[::2], base.astype(np.float32)):
        out = as_distribution(x, "w", normalize=True)
        want = np.array(x, dtype=np.float64)
        want /= want.sum(-1)[..., None]
        assert out.flags.c_contiguous and not np.shares_memory(out, x)
        assert np.array_equal(out, want)
