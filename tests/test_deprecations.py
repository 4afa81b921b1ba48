"""Old spellings that keep working for one release: each warns and gives what the new one does."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_drafts_helpers_module_is_the_tokens_module():
    sys.modules.pop("otbound.drafts.helpers", None)
    with pytest.warns(DeprecationWarning, match=r"otbound\.drafts\.tokens"):
        helpers = importlib.import_module("otbound.drafts.helpers")
    tokens = importlib.import_module("otbound.drafts.tokens")
    assert helpers.__all__ == tokens.__all__
    for name in tokens.__all__:
        assert getattr(helpers, name) is getattr(tokens, name), name


@pytest.mark.parametrize(
    "name", ["INTERVAL_DESIGNS", "AcceptanceInterval", "acceptance_interval", "topk_interval"]
)
def test_the_intervals_moved_from_dumps_to_analysis(name):
    import otbound.analysis
    import otbound.dumps

    with pytest.warns(DeprecationWarning, match=rf"otbound\.analysis\.{name}"):
        old = getattr(otbound.dumps, name)
    assert old is getattr(otbound.analysis, name)
    with pytest.warns(DeprecationWarning):  # every use warns: the name is not bound
        getattr(otbound.dumps, name)
    assert name not in otbound.dumps.__all__ and name in otbound.analysis.__all__


def test_an_interval_by_its_old_name_is_the_same():
    import numpy as np

    import otbound.analysis
    import otbound.dumps

    rng = np.random.default_rng(3)
    target, draft = rng.normal(size=(4, 12)), rng.normal(size=(4, 12))
    new = otbound.analysis.acceptance_interval(target, draft, 2)
    with pytest.warns(DeprecationWarning):
        old = otbound.dumps.acceptance_interval(target, draft, 2)
    assert np.array_equal(old.lower, new.lower) and np.array_equal(old.upper, new.upper)


P3, Q3 = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
SUN_P, SUN_Q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
TREE = [[0], [1], [0, 0]]


def _same(old, new):
    """Equal results: floats, arrays, mappings, or result objects compared field by field."""
    import numpy as np

    if hasattr(new, "values") and hasattr(new, "stderr"):  # PositionalAcceptance
        return np.array_equal(old.values, new.values) and old.method == new.method
    if hasattr(new, "p_value"):  # LosslessResult
        return (old.p_value, old.tv_distance, old.trials) == (
            new.p_value,
            new.tv_distance,
            new.trials,
        )
    return old == new


def _old_and_new():
    """Each function of the functional API, called the old way (method first) and the new."""
    import numpy as np

    import otbound as ob
    from otbound import sequence, trees

    rrs_wor = ob.get_verifier("rrs_without_replacement")
    half = np.array([0.5, 0.5])
    return [
        (
            "check_lossless",
            lambda: ob.check_lossless("rrs", P3, Q3, 2, trials=2_000, seed=1),
            lambda: ob.check_lossless(P3, Q3, 2, trials=2_000, seed=1, verifier="rrs"),
        ),
        (
            "block_acceptance",
            lambda: sequence.block_acceptance("block", SUN_P, SUN_Q, 2),
            lambda: sequence.block_acceptance(SUN_P, SUN_Q, 2, verifier="block"),
        ),
        (
            "tree_acceptance",
            lambda: sequence.tree_acceptance("traversal", P3, Q3, TREE),
            lambda: sequence.tree_acceptance(P3, Q3, TREE, verifier="traversal"),
        ),
        (
            "sequence_law",
            lambda: sequence.sequence_law("token", P3, Q3, TREE),
            lambda: sequence.sequence_law(P3, Q3, TREE, verifier="token"),
        ),
        (
            "lossless_gap",
            lambda: sequence.lossless_gap("block", SUN_P, SUN_Q, 2),
            lambda: sequence.lossless_gap(SUN_P, SUN_Q, 2, verifier="block"),
        ),
        (
            "positional_acceptance",
            lambda: trees.positional_acceptance("kseq", P3, Q3, 2),
            lambda: trees.positional_acceptance(P3, Q3, 2, verifier="kseq"),
        ),
        (
            "beam_block_efficiency",
            lambda: trees.beam_block_efficiency(rrs_wor, half, half, 2, 2, 50, 3),
            lambda: trees.beam_block_efficiency(half, half, 2, 2, 50, 3, verifier=rrs_wor),
        ),
    ]


@pytest.mark.parametrize("index", range(7))
def test_the_method_first_order_warns_and_gives_the_same_value(index):
    import warnings

    name, old_call, new_call = _old_and_new()[index]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new order warns about nothing
        new = new_call()
    with pytest.warns(DeprecationWarning, match=rf"{name}\(p, q, \.\.\., verifier=\.\.\.\)"):
        old = old_call()
    assert _same(old, new), name


def test_the_torch_acceptance_old_order_warns_and_gives_the_same_value():
    pytest.importorskip("torch")
    from otbound.verifiers.torch_acceptance import verifier_acceptance_torch

    new = verifier_acceptance_torch(P3, Q3, 2, verifier="rrs")
    with pytest.warns(DeprecationWarning, match="verifier_acceptance_torch"):
        old = verifier_acceptance_torch("rrs", P3, Q3, 2)
    assert float(old) == float(new)


def test_the_method_given_twice_is_refused():
    import otbound as ob

    with pytest.raises(TypeError, match="verifier twice"):
        ob.check_lossless("rrs", P3, Q3, verifier="kseq")


def test_a_verifier_object_first_is_the_old_order():
    import otbound as ob

    v = ob.get_verifier("rrs")
    with pytest.warns(DeprecationWarning):
        old = ob.check_lossless(v, P3, Q3, n=2, trials=1_000, seed=2)
    new = ob.check_lossless(P3, Q3, n=2, trials=1_000, seed=2, verifier=v)
    assert old.p_value == new.p_value


def test_a_sequence_bound_value_is_its_acceptance():
    from otbound.sequence import optimal_block_acceptance

    bound = optimal_block_acceptance(SUN_P, SUN_Q, 2)
    assert bound.acceptance == pytest.approx(12 / 9, abs=1e-9)
    with pytest.warns(DeprecationWarning, match=r"SequenceBound\.acceptance"):
        assert bound.value == bound.acceptance
