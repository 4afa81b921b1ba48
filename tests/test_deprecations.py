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
