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
