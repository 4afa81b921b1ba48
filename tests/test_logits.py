"""otbound.softmax: float64 probabilities from logits, temperature 0 as argmax, clear errors."""

import numpy as np
import pytest
from scipy.special import softmax as scipy_softmax

import otbound as ob


def test_matches_scipy_at_several_temperatures() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 50)) * 5
    for temperature in (0.3, 1.0, 2.5):
        expected = scipy_softmax(logits / temperature, axis=-1)
        np.testing.assert_allclose(ob.softmax(logits, temperature), expected, rtol=1e-12)


def test_half_precision_is_upcast() -> None:
    logits = np.array([[0.0, 10.0, -10.0, 20.0]], dtype=np.float16)
    out = ob.softmax(logits)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, scipy_softmax(logits.astype(np.float64), axis=-1), rtol=1e-12)


def test_temperature_zero_is_one_hot_argmax_lowest_id_on_ties() -> None:
    out = ob.softmax([[1.0, 3.0, 3.0], [5.0, -1.0, 0.0]], temperature=0)
    np.testing.assert_array_equal(out, [[0, 1, 0], [1, 0, 0]])


def test_masked_tokens_get_zero() -> None:
    out = ob.softmax([0.0, -np.inf, 0.0])
    np.testing.assert_array_equal(out, [0.5, 0.0, 0.5])


@pytest.mark.parametrize(
    ("logits", "temperature", "match"),
    [
        ([0.0, np.nan], 1.0, "logits contain NaN"),
        ([0.0, np.inf], 1.0, r"\+inf"),
        ([-np.inf, -np.inf], 1.0, "every token is masked"),
        ([0.0, 1.0], -1.0, "temperature must be"),
        ([], 1.0, "V >= 1"),
    ],
)
def test_bad_input(logits: list[float], temperature: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ob.softmax(logits, temperature)


def test_output_is_accepted_by_optimal_acceptance() -> None:
    rng = np.random.default_rng(1)
    p = ob.softmax(rng.normal(size=100))
    q = ob.softmax(rng.normal(size=100))
    tv = 0.5 * np.abs(p - q).sum()
    assert ob.optimal_acceptance(p, q, n=1) == pytest.approx(1 - tv, abs=1e-12)


def test_softmax_in_place_is_softmax_bit_for_bit():
    """The in-place path (checked rows the caller owns) gives :func:`softmax`'s bits, at
    ``T = 1``, another ``T`` and ``T = 0``, with masked tokens; it overwrites its input
    except at ``T = 0``."""
    from otbound.logits import softmax_in_place

    rng = np.random.default_rng(4)
    x = rng.normal(0, 4, (6, 3_000))
    x[0, :100] = -np.inf
    for temperature in (1.0, 0.7, 2.5, 0.0):
        mine = x.copy()
        got = softmax_in_place(mine, temperature)
        assert np.array_equal(got, ob.softmax(x, temperature)), temperature
        assert (got is mine) == (temperature != 0)
